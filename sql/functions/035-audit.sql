-- Audit: who is acting, for the rows rcll.audit_log keeps.

CREATE OR REPLACE FUNCTION rcll._actor()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(rcll.current_agent(), 'role:' || session_user)
$$;
COMMENT ON FUNCTION rcll._actor() IS 'Internal: who is acting, for audit rows: the resolved agent, else role:<session role> (audit only; never used as an author).';
