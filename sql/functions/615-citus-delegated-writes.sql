-- Delegated writes on a Citus cluster: what the twins that write (616-citus-delegated-verbs.sql) use
-- to run whole on the worker holding the bank.
--
-- As the recall twins (610-citus-delegation.sql): Citus delegates a call by an argument of the
-- distribution column's type, so each twin takes the bank's id first, beside the bank's name the
-- public function takes, and refuses the two when they disagree (RC001, rcll._bank_id_is). Sent by the client as its
-- own top-level statement, outside a transaction block, the call is one statement on the worker:
-- without delegation the coordinator routes each statement of the function to the worker apart.
-- What a client sets for its transaction before a write cannot reach the worker (the delegated
-- call runs in a transaction of its own there), so the twins take it as arguments and set it for
-- their own transaction: agent, the identity rcll.agent names (honoured exactly as that setting
-- is: only for a member of rcll_identity_server, rcll.current_agent), and a retain's expires_at
-- (rcll.expires_at, read by the units' expiry trigger).

CREATE OR REPLACE FUNCTION rcll._bank_id_is(bank_id integer, bank text)
RETURNS integer
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    b integer := rcll._bank_id(_bank_id_is.bank);
BEGIN
    IF b IS DISTINCT FROM _bank_id_is.bank_id THEN
        RAISE EXCEPTION 'bank_id: % is not bank %''s id (%)', _bank_id_is.bank_id, _bank_id_is.bank, b
            USING ERRCODE = 'RC001', COLUMN = 'bank_id',
                  HINT = 'Pass the id of the bank you name: SELECT rcll._bank_id(<bank>).';
    END IF;
    RETURN b;
END
$$;
COMMENT ON FUNCTION rcll._bank_id_is(integer, text) IS 'Internal: the bank''s id, when bank_id is the named bank''s (the *_in_bank write twins are delegated by bank_id and write by name: the two must agree); RC001 otherwise, RC002 for an unknown bank.';

CREATE OR REPLACE FUNCTION rcll._set_for_transaction(name text, value text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    -- Only a value given: NULL leaves what the transaction has (on one node, what the client set).
    SELECT CASE WHEN value IS NULL THEN NULL ELSE pg_catalog.set_config(name, value, true) END
$$;
COMMENT ON FUNCTION rcll._set_for_transaction(text, text) IS 'Internal: set a setting for the transaction when a value is given (the delegated twins carry a client''s rcll.agent and rcll.expires_at to the worker).';
