-- Context: a unit read together with the chunk before it in its document.
--
-- In a conversation or a long text a chunk's meaning often sits partly in the chunk before it: an
-- answer ("Yes, last Friday!") means something only after its question. The context channel
-- ranks a unit by the mean of its own and its predecessor's similarity to the query, so the reply
-- to a matching question comes back even when its own words do not match. It costs nothing at
-- write time: it starts from the dense channel's hits, and adds the chunk after each of them.

CREATE OR REPLACE FUNCTION rcll._last_words(t text, n integer)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
-- One expression, no FROM, no STRICT, and no search_path (990-search-path.sql leaves it out): the
-- planner inlines it into the 100 rows a recall returns, where a function call per row was a
-- visible share of a small bank's fusion (docs/scaling.md). NULL in, NULL out, as when strict.
-- STABLE, as array_to_string is: a body more volatile than its declaration is not inlined.
-- Words are split on ASCII whitespace (space, tab, LF, CR, VT, FF) by translate and
-- string_to_array, not by a regular expression, which was measurably slower over the fusion's 100
-- rows (the same words on every unit of bench.recall's 100k store); a regex's \s also takes what a locale
-- calls a space, such as U+00A0, which is kept inside a word here). VT is written \x0B: an E''
-- string's \v is not an escape on PostgreSQL 15 (E'\v' is a plain v there: a test caught it).
AS $$
    SELECT CASE WHEN n IS NOT NULL THEN
        array_to_string((array_remove(string_to_array(translate(t, E'\t\n\r\x0B\f', '     '), ' '), ''))
            [greatest(cardinality(array_remove(string_to_array(translate(t, E'\t\n\r\x0B\f', '     '), ' '), '')) - n + 1, 1):], ' ') END
$$;
COMMENT ON FUNCTION rcll._last_words(text, integer) IS 'Internal: the last n words of a text (separated by ASCII whitespace), joined by single spaces.';

CREATE OR REPLACE FUNCTION rcll.preceding_units(unit_ids bigint[], scope rcll.recall_scope)
RETURNS TABLE (unit_id bigint, preceding_id bigint, preceding_text text)
LANGUAGE plpgsql STABLE
-- On a Citus cluster, rcll.recall called on the coordinator (psql) sends rcll.fuse_candidates'
-- statement whole to the worker holding the bank, this call inside it; Citus refuses a query on a
-- distributed table run from inside a query on a shard unless told, as a shard moved meanwhile
-- could be read in the wrong place. This one reads only the same bank's co-located shards, on
-- that worker (local execution); on one node the setting is an unused placeholder.
SET citus.allow_nested_distributed_execution = on
AS $$
#variable_conflict use_column
BEGIN
    -- The predecessor counts only if the same recall could return it: context never carries
    -- text in from another room, author, thread or validity window.
    RETURN QUERY
    SELECT u.unit_id, p.unit_id, p.text
    FROM rcll.memory_units u
    JOIN rcll.memory_units p ON p.bank_id = u.bank_id AND p.document_id = u.document_id AND p.chunk_index = u.chunk_index - 1
    WHERE u.unit_id = ANY (preceding_units.unit_ids) AND u.bank_id = (scope).bank_id
      AND rcll._in_scope(p.bank_id, p.room, p.author, p.tags, p.hall, p.layer, p.thread, p.valid, p.expires_at, scope);
END
$$;
COMMENT ON FUNCTION rcll.preceding_units(bigint[], rcll.recall_scope)
    IS 'For each given unit, the chunk right before it in its document (chunk_index - 1), if that chunk passes the scope (rcll.recall_scope); units without one are absent. The cross-encoder''s context view reads it. From psql: SELECT * FROM rcll.preceding_units(ARRAY[42, 43], rcll.recall_scope(''fleet'')).';

CREATE OR REPLACE FUNCTION rcll.channel_context(
    query_embedding vector,
    seeds           bigint[],
    scope           rcll.recall_scope,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    q    public.vector := channel_context.query_embedding;
    lim  integer := greatest(coalesce(channel_context."limit", (rcll.recall_defaults()).channel_limit), 0);
BEGIN
    IF q IS NULL OR lim = 0 OR seeds IS NULL THEN
        RETURN;
    END IF;
    -- Candidates: the seeds (the dense channel's hits) and the chunk after each; score: the
    -- mean of a unit's similarity and its predecessor's, a unit without one counting its own
    -- twice. Every unit read passes the filters (seeds too: a caller may pass any ids). One
    -- index range scan per seed fetches both of its neighbours.
    RETURN QUERY
    WITH s AS (
        SELECT u.unit_id, u.document_id, u.chunk_index, 1 - (u.embedding OPERATOR(public.<=>) q) AS sim
        FROM rcll.memory_units u
        WHERE u.unit_id = ANY (channel_context.seeds) AND u.embedding IS NOT NULL
          AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
    ), w AS (
        SELECT DISTINCT n.unit_id, n.document_id, n.chunk_index, 1 - (n.embedding OPERATOR(public.<=>) q) AS sim
        FROM s JOIN rcll.memory_units n
          ON n.document_id = s.document_id AND n.chunk_index IN (s.chunk_index - 1, s.chunk_index + 1)
        WHERE n.embedding IS NOT NULL
          AND rcll._in_scope(n.bank_id, n.room, n.author, n.tags, n.hall, n.layer, n.thread, n.valid, n.expires_at, scope)
    ), known AS (
        SELECT s.unit_id, s.document_id, s.chunk_index, s.sim FROM s
        UNION SELECT w.unit_id, w.document_id, w.chunk_index, w.sim FROM w
    ), c AS (
        SELECT s.unit_id, s.document_id, s.chunk_index, s.sim FROM s
        UNION SELECT w.unit_id, w.document_id, w.chunk_index, w.sim FROM w
        JOIN s ON s.document_id = w.document_id AND w.chunk_index = s.chunk_index + 1
    ), scored AS (
        SELECT c.unit_id, (c.sim + coalesce(p.sim, c.sim)) / 2 AS score
        FROM c LEFT JOIN known p ON p.document_id = c.document_id AND p.chunk_index = c.chunk_index - 1
    )
    SELECT r.unit_id, r.score, r.rank FROM (
        SELECT scored.unit_id, scored.score,
               (row_number() OVER (ORDER BY scored.score DESC, scored.unit_id))::integer AS rank
        FROM scored) r
    WHERE r.rank <= lim
    ORDER BY r.rank;
END
$$;
COMMENT ON FUNCTION rcll.channel_context(vector, bigint[], rcll.recall_scope, integer)
    IS 'Context recall channel: the seed units (the dense channel''s hits) and the chunk after each, ranked by the mean cosine similarity to query_embedding of the unit and of the chunk before it in its document (score = 1 - mean distance). Every unit read passes the scope (rcll.recall_scope), as in every channel. Finds replies whose meaning is in the chunk they answer. From psql: SELECT * FROM rcll.channel_context(<embedding>, ARRAY[42, 43], rcll.recall_scope(''fleet'')).';
