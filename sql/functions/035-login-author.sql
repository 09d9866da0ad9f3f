-- The author of a one-person client (the CLI): resolved from the connection the database authenticated.

CREATE OR REPLACE FUNCTION rcll.login_agent(configured text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    agent text := rcll.current_agent();
BEGIN
    -- A role mapped in rcll.identities writes as its agent, whatever is configured (and an
    -- rcll.agent the identity server already set for this transaction stands).
    IF agent IS NOT NULL THEN
        RETURN agent;
    END IF;
    -- A role trusted to name agents (a member of rcll_identity_server; superusers, such as the
    -- embedded database's postgres, are members): the identity the process was configured with,
    -- else the login role itself.
    IF to_regrole('rcll_identity_server') IS NOT NULL
       AND pg_has_role(session_user, 'rcll_identity_server', 'MEMBER') THEN
        RETURN coalesce(nullif(btrim(configured), ''), session_user::text);
    END IF;
    -- Any other role: only rcll.identities makes its name an author (the database cannot tell a
    -- person's login from an account many agents share), so none.
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll.login_agent(text) IS 'The identity a client that is one person''s own connection (the CLI) writes as, for it to set as rcll.agent: the role''s agent in rcll.identities; for a member of rcll_identity_server the configured identity, else the login role''s name; NULL for an unmapped role outside rcll_identity_server. Not for a server that serves many callers over one role: those set the agent they authenticated.';
