-- Keyless entities: who said a chunk and which names it writes, linked at retain with no model.
--
-- Chunk mode has no extractor, yet recall needs to know *who* a unit is about: on LoCoMo almost
-- every question names a speaker (research/locomo/RESEARCH.md, third round). A chunk is linked to
-- (a) its speaker - a leading "Name:" of its text (after an optional "[date]"), else its author -
-- and (b) every word it writes capitalised away from a sentence start (stop words and one-letter
-- words excepted): names, places, titles. The links go into the same entities / entity_aliases /
-- unit_entities tables the offline extractor writes, with role 'speaker' or 'name', and the
-- entity channel (sql/functions/125-channel-entity.sql) reads them.

CREATE OR REPLACE FUNCTION rcll._keyless_mentions(text text, author text, config regconfig DEFAULT 'english')
RETURNS TABLE (name text, role text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    WITH p AS (
        -- "[<date>] <Speaker>: <body>": the speaker is one to three capitalised words before a colon.
        SELECT r.m[2] AS speaker,
               CASE WHEN r.m IS NULL THEN coalesce(_keyless_mentions.text, '')
                    ELSE substr(_keyless_mentions.text, length(r.m[1]) + 1) END AS body
        FROM (SELECT regexp_match(coalesce(_keyless_mentions.text, ''),
                  '^(\s*(?:\[[^]]*\]\s*)?([[:upper:]][[:alnum:]_.''-]*(?: [[:upper:]][[:alnum:]_.''-]*){0,2})\s*:)(?:\s|$)') AS m) r
    ), tokens AS (
        SELECT t.tok, t.i, lag(t.tok) OVER (ORDER BY t.i) AS prev
        FROM p, regexp_split_to_table(btrim(p.body), '\s+') WITH ORDINALITY AS t(tok, i)
    ), words AS (
        -- A word is capitalised "away from a sentence start" when it is not the body's first
        -- token, the token before it does not end a sentence (. ! ? :) and it opens no
        -- parenthesis, quote or bracket. Possessives are cut at the apostrophe.
        SELECT split_part((regexp_match(k.tok, '^[^[:alpha:]]*([[:alpha:]][[:alpha:]''’-]*)'))[1], '''', 1) AS w,
               k.prev IS NULL OR k.prev ~ '[.!?:]["'')\]’”]*$' OR k.tok ~ '^[("\[/“‘]' AS starts
        FROM tokens k
    )
    SELECT DISTINCT ON (lower(s.name)) s.name, s.role FROM (
        SELECT coalesce(p.speaker, nullif(btrim(_keyless_mentions.author), '')) AS name, 'speaker' AS role, 0 AS o FROM p
        UNION ALL
        SELECT split_part(w.w, '’', 1), 'name', 1 FROM words w
        WHERE w.w ~ '^[[:upper:]]' AND NOT w.starts AND length(split_part(w.w, '’', 1)) > 1
          AND length(to_tsvector(_keyless_mentions.config, split_part(w.w, '’', 1))) > 0
    ) s
    WHERE s.name IS NOT NULL AND rcll._entity_key(s.name) IS NOT NULL
    ORDER BY lower(s.name), s.o
$$;
COMMENT ON FUNCTION rcll._keyless_mentions(text, text, regconfig)
    IS 'Internal: the keyless entities of a chunk - its speaker (a leading "Name:" after an optional "[date]", else the author; role speaker) and the words it writes capitalised away from a sentence start, stop words (under config) and one-letter words excepted (role name). One row per entity key.';

CREATE OR REPLACE FUNCTION rcll._link_keyless_entities(bank_id integer, unit_ids bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
-- Invoker, and not executable by PUBLIC (below): it writes any bank's entities. Agents reach it
-- only through rcll._link_written_keyless_entities, for the units their own transaction wrote.
AS $$
DECLARE
    b      integer := _link_keyless_entities.bank_id;
    cfg    regconfig;
    m      record;
    eid    bigint;
    linked integer := 0;
    touched bigint[] := '{}';
    n      integer;
BEGIN
    SELECT x.text_search_config INTO cfg FROM rcll.banks x WHERE x.bank_id = b;
    -- One lookup or insert per distinct spelling (exact key only: no trigram or embedding
    -- resolution, which could merge two people whose names look alike).
    FOR m IN
        SELECT rcll._entity_key(k.name) AS key, min(k.name) AS name,
               array_agg(k.unit_id) AS units, array_agg(k.role) AS roles, array_agg(k.name) AS names
        FROM (SELECT u.unit_id, x.name, x.role
              FROM rcll.memory_units u, LATERAL rcll._keyless_mentions(u.text, u.author, cfg) x
              WHERE u.unit_id = ANY (_link_keyless_entities.unit_ids) AND u.bank_id = b) k
        GROUP BY 1
    LOOP
        SELECT a.entity_id INTO eid FROM rcll.entity_aliases a WHERE a.bank_id = b AND a.alias = m.key;
        IF eid IS NULL THEN
            INSERT INTO rcll.entities AS e (bank_id, name)
            VALUES (b, btrim(m.name))
            ON CONFLICT ON CONSTRAINT entities_bank_id_name_key DO UPDATE SET name = EXCLUDED.name
            RETURNING e.entity_id INTO eid;
            INSERT INTO rcll.entity_aliases AS a (bank_id, alias, entity_id, source)
            VALUES (b, m.key, eid, 'extractor')
            ON CONFLICT ON CONSTRAINT entity_aliases_pkey DO NOTHING;
        END IF;
        INSERT INTO rcll.unit_entities AS ue (unit_id, entity_id, bank_id, role, spellings)
        SELECT x.unit_id, eid, b, x.role, ARRAY[x.name] FROM unnest(m.units, m.roles, m.names) AS x(unit_id, role, name)
        ON CONFLICT ON CONSTRAINT unit_entities_pkey DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        linked := linked + n;
        touched := touched || eid;
    END LOOP;
    -- ue.bank_id = b, not = e.bank_id: Citus prunes shards by a value of the distribution column,
    -- not by a correlation - correlated, this UPDATE ran on every shard of every worker.
    UPDATE rcll.entities e
    SET mention_count = (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.entity_id = e.entity_id)
    WHERE e.bank_id = b AND e.entity_id = ANY (touched);
    RETURN linked;
END
$$;
COMMENT ON FUNCTION rcll._link_keyless_entities(integer, bigint[])
    IS 'Internal: link the given units of a bank to their keyless entities (rcll._keyless_mentions: speaker, capitalised names), creating entities and aliases by exact spelling key. Returns the number of new links. Not executable by PUBLIC: writers reach it through rcll._link_written_keyless_entities; the backfill rcll.link_keyless_entities is for the owner.';
REVOKE EXECUTE ON FUNCTION rcll._link_keyless_entities(integer, bigint[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll._link_written_keyless_entities(bank_id integer, unit_ids bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
-- Definer: agents' roles may insert units but not update entities; the links are the owner's
-- bookkeeping, derived from the units' own text (as the lexical copy and room counts are). Only
-- units this very transaction wrote (created_at = now(), the transaction's start) are linked, so
-- a caller cannot reach another bank's units by passing their ids: under bank isolation it could
-- not have written them.
SECURITY DEFINER
AS $$
DECLARE
    written bigint[];
    -- This transaction's start, read here: on a Citus cluster a now() inside the statement below
    -- would be the worker's own transaction start, not the instant the units were stamped with.
    started constant timestamptz := now();
BEGIN
    -- Two statements, not a call with a subquery for argument: on a Citus cluster a statement that
    -- reads one bank's shards is sent whole to its worker, the call with it, and the call's own
    -- writes would then run nested inside a shard's query.
    written := ARRAY(SELECT u.unit_id FROM rcll.memory_units u
                     WHERE u.unit_id = ANY (_link_written_keyless_entities.unit_ids)
                       AND u.bank_id = _link_written_keyless_entities.bank_id
                       AND u.created_at = started);
    RETURN rcll._link_keyless_entities(_link_written_keyless_entities.bank_id, written);
END
$$;
COMMENT ON FUNCTION rcll._link_written_keyless_entities(integer, bigint[])
    IS 'Internal: rcll._link_keyless_entities for the units of a bank that the calling transaction wrote (created_at = now()); others are ignored. rcll.retain_chunks calls it for every chunk it writes.';

CREATE OR REPLACE FUNCTION rcll.link_keyless_entities(bank text)
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._link_keyless_entities(b.id, ARRAY(
        SELECT u.unit_id FROM rcll.memory_units u WHERE u.bank_id = b.id AND u.kind = 'chunk' ORDER BY u.unit_id))
    FROM (SELECT rcll._bank_id(link_keyless_entities.bank) AS id) b
$$;
COMMENT ON FUNCTION rcll.link_keyless_entities(text)
    IS 'Backfill, for the schema owner: link every chunk of a bank to its keyless entities (speaker, capitalised names), as rcll.retain_chunks does for new chunks. Re-runnable (existing links are kept). Returns the number of new links. For a store written before the entity channel: SELECT rcll.link_keyless_entities(''fleet'').';
