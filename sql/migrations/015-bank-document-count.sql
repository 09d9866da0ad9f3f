-- Run-once: the session channel's document count (its BM25 N) kept with the other corpus
-- statistics in rcll.bank_stats, refreshed off the write path by rcll.refresh_bank_stats.
--
-- The session channel counted the bank's documents on every recall: at 1M units, in a bank of
-- 333,333 units and 39,424 documents, an index-only scan of 15-19 ms (15,778 buffers, 15,410 heap
-- fetches on a bank being written), ~10% of the BM25 channels' time there (docs/scaling.md).
-- NULL (never refreshed) keeps the exact count, as the unit figures do.
ALTER TABLE rcll.bank_stats ADD COLUMN document_count bigint;
COMMENT ON COLUMN rcll.bank_stats.document_count IS 'Documents in the bank at the last refresh (the session channel''s BM25 N); NULL until the first refresh, when recall counts them.';
COMMENT ON TABLE rcll.bank_stats IS 'BM25 corpus statistics per bank (unit and document counts, total length), refreshed off the write path by rcll.refresh_bank_stats(). Document frequencies need no table: they are counted from the candidates.';

-- Counted now for the banks whose unit figures were refreshed, so recall reads what it counted before.
UPDATE rcll.bank_stats s
SET document_count = (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = s.bank_id)
WHERE s.unit_count > 0;
