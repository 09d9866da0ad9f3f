-- Recall phases 2-3: the channels, fused by a per-query z-score sum in one statement.

CREATE OR REPLACE FUNCTION rcll.recall_candidates(
    query                  text,
    scope                  rcll.recall_scope,
    query_embedding        vector DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL,
    time_range             tstzrange DEFAULT NULL,
    reference_time         timestamptz DEFAULT now(),
    channel_limit          integer DEFAULT (rcll.recall_defaults()).channel_limit,
    dense_weight           double precision DEFAULT 1.0,
    lexical_weight         double precision DEFAULT 1.0,
    graph_weight           double precision DEFAULT 1.0,
    temporal_weight        double precision DEFAULT 1.0,
    entity_weight          double precision DEFAULT 1.0,
    session_weight         double precision DEFAULT 1.0,
    context_weight         double precision DEFAULT 0.0,
    "limit"                integer DEFAULT (rcll.recall_defaults()).candidate_limit)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer, context text)
LANGUAGE sql STABLE
-- SQL, not PL/pgSQL: the output columns (thread, text, ...) would be variables in PL/pgSQL. Each
-- channel is PL/pgSQL with custom plans, so the scope's fields fold as constants where it matters.
AS $$
    -- Channels run one after another inside this statement; a channel with weight 0 is not run.
    WITH d AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_dense(
            query_embedding => recall_candidates.query_embedding, scope => recall_candidates.scope,
            "limit" => recall_candidates.channel_limit) c
        WHERE (recall_candidates.dense_weight > 0 OR recall_candidates.context_weight > 0)
          AND (recall_candidates.query_embedding IS NOT NULL OR rcll._notice(
                'recall: dense channel skipped: no query_embedding was passed',
                'Pass query_embedding (the rcll Python client does), or let rcll.recall embed the query in the database (SELECT rcll.enable_in_database_models(...)).'))
    ), ctx AS (
        -- Context (off by default since the session and entity channels: RESEARCH.md, third round):
        -- the top 100 dense hits and the chunk after each, scored with the chunk before them.
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_context(
            query_embedding => recall_candidates.query_embedding,
            seeds => (SELECT array_agg(d.unit_id) FROM d WHERE d.rank <= 100),
            scope => recall_candidates.scope, "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.context_weight > 0
    ), bm25 AS (
        -- The lexical and session channels share one candidate scan (rcll._bm25_channels).
        SELECT c.channel, c.unit_id, c.score, c.rank FROM rcll._bm25_channels(
            query => recall_candidates.query, scope => recall_candidates.scope,
            query_embedding => recall_candidates.query_embedding, "limit" => recall_candidates.channel_limit,
            lexical => recall_candidates.lexical_weight > 0, session => recall_candidates.session_weight > 0) c
    ), l AS (
        SELECT bm25.unit_id, bm25.score, bm25.rank FROM bm25 WHERE bm25.channel = 'lexical'
    ), g AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_graph(
            query => recall_candidates.query, scope => recall_candidates.scope, "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.graph_weight > 0
    ), t AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_temporal(
            query => recall_candidates.query, scope => recall_candidates.scope,
            time_range => recall_candidates.time_range, reference_time => recall_candidates.reference_time,
            query_embedding => recall_candidates.query_embedding, "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.temporal_weight > 0
    ), e AS (
        -- Without the embedding of the query minus its names, the query's own (psql: still works).
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_entity(
            query => recall_candidates.query, scope => recall_candidates.scope,
            query_embedding => coalesce(recall_candidates.entity_query_embedding, recall_candidates.query_embedding),
            "limit" => recall_candidates.channel_limit) c
        WHERE recall_candidates.entity_weight > 0
    ), s AS (
        SELECT bm25.unit_id, bm25.score, bm25.rank FROM bm25 WHERE bm25.channel = 'session'
    ), hits AS (
        SELECT d.unit_id, d.score, d.rank, 'd' AS ch, recall_candidates.dense_weight AS w FROM d
        WHERE recall_candidates.dense_weight > 0
        UNION ALL SELECT ctx.unit_id, ctx.score, ctx.rank, 'x', recall_candidates.context_weight FROM ctx
        UNION ALL SELECT l.unit_id, l.score, l.rank, 'l', recall_candidates.lexical_weight FROM l
        UNION ALL SELECT g.unit_id, g.score, g.rank, 'g', recall_candidates.graph_weight FROM g
        UNION ALL SELECT t.unit_id, t.score, t.rank, 't', recall_candidates.temporal_weight FROM t
        UNION ALL SELECT e.unit_id, e.score, e.rank, 'e', recall_candidates.entity_weight FROM e
        UNION ALL SELECT s.unit_id, s.score, s.rank, 's', recall_candidates.session_weight FROM s
    ), z AS (
        -- Z-score sum (bench/locomo/RESEARCH.md, third round): each channel's scores standardised
        -- over the list it returned for this query, z = (score - mean) / sd (population sd); a
        -- unit a channel did not return counts that channel's lowest z; a channel with fewer than
        -- two hits or flat scores says nothing about order and adds nothing. No k, no fitted
        -- weight: the channel that is sure of something this time (its top far above its own
        -- distribution) decides more, and a channel with nothing to say (no date, no name in the
        -- query) is silent. The weights only scale a channel's z (default 1).
        SELECT h.unit_id, h.rank, h.ch, h.w,
               CASE WHEN count(*) OVER c >= 2 AND stddev_pop(h.score) OVER c > 1e-12 * greatest(abs(avg(h.score) OVER c), 1)
                    THEN (h.score - avg(h.score) OVER c) / stddev_pop(h.score) OVER c END AS z
        FROM hits h
        WINDOW c AS (PARTITION BY h.ch)
    ), zmin AS (
        SELECT z.ch, z.w, min(z.z) AS zmin FROM z WHERE z.z IS NOT NULL GROUP BY z.ch, z.w
    ), fused AS (
        -- fused = sum over channels of w * z, a missing unit at the channel's lowest z: the sum of
        -- every channel's w * zmin, plus w * (z - zmin) where the unit was found. A unit only a
        -- silent channel found keeps the base (it follows every unit a speaking channel found).
        SELECT z.unit_id,
               (SELECT coalesce(sum(m.w * m.zmin), 0) FROM zmin m)
                 + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.z IS NOT NULL), 0) AS score,
               min(z.rank) FILTER (WHERE z.ch = 'd') AS rd,
               min(z.rank) FILTER (WHERE z.ch = 'l') AS rl,
               min(z.rank) FILTER (WHERE z.ch = 'g') AS rg,
               min(z.rank) FILTER (WHERE z.ch = 't') AS rt,
               min(z.rank) FILTER (WHERE z.ch = 'x') AS rx,
               min(z.rank) FILTER (WHERE z.ch = 'e') AS re,
               min(z.rank) FILTER (WHERE z.ch = 's') AS rs
        FROM z LEFT JOIN zmin m ON m.ch = z.ch
        GROUP BY z.unit_id
        ORDER BY score DESC, z.unit_id
        LIMIT greatest(coalesce(recall_candidates."limit", (rcll.recall_defaults()).candidate_limit), 0)
    )
    SELECT u.unit_id, u.text, u.room, u.hall, u.layer, u.author, u.thread, u.tags, u.valid, u.occurred_start,
           u.mentioned_at, u.document_id, u.provenance, f.score, f.rd, f.rl, f.rg, f.rt, f.rx, f.re, f.rs,
           -- the end of the chunk before: what this one answers or continues (16 words keep the
           -- cross-encoder's second view short; on LoCoMo the whole chunk scored no better)
           rcll._last_words(p.preceding_text, 16)
    FROM fused f JOIN rcll.memory_units u ON u.unit_id = f.unit_id
    LEFT JOIN rcll.preceding_units(
        unit_ids => (SELECT array_agg(fused.unit_id) FROM fused), scope => recall_candidates.scope) p ON p.unit_id = f.unit_id
    ORDER BY f.score DESC, f.unit_id
$$;
COMMENT ON FUNCTION rcll.recall_candidates(text, rcll.recall_scope, vector, vector, tstzrange, timestamptz, integer, double precision, double precision, double precision, double precision, double precision, double precision, double precision, integer)
    IS 'Recall without the rerank: the dense, lexical, graph, temporal, entity (who: units linked to an entity the query names, ranked by entity_query_embedding - the query without its names, rcll.query_without_entities - else query_embedding) and session (where: documents by BM25 over their whole text) channels, each at most channel_limit units, all filtered before ranking, fused by a per-query z-score sum: each channel''s scores standardised over its own list, a unit it did not return at its lowest z, a channel with fewer than two hits or flat scores silent; fused_score = sum of weight * z. The context channel (dense hits read with the chunk before them) runs only with context_weight > 0. Each row: the unit, its axes, the fused score, its rank in each channel (NULL = not found there) and context, the last 16 words of the chunk before it in its document when that chunk passes the same scope (the reranker''s second view). What it may read is one value, scope (rcll.recall_scope: bank, rooms, authors, filters), built once by the caller and passed to every channel; a weight of 0 skips a channel. Without query_embedding the dense channel is skipped (NOTICE). From psql: SELECT * FROM rcll.recall_candidates(''deploy'', rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';
