-- The channels' psql entry points: each resolves the scope (rcll.recall_scope) and calls its channel.
--
-- rcll.recall_candidates builds the scope once and calls the internal channels itself; these are
-- for reading one channel by hand, with the filters as named parameters.

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
    "limit"              integer DEFAULT (rcll.recall_defaults()).channel_limit,
    exact_below          integer DEFAULT 3000)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM rcll._channel_dense(
        query_embedding, rcll.recall_scope(bank, rooms, authors, mine, include_unattributed, halls, layers, tags_any, tags_all, thread, as_of),
        "limit", exact_below)
$$;
COMMENT ON FUNCTION rcll.channel_dense(vector, text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, integer, integer)
    IS 'Dense recall channel (rcll._channel_dense over rcll.recall_scope): units ranked by cosine similarity to query_embedding (score = 1 - cosine distance), filtered before ranking by bank, rooms (aliases expanded), authors, halls, layers, tags, thread and validity. Filtered sets of at most exact_below units are scanned exactly; larger ones use the HNSW index with iterative scans.';

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
    "limit"              integer DEFAULT (rcll.recall_defaults()).channel_limit)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM rcll._channel_context(
        query_embedding, seeds,
        rcll.recall_scope(bank, rooms, authors, mine, include_unattributed, halls, layers, tags_any, tags_all, thread, as_of),
        "limit")
$$;
COMMENT ON FUNCTION rcll.channel_context(vector, bigint[], text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, integer)
    IS 'Context recall channel (rcll._channel_context over rcll.recall_scope): the seed units (the dense channel''s hits) and the chunk after each, ranked by the mean cosine similarity to query_embedding of the unit and of the chunk before it in its document (score = 1 - mean distance). Neighbours pass the same filters as every channel. Finds replies whose meaning is in the chunk they answer.';

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
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM rcll._preceding_units(
        unit_ids,
        rcll.recall_scope(bank, rooms, authors, mine, include_unattributed, halls, layers, tags_any, tags_all, thread, as_of))
$$;
COMMENT ON FUNCTION rcll.preceding_units(bigint[], text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz)
    IS 'For each given unit, the chunk right before it in its document (chunk_index - 1), if that chunk passes the same recall filters; units without one are absent (rcll._preceding_units over rcll.recall_scope). The cross-encoder''s context view reads it.';

CREATE OR REPLACE FUNCTION rcll.channel_lexical(
    query                text,
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
    "limit"              integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above          double precision DEFAULT 0.05,
    k1                   double precision DEFAULT 1.2,
    b                    double precision DEFAULT 0.75)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM rcll._channel_lexical(
        query, rcll.recall_scope(bank, rooms, authors, mine, include_unattributed, halls, layers, tags_any, tags_all, thread, as_of),
        "limit", prune_above, k1, b)
$$;
COMMENT ON FUNCTION rcll.channel_lexical(text, text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, integer, double precision, double precision, double precision)
    IS 'Lexical recall channel (rcll._channel_lexical over rcll.recall_scope): Okapi BM25 (k1, b) of the query''s lexemes under the bank''s text search configuration, per-bank IDF, filtered before ranking. Candidates come from terms in at most prune_above of the units (NULL or 1: exact, all terms); all terms score. Reads plain tables only, so it runs on replicas.';

CREATE OR REPLACE FUNCTION rcll.channel_graph(
    query                text,
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
    "limit"              integer DEFAULT (rcll.recall_defaults()).channel_limit,
    hops                 integer DEFAULT 2,
    decay                double precision DEFAULT 0.5,
    fanout               integer DEFAULT 100)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM rcll._channel_graph(
        query, rcll.recall_scope(bank, rooms, authors, mine, include_unattributed, halls, layers, tags_any, tags_all, thread, as_of),
        "limit", hops, decay, fanout)
$$;
COMMENT ON FUNCTION rcll.channel_graph(text, text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, integer, integer, double precision, integer)
    IS 'Graph recall channel (rcll._channel_graph over rcll.recall_scope): activation spread from the entities the query names (rcll.query_entities) to the units mentioning them, then over links and shared entities for `hops` hops, multiplied by decay per hop and capped at fanout per entity and per frontier. Filtered before ranking (activation never passes through units the recall may not read). Plain SQL: runs on hot standbys.';

CREATE OR REPLACE FUNCTION rcll.channel_temporal(
    query                text,
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
    time_range           tstzrange DEFAULT NULL,
    reference_time       timestamptz DEFAULT now(),
    query_embedding      vector DEFAULT NULL,
    "limit"              integer DEFAULT (rcll.recall_defaults()).channel_limit,
    scan_limit           integer DEFAULT 5000,
    mention_slack        interval DEFAULT '7 days')
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM rcll._channel_temporal(
        query, rcll.recall_scope(bank, rooms, authors, mine, include_unattributed, halls, layers, tags_any, tags_all, thread, as_of),
        time_range, reference_time, query_embedding, "limit", scan_limit, mention_slack)
$$;
COMMENT ON FUNCTION rcll.channel_temporal(text, text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, tstzrange, timestamptz, vector, integer, integer, interval)
    IS 'Temporal recall channel (rcll._channel_temporal over rcll.recall_scope): units whose time (occurred_start..occurred_end, else mentioned_at, else start of validity) falls in time_range (a unit known only by mentioned_at also up to mention_slack after it: things are said after they happen), or in the range rcll.parse_time_range finds in the query relative to reference_time; ordered by similarity to query_embedding when given, else by closeness to the range. Empty when the query names no time. Filtered before ranking.';
