-- BM25 corpus statistics (document count, average length) per bank, refreshed off the write path.

CREATE OR REPLACE FUNCTION rcll.refresh_bank_stats(bank text DEFAULT NULL)
RETURNS TABLE (bank_name text, unit_count bigint, total_length bigint, document_count bigint)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    only_bank integer := CASE WHEN refresh_bank_stats.bank IS NULL THEN NULL ELSE rcll._bank_id(refresh_bank_stats.bank) END;
BEGIN
    -- One aggregate per bank, written with a single upsert: a periodic job (or a person after a
    -- bulk load) calls this; writers never touch bank_stats, so they never contend on it.
    RETURN QUERY
    WITH counted AS (
        SELECT b.bank_id, count(u.unit_id) AS n, coalesce(sum(u.lexical_length), 0)::bigint AS total
        FROM rcll.banks b LEFT JOIN rcll.memory_units u ON u.bank_id = b.bank_id
        WHERE only_bank IS NULL OR b.bank_id = only_bank
        GROUP BY b.bank_id
    ), written AS (
        INSERT INTO rcll.bank_stats AS s (bank_id, unit_count, total_length, document_count, refreshed_at)
        SELECT c.bank_id, c.n, c.total,
               (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = c.bank_id), now()
        FROM counted c
        ON CONFLICT (bank_id) DO UPDATE
            SET unit_count = excluded.unit_count, total_length = excluded.total_length,
                document_count = excluded.document_count, refreshed_at = excluded.refreshed_at
        RETURNING s.bank_id, s.unit_count, s.total_length, s.document_count
    )
    SELECT b.name, w.unit_count, w.total_length, w.document_count
    FROM written w JOIN rcll.banks b ON b.bank_id = w.bank_id ORDER BY b.name;
END
$$;
COMMENT ON FUNCTION rcll.refresh_bank_stats(text) IS 'Recount BM25 corpus statistics (units, total lexical length, documents) for one bank, or every bank when bank is NULL. Run it periodically or after a bulk load; recall only reads the result.';

CREATE OR REPLACE FUNCTION rcll._bm25_corpus(
    bank_id integer, OUT n double precision, OUT avgdl double precision, OUT ndocs double precision)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT s.unit_count, s.total_length::double precision / nullif(s.unit_count, 0), s.document_count
    INTO n, avgdl, ndocs
    FROM rcll.bank_stats s WHERE s.bank_id = _bm25_corpus.bank_id;
    IF coalesce(n, 0) = 0 THEN
        -- Never refreshed (a new bank, or a replica of one): count exactly. Correct, just slower.
        SELECT count(*), avg(u.lexical_length) INTO n, avgdl
        FROM rcll.memory_units u WHERE u.bank_id = _bm25_corpus.bank_id;
        ndocs := NULL;
    END IF;
    n := greatest(coalesce(n, 0), 1);
    avgdl := greatest(coalesce(avgdl, 1), 1);
END
$$;
COMMENT ON FUNCTION rcll._bm25_corpus(integer) IS 'Internal: BM25 N and average unit length of a bank, and its document count (the session channel''s N; NULL: count them), from bank_stats (exact unit counts and a NULL document count when never refreshed).';
