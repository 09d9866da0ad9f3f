-- Run-once: each document's BM25 length, kept beside the units' copy (rcll.unit_lexicon).
--
-- The session channel (sql/functions/120-channel-lexical.sql) scores documents by BM25 over
-- their units, and BM25 needs each candidate document's length: the sum of its units' lexical
-- lengths. Summed at query time, that read every unit of every candidate document through
-- unit_lexicon's document index: at 100k units, ~40,000 index entries for the ~3,200 documents
-- of a typical query, ~18 ms of the channel's ~70. One row per document answers it from one
-- lookup. The triggers of sql/functions/022-document-lexicon.sql keep it in the writing
-- transaction, recomputed from unit_lexicon for every document whose units change.
CREATE TABLE rcll.document_lexicon (
    document_id    bigint PRIMARY KEY REFERENCES rcll.documents ON DELETE CASCADE,
    bank_id        integer NOT NULL,
    lexical_length bigint NOT NULL
);
COMMENT ON TABLE rcll.document_lexicon IS 'Each document''s BM25 length (the sum of its units'' lexical lengths in rcll.unit_lexicon), read by the session channel. Written by triggers on unit_lexicon in the same transaction; never written directly.';
COMMENT ON COLUMN rcll.document_lexicon.document_id IS 'The document (documents.document_id); deleted with it.';
COMMENT ON COLUMN rcll.document_lexicon.bank_id IS 'documents.bank_id (bank isolation covers this table).';
COMMENT ON COLUMN rcll.document_lexicon.lexical_length IS 'Sum of unit_lexicon.lexical_length over the document''s units (all of them: the recall scope does not change a document''s length).';

INSERT INTO rcll.document_lexicon (document_id, bank_id, lexical_length)
SELECT d.document_id, d.bank_id, sum(l.lexical_length)
FROM rcll.documents d JOIN rcll.unit_lexicon l ON l.document_id = d.document_id AND l.bank_id = d.bank_id
GROUP BY d.document_id, d.bank_id;

-- Dumped like unit_lexicon (see 010, 012): a restore loads these rows as dumped, and the
-- triggers that keep them stand aside while unit_lexicon's rows are restored (rcll._restoring).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.document_lexicon'::regclass, '');
    END IF;
END
$$;
