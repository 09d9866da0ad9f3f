-- Run-once: the BM25 candidates' index keyed by (bank, lexeme), so a bank's candidates come from
-- its own posting lists, not every bank's.
--
-- unit_lexicon_lexical_gin indexes lexemes alone: a query term's posting list holds every bank's
-- units that contain it, and the planner ANDs it with the bank index. At 1M units in 400 banks,
-- the biggest bank's (333,333 units) candidates were 26,229 of 70,000 GIN entries read, ANDed with
-- a bitmap of the bank's 339,000 index entries: 24 + 17 ms of the BM25 channels' ~160
-- (docs/scaling.md). Keyed by bank, the scan reads the bank's own entries and nothing else.

-- A unit's lexemes as index keys of its bank: '<bank id> <lexeme>'. Immutable, since an index is
-- built on it; defined here, with the index, and never replaced (a change would be a new
-- migration and a rebuilt index).
CREATE FUNCTION rcll._bank_keys(bank_id integer, lexemes text[])
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT ARRAY(SELECT _bank_keys.bank_id::text || ' ' || l FROM unnest(_bank_keys.lexemes) AS l)
$$;
COMMENT ON FUNCTION rcll._bank_keys(integer, text[])
    IS 'Internal: lexemes as the keys of one bank in unit_lexicon_bank_lexemes (''<bank id> <lexeme>''). The BM25 channels match rcll._bank_keys(bank_id, tsvector_to_array(lexical)) && rcll._bank_keys(<bank>, <query lexemes>).';

CREATE INDEX unit_lexicon_bank_lexemes ON rcll.unit_lexicon
    USING gin (rcll._bank_keys(bank_id, pg_catalog.tsvector_to_array(lexical)));
DROP INDEX rcll.unit_lexicon_lexical_gin;
