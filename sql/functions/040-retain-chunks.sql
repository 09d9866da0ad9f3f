-- Chunk-mode retain: one document and its pre-embedded chunks written in one statement.

CREATE OR REPLACE FUNCTION rcll.retain_chunks(
    bank        text,
    content     text,
    chunks      text[],
    embeddings  vector[],
    source      text DEFAULT NULL,
    occurred_at timestamptz DEFAULT NULL,
    room        text DEFAULT NULL,
    thread      text DEFAULT NULL,
    tags        text[] DEFAULT '{}',
    hall        text DEFAULT NULL,
    layer       text DEFAULT NULL,
    metadata    jsonb DEFAULT '{}',
    via         text DEFAULT 'sql',
    author      text DEFAULT NULL,
    extraction_error text DEFAULT NULL,
    llm_calls   jsonb DEFAULT '[]')
RETURNS TABLE (document_id bigint, unit_ids bigint[], created boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    doc bigint;
    stored record;
    n integer := coalesce(array_length(chunks, 1), 0);
    ids bigint[];
BEGIN
    PERFORM rcll._check_document(b, content);
    IF n = 0 THEN
        RAISE EXCEPTION 'chunks: at least one chunk is required' USING ERRCODE = 'RC001', COLUMN = 'chunks',
            HINT = 'Pass the document''s text split into chunks (rcll.chunk_text), one or more.';
    END IF;
    IF embeddings IS NOT NULL AND coalesce(array_length(embeddings, 1), 0) <> n THEN
        RAISE EXCEPTION 'embeddings: % embeddings for % chunks', coalesce(array_length(embeddings, 1), 0), n
            USING ERRCODE = 'RC001', COLUMN = 'embeddings', HINT = 'Pass one embedding per chunk, in the same order (or NULL for none).';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(chunks) c WHERE c IS NULL OR btrim(c, E' \t\r\n\f\v') = '') THEN
        RAISE EXCEPTION 'chunks: a chunk is empty' USING ERRCODE = 'RC001', COLUMN = 'chunks',
            HINT = 'Drop empty or whitespace-only chunks before retaining.';
    END IF;

    IF extraction_error IS NOT NULL THEN
        -- An extraction that failed (RCLL_EXTRACTION_FAILURE=chunks): its document is kept as chunks,
        -- tagged extraction:failed, with the error beside its metadata.
        tags := ARRAY(SELECT DISTINCT x FROM unnest(coalesce(tags, '{}') || ARRAY['extraction:failed']) x ORDER BY x);
        metadata := metadata || jsonb_build_object('extraction_error', extraction_error);
    END IF;
    stored := rcll._store_document(b, content, source, thread, occurred_at, layer, metadata, via, author,
                                   CASE WHEN extraction_error IS NULL THEN 'chunks' ELSE 'failed' END);
    doc := stored.document_id;
    IF llm_calls IS DISTINCT FROM '[]'::jsonb THEN
        -- The calls an extraction spent are in the ledger whatever became of it.
        PERFORM rcll._record_llm_calls(b, doc, llm_calls);
    END IF;
    IF NOT stored.created THEN
        RETURN QUERY SELECT doc, rcll._document_units(b, doc), false;
        RETURN;
    END IF;

    WITH ins AS (
        INSERT INTO rcll.memory_units AS u
            (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source,
             thread, tags, valid, mentioned_at, chunk_index, provenance, metadata)
        SELECT b, doc, 'chunk', c.chunk, e.embedding, retain_chunks.hall,
               coalesce(retain_chunks.layer, (SELECT r.layer FROM rcll.layer_rules r WHERE r.hall = retain_chunks.hall), 'L2'),
               retain_chunks.room, stored.author, stored.author_source, retain_chunks.thread,
               coalesce(retain_chunks.tags, '{}'),
               tstzrange(coalesce(occurred_at, now()), NULL), occurred_at, c.i - 1, stored.provenance, '{}'::jsonb
        FROM unnest(chunks) WITH ORDINALITY AS c(chunk, i)
        LEFT JOIN unnest(embeddings) WITH ORDINALITY AS e(embedding, i) USING (i)
        RETURNING u.unit_id, u.chunk_index
    )
    SELECT array_agg(ins.unit_id ORDER BY ins.chunk_index) INTO ids FROM ins;
    -- Who said each chunk and which names it writes (sql/functions/205-keyless-entities.sql):
    -- what the entity channel reads, with no model on the write path.
    PERFORM rcll._link_written_keyless_entities(b, ids);
    RETURN QUERY SELECT doc, ids, true;
END
$$;
COMMENT ON FUNCTION rcll.retain_chunks(text, text, text[], vector[], text, timestamptz, text, text, text[], text, text, jsonb, text, text, text, jsonb)
    IS 'Chunk-mode retain: store a document and its chunks (with their embeddings) in one statement. Each chunk is linked to its keyless entities (its speaker and the names it writes; rcll._link_written_keyless_entities). Re-retaining the same content and thread into the same bank returns the existing units (created = false). extraction_error: the document''s LLM extraction failed (RCLL_EXTRACTION_FAILURE=chunks) - its chunks are tagged extraction:failed, documents.extraction is failed and metadata.extraction_error holds the error. llm_calls are appended to the ledger (rcll.llm_calls) either way. Its document fields (source .. author) are rcll.retain_facts'' too (tests/test_retain_chunks.py holds them equal).';
