-- Run-once: rcll_agent, the role a DBA grants to an agent's login role; what rcll_reader and
-- rcll_agent may touch; and bank isolation's switch kept as a row, so that a restore brings it back.

-- Roles are cluster-wide and many databases may install rcll, some at the same moment: create the
-- role only if no other database has, and treat losing that race as success (as 006 does).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rcll_agent') THEN
        CREATE ROLE rcll_agent NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- An agent reads what a reader reads (SELECT on the tables, EXECUTE granted to rcll_reader).
DO $$
BEGIN
    IF NOT pg_catalog.pg_has_role('rcll_agent', 'rcll_reader', 'MEMBER') THEN
        GRANT rcll_reader TO rcll_agent;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- What the agent's verbs write as the agent (retain, facts, entities, links, state, merge
-- proposals, moves, observations, the LLM ledger, audit rows) - and nothing else. The lexical
-- copies, room registry and counts are kept by the owner's triggers; banks, grants, identities,
-- classifier rules and BM25 statistics are the administrator's. No DELETE: no agent verb deletes.
-- Audit rows can be added, never changed.
GRANT INSERT, UPDATE ON rcll.memory_units, rcll.documents, rcll.entities, rcll.entity_aliases, rcll.links
    TO rcll_agent;
GRANT INSERT ON rcll.unit_entities, rcll.room_state, rcll.room_merge_proposals, rcll.llm_calls, rcll.audit_log
    TO rcll_agent;
-- A proposed merge holds the from-room provisional until a person decides (its status only).
GRANT UPDATE (status) ON rcll.rooms TO rcll_agent;

-- Who writes as whom is nobody's business but the owner's and rcll.current_agent()'s (a definer).
REVOKE ALL ON rcll.identities FROM rcll_reader;

-- A role sees its own grants (those of the roles it is a member of), not everyone's: a reader's
-- export of a bank carries only those. Writing them stays the owner's (rcll.grant_bank).
ALTER TABLE rcll.bank_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_grants ON rcll.bank_grants FOR SELECT
    USING (pg_catalog.pg_has_role(current_user, pg_catalog.to_regrole(pg_catalog.quote_ident(role_name)), 'MEMBER'));

CREATE TABLE rcll.bank_isolation_state (
    enabled      boolean PRIMARY KEY DEFAULT true CHECK (enabled),
    enabled_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.bank_isolation_state IS 'Whether bank isolation is on: one row when it is, none when it is off. A row, not only the tables'' row-level security, because pg_dump keeps rows of an extension''s tables but not their row-level security: restoring this row turns isolation back on (trigger bank_isolation_applied).';
COMMENT ON COLUMN rcll.bank_isolation_state.enabled IS 'Always true: the key of the one row.';
COMMENT ON COLUMN rcll.bank_isolation_state.enabled_at IS 'When bank isolation was turned on.';

-- A store upgraded with isolation on keeps it on.
INSERT INTO rcll.bank_isolation_state (enabled)
SELECT true WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
                          WHERE p.polname = 'bank_isolation' AND c.relnamespace = 'rcll'::regnamespace);

-- Marked for pg_dump (010-dump-with-pg-dump.sql).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.bank_isolation_state', '');
    END IF;
END
$$;

-- A recall's author filter (authors, mine) matches what the server resolved; a self-declared
-- author - anyone may write author => 'alice' - counts only when the caller asks for it.
ALTER TYPE rcll.recall_scope ADD ATTRIBUTE include_self_declared boolean;
COMMENT ON COLUMN rcll.recall_scope.include_self_declared IS 'Whether units whose author was self-declared (tag author-source:self_declared) pass an author filter (authors, mine); false: only server-resolved authors do.';
