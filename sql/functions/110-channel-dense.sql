-- Dense channel: cosine similarity to the query embedding, filtered before ranking, routed by filtered-set size.

CREATE OR REPLACE FUNCTION rcll.channel_dense(
    query_embedding      vector,
    bank                 text,
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
    "limit"              integer DEFAULT 300,
    exact_below          integer DEFAULT 3000)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
-- Custom plans: with the filter values folded in as constants, the NULL branches of the filter
-- disappear and the planner sees the real selectivity of each one.
SET plan_cache_mode = force_custom_plan
-- HNSW with a filter: keep scanning until enough rows pass it (never iterative_scan = off, which
-- returns almost nothing for selective filters); relaxed order is re-sorted below.
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 100
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    b    integer := rcll._bank_id(channel_dense.bank);
    rs   text[]  := rcll._expand_rooms(b, channel_dense.rooms);
    auth text[]  := rcll._recall_authors(channel_dense.authors, channel_dense.mine);
    q    public.vector :=  channel_dense.query_embedding;
    lim  integer := greatest(coalesce(channel_dense."limit", 300), 0);
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
        WHERE u.bank_id = b AND (rs IS NULL OR u.room = ANY (rs))
        LIMIT exact_below + 1) s;
    IF n > exact_below AND auth IS NOT NULL AND NOT channel_dense.include_unattributed THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.author = ANY (auth) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND channel_dense.thread IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.thread = channel_dense.thread LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND channel_dense.halls IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.hall = ANY (channel_dense.halls) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND channel_dense.layers IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.layer = ANY (channel_dense.layers) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND (channel_dense.tags_any IS NOT NULL OR channel_dense.tags_all IS NOT NULL
                            OR (auth IS NOT NULL AND channel_dense.include_unattributed)) THEN
        SELECT count(*) INTO n FROM (
            SELECT 1 FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_scope(u, b, rs, auth, channel_dense.include_unattributed, channel_dense.halls, channel_dense.layers,
                                 channel_dense.tags_any, channel_dense.tags_all, channel_dense.thread, channel_dense.as_of)
            LIMIT exact_below + 1) s;
    END IF;

    IF n <= exact_below THEN
        -- Small filtered set: exact scan (recall 1.0, under a millisecond per thousand rows).
        -- MATERIALIZED keeps the planner from answering the ORDER BY with the HNSW index.
        RETURN QUERY
        WITH f AS MATERIALIZED (
            SELECT u.unit_id, u.embedding FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_scope(u, b, rs, auth, channel_dense.include_unattributed, channel_dense.halls, channel_dense.layers,
                                 channel_dense.tags_any, channel_dense.tags_all, channel_dense.thread, channel_dense.as_of))
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
            WHERE rcll._in_scope(u, b, rs, auth, channel_dense.include_unattributed, channel_dense.halls, channel_dense.layers,
                                 channel_dense.tags_any, channel_dense.tags_all, channel_dense.thread, channel_dense.as_of)
            ORDER BY u.embedding OPERATOR(public.<=>) q
            LIMIT lim) d
        ORDER BY 3;
    END IF;
END
$$;
COMMENT ON FUNCTION rcll.channel_dense(vector, text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, integer, integer)
    IS 'Dense recall channel: units ranked by cosine similarity to query_embedding (score = 1 - cosine distance), filtered before ranking by bank, rooms (aliases expanded), authors, halls, layers, tags, thread and validity. Filtered sets of at most exact_below units are scanned exactly; larger ones use the HNSW index with iterative scans.';
