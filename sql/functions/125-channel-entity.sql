-- Entity channel (who): the units linked to the entities a query names, ranked by what is asked about them.
--
-- "What did Caroline research?" names a person; half a conversation may be hers. The channel lists
-- the units linked to a named entity (rcll.unit_entities: keyless speaker and name links written at
-- retain, sql/functions/205-keyless-entities.sql, or the extractor's) and ranks them by cosine to the
-- query *with the names removed* ("What did research?"): with the name gone, the similarity
-- measures what is asked about the person, not that the person is named (research/locomo/RESEARCH.md,
-- third round: ranked by the whole query instead, R@40 0.873 vs 0.891 on conversations 0-4).

CREATE OR REPLACE FUNCTION rcll._query_named_entities(query text, bank_id integer)
RETURNS TABLE (entity_id bigint, name text, matched text)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    -- PL/pgSQL only so that this file may precede 200-entities.sql (rcll._entity_key).
    -- Word n-grams (1-3 words) of the query in which every word is written capitalised,
    -- possessives dropped, matched exactly (by key) against the bank's entity spellings.
    RETURN QUERY
    WITH w AS (
        SELECT array_remove(regexp_split_to_array(
                   regexp_replace(coalesce(_query_named_entities.query, ''), '[''’]s\M', '', 'g'),
                   '[^[:alnum:]_.''’-]+'), '') AS words
    ), g AS (
        SELECT DISTINCT array_to_string(w.words[i:i + len - 1], ' ') AS gram
        FROM w, generate_series(1, coalesce(cardinality(w.words), 0)) AS i, generate_series(1, 3) AS len
        WHERE i + len - 1 <= cardinality(w.words)
          AND NOT EXISTS (SELECT 1 FROM unnest(w.words[i:i + len - 1]) x WHERE x !~ '^[[:upper:]]')
    )
    SELECT DISTINCT ON (a.entity_id) a.entity_id, e.name, rcll._entity_key(g.gram)
    FROM g
    JOIN rcll.entity_aliases a ON a.bank_id = _query_named_entities.bank_id AND a.alias = rcll._entity_key(g.gram)
    JOIN rcll.entities e ON e.bank_id = a.bank_id AND e.entity_id = a.entity_id
    ORDER BY a.entity_id, length(g.gram) DESC;
END
$$;
COMMENT ON FUNCTION rcll._query_named_entities(text, integer)
    IS 'Internal: the bank''s entities a query names, written capitalised (every word of a one- to three-word n-gram starts with a capital; possessives dropped), matched exactly by spelling key against entity_aliases. The entity channel''s entities.';

CREATE OR REPLACE FUNCTION rcll._query_without_entities(query text, bank_id integer)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    rest text := _query_without_entities.query;
    m text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM rcll._query_named_entities(_query_without_entities.query, _query_without_entities.bank_id)) THEN
        RETURN NULL;
    END IF;
    FOR m IN SELECT q.matched FROM rcll._query_named_entities(_query_without_entities.query, _query_without_entities.bank_id) q
             ORDER BY length(q.matched) DESC, q.matched LOOP
        rest := regexp_replace(rest, '\m' || regexp_replace(m, '([.^$*+?()\[\]{}|\\-])', '\\\1', 'g')
                                      || '(?:[''’]s)?\M', ' ', 'gi');
    END LOOP;
    rest := btrim(regexp_replace(rest, '\s+', ' ', 'g'));
    -- Nothing left but punctuation: the whole query.
    RETURN CASE WHEN rest ~ '[[:alnum:]]' THEN rest ELSE _query_without_entities.query END;
END
$$;
COMMENT ON FUNCTION rcll._query_without_entities(text, integer)
    IS 'Internal: rcll.query_without_entities for a resolved bank id.';

CREATE OR REPLACE FUNCTION rcll.query_without_entities(query text, bank text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT rcll._query_without_entities(query_without_entities.query, rcll._bank_id(query_without_entities.bank))
$$;
COMMENT ON FUNCTION rcll.query_without_entities(text, text)
    IS 'The query with the entities it names (rcll._query_named_entities: capitalised, known in the bank; a trailing ''s too) removed - what the entity channel''s second query embedding embeds. NULL when the query names no known entity (the entity channel is then silent); the whole query when nothing else is left. The rcll client embeds it with the query (one batch) and passes it as recall_candidates'' entity_query_embedding. From psql: SELECT rcll.query_without_entities(''What did Caroline research?'', ''fleet'').';

CREATE OR REPLACE FUNCTION rcll.channel_entity(
    query           text,
    scope           rcll.recall_scope,
    query_embedding vector,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    q    public.vector := channel_entity.query_embedding;
    lim  integer := greatest(coalesce(channel_entity."limit", (rcll.recall_defaults()).channel_limit), 0);
    ents bigint[];
    -- On a Citus cluster every statement must name its bank to reach its shard (rcll._bank_pinned).
    pinned boolean := rcll._bank_pinned();
BEGIN
    IF q IS NULL OR lim = 0 THEN
        RETURN;
    END IF;
    ents := ARRAY(SELECT e.entity_id FROM rcll._query_named_entities(channel_entity.query, (scope).bank_id) e);
    IF cardinality(ents) = 0 THEN
        RETURN;
    END IF;
    -- Every unit linked to a named entity, scanned exactly (MATERIALIZED: never the HNSW index,
    -- which would filter after a fixed-size search); no weight per entity - the fusion's
    -- standardisation already turns a hub's long flat list into a weak vote.
    RETURN QUERY
    WITH f AS MATERIALIZED (
        SELECT u.unit_id, u.embedding FROM rcll.memory_units u
        WHERE u.unit_id IN (SELECT ue.unit_id FROM rcll.unit_entities ue
                            WHERE ue.entity_id = ANY (ents) AND (NOT pinned OR ue.bank_id = (scope).bank_id))
          AND (NOT pinned OR u.bank_id = (scope).bank_id) AND u.embedding IS NOT NULL
          AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope))
    SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id))::integer
    FROM (SELECT f.unit_id, f.embedding OPERATOR(public.<=>) q AS dist FROM f ORDER BY 2, 1 LIMIT lim) d
    ORDER BY 3;
END
$$;
COMMENT ON FUNCTION rcll.channel_entity(text, rcll.recall_scope, vector, integer)
    IS 'Entity recall channel (who): the units linked (rcll.unit_entities) to an entity the query names, written capitalised (rcll._query_named_entities), ranked by cosine similarity to query_embedding - for recall, the embedding of the query with the names removed (rcll.query_without_entities) - score = 1 - cosine distance. Empty when the query names no known entity or no embedding is given. Filtered before ranking by the scope (rcll.recall_scope). From psql: SELECT * FROM rcll.channel_entity(''What did Caroline research?'', rcll.recall_scope(''fleet''), <embedding>).';
