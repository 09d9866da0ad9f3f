-- Dense channel: cosine similarity to the query embedding, filtered before ranking, routed by filtered-set size.

CREATE OR REPLACE FUNCTION rcll.channel_dense(
    query_embedding vector,
    scope           rcll.recall_scope,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    exact_below     integer DEFAULT 3000)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
-- Custom plans: with the filter values folded in as constants, the NULL branches of the filter
-- disappear and the planner sees the real selectivity of each one.
SET plan_cache_mode = force_custom_plan
-- HNSW with a filter: keep scanning until enough rows pass it (never iterative_scan = off, which
-- returns almost nothing for selective filters); relaxed order is re-sorted below.
SET hnsw.iterative_scan = relaxed_order
-- HNSW's candidate list: at least the rows asked for (pgvector: one pass returns at most
-- ef_search rows; below the LIMIT the iterative scan restarts from a worse frontier), with a third
-- more for rows the scope drops: 400 for the default channel_limit of 300 (a test keeps it above).
SET hnsw.ef_search = 400
AS $$
#variable_conflict use_column
DECLARE
    b    integer := (scope).bank_id;
    q    public.vector := channel_dense.query_embedding;
    lim  integer := greatest(coalesce(channel_dense."limit", (rcll.recall_defaults()).channel_limit), 0);
    n    integer;
BEGIN
    IF q IS NULL OR lim = 0 THEN
        RETURN;
    END IF;
    -- How big is the filtered set? An upper bound first, from btree index-only scans that stop
    -- at exact_below + 1 entries (well under a millisecond each): the bank's rooms, and for each
    -- further filter that has a (bank_id, column) index, that filter alone; the conjunction is
    -- at most the smallest. Only tag filters (GIN, no index-only scan) may still shrink a big
    -- bound: then the filtered rows themselves are counted, up to exact_below + 1.
    SELECT count(*) INTO n FROM (
        SELECT 1 FROM rcll.memory_units u
        WHERE u.bank_id = b AND ((scope).rooms IS NULL OR u.room = ANY ((scope).rooms))
        LIMIT exact_below + 1) s;
    IF n > exact_below AND (scope).authors IS NOT NULL AND NOT (scope).include_unattributed THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.author = ANY ((scope).authors) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND (scope).thread IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.thread = (scope).thread LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND (scope).halls IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.hall = ANY ((scope).halls) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND (scope).layers IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.layer = ANY ((scope).layers) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND ((scope).tags_any IS NOT NULL OR (scope).tags_all IS NOT NULL
                            OR ((scope).authors IS NOT NULL AND (scope).include_unattributed)) THEN
        SELECT count(*) INTO n FROM (
            SELECT 1 FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
            LIMIT exact_below + 1) s;
    END IF;

    IF n <= exact_below THEN
        -- Small filtered set: exact scan (recall 1.0, under a millisecond per thousand rows).
        -- MATERIALIZED keeps the planner from answering the ORDER BY with the HNSW index.
        RETURN QUERY
        WITH f AS MATERIALIZED (
            SELECT u.unit_id, u.embedding FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope))
        SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id))::integer
        FROM (SELECT f.unit_id, f.embedding OPERATOR(public.<=>) q AS dist FROM f ORDER BY 2, 1 LIMIT lim) d
        ORDER BY 3;
    ELSE
        -- Large filtered set: HNSW iterative scan, then re-sorted (relaxed_order may return rows
        -- slightly out of order).
        RETURN QUERY
        SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id))::integer
        FROM (
            SELECT u.unit_id, u.embedding OPERATOR(public.<=>) q AS dist FROM rcll.memory_units u
            WHERE rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
            ORDER BY u.embedding OPERATOR(public.<=>) q
            LIMIT lim) d
        ORDER BY 3;
    END IF;
END
$$;
COMMENT ON FUNCTION rcll.channel_dense(vector, rcll.recall_scope, integer, integer)
    IS 'Dense recall channel: units ranked by cosine similarity to query_embedding (score = 1 - cosine distance), filtered before ranking by the scope (rcll.recall_scope: bank, rooms with aliases expanded, authors, halls, layers, tags, thread, validity). Filtered sets of at most exact_below units are scanned exactly; larger ones use the HNSW index with iterative scans. From psql: SELECT * FROM rcll.channel_dense(<embedding>, rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';
