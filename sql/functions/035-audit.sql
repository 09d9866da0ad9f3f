-- Audit: who is acting, for the rows rcll.audit_log keeps.

CREATE OR REPLACE FUNCTION rcll._actor()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(rcll.current_agent(), 'role:' || session_user)
$$;
COMMENT ON FUNCTION rcll._actor() IS 'Internal: who is acting, for audit rows: the resolved agent, else role:<session role> (audit only; never used as an author).';

CREATE OR REPLACE FUNCTION rcll._audit(bank_id integer, action text, target jsonb, detail jsonb DEFAULT '{}',
                                       actor text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO rcll.audit_log (bank_id, actor, action, target, detail)
    VALUES (_audit.bank_id, coalesce(_audit.actor, rcll._actor()), _audit.action, _audit.target, _audit.detail)
    RETURNING audit_id
$$;
COMMENT ON FUNCTION rcll._audit(integer, text, jsonb, jsonb, text) IS 'Internal: the one way an action is recorded in rcll.audit_log (bank_id NULL: database-wide); the actor is rcll._actor() unless a job or the server names one (system:consolidate, person:<name>). Returns the audit_id.';

CREATE OR REPLACE FUNCTION rcll._audit_reason(reason text, action text, hint text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF nullif(btrim(reason), '') IS NULL THEN
        RAISE EXCEPTION 'reason: a % needs a reason', action USING ERRCODE = 'RC001', COLUMN = 'reason', HINT = hint;
    END IF;
    RETURN btrim(reason);
END
$$;
COMMENT ON FUNCTION rcll._audit_reason(text, text, text) IS 'Internal: the reason a person or agent gave for an audited action (a room move, a merge proposal), trimmed, or an error naming the action and the fix (hint).';
