-- The author of a one-person client (the CLI): resolved from the connection the database authenticated.

CREATE OR REPLACE FUNCTION rcll.login_agent(configured text DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
AS $$
    -- A role mapped in rcll.identities writes as its agent, whatever is configured (and an
    -- rcll.agent the identity server already set for this transaction stands). A role trusted to
    -- name agents (a member of rcll_identity_server; superusers, such as the embedded database's
    -- postgres, are members): the identity the process was configured with, else the login role
    -- itself. Any other role: only rcll.identities makes its name an author (the database cannot
    -- tell a person's login from an account many agents share), so none.
    SELECT coalesce(rcll.current_agent(),
                    CASE WHEN rcll._identity_server() THEN coalesce(nullif(btrim(configured), ''), session_user::text) END)
$$;
COMMENT ON FUNCTION rcll.login_agent(text) IS 'The identity a client that is one person''s own connection (the CLI) writes as, for it to set as rcll.agent: the role''s agent in rcll.identities; for a member of rcll_identity_server the configured identity, else the login role''s name; NULL for an unmapped role outside rcll_identity_server. Not for a server that serves many callers over one role: those set the agent they authenticated.';
