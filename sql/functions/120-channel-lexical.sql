-- Lexical channel: Okapi BM25 over the units' tsvectors, with no statistics kept on the write path - and the
-- session channel's document BM25 (127) from the same candidate scan (rcll._bm25_channels).

CREATE OR REPLACE FUNCTION rcll._tsquery_any(lexemes text[])
RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Quoted, so lexemes are taken verbatim (no second round of parsing or stemming).
    SELECT string_agg('''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery
    FROM unnest(lexemes) AS l
$$;
COMMENT ON FUNCTION rcll._tsquery_any(text[]) IS 'Internal: a tsquery matching any of the given lexemes, each taken verbatim.';

CREATE OR REPLACE FUNCTION rcll._bm25_term(
    idf double precision, tf double precision, dl double precision, avgdl double precision,
    k1 double precision, b double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): inlined into the BM25 query, where it is the
-- expression itself, not a call per term.
AS $$
    -- Rounded to a multiple of 2^-32: a sum of such terms is exact while it stays under 2^21 (53
    -- bits of mantissa; a BM25 score is a few hundred at most), so it is the same float whatever
    -- order its terms are added in. A float sum otherwise depends on its order, and the rows' order
    -- on ids: a bank that forgot something would score its survivors a last bit apart from one that
    -- never held it. (Summing in lexeme order did the same with a sort per query, which cost more:
    -- docs/scaling.md.)
    SELECT round(idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)) * 4294967296.0) / 4294967296.0
$$;
COMMENT ON FUNCTION rcll._bm25_term(double precision, double precision, double precision, double precision, double precision, double precision)
    IS 'Internal: one term''s Okapi BM25 weight: idf x tf x (k1 + 1) / (tf + k1 x (1 - b + b x dl / avgdl)), rounded to a multiple of 2^-32 so that sums of terms are exact (order-independent). Inlined into rcll._bm25_channels.';

CREATE OR REPLACE FUNCTION rcll._query_lexemes(query text, bank_id integer)
RETURNS text[]
LANGUAGE sql STABLE
-- Its own plan cache mode, as rcll._bm25_pruned_terms below: its plan does not turn on the query.
SET plan_cache_mode = auto
AS $$
    SELECT ARRAY(SELECT DISTINCT t.lexeme
                 FROM rcll.banks x, unnest(to_tsvector(x.text_search_config, coalesce(_query_lexemes.query, ''))) t
                 WHERE x.bank_id = _query_lexemes.bank_id
                 ORDER BY 1)
$$;
COMMENT ON FUNCTION rcll._query_lexemes(text, integer)
    IS 'Internal: the distinct lexemes of a query under its bank''s text search config, sorted. The BM25 channels'' query terms.';

CREATE OR REPLACE FUNCTION rcll._bm25_pruned_terms(
    terms text[], n double precision, prune_above double precision, stats_table text DEFAULT 'unit_lexicon',
    OUT common text[], OUT common_freq double precision[], OUT gen text[])
LANGUAGE plpgsql STABLE
-- Its own plan cache mode: called from rcll._bm25_channels, whose force_custom_plan would otherwise
-- hold here too and plan the pg_stats read (a view over four catalogs) on every recall (its cost:
-- docs/scaling.md); its plan does not depend on the query's terms.
SET plan_cache_mode = auto
AS $$
BEGIN
    -- Candidates come from the rarer query terms only: every unit containing one of them is read,
    -- so their document frequencies are exact counts over the candidates. Terms in more than
    -- prune_above of the n units (known from ANALYZE's lexeme statistics, ~1% accurate) generate
    -- no candidates but still score; their frequency comes back with them (each channel turns it
    -- into a df; their IDF is small). At 100k units exact BM25 is an order of magnitude slower
    -- and the pruned top 10 all but agrees with it (bench.recall prints the agreement; figures in
    -- docs/benchmarks.md). Small banks (estimated df of at most 1,000 units) are always exact:
    -- a bank of at most 1,000 units cannot have such a term, and skips the statistics (a read of
    -- the whole table's most common lexemes, milliseconds in a large fleet: docs/scaling.md).
    IF _bm25_pruned_terms.n <= 1000 OR coalesce(_bm25_pruned_terms.prune_above, 1) >= 1 THEN
        gen := _bm25_pruned_terms.terms;
        RETURN;
    END IF;
    SELECT array_agg(e.elem ORDER BY e.freq), array_agg(e.freq ORDER BY e.freq) INTO common, common_freq
    FROM pg_catalog.pg_stats s,
         unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(elem, freq)
    -- stats_table: unit_lexicon on one node; on a Citus worker the bank's shard of it (rcll._shard_table).
    WHERE s.schemaname = 'rcll' AND s.tablename = _bm25_pruned_terms.stats_table AND s.attname = 'lexical'
      AND e.elem = ANY (_bm25_pruned_terms.terms)
      AND e.freq > coalesce(_bm25_pruned_terms.prune_above, 1) AND e.freq * _bm25_pruned_terms.n > 1000;
    gen := ARRAY(SELECT t FROM unnest(_bm25_pruned_terms.terms) t WHERE common IS NULL OR t <> ALL (common));
    IF cardinality(gen) = 0 THEN
        gen := common[1:1];          -- every term is common: generate from the least common one
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._bm25_pruned_terms(text[], double precision, double precision, text)
    IS 'Internal: of a query''s terms, those too common to generate BM25 candidates (common, by rising frequency common_freq among n units, from ANALYZE''s statistics of unit_lexicon - of stats_table, the bank''s shard of it on a Citus worker) and those that generate them (gen). Shared by the lexical and session channels.';

CREATE OR REPLACE FUNCTION rcll._bm25_channels(
    query           text,
    scope           rcll.recall_scope,
    query_embedding vector DEFAULT NULL,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above     double precision DEFAULT 0.05,
    k1              double precision DEFAULT 1.2,
    b               double precision DEFAULT 0.75,
    lexical         boolean DEFAULT true,
    session         boolean DEFAULT true)
RETURNS TABLE (channel text, unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    bk     integer := (scope).bank_id;
    lim    integer := greatest(coalesce(_bm25_channels."limit", (rcll.recall_defaults()).channel_limit), 0);
    q      public.vector := _bm25_channels.query_embedding;
    terms  text[];
    corpus record;
    ndocs  double precision := 1;
    avgdl  double precision := 1;
    common text[];
    common_freq double precision[];
    gen    text[];
    gen_keys text[];
    scoped bigint[];
    -- A filtered scope of at most this many units gets exact candidates (below).
    scope_exact constant integer := 2000;
    -- On a Citus cluster every statement must name its bank to reach its shard (rcll._bank_pinned);
    -- on one node this is a constant false and the bank tests below fold away.
    pinned boolean := rcll._bank_pinned();
BEGIN
    terms := rcll._query_lexemes(_bm25_channels.query, bk);
    IF cardinality(terms) = 0 OR lim = 0 OR NOT (coalesce(_bm25_channels.lexical, false) OR coalesce(_bm25_channels.session, false)) THEN
        RETURN;
    END IF;
    corpus := rcll._bm25_corpus(bk);
    IF _bm25_channels.session THEN
        -- Document statistics: N = the bank's documents, average length = the units' total
        -- length over N - all three from the same refresh of rcll.bank_stats (rcll._bm25_corpus);
        -- counted here only when never refreshed (counting them on every recall was an index scan
        -- over every document of the bank: migration 015, docs/scaling.md).
        -- (Two statements, so that the usual case is a simple expression, not a query planned on every recall.)
        ndocs := corpus.ndocs;
        IF ndocs IS NULL THEN
            ndocs := (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = bk);
        END IF;
        ndocs := greatest(ndocs, 1);
        avgdl := greatest(corpus.avgdl * corpus.n / ndocs, 1);
    END IF;
    -- Candidates from the rarer terms only (rcll._bm25_pruned_terms); a pruned term still scores,
    -- its df estimated from its frequency f among the N units: f x N units (lexical); for the
    -- session channel the documents holding it, were its units spread at random over documents of
    -- the average size m = N / ndocs: ndocs x (1 - (1 - f)^m). (f x N, capped at every document,
    -- overstated some terms' document counts; the session channel's overlap with exact BM25 rose
    -- with this, and more with the rescoring below: docs/scaling.md.)
    SELECT t.common, t.common_freq, t.gen INTO common, common_freq, gen
    FROM rcll._bm25_pruned_terms(terms, corpus.n, _bm25_channels.prune_above,
                                 CASE WHEN pinned THEN rcll._shard_table('rcll.unit_lexicon', bk) ELSE 'unit_lexicon' END) t;
    -- The candidate-generating terms as keys of this bank's posting lists (migration 016).
    gen_keys := rcll._bank_keys(bk, gen);
    -- Pruning decides by a term's frequency in the whole bank, so a unit that matches only pruned
    -- terms is never a candidate. Across a bank the rarer terms' matches fill the top; in a room of
    -- a hundred units few of them are in scope, and the units matching the common terms alone are
    -- exact BM25's next best there (bench.recall at 100k: top-10 overlap with exact 0.58 in such
    -- rooms, 1.00 unfiltered). So when terms were pruned and the scope is filtered down to at most
    -- scope_exact units, the scope's own units (found through memory_units' scope indexes) that
    -- match a pruned term are candidates too: inside a small scope every matching unit is read.
    IF common IS NOT NULL AND ((scope).rooms IS NOT NULL OR (scope).authors IS NOT NULL
            OR (scope).halls IS NOT NULL OR (scope).layers IS NOT NULL OR (scope).tags_any IS NOT NULL
            OR (scope).tags_all IS NOT NULL OR (scope).thread IS NOT NULL) THEN
        scoped := ARRAY(SELECT m.unit_id FROM rcll.memory_units m
                        WHERE rcll._in_scope(m.bank_id, m.room, m.author, m.tags, m.hall, m.layer, m.thread, m.valid, m.expires_at, scope)
                        LIMIT scope_exact + 1);
        IF cardinality(scoped) > scope_exact THEN
            scoped := NULL;
        END IF;
    END IF;

    RETURN QUERY
    WITH hits AS MATERIALIZED (
        -- One scan for both channels: a row per candidate unit and query lexeme it holds, with
        -- the lexeme's tf. Only the query's lexemes are unnested: marking them with weight A and
        -- filtering on it is several times cheaper than unnesting the whole tsvector of every candidate.
        -- (lexical carries no weights - the units_lexical trigger writes plain to_tsvector - so
        -- nothing else is A.) unnest is in the select list (a ProjectSet, one row at a time) and
        -- the candidates are not materialised first: at 100k units this step was faster than with
        -- the candidates materialised and unnested in FROM (docs/scaling.md). Read from
        -- rcll.unit_lexicon, the narrow copy (a fraction of a memory_units row, which carries its
        -- embedding inline): the same rows and scores, about half the pages touched (migration
        -- 012, docs/scaling.md).
        SELECT c.unit_id, c.document_id, c.keep, c.dl, (c.e).lexeme,
               coalesce(array_length((c.e).positions, 1), 1)::double precision AS tf
        FROM (
            SELECT u.unit_id, u.document_id, u.lexical_length AS dl,
                   rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope) AS keep,
                   unnest(ts_filter(setweight(u.lexical, 'A', terms), '{a}')) AS e
            FROM rcll.unit_lexicon u
            -- The bank's own posting lists of the terms (unit_lexicon_bank_lexemes, migration 016):
            -- a key names its bank, so no bank_id test - with one, the planner ANDed the bank
            -- index's bitmap in (every unit of the bank, read on every recall: docs/scaling.md).
            -- Only a cluster gets one (pinned).
            WHERE rcll._bank_keys(u.bank_id, tsvector_to_array(u.lexical)) && gen_keys
              AND (NOT pinned OR u.bank_id = bk)
            UNION ALL
            -- A small scope's units that match only pruned terms (above; none when scoped is NULL).
            SELECT u.unit_id, u.document_id, u.lexical_length,
                   rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope),
                   unnest(ts_filter(setweight(u.lexical, 'A', terms), '{a}'))
            FROM rcll.unit_lexicon u
            WHERE u.unit_id = ANY (scoped) AND u.lexical @@ rcll._tsquery_any(common)
              AND (NOT pinned OR u.bank_id = bk)
              AND NOT u.lexical @@ rcll._tsquery_any(gen)) c
    ),
    -- Lexical: units scored by Okapi BM25 over their own text.
    l_df AS (
        -- Per-bank document frequency: counted (exact) for candidate-generating terms, estimated
        -- from ANALYZE for the pruned common ones. The bank (not the filtered set) is the corpus.
        SELECT h.lexeme, count(*)::double precision AS df FROM hits h WHERE h.lexeme = ANY (gen) GROUP BY h.lexeme
        UNION ALL
        SELECT c.lexeme, c.f * corpus.n FROM unnest(common, common_freq) c(lexeme, f) WHERE c.lexeme <> ALL (gen)
    ), l_idf AS (
        SELECT d.lexeme,
               ln(1 + (greatest(corpus.n, (SELECT max(x.df) FROM l_df x)) - d.df + 0.5) / (d.df + 0.5)) AS idf
        FROM l_df d
    ), l_scored AS (
        -- Every score sums terms on a binary grid (rcll._bm25_term), here and in the session's
        -- sums: exact, so no order of the rows (which ids decide) changes it.
        SELECT h.unit_id,
               sum(rcll._bm25_term(i.idf, h.tf, h.dl, corpus.avgdl, _bm25_channels.k1, _bm25_channels.b)) AS s
        FROM hits h JOIN l_idf i ON i.lexeme = h.lexeme
        WHERE h.keep
        GROUP BY h.unit_id
    ),
    -- Session: documents scored by BM25 over their units in scope; their units inherit the score.
    s_hits AS (
        SELECT h.* FROM hits h WHERE h.document_id IS NOT NULL
    ), s_dt AS MATERIALIZED (
        -- Per document and lexeme, one hash aggregate for both uses: whether the document holds it
        -- (document frequency, over the bank) and its tf over the units in scope (the text scored).
        SELECT h.document_id, h.lexeme, sum(h.tf) FILTER (WHERE h.keep) AS tf, bool_or(h.keep) AS kept
        FROM s_hits h GROUP BY h.document_id, h.lexeme
    ), s_df AS (
        -- Document frequency over the bank's documents: counted for candidate-generating terms,
        -- estimated for the pruned common ones (above).
        SELECT t.lexeme, count(*)::double precision AS df FROM s_dt t
        WHERE t.lexeme = ANY (gen) GROUP BY t.lexeme
        UNION ALL
        -- ndocs x (1 - (1 - f)^m), written with exp and ln so that a huge m cannot underflow
        SELECT c.lexeme, ndocs * (1 - exp(greatest(corpus.n / ndocs * ln(greatest(1 - c.f, 1e-12)), -700)))
        FROM unnest(common, common_freq) c(lexeme, f) WHERE c.lexeme <> ALL (gen)
    ), s_idf AS (
        SELECT d.lexeme, ln(1 + (greatest(ndocs, (SELECT max(x.df) FROM s_df x)) - d.df + 0.5) / (d.df + 0.5)) AS idf
        FROM s_df d
    ), s_tf AS (
        -- A document's text is what the recall may read of it: its units in scope.
        SELECT t.document_id, t.lexeme, t.tf FROM s_dt t WHERE t.kept
    ), s_dl AS (
        -- Every touched document's length, one row each (rcll.document_lexicon, kept by triggers):
        -- summed here from unit_lexicon it read an index entry per unit of every touched document,
        -- a quarter of the channel's time at 100k units (docs/scaling.md).
        SELECT m.document_id, m.lexical_length::double precision AS dl
        FROM rcll.document_lexicon m
        WHERE m.document_id IN (SELECT t.document_id FROM s_tf t) AND (NOT pinned OR m.bank_id = bk)
    ), s_first AS MATERIALIZED (
        -- The documents scored from their candidate units: exact when no term was pruned. A
        -- pruned term's tf then counts only the units that also hold a rarer term, so these are
        -- lower bounds, and the best `lim` of them are scored again below over all their units.
        SELECT t.document_id
        FROM s_tf t JOIN s_idf i ON i.lexeme = t.lexeme JOIN s_dl l ON l.document_id = t.document_id
        GROUP BY t.document_id
        ORDER BY sum(rcll._bm25_term(i.idf, t.tf, l.dl, avgdl, _bm25_channels.k1, _bm25_channels.b)) DESC,
                 t.document_id
        LIMIT lim                 -- every document holds at least one unit
    ), s_tf_all AS (
        -- Their pruned terms' tf from the units that were not candidates (in scope, as above).
        SELECT x.document_id, x.lexeme, sum(x.tf) AS tf
        FROM (SELECT t.document_id, t.lexeme, t.tf FROM s_tf t WHERE t.document_id IN (SELECT f.document_id FROM s_first f)
              UNION ALL
              SELECT u.document_id, t.lexeme, coalesce(array_length(t.positions, 1), 1)::double precision
              FROM rcll.unit_lexicon u, unnest(ts_filter(setweight(u.lexical, 'A', common), '{a}')) t
              WHERE common IS NOT NULL
                AND u.document_id IN (SELECT f.document_id FROM s_first f)
                AND u.lexical @@ rcll._tsquery_any(common) AND NOT u.lexical @@ rcll._tsquery_any(gen)
                AND (scoped IS NULL OR u.unit_id <> ALL (scoped)) AND (NOT pinned OR u.bank_id = bk)
                AND rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)) x
        GROUP BY x.document_id, x.lexeme
    ), s_docs AS (
        SELECT t.document_id,
               sum(rcll._bm25_term(i.idf, t.tf, l.dl, avgdl, _bm25_channels.k1, _bm25_channels.b)) AS s
        FROM s_tf_all t JOIN s_idf i ON i.lexeme = t.lexeme JOIN s_dl l ON l.document_id = t.document_id
        GROUP BY t.document_id
        ORDER BY 2 DESC, 1
    ), s_units AS (
        SELECT u.unit_id, d.s, d.document_id,
               CASE WHEN q IS NULL OR u.embedding IS NULL THEN NULL
                    ELSE u.embedding OPERATOR(public.<=>) q END AS dist, u.chunk_index
        FROM s_docs d JOIN rcll.memory_units u ON u.document_id = d.document_id AND (NOT pinned OR u.bank_id = bk)
        WHERE rcll._in_scope(u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread, u.valid, u.expires_at, scope)
    )
    -- Both lists are cut with ORDER BY ... LIMIT and numbered after: a top-N sort of the scored
    -- units, and the session's units read document by document only until the limit is reached
    -- (not every unit of every listed document).
    (SELECT 'lexical'::text, x.unit_id, x.s, (row_number() OVER (ORDER BY x.s DESC, x.unit_id))::integer
     FROM (SELECT y.unit_id, y.s FROM l_scored y WHERE _bm25_channels.lexical
           ORDER BY y.s DESC, y.unit_id LIMIT lim) x
     ORDER BY x.s DESC, x.unit_id)
    UNION ALL
    (SELECT 'session'::text, x.unit_id, x.s,
            (row_number() OVER (ORDER BY x.s DESC, x.document_id, x.dist NULLS LAST, x.chunk_index, x.unit_id))::integer
     FROM (SELECT y.unit_id, y.s, y.document_id, y.dist, y.chunk_index FROM s_units y WHERE _bm25_channels.session
           ORDER BY y.s DESC, y.document_id, y.dist NULLS LAST, y.chunk_index, y.unit_id LIMIT lim) x
     ORDER BY x.s DESC, x.document_id, x.dist NULLS LAST, x.chunk_index, x.unit_id);
END
$$;
COMMENT ON FUNCTION rcll._bm25_channels(text, rcll.recall_scope, vector, integer, double precision, double precision, double precision, boolean, boolean)
    IS 'Internal: the lexical (units by Okapi BM25) and session (documents by BM25 over their units in scope, units inheriting the score) channels from one candidate scan of rcll.unit_lexicon - rcll.recall_candidates runs both in one call; rcll.channel_lexical and rcll.channel_session are each one of them. channel is ''lexical'' or ''session''; a false flag skips that channel.';

CREATE OR REPLACE FUNCTION rcll.channel_lexical(
    query       text,
    scope       rcll.recall_scope,
    "limit"     integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above double precision DEFAULT 0.05,
    k1          double precision DEFAULT 1.2,
    b           double precision DEFAULT 0.75)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
AS $$
    SELECT c.unit_id, c.score, c.rank
    FROM rcll._bm25_channels(channel_lexical.query, channel_lexical.scope, NULL, channel_lexical."limit",
                             channel_lexical.prune_above, channel_lexical.k1, channel_lexical.b,
                             lexical => true, session => false) c
    ORDER BY c.rank
$$;
COMMENT ON FUNCTION rcll.channel_lexical(text, rcll.recall_scope, integer, double precision, double precision, double precision)
    IS 'Lexical recall channel: Okapi BM25 (k1, b) of the query''s lexemes under the bank''s text search configuration, per-bank IDF, filtered before ranking by the scope (rcll.recall_scope). Candidates come from terms in at most prune_above of the units (NULL or 1: exact, all terms); all terms score. Reads plain tables only, so it runs on replicas. From psql: SELECT * FROM rcll.channel_lexical(''deploy'', rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';
