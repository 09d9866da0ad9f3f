-- In-database models: query embedding, cross-encoder rerank and token counts inside PostgreSQL (plpython3u).

CREATE OR REPLACE FUNCTION rcll.in_database_models()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT to_regprocedure('rcll._model_embed_query(text)') IS NOT NULL
       AND to_regprocedure('rcll._model_rerank(text,text[])') IS NOT NULL
       AND to_regprocedure('rcll._model_count_tokens(text[])') IS NOT NULL
$$;
COMMENT ON FUNCTION rcll.in_database_models() IS 'Whether rcll.enable_in_database_models() has been run here: rcll.recall then embeds the query, reranks and counts tokens inside the database.';

CREATE OR REPLACE FUNCTION rcll.enable_in_database_models(python_path text[] DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    paths text[] := coalesce(python_path,
                             string_to_array(nullif(current_setting('rcll.python_path', true), ''), ':'));
    -- Every function puts the configured directories first on sys.path (so the server's own
    -- dist-packages cannot shadow the venv's numpy) and keeps the loaded module in GD: the
    -- models load once per backend and answer fast after (docs/scaling.md).
    prelude text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u') THEN
        RAISE EXCEPTION 'plpython3u: this server has no plpython3u, so models cannot run inside it'
            USING ERRCODE = '0A000', COLUMN = 'plpython3u',
            HINT = 'Install the server''s plpython3 package (Debian: postgresql-plpython3-NN), or keep embedding and reranking in the client: pass query_embedding to rcll.recall_candidates (the rcll Python client does).';
    END IF;
    IF paths IS NULL OR cardinality(paths) = 0 THEN
        RAISE EXCEPTION 'python_path: no directories given' USING ERRCODE = 'RC001', COLUMN = 'python_path',
            HINT = 'Pass the venv''s site-packages and the directory holding the rcll package, readable by the server''s OS user: SELECT rcll.enable_in_database_models(ARRAY[''/srv/rcll/.venv/lib/python3.11/site-packages'', ''/srv/rcll/python'']), or set rcll.python_path (colon-separated) with ALTER DATABASE ... SET.';
    END IF;
    EXECUTE 'CREATE EXTENSION IF NOT EXISTS plpython3u';
    prelude := format($py$
m = GD.get("rcll.models")
if m is None:
    import sys
    for p in reversed(%s):
        if p in sys.path:
            sys.path.remove(p)
        sys.path.insert(0, p)
    from rcll import models as m
    GD["rcll.models"] = m
s = GD.get("rcll.settings")
if s is None:
    # This backend is an edge of its own: its environment (RCLL_MODEL_DIR, the threads), read once.
    from rcll.settings import Settings
    s = GD["rcll.settings"] = Settings.from_env()
$py$, to_json(paths)::text);

    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_embed_query(query text) RETURNS public.vector
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
v = m.get_embedder(s).embed_query(query)
return "[" + ",".join(repr(float(x)) for x in v) + "]"
$py$);
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_rerank(query text, passages text[]) RETURNS real[]
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
if not passages:
    return []
return [float(x) for x in m.get_reranker(s).score(query, list(passages))]
$py$);
    -- Recall's deadline (rcll._recall_rerank): the client's reader (rcll.deadline.read_prefix),
    -- so both legs batch and stop alike; its running cost per token lives in this backend.
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_rerank_until(query text, passages text[], deadline_ms double precision,
                                                    started double precision) RETURNS real[]
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
import time
from rcll.deadline import Deadline, read_prefix
since = time.time() - started        # the statement's age: the deadline counts from its start
return read_prefix(query, list(passages), m.get_reranker(s), Deadline(deadline_ms, time.perf_counter() - since))
$py$);
    -- What recall's first view reads of its top candidates: the client's own definition.
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_windows(query text, texts text[], OUT passages text[], OUT trimmed boolean[])
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
from rcll.passages import first_view
return first_view(query, list(texts))
$py$);
    -- Recall's budget cut: the client's own (rcll.budget.cut_counting), the deadline counted
    -- from the statement's start.
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_cut_counting(texts text[], budget integer, "limit" integer,
                                                    deadline_ms double precision, started double precision,
                                                    OUT keep integer[], OUT kept_tokens integer[])
LANGUAGE plpython3u STABLE SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
import time
from rcll.budget import cut_counting
from rcll.deadline import Deadline
deadline = Deadline(deadline_ms, time.perf_counter() - (time.time() - started))
kept, tokens = cut_counting(list(texts or []), budget, args[2], m.get_embedder(s).count_tokens,
                            in_time=lambda: deadline.left() > 0)
return [k + 1 for k in kept], [tokens[k] for k in kept]
$py$);
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_count_tokens(texts text[]) RETURNS integer[]
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
return m.count_tokens(list(texts), s) if texts else []
$py$);
    COMMENT ON FUNCTION rcll._model_embed_query(text) IS 'Internal (created by rcll.enable_in_database_models): the bge-small-en-v1.5 embedding of a query, computed in this backend.';
    COMMENT ON FUNCTION rcll._model_rerank(text, text[]) IS 'Internal (created by rcll.enable_in_database_models): cross-encoder logits of (query, passage) pairs, in input order.';
    COMMENT ON FUNCTION rcll._model_rerank_until(text, text[], double precision, double precision) IS 'Internal (created by rcll.enable_in_database_models): cross-encoder logits of the passages read in order while the statement that started at `started` (epoch seconds) is younger than deadline_ms - the prefix read, shorter than passages when the deadline cut it.';
    COMMENT ON FUNCTION rcll._model_windows(text, text[]) IS 'Internal (created by rcll.enable_in_database_models): what recall''s first view reads of its top candidates (rcll.passages.first_view) - each text''s most query-relevant window, the prefix that fits the budget of words - and which of them the window cut.';
    COMMENT ON FUNCTION rcll._model_cut_counting(text[], integer, integer, double precision, double precision) IS 'Internal (created by rcll.enable_in_database_models): recall''s token-budget cut over texts in final order (rcll.budget.cut_counting; past deadline_ms from `started`, epoch seconds, the rest estimated): the positions kept (1-based) and their counts.';
    COMMENT ON FUNCTION rcll._model_count_tokens(text[]) IS 'Internal (created by rcll.enable_in_database_models): bge wordpiece tokens per text (for the token budget).';
    -- Fail now, with the reason, rather than at the first recall.
    EXECUTE 'SELECT rcll._model_count_tokens(ARRAY[''ok''])';
    RETURN format('in-database models enabled (python path: %s)', array_to_string(paths, ':'));
END
$fn$;
COMMENT ON FUNCTION rcll.enable_in_database_models(text[]) IS 'Let rcll.recall run all five phases inside the database: creates plpython3u and the model functions, importing rcll.models from python_path (default: the rcll.python_path setting, colon-separated). Needs a superuser and a server with plpython3u; the directories must be readable by the server''s OS user.';

CREATE OR REPLACE FUNCTION rcll.disable_in_database_models()
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    DROP FUNCTION IF EXISTS rcll._model_embed_query(text);
    DROP FUNCTION IF EXISTS rcll._model_rerank(text, text[]);
    DROP FUNCTION IF EXISTS rcll._model_rerank_until(text, text[], double precision, double precision);
    DROP FUNCTION IF EXISTS rcll._model_count_tokens(text[]);
    DROP FUNCTION IF EXISTS rcll._model_windows(text, text[]);
    DROP FUNCTION IF EXISTS rcll._model_cut_counting(text[], integer, integer, double precision, double precision);
    RETURN 'in-database models disabled';
END
$$;
COMMENT ON FUNCTION rcll.disable_in_database_models() IS 'Drop the in-database model functions; rcll.recall then needs query_embedding and skips the rerank.';

CREATE OR REPLACE FUNCTION rcll._approx_tokens(texts text[])
RETURNS integer[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Without the tokenizer: about one token per four characters of English (rounded up).
    SELECT coalesce(array_agg(greatest(1, ceil(char_length(coalesce(t, '')) / 4.0))::integer ORDER BY i), '{}')
    FROM unnest(texts) WITH ORDINALITY AS x(t, i)
$$;
COMMENT ON FUNCTION rcll._approx_tokens(text[]) IS 'Internal: token counts estimated as characters / 4, used for the budget when the tokenizer is not in the database.';
