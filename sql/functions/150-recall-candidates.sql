-- Recall phase 3: the channels' lists fused by a per-query z-score sum; and phases 2-3 in one call.

CREATE OR REPLACE FUNCTION rcll.fuse_candidates(
    scope           rcll.recall_scope,
    channels        text[],
    unit_ids        bigint[],
    scores          double precision[],
    ranks           integer[],
    weights         rcll.channel_weights DEFAULT rcll.channel_weights(),
    "limit"         integer DEFAULT (rcll.recall_defaults()).candidate_limit)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer, context text)
LANGUAGE sql STABLE
AS $$
    WITH hits AS (
        -- One row per (channel, unit): rcll.recall_channels' rows, as four parallel arrays, each
        -- with its channel's weight (the weights' array made once per call, a constant to each row).
        SELECT h.channel AS ch, h.unit_id, h.score, h.rank,
               coalesce((SELECT rcll._weight_array(fuse_candidates.weights))[array_position(rcll.recall_channel_names(), h.channel)],
                        -- a list under a name that is no channel is an error, not a list
                        -- silently dropped; only such a row (or a NULL weight) evaluates this
                        CASE WHEN rcll._known_channels(ARRAY[h.channel]) THEN NULL::double precision END) AS w
        FROM unnest(fuse_candidates.channels, fuse_candidates.unit_ids, fuse_candidates.scores,
                    fuse_candidates.ranks) AS h(channel, unit_id, score, rank)
    ), z AS (
        -- Z-score sum (research/locomo/RESEARCH.md, third round): each channel's scores standardised
        -- over the list it returned for this query, z = (score - mean) / sd (population sd); a
        -- unit a channel did not return counts that channel's lowest z; a channel with fewer than
        -- two hits or flat scores says nothing about order and adds nothing. No k, no fitted
        -- weight: the channel that is sure of something this time (its top far above its own
        -- distribution) decides more, and a channel with nothing to say (no date, no name in the
        -- query) is silent. The weights only scale a channel's z (default 1). Each channel's rows
        -- are read in rank order, so the fused scores do not depend on the order the lists arrived
        -- in (one call, or several side by side): every sum below sees its rows in that order.
        SELECT h.unit_id, h.rank, h.ch, h.w,
               CASE WHEN count(*) OVER c >= 2 AND stddev_pop(h.score) OVER c > 1e-12 * greatest(abs(avg(h.score) OVER c), 1)
                    THEN (h.score - avg(h.score) OVER c) / stddev_pop(h.score) OVER c END AS z
        FROM hits h
        WHERE h.w > 0
        WINDOW c AS (PARTITION BY h.ch ORDER BY h.rank, h.unit_id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
    ), zmin AS (
        SELECT z.ch, z.w, min(z.z) AS zmin FROM z WHERE z.z IS NOT NULL GROUP BY z.ch, z.w
    ), fused AS (
        -- fused = sum over channels of w * z, a missing unit at the channel's lowest z: the sum of
        -- every channel's w * zmin, plus w * (z - zmin) where the unit was found. A unit only a
        -- silent channel found keeps the base (it follows every unit a speaking channel found).
        -- A unit's channels are summed in channel-name order, never in an order its id could
        -- change: one term per channel (a unit is in a channel's list once), added left to right in
        -- that order, a channel that did not find it adding 0 (exact: the same float as a sum
        -- ordered by channel, without a sort per unit). The base is summed in channel-name order
        -- too: zmin's rows come in the order the lists arrived (one call, or side by side), and a
        -- float sum in another order can differ in its last bit.
        SELECT z.unit_id,
               (SELECT coalesce(sum(m.w * m.zmin ORDER BY m.ch), 0) FROM zmin m)
                 + (coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.ch = 'context' AND z.z IS NOT NULL), 0)
                    + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.ch = 'dense' AND z.z IS NOT NULL), 0)
                    + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.ch = 'entity' AND z.z IS NOT NULL), 0)
                    + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.ch = 'graph' AND z.z IS NOT NULL), 0)
                    + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.ch = 'lexical' AND z.z IS NOT NULL), 0)
                    + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.ch = 'session' AND z.z IS NOT NULL), 0)
                    + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.ch = 'temporal' AND z.z IS NOT NULL), 0)) AS score,
               min(z.rank) FILTER (WHERE z.ch = 'dense') AS rd,
               min(z.rank) FILTER (WHERE z.ch = 'lexical') AS rl,
               min(z.rank) FILTER (WHERE z.ch = 'graph') AS rg,
               min(z.rank) FILTER (WHERE z.ch = 'temporal') AS rt,
               min(z.rank) FILTER (WHERE z.ch = 'context') AS rx,
               min(z.rank) FILTER (WHERE z.ch = 'entity') AS re,
               min(z.rank) FILTER (WHERE z.ch = 'session') AS rs
        FROM z LEFT JOIN zmin m ON m.ch = z.ch
        GROUP BY z.unit_id
        ORDER BY score DESC, z.unit_id
        LIMIT greatest(coalesce(fuse_candidates."limit", (rcll.recall_defaults()).candidate_limit), 0)
    ), kept AS (
        -- The scope is applied again to the units themselves: lists read on other connections
        -- (side by side) saw their own snapshot, so a unit moved out of scope, superseded or
        -- deleted since is dropped here, not returned (the answer is then one shorter). Within
        -- one call it drops nothing. After the limit: the wide rows are read for those units only.
        SELECT f.*, u.text, u.room, u.hall, u.layer, u.author, u.thread, u.tags, u.valid, u.occurred_start,
               u.mentioned_at, u.document_id, u.provenance
        FROM fused f JOIN rcll.memory_units u ON u.unit_id = f.unit_id
        WHERE rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, fuse_candidates.scope)
    )
    SELECT k.unit_id, k.text, k.room, k.hall, k.layer, k.author, k.thread, k.tags, k.valid, k.occurred_start,
           k.mentioned_at, k.document_id, k.provenance, k.score, k.rd, k.rl, k.rg, k.rt, k.rx, k.re, k.rs,
           -- the end of the chunk before: what this one answers or continues (16 words keep the
           -- cross-encoder's second view short; on LoCoMo the whole chunk scored no better)
           rcll._last_words(p.preceding_text, 16)
    FROM kept k
    LEFT JOIN rcll.preceding_units(
        unit_ids => (SELECT array_agg(kept.unit_id) FROM kept), scope => fuse_candidates.scope) p ON p.unit_id = k.unit_id
    ORDER BY k.score DESC, k.unit_id
$$;
COMMENT ON FUNCTION rcll.fuse_candidates(rcll.recall_scope, text[], bigint[], double precision[], integer[], rcll.channel_weights, integer)
    IS 'Recall phase 3: channel lists (rcll.recall_channels'' rows as the parallel arrays channels, unit_ids, scores, ranks) fused by a per-query z-score sum: each channel''s scores standardised over its own list, a unit it did not return at its lowest z, a channel with fewer than two hits or flat scores silent; fused_score = sum of weight * z, the weights one value (rcll.channel_weights; a weight of 0 drops a channel). Of the best "limit" units, those that pass scope now (a unit out of it is dropped, not replaced), each with its axes, the fused score, its rank in each channel (NULL = not found there) and context, the last 16 words of the chunk before it in its document when that chunk passes the same scope (the reranker''s second view). Lists read side by side on several connections fuse exactly as lists read in one call.';

CREATE OR REPLACE FUNCTION rcll._text_query_embedding(query text)
RETURNS vector
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- PL/pgSQL, so that the model phase (sql/functions/175) may be defined after this file.
    -- Without models: NULL, and rcll.recall_channels' NOTICE says the dense channel is skipped.
    IF rcll._model_source() IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN rcll._model_embed(query, NULL, 'the dense channel is skipped');
END
$$;
COMMENT ON FUNCTION rcll._text_query_embedding(text)
    IS 'Internal: a text-only rcll.recall_candidates'' query embedding, from the model service or the in-database models (rcll._model_embed); NULL without models.';

CREATE OR REPLACE FUNCTION rcll._text_query_entity_embedding(query text, bank_id integer)
RETURNS vector
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN rcll._recall_entity_embedding(query, bank_id, NULL);
END
$$;
COMMENT ON FUNCTION rcll._text_query_entity_embedding(text, integer)
    IS 'Internal: a text-only rcll.recall_candidates'' entity-channel embedding (rcll._recall_entity_embedding: the query without the entities it names, embedded where the models are; NULL without models or names).';

CREATE OR REPLACE FUNCTION rcll.recall_candidates(
    query                  text,
    scope                  rcll.recall_scope,
    query_embedding        vector DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL,
    time_range             tstzrange DEFAULT NULL,
    reference_time         timestamptz DEFAULT now(),
    channel_limit          integer DEFAULT (rcll.recall_defaults()).channel_limit,
    weights                rcll.channel_weights DEFAULT rcll.channel_weights(),
    "limit"                integer DEFAULT (rcll.recall_defaults()).candidate_limit,
    deadline_ms            integer DEFAULT NULL)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer, context text)
LANGUAGE sql STABLE
AS $$
    -- Phase 2 then phase 3, in one statement: the channels one after another, then their fusion.
    SELECT f.*
    FROM (SELECT array_agg(c.channel) AS channels, array_agg(c.unit_id) AS unit_ids,
                 array_agg(c.score) AS scores, array_agg(c.rank) AS ranks
          FROM rcll.recall_channels(
              query => recall_candidates.query, scope => recall_candidates.scope,
              -- A text query alone is embedded where the models are (the model service, or
              -- in-database models): rcll._recall_embedding, as rcll.recall does.
              query_embedding => coalesce(recall_candidates.query_embedding,
                                          rcll._text_query_embedding(recall_candidates.query)),
              entity_query_embedding => CASE WHEN recall_candidates.query_embedding IS NULL
                  THEN coalesce(recall_candidates.entity_query_embedding,
                                rcll._text_query_entity_embedding(recall_candidates.query, (recall_candidates.scope).bank_id))
                  ELSE recall_candidates.entity_query_embedding END,
              time_range => recall_candidates.time_range, reference_time => recall_candidates.reference_time,
              channel_limit => recall_candidates.channel_limit, weights => recall_candidates.weights,
              deadline_ms => recall_candidates.deadline_ms) c) h
    CROSS JOIN LATERAL rcll.fuse_candidates(
        scope => recall_candidates.scope, channels => h.channels, unit_ids => h.unit_ids, scores => h.scores,
        ranks => h.ranks, weights => recall_candidates.weights, "limit" => recall_candidates."limit") f
    ORDER BY f.fused_score DESC, f.unit_id
$$;
COMMENT ON FUNCTION rcll.recall_candidates(text, rcll.recall_scope, vector, vector, tstzrange, timestamptz, integer, rcll.channel_weights, integer, integer)
    IS 'Recall without the rerank: the dense, lexical, graph, temporal, entity (who: units linked to an entity the query names, ranked by entity_query_embedding - the query without its names, rcll.query_without_entities - else query_embedding) and session (where: documents by BM25 over their whole text) channels, each at most channel_limit units, all filtered before ranking, fused by a per-query z-score sum: each channel''s scores standardised over its own list, a unit it did not return at its lowest z, a channel with fewer than two hits or flat scores silent; fused_score = sum of weight * z, the weights one value (rcll.channel_weights: each channel''s, 0 skips it). The context channel (dense hits read with the chunk before them) runs only with a context weight above 0. Each row: the unit, its axes, the fused score, its rank in each channel (NULL = not found there) and context, the last 16 words of the chunk before it in its document when that chunk passes the same scope (the reranker''s second view). What it may read is one value, scope (rcll.recall_scope: bank, rooms, authors, filters), built once by the caller and passed to every channel; so are the weights. Without query_embedding the query is embedded by the model service or the in-database models where registered (rcll.use_model_service, rcll.enable_in_database_models), else the dense channel is skipped (NOTICE). deadline_ms (default none; counted from the statement''s start) bounds the channels: each starts only while the deadline leaves it time (rcll.recall_channels), the lexical channel when none ran before it. From psql: SELECT * FROM rcll.recall_candidates(''deploy'', rcll.recall_scope(''fleet'', rooms => ''{deployment}''), weights => rcll.channel_weights(graph => 0)).';
