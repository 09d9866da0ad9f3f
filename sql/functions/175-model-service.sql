-- The model service: rcll.recall's query embedding, cross-encoder and token counts from one process
-- outside the database (rcll serve, or rcll models), reached through dblink - no plpython3u.

CREATE OR REPLACE FUNCTION rcll.model_service()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- The foreign server's host and port are not secret (its password lives in a user mapping).
    SELECT coalesce((SELECT o.option_value FROM pg_catalog.pg_options_to_table(s.srvoptions) o WHERE o.option_name = 'host'), '')
           || ':' || coalesce((SELECT o.option_value FROM pg_catalog.pg_options_to_table(s.srvoptions) o WHERE o.option_name = 'port'), '')
    FROM pg_catalog.pg_foreign_server s
    WHERE s.srvname = 'rcll_models'
      AND to_regprocedure('public.dblink_send_query(text,text)') IS NOT NULL
$$;
COMMENT ON FUNCTION rcll.model_service() IS 'Where rcll.recall reaches its model service (host or socket directory, then port), as registered by rcll.use_model_service; NULL when none is (or dblink is missing).';

CREATE OR REPLACE FUNCTION rcll._model_source()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- The service first: one copy of the models and one work queue for every backend; the
    -- in-database models (plpython3u) where no service is registered.
    SELECT CASE WHEN rcll.model_service() IS NOT NULL THEN 'service'
                WHEN rcll.in_database_models() THEN 'in-database' END
$$;
COMMENT ON FUNCTION rcll._model_source() IS 'Internal: where rcll.recall''s model phases run - ''service'' (rcll.use_model_service), ''in-database'' (rcll.enable_in_database_models), or NULL (the caller passes the query embedding; no rerank).';

CREATE OR REPLACE FUNCTION rcll._model_service_ask(
    op          text,
    query       text,
    texts       text[],
    deadline_ms double precision,
    OUT answer  text[],
    OUT failure text,
    count_texts text[] DEFAULT NULL,
    options     jsonb DEFAULT NULL)
LANGUAGE plpgsql STABLE SECURITY DEFINER
AS $$
DECLARE
    conn    constant text := 'rcll_models';
    started constant timestamptz := statement_timestamp();
    -- How long this statement waits for the service: until its deadline and a little for the
    -- answer to arrive (the service stops reading, and the budget cut counting, at the deadline it
    -- is given), else rcll.model_service_timeout_ms (default 10 s). A token count alone (op count,
    -- a few ms of tokenizer) gets 100 ms once sent.
    budget  double precision := CASE WHEN op = 'count' AND _model_service_ask.deadline_ms IS NULL THEN 100
                                     ELSE coalesce(_model_service_ask.deadline_ms + 10,
                                                   nullif(current_setting('rcll.model_service_timeout_ms', true), '')::double precision,
                                                   10000) END;
    until   timestamptz;
    -- When a request was given up on (its deadline passed): the connection keeps waiting for its
    -- answer rather than being closed - see below.
    pending text := nullif(current_setting('rcll.model_service_pending', true), '');
    request text;
    detail  text;
    code    text;
    pause   double precision := 0.0005;
    timed_out boolean;
BEGIN
    -- One failure per statement is enough: the rest of its model phases are skipped at once.
    IF rcll._model_service_gave_up() THEN
        RETURN;
    END IF;
    request := pg_catalog.json_build_object('op', op, 'query', query, 'texts', texts,
                                            'deadline_ms', deadline_ms,
                                            'started', extract(epoch FROM started),
                                            'count', count_texts)::text;
    IF options IS NOT NULL THEN
        request := (request::jsonb || options)::text;     -- an op's own fields (cut: budget, limit)
    END IF;
    BEGIN
        -- One connection per backend, kept for its next recalls (dblink's named connections live
        -- as long as the session). Connecting reads the foreign server and this function's owner's
        -- user mapping, so callers need neither.
        IF NOT conn = ANY (coalesce(public.dblink_get_connections(), '{}')) THEN
            PERFORM set_config('rcll.model_service_pending', '', false);
            BEGIN
                PERFORM public.dblink_connect(conn, 'rcll_models');
            EXCEPTION WHEN query_canceled THEN
                -- On PostgreSQL 16 and later dblink's connect ignores connect_timeout: a service
                -- that accepts and never answers holds it until statement_timeout (or a cancel).
                -- That timeout ends the wait for the service, not the recall; a cancel still
                -- cancels.
                -- Which cancel this was, its message says (PostgreSQL's English). Translated
                -- (lc_messages), the timeout's is the one that comes once statement_timeout has
                -- passed since the statement's first protocol message: now() outside a transaction
                -- block. Not since statement_timestamp(): Bind and Execute reset that, while the
                -- timer runs from Parse - a fresh backend's planning made a timeout look early.
                -- (statement_timeout reads back with its unit: '1500ms', '2s'; '0' is none.)
                timed_out := CASE SQLERRM
                                 WHEN 'canceling statement due to statement timeout' THEN true
                                 WHEN 'canceling statement due to user request' THEN false
                                 ELSE coalesce(nullif(current_setting('statement_timeout'), '0')::interval
                                               <= clock_timestamp() - now(), false) END;
                IF NOT timed_out THEN
                    RAISE;
                END IF;
                failure := format('did not answer the connection within statement_timeout (%s)', current_setting('statement_timeout'));
                PERFORM set_config('rcll.model_service_failed', started::text, false);
                RETURN;
            END;
        ELSE
            -- An earlier statement gave up on its request (rcll.model_service_pending says when;
            -- a rolled-back transaction may have lost that, so the connection itself is asked).
            -- Still unanswered: the service is stuck or far behind, and this statement does
            -- without it at once.
            IF public.dblink_is_busy(conn) = 1 THEN
                failure := CASE WHEN pending IS NULL THEN 'has not answered an earlier request yet'
                                ELSE format('has not answered a request sent %s ms ago',
                                            round(1000 * extract(epoch FROM clock_timestamp() - pending::timestamptz))) END;
                PERFORM set_config('rcll.model_service_failed', started::text, false);
                RETURN;
            END IF;
            -- Answered since (or nothing left: then both reads return at once, with no rows):
            -- read that late answer (or its error) and the end of it, and the connection is free.
            PERFORM set_config('rcll.model_service_pending', '', false);
            BEGIN
                PERFORM FROM public.dblink_get_result(conn) AS t(a text);
            EXCEPTION WHEN OTHERS THEN
                IF SQLSTATE LIKE '08%' THEN
                    RAISE;                   -- the connection is gone: closed below, next time afresh
                END IF;
            END;
            PERFORM FROM public.dblink_get_result(conn) AS t(a text);
        END IF;
        until := CASE WHEN op = 'count' AND _model_service_ask.deadline_ms IS NULL THEN clock_timestamp()
                      ELSE started END + budget * interval '1 ms';
        -- Never read an answer that is not this request's: a request that was not sent is a failure.
        IF public.dblink_send_query(conn, request) <> 1 THEN
            failure := 'could not be sent the request (dblink''s NOTICE says why)';
            PERFORM public.dblink_disconnect(conn);
            PERFORM set_config('rcll.model_service_failed', started::text, false);
            RETURN;
        END IF;
        WHILE public.dblink_is_busy(conn) = 1 LOOP
            IF clock_timestamp() >= until THEN
                -- The connection stays open, its answer unread: closing it would make the next
                -- recall connect afresh, and on PostgreSQL 16 and later dblink's connect waits for
                -- a service that accepts but never answers without any timeout. The next request
                -- on this connection reads the late answer first, or, still unanswered, skips.
                PERFORM set_config('rcll.model_service_pending', clock_timestamp()::text, false);
                failure := format('did not answer within %s ms', round(budget));
                PERFORM set_config('rcll.model_service_failed', started::text, false);
                RETURN;
            END IF;
            -- Short sleeps while the answer is due soon (an embedding: a few ms), longer ones
            -- while a rerank reads (hundreds of ms): each poll is a wake-up of this backend.
            PERFORM pg_sleep(least(pause, greatest(extract(epoch FROM until - clock_timestamp()), 0)));
            pause := least(pause * 1.5, 0.004);
        END LOOP;
        SELECT array_agg(t.a) INTO answer FROM public.dblink_get_result(conn) AS t(a text);
        PERFORM FROM public.dblink_get_result(conn) AS t(a text);      -- the end of the request's results
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, code = RETURNED_SQLSTATE;
        answer := NULL;
        -- dblink's message is generic ("could not establish connection"); libpq's reason is the detail.
        failure := SQLERRM || coalesce(': ' || nullif(regexp_replace(detail, '\s+', ' ', 'g'), ''), '');
        PERFORM set_config('rcll.model_service_failed', started::text, false);
        -- An error the service answered (a deadline passed in its queue) leaves the connection
        -- usable once the end of that answer is read; a broken connection is closed.
        IF conn = ANY (coalesce(public.dblink_get_connections(), '{}')) THEN
            BEGIN
                IF code LIKE '08%' OR public.dblink_is_busy(conn) = 1 THEN
                    PERFORM public.dblink_disconnect(conn);
                ELSE
                    PERFORM FROM public.dblink_get_result(conn) AS t(a text);
                END IF;
            EXCEPTION WHEN OTHERS THEN
                PERFORM public.dblink_disconnect(conn);
            END;
            PERFORM set_config('rcll.model_service_pending', '', false);
        END IF;
    END;
END
$$;
-- STABLE as recall is: it writes nothing in the database (its volatile calls are dblink's, the
-- clock, pg_sleep and session settings: tests/test_recall_readonly.py), and its answer for the same
-- texts is the same within a statement. EXECUTE: rcll_reader and rcll_agent (980-privileges.sql).

CREATE OR REPLACE FUNCTION rcll._model_service_gave_up()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(current_setting('rcll.model_service_failed', true) = statement_timestamp()::text, false)
$$;
COMMENT ON FUNCTION rcll._model_service_gave_up()
    IS 'Internal: whether a request of this statement to the model service failed (its NOTICE said why): the statement''s later model phases are skipped without another NOTICE.';

CREATE OR REPLACE FUNCTION rcll._model_service_answer(
    op          text,
    query       text,
    texts       text[],
    deadline_ms double precision,
    skipped     text,
    hint        text,
    count_texts text[] DEFAULT NULL,
    options     jsonb DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    answer  text[];
    failure text;
BEGIN
    -- A role that recalls without rcll_reader's or rcll_agent's grants gets a NOTICE, not an error.
    IF NOT has_function_privilege('rcll._model_service_ask(text,text,text[],double precision,text[],jsonb)', 'EXECUTE') THEN
        failure := format('is not this role''s to use (%s lacks EXECUTE on rcll._model_service_ask: GRANT rcll_reader TO %s)',
                          current_user, current_user);
    ELSE
        SELECT a.answer, a.failure INTO answer, failure
        FROM rcll._model_service_ask(op, query, texts, deadline_ms, count_texts, options) a;
    END IF;
    IF answer IS NULL AND failure IS NOT NULL THEN
        IF hint IS NULL THEN
            RAISE NOTICE 'recall: the model service (%) %: %', rcll.model_service(), failure, skipped;
        ELSE
            RAISE NOTICE 'recall: the model service (%) %: %', rcll.model_service(), failure, skipped USING HINT = hint;
        END IF;
    END IF;
    RETURN answer;
END
$$;
COMMENT ON FUNCTION rcll._model_service_answer(text, text, text[], double precision, text, text, text[], jsonb)
    IS 'Internal: the answer of rcll._model_service_ask for the roles that may use it; NULL when the service does not answer (or this role lacks the grant), with a NOTICE that says why, what recall does instead (skipped) and hint (NULL: none) - none when an earlier request of this statement failed.';

COMMENT ON FUNCTION rcll._model_service_ask(text, text, text[], double precision, text[], jsonb)
    IS 'Internal: one request to the model service (op embed, rerank, first_view, cut or count over texts - a rerank with count_texts counts their tokens too, a second row; options: the op''s own fields; deadline_ms counted from the statement''s start) through dblink, as the rcll schema''s owner (its user mapping holds the password). Waits at most until the deadline (or rcll.model_service_timeout_ms), polling; then leaves the request unanswered on an open connection, which the backend''s next request reads first (or, still unanswered, skips the service at once) - it never connects again to a service that stopped answering. answer: the service''s rows; on failure answer is NULL and failure says why (NULL too when an earlier request of this statement failed). Never raises.';

CREATE OR REPLACE FUNCTION rcll._model_embed_texts(texts text[], deadline_ms double precision, skipped text)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF rcll._model_source() = 'in-database' THEN
        RETURN ARRAY(SELECT rcll._model_embed_query(t.x)::text FROM unnest(_model_embed_texts.texts) WITH ORDINALITY AS t(x, i) ORDER BY t.i);
    END IF;
    -- One request for all: the service embeds each text alone, in one model slot, as
    -- rcll.recall.recall embeds the query and the query without its entities.
    RETURN rcll._model_service_answer('embed', NULL, _model_embed_texts.texts, _model_embed_texts.deadline_ms, skipped,
        'Start it (rcll serve, or rcll models), or check SELECT rcll.model_service(); recall answers from the other channels meanwhile.');
END
$$;
COMMENT ON FUNCTION rcll._model_embed_texts(text[], double precision, text)
    IS 'Internal: the bge-small query embeddings of texts (each embedded alone; vector literals, in order), in one request to the model service (or from the in-database models); NULL when the service does not answer in time, with a NOTICE that says why and what recall skips (skipped).';

CREATE OR REPLACE FUNCTION rcll._model_embed(query text, deadline_ms double precision, skipped text)
RETURNS vector
LANGUAGE sql STABLE
AS $$
    SELECT (rcll._model_embed_texts(ARRAY[_model_embed.query], _model_embed.deadline_ms, _model_embed.skipped))[1]::public.vector
$$;
COMMENT ON FUNCTION rcll._model_embed(text, double precision, text)
    IS 'Internal: the bge-small query embedding from the model service (or the in-database models); NULL when the service does not answer in time, with a NOTICE that says why and what recall skips (skipped).';

CREATE OR REPLACE FUNCTION rcll._model_rerank_counted(query text, passages text[], count_texts text[],
                                                      deadline_ms double precision,
                                                      OUT scores real[], OUT tokens integer[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF rcll._model_source() = 'in-database' THEN
        scores := CASE WHEN deadline_ms IS NULL THEN rcll._model_rerank(query, passages)
                       ELSE rcll._model_rerank_until(query, passages, deadline_ms, extract(epoch FROM statement_timestamp())) END;
        tokens := CASE WHEN count_texts IS NOT NULL THEN rcll._model_count_tokens(count_texts) END;
        RETURN;
    END IF;
    -- The token counts ride with the rerank: one round trip, and none left to wait for after the
    -- cross-encoder has spent the deadline.
    SELECT s.answer[1]::real[], s.answer[2]::integer[] INTO scores, tokens
    FROM (SELECT rcll._model_service_answer('rerank', query, passages, deadline_ms, 'the rerank is skipped',
              'Start it (rcll serve, or rcll models), or allow a longer deadline_ms; the candidates keep their fused order.', count_texts) AS answer) s;
END
$$;
COMMENT ON FUNCTION rcll._model_rerank_counted(text, text[], text[], double precision)
    IS 'Internal: rcll._model_rerank_scores and rcll._model_token_counts of count_texts (NULL: no counts) in one request to the model service (or from the in-database models); both NULL when the service does not answer (a NOTICE says why).';

CREATE OR REPLACE FUNCTION rcll._model_first_view(query text, texts text[], deadline_ms double precision,
                                                  OUT scores real[], OUT trimmed boolean[])
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    windowed text[];
BEGIN
    -- Recall's first view of its top candidates, read as the client reads them: each by its most
    -- query-relevant window, the fused prefix whose pairs fit the budget of words. Which prefix and
    -- which windows is rcll.passages.first_view's to say - one definition, in Python, where the
    -- models are (the service, or plpython3u) - not a copy here: its words, sentences and case
    -- folding are Python's, which PostgreSQL's regular expressions and lower() do not match on
    -- every text (non-ASCII spaces and letters).
    IF rcll._model_source() = 'in-database' THEN
        IF to_regprocedure('rcll._model_windows(text,text[])') IS NULL THEN
            RAISE NOTICE 'recall: the in-database models were enabled before recall read long facts by their windows: they are read whole'
                USING HINT = 'A superuser can run SELECT rcll.enable_in_database_models(...) again.';
            windowed := texts;
            SELECT array_agg(false) INTO trimmed FROM unnest(texts);
        ELSE
            SELECT w.passages, w.trimmed INTO windowed, trimmed FROM rcll._model_windows(query, texts) w;
        END IF;
        scores := CASE WHEN deadline_ms IS NULL THEN rcll._model_rerank(query, windowed)
                       ELSE rcll._model_rerank_until(query, windowed, deadline_ms, extract(epoch FROM statement_timestamp())) END;
        RETURN;
    END IF;
    SELECT s.answer[1]::real[], s.answer[2]::boolean[] INTO scores, trimmed
    FROM (SELECT rcll._model_service_answer('first_view', query, texts, deadline_ms, 'the rerank is skipped',
              'Start it (rcll serve, or rcll models), or allow a longer deadline_ms; the candidates keep their fused order.') AS answer) s;
END
$$;
COMMENT ON FUNCTION rcll._model_first_view(text, text[], double precision)
    IS 'Internal: recall''s first view of its top candidates (texts, in fused order) from the model service or the in-database models: rcll.passages.first_view says what the cross-encoder reads (each text''s most query-relevant window, the prefix whose pairs fit its budget of words); scores are the logits of the prefix read (with deadline_ms, while time was left), trimmed says which of the prefix the window cut (its length is the first view''s depth). Both NULL when the service does not answer (a NOTICE says why).';

CREATE OR REPLACE FUNCTION rcll._model_rerank_scores(query text, passages text[], deadline_ms double precision)
RETURNS real[]
LANGUAGE sql STABLE
AS $$
    SELECT (rcll._model_rerank_counted(_model_rerank_scores.query, _model_rerank_scores.passages, NULL,
                                       _model_rerank_scores.deadline_ms)).scores
$$;
COMMENT ON FUNCTION rcll._model_rerank_scores(text, text[], double precision)
    IS 'Internal: cross-encoder logits of (query, passage) pairs in input order - with deadline_ms (from the statement''s start) only the prefix read while time was left - from the model service (or the in-database models); NULL when the service does not answer (a NOTICE says why).';

CREATE OR REPLACE FUNCTION rcll._model_cut(texts text[], budget integer, "limit" integer,
                                           deadline_ms double precision, OUT keep integer[], OUT tokens integer[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Recall's budget cut over texts in their final order, by rcll.budget.cut_counting where the
    -- models are: the client's own rule, counting only the texts the cut must look at (a long text
    -- that cannot fit what is left of the budget is never counted); past deadline_ms (from the
    -- statement's start) the rest are estimated. keep: the positions kept (1-based, in order);
    -- tokens: theirs. Both NULL when the service does not answer (a NOTICE says why).
    IF rcll._model_source() = 'in-database' THEN
        IF to_regprocedure('rcll._model_cut_counting(text[],integer,integer,double precision,double precision)') IS NULL THEN
            -- enabled before this cut: every text counted, then cut (the same facts)
            SELECT k.keep, k.kept_tokens INTO keep, tokens
            FROM rcll._cut_to_budget(rcll._model_count_tokens(texts), budget, "limit") k;
        ELSE
            SELECT k.keep, k.kept_tokens INTO keep, tokens
            FROM rcll._model_cut_counting(texts, budget, "limit", deadline_ms, extract(epoch FROM statement_timestamp())) k;
        END IF;
        RETURN;
    END IF;
    SELECT s.answer[1]::integer[], s.answer[2]::integer[] INTO keep, tokens
    FROM (SELECT rcll._model_service_answer('cut', NULL, texts, deadline_ms, 'the token budget is estimated', NULL, NULL,
                                            jsonb_build_object('budget', budget, 'limit', "limit")) AS answer) s;
END
$$;
COMMENT ON FUNCTION rcll._model_cut(text[], integer, integer, double precision)
    IS 'Internal: recall''s token-budget cut over texts in final order, from the model service or the in-database models (rcll.budget.cut_counting: the same facts as counting every text, counting only those the cut must look at; past deadline_ms, from the statement''s start, the rest estimated): keep, the positions kept (1-based, in order), and their bge wordpiece counts; both NULL when the service does not answer (a NOTICE says why).';

CREATE OR REPLACE FUNCTION rcll._on_every_worker(command text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    failed text;
BEGIN
    -- A command for each node alone (Citus would refuse DDL on a worker, to propagate it itself).
    -- run_command_on_workers reports a failure per worker instead of raising: raised here.
    EXECUTE 'SELECT string_agg(format(''%s:%s: %s'', r.nodename, r.nodeport, r.result), ''; '')
             FROM pg_catalog.run_command_on_workers($1) r WHERE NOT r.success' INTO failed
        USING 'SET citus.enable_ddl_propagation TO off; ' || command;
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'workers: %', failed USING ERRCODE = 'RC001', COLUMN = 'workers',
            HINT = 'Every worker of the Citus cluster must be up (SELECT * FROM citus_check_cluster_node_health()).';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._on_every_worker(text) IS 'Internal: on a Citus coordinator, run a command on every worker for that node alone (run_command_on_workers, DDL propagation off), or an error naming the workers where it failed.';

CREATE OR REPLACE FUNCTION rcll.use_model_service(host text, port integer DEFAULT 8767, password text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    owner  regrole := (SELECT p.proowner::regrole FROM pg_catalog.pg_proc p
                       WHERE p.oid = 'rcll._model_service_ask(text,text,text[],double precision,text[],jsonb)'::regprocedure);
    schema name;
    probe  record;
    server_ddl  text;
    mapping_ddl text;
    pinned constant boolean := rcll._bank_pinned();   -- a Citus coordinator, rcll distributed
BEGIN
    IF host IS NULL OR host = '' THEN
        RAISE EXCEPTION 'host: no address given' USING ERRCODE = 'RC001', COLUMN = 'host',
            HINT = 'Pass the service''s socket directory (rcll serve prints it) or a loopback address.';
    END IF;
    IF port IS NULL OR port NOT BETWEEN 1 AND 65535 THEN
        RAISE EXCEPTION 'port: % is not a port', port USING ERRCODE = 'RC001', COLUMN = 'port',
            HINT = 'The service''s port (default 8767: its socket is <host>/.s.PGSQL.8767).';
    END IF;
    IF password IS NULL OR password = '' THEN
        RAISE EXCEPTION 'password: required' USING ERRCODE = 'RC001', COLUMN = 'password',
            HINT = 'The service''s password (RCLL_MODELS_PASSWORD; rcll serve and rcll models register their own): dblink connects with a password for any role but a superuser.';
    END IF;
    IF pinned THEN
        -- On a Citus coordinator each node gets its own dblink, server and mapping, made here on
        -- connections of their own (Citus would copy the server, not the mapping, and only at
        -- commit): a recall delegated to a worker (rcll.recall_in_bank) reaches the service from there.
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
        PERFORM rcll._on_every_worker('CREATE EXTENSION IF NOT EXISTS dblink SCHEMA public');
    END IF;
    SELECT n.nspname INTO schema FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'dblink';
    IF schema IS NULL THEN
        BEGIN
            CREATE EXTENSION dblink SCHEMA public;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'dblink: the extension is not installed, and this role may not install it' USING ERRCODE = 'RC006',
                COLUMN = 'dblink', HINT = 'A superuser (on a managed service, its admin role) runs CREATE EXTENSION dblink SCHEMA public once; dblink ships with PostgreSQL.';
        END;
    ELSIF schema <> 'public' THEN
        RAISE EXCEPTION 'dblink: installed in schema %, rcll calls it in public', schema USING ERRCODE = 'RC001',
            COLUMN = 'dblink', HINT = 'ALTER EXTENSION dblink SET SCHEMA public.';
    END IF;
    -- The password goes in a user mapping for the rcll schema's owner alone: only that role (and
    -- superusers) can read its options; recall's callers reach the service through
    -- rcll._model_service_ask, which runs as that owner.
    server_ddl := format('CREATE SERVER rcll_models FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host %L, port %L, dbname %L, connect_timeout %L, application_name %L)',
                         host, port::text, 'rcll', '2', 'rcll');
    mapping_ddl := format('CREATE USER MAPPING FOR %I SERVER rcll_models OPTIONS (user %L, password %L)', owner::text, 'rcll', password);
    IF pinned THEN
        PERFORM rcll._on_every_worker('DROP SERVER IF EXISTS rcll_models CASCADE');
        PERFORM rcll._on_every_worker(server_ddl);
        PERFORM rcll._on_every_worker(mapping_ddl);
    END IF;
    DROP SERVER IF EXISTS rcll_models CASCADE;
    EXECUTE server_ddl;
    EXECUTE mapping_ddl;
    IF pinned THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
    -- A new address must not reuse this backend's connection to the old one.
    IF 'rcll_models' = ANY (coalesce(public.dblink_get_connections(), '{}')) THEN
        PERFORM public.dblink_disconnect('rcll_models');
    END IF;
    PERFORM set_config('rcll.model_service_pending', '', false);
    SELECT * INTO probe FROM rcll._model_service_ask('count', NULL, ARRAY['ok'], 10000);
    PERFORM set_config('rcll.model_service_failed', '', false);
    RETURN CASE WHEN probe.answer IS NOT NULL THEN format('model service at %s:%s registered and answering', host, port)
                ELSE format('model service at %s:%s registered, but not answering yet (%s): recall skips the dense channel and the rerank until it does',
                            host, port, probe.failure) END;
END
$$;
COMMENT ON FUNCTION rcll.use_model_service(text, integer, text)
    IS 'DBA, once: rcll.recall obtains its query embeddings, cross-encoder scores and token counts from the model service at host (a socket directory, or a loopback address) and port, with this password - rcll serve and rcll models run one and register it themselves. Creates dblink (if this role may) and the foreign server rcll_models with a user mapping for the rcll schema''s owner (the password readable by that role and superusers only). Needs no superuser at recall time; takes precedence over rcll.enable_in_database_models. Returns whether the service answers now.';

CREATE OR REPLACE FUNCTION rcll.stop_using_model_service()
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    pinned constant boolean := rcll._bank_pinned();
BEGIN
    IF pinned THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
        PERFORM rcll._on_every_worker('DROP SERVER IF EXISTS rcll_models CASCADE');
    END IF;
    DROP SERVER IF EXISTS rcll_models CASCADE;
    IF pinned THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
    RETURN 'model service unregistered: recall uses the in-database models where enabled, else skips the dense channel and the rerank without a query_embedding';
END
$$;
COMMENT ON FUNCTION rcll.stop_using_model_service() IS 'Drop the model service''s foreign server and user mapping (rcll.use_model_service).';
