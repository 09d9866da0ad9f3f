-- Session channel (where): documents scored by BM25 over their whole text; their units inherit the score.
--
-- A conversation's session (a document) shares a question's vocabulary far more often than the one
-- turn that answers it does: "When did Melanie run a charity race?" matches the session about the
-- race although the answering turn says "last Saturday". The channel scores each document by Okapi
-- BM25 over its text (tf summed over its units, length the sum of their lengths, IDF over the
-- bank's documents), from the same candidate units the lexical channel reads, and lists the units
-- of the best documents - inside a document by cosine to the query. On LoCoMo it is the first
-- stage's largest single gain (bench/locomo/RESEARCH.md, third round: -0.033 / -0.036 R@40 without it).

CREATE OR REPLACE FUNCTION rcll.channel_session(
    query           text,
    scope           rcll.recall_scope,
    query_embedding vector DEFAULT NULL,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above     double precision DEFAULT 0.05,
    k1              double precision DEFAULT 1.2,
    b               double precision DEFAULT 0.75)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    bk     integer := (scope).bank_id;
    lim    integer := greatest(coalesce(channel_session."limit", (rcll.recall_defaults()).channel_limit), 0);
    q      public.vector := channel_session.query_embedding;
    terms  text[];
    corpus record;
    ndocs  double precision;
    avgdl  double precision;
    common text[];
    common_df double precision[];
    gen    text[];
BEGIN
    terms := rcll._query_lexemes(channel_session.query, bk);
    IF cardinality(terms) = 0 OR lim = 0 THEN
        RETURN;
    END IF;
    -- Document statistics: N = the bank's documents, average length = the units' total length
    -- over N (rcll._bm25_corpus's unit figures; documents are counted on their bank index).
    corpus := rcll._bm25_corpus(bk);
    ndocs := greatest((SELECT count(*) FROM rcll.documents d WHERE d.bank_id = bk), 1);
    avgdl := greatest(corpus.avgdl * corpus.n / ndocs, 1);

    -- Candidate terms exactly as rcll.channel_lexical chooses them (rcll._bm25_pruned_terms): a
    -- pruned term still scores, its document frequency estimated as at most every document.
    SELECT t.common, ARRAY(SELECT least(c.f * corpus.n, ndocs) FROM unnest(t.common_freq) WITH ORDINALITY AS c(f, i) ORDER BY c.i),
           t.gen
    INTO common, common_df, gen
    FROM rcll._bm25_pruned_terms(terms, corpus.n, channel_session.prune_above) t;

    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT u.unit_id, u.document_id, ts_filter(setweight(u.lexical, 'A', terms), '{a}') AS qlex,
               rcll._in_scope(u, scope) AS keep
        FROM rcll.unit_lexicon u
        WHERE u.bank_id = bk AND u.lexical @@ rcll._tsquery_any(gen) AND u.document_id IS NOT NULL
    ), hits AS MATERIALIZED (
        SELECT c.document_id, c.keep, t.lexeme, coalesce(array_length(t.positions, 1), 1)::double precision AS tf
        FROM cand c, unnest(c.qlex) t
    ), df AS (
        -- Document frequency over the bank's documents: counted for candidate-generating terms,
        -- estimated for the pruned common ones.
        SELECT h.lexeme, count(DISTINCT h.document_id)::double precision AS df FROM hits h
        WHERE h.lexeme = ANY (gen) GROUP BY h.lexeme
        UNION ALL
        SELECT c.lexeme, c.df FROM unnest(common, common_df) c(lexeme, df) WHERE c.lexeme <> ALL (gen)
    ), idf AS (
        SELECT d.lexeme, ln(1 + (greatest(ndocs, (SELECT max(x.df) FROM df x)) - d.df + 0.5) / (d.df + 0.5)) AS idf
        FROM df d
    ), tf AS (
        -- A document's text is what the recall may read of it: its units in scope.
        SELECT h.document_id, h.lexeme, sum(h.tf) AS tf FROM hits h WHERE h.keep GROUP BY h.document_id, h.lexeme
    ), dl AS (
        SELECT m.document_id, sum(m.lexical_length)::double precision AS dl
        FROM rcll.unit_lexicon m
        WHERE m.document_id IN (SELECT DISTINCT tf.document_id FROM tf)
        GROUP BY m.document_id
    ), docs AS (
        SELECT t.document_id,
               sum(i.idf * t.tf * (channel_session.k1 + 1)
                   / (t.tf + channel_session.k1 * (1 - channel_session.b + channel_session.b * l.dl / avgdl))) AS s
        FROM tf t JOIN idf i ON i.lexeme = t.lexeme JOIN dl l ON l.document_id = t.document_id
        GROUP BY t.document_id
        ORDER BY 2 DESC, 1
        LIMIT lim                 -- every document holds at least one unit
    ), units AS (
        SELECT u.unit_id, d.s, d.document_id,
               CASE WHEN q IS NULL OR u.embedding IS NULL THEN NULL
                    ELSE u.embedding OPERATOR(public.<=>) q END AS dist, u.chunk_index
        FROM docs d JOIN rcll.memory_units u ON u.document_id = d.document_id
        WHERE rcll._in_scope(u, scope)
    )
    SELECT x.unit_id, x.s, x.rank FROM (
        SELECT units.unit_id, units.s,
               (row_number() OVER (ORDER BY units.s DESC, units.document_id, units.dist NULLS LAST,
                                            units.chunk_index, units.unit_id))::integer AS rank
        FROM units) x
    WHERE x.rank <= lim
    ORDER BY x.rank;
END
$$;
COMMENT ON FUNCTION rcll.channel_session(text, rcll.recall_scope, vector, integer, double precision, double precision, double precision)
    IS 'Session recall channel (where): documents scored by Okapi BM25 (k1, b) of the query over their whole text - tf summed over their units in scope, length the sum of their units'' lexical lengths, IDF over the bank''s documents - from the candidate units rcll.channel_lexical reads (same prune_above rule); each unit inherits its document''s score (score = the document''s BM25), listed best document first, inside a document by cosine to query_embedding (else in document order), at most "limit" units. Filtered before ranking by the scope (rcll.recall_scope). From psql: SELECT * FROM rcll.channel_session(''charity race'', rcll.recall_scope(''fleet'')).';
