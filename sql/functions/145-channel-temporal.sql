-- Temporal channel: units whose time falls in the range the query names (or the caller passes).

CREATE OR REPLACE FUNCTION rcll._in_time_range(
    occurred_start timestamptz, occurred_end timestamptz, mentioned_at timestamptz, valid tstzrange,
    lo timestamptz, hi timestamptz, hi_mentioned timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): inlined into the channel's queries (as
-- rcll._in_scope, 105-recall-scope.sql), whose custom plans then compare the unit's columns with the
-- range's constants. It takes the unit's columns, not its row, for the reason rcll._in_scope does
-- (each (u).column of a memory_units row cost the planner a copy of the table's row descriptor).
AS $$
    -- A unit's time is when it happened (occurred_start..occurred_end), else when it was said
    -- (mentioned_at), else when it became valid. In range = starts in [lo, hi) - a unit known only
    -- by when it was said, in [lo, hi_mentioned) - or, for an event with an end, spans into it.
    SELECT (coalesce(occurred_start, mentioned_at, lower(valid)) >= lo
            AND coalesce(occurred_start, mentioned_at, lower(valid)) < hi_mentioned
            AND (occurred_start IS NOT NULL OR mentioned_at IS NULL OR mentioned_at < hi_mentioned)
            AND (occurred_start IS NULL OR occurred_start < hi))
        OR (occurred_end IS NOT NULL AND occurred_start < lo AND occurred_end >= lo)
$$;
COMMENT ON FUNCTION rcll._in_time_range(timestamptz, timestamptz, timestamptz, tstzrange, timestamptz, timestamptz, timestamptz)
    IS 'Internal: whether a unit''s time (occurred_start..occurred_end, else mentioned_at, else the start of validity; the unit''s columns) falls in [lo, hi) - up to hi_mentioned for a unit known only by when it was said. Inlined into rcll.channel_temporal''s queries.';

CREATE OR REPLACE FUNCTION rcll.channel_temporal(
    query           text,
    scope           rcll.recall_scope,
    time_range      tstzrange DEFAULT NULL,
    reference_time  timestamptz DEFAULT now(),
    query_embedding vector DEFAULT NULL,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    scan_limit      integer DEFAULT 5000,
    mention_slack   interval DEFAULT '7 days')
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 400      -- as rcll.channel_dense (110): above the default channel_limit
AS $$
#variable_conflict use_column
DECLARE
    lim    integer := greatest(coalesce(channel_temporal."limit", (rcll.recall_defaults()).channel_limit), 0);
    r      tstzrange := coalesce(channel_temporal.time_range,
                                 rcll.parse_time_range(channel_temporal.query, coalesce(channel_temporal.reference_time, now())));
    lo     timestamptz;
    hi     timestamptz;
    hi_mentioned timestamptz;
    anchor timestamptz;
BEGIN
    IF r IS NULL OR isempty(r) OR lim = 0 THEN
        RETURN;
    END IF;
    lo := coalesce(lower(r), '-infinity');
    hi := coalesce(upper(r), 'infinity');
    IF upper_inc(r) THEN
        hi := hi + interval '1 microsecond';
    END IF;
    -- Things are talked about after they happen: a unit known only by when it was said (a chunk)
    -- matches if it was said in the range or up to mention_slack after it.
    hi_mentioned := hi + coalesce(channel_temporal.mention_slack, interval '0');
    -- Closeness is measured to the middle of a bounded range, or to its one finite end.
    anchor := CASE WHEN lower(r) IS NOT NULL AND upper(r) IS NOT NULL THEN lower(r) + (upper(r) - lower(r)) / 2
                   ELSE coalesce(lower(r), upper(r), reference_time) END;

    IF channel_temporal.query_embedding IS NOT NULL THEN
        -- Within the range, the query's meaning orders units: a dense search filtered by time.
        -- With the filter values as constants the planner picks, from the statistics of the
        -- time index, an exact scan of a narrow range or an HNSW iterative scan of a wide one.
        RETURN QUERY
        SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id DESC))::integer
        FROM (
            SELECT u.unit_id, u.embedding OPERATOR(public.<=>) channel_temporal.query_embedding AS dist
            FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_time_range(u.occurred_start, u.occurred_end, u.mentioned_at, u.valid, lo, hi, hi_mentioned)
              AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
            ORDER BY u.embedding OPERATOR(public.<=>) channel_temporal.query_embedding
            LIMIT lim) d
        ORDER BY 3;
        RETURN;
    END IF;
    -- Without an embedding: closeness in time to the range (the first scan_limit units found).
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT u.unit_id, coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) AS t
        FROM rcll.memory_units u
        WHERE rcll._in_time_range(u.occurred_start, u.occurred_end, u.mentioned_at, u.valid, lo, hi, hi_mentioned)
          AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
        LIMIT greatest(coalesce(channel_temporal.scan_limit, 5000), lim)
    ), s AS (
        SELECT c.unit_id, 1 / (1 + abs(extract(epoch FROM c.t - anchor)::double precision) / 86400) AS score
        FROM c
    )
    SELECT s.unit_id, s.score, (row_number() OVER (ORDER BY s.score DESC, s.unit_id DESC))::integer
    FROM s
    ORDER BY s.score DESC, s.unit_id DESC
    LIMIT lim;
END
$$;
COMMENT ON FUNCTION rcll.channel_temporal(text, rcll.recall_scope, tstzrange, timestamptz, vector, integer, integer, interval)
    IS 'Temporal recall channel: units whose time (occurred_start..occurred_end, else mentioned_at, else start of validity) falls in time_range (a unit known only by mentioned_at also up to mention_slack after it: things are said after they happen), or in the range rcll.parse_time_range finds in the query relative to reference_time; ordered by similarity to query_embedding when given, else by closeness to the range. Empty when the query names no time. Filtered before ranking by the scope (rcll.recall_scope). From psql: SELECT * FROM rcll.channel_temporal(''what did we decide last week'', rcll.recall_scope(''fleet'')).';
