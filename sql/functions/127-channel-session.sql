-- Session channel (where): documents scored by BM25 over their whole text; their units inherit the score.
--
-- A conversation's session (a document) shares a question's vocabulary far more often than the one
-- turn that answers it does: "When did Melanie run a charity race?" matches the session about the
-- race although the answering turn says "last Saturday". The channel scores each document by Okapi
-- BM25 over its text (tf summed over its units, length the sum of their lengths, IDF over the
-- bank's documents), from the same candidate units the lexical channel reads (one scan for both:
-- rcll._bm25_channels, 120-channel-lexical.sql), and lists the units
-- of the best documents - inside a document by cosine to the query. On LoCoMo it is the first
-- stage's largest single gain (research/locomo/RESEARCH.md, third round: -0.033 / -0.036 R@40 without it).

CREATE OR REPLACE FUNCTION rcll.channel_session(
    query           text,
    scope           rcll.recall_scope,
    query_embedding vector DEFAULT NULL,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above     double precision DEFAULT 0.05,
    k1              double precision DEFAULT 1.2,
    b               double precision DEFAULT 0.75)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
AS $$
    -- Scored in rcll._bm25_channels (120-channel-lexical.sql), from the lexical channel's candidates.
    SELECT c.unit_id, c.score, c.rank
    FROM rcll._bm25_channels(channel_session.query, channel_session.scope, channel_session.query_embedding,
                             channel_session."limit", channel_session.prune_above, channel_session.k1,
                             channel_session.b, lexical => false, session => true) c
    ORDER BY c.rank
$$;
COMMENT ON FUNCTION rcll.channel_session(text, rcll.recall_scope, vector, integer, double precision, double precision, double precision)
    IS 'Session recall channel (where): documents scored by Okapi BM25 (k1, b) of the query over their whole text - tf summed over their units in scope, length the sum of their units'' lexical lengths, IDF over the bank''s documents - from the candidate units rcll.channel_lexical reads (same prune_above rule); each unit inherits its document''s score (score = the document''s BM25), listed best document first, inside a document by cosine to query_embedding (else in document order), at most "limit" units. Filtered before ranking by the scope (rcll.recall_scope). From psql: SELECT * FROM rcll.channel_session(''charity race'', rcll.recall_scope(''fleet'')).';
