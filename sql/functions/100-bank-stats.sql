-- BM25 corpus statistics (document count, average length) per bank, refreshed off the write path.

CREATE OR REPLACE FUNCTION rcll.refresh_bank_stats(bank text DEFAULT NULL)
RETURNS TABLE (bank_name text, unit_count bigint, total_length bigint, document_count bigint)
LANGUAGE plpgsql VOLATILE
-- Custom plans: each bank's id a constant, so on a Citus cluster its statement goes to one worker.
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    only_bank integer := CASE WHEN refresh_bank_stats.bank IS NULL THEN NULL ELSE rcll._bank_id(refresh_bank_stats.bank) END;
    one_id integer;
    one_name text;
    n bigint;
    total bigint;
    docs bigint;
BEGIN
    -- One aggregate per bank, written with a single upsert: a periodic job (or a person after a
    -- bulk load) calls this; writers never touch bank_stats, so they never contend on it. Bank by
    -- bank: on a Citus cluster each bank's statements then run on the worker holding it.
    FOR one_id, one_name IN SELECT b.bank_id, b.name FROM rcll.banks b
               WHERE only_bank IS NULL OR b.bank_id = only_bank ORDER BY b.name LOOP
        -- Counted, then written: two statements each on the bank's shards (Citus does not send an
        -- INSERT ... SELECT whose select list holds a variable).
        SELECT count(u.unit_id), coalesce(sum(u.lexical_length), 0)::bigint INTO n, total
        FROM rcll.memory_units u WHERE u.bank_id = one_id;
        SELECT count(*) INTO docs FROM rcll.documents d WHERE d.bank_id = one_id;
        INSERT INTO rcll.bank_stats AS s (bank_id, unit_count, total_length, document_count, refreshed_at)
        VALUES (one_id, n, total, docs, now())
        ON CONFLICT (bank_id) DO UPDATE
            SET unit_count = excluded.unit_count, total_length = excluded.total_length,
                document_count = excluded.document_count, refreshed_at = excluded.refreshed_at;
        bank_name := one_name; unit_count := n; total_length := total; document_count := docs;
        RETURN NEXT;
    END LOOP;
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
