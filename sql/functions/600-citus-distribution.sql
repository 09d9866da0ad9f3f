-- Citus distribution: every bank-keyed table sharded by bank_id, co-located; the global tables copied to every node.
--
-- Run on a Citus coordinator after the normal install (rcll install --citus, rcll.citus). A bank's rows
-- then live whole in one shard group on one worker, so each per-bank statement and each join between
-- bank tables runs there. Citus enforces a primary key, unique constraint or foreign key between
-- distributed tables only when it contains the distribution column, so the keys that lack bank_id
-- gain it in front, under the same constraint name (ON CONFLICT ON CONSTRAINT keeps working; the ids
-- stay unique cluster-wide: they come from one identity sequence per table, on the coordinator, and on
-- a worker from its own range of it, as Citus splits bigint identities by node). A SET NULL foreign
-- key names its own column, so that bank_id is not nulled with it.

CREATE OR REPLACE FUNCTION rcll._citus_reference_tables()
RETURNS SETOF regclass
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Small, global, read by every bank's statements (grants by isolation, rules by the janitor,
    -- banks by every name lookup), so copied to every node. audit_log holds database-wide rows
    -- (bank_id NULL: imports, isolation switches) that no shard could take.
    SELECT c.oid::regclass FROM pg_class c
    WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p')
      AND (c.relname IN ('banks', 'bank_grants', 'audit_log')
           OR NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'bank_id' AND NOT a.attisdropped))
    ORDER BY c.relname <> 'banks', c.relname
$$;
COMMENT ON FUNCTION rcll._citus_reference_tables() IS 'Internal: the rcll tables Citus copies to every node (banks first: the others refer to it): the ones without bank_id, plus banks, bank_grants and audit_log.';

CREATE OR REPLACE FUNCTION rcll._citus_bank_tables()
RETURNS SETOF regclass
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- The bank tables (rcll._bank_tables, in name order) that are not copied to every node;
    -- memory_units first: it is the co-location group every other bank table joins.
    SELECT b.t FROM rcll._bank_tables() WITH ORDINALITY AS b(t, n)
    WHERE b.t NOT IN (SELECT rcll._citus_reference_tables())
    ORDER BY b.t <> 'rcll.memory_units'::regclass, b.n
$$;
COMMENT ON FUNCTION rcll._citus_bank_tables() IS 'Internal: the rcll tables Citus distributes by bank_id, co-located with memory_units (found when called: a table added later with a bank_id is covered).';

CREATE OR REPLACE FUNCTION rcll.distribute_by_bank()
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t regclass;
    k record;
    fks jsonb := '[]';
    fk jsonb;
    banked boolean;
    skipped text[] := '{}';
    done integer := 0;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'dsn: this database has no Citus extension' USING ERRCODE = 'RC001', COLUMN = 'dsn',
            HINT = 'Run it on a Citus coordinator (CREATE EXTENSION citus; citus_add_node for each worker).';
    END IF;
    IF NOT pg_catalog.citus_is_coordinator() THEN
        RAISE EXCEPTION 'dsn: this node is not the Citus coordinator' USING ERRCODE = 'RC001', COLUMN = 'dsn',
            HINT = 'Connect to the coordinator (the node where citus_add_node registered the workers).';
    END IF;
    IF EXISTS (SELECT FROM pg_dist_partition p WHERE p.logicalrelid = 'rcll.memory_units'::regclass) THEN
        RETURN format('already distributed by bank; %s function(s) delegated', rcll._citus_delegate());
    END IF;
    -- CREATE EXTENSION rcll on a coordinator is run on every worker too (Citus propagates it), and
    -- Citus then takes each worker's own copy of an extension's table as the table's shell there
    -- instead of making one: the keys widened and the foreign keys and triggers set aside below
    -- would change the coordinator's tables only, and Citus's ALTER TABLE on the workers' copies
    -- fails (tried: "constraint audit_log_bank_id_fkey for relation audit_log already exists").
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'rcll') THEN
        RAISE EXCEPTION 'dsn: rcll is installed here as an extension, whose tables Citus copies to every worker by itself'
            USING ERRCODE = 'RC001', COLUMN = 'dsn',
                  HINT = 'On a Citus cluster install rcll with `rcll install` (its SQL files, no CREATE EXTENSION): docs/scaling.md, "Upgrades on a cluster".';
    END IF;
    -- Bank isolation on: its one-node policies (a subquery, which Citus refuses in a policy on a
    -- distributed table) are set aside here and made again in the cluster's shape at the end.
    -- The switch (rcll.bank_isolation_state) stays on throughout: this is one transaction.
    PERFORM rcll._set_bank_isolation(false) WHERE EXISTS (SELECT FROM rcll.bank_isolation_state);
    -- Triggers on the shards write other tables of the same bank (the lexicon, room counts), which
    -- Citus allows only when told the triggers are safe: they are (same bank, same shard group).
    PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

    -- 1. The foreign keys between rcll tables, kept to be made again once every table is placed.
    FOR k IN
        SELECT x.conname, x.conrelid::regclass AS tab, x.confrelid::regclass AS ref, x.confdeltype, x.confupdtype,
               (SELECT string_agg(format('%I', a.attname), ', ' ORDER BY o.n)
                FROM unnest(x.conkey) WITH ORDINALITY o(attnum, n)
                JOIN pg_attribute a ON a.attrelid = x.conrelid AND a.attnum = o.attnum) AS local,
               (SELECT string_agg(format('%I', a.attname), ', ' ORDER BY o.n)
                FROM unnest(x.confkey) WITH ORDINALITY o(attnum, n)
                JOIN pg_attribute a ON a.attrelid = x.confrelid AND a.attnum = o.attnum) AS remote
        FROM pg_constraint x
        WHERE x.contype = 'f' AND x.connamespace = 'rcll'::regnamespace
        ORDER BY x.conname
    LOOP
        fks := fks || jsonb_build_object('name', k.conname, 'tab', k.tab::text, 'ref', k.ref::text,
                                         'local', k.local, 'remote', k.remote,
                                         'del', k.confdeltype, 'upd', k.confupdtype);
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', k.tab, k.conname);
    END LOOP;

    -- 1b. The triggers: Citus copies a table's triggers to each shard while the table is being
    -- distributed, when the workers do not know the table yet, and several name it in their WHEN
    -- clause ('rcll.memory_units'::regclass). Dropped here; the re-runnable files that define them
    -- make them again on the distributed tables (rcll.citus runs the install once more after this).
    FOR k IN
        SELECT g.tgname, g.tgrelid::regclass AS tab FROM pg_trigger g
        JOIN pg_class c ON c.oid = g.tgrelid
        WHERE c.relnamespace = 'rcll'::regnamespace AND NOT g.tgisinternal
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', k.tgname, k.tab);
    END LOOP;

    -- 2. Keys of bank tables without bank_id: widened with it in front, same name.
    FOR k IN
        SELECT x.conname, x.conrelid::regclass AS tab, x.contype,
               (SELECT string_agg(format('%I', a.attname), ', ' ORDER BY o.n)
                FROM unnest(x.conkey) WITH ORDINALITY o(attnum, n)
                JOIN pg_attribute a ON a.attrelid = x.conrelid AND a.attnum = o.attnum) AS cols
        FROM pg_constraint x
        WHERE x.contype IN ('p', 'u') AND x.conrelid IN (SELECT rcll._citus_bank_tables())
          AND NOT EXISTS (SELECT FROM unnest(x.conkey) c(attnum) JOIN pg_attribute a
                          ON a.attrelid = x.conrelid AND a.attnum = c.attnum WHERE a.attname = 'bank_id')
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I, ADD CONSTRAINT %I %s (bank_id, %s)', k.tab, k.conname,
                       k.conname, CASE k.contype WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END, k.cols);
    END LOOP;

    -- 3. Place every table.
    FOR t IN SELECT rcll._citus_reference_tables() LOOP
        PERFORM pg_catalog.create_reference_table(t);
        done := done + 1;
    END LOOP;
    FOR t IN SELECT rcll._citus_bank_tables() LOOP
        PERFORM pg_catalog.create_distributed_table(t, 'bank_id',
            colocate_with => CASE WHEN t = 'rcll.memory_units'::regclass THEN 'none' ELSE 'rcll.memory_units' END);
        done := done + 1;
    END LOOP;

    -- 4. The foreign keys again: to a reference table as before; between bank tables with bank_id
    -- on both sides.
    FOR fk IN SELECT * FROM jsonb_array_elements(fks) LOOP
        banked := fk->>'local' <> 'bank_id' AND (fk->>'ref')::regclass IN (SELECT rcll._citus_bank_tables());
        -- Citus refuses ON DELETE SET NULL on a key that holds the distribution column (even with
        -- the column named): memory_units.superseded_by and llm_calls.document_id are left without
        -- their foreign key on a cluster (docs/scaling.md); every delete path of rcll clears them first.
        IF banked AND fk->>'del' = 'n' THEN
            skipped := skipped || (fk->>'name');
            CONTINUE;
        END IF;
        banked := fk->>'local' <> 'bank_id' AND (fk->>'ref')::regclass IN (SELECT rcll._citus_bank_tables());
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I FOREIGN KEY (%s%s) REFERENCES %s (%s%s)%s%s',
                       fk->>'tab', fk->>'name', CASE WHEN banked THEN 'bank_id, ' ELSE '' END, fk->>'local',
                       fk->>'ref', CASE WHEN banked THEN 'bank_id, ' ELSE '' END, fk->>'remote',
                       CASE fk->>'del' WHEN 'c' THEN ' ON DELETE CASCADE'
                                       WHEN 'n' THEN format(' ON DELETE SET NULL (%s)', fk->>'local')
                                       WHEN 'r' THEN ' ON DELETE RESTRICT' ELSE '' END,
                       -- nor ON UPDATE CASCADE (unit_lexicon's): ids never change, and a row's bank cannot
                       -- change on a cluster (Citus refuses updates of the distribution column).
                       CASE WHEN fk->>'upd' = 'c' AND NOT banked THEN ' ON UPDATE CASCADE' ELSE '' END);
    END LOOP;
    -- 5. Triggers on distributed tables, on every node (an upgrade makes them again).
    PERFORM pg_catalog.run_command_on_all_nodes(
        format('ALTER DATABASE %I SET citus.enable_unsafe_triggers = on', current_database()));
    -- 6. Bank isolation again, when on: made from the coordinator, so Citus carries the policies
    -- to every shard.
    PERFORM rcll._apply_bank_isolation() WHERE EXISTS (SELECT FROM rcll.bank_isolation_state);
    RETURN format('distributed by bank: %s tables placed, %s foreign keys made again, not made: %s; %s function(s) delegated',
                  done, jsonb_array_length(fks) - cardinality(skipped), coalesce(array_to_string(skipped, ', '), ''),
                  rcll._citus_delegate());
END
$$;
COMMENT ON FUNCTION rcll.distribute_by_bank() IS 'On a Citus coordinator, after the install: shard every bank-keyed table by bank_id (co-located with memory_units, so a bank lives whole on one worker), make the global tables reference tables, widen the keys and foreign keys between bank tables with bank_id. Idempotent: says so when already done. RC001 (field dsn) where Citus is missing or this is not the coordinator.';
