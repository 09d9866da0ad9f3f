-- Extraction-mode retain: a document and the facts extracted from it (LLM or offline rules),
-- with entities resolved, links made, supersession recorded and the LLM ledger written - one call,
-- so one transaction.

CREATE OR REPLACE FUNCTION rcll._fact_time(fact jsonb, key text, i integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF fact ->> key IS NULL OR btrim(fact ->> key) = '' THEN
        RETURN NULL;
    END IF;
    RETURN (fact ->> key)::timestamptz;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
    RAISE EXCEPTION 'facts: fact % has % = % which is not a timestamp', i, key, quote_literal(fact ->> key)
        USING ERRCODE = 'RC001', COLUMN = 'facts', HINT = 'Use ISO 8601 (2026-08-26T14:00:00Z) or null.';
END
$$;
COMMENT ON FUNCTION rcll._fact_time(jsonb, text, integer) IS 'Internal: a timestamp field of an extracted fact (ISO 8601 or null), with an error naming the fact and field.';

CREATE OR REPLACE FUNCTION rcll._layer_for(hall text, layer text DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(layer, (SELECT r.layer FROM rcll.layer_rules r WHERE r.hall = _layer_for.hall), 'L2')
$$;
COMMENT ON FUNCTION rcll._layer_for(text, text) IS 'Internal: the layer a unit lands in - the one named, else rcll.layer_rules for its hall, else L2.';

CREATE OR REPLACE FUNCTION rcll._record_llm_calls(bank_id integer, document_id bigint, calls jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n integer;
BEGIN
    IF calls IS NULL OR jsonb_typeof(calls) <> 'array' THEN
        RAISE EXCEPTION 'llm_calls: must be a JSON array of calls' USING ERRCODE = 'RC001', COLUMN = 'llm_calls',
            HINT = 'Pass [{"purpose": "extract", "provider": ..., "model": ..., "input_tokens": n, "output_tokens": n, "outcome": "ok"}].';
    END IF;
    INSERT INTO rcll.llm_calls (bank_id, document_id, purpose, provider, model, input_tokens, output_tokens, outcome)
    SELECT _record_llm_calls.bank_id, _record_llm_calls.document_id, coalesce(c.purpose, 'extract'), c.provider,
           c.model, coalesce(c.input_tokens, 0), coalesce(c.output_tokens, 0), coalesce(c.outcome, 'ok')
    FROM jsonb_to_recordset(calls) AS c(purpose text, provider text, model text, input_tokens integer,
                                        output_tokens integer, outcome text);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._record_llm_calls(integer, bigint, jsonb) IS 'Internal: append LLM calls (a JSON array of {purpose, provider, model, input_tokens, output_tokens, outcome}) to the write-cost ledger.';

CREATE OR REPLACE FUNCTION rcll.record_llm_calls(bank text, calls jsonb, document_id bigint DEFAULT NULL)
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._record_llm_calls(rcll._bank_id(bank), document_id, calls)
$$;
COMMENT ON FUNCTION rcll.record_llm_calls(text, jsonb, bigint) IS 'Append LLM calls to the write-cost ledger of a bank (used when a retain fails with nothing stored: the tokens were still spent).';

CREATE OR REPLACE FUNCTION rcll.find_document(bank text, content text, thread text DEFAULT NULL)
RETURNS TABLE (document_id bigint, unit_ids bigint[], extraction text)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    -- The bank's id as a value, not a lookup inside the statement: on a Citus cluster the read
    -- then goes to the one shard holding the bank instead of every shard.
    b integer := rcll._bank_id(find_document.bank);
    doc bigint;
    how text;
BEGIN
    -- At most one: (bank_id, content_hash) is unique. Its units by a statement of their own:
    -- inside the document's (a query on a shard) Citus refuses the distributed query
    -- rcll._document_units makes.
    SELECT d.document_id, d.extraction INTO doc, how FROM rcll.documents d
    WHERE d.bank_id = b AND d.content_hash = rcll._content_hash(find_document.content, find_document.thread);
    IF doc IS NOT NULL THEN
        document_id := doc;
        unit_ids := rcll._document_units(b, doc);
        extraction := how;
        RETURN NEXT;
    END IF;
END
$$;
COMMENT ON FUNCTION rcll.find_document(text, text, text) IS 'The document already retained with this content and thread in the bank, with its units - so a re-retain can skip extraction (and its model call).';

CREATE OR REPLACE FUNCTION rcll.retain_facts(
    bank        text,
    content     text,
    facts       jsonb,
    embeddings  vector[],
    aux_texts   text[] DEFAULT '{}',
    aux_embeddings vector[] DEFAULT '{}',
    extraction  text DEFAULT 'llm',
    llm_calls   jsonb DEFAULT '[]',
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
    match_known_entities boolean DEFAULT false,
    supersede_threshold double precision DEFAULT 0.80)
RETURNS TABLE (document_id bigint, unit_ids bigint[], created boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    doc bigint;
    stored record;
    prov jsonb;
    n integer := coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(facts) = 'array' THEN facts END), 0);
    doc_time timestamptz := coalesce(retain_facts.occurred_at, now());
    ids bigint[] := '{}';
    f jsonb;
    i integer;
    uid bigint;
    t_start timestamptz; t_end timestamptz; v_from timestamptz; v_to timestamptz;
    f_hall text;
    f_room text;
    f_tags text[];
    spellings text[];
    ent jsonb;
    ent_emb public.vector;
    res record;
    touched bigint[] := '{}';
    cause jsonb;
    target text;
    target_emb public.vector;
    cand record;
BEGIN
    PERFORM rcll._check_document(b, content);
    IF facts IS NULL OR jsonb_typeof(facts) <> 'array' OR n = 0 THEN
        RAISE EXCEPTION 'facts: must be a non-empty JSON array of facts' USING ERRCODE = 'RC001', COLUMN = 'facts',
            HINT = 'An extraction with no facts is a failed extraction: store chunks (rcll.retain_chunks with extraction_error) instead.';
    END IF;
    IF coalesce(array_length(embeddings, 1), 0) <> n THEN
        RAISE EXCEPTION 'embeddings: % embeddings for % facts', coalesce(array_length(embeddings, 1), 0), n
            USING ERRCODE = 'RC001', COLUMN = 'embeddings', HINT = 'Pass one embedding per fact, in the same order.';
    END IF;
    IF coalesce(array_length(aux_texts, 1), 0) <> coalesce(array_length(aux_embeddings, 1), 0) THEN
        RAISE EXCEPTION 'aux_embeddings: % embeddings for % aux_texts', coalesce(array_length(aux_embeddings, 1), 0),
            coalesce(array_length(aux_texts, 1), 0) USING ERRCODE = 'RC001', COLUMN = 'aux_embeddings',
            HINT = 'Pass one embedding per aux_text, in the same order.';
    END IF;
    IF extraction NOT IN ('llm', 'offline') THEN
        RAISE EXCEPTION 'extraction: % is not an extraction mode', quote_literal(extraction) USING ERRCODE = 'RC001', COLUMN = 'extraction',
            HINT = 'Use llm or offline (chunk mode is rcll.retain_chunks).';
    END IF;
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        IF jsonb_typeof(f) <> 'object' OR jsonb_typeof(f -> 'text') <> 'string'
           OR btrim(f ->> 'text', E' \t\r\n\f\v') = '' THEN
            RAISE EXCEPTION 'facts: fact % is not an object with a non-empty text', i USING ERRCODE = 'RC001', COLUMN = 'facts',
                HINT = 'Each fact is a JSON object with a non-empty "text" (see rcll.extract.schema).';
        END IF;
    END LOOP;

    stored := rcll._store_document(b, content, source, thread, retain_facts.occurred_at, layer, metadata, via, author,
                                   extraction);
    doc := stored.document_id;
    IF NOT stored.created THEN                  -- already retained: no duplicate facts
        PERFORM rcll._record_llm_calls(b, doc, llm_calls);
        RETURN QUERY SELECT doc, rcll._document_units(b, doc), false;
        RETURN;
    END IF;
    prov := stored.provenance || jsonb_build_object('extraction', extraction);

    -- 1. the facts
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        t_start := rcll._fact_time(f, 'occurred_start', i);
        t_end := rcll._fact_time(f, 'occurred_end', i);
        IF t_end < t_start THEN t_end := NULL; END IF;
        v_from := coalesce(rcll._fact_time(f, 'valid_from', i), t_start, doc_time);
        v_to := rcll._fact_time(f, 'valid_to', i);
        IF v_to <= v_from THEN v_to := NULL; END IF;
        f_hall := coalesce(retain_facts.hall, nullif(lower(btrim(f ->> 'hall')), ''));
        -- no room given: the janitor trigger (050-room-janitor.sql) classifies facts with rcll.classify_room
        f_room := coalesce(retain_facts.room, nullif(btrim(f ->> 'room'), ''));
        -- Values, not subqueries, in the INSERT: Citus refuses a subquery in an INSERT's VALUES.
        f_tags := ARRAY(SELECT DISTINCT x FROM unnest(coalesce(retain_facts.tags, '{}')
                        || ARRAY(SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(f -> 'tags') = 'array'
                                                                       THEN f -> 'tags' ELSE '[]' END))) x ORDER BY x);
        INSERT INTO rcll.memory_units AS u
            (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source, thread, tags,
             valid, occurred_start, occurred_end, mentioned_at, chunk_index, provenance, metadata)
        VALUES (b, doc, 'fact', btrim(f ->> 'text'), embeddings[i + 1], f_hall,
                rcll._layer_for(f_hall, retain_facts.layer), f_room, stored.author, stored.author_source,
                retain_facts.thread, f_tags,
                tstzrange(v_from, v_to), t_start, t_end, retain_facts.occurred_at, i, prov,
                CASE WHEN jsonb_typeof(f -> 'metadata') = 'object' THEN f -> 'metadata' ELSE '{}' END)
        RETURNING u.unit_id INTO uid;
        ids := ids || uid;

        -- 2. its entities
        FOR ent IN SELECT e FROM jsonb_array_elements(CASE WHEN jsonb_typeof(f -> 'entities') = 'array'
                                                           THEN f -> 'entities' ELSE '[]' END) e LOOP
            CONTINUE WHEN jsonb_typeof(ent) <> 'object' OR rcll._entity_key(ent ->> 'name') IS NULL;
            ent_emb := aux_embeddings[array_position(aux_texts, ent ->> 'name')];
            spellings := ARRAY(SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(ent -> 'aliases') = 'array'
                                                                      THEN ent -> 'aliases' ELSE '[]' END));
            res := rcll._resolve_entity(b, ent ->> 'name', nullif(btrim(ent ->> 'type'), ''), ent_emb, spellings);
            spellings := ARRAY[ent ->> 'name'] || spellings;
            INSERT INTO rcll.unit_entities AS ue (unit_id, entity_id, bank_id, role, entity_type, spellings)
            VALUES (uid, res.entity_id, b, nullif(btrim(ent ->> 'role'), ''), nullif(btrim(ent ->> 'type'), ''), spellings)
            ON CONFLICT ON CONSTRAINT unit_entities_pkey DO NOTHING;
            touched := touched || res.entity_id;
        END LOOP;
        IF match_known_entities THEN
            INSERT INTO rcll.unit_entities AS ue (unit_id, entity_id, bank_id, role, spellings)
            SELECT uid, k.entity_id, b, 'mention', ARRAY[k.alias] FROM rcll._known_entities(b, f ->> 'text') k
            ON CONFLICT ON CONSTRAINT unit_entities_pkey DO NOTHING;
            touched := touched || ARRAY(SELECT ue.entity_id FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.unit_id = uid);
        END IF;
    END LOOP;
    UPDATE rcll.entities e
    SET mention_count = (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.entity_id = e.entity_id)
    WHERE e.bank_id = b AND e.entity_id = ANY (touched);

    -- 3. causal links within the document (cause -> effect)
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        CONTINUE WHEN jsonb_typeof(f -> 'caused_by') IS DISTINCT FROM 'array';
        FOR cause IN SELECT c FROM jsonb_array_elements(f -> 'caused_by') c LOOP
            CONTINUE WHEN jsonb_typeof(cause) <> 'number' OR (cause)::numeric <> trunc((cause)::numeric)
                          OR (cause)::integer < 0 OR (cause)::integer >= n OR (cause)::integer = i;
            INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
            VALUES (b, ids[(cause)::integer + 1], ids[i + 1], 'causal', 1.0,
                    jsonb_build_object('by', extraction, 'document_id', doc))
            ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING;
        END LOOP;
    END LOOP;

    -- 4. supersession: each description of a replaced fact closes the closest open unit of the bank
    --    (same thread, valid before the new fact, not from this document)
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        CONTINUE WHEN jsonb_typeof(f -> 'supersedes') IS DISTINCT FROM 'array';
        FOR target IN SELECT s FROM jsonb_array_elements_text(f -> 'supersedes') s LOOP
            target_emb := coalesce(aux_embeddings[array_position(aux_texts, target)], embeddings[i + 1]);
            CONTINUE WHEN target_emb IS NULL;
            SELECT c.unit_id, c.sim INTO cand
            FROM (SELECT o.unit_id,
                         (1 - (o.embedding OPERATOR(public.<=>) target_emb))::real
                         + 0.05 * (SELECT count(*) FROM rcll.unit_entities x JOIN rcll.unit_entities y
                                     ON y.bank_id = x.bank_id AND y.entity_id = x.entity_id
                                   WHERE x.bank_id = b AND x.unit_id = o.unit_id AND y.unit_id = ids[i + 1]) AS sim
                  FROM rcll.memory_units o
                  WHERE o.bank_id = b AND o.document_id IS DISTINCT FROM doc
                    AND o.superseded_by IS NULL AND upper_inf(o.valid) AND o.embedding IS NOT NULL
                    AND o.thread IS NOT DISTINCT FROM retain_facts.thread
                    AND lower(o.valid) < (SELECT lower(u.valid) FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ids[i + 1])
                  ORDER BY o.embedding OPERATOR(public.<=>) target_emb
                  LIMIT 10) c
            WHERE c.sim >= supersede_threshold
            ORDER BY c.sim DESC, c.unit_id DESC
            LIMIT 1;
            IF cand.unit_id IS NOT NULL THEN
                PERFORM rcll._supersede(b, cand.unit_id, ids[i + 1], NULL,
                                       jsonb_build_object('by', extraction, 'description', target, 'similarity', round(cand.sim::numeric, 3),
                                                          'threshold', supersede_threshold));
            END IF;
        END LOOP;
    END LOOP;

    -- 5. entity, temporal and semantic links; 6. the ledger
    PERFORM rcll._link_units(b, ids);
    PERFORM rcll._record_llm_calls(b, doc, llm_calls);
    RETURN QUERY SELECT doc, ids, true;
END
$$;
COMMENT ON FUNCTION rcll.retain_facts(text, text, jsonb, vector[], text[], vector[], text, jsonb, text, timestamptz, text, text, text[], text, text, jsonb, text, text, boolean, double precision)
    IS 'Extraction-mode retain, one transaction: store a document and its extracted facts (a JSON array of {text, hall, occurred_start, occurred_end, valid_from, valid_to, entities: [{name, type, role, aliases}], caused_by: [fact index], supersedes: [description], room, tags, metadata}) with one embedding per fact; aux_texts/aux_embeddings give embeddings of entity names and supersession descriptions. Resolves entities, writes causal, entity, temporal and semantic links, closes the validity of the units each fact supersedes (similarity >= supersede_threshold), assigns layers by rcll.layer_rules (rooms: the caller''s, else the fact''s, else the janitor trigger''s classifier), and appends llm_calls to the ledger. Re-retaining the same content and thread returns the existing units (created = false).';
