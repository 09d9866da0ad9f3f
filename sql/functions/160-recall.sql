-- Recall, all five phases from SQL: embed, the channels fused by a z-score sum, cross-encoder rerank, token-budget cut.

CREATE OR REPLACE FUNCTION rcll._recall_embedding(query text, query_embedding vector, deadline_ms integer DEFAULT NULL)
RETURNS vector
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Phase 1: embed the query where the models are (rcll._model_source: the model service, else
    -- in-database models); a given embedding is never recomputed.
    IF _recall_embedding.query_embedding IS NOT NULL AND rcll._model_source() IS NOT NULL THEN
        RETURN _recall_embedding.query_embedding;
    END IF;
    IF rcll._model_source() IS NULL THEN
        RAISE NOTICE 'recall: in-database models are not enabled: %',
            CASE WHEN _recall_embedding.query_embedding IS NULL THEN 'the dense channel and the rerank are skipped'
                 ELSE 'the rerank is skipped' END
            USING HINT = CASE WHEN EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u')
                              THEN 'Register a model service (SELECT rcll.use_model_service(...): rcll serve and rcll models do it), or a superuser can run SELECT rcll.enable_in_database_models(ARRAY[''<venv>/lib/python3.11/site-packages'', ''<repo>/python'']).'
                              ELSE 'This server has no plpython3u: register a model service (SELECT rcll.use_model_service(...): rcll serve and rcll models do it), or recall through the rcll client.' END;
        RETURN _recall_embedding.query_embedding;
    END IF;
    RETURN rcll._model_embed(_recall_embedding.query, _recall_embedding.deadline_ms,
                             'the dense channel and the rerank are skipped');
END
$$;
COMMENT ON FUNCTION rcll._recall_embedding(text, vector, integer)
    IS 'Internal: rcll.recall''s phase 1 - the query embedding to use: the one given, else the query embedded by the model service (rcll.use_model_service) or the in-database models; without either a NOTICE says what recall skips, and when the service does not answer within deadline_ms a NOTICE says why.';

CREATE OR REPLACE FUNCTION rcll._recall_entity_embedding(query text, bank_id integer, entity_query_embedding vector,
                                                         deadline_ms integer DEFAULT NULL)
RETURNS vector
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    rest text;
BEGIN
    -- The entity channel's query: the one given, else (with models) the query without the
    -- entities it names embedded, else NULL (recall_candidates then uses the query's).
    IF _recall_entity_embedding.entity_query_embedding IS NOT NULL OR rcll._model_source() IS NULL THEN
        RETURN _recall_entity_embedding.entity_query_embedding;
    END IF;
    rest := rcll._query_without_entities(_recall_entity_embedding.query, _recall_entity_embedding.bank_id);
    RETURN CASE WHEN rest IS NULL THEN NULL
                ELSE rcll._model_embed(rest, _recall_entity_embedding.deadline_ms, 'the entity channel ranks by the query''s embedding') END;
END
$$;
COMMENT ON FUNCTION rcll._recall_entity_embedding(text, integer, vector, integer)
    IS 'Internal: rcll.recall''s second query embedding, for the entity channel: the one given, else with models (the service or in-database) the embedding of rcll.query_without_entities (NULL when the query names no entity), else NULL.';

CREATE OR REPLACE FUNCTION rcll._recall_embeddings(query text, bank_id integer, query_embedding vector,
                                                   entity_query_embedding vector, deadline_ms integer DEFAULT NULL,
                                                   OUT query_vector vector, OUT entity_vector vector)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    rest     text;
    embedded text[];
BEGIN
    -- Phase 1 as rcll.recall.recall runs it: the query without the entities it names first (SQL),
    -- then both texts embedded in one request to where the models are - one round trip and one
    -- model slot, not two. Given embeddings are never recomputed; without models,
    -- rcll._recall_embedding's NOTICE says what recall skips.
    IF rcll._model_source() IS NULL OR _recall_embeddings.query_embedding IS NOT NULL THEN
        query_vector := rcll._recall_embedding(_recall_embeddings.query, _recall_embeddings.query_embedding,
                                               _recall_embeddings.deadline_ms);
        entity_vector := rcll._recall_entity_embedding(_recall_embeddings.query, _recall_embeddings.bank_id,
                                                       _recall_embeddings.entity_query_embedding,
                                                       _recall_embeddings.deadline_ms);
        RETURN;
    END IF;
    IF _recall_embeddings.entity_query_embedding IS NULL THEN
        rest := rcll._query_without_entities(_recall_embeddings.query, _recall_embeddings.bank_id);
    END IF;
    embedded := rcll._model_embed_texts(CASE WHEN rest IS NULL THEN ARRAY[_recall_embeddings.query]
                                             ELSE ARRAY[_recall_embeddings.query, rest] END,
                                        _recall_embeddings.deadline_ms, 'the dense channel and the rerank are skipped');
    query_vector := embedded[1]::public.vector;
    entity_vector := coalesce(_recall_embeddings.entity_query_embedding, embedded[2]::public.vector);
END
$$;
COMMENT ON FUNCTION rcll._recall_embeddings(text, integer, vector, vector, integer)
    IS 'Internal: rcll.recall''s phase 1 - the query embedding (rcll._recall_embedding) and the entity channel''s (rcll._recall_entity_embedding: the query without the entities it names), given or embedded together in one request where the models are.';

CREATE OR REPLACE FUNCTION rcll._cut_to_budget(tokens integer[], budget integer, "limit" integer,
                                               OUT keep integer[], OUT kept_tokens integer[])
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    used bigint := 0;
    n    integer;
BEGIN
    -- rcll.budget.cut_to_budget: walk the ranked counts, take each that still fits (a later,
    -- shorter one may still fill the budget), at most "limit".
    keep := '{}';
    kept_tokens := '{}';
    FOR n IN 1 .. coalesce(cardinality(tokens), 0) LOOP
        EXIT WHEN "limit" IS NOT NULL AND cardinality(keep) >= "limit";
        CONTINUE WHEN budget IS NOT NULL AND used + tokens[n] > budget;
        keep := keep || n;
        kept_tokens := kept_tokens || tokens[n];
        used := used + tokens[n];
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll._cut_to_budget(integer[], integer, integer)
    IS 'Internal: the token-budget cut over counts in ranked order (rcll.budget.cut_to_budget): the positions kept (1-based, in order) and their counts.';

CREATE OR REPLACE FUNCTION rcll._recall_rerank(
    query         text,
    texts         text[],
    contexts      text[],
    "limit"       integer,
    rerank_depth  integer,
    context_depth integer,
    budget        integer,
    deadline_ms   integer DEFAULT NULL)
RETURNS TABLE (candidate integer, rerank_score real, tokens integer, ordinal integer)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    models boolean := rcll._model_source() IS NOT NULL;
    depth  integer := greatest(coalesce(_recall_rerank.rerank_depth, 0), 0);
    lim    integer := greatest(coalesce(_recall_rerank."limit", (rcll.recall_defaults()).candidate_limit), 0);
    scores real[];
    second real[];
    head   integer[];
    top    integer[];
    views  text[];
    cut    boolean[];
    ord    integer[];
    ranked text[];
    kept   integer[];
    toks   integer[];
    n      integer;
    ms     double precision := _recall_rerank.deadline_ms;
    -- What the statement needs after the model service's last answer (the order, the budget
    -- cut, the rows to the client): the service is asked to be done that much before the deadline.
    -- 20 ms, or 5% of the deadline when more: that work takes longer in proportion as the backend
    -- gets less of a core (docs/benchmarks.md, "The channels bounded by the deadline").
    reserve constant double precision := greatest(20, 0.05 * coalesce(_recall_rerank.deadline_ms, 0));
    spare  double precision;
    spent  boolean := false;
    counted record;
BEGIN
    IF texts IS NULL THEN
        RETURN;
    END IF;
    -- Phase 4: the cross-encoder reads the top `depth` candidates with the query, as the client
    -- does (rcll._model_first_view: a long one by its most query-relevant window, and only the
    -- fused prefix that fits its budget of words); the top context_depth of its order are read
    -- again with the chunk before them ("<previous> / <text>"), but for those the window cut (a
    -- long text carries its own context), and scored by the mean of both logits (as
    -- rcll.deadline.rerank_within in Python). Reranked
    -- candidates move to the front in that order, the rest keep their fused order behind them.
    -- With deadline_ms (counted from the start of the statement) both views read in fused order
    -- while time is left (rcll._model_rerank_until); what is not read keeps its fused order.
    -- The whole recall is bounded by deadline_ms: the rerank gets what the channels left of it,
    -- and none when that leaves the service less than 20 ms beyond the reserve (a NOTICE says so).
    IF models AND rcll._model_service_gave_up() THEN
        depth := 0;                              -- its NOTICE said why
    ELSIF models AND depth > 0 AND ms IS NOT NULL THEN
        spare := ms - 1000 * extract(epoch FROM clock_timestamp() - statement_timestamp());
        IF spare < reserve + 20 THEN
            RAISE NOTICE 'recall: the deadline (% ms) left % ms after the channels: the rerank is skipped', ms, round(greatest(spare, 0))
                USING HINT = 'The candidates keep their fused order and the token budget is estimated; allow a longer deadline_ms for a reranked answer.';
            depth := 0;
            spent := true;
        END IF;
    END IF;
    IF models AND depth > 0 THEN
        depth := least(depth, cardinality(texts));
        SELECT * INTO counted FROM rcll._model_first_view(_recall_rerank.query, texts[1:depth], ms - reserve);
        scores := counted.scores;
        cut := counted.trimmed;
    END IF;
    -- NULL scores: the model service did not answer (its NOTICE said why); no rerank then.
    IF models AND depth > 0 AND scores IS NOT NULL THEN
        SELECT (array_agg(o.i ORDER BY scores[o.i] DESC, o.i))[1:greatest(coalesce(_recall_rerank.context_depth, 0), 0)]
        INTO head FROM generate_subscripts(scores, 1) AS o(i);
        SELECT array_agg(t.i ORDER BY t.pos), array_agg(contexts[t.i] || ' / ' || texts[t.i] ORDER BY t.pos)
        INTO top, views
        FROM unnest(head) WITH ORDINALITY AS t(i, pos) WHERE contexts[t.i] <> '' AND NOT cut[t.i];
        IF coalesce(cardinality(scores), 0) < cardinality(cut) THEN
            head := NULL;                        -- the deadline cut the first view: no second one
            RAISE NOTICE 'recall: the deadline (% ms) cut the rerank at depth % of %', ms, coalesce(cardinality(scores), 0),
                cardinality(cut);
        ELSIF views IS NOT NULL THEN
            second := coalesce(rcll._model_rerank_scores(_recall_rerank.query, views, ms - reserve), '{}');
            FOR n IN 1 .. coalesce(cardinality(second), 0) LOOP
                scores[top[n]] := (scores[top[n]] + second[n]) / 2;
            END LOOP;
            IF coalesce(cardinality(second), 0) < cardinality(top) THEN
                -- Cut in the second view: the head read twice ends before the first unread one.
                head := head[1 : array_position(head, top[coalesce(cardinality(second), 0) + 1]) - 1];
                RAISE NOTICE 'recall: the deadline (% ms) cut the context view at % of % candidates', ms,
                    coalesce(cardinality(head), 0), greatest(coalesce(_recall_rerank.context_depth, 0), 0);
            END IF;
        END IF;
    END IF;
    -- Order: the context-read head by its mean score, the rest of the reranked ones by theirs,
    -- then the unreranked candidates in fused order.
    SELECT array_agg(o.i ORDER BY o.i > cardinality(coalesce(scores, '{}')), NOT (o.i = ANY (coalesce(head, '{}'))),
                     scores[o.i] DESC NULLS LAST, o.i) INTO ord
    FROM generate_subscripts(texts, 1) AS o(i);

    -- Phase 5: fill the token budget (fact text only) as the client does: rcll._model_cut runs
    -- rcll.budget.cut_counting where the models are (a fact that does not fit is skipped and a
    -- later, shorter one may still fit; a long one that cannot fit what is left is never
    -- counted). Without models, or once the deadline leaves the service no time, the counts are
    -- estimated: asking it would only wait past the deadline.
    SELECT array_agg(texts[o.i] ORDER BY o.pos) INTO ranked FROM unnest(ord) WITH ORDINALITY AS o(i, pos);
    IF ranked IS NULL THEN
        RETURN;                                  -- no candidates
    END IF;
    IF models AND NOT spent
       AND (ms IS NULL OR ms - reserve > 1000 * extract(epoch FROM clock_timestamp() - statement_timestamp())) THEN
        SELECT c.keep, c.tokens INTO kept, toks FROM rcll._model_cut(ranked, _recall_rerank.budget, lim, ms - reserve) c;
    END IF;
    IF kept IS NULL THEN
        SELECT c.keep, c.kept_tokens INTO kept, toks
        FROM rcll._cut_to_budget(rcll._approx_tokens(ranked), _recall_rerank.budget, lim) c;
    END IF;

    RETURN QUERY
    SELECT ord[x.p]::integer, scores[ord[x.p]], toks[x.pos]::integer, x.pos::integer
    FROM unnest(kept) WITH ORDINALITY AS x(p, pos)
    ORDER BY x.pos;
END
$$;
COMMENT ON FUNCTION rcll._recall_rerank(text, text[], text[], integer, integer, integer, integer, integer)
    IS 'Internal: rcll.recall''s phases 4-5 over its candidates in fused order (texts and the context before each): the in-database cross-encoder rerank of the top rerank_depth (the top context_depth of its order read again with their context; with deadline_ms, only while the statement is younger than that), then the cut to "limit" facts and budget tokens. Returns the kept candidates'' positions (candidate, 1-based) in final order, with their rerank scores and token counts.';

CREATE OR REPLACE FUNCTION rcll.recall(
    query           text,
    scope           rcll.recall_scope,
    budget          integer DEFAULT (rcll.recall_defaults()).budget,
    rerank_depth    integer DEFAULT (rcll.recall_defaults()).rerank_depth,
    context_depth   integer DEFAULT (rcll.recall_defaults()).context_depth,
    "limit"         integer DEFAULT (rcll.recall_defaults()).candidate_limit,
    query_embedding vector DEFAULT NULL,
    time_range      tstzrange DEFAULT NULL,
    reference_time  timestamptz DEFAULT now(),
    deadline_ms     integer DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision, rerank_score real,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer)
LANGUAGE sql STABLE
AS $$
    -- SQL, not PL/pgSQL: the output column thread would shadow the scope's rows in PL/pgSQL. Phase 1
    -- (rcll._recall_embeddings), phases 2-3 (rcll.recall_candidates: enough candidates for the
    -- rerank and the final list), phases 4-5 (rcll._recall_rerank) over the candidates in fused order.
    WITH e AS MATERIALIZED (
        SELECT * FROM rcll._recall_embeddings(recall.query, (recall.scope).bank_id, recall.query_embedding,
                                              recall.entity_query_embedding, recall.deadline_ms)
    ), c AS MATERIALIZED (
        SELECT * FROM rcll.recall_candidates(
            query => recall.query, scope => recall.scope,
            query_embedding => (SELECT e.query_vector FROM e),
            entity_query_embedding => (SELECT e.entity_vector FROM e),
            time_range => recall.time_range, reference_time => recall.reference_time,
            deadline_ms => recall.deadline_ms,
            "limit" => greatest(greatest(coalesce(recall."limit", (rcll.recall_defaults()).candidate_limit), 0),
                                greatest(coalesce(recall.rerank_depth, 0), 0))) WITH ORDINALITY AS c
    )
    SELECT c.unit_id, c.text, c.room, c.hall, c.layer, c.author, c.thread, c.tags, c.valid, c.occurred_start,
           c.mentioned_at, c.document_id, c.provenance, c.fused_score, r.rerank_score, c.rank_dense,
           c.rank_lexical, c.rank_graph, c.rank_temporal, c.rank_context, c.rank_entity, c.rank_session
    FROM rcll._recall_rerank(
        query => recall.query,
        texts => (SELECT array_agg(c.text ORDER BY c.ordinality) FROM c),
        contexts => (SELECT array_agg(c.context ORDER BY c.ordinality) FROM c),
        "limit" => recall."limit", rerank_depth => recall.rerank_depth,
        context_depth => recall.context_depth, budget => recall.budget, deadline_ms => recall.deadline_ms) r
    JOIN c ON c.ordinality = r.candidate
    ORDER BY r.ordinal
$$;
COMMENT ON FUNCTION rcll.recall(text, rcll.recall_scope, integer, integer, integer, integer, vector, tstzrange, timestamptz, integer, vector)
    IS 'Recall from SQL: rcll.recall_candidates over the scope (rcll.recall_scope: bank, rooms, authors, filters), then the cross-encoder rerank of the top rerank_depth candidates (the top context_depth of its order read again with the chunk before them, by the mean of both scores), then the cut to "limit" facts and budget tokens of fact text (skipping facts that do not fit). Fusion runs with rcll.recall_candidates'' defaults: tuning it (channel_limit, the channel weights) is rcll.recall_candidates'' job. With in-database models (rcll.enable_in_database_models) the query (and, for the entity channel, the query without the entities it names) is embedded and reranked here; without them pass query_embedding (and entity_query_embedding, the embedding of rcll.query_without_entities; else the entity channel ranks by query_embedding), and the rerank is skipped (NOTICE). deadline_ms (default none) is a latency budget for the whole statement, from its start: the embedding runs, each channel starts only while the deadline leaves it time (rcll.recall_channels: the first that does not fit and the later ones are skipped, the lexical channel runs when none ran before it, a NOTICE names them), then the cross-encoder reads candidates in fused order while time is left (none when the channels left too little: a NOTICE says so), the rest keep their fused order (rerank_score NULL), and a NOTICE says where the deadline cut it. Never writes. From psql: SELECT text FROM rcll.recall(''how do we deploy?'', rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';
