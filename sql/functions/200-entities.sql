-- Entity resolution on the write path: exact spelling, known alias, trigram, then embedding.
-- pgvector and pg_trgm are installed in schema public (install.py and CREATE EXTENSION ... CASCADE
-- both put them there), so their operators are named OPERATOR(public.<=>) / public.similarity().

CREATE OR REPLACE FUNCTION rcll._entity_key(name text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- lower-cased, whitespace folded, leading "@" and surrounding punctuation dropped:
    -- "  Argo  CD." and "argo cd" are one key; "@alice" and "Alice" are one key.
    SELECT nullif(btrim(regexp_replace(regexp_replace(lower(name), '\s+', ' ', 'g'),
                                       '^[[:punct:][:space:]]+|[[:punct:][:space:]]+$', '', 'g')), '')
$$;
COMMENT ON FUNCTION rcll._entity_key(text) IS 'Internal: the lookup key of an entity spelling (lower-cased, whitespace folded, surrounding punctuation and @ dropped); entity_aliases.alias holds these keys.';

CREATE OR REPLACE FUNCTION rcll._types_compatible(a text, b text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a IS NULL OR b IS NULL OR lower(a) = lower(b)
$$;
COMMENT ON FUNCTION rcll._types_compatible(text, text) IS 'Internal: two entity types may name one entity (equal, or either unknown).';

CREATE OR REPLACE FUNCTION rcll._resolve_entity(
    bank_id     integer,
    name        text,
    entity_type text DEFAULT NULL,
    embedding   vector DEFAULT NULL,
    aliases     text[] DEFAULT '{}',
    trigram_threshold real DEFAULT 0.55,
    embedding_threshold real DEFAULT 0.92,
    OUT entity_id bigint,
    OUT matched_by text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := _resolve_entity.bank_id;
    key text := rcll._entity_key(_resolve_entity.name);
    keys text[];
    score real;
    display text := btrim(regexp_replace(ltrim(_resolve_entity.name, '@'), '\s+', ' ', 'g'));
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'name: entity name is empty' USING ERRCODE = 'RC001', COLUMN = 'name',
            HINT = 'Drop entities without a name before resolving.';
    END IF;
    SELECT array_agg(DISTINCT k) INTO keys
    FROM unnest(coalesce(_resolve_entity.aliases, '{}') || ARRAY[_resolve_entity.name]) AS s(spelling),
         LATERAL rcll._entity_key(s.spelling) AS k
    WHERE k IS NOT NULL;

    -- 1. exact spelling, 2. any spelling the extractor says is the same entity
    SELECT a.entity_id, CASE WHEN a.alias = key THEN 'exact' ELSE 'alias' END
      INTO entity_id, matched_by
    FROM rcll.entity_aliases a
    WHERE a.bank_id = b AND a.alias = ANY (keys)
    ORDER BY (a.alias = key) DESC, a.entity_id
    LIMIT 1;

    -- 3. trigram similarity against every known spelling (names of a few characters are too short
    -- for trigrams to mean anything)
    IF entity_id IS NULL AND length(key) >= 4 THEN
        SELECT a.entity_id, public.similarity(a.alias, key) INTO entity_id, score
        -- Joined on the bank too: on a Citus cluster a join must name the distribution column.
        FROM rcll.entity_aliases a JOIN rcll.entities e ON e.bank_id = a.bank_id AND e.entity_id = a.entity_id
        WHERE a.bank_id = b AND a.alias OPERATOR(public.%) key
          AND rcll._types_compatible(e.entity_type, _resolve_entity.entity_type)
          AND public.similarity(a.alias, key) >= trigram_threshold
        ORDER BY public.similarity(a.alias, key) DESC, a.entity_id
        LIMIT 1;
        IF entity_id IS NOT NULL THEN
            matched_by := 'trigram';
        END IF;
    END IF;

    -- 4. embedding of the name, against the canonical names' embeddings
    IF entity_id IS NULL AND _resolve_entity.embedding IS NOT NULL THEN
        SELECT e.entity_id, (1 - (e.embedding OPERATOR(public.<=>) _resolve_entity.embedding))::real
          INTO entity_id, score
        FROM rcll.entities e
        WHERE e.bank_id = b AND e.embedding IS NOT NULL
          AND rcll._types_compatible(e.entity_type, _resolve_entity.entity_type)
        ORDER BY e.embedding OPERATOR(public.<=>) _resolve_entity.embedding, e.entity_id
        LIMIT 1;
        IF entity_id IS NOT NULL AND score >= embedding_threshold THEN
            matched_by := 'embedding';
        ELSE
            entity_id := NULL;
        END IF;
    END IF;

    IF entity_id IS NULL THEN
        INSERT INTO rcll.entities AS e (bank_id, name, entity_type, embedding)
        VALUES (b, display, _resolve_entity.entity_type, _resolve_entity.embedding)
        ON CONFLICT ON CONSTRAINT entities_bank_id_name_key DO UPDATE SET name = EXCLUDED.name
        RETURNING e.entity_id INTO entity_id;
        matched_by := 'new';
    ELSIF _resolve_entity.entity_type IS NOT NULL THEN
        UPDATE rcll.entities e SET entity_type = _resolve_entity.entity_type
        WHERE e.bank_id = b AND e.entity_id = _resolve_entity.entity_id AND e.entity_type IS NULL;
    END IF;

    -- every spelling seen becomes an alias of the entity (the first owner of a spelling keeps it)
    INSERT INTO rcll.entity_aliases AS a (bank_id, alias, entity_id, source)
    SELECT b, k, entity_id, CASE WHEN matched_by IN ('trigram', 'embedding') AND k = key THEN 'resolver' ELSE 'extractor' END
    FROM unnest(keys) AS k
    ON CONFLICT ON CONSTRAINT entity_aliases_pkey DO NOTHING;
END
$$;
COMMENT ON FUNCTION rcll._resolve_entity(integer, text, text, vector, text[], real, real)
    IS 'Internal: resolve an entity mention to an entity of the bank - by exact spelling, by an alias the extractor gave, by trigram similarity (pg_trgm) of the spelling, then by embedding of the name - creating it if nothing matches. Every spelling seen is recorded in entity_aliases, so two spellings of one name become one entity with aliases. Returns the entity and how it was matched (exact, alias, trigram, embedding, new).';

CREATE OR REPLACE FUNCTION rcll.resolve_entity(bank text, name text, entity_type text DEFAULT NULL,
                                               embedding vector DEFAULT NULL, aliases text[] DEFAULT '{}')
RETURNS TABLE (entity_id bigint, canonical_name text, matched_by text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    r record;
BEGIN
    r := rcll._resolve_entity(b, name, entity_type, embedding, aliases);
    RETURN QUERY SELECT e.entity_id, e.name, r.matched_by FROM rcll.entities e WHERE e.bank_id = b AND e.entity_id = r.entity_id;
END
$$;
COMMENT ON FUNCTION rcll.resolve_entity(text, text, text, vector, text[])
    IS 'Resolve (or create) an entity of a bank by name: exact spelling, alias, trigram, embedding. Returns the entity id, its canonical name and how it matched.';

CREATE OR REPLACE FUNCTION rcll._known_entities(bank_id integer, text text)
RETURNS TABLE (entity_id bigint, alias text)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- known spellings of at least 3 characters that occur in the text as whole words
    SELECT DISTINCT ON (a.entity_id) a.entity_id, a.alias
    FROM rcll.entity_aliases a
    WHERE a.bank_id = _known_entities.bank_id AND length(a.alias) >= 3
      AND strpos(lower(_known_entities.text), a.alias) > 0
      AND lower(_known_entities.text) ~ ('(^|[^[:alnum:]_])' || regexp_replace(a.alias, '([.^$*+?()\[\]{}|\\-])', '\\\1', 'g') || '($|[^[:alnum:]_])')
    ORDER BY a.entity_id, length(a.alias) DESC
$$;
COMMENT ON FUNCTION rcll._known_entities(integer, text) IS 'Internal: entities of the bank one of whose known spellings occurs in the text as a whole word (the offline extractor''s known-entity lookup).';
