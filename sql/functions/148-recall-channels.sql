-- Recall phase 2: every channel's ranked list, before fusion - one call for all of them, or any subset.

CREATE OR REPLACE FUNCTION rcll._known_channels(channels text[])
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    known constant text[] := rcll.recall_channel_names();
    bad   text;
BEGIN
    SELECT c INTO bad FROM unnest(channels) c WHERE c IS NULL OR c <> ALL (known) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'channels: % is not a recall channel', coalesce('"' || bad || '"', 'NULL')
            USING ERRCODE = 'RC001', COLUMN = 'channels', HINT = 'Name channels among ' || array_to_string(known, ', ') || ', or pass NULL for all.';
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION rcll._known_channels(text[]) IS 'Internal: true when every name in channels is a recall channel (NULL: all), else an error naming the one that is not.';

CREATE OR REPLACE FUNCTION rcll.recall_channels(
    query                  text,
    scope                  rcll.recall_scope,
    query_embedding        vector DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL,
    time_range             tstzrange DEFAULT NULL,
    reference_time         timestamptz DEFAULT now(),
    channel_limit          integer DEFAULT (rcll.recall_defaults()).channel_limit,
    weights                rcll.channel_weights DEFAULT rcll.channel_weights(),
    channels               text[] DEFAULT NULL,
    deadline_ms            integer DEFAULT NULL)
RETURNS TABLE (channel text, unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
-- SQL, not PL/pgSQL: the output columns would be variables in PL/pgSQL. Each channel is PL/pgSQL
-- with custom plans, so the scope's fields fold as constants where it matters.
AS $$
    -- Channels run one after another inside this statement; a channel with weight 0, or not named
    -- in `channels`, is not run. A client that wants them side by side calls this once per subset
    -- on connections of its own and fuses the lists with rcll.fuse_candidates (rcll.recall does).
    -- With deadline_ms (counted from the statement's start, as everywhere), each channel starts
    -- only while the deadline leaves it time (rcll._channel_starts): that check is in each
    -- channel's WHERE, reads none of its rows and is STABLE, so the planner makes it the channel's
    -- one-time filter, evaluated when the channel's turn comes; a channel it stops never runs.
    -- Without deadline_ms the check is not even called, and the statement does what it did before.
    WITH run AS (
        SELECT rcll._channels_in_run_order(recall_channels.weights, recall_channels.channels) AS channels
    ), d AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_dense(
            query_embedding => recall_channels.query_embedding, scope => recall_channels.scope,
            "limit" => recall_channels.channel_limit) c
        WHERE (rcll._channel_runs('dense', recall_channels.weights, recall_channels.channels)
               OR rcll._channel_runs('context', recall_channels.weights, recall_channels.channels))
          AND (recall_channels.query_embedding IS NOT NULL OR rcll._notice(
                'recall: dense channel skipped: no query_embedding was passed',
                'Pass query_embedding (the rcll Python client does), or let rcll.recall embed the query in the database (SELECT rcll.enable_in_database_models(...)).'))
          AND (recall_channels.deadline_ms IS NULL OR rcll._channel_starts(
                CASE WHEN rcll._channel_runs('dense', recall_channels.weights, recall_channels.channels)
                     THEN 'dense' ELSE 'context' END, recall_channels.deadline_ms, (SELECT run.channels FROM run)))
    ), ctx AS (
        -- Context (off by default since the session and entity channels: research/locomo/RESEARCH.md, third round):
        -- the top 100 dense hits and the chunk after each, scored with the chunk before them.
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_context(
            query_embedding => recall_channels.query_embedding,
            seeds => (SELECT array_agg(d.unit_id) FROM d WHERE d.rank <= 100),
            scope => recall_channels.scope, "limit" => recall_channels.channel_limit) c
        WHERE rcll._channel_runs('context', recall_channels.weights, recall_channels.channels)
          AND (recall_channels.deadline_ms IS NULL OR rcll._channel_starts('context', recall_channels.deadline_ms, (SELECT run.channels FROM run)))
    ), bm25 AS (
        -- The lexical and session channels share one candidate scan (rcll._bm25_channels).
        SELECT c.channel, c.unit_id, c.score, c.rank FROM rcll._bm25_channels(
            query => recall_channels.query, scope => recall_channels.scope,
            query_embedding => recall_channels.query_embedding, "limit" => recall_channels.channel_limit,
            -- arguments, evaluated in this order when the scan starts: the lexical channel's
            -- check (it always runs: it only counts the step), then the session channel's
            lexical => rcll._channel_runs('lexical', recall_channels.weights, recall_channels.channels)
                       AND (recall_channels.deadline_ms IS NULL OR rcll._channel_starts('lexical', recall_channels.deadline_ms, (SELECT run.channels FROM run))),
            session => rcll._channel_runs('session', recall_channels.weights, recall_channels.channels)
                       AND (recall_channels.deadline_ms IS NULL OR rcll._channel_starts('session', recall_channels.deadline_ms, (SELECT run.channels FROM run)))) c
    ), g AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_graph(
            query => recall_channels.query, scope => recall_channels.scope, "limit" => recall_channels.channel_limit) c
        WHERE rcll._channel_runs('graph', recall_channels.weights, recall_channels.channels)
          AND (recall_channels.deadline_ms IS NULL OR rcll._channel_starts('graph', recall_channels.deadline_ms, (SELECT run.channels FROM run)))
    ), t AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_temporal(
            query => recall_channels.query, scope => recall_channels.scope,
            time_range => recall_channels.time_range, reference_time => recall_channels.reference_time,
            query_embedding => recall_channels.query_embedding, "limit" => recall_channels.channel_limit) c
        WHERE rcll._channel_runs('temporal', recall_channels.weights, recall_channels.channels)
          AND (recall_channels.deadline_ms IS NULL OR rcll._channel_starts('temporal', recall_channels.deadline_ms, (SELECT run.channels FROM run)))
    ), e AS (
        -- Without the embedding of the query minus its names, the query's own (psql: still works).
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_entity(
            query => recall_channels.query, scope => recall_channels.scope,
            query_embedding => coalesce(recall_channels.entity_query_embedding, recall_channels.query_embedding),
            "limit" => recall_channels.channel_limit) c
        WHERE rcll._channel_runs('entity', recall_channels.weights, recall_channels.channels)
          AND (recall_channels.deadline_ms IS NULL OR rcll._channel_starts('entity', recall_channels.deadline_ms, (SELECT run.channels FROM run)))
    )
    SELECT x.* FROM (
        SELECT 'dense'::text AS channel, d.unit_id, d.score, d.rank FROM d
        WHERE rcll._channel_runs('dense', recall_channels.weights, recall_channels.channels)
        UNION ALL SELECT 'context', ctx.unit_id, ctx.score, ctx.rank FROM ctx
        UNION ALL SELECT bm25.channel, bm25.unit_id, bm25.score, bm25.rank FROM bm25
        UNION ALL SELECT 'graph', g.unit_id, g.score, g.rank FROM g
        UNION ALL SELECT 'temporal', t.unit_id, t.score, t.rank FROM t
        UNION ALL SELECT 'entity', e.unit_id, e.score, e.rank FROM e) x
    -- checked once, before any channel runs: a misspelt name is an error, not an empty list
    WHERE rcll._known_channels(recall_channels.channels)
$$;
COMMENT ON FUNCTION rcll.recall_channels(text, rcll.recall_scope, vector, vector, tstzrange, timestamptz, integer, rcll.channel_weights, text[], integer)
    IS 'Recall phase 2 without the fusion: each channel''s own ranked list (channel = dense, context, lexical, graph, temporal, entity or session; score and rank as that channel gives them), every channel filtered before ranking by scope (rcll.recall_scope). channels (NULL: all) names the ones to run, and a weight of 0 in weights (rcll.channel_weights) skips one too; the context channel runs only with a context weight above 0. rcll.fuse_candidates fuses the lists; rcll.recall_candidates is the two in one call. Clients run subsets on separate connections side by side and fuse afterwards. deadline_ms (default none; counted from the statement''s start) starts each channel, in the order dense, context, lexical, session, graph, temporal, entity, only while the time spent plus the mean time of the channels run so far (twice that for the lexical and session channels'' one scan) leaves 15% of it (at least 40 ms) for the fusion and the rerank; the first that does not fit and every later one are skipped (one NOTICE names them), except the lexical channel when no channel ran before it (a recall is never empty for want of time). From psql: SELECT * FROM rcll.recall_channels(''deploy'', rcll.recall_scope(''fleet''), channels => ''{lexical,session}'').';
