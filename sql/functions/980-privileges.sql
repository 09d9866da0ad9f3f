-- Who may execute what. Functions are executable by PUBLIC when created, which is harmless for a
-- SECURITY INVOKER function (it runs with the caller's table privileges) but not for a SECURITY
-- DEFINER one (it runs as the owner, past row-level security and every grant): this file runs
-- after every CREATE OR REPLACE, on CREATE EXTENSION, extension updates and `rcll install` alike,
-- and takes EXECUTE away from PUBLIC on every definer function of the schema - a new one is the
-- owner's alone until a line below grants it - and on the administrator's verbs, whose writes
-- the table privileges already refuse to anyone else, and the install scripts' own helper
-- (rcll._alter_each_routine). tests/test_roles.py holds the result.
SELECT rcll._alter_each_routine('REVOKE ALL ON FUNCTION %s FROM PUBLIC', ARRAY(
    SELECT p.oid::regprocedure
    FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'rcll'::regnamespace
      AND (p.prosecdef
           OR p.proname IN ('create_bank', 'grant_bank', 'revoke_bank', 'enable_bank_isolation',
                            'disable_bank_isolation', '_bank_isolation', '_apply_bank_isolation', '_set_bank_isolation',
                            'enable_in_database_models', 'disable_in_database_models',
                            'refresh_bank_stats', 'link_keyless_entities', '_alter_each_routine'))));

-- The definer functions a role needs, and only those. Trigger functions (the lexical copies,
-- room counts, the room janitor) need no grant: a trigger fires whoever writes the row.
-- rcll.fold_room_counts() is upkeep, the owner's (rcll serve runs it as the owner).
-- The resolved identity: every writer's author trigger, recall's `mine`, the CLI's login_agent.
GRANT EXECUTE ON FUNCTION rcll.current_agent() TO rcll_reader, rcll_agent, rcll_identity_server;
-- Bank isolation's policies call it as the querying role.
GRANT EXECUTE ON FUNCTION rcll._visible_banks(name) TO rcll_reader, rcll_agent;
-- retain_chunks links the chunks it wrote to their keyless entities.
GRANT EXECUTE ON FUNCTION rcll._link_written_keyless_entities(integer, bigint[]) TO rcll_agent;
-- Recall's model phases reach the model service as the owner (its user mapping holds the password).
GRANT EXECUTE ON FUNCTION rcll._model_service_ask(text, text, text[], double precision, text[], jsonb) TO rcll_reader, rcll_agent;
-- An agent forgets from its own banks: rcll._actable_bank applies its bank isolation (by
-- session_user) inside, and refuses a role that may not write. Dropping a bank stays the owner's.
GRANT EXECUTE ON FUNCTION rcll.forget(text, bigint[], bigint[], text, text, text, text, timestamptz, timestamptz,
                                      timestamptz, timestamptz, text, boolean, text, integer) TO rcll_agent;
GRANT EXECUTE ON FUNCTION rcll.forget_state(text, text, text, boolean, boolean, text) TO rcll_agent;

-- On a Citus cluster a role's INSERT into a distributed table reaches the shard with the identity
-- column's value drawn there by a call to nextval on the sequence (Citus deparses the identity's
-- NextValueExpr as nextval(...): deparser/ruleutils_18.c), which checks USAGE on the worker's copy
-- of the sequence; on one node INSERT on the table is enough. So wherever Citus is installed,
-- USAGE on the identity sequences of the tables rcll_agent may insert into, on the coordinator
-- and on every worker. Citus carries neither this GRANT (such a sequence is no distributed object
-- of its own) nor the coordinator's grants when it makes the workers' copies at distribution: it
-- is sent to each worker, once its copy is committed there (run_command_on_workers runs outside
-- this transaction). The installer commits the distribution before it runs these files again
-- when its connection is in autocommit, as `rcll install`'s and the server's are; an install held
-- in one transaction grants on the workers at the next install.
DO $$
DECLARE
    s regclass;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    FOR s IN
        SELECT d.objid::regclass FROM pg_catalog.pg_depend d
        JOIN pg_catalog.pg_class c ON c.oid = d.objid AND c.relkind = 'S'
        WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'i'
          AND c.relnamespace = 'rcll'::regnamespace
          AND pg_catalog.has_table_privilege('rcll_agent', d.refobjid, 'INSERT')
    LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %s TO rcll_agent', s);
        IF rcll._bank_pinned() THEN
            PERFORM rcll._on_every_worker(pg_catalog.format(
                'DO $d$ BEGIN IF pg_catalog.to_regclass(%L) IS NOT NULL THEN GRANT USAGE ON SEQUENCE %s TO rcll_agent; END IF; END $d$',
                s::text, s));
        END IF;
    END LOOP;
END
$$;
