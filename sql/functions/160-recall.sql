-- Recall, all five phases from SQL: embed, four channels + fusion, cross-encoder rerank, token-budget cut.

-- The signatures before the context channel and the reranker's context view.
DROP FUNCTION IF EXISTS rcll.recall(text, text, vector, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, tstzrange, timestamptz, integer, integer, double precision, double precision, double precision, double precision, integer, integer, integer);
DROP FUNCTION IF EXISTS rcll._recall_ranked(text, text, vector, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, tstzrange, timestamptz, integer, integer, double precision, double precision, double precision, double precision, integer, integer, integer);

CREATE OR REPLACE FUNCTION rcll._recall_ranked(
    query                text,
    bank                 text,
    query_embedding      vector DEFAULT NULL,
    rooms                text[] DEFAULT NULL,
    authors              text[] DEFAULT NULL,
    mine                 boolean DEFAULT false,
    include_unattributed boolean DEFAULT false,
    halls                text[] DEFAULT NULL,
    layers               text[] DEFAULT NULL,
    tags_any             text[] DEFAULT NULL,
    tags_all             text[] DEFAULT NULL,
    thread               text DEFAULT NULL,
    as_of                timestamptz DEFAULT now(),
    time_range           tstzrange DEFAULT NULL,
    reference_time       timestamptz DEFAULT now(),
    k                    integer DEFAULT 60,
    channel_limit        integer DEFAULT 300,
    dense_weight         double precision DEFAULT 1.0,
    lexical_weight       double precision DEFAULT 1.0,
    graph_weight         double precision DEFAULT 1.0,
    temporal_weight      double precision DEFAULT 1.0,
    context_weight       double precision DEFAULT 1.0,
    "limit"              integer DEFAULT 100,
    rerank_depth         integer DEFAULT 40,
    context_depth        integer DEFAULT 15,
    budget               integer DEFAULT 4096)
RETURNS TABLE (unit_id bigint, fused_score double precision, rank_dense integer, rank_lexical integer,
               rank_graph integer, rank_temporal integer, rank_context integer, rerank_score real,
               tokens integer, ordinal integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    models boolean := rcll.in_database_models();
    qe     public.vector := _recall_ranked.query_embedding;
    depth  integer := greatest(coalesce(_recall_ranked.rerank_depth, 0), 0);
    lim    integer := greatest(coalesce(_recall_ranked."limit", 100), 0);
    ids    bigint[];
    texts  text[];
    fused  double precision[];
    rd     integer[];
    rl     integer[];
    rg     integer[];
    rt     integer[];
    rx     integer[];
    ctxs   text[];
    scores real[];
    second real[];
    head   integer[];
    top    integer[];
    views  text[];
    toks   integer[];
    ord    integer[];
    keep   integer[] := '{}';
    used   bigint := 0;
    i      integer;
BEGIN
    -- Phase 1: embed the query here when the models live in the database.
    IF qe IS NULL AND models AND coalesce(_recall_ranked.dense_weight, 0) > 0 THEN
        qe := rcll._model_embed_query(_recall_ranked.query);
    END IF;
    IF NOT models THEN
        RAISE NOTICE 'recall: in-database models are not enabled: %',
            CASE WHEN qe IS NULL THEN 'the dense channel and the rerank are skipped' ELSE 'the rerank is skipped' END
            USING HINT = CASE WHEN EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u')
                              THEN 'A superuser can run SELECT rcll.enable_in_database_models(ARRAY[''<venv>/lib/python3.11/site-packages'', ''<repo>/python'']).'
                              ELSE 'This server has no plpython3u: recall through the rcll client, which embeds and reranks outside the database.' END;
    END IF;

    -- Phases 2-3: channels and fusion; enough candidates for the rerank and the final list.
    SELECT array_agg(c.unit_id ORDER BY c.n), array_agg(c.text ORDER BY c.n), array_agg(c.fused_score ORDER BY c.n),
           array_agg(c.rank_dense ORDER BY c.n), array_agg(c.rank_lexical ORDER BY c.n),
           array_agg(c.rank_graph ORDER BY c.n), array_agg(c.rank_temporal ORDER BY c.n),
           array_agg(c.rank_context ORDER BY c.n), array_agg(c.context ORDER BY c.n)
    INTO ids, texts, fused, rd, rl, rg, rt, rx, ctxs
    FROM rcll.recall_candidates(
        query => _recall_ranked.query, bank => _recall_ranked.bank, query_embedding => qe, rooms => _recall_ranked.rooms,
        authors => _recall_ranked.authors, mine => _recall_ranked.mine, include_unattributed => _recall_ranked.include_unattributed,
        halls => _recall_ranked.halls, layers => _recall_ranked.layers, tags_any => _recall_ranked.tags_any, tags_all => _recall_ranked.tags_all,
        thread => _recall_ranked.thread, as_of => _recall_ranked.as_of, time_range => _recall_ranked.time_range,
        reference_time => _recall_ranked.reference_time, k => _recall_ranked.k, channel_limit => _recall_ranked.channel_limit,
        dense_weight => _recall_ranked.dense_weight, lexical_weight => _recall_ranked.lexical_weight,
        graph_weight => _recall_ranked.graph_weight, temporal_weight => _recall_ranked.temporal_weight,
        context_weight => _recall_ranked.context_weight, "limit" => greatest(lim, depth)) WITH ORDINALITY AS c
        (unit_id, text, room, hall, layer, author, thread, tags, valid, occurred_start, mentioned_at,
         document_id, provenance, fused_score, rank_dense, rank_lexical, rank_graph, rank_temporal,
         rank_context, context, n);
    IF ids IS NULL THEN
        RETURN;
    END IF;

    -- Phase 4: the cross-encoder reads the top `depth` candidates with the query; the top
    -- context_depth of its order are read again with the chunk before them ("<previous> / <text>")
    -- and scored by the mean of both logits (as rcll.recall.rerank in Python). Reranked
    -- candidates move to the front in that order, the rest keep their fused order behind them.
    IF models AND depth > 0 THEN
        scores := rcll._model_rerank(_recall_ranked.query, texts[1:depth]);
        SELECT (array_agg(o.i ORDER BY scores[o.i] DESC, o.i))[1:greatest(coalesce(_recall_ranked.context_depth, 0), 0)]
        INTO head FROM generate_subscripts(scores, 1) AS o(i);
        SELECT array_agg(t.i ORDER BY t.pos), array_agg(ctxs[t.i] || ' / ' || texts[t.i] ORDER BY t.pos)
        INTO top, views
        FROM unnest(head) WITH ORDINALITY AS t(i, pos) WHERE ctxs[t.i] <> '';
        IF views IS NOT NULL THEN
            second := rcll._model_rerank(_recall_ranked.query, views);
            FOR i IN 1 .. cardinality(top) LOOP
                scores[top[i]] := (scores[top[i]] + second[i]) / 2;
            END LOOP;
        END IF;
    END IF;
    -- Order: the context-read head by its mean score, the rest of the reranked ones by theirs,
    -- then the unreranked candidates in fused order.
    SELECT array_agg(o.i ORDER BY o.i > cardinality(coalesce(scores, '{}')), NOT (o.i = ANY (coalesce(head, '{}'))),
                     scores[o.i] DESC NULLS LAST, o.i) INTO ord
    FROM generate_subscripts(ids, 1) AS o(i);

    -- Phase 5: fill the token budget (fact text only): a fact that does not fit is skipped and
    -- the next, shorter one may still fit.
    IF models THEN
        toks := rcll._model_count_tokens(texts);
    ELSE
        toks := rcll._approx_tokens(texts);
    END IF;
    FOREACH i IN ARRAY ord LOOP
        EXIT WHEN cardinality(keep) >= lim;
        CONTINUE WHEN _recall_ranked.budget IS NOT NULL AND used + toks[i] > _recall_ranked.budget;
        keep := keep || i;
        used := used + toks[i];
    END LOOP;

    RETURN QUERY
    SELECT ids[x.i], fused[x.i], rd[x.i], rl[x.i], rg[x.i], rt[x.i], rx[x.i], scores[x.i], toks[x.i], x.pos::integer
    FROM unnest(keep) WITH ORDINALITY AS x(i, pos)
    ORDER BY x.pos;
END
$$;
COMMENT ON FUNCTION rcll._recall_ranked(text, text, vector, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, tstzrange, timestamptz, integer, integer, double precision, double precision, double precision, double precision, double precision, integer, integer, integer, integer)
    IS 'Internal: rcll.recall''s ranking - candidates, in-database rerank of the top rerank_depth, budget cut - as unit ids in final order with their scores and token counts.';

CREATE OR REPLACE FUNCTION rcll.recall(
    query                text,
    bank                 text,
    query_embedding      vector DEFAULT NULL,
    rooms                text[] DEFAULT NULL,
    authors              text[] DEFAULT NULL,
    mine                 boolean DEFAULT false,
    include_unattributed boolean DEFAULT false,
    halls                text[] DEFAULT NULL,
    layers               text[] DEFAULT NULL,
    tags_any             text[] DEFAULT NULL,
    tags_all             text[] DEFAULT NULL,
    thread               text DEFAULT NULL,
    as_of                timestamptz DEFAULT now(),
    time_range           tstzrange DEFAULT NULL,
    reference_time       timestamptz DEFAULT now(),
    k                    integer DEFAULT 60,
    channel_limit        integer DEFAULT 300,
    dense_weight         double precision DEFAULT 1.0,
    lexical_weight       double precision DEFAULT 1.0,
    graph_weight         double precision DEFAULT 1.0,
    temporal_weight      double precision DEFAULT 1.0,
    context_weight       double precision DEFAULT 1.0,
    "limit"              integer DEFAULT 100,
    rerank_depth         integer DEFAULT 40,
    context_depth        integer DEFAULT 15,
    budget               integer DEFAULT 4096)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rerank_score real)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- SQL around the PL/pgSQL ranking: the thread parameter and the thread column share a name.
    SELECT u.unit_id, u.text, u.room, u.hall, u.layer, u.author, u.thread, u.tags, u.valid, u.occurred_start,
           u.mentioned_at, u.document_id, u.provenance, r.fused_score, r.rank_dense, r.rank_lexical,
           r.rank_graph, r.rank_temporal, r.rank_context, r.rerank_score
    FROM rcll._recall_ranked(
        query => recall.query, bank => recall.bank, query_embedding => recall.query_embedding,
        rooms => recall.rooms, authors => recall.authors, mine => recall.mine,
        include_unattributed => recall.include_unattributed, halls => recall.halls, layers => recall.layers,
        tags_any => recall.tags_any, tags_all => recall.tags_all, thread => recall.thread,
        as_of => recall.as_of, time_range => recall.time_range, reference_time => recall.reference_time,
        k => recall.k, channel_limit => recall.channel_limit, dense_weight => recall.dense_weight,
        lexical_weight => recall.lexical_weight, graph_weight => recall.graph_weight,
        temporal_weight => recall.temporal_weight, context_weight => recall.context_weight,
        "limit" => recall."limit", rerank_depth => recall.rerank_depth,
        context_depth => recall.context_depth, budget => recall.budget) r
    JOIN rcll.memory_units u ON u.unit_id = r.unit_id
    ORDER BY r.ordinal
$$;
COMMENT ON FUNCTION rcll.recall(text, text, vector, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, tstzrange, timestamptz, integer, integer, double precision, double precision, double precision, double precision, double precision, integer, integer, integer, integer)
    IS 'Recall from SQL: rcll.recall_candidates, then the cross-encoder rerank of the top rerank_depth candidates (the top context_depth of its order read again with the chunk before them, by the mean of both scores), then the cut to budget tokens of fact text (skipping facts that do not fit). With in-database models (rcll.enable_in_database_models) the query is embedded and reranked here; without them pass query_embedding, and the rerank is skipped (NOTICE). Never writes.';
