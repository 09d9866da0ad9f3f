-- Recall phases 2-3: the four channels (and dense's context variant), fused by reciprocal rank fusion in one statement.

CREATE OR REPLACE FUNCTION rcll.recall_candidates(
    query                text,
    scope                rcll.recall_scope,
    query_embedding      vector DEFAULT NULL,
    time_range           tstzrange DEFAULT NULL,
    reference_time       timestamptz DEFAULT now(),
    k                    integer DEFAULT (rcll.recall_defaults()).k,
    channel_limit        integer DEFAULT (rcll.recall_defaults()).channel_limit,
    dense_weight         double precision DEFAULT 1.0,
    lexical_weight       double precision DEFAULT 1.0,
    graph_weight         double precision DEFAULT 1.0,
    temporal_weight      double precision DEFAULT 1.0,
    context_weight       double precision DEFAULT 1.0,
    "limit"              integer DEFAULT (rcll.recall_defaults()).candidate_limit)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, context text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
-- SQL, not PL/pgSQL: the output columns (thread, text, ...) would be variables in PL/pgSQL. Each
-- channel is PL/pgSQL with custom plans, so the scope's fields fold as constants where it matters.
AS $$
    -- RRF: each channel adds weight / (k + rank). k = 60 (Cormack et al.; what hindsight uses)
    -- flattens the head so that agreement between channels beats one channel's first place.
    -- Channels run one after another inside this statement; a channel with weight 0 is not run.
    WITH d AS (
        SELECT c.unit_id, c.rank FROM rcll.channel_dense(
            query_embedding => recall_candidates.query_embedding, scope => recall_candidates.scope,
            "limit" => recall_candidates.channel_limit) c
        WHERE (recall_candidates.dense_weight > 0 OR recall_candidates.context_weight > 0)
          AND (recall_candidates.query_embedding IS NOT NULL OR rcll._notice(
                'recall: dense channel skipped: no query_embedding was passed',
                'Pass query_embedding (the rcll Python client does), or let rcll.recall embed the query in the database (SELECT rcll.enable_in_database_models(...)).'))
    ), ctx AS (
        -- Context: the top 100 dense hits and the chunk after each, scored with the chunk before
        -- them (seeding it with all 300 hits adds 0.008 R@50 on LoCoMo for 3x its time).
        SELECT c.unit_id, c.rank FROM rcll.channel_context(
            query_embedding => recall_candidates.query_embedding,
            seeds => (SELECT array_agg(d.unit_id) FROM d WHERE d.rank <= 100),
            scope => recall_candidates.scope, "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.context_weight > 0
    ), l AS (
        SELECT c.unit_id, c.rank FROM rcll.channel_lexical(
            query => recall_candidates.query, scope => recall_candidates.scope, "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.lexical_weight > 0
    ), g AS (
        SELECT c.unit_id, c.rank FROM rcll.channel_graph(
            query => recall_candidates.query, scope => recall_candidates.scope, "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.graph_weight > 0
    ), t AS (
        SELECT c.unit_id, c.rank FROM rcll.channel_temporal(
            query => recall_candidates.query, scope => recall_candidates.scope,
            time_range => recall_candidates.time_range, reference_time => recall_candidates.reference_time,
            query_embedding => recall_candidates.query_embedding, "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.temporal_weight > 0
    ), fused AS (
        SELECT x.unit_id,
               sum(x.w / (recall_candidates.k + x.rank)) AS score,
               min(x.rank) FILTER (WHERE x.ch = 'd') AS rd,
               min(x.rank) FILTER (WHERE x.ch = 'l') AS rl,
               min(x.rank) FILTER (WHERE x.ch = 'g') AS rg,
               min(x.rank) FILTER (WHERE x.ch = 't') AS rt,
               min(x.rank) FILTER (WHERE x.ch = 'x') AS rx
        FROM (
            SELECT d.unit_id, d.rank, 'd' AS ch, recall_candidates.dense_weight AS w FROM d
            WHERE recall_candidates.dense_weight > 0
            UNION ALL SELECT ctx.unit_id, ctx.rank, 'x', recall_candidates.context_weight FROM ctx
            UNION ALL SELECT l.unit_id, l.rank, 'l', recall_candidates.lexical_weight FROM l
            UNION ALL SELECT g.unit_id, g.rank, 'g', recall_candidates.graph_weight FROM g
            UNION ALL SELECT t.unit_id, t.rank, 't', recall_candidates.temporal_weight FROM t
        ) x
        GROUP BY x.unit_id
        ORDER BY score DESC, x.unit_id DESC
        LIMIT greatest(coalesce(recall_candidates."limit", (rcll.recall_defaults()).candidate_limit), 0)
    )
    SELECT u.unit_id, u.text, u.room, u.hall, u.layer, u.author, u.thread, u.tags, u.valid, u.occurred_start,
           u.mentioned_at, u.document_id, u.provenance, f.score, f.rd, f.rl, f.rg, f.rt, f.rx,
           -- the end of the chunk before: what this one answers or continues (16 words keep the
           -- cross-encoder's second view short; on LoCoMo the whole chunk scored no better)
           rcll._last_words(p.preceding_text, 16)
    FROM fused f JOIN rcll.memory_units u ON u.unit_id = f.unit_id
    LEFT JOIN rcll.preceding_units(
        unit_ids => (SELECT array_agg(fused.unit_id) FROM fused), scope => recall_candidates.scope) p ON p.unit_id = f.unit_id
    ORDER BY f.score DESC, f.unit_id DESC
$$;
COMMENT ON FUNCTION rcll.recall_candidates(text, rcll.recall_scope, vector, tstzrange, timestamptz, integer, integer, double precision, double precision, double precision, double precision, double precision, integer)
    IS 'Recall without the rerank: the dense, lexical, graph and temporal channels and the context channel (dense hits read with the chunk before them; each at most channel_limit units, all filtered before ranking) fused by reciprocal rank fusion, score = sum of weight / (k + rank). Each row: the unit, its axes, the fused score, its rank in each channel (NULL = not found there) and context, the last 16 words of the chunk before it in its document when that chunk passes the same scope (the reranker''s second view). What it may read is one value, scope (rcll.recall_scope: bank, rooms, authors, filters), built once by the caller and passed to every channel; k, channel_limit and the five weights tune the fusion. Without query_embedding the dense channel is skipped (NOTICE). From psql: SELECT * FROM rcll.recall_candidates(''deploy'', rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';
