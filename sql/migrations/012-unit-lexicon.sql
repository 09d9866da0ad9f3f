-- Run-once: the narrow table BM25 reads, so the lexical channel stays off the wide unit heap.
--
-- A memory_units row carries its 1.5 kB embedding inline (STORAGE PLAIN, for the dense channel's
-- exact scans), so a page holds about four units: at 100k units BM25 read ~3,700 candidates from
-- ~3,500 heap pages. rcll.unit_lexicon holds, per unit, only what BM25 and the recall scope read
-- (~450 bytes a unit, against ~2.7 kB). memory_units keeps text, lexical and lexical_length as the
-- source; the triggers of sql/functions/021-unit-lexicon.sql copy them here in the writing
-- transaction (no statistics are kept on the write path) and follow every later change of a
-- filter column. Exact BM25 over either table gives the same rankings and scores.
CREATE TABLE rcll.unit_lexicon (
    unit_id        bigint PRIMARY KEY REFERENCES rcll.memory_units ON DELETE CASCADE ON UPDATE CASCADE,
    bank_id        integer NOT NULL,
    lexical_length integer NOT NULL,
    layer          text NOT NULL,
    room           text,
    author         text,
    hall           text,
    thread         text,
    tags           text[] NOT NULL,
    valid          tstzrange NOT NULL,
    lexical        tsvector NOT NULL
);
COMMENT ON TABLE rcll.unit_lexicon IS 'Narrow copy of each unit''s lexical representation and recall filters, the only table the BM25 channel reads. Written by triggers on memory_units in the same transaction; never written directly.';
COMMENT ON COLUMN rcll.unit_lexicon.unit_id IS 'The unit (memory_units.unit_id); deleted with it.';
COMMENT ON COLUMN rcll.unit_lexicon.bank_id IS 'memory_units.bank_id (BM25 statistics are per bank).';
COMMENT ON COLUMN rcll.unit_lexicon.lexical_length IS 'memory_units.lexical_length (BM25 document length).';
COMMENT ON COLUMN rcll.unit_lexicon.layer IS 'memory_units.layer (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.room IS 'memory_units.room (recall filter; follows room moves and merges).';
COMMENT ON COLUMN rcll.unit_lexicon.author IS 'memory_units.author (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.hall IS 'memory_units.hall (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.thread IS 'memory_units.thread (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.tags IS 'memory_units.tags (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.valid IS 'memory_units.valid (recall "as of" filter; follows supersession).';
COMMENT ON COLUMN rcll.unit_lexicon.lexical IS 'memory_units.lexical: the tsvector BM25 scores.';

INSERT INTO rcll.unit_lexicon (unit_id, bank_id, lexical_length, layer, room, author, hall, thread, tags, valid, lexical)
SELECT u.unit_id, u.bank_id, u.lexical_length, u.layer, u.room, u.author, u.hall, u.thread, u.tags, u.valid, u.lexical
FROM rcll.memory_units u;

CREATE INDEX unit_lexicon_lexical_gin ON rcll.unit_lexicon USING gin (lexical);
-- Small banks in a big store: the planner reads the bank's rows instead of a common term's
-- posting list over every bank.
CREATE INDEX unit_lexicon_bank ON rcll.unit_lexicon (bank_id);
-- BM25 no longer reads memory_units.lexical through an index.
DROP INDEX rcll.memory_units_lexical_gin;
COMMENT ON COLUMN rcll.memory_units.lexical IS 'tsvector of text under the bank''s text search configuration; copied to rcll.unit_lexicon, which the BM25 channel reads.';

-- Dumped like every other table (see 010): a restore loads these rows as dumped, and the copying
-- trigger stands aside while it does (rcll._restoring).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.unit_lexicon'::regclass, '');
    END IF;
END
$$;
