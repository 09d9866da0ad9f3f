-- Run-once: find the chunk before or after a unit in its document (the context channel and the
-- reranker's context view). It replaces the (document_id) index, which is its prefix.
CREATE INDEX memory_units_document_chunk ON rcll.memory_units (document_id, chunk_index);
DROP INDEX rcll.memory_units_document;
