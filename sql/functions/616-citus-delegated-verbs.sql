-- Every bank-scoped verb delegated whole on a Citus cluster: the *_in_bank twins, made from their
-- functions' own signatures.
--
-- Citus delegates a call by an argument of the distribution column's type (610-citus-delegation.sql),
-- so each delegated verb has a twin taking the bank's id first. A twin is always the same few lines:
-- its function's parameters after bank_id, a check that the id is the bank's the call names (by
-- name: rcll._bank_id_is; by a resolved scope: rcll._scope_in_bank), what the client's transaction
-- would have set taken as arguments (615-citus-delegated-writes.sql), and the call itself with every
-- argument by name. rcll._make_in_bank_twin writes them from the catalog, so that a twin cannot drift
-- from its function and no parameter list is written twice; rcll._in_bank_twins() is the list, and
-- rcll._citus_delegate() marks each twin as a distributed function.

CREATE OR REPLACE FUNCTION rcll.export_stream(bank text)
RETURNS TABLE (table_name text, row_data jsonb)
LANGUAGE plpgsql STABLE
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
SET IntervalStyle = 'postgres'
SET extra_float_digits = 1
SET bytea_output = 'hex'
AS $$
DECLARE
    b integer := rcll._bank_id(export_stream.bank);
    t text;
BEGIN
    -- One call, one snapshot: the largest ids first (no table), then every exported table's rows
    -- in the canonical order, as rcll.export_rows prints them (its print settings, SET above: a
    -- call of rcll.export_rows itself, VOLATILE, would read each table from a snapshot of its own
    -- under READ COMMITTED, the delegated call's isolation; a STABLE function reads them all from
    -- its caller's). Materialised by the function (past work_mem on disk); rcll.export_cursor
    -- streams one table with bounded memory instead.
    RETURN QUERY SELECT NULL::text, rcll.export_max_ids(export_stream.bank);
    FOR t IN SELECT e.table_name FROM rcll.export_tables() e ORDER BY e.table_position LOOP
        RETURN QUERY EXECUTE format('SELECT %L::text, q.row FROM (%s) q', t, rcll._export_query(b, t));
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll.export_stream(text)
    IS 'A whole bank''s export in one call: first a row with table_name NULL and the largest ids (rcll.export_max_ids), then each table of rcll.export_tables() in order with its rows as rcll.export_rows gives them (canonical order and print settings). What rcll.export_stream_in_bank runs on the bank''s worker on a Citus cluster.';

CREATE OR REPLACE FUNCTION rcll._in_bank_twins()
RETURNS TABLE (base regprocedure, carries text[])
LANGUAGE sql STABLE
AS $$
    -- Each delegated function, and what its twin carries of the client's transaction (agent:
    -- rcll.agent, the identity a write records; expires_at: rcll.expires_at, a retain's expiry).
    -- By name: each has one signature (an overload would make the cast fail, loudly). Import and
    -- restore have no twin: docs/scaling.md, "Where each verb runs". Nor has rcll.correct: its
    -- audit row goes to a reference table, a copy on every node, and a delegated call runs in a
    -- backend Citus opened for it, which keeps no connection to the other nodes past its
    -- transaction (connection_management.c, ShouldShutdownConnection): each correction opened new
    -- ones (slower than routing it: bench.citus_delegation, docs/benchmarks.md), and it needs every node either way.
    SELECT t.base::regproc::regprocedure, t.carries::text[] FROM (VALUES
        ('rcll.recall', '{}'),
        ('rcll.recall_candidates', '{}'),
        ('rcll.retain_chunks', '{agent,expires_at}'),
        ('rcll.retain_facts', '{agent,expires_at}'),
        ('rcll.record_llm_calls', '{}'),
        ('rcll.forget', '{agent}'),
        ('rcll.put_state', '{agent}'),
        ('rcll.get_state', '{}'),
        ('rcll.get_states', '{}'),
        ('rcll.state_history', '{}'),
        ('rcll.state_keys', '{}'),
        ('rcll.forget_state', '{agent}'),
        ('rcll.export_stream', '{}')
    ) AS t(base, carries)
$$;
COMMENT ON FUNCTION rcll._in_bank_twins() IS 'Internal: the functions that have a *_in_bank twin (rcll._make_in_bank_twin), each with what the twin carries of the client''s transaction as arguments (agent, expires_at).';

CREATE OR REPLACE FUNCTION rcll._make_in_bank_twin(base regprocedure, carries text[] DEFAULT '{}')
RETURNS regprocedure
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    f       pg_catalog.pg_proc%ROWTYPE;
    twin    text;
    a       record;
    pin     text;
    args    text[] := '{}';
    extra   text := '';
    sets    text := '';
    call    text;
    wanted  text;
    old     regprocedure;
    made    regprocedure;
BEGIN
    SELECT * INTO f FROM pg_catalog.pg_proc p WHERE p.oid = base;
    twin := f.proname || '_in_bank';
    -- The inputs by name, in order; the bank is named (bank text) or carried by a resolved scope.
    FOR a IN
        SELECT x.name, x.type FROM unnest(coalesce(f.proargmodes, array_fill('i'::"char", ARRAY[f.pronargs])),
                                          f.proargnames, coalesce(f.proallargtypes, f.proargtypes::oid[])) AS x(mode, name, type)
        WHERE x.mode IN ('i', 'b', 'v')
    LOOP
        IF a.name IN ('bank_id', 'agent', 'expires_at') THEN
            RAISE EXCEPTION 'base: % already takes %, which its twin adds', base, a.name USING ERRCODE = 'RC001', COLUMN = 'base',
                HINT = 'Rename that parameter of the function, or leave the function out of rcll._in_bank_twins().';
        ELSIF a.name = 'bank' AND a.type = 'text'::regtype THEN
            pin := format('PERFORM rcll._bank_id_is(%I.bank_id, %I.bank);', twin, twin);
            args := args || format('bank => %I.bank', twin);
        ELSIF a.name = 'scope' AND a.type = 'rcll.recall_scope'::regtype THEN
            pin := '';
            args := args || format('scope => rcll._scope_in_bank(%I.bank_id, %I.scope)', twin, twin);
        ELSE
            args := args || format('%I => %I.%I', a.name, twin, a.name);
        END IF;
    END LOOP;
    IF pin IS NULL THEN
        RAISE EXCEPTION 'base: % takes no bank (bank text) nor scope (rcll.recall_scope)', base
            USING ERRCODE = 'RC001', COLUMN = 'base', HINT = 'Only a bank-scoped function has a twin delegated by the bank''s id.';
    END IF;
    -- What the client's transaction would have set, written as pg_get_function_arguments prints it
    -- (so that an unchanged twin compares equal below).
    IF 'agent' = ANY (carries) THEN
        extra := extra || ', agent text DEFAULT NULL::text';
        sets := sets || format(E'\n    PERFORM rcll._set_for_transaction(''rcll.agent'', %I.agent);', twin);
    END IF;
    IF 'expires_at' = ANY (carries) THEN
        extra := extra || ', expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone';
        sets := sets || format(E'\n    PERFORM rcll._set_for_transaction(''rcll.expires_at'', %I.expires_at::text);', twin);
    END IF;
    call := format('rcll.%I(%s)', f.proname, array_to_string(args, ', '));
    wanted := 'bank_id integer, ' || pg_catalog.pg_get_function_arguments(base) || extra;
    -- CREATE OR REPLACE cannot change a function's parameters or result: a twin of an older
    -- signature goes first (with what Citus recorded of it; rcll._citus_delegate marks it again).
    FOR old IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'rcll'::regnamespace AND p.proname = twin
          AND (pg_catalog.pg_get_function_arguments(p.oid) <> wanted
               OR pg_catalog.pg_get_function_result(p.oid) <> pg_catalog.pg_get_function_result(base))
    LOOP
        EXECUTE format('DROP FUNCTION %s', old);
    END LOOP;
    EXECUTE format(E'CREATE OR REPLACE FUNCTION rcll.%I(%s)\nRETURNS %s\nLANGUAGE plpgsql %s\nAS $twin$\nBEGIN\n    %s%s\n    %s;\nEND\n$twin$',
                   twin, wanted, pg_catalog.pg_get_function_result(base),
                   CASE WHEN f.provolatile = 'v' OR sets <> '' THEN 'VOLATILE' ELSE 'STABLE' END,
                   pin, sets,
                   CASE WHEN f.proretset THEN 'RETURN QUERY SELECT * FROM ' || call ELSE 'RETURN ' || call END);
    SELECT p.oid::regprocedure INTO made FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'rcll'::regnamespace AND p.proname = twin AND pg_catalog.pg_get_function_arguments(p.oid) = wanted;
    EXECUTE format('COMMENT ON FUNCTION %s IS %L', made, format(
        '%s with the bank''s id first, the one argument Citus can delegate by: on a Citus cluster, sent as its own '
        'statement outside a transaction block, the whole call runs on the worker holding the bank.%s On one node it '
        'is %s. RC001 when the id is not the %s. Made from %s''s signature by rcll._make_in_bank_twin.',
        'rcll.' || f.proname, CASE WHEN carries = '{}' THEN '' ELSE format(
            ' %s: what a client would set for its transaction (%s); the worker''s transaction is the call''s own.',
            array_to_string(carries, ', '),
            array_to_string(ARRAY(SELECT 'rcll.' || c FROM unnest(carries) c), ', ')) END,
        'rcll.' || f.proname, CASE WHEN pin = '' THEN 'scope''s bank' ELSE 'named bank''s' END, 'rcll.' || f.proname));
    RETURN made;
END
$$;
COMMENT ON FUNCTION rcll._make_in_bank_twin(regprocedure, text[])
    IS 'Internal, for the install scripts: (re)make the *_in_bank twin of a bank-scoped function from its signature (its parameters after bank_id integer, the same result; the id checked against the bank it names or the scope it passes, RC001; carries: agent and/or expires_at, set for the twin''s transaction as rcll.agent and rcll.expires_at), dropping a twin of an older signature. Returns the twin.';

SELECT rcll._make_in_bank_twin(t.base, t.carries) FROM rcll._in_bank_twins() t;
