-- One statement applied to each of a list of rcll's routines: how 980-privileges.sql and
-- 990-search-path.sql, which run after every CREATE OR REPLACE, treat every routine they select.

CREATE OR REPLACE FUNCTION rcll._alter_each_routine(command text, routines regprocedure[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    routine regprocedure;
BEGIN
    -- Schema-qualified: this runs before 990-search-path.sql has pinned its own search_path.
    FOREACH routine IN ARRAY routines LOOP
        EXECUTE pg_catalog.format(command, routine);
    END LOOP;
    RETURN pg_catalog.cardinality(routines);
END
$$;
COMMENT ON FUNCTION rcll._alter_each_routine(text, regprocedure[])
    IS 'Internal, for the install scripts: run command (a format() string whose %s is the routine''s signature) for each of routines; returns how many.';
