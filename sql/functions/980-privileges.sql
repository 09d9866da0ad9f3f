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
                            'disable_bank_isolation', '_bank_isolation', '_apply_bank_isolation',
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
