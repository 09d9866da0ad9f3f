-- Context: a unit read together with the chunk before it in its document.
--
-- In a conversation or a long text a chunk's meaning often sits partly in the chunk before it: an
-- answer ("Yes, last Friday!") means something only after its question. The context channel
-- ranks a unit by the mean of its own and its predecessor's similarity to the query, so the reply
-- to a matching question comes back even when its own words do not match. It costs nothing at
-- write time: it starts from the dense channel's hits, and adds the chunk after each of them.

CREATE OR REPLACE FUNCTION rcll.preceding_units(
    unit_ids             bigint[],
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
    as_of                timestamptz DEFAULT now())
RETURNS TABLE (unit_id bigint, preceding_id bigint, preceding_text text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    b    integer := rcll._bank_id(preceding_units.bank);
    rs   text[]  := rcll._expand_rooms(b, preceding_units.rooms);
    auth text[]  := rcll._recall_authors(preceding_units.authors, preceding_units.mine);
BEGIN
    -- The predecessor counts only if the same recall could return it: context never carries
    -- text in from another room, author, thread or validity window.
    RETURN QUERY
    SELECT u.unit_id, p.unit_id, p.text
    FROM rcll.memory_units u
    JOIN rcll.memory_units p ON p.document_id = u.document_id AND p.chunk_index = u.chunk_index - 1
    WHERE u.unit_id = ANY (preceding_units.unit_ids) AND u.bank_id = b
      AND rcll._in_scope(p, b, rs, auth, preceding_units.include_unattributed, preceding_units.halls,
                         preceding_units.layers, preceding_units.tags_any, preceding_units.tags_all,
                         preceding_units.thread, preceding_units.as_of);
END
$$;
COMMENT ON FUNCTION rcll.preceding_units(bigint[], text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz)
    IS 'For each given unit, the chunk right before it in its document (chunk_index - 1), if that chunk passes the same recall filters; units without one are absent. The cross-encoder''s context view reads it.';

CREATE OR REPLACE FUNCTION rcll.channel_context(
    query_embedding      vector,
    seeds                bigint[],
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
    "limit"              integer DEFAULT 300)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    b    integer := rcll._bank_id(channel_context.bank);
    rs   text[]  := rcll._expand_rooms(b, channel_context.rooms);
    auth text[]  := rcll._recall_authors(channel_context.authors, channel_context.mine);
    q    public.vector := channel_context.query_embedding;
    lim  integer := greatest(coalesce(channel_context."limit", 300), 0);
BEGIN
    IF q IS NULL OR lim = 0 OR seeds IS NULL THEN
        RETURN;
    END IF;
    -- Candidates: the seeds (the dense channel's hits) and the chunk after each, all passing
    -- the filters (seeds are checked again: a caller may pass any ids). Score: the mean of a unit's similarity and its
    -- predecessor's (in scope); a unit without one counts its own twice.
    RETURN QUERY
    WITH s AS (
        SELECT u.unit_id, u.document_id, u.chunk_index FROM rcll.memory_units u
        WHERE u.unit_id = ANY (channel_context.seeds)
          AND rcll._in_scope(u, b, rs, auth, channel_context.include_unattributed, channel_context.halls,
                             channel_context.layers, channel_context.tags_any, channel_context.tags_all,
                             channel_context.thread, channel_context.as_of)
    ), c AS (
        SELECT s.unit_id FROM s
        UNION
        SELECT n.unit_id FROM s
        JOIN rcll.memory_units n ON n.document_id = s.document_id AND n.chunk_index = s.chunk_index + 1
        WHERE rcll._in_scope(n, b, rs, auth, channel_context.include_unattributed, channel_context.halls,
                             channel_context.layers, channel_context.tags_any, channel_context.tags_all,
                             channel_context.thread, channel_context.as_of)
    ), scored AS (
        SELECT u.unit_id,
               1 - ((u.embedding OPERATOR(public.<=>) q)
                    + coalesce(p.embedding OPERATOR(public.<=>) q, u.embedding OPERATOR(public.<=>) q)) / 2 AS score
        FROM c
        JOIN rcll.memory_units u ON u.unit_id = c.unit_id
        LEFT JOIN LATERAL (
            SELECT p.embedding FROM rcll.memory_units p
            WHERE p.document_id = u.document_id AND p.chunk_index = u.chunk_index - 1
              AND rcll._in_scope(p, b, rs, auth, channel_context.include_unattributed, channel_context.halls,
                                 channel_context.layers, channel_context.tags_any, channel_context.tags_all,
                                 channel_context.thread, channel_context.as_of)) p ON true
        WHERE u.embedding IS NOT NULL
    )
    SELECT r.unit_id, r.score, r.rank FROM (
        SELECT scored.unit_id, scored.score,
               (row_number() OVER (ORDER BY scored.score DESC, scored.unit_id))::integer AS rank
        FROM scored) r
    WHERE r.rank <= lim
    ORDER BY r.rank;
END
$$;
COMMENT ON FUNCTION rcll.channel_context(vector, bigint[], text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, integer)
    IS 'Context recall channel: the seed units (the dense channel''s hits) and the chunk after each, ranked by the mean cosine similarity to query_embedding of the unit and of the chunk before it in its document (score = 1 - mean distance). Neighbours pass the same filters as every channel. Finds replies whose meaning is in the chunk they answer.';
