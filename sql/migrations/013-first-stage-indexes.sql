-- Run-once: what the entity and session channels (sql/functions/125-, 127-) read, kept narrow.
--
-- The session channel scores documents by BM25 over their units: it needs each candidate's
-- document and every touched document's length. Read from memory_units, that is one random visit
-- of a 2.7 kB row per candidate (thousands per query at 100k units); unit_lexicon carries the
-- document id beside the lexical length, and an index on it answers a document's length by an
-- index-only scan.
ALTER TABLE rcll.unit_lexicon ADD COLUMN document_id bigint;
COMMENT ON COLUMN rcll.unit_lexicon.document_id IS 'The unit''s document (memory_units.document_id): the session channel groups BM25 hits by it.';
UPDATE rcll.unit_lexicon l SET document_id = u.document_id
FROM rcll.memory_units u WHERE u.unit_id = l.unit_id AND u.document_id IS NOT NULL;
CREATE INDEX unit_lexicon_document ON rcll.unit_lexicon (document_id) INCLUDE (lexical_length);

-- The graph channel walks the extractor's entity links and leaves the keyless speaker/name links
-- (roles 'speaker', 'name') to the entity channel; without an index on the links it may walk, a
-- hub entity's keyless links were read and discarded one by one (20x slower at 100k units). The
-- predicate is rcll._keyless_link(role) negated, as the channel's queries inline it.
CREATE INDEX unit_entities_walk ON rcll.unit_entities (entity_id, unit_id)
    WHERE NOT coalesce(role IN ('speaker', 'name'), false);
