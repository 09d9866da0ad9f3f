-- Rooms: the write-time janitor that canonicalises spellings, the registry triggers keep, merges and moves.

CREATE OR REPLACE FUNCTION rcll._room_key(room text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
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

CREATE OR REPLACE TRIGGER units_janitor BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW EXECUTE FUNCTION rcll._units_janitor();

-- Registry counts: writers only ever append deltas (no shared row is locked, so concurrent writers
-- neither serialise nor deadlock); rcll.fold_room_counts() folds them in with sorted upserts.

CREATE OR REPLACE FUNCTION rcll._units_rooms_inserted()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unattributed bigint;
BEGIN
    -- One pass over the statement's rows serves the registry and the authorship warning: a second
    -- statement trigger cost as much again per write.
    WITH g AS MATERIALIZED (
        SELECT n.bank_id, n.room, count(*) AS c, count(*) FILTER (WHERE n.author_source = 'none') AS none,
               bool_and(coalesce(n.provenance ->> 'room_source', '') = 'classifier') AS by_classifier
        FROM new_units n GROUP BY n.bank_id, n.room
    ), q AS (
        INSERT INTO rcll.room_count_queue (bank_id, room, delta)
        SELECT g.bank_id, g.room, g.c FROM g WHERE g.room IS NOT NULL
    ), r AS (
        -- A registry row for a room used for the first time. Existing rows are skipped without a
        -- lock; new rooms are inserted in sorted order, so single-statement writers cannot deadlock.
        INSERT INTO rcll.rooms (bank_id, name, created_by, first_used, last_used)
        SELECT g.bank_id, g.room, CASE WHEN g.by_classifier THEN 'system' ELSE 'human' END, now(), now()
        FROM g
        WHERE g.room IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM rcll.rooms x WHERE x.bank_id = g.bank_id AND x.name = g.room)
        ORDER BY g.bank_id, g.room
        ON CONFLICT (bank_id, name) DO NOTHING
    )
    SELECT sum(g.none) INTO unattributed FROM g;
    IF unattributed > 0 THEN
        -- Absent rather than wrong: never the connection's account, and said once per write.
        RAISE WARNING 'author: no identity for this write; % unit(s) stored without an author', unattributed
            USING HINT = 'Map the role in rcll.identities, have the RCLL server authenticate the caller, or declare one (author => ...).';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_rooms_inserted() IS 'Trigger (statement): appends one count delta per room written, registers rooms used for the first time (human when a caller named the room, system when the classifier did), and warns once when units were written without an author.';

CREATE OR REPLACE TRIGGER units_rooms_inserted AFTER INSERT ON rcll.memory_units
    REFERENCING NEW TABLE AS new_units
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._units_rooms_inserted();

CREATE OR REPLACE FUNCTION rcll._units_rooms_deleted()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO rcll.room_count_queue (bank_id, room, delta)
    SELECT o.bank_id, o.room, -count(*) FROM old_units o
    WHERE o.room IS NOT NULL GROUP BY o.bank_id, o.room;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_rooms_deleted() IS 'Trigger (statement): appends a negative count delta per room for deleted units.';

CREATE OR REPLACE TRIGGER units_rooms_deleted AFTER DELETE ON rcll.memory_units
    REFERENCING OLD TABLE AS old_units
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._units_rooms_deleted();

CREATE OR REPLACE FUNCTION rcll._units_room_changed()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO rcll.room_count_queue (bank_id, room, delta)
    SELECT d.bank_id, d.room, d.delta
    FROM (VALUES (OLD.bank_id, OLD.room, -1), (NEW.bank_id, NEW.room, 1)) AS d(bank_id, room, delta)
    WHERE d.room IS NOT NULL;
    IF NEW.room IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rcll.rooms r
                                            WHERE r.bank_id = NEW.bank_id AND r.name = NEW.room) THEN
        INSERT INTO rcll.rooms (bank_id, name, created_by, first_used, last_used)
        VALUES (NEW.bank_id, NEW.room, 'human', now(), now())
        ON CONFLICT (bank_id, name) DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_room_changed() IS 'Trigger: count deltas for a unit whose room changed (a move or merge). Row-level with a column list, because a statement trigger with transition tables cannot have one and would materialise every row of every UPDATE.';

CREATE OR REPLACE TRIGGER units_room_changed AFTER UPDATE OF room, bank_id ON rcll.memory_units
    FOR EACH ROW WHEN (OLD.room IS DISTINCT FROM NEW.room OR OLD.bank_id <> NEW.bank_id)
    EXECUTE FUNCTION rcll._units_room_changed();

CREATE OR REPLACE FUNCTION rcll._units_truncated()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM rcll.room_count_queue;
    UPDATE rcll.rooms SET fact_count = 0 WHERE fact_count <> 0;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_truncated() IS 'Trigger: TRUNCATE of memory_units leaves every room empty.';

CREATE OR REPLACE TRIGGER units_truncated AFTER TRUNCATE ON rcll.memory_units
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._units_truncated();

CREATE OR REPLACE FUNCTION rcll.fold_room_counts()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    -- One folder at a time; writers are never blocked (they only append).
    PERFORM pg_advisory_xact_lock(hashtext('rcll.fold_room_counts'));
    WITH d AS (
        DELETE FROM rcll.room_count_queue q RETURNING q.bank_id, q.room, q.delta, q.at
    ), g AS (
        SELECT d.bank_id, d.room, sum(d.delta)::bigint AS delta, count(*) AS c,
               min(d.at) FILTER (WHERE d.delta > 0) AS first_at, max(d.at) FILTER (WHERE d.delta > 0) AS last_at
        FROM d GROUP BY d.bank_id, d.room
    ), up AS (
        INSERT INTO rcll.rooms AS r (bank_id, name, fact_count, first_used, last_used)
        SELECT g.bank_id, g.room, g.delta, g.first_at, g.last_at FROM g
        WHERE EXISTS (SELECT 1 FROM rcll.banks b WHERE b.bank_id = g.bank_id)   -- a dropped bank's deltas go
        ORDER BY g.bank_id, g.room
        ON CONFLICT (bank_id, name) DO UPDATE
            SET fact_count = r.fact_count + excluded.fact_count,
                first_used = coalesce(r.first_used, excluded.first_used),
                last_used  = greatest(r.last_used, excluded.last_used)
        RETURNING 1
    )
    SELECT coalesce(sum(g.c), 0) INTO n FROM g;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.fold_room_counts() IS 'Fold the append-only room_count_queue into rooms.fact_count, first_used and last_used (run it from a background job; reads are exact without it). Returns the number of deltas folded.';

CREATE OR REPLACE FUNCTION rcll._wildcard(pattern text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- * any run, ? one character; everything else literal (LIKE's own % _ \ are escaped).
    SELECT replace(replace(replace(replace(replace(pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%'), '?', '_')
$$;
COMMENT ON FUNCTION rcll._wildcard(text) IS 'Internal: a * and ? wildcard pattern as a LIKE pattern, every other character literal.';

CREATE OR REPLACE FUNCTION rcll.rooms(bank text, pattern text DEFAULT '*')
RETURNS TABLE (name text, status text, merged_into text, proposed_into text, fact_count bigint,
               aliases text[], created_by text, first_used timestamptz, last_used timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH b AS (SELECT rcll._bank_id(rooms.bank) AS id),
    pending AS (
        SELECT q.room, sum(q.delta)::bigint AS delta,
               min(q.at) FILTER (WHERE q.delta > 0) AS first_at, max(q.at) FILTER (WHERE q.delta > 0) AS last_at
        FROM rcll.room_count_queue q, b WHERE q.bank_id = b.id GROUP BY q.room
    ),
    listed AS (
        SELECT r.name, r.status, r.merged_into, r.fact_count + coalesce(p.delta, 0) AS fact_count, r.created_by,
               least(r.first_used, p.first_at) AS first_used, greatest(r.last_used, p.last_at) AS last_used
        FROM rcll.rooms r CROSS JOIN b LEFT JOIN pending p ON p.room = r.name
        WHERE r.bank_id = b.id
        UNION ALL   -- deltas for a room whose registry row is gone (not expected; kept so counts stay exact)
        SELECT p.room, 'live', NULL, p.delta, 'human', p.first_at, p.last_at
        FROM pending p, b WHERE NOT EXISTS (SELECT 1 FROM rcll.rooms r WHERE r.bank_id = b.id AND r.name = p.room)
        UNION ALL   -- the classifier's vocabulary, so the floor plan is not empty on day one
        SELECT DISTINCT rr.room, 'live', NULL, 0::bigint, 'system', NULL::timestamptz, NULL::timestamptz
        FROM rcll.room_rules rr, b
        WHERE rr.enabled
          AND NOT EXISTS (SELECT 1 FROM rcll.rooms r WHERE r.bank_id = b.id AND r.name = rr.room)
          AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.room = rr.room)
    )
    SELECT l.name, l.status, l.merged_into,
           (SELECT mp.into_room FROM rcll.room_merge_proposals mp, b
            WHERE mp.bank_id = b.id AND mp.from_room = l.name AND mp.status = 'pending'),
           l.fact_count,
           coalesce((SELECT array_agg(a.alias ORDER BY a.alias) FROM rcll.room_aliases a, b
                     WHERE a.bank_id = b.id AND a.room = l.name), '{}'),
           l.created_by, l.first_used, l.last_used
    FROM listed l
    WHERE l.name ILIKE rcll._wildcard(coalesce(rooms.pattern, '*'))
       OR EXISTS (SELECT 1 FROM rcll.room_aliases a, b WHERE a.bank_id = b.id AND a.room = l.name
                  AND a.alias ILIKE rcll._wildcard(coalesce(rooms.pattern, '*')))
    ORDER BY l.fact_count DESC, l.name
$$;
COMMENT ON FUNCTION rcll.rooms(text, text) IS 'The room floor plan of a bank: every room (registry plus the classifier''s vocabulary) with its exact unit count (folded base plus pending deltas), status, merge target or pending proposal, aliases, who created it and first/last use. pattern matches the name or an alias, with * and ? wildcards, case-insensitively.';

CREATE OR REPLACE FUNCTION rcll._expand_rooms(bank_id integer, rooms text[])
RETURNS text[]
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names text[];
BEGIN
    -- The names given are always kept (a recall never loses what it asked for); each adds the
    -- canonical room its spelling, alias or merged name resolves to now - so an old name stays
    -- readable forever - and a canonical room adds the names that resolve to it.
    SELECT array_agg(DISTINCT x.name ORDER BY x.name) INTO names FROM (
        SELECT btrim(g.name) AS name FROM unnest(rooms) AS g(name)
        UNION ALL
        SELECT (rcll._canonical_room(_expand_rooms.bank_id, g.name)).room FROM unnest(rooms) AS g(name)
    ) x WHERE x.name IS NOT NULL AND x.name <> '';
    SELECT array_agg(DISTINCT x.name ORDER BY x.name) INTO names FROM (
        SELECT unnest(names) AS name
        UNION ALL
        SELECT a.alias FROM rcll.room_aliases a
        WHERE a.bank_id = _expand_rooms.bank_id AND a.room = ANY (names)
        UNION ALL
        SELECT r.name FROM rcll.rooms r
        WHERE r.bank_id = _expand_rooms.bank_id AND r.status = 'merged' AND r.merged_into = ANY (names)
    ) x;
    RETURN coalesce(names, '{}');
END
$$;
COMMENT ON FUNCTION rcll._expand_rooms(integer, text[]) IS 'Internal: the rooms a recall reads - the names given, the canonical room each resolves to (spelling, alias, approved merge: an old name stays readable forever), and the aliases and merged names of those rooms. NULL means all rooms. Provisional (unapproved) merges expand nothing.';

-- Semantic merges: proposals only, held provisional until a person approves.

CREATE OR REPLACE FUNCTION rcll._actor()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(rcll.current_agent(), 'role:' || session_user)
$$;
COMMENT ON FUNCTION rcll._actor() IS 'Internal: who is acting, for audit rows: the resolved agent, else role:<session role> (audit only; never used as an author).';

CREATE OR REPLACE FUNCTION rcll._registry_room(bank_id integer, room text)
RETURNS rcll.rooms
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r rcll.rooms;
BEGIN
    SELECT * INTO r FROM rcll.rooms x WHERE x.bank_id = _registry_room.bank_id AND x.name = room;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'room: no room "%" in this bank''s registry', room USING ERRCODE = '42704',
            HINT = 'List rooms with SELECT * FROM rcll.rooms(''<bank>''); name a room exactly as listed.';
    END IF;
    RETURN r;
END
$$;
COMMENT ON FUNCTION rcll._registry_room(integer, text) IS 'Internal: a room''s registry row, or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll.propose_room_merge(bank text, from_room text, into_room text, reason text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b   integer := rcll._bank_id(bank);
    src rcll.rooms;
    dst rcll.rooms;
    id  bigint;
BEGIN
    IF nullif(btrim(reason), '') IS NULL THEN
        RAISE EXCEPTION 'reason: a merge proposal needs a reason' USING ERRCODE = '22023',
            HINT = 'Say why the two rooms are one subject; a person reads it before approving.';
    END IF;
    src := rcll._registry_room(b, from_room);
    dst := rcll._registry_room(b, into_room);
    IF src.name = dst.name THEN
        RAISE EXCEPTION 'into_room: a room cannot merge into itself' USING ERRCODE = '22023';
    END IF;
    IF src.status <> 'live' THEN
        RAISE EXCEPTION 'from_room: room "%" is %', src.name, src.status USING ERRCODE = '55000',
            HINT = 'Only a live room can be proposed for a merge; decide the pending proposal first (rcll.approve_room_merge / rcll.reject_room_merge).';
    END IF;
    IF dst.status <> 'live' THEN
        RAISE EXCEPTION 'into_room: room "%" is %', dst.name, dst.status USING ERRCODE = '55000',
            HINT = 'Merge into a live room (a merged room''s facts live in its merged_into).';
    END IF;
    UPDATE rcll.rooms r SET status = 'provisional' WHERE r.bank_id = b AND r.name = src.name;
    INSERT INTO rcll.room_merge_proposals (bank_id, from_room, into_room, reason, proposed_by)
    VALUES (b, src.name, dst.name, btrim(reason), rcll._actor())
    RETURNING proposal_id INTO id;
    INSERT INTO rcll.audit_log (bank_id, actor, action, target, detail)
    VALUES (b, rcll._actor(), 'room_merge_propose',
            jsonb_build_object('from_room', src.name, 'into_room', dst.name),
            jsonb_build_object('proposal_id', id, 'reason', btrim(reason)));
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll.propose_room_merge(text, text, text, text) IS 'Propose a semantic merge of from_room into into_room. Nothing moves: from_room is held provisional until a person calls rcll.approve_room_merge or rcll.reject_room_merge. Returns the proposal id.';

CREATE OR REPLACE FUNCTION rcll._pending_merge(bank_id integer, from_room text)
RETURNS rcll.room_merge_proposals
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p rcll.room_merge_proposals;
BEGIN
    SELECT * INTO p FROM rcll.room_merge_proposals mp
    WHERE mp.bank_id = _pending_merge.bank_id AND mp.from_room = _pending_merge.from_room AND mp.status = 'pending'
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'from_room: no pending merge proposal for room "%"', from_room USING ERRCODE = '42704',
            HINT = 'Propose it first with rcll.propose_room_merge(bank, from_room, into_room, reason).';
    END IF;
    RETURN p;
END
$$;
COMMENT ON FUNCTION rcll._pending_merge(integer, text) IS 'Internal: the pending merge proposal for a room, locked, or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll.approve_room_merge(bank text, from_room text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b    integer := rcll._bank_id(bank);
    p    rcll.room_merge_proposals;
    dst  text;
    ids  bigint[];
BEGIN
    -- A person decides: an agent (a mapped role, or rcll.agent set by the server) may propose only.
    IF rcll.current_agent() IS NOT NULL THEN
        RAISE EXCEPTION 'approve_room_merge: agent "%" cannot approve a merge', rcll.current_agent()
            USING ERRCODE = '42501',
            HINT = 'A person approves: connect as a role not mapped in rcll.identities, with rcll.agent unset.';
    END IF;
    p := rcll._pending_merge(b, btrim(from_room));
    dst := rcll._follow_merges(b, p.into_room);
    PERFORM 1 FROM rcll.rooms r WHERE r.bank_id = b AND r.name IN (p.from_room, dst) ORDER BY r.name FOR UPDATE;

    WITH moved AS (
        UPDATE rcll.memory_units u SET room = dst, updated_at = now()
        WHERE u.bank_id = b AND u.room = p.from_room
        RETURNING u.unit_id
    )
    SELECT coalesce(array_agg(moved.unit_id ORDER BY moved.unit_id), '{}') INTO ids FROM moved;

    UPDATE rcll.rooms r SET status = 'merged', merged_into = dst WHERE r.bank_id = b AND r.name = p.from_room;
    UPDATE rcll.rooms r SET merged_into = dst WHERE r.bank_id = b AND r.status = 'merged' AND r.merged_into = p.from_room;
    UPDATE rcll.room_aliases a SET room = dst WHERE a.bank_id = b AND a.room = p.from_room;
    INSERT INTO rcll.room_aliases (bank_id, alias, room, reason) VALUES (b, p.from_room, dst, 'merge')
    ON CONFLICT (bank_id, alias) DO UPDATE SET room = excluded.room, reason = 'merge';
    UPDATE rcll.room_merge_proposals mp SET status = 'approved', decided_by = rcll._actor(), decided_at = now()
    WHERE mp.proposal_id = p.proposal_id;
    INSERT INTO rcll.audit_log (bank_id, actor, action, target, detail)
    VALUES (b, rcll._actor(), 'room_merge_approve',
            jsonb_build_object('from_room', p.from_room, 'into_room', dst, 'unit_ids', to_jsonb(ids)),
            jsonb_build_object('proposal_id', p.proposal_id, 'reason', p.reason, 'proposed_by', p.proposed_by));
    RETURN cardinality(ids);
END
$$;
COMMENT ON FUNCTION rcll.approve_room_merge(text, text) IS 'A person approves the pending merge of from_room: its units move into the target room, the room becomes merged, and its name stays readable forever as an alias (a recall naming it reads the merged room). Refused for agents. Returns the number of units moved.';

CREATE OR REPLACE FUNCTION rcll.reject_room_merge(bank text, from_room text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    p rcll.room_merge_proposals;
BEGIN
    p := rcll._pending_merge(b, btrim(from_room));
    UPDATE rcll.rooms r SET status = 'live' WHERE r.bank_id = b AND r.name = p.from_room AND r.status = 'provisional';
    UPDATE rcll.room_merge_proposals mp SET status = 'rejected', decided_by = rcll._actor(), decided_at = now()
    WHERE mp.proposal_id = p.proposal_id;
    INSERT INTO rcll.audit_log (bank_id, actor, action, target, detail)
    VALUES (b, rcll._actor(), 'room_merge_reject',
            jsonb_build_object('from_room', p.from_room, 'into_room', p.into_room),
            jsonb_build_object('proposal_id', p.proposal_id, 'reason', reason));
END
$$;
COMMENT ON FUNCTION rcll.reject_room_merge(text, text, text) IS 'Reject the pending merge of from_room: nothing moves and the room is live again.';

-- Moves: audited and reversible.

CREATE OR REPLACE FUNCTION rcll.move_units(bank text, unit_ids bigint[], to_room text, reason text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b       integer := rcll._bank_id(bank);
    dst     record;
    ids     bigint[];
    missing bigint[];
    prior   jsonb;
    move_id bigint;
BEGIN
    IF nullif(btrim(reason), '') IS NULL THEN
        RAISE EXCEPTION 'reason: a move needs a reason' USING ERRCODE = '22023',
            HINT = 'Say why the units belong in the other room; it is kept in rcll.audit_log.';
    END IF;
    dst := rcll._canonical_room(b, to_room);
    IF dst.room IS NULL THEN
        RAISE EXCEPTION 'to_room: a room name is required' USING ERRCODE = '22023',
            HINT = 'Name the room to move the units into (see rcll.rooms(bank)).';
    END IF;
    ids := ARRAY(SELECT DISTINCT i FROM unnest(unit_ids) AS i WHERE i IS NOT NULL ORDER BY 1);
    IF cardinality(ids) = 0 THEN
        RAISE EXCEPTION 'unit_ids: no units given' USING ERRCODE = '22023';
    END IF;
    -- Lock in id order so two moves of overlapping sets cannot deadlock.
    PERFORM 1 FROM rcll.memory_units u WHERE u.unit_id = ANY (ids) AND u.bank_id = b ORDER BY u.unit_id FOR UPDATE;
    missing := ARRAY(SELECT i FROM unnest(ids) AS i
                     WHERE NOT EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.unit_id = i AND u.bank_id = b));
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'unit_ids: % not in bank "%"', missing, bank USING ERRCODE = '42704',
            HINT = 'Pass unit ids recall returned for this bank.';
    END IF;
    SELECT jsonb_agg(jsonb_build_object('unit_id', u.unit_id, 'room', u.room) ORDER BY u.unit_id) INTO prior
    FROM rcll.memory_units u WHERE u.unit_id = ANY (ids);
    UPDATE rcll.memory_units u SET room = dst.room, updated_at = now()
    WHERE u.unit_id = ANY (ids) AND u.room IS DISTINCT FROM dst.room;
    INSERT INTO rcll.audit_log (bank_id, actor, action, target, detail)
    VALUES (b, rcll._actor(), 'room_move',
            jsonb_build_object('unit_ids', to_jsonb(ids), 'to_room', dst.room),
            jsonb_build_object('reason', btrim(reason), 'typed_room', to_room, 'resolved', dst.how, 'before', prior))
    RETURNING audit_id INTO move_id;
    RETURN move_id;
END
$$;
COMMENT ON FUNCTION rcll.move_units(text, bigint[], text, text) IS 'Move units into another room (its name canonicalised by spelling like a write), recording every unit''s previous room in rcll.audit_log. Returns the move id for rcll.undo_move.';

CREATE OR REPLACE FUNCTION rcll.undo_move(bank text, move_id bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b     integer := rcll._bank_id(bank);
    m     rcll.audit_log;
    moved text[];
    n     integer;
BEGIN
    SELECT * INTO m FROM rcll.audit_log a
    WHERE a.audit_id = move_id AND a.bank_id = b AND a.action = 'room_move' FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'move_id: no room move % in bank "%"', move_id, bank USING ERRCODE = '42704',
            HINT = 'Use the id rcll.move_units returned (rcll.audit_log rows with action room_move).';
    END IF;
    IF EXISTS (SELECT 1 FROM rcll.audit_log a WHERE a.bank_id = b AND a.action = 'room_move_undo'
               AND (a.detail ->> 'move_id')::bigint = move_id) THEN
        RAISE EXCEPTION 'move_id: move % was already undone', move_id USING ERRCODE = '55000';
    END IF;
    -- Only units still where the move put them: a later move must be undone first.
    moved := ARRAY(SELECT f.unit_id::text
                   FROM jsonb_to_recordset(m.detail -> 'before') AS f(unit_id bigint, room text)
                   JOIN rcll.memory_units u ON u.unit_id = f.unit_id
                   WHERE u.room IS DISTINCT FROM m.target ->> 'to_room' ORDER BY f.unit_id);
    IF cardinality(moved) > 0 THEN
        RAISE EXCEPTION 'move_id: units % were moved again after move %', moved, move_id USING ERRCODE = '55000',
            HINT = 'Undo the later moves first (newest first).';
    END IF;
    UPDATE rcll.memory_units u SET room = f.room, updated_at = now()
    FROM jsonb_to_recordset(m.detail -> 'before') AS f(unit_id bigint, room text)
    WHERE u.unit_id = f.unit_id AND u.bank_id = b AND u.room IS DISTINCT FROM f.room;
    GET DIAGNOSTICS n = ROW_COUNT;
    INSERT INTO rcll.audit_log (bank_id, actor, action, target, detail)
    VALUES (b, rcll._actor(), 'room_move_undo', m.target, jsonb_build_object('move_id', move_id, 'restored', n));
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.undo_move(text, bigint) IS 'Undo a move: put every unit back in the room it was in before (refused if any was moved again since, or the move was already undone). Audited; returns the number of units restored.';
