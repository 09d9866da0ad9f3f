-- Delegated writes on a Citus cluster: a retain and a forget run whole on the worker holding the bank.
--
-- As the recall twins (610-citus-delegation.sql): Citus delegates a call by an argument of the
-- distribution column's type, so each twin takes the bank's id first, beside the bank's name the
-- public function takes, and refuses the two when they disagree (RC001). Sent by the client as its
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

CREATE OR REPLACE FUNCTION rcll.retain_chunks_in_bank(
    bank_id     integer,
    bank        text,
    content     text,
    chunks      text[],
    embeddings  vector[],
    source      text DEFAULT NULL,
    occurred_at timestamptz DEFAULT NULL,
    room        text DEFAULT NULL,
    thread      text DEFAULT NULL,
    tags        text[] DEFAULT '{}',
    hall        text DEFAULT NULL,
    layer       text DEFAULT NULL,
    metadata    jsonb DEFAULT '{}',
    via         text DEFAULT 'sql',
    author      text DEFAULT NULL,
    extraction_error text DEFAULT NULL,
    llm_calls   jsonb DEFAULT '[]',
    agent       text DEFAULT NULL,
    expires_at  timestamptz DEFAULT NULL)
RETURNS TABLE (document_id bigint, unit_ids bigint[], created boolean)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM rcll._bank_id_is(retain_chunks_in_bank.bank_id, retain_chunks_in_bank.bank);
    PERFORM rcll._set_for_transaction('rcll.agent', retain_chunks_in_bank.agent);
    PERFORM rcll._set_for_transaction('rcll.expires_at', retain_chunks_in_bank.expires_at::text);
    RETURN QUERY SELECT * FROM rcll.retain_chunks(
        bank => retain_chunks_in_bank.bank, content => retain_chunks_in_bank.content,
        chunks => retain_chunks_in_bank.chunks, embeddings => retain_chunks_in_bank.embeddings,
        source => retain_chunks_in_bank.source, occurred_at => retain_chunks_in_bank.occurred_at,
        room => retain_chunks_in_bank.room, thread => retain_chunks_in_bank.thread, tags => retain_chunks_in_bank.tags,
        hall => retain_chunks_in_bank.hall, layer => retain_chunks_in_bank.layer,
        metadata => retain_chunks_in_bank.metadata, via => retain_chunks_in_bank.via,
        author => retain_chunks_in_bank.author, extraction_error => retain_chunks_in_bank.extraction_error,
        llm_calls => retain_chunks_in_bank.llm_calls);
END
$$;
COMMENT ON FUNCTION rcll.retain_chunks_in_bank(integer, text, text, text[], vector[], text, timestamptz, text, text, text[], text, text, jsonb, text, text, text, jsonb, text, timestamptz)
    IS 'rcll.retain_chunks with the bank''s id first, the one argument Citus can delegate by: on a Citus cluster, SELECT * FROM rcll.retain_chunks_in_bank(<id>, <bank>, ...) sent as its own statement outside a transaction block writes the whole document on the worker holding the bank. agent and expires_at: what a client would set as rcll.agent and rcll.expires_at for its transaction (the worker''s is the call''s own). On one node it is rcll.retain_chunks. RC001 when the id is not the bank''s.';

CREATE OR REPLACE FUNCTION rcll.forget_in_bank(
    bank_id       integer,
    bank          text,
    unit_ids      bigint[] DEFAULT NULL,
    document_ids  bigint[] DEFAULT NULL,
    thread        text DEFAULT NULL,
    author        text DEFAULT NULL,
    tag           text DEFAULT NULL,
    room          text DEFAULT NULL,
    occurred_from timestamptz DEFAULT NULL,
    occurred_to   timestamptz DEFAULT NULL,
    retained_from timestamptz DEFAULT NULL,
    retained_to   timestamptz DEFAULT NULL,
    everything    text DEFAULT NULL,
    dry_run       boolean DEFAULT true,
    reason        text DEFAULT NULL,
    batch         integer DEFAULT NULL,
    agent         text DEFAULT NULL)
RETURNS TABLE (kind text, count bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM rcll._bank_id_is(forget_in_bank.bank_id, forget_in_bank.bank);
    PERFORM rcll._set_for_transaction('rcll.agent', forget_in_bank.agent);
    RETURN QUERY SELECT * FROM rcll.forget(
        bank => forget_in_bank.bank, unit_ids => forget_in_bank.unit_ids, document_ids => forget_in_bank.document_ids,
        thread => forget_in_bank.thread, author => forget_in_bank.author, tag => forget_in_bank.tag,
        room => forget_in_bank.room, occurred_from => forget_in_bank.occurred_from,
        occurred_to => forget_in_bank.occurred_to, retained_from => forget_in_bank.retained_from,
        retained_to => forget_in_bank.retained_to, everything => forget_in_bank.everything,
        dry_run => forget_in_bank.dry_run, reason => forget_in_bank.reason, batch => forget_in_bank.batch);
END
$$;
COMMENT ON FUNCTION rcll.forget_in_bank(integer, text, bigint[], bigint[], text, text, text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, boolean, text, integer, text)
    IS 'rcll.forget with the bank''s id first, the one argument Citus can delegate by: on a Citus cluster, sent as its own statement outside a transaction block, the whole forget (the units, everything derived, its log) runs on the worker holding the bank. agent: what a client would set as rcll.agent (who forget_log names). On one node it is rcll.forget, with its privileges (rcll_agent''s). RC001 when the id is not the bank''s.';
