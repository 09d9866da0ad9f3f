-- Run-once: pg_dump keeps every memory of an extension install.
--
-- pg_dump leaves out the rows of the tables an extension created unless the extension marks
-- them with pg_extension_config_dump; it then dumps them (and the marked sequences' values, so
-- identities continue after a restore) after the CREATE EXTENSION that rebuilds the schema.
-- That function only works inside CREATE/ALTER EXTENSION. Under `rcll install` there is no
-- extension and pg_dump dumps the tables like any other, so there this block does nothing.
--
-- Every table is marked, and every sequence (the identity columns' ones), except
-- rcll.migrations, whose rows the extension script writes itself. The rows the install seeds are
-- left out (CREATE EXTENSION writes them again; dumped too they would collide): the thirteen
-- room rules and the disabled general rule (rule_id 1-14, written by migration 005 right after
-- the table was created, in every install) and the layers of the nine standard halls. A changed
-- seed row (the general rule enabled, a standard hall moved to another layer) is therefore not
-- in the dump: re-apply such changes after a restore (docs/backup.md).
DO $$
DECLARE
    rel regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        RETURN;
    END IF;
    FOR rel IN SELECT c.oid::regclass FROM pg_catalog.pg_class c
               WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p', 'S')
                 AND c.relname <> 'migrations'
               ORDER BY c.relname
    LOOP
        PERFORM pg_catalog.pg_extension_config_dump(rel, CASE rel
            WHEN 'rcll.room_rules'::regclass THEN 'WHERE rule_id > 14'
            WHEN 'rcll.layer_rules'::regclass THEN
                'WHERE hall NOT IN (''rule'', ''procedure'', ''decision'', ''event'', ''preference'', '
                '''warning'', ''discovery'', ''fact'', ''observation'')'
            ELSE '' END);
    END LOOP;
END
$$;
