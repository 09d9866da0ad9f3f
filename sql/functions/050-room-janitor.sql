-- Room janitor: the write-time trigger that files each unit under the canonical spelling of its room.

CREATE OR REPLACE FUNCTION rcll._room_key(room text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Spelling only: case, separators, a plural ending. Both sides of a comparison go through
    -- this, so "docs" and "doc" meet at "doc" however odd the stem looks.
    SELECT regexp_replace(regexp_replace(
               regexp_replace(lower(room), '[[:space:]_./:-]+', '', 'g'),
               'ies$', 'y'), '([^s])s$', '\1')
$$;
COMMENT ON FUNCTION rcll._room_key(text) IS 'Internal: the spelling key of a room name (lower case, no separators, no plural ending); two names with one key are one room.';

CREATE OR REPLACE FUNCTION rcll._follow_merges(bank_id integer, room text)
RETURNS text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    cur  text := room;
    nxt  text;
BEGIN
    FOR hop IN 1 .. 16 LOOP     -- merges form chains, never cycles; the bound is a guard
        SELECT r.merged_into INTO nxt FROM rcll.rooms r
        WHERE r.bank_id = _follow_merges.bank_id AND r.name = cur AND r.status = 'merged';
        EXIT WHEN nxt IS NULL;
        cur := nxt;
        nxt := NULL;
    END LOOP;
    RETURN cur;
END
$$;
COMMENT ON FUNCTION rcll._follow_merges(integer, text) IS 'Internal: the live room a (possibly merged) room name now lives in.';

CREATE OR REPLACE FUNCTION rcll._canonical_room(bank_id integer, typed text, OUT room text, OUT how text)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    t      text := nullif(btrim(typed), '');
    k      text;
    st     text;
    target text;
    hits   text[];
BEGIN
    IF t IS NULL THEN
        how := 'none';
        RETURN;
    END IF;
    -- 1. A registry name as typed.
    SELECT r.status, r.merged_into INTO st, target FROM rcll.rooms r
    WHERE r.bank_id = _canonical_room.bank_id AND r.name = t;
    IF FOUND THEN
        IF st = 'merged' THEN
            room := rcll._follow_merges(_canonical_room.bank_id, target);
            how := 'merged';
        ELSE
            room := t;
            how := 'exact';
        END IF;
        RETURN;
    END IF;
    -- 2. A spelling (or merged name) recorded before.
    SELECT a.room INTO target FROM rcll.room_aliases a
    WHERE a.bank_id = _canonical_room.bank_id AND a.alias = t;
    IF FOUND THEN
        room := rcll._follow_merges(_canonical_room.bank_id, target);
        how := 'alias';
        RETURN;
    END IF;
    -- 3. Same spelling key as a known room (the bank's registry, or the classifier's vocabulary so
    --    the floor plan is not empty on day one); else an exact prefix of exactly one known room.
    k := rcll._room_key(t);
    IF k = '' THEN
        room := t;
        how := 'new';
        RETURN;
    END IF;
    WITH known AS (
        SELECT r.name, r.status, r.merged_into, 0 AS pref FROM rcll.rooms r
        WHERE r.bank_id = _canonical_room.bank_id
        UNION ALL
        SELECT DISTINCT rr.room, 'live', NULL::text, 1 FROM rcll.room_rules rr
        WHERE rr.enabled AND NOT EXISTS (SELECT 1 FROM rcll.rooms r
                                         WHERE r.bank_id = _canonical_room.bank_id AND r.name = rr.room)
    )
    SELECT array_agg(kn.name ORDER BY kn.pref, kn.status = 'merged', kn.name) INTO hits
    FROM known kn WHERE rcll._room_key(kn.name) = k;
    IF hits IS NOT NULL THEN
        room := rcll._follow_merges(_canonical_room.bank_id, hits[1]);
        how := CASE WHEN room = t THEN 'known' ELSE 'spelling' END;
        RETURN;
    END IF;
    IF length(k) >= 3 THEN
        WITH known AS (
            SELECT r.name FROM rcll.rooms r WHERE r.bank_id = _canonical_room.bank_id
            UNION
            SELECT rr.room FROM rcll.room_rules rr WHERE rr.enabled
        )
        SELECT array_agg(DISTINCT rcll._follow_merges(_canonical_room.bank_id, kn.name)) INTO hits
        FROM known kn WHERE left(rcll._room_key(kn.name), length(k)) = k;
        IF cardinality(hits) = 1 THEN        -- ambiguous prefixes are not spelling: keep as typed
            room := hits[1];
            how := 'spelling';
            RETURN;
        END IF;
    END IF;
    -- 4. Nobody used it before: kept as typed.
    room := t;
    how := 'new';
END
$$;
COMMENT ON FUNCTION rcll._canonical_room(integer, text) IS 'Internal: the canonical room for a typed name and how it was found: exact, merged (followed into the live room), alias, known (vocabulary), spelling (case, separators, plural, unique exact prefix of at least 3 characters) or new (kept as typed). Never semantic.';

CREATE OR REPLACE FUNCTION rcll._units_janitor()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer: a writer needs INSERT on memory_units only; the registry and aliases are bookkeeping.
SECURITY DEFINER
AS $$
DECLARE
    typed   text := nullif(btrim(NEW.room), '');
    res     record;
    auto    text;
    live    text;
    aliased text;
BEGIN
    IF NEW.tags IS NULL THEN
        NEW.tags := '{}';
    END IF;
    -- room-alias: and room-new: are the janitor's record; a caller's are forged and discarded.
    IF array_to_string(NEW.tags, E'\x1f') LIKE '%room-%' AND NOT rcll._carry_tags() THEN
        NEW.tags := ARRAY(SELECT t FROM unnest(NEW.tags) AS t
                          WHERE t NOT LIKE 'room-alias:%' AND t NOT LIKE 'room-new:%');
    END IF;

    IF typed IS NULL THEN
        IF NEW.room IS NOT NULL THEN
            NEW.room := NULL;                       -- blank is no room
        END IF;
        IF rcll._classify_rooms_enabled(NEW.bank_id, NEW.kind) THEN
            auto := rcll.classify_room(NEW.text);
            IF auto IS NOT NULL THEN
                NEW.room := (rcll._canonical_room(NEW.bank_id, auto)).room;
                NEW.provenance := NEW.provenance || '{"room_source": "classifier"}'::jsonb;
            END IF;
        END IF;
    ELSE
        -- The common cases in one index probe each: a live registry name as typed, or a spelling
        -- recorded before (alias targets are never merged rooms: approving a merge repoints them).
        SELECT r.name, a.room INTO live, aliased
        FROM (SELECT 1) AS one
        LEFT JOIN rcll.rooms r ON r.bank_id = NEW.bank_id AND r.name = typed AND r.status <> 'merged'
        LEFT JOIN rcll.room_aliases a ON a.bank_id = NEW.bank_id AND a.alias = typed;
        IF live IS NOT NULL THEN
            IF NEW.room <> typed THEN
                NEW.room := typed;
            END IF;
        ELSIF aliased IS NOT NULL THEN
            NEW.room := aliased;
            NEW.tags := NEW.tags || ('room-alias:' || typed);
        ELSE
            res := rcll._canonical_room(NEW.bank_id, typed);
            NEW.room := res.room;
            IF res.how = 'new' THEN
                NEW.tags := NEW.tags || ('room-new:' || typed);
            ELSIF res.room <> typed THEN
                -- Nothing about the call is lost: the typed string stays on the unit.
                NEW.tags := NEW.tags || ('room-alias:' || typed);
                IF res.how <> 'alias' THEN
                    INSERT INTO rcll.room_aliases (bank_id, alias, room, reason)
                    VALUES (NEW.bank_id, typed, res.room, 'spelling')
                    ON CONFLICT (bank_id, alias) DO NOTHING;
                END IF;
            END IF;
        END IF;
    END IF;

    IF NEW.layer IS NULL THEN
        NEW.layer := coalesce((SELECT l.layer FROM rcll.layer_rules l WHERE l.hall = NEW.hall), 'L2');
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_janitor() IS 'Trigger: canonicalises a new unit''s room by spelling only (the typed string kept as a room-alias:<typed> tag, a first-ever room kept as typed and tagged room-new:<name>), classifies a missing room when enabled, drops forged room tags, and defaults the layer from rcll.layer_rules by hall.';

-- Not while a dump is restored (rcll._restoring): the rows come back as they were.
CREATE OR REPLACE TRIGGER units_janitor BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_janitor();
