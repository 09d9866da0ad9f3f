-- Chunk-mode retain: one document and its pre-embedded chunks written in one statement.

CREATE OR REPLACE FUNCTION rcll._content_hash(content text, thread text)
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT sha256(convert_to(coalesce(thread, '') || E'\x1f' || content, 'UTF8'))
$$;
COMMENT ON FUNCTION rcll._content_hash(text, text) IS 'Internal: the identity of a document within a bank (thread and content).';

CREATE OR REPLACE FUNCTION rcll._check_document(bank_id integer, content text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    limit_bytes bigint := coalesce(
        nullif(current_setting('rcll.max_document_bytes', true), '')::bigint,
        (SELECT (b.settings ->> 'max_document_bytes')::bigint FROM rcll.banks b WHERE b.bank_id = _check_document.bank_id),
        1048576);
BEGIN
    IF content IS NULL OR btrim(content, E' \t\r\n\f\v') = '' THEN
        RAISE EXCEPTION 'content: empty or whitespace-only text' USING ERRCODE = '22023',
            HINT = 'Pass the text to retain in content.';
    END IF;
    IF octet_length(content) > limit_bytes THEN
        RAISE EXCEPTION 'content: % bytes is over the limit of % bytes', octet_length(content), limit_bytes
            USING ERRCODE = '54000',
            HINT = 'Split the document, or raise the limit (SET rcll.max_document_bytes, or the bank setting max_document_bytes).';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._check_document(integer, text) IS 'Internal: rejects empty and oversized documents with an error naming the field and the fix.';

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
    author      text DEFAULT NULL)
RETURNS TABLE (document_id bigint, unit_ids bigint[], created boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    h bytea;
    doc bigint;
    who record;
    prov jsonb;
    n integer := coalesce(array_length(chunks, 1), 0);
BEGIN
    PERFORM rcll._check_document(b, content);
    IF n = 0 THEN
        RAISE EXCEPTION 'chunks: at least one chunk is required' USING ERRCODE = '22023';
    END IF;
    IF embeddings IS NOT NULL AND coalesce(array_length(embeddings, 1), 0) <> n THEN
        RAISE EXCEPTION 'embeddings: % embeddings for % chunks', coalesce(array_length(embeddings, 1), 0), n
            USING ERRCODE = '22023', HINT = 'Pass one embedding per chunk, in the same order (or NULL for none).';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(chunks) c WHERE c IS NULL OR btrim(c, E' \t\r\n\f\v') = '') THEN
        RAISE EXCEPTION 'chunks: a chunk is empty' USING ERRCODE = '22023';
    END IF;
    IF layer IS NOT NULL AND layer NOT IN ('L0', 'L1', 'L2') THEN
        RAISE EXCEPTION 'layer: % is not a layer', quote_literal(layer) USING ERRCODE = '22023',
            HINT = 'Use L0 (rules and procedures), L1 (decisions) or L2 (observations).';
    END IF;
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata: must be a JSON object' USING ERRCODE = '22023';
    END IF;

    h := rcll._content_hash(content, thread);
    SELECT d.document_id INTO doc FROM rcll.documents d WHERE d.bank_id = b AND d.content_hash = h;
    IF doc IS NOT NULL THEN
        RETURN QUERY SELECT doc, array_agg(u.unit_id ORDER BY u.chunk_index, u.unit_id), false
                     FROM rcll.memory_units u WHERE u.document_id = doc;
        RETURN;
    END IF;

    who := rcll._resolve_author(author);
    prov := jsonb_build_object('via', coalesce(via, 'sql'), 'who', who.author,
                               'author_source', who.author_source, 'at', now(), 'source', source);
    INSERT INTO rcll.documents AS d (bank_id, content, content_hash, source, thread, occurred_at, provenance, metadata, extraction)
    VALUES (b, content, h, source, thread, occurred_at, prov, metadata, 'chunks')
    RETURNING d.document_id INTO doc;
    prov := prov || jsonb_build_object('document_id', doc);

    RETURN QUERY
    WITH ins AS (
        INSERT INTO rcll.memory_units AS u
            (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source,
             thread, tags, valid, mentioned_at, chunk_index, provenance, metadata)
        SELECT b, doc, 'chunk', c.chunk, e.embedding, retain_chunks.hall,
               coalesce(retain_chunks.layer, (SELECT r.layer FROM rcll.layer_rules r WHERE r.hall = retain_chunks.hall), 'L2'),
               retain_chunks.room, who.author, who.author_source, retain_chunks.thread,
               coalesce(retain_chunks.tags, '{}'),
               tstzrange(coalesce(occurred_at, now()), NULL), occurred_at, c.i - 1, prov, '{}'::jsonb
        FROM unnest(chunks) WITH ORDINALITY AS c(chunk, i)
        LEFT JOIN unnest(embeddings) WITH ORDINALITY AS e(embedding, i) USING (i)
        RETURNING u.unit_id, u.chunk_index
    )
    SELECT doc, array_agg(ins.unit_id ORDER BY ins.chunk_index), true FROM ins;
END
$$;
COMMENT ON FUNCTION rcll.retain_chunks(text, text, text[], vector[], text, timestamptz, text, text, text[], text, text, jsonb, text, text)
    IS 'Chunk-mode retain: store a document and its chunks (with their embeddings) in one statement. Re-retaining the same content and thread into the same bank returns the existing units (created = false).';
