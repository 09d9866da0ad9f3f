-- Retain's document: the checks and the documents row every retain writes first, in chunk or extraction mode.

CREATE OR REPLACE FUNCTION rcll._content_hash(content text, thread text)
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT sha256(convert_to(coalesce(thread, '') || E'\x1f' || content, 'UTF8'))
$$;
COMMENT ON FUNCTION rcll._content_hash(text, text) IS 'Internal: the identity of a document within a bank (thread and content).';

CREATE OR REPLACE FUNCTION rcll._document_units(bank_id integer, document_id bigint)
RETURNS bigint[]
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- The bank named: on a Citus cluster it is what takes the query to the bank's one shard
    -- (by the document's id alone it read every shard of every worker).
    SELECT coalesce(array_agg(u.unit_id ORDER BY u.chunk_index, u.unit_id), '{}')
    FROM rcll.memory_units u WHERE u.bank_id = _document_units.bank_id AND u.document_id = _document_units.document_id
$$;
COMMENT ON FUNCTION rcll._document_units(integer, bigint) IS 'Internal: the units of a bank''s document in chunk (or fact) order - what a re-retain of the same content returns.';

CREATE OR REPLACE FUNCTION rcll._check_document(bank_id integer, content text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    limit_bytes bigint := coalesce(
        nullif(current_setting('rcll.max_document_bytes', true), '')::bigint,
        (SELECT (b.settings ->> 'max_document_bytes')::bigint FROM rcll.banks b WHERE b.bank_id = _check_document.bank_id),
        1048576);
BEGIN
    IF content IS NULL OR btrim(content, E' \t\r\n\f\v') = '' THEN
        RAISE EXCEPTION 'content: empty or whitespace-only text' USING ERRCODE = 'RC001', COLUMN = 'content',
            HINT = 'Pass the text to retain in content.';
    END IF;
    IF octet_length(content) > limit_bytes THEN
        RAISE EXCEPTION 'content: % bytes is over the limit of % bytes', octet_length(content), limit_bytes
            USING ERRCODE = 'RC001', COLUMN = 'content',
            HINT = 'Split the document, or raise the limit (SET rcll.max_document_bytes, or the bank setting max_document_bytes).';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._check_document(integer, text) IS 'Internal: rejects empty and oversized documents with an error naming the field and the fix.';

CREATE OR REPLACE FUNCTION rcll._store_document(
    bank_id        integer,
    content        text,
    source         text,
    thread         text,
    occurred_at    timestamptz,
    layer          text,
    metadata       jsonb,
    via            text,
    claimed_author text,
    extraction     text,
    OUT document_id   bigint,
    OUT created       boolean,
    OUT author        text,
    OUT author_source text,
    OUT provenance    jsonb)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    h bytea := rcll._content_hash(content, thread);
BEGIN
    -- The document fields every retain takes (the content itself is rcll._check_document's).
    IF layer IS NOT NULL AND layer NOT IN ('L0', 'L1', 'L2') THEN
        RAISE EXCEPTION 'layer: % is not a layer', quote_literal(layer) USING ERRCODE = 'RC001', COLUMN = 'layer',
            HINT = 'Use L0 (rules and procedures), L1 (decisions) or L2 (observations).';
    END IF;
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata: must be a JSON object' USING ERRCODE = 'RC001', COLUMN = 'metadata',
            HINT = 'Pass a JSON object (''{}'' for none).';
    END IF;

    SELECT r.author, r.author_source INTO author, author_source FROM rcll._resolve_author(claimed_author) r;
    provenance := jsonb_build_object('via', coalesce(via, 'sql'), 'who', author,
                                     'author_source', author_source, 'at', now(), 'source', source);
    INSERT INTO rcll.documents AS d (bank_id, content, content_hash, source, thread, occurred_at, provenance, metadata, extraction)
    VALUES (_store_document.bank_id, content, h, source, thread, occurred_at, provenance, metadata, extraction)
    ON CONFLICT ON CONSTRAINT documents_bank_id_content_hash_key DO NOTHING
    RETURNING d.document_id INTO document_id;
    created := document_id IS NOT NULL;
    IF NOT created THEN                         -- already retained (same thread and content)
        SELECT d.document_id INTO document_id FROM rcll.documents d
        WHERE d.bank_id = _store_document.bank_id AND d.content_hash = h;
    END IF;
    provenance := provenance || jsonb_build_object('document_id', document_id);
END
$$;
COMMENT ON FUNCTION rcll._store_document(integer, text, text, text, timestamptz, text, jsonb, text, text, text)
    IS 'Internal: check a retain''s document fields (layer, metadata), resolve its author, and insert its documents row unless the bank holds the same thread and content already (created = false, the existing document_id). provenance is what its units carry (via, who, author_source, at, source, document_id).';
