-- Authors: who wrote a unit, resolved by the server, never taken from the caller when the server knows.

CREATE OR REPLACE FUNCTION rcll.current_agent()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- A role mapped in rcll.identities always writes as its agent. Otherwise the RCLL server, which
    -- authenticated the caller, may set rcll.agent for the transaction - honoured only when the
    -- session's role is a member of rcll_identity_server, so a psql user cannot forge it.
    SELECT coalesce(
        (SELECT i.agent FROM rcll.identities i WHERE i.role_name = session_user),
        CASE WHEN nullif(current_setting('rcll.agent', true), '') IS NOT NULL
                  AND EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'rcll_identity_server')
                  AND pg_has_role(session_user, 'rcll_identity_server', 'MEMBER')
             THEN current_setting('rcll.agent', true) END)
$$;
COMMENT ON FUNCTION rcll.current_agent() IS 'The agent identity the server resolved for this session or transaction, or NULL: a role mapped in rcll.identities, else rcll.agent set by a member of rcll_identity_server.';

CREATE OR REPLACE FUNCTION rcll._resolve_author(claimed text, OUT author text, OUT author_source text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    author := rcll.current_agent();
    IF author IS NOT NULL THEN
        author_source := 'server';             -- a claimed author is discarded
    ELSIF nullif(btrim(claimed), '') IS NOT NULL THEN
        author := btrim(claimed);
        author_source := 'self_declared';
    ELSE
        author_source := 'none';
        RAISE WARNING 'author: no identity for this write; stored without an author'
            USING HINT = 'Map the role in rcll.identities, or have the RCLL server authenticate the caller.';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._resolve_author(text) IS 'Internal: the author of a write and how it was resolved (server, self_declared, none). Never falls back to the connection''s role name.';
