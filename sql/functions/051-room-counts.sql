-- Room counts: the registry triggers append per-room deltas; rcll.fold_room_counts() folds them.

-- Registry counts: writers only ever append deltas (no shared row is locked, so concurrent writers
-- neither serialise nor deadlock); rcll.fold_room_counts() folds them in with sorted upserts.

CREATE OR REPLACE FUNCTION rcll._units_room_counts()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
DECLARE
    unattributed bigint;
    changed rcll.memory_units[];
    g_banks integer[];
    g_rooms text[];
    g_counts bigint[];
    g_by_classifier boolean[];
BEGIN
    -- One function for every way units enter, leave or change rooms; each trigger below says
    -- which (statement triggers with transition tables for inserts and deletes, a row trigger with
    -- a column list for room changes, because a statement trigger with transition tables cannot
    -- have one and would materialise every row of every UPDATE).
    -- The transition table is read by a statement of its own: on a Citus shard a statement that
    -- also names a distributed table is planned by Citus, which cannot see it.
    IF TG_OP = 'INSERT' THEN
        changed := ARRAY(SELECT n FROM new_units n);
    ELSIF TG_OP = 'DELETE' THEN
        changed := ARRAY(SELECT o FROM old_units o);
    END IF;
    IF TG_OP = 'INSERT' THEN
        -- One pass over the statement's rows serves the registry and the authorship warning: a
        -- second statement trigger cost as much again per write. Kept in arrays and written by
        -- statements of their own (Citus plans no CTE that writes two distributed tables).
        SELECT array_agg(g.bank_id ORDER BY g.bank_id, g.room), array_agg(g.room ORDER BY g.bank_id, g.room),
               array_agg(g.c ORDER BY g.bank_id, g.room), array_agg(g.by_classifier ORDER BY g.bank_id, g.room),
               sum(g.none)
        INTO g_banks, g_rooms, g_counts, g_by_classifier, unattributed
        FROM (SELECT n.bank_id, n.room, count(*) AS c, count(*) FILTER (WHERE n.author_source = 'none') AS none,
                     bool_and(coalesce(n.provenance ->> 'room_source', '') = 'classifier') AS by_classifier
              FROM unnest(changed) n
              GROUP BY n.bank_id, n.room) g;
        INSERT INTO rcll.room_count_queue (bank_id, room, delta)
        SELECT g.bank_id, g.room, g.c FROM unnest(g_banks, g_rooms, g_counts) g(bank_id, room, c) WHERE g.room IS NOT NULL;
        -- A registry row for a room used for the first time: existing rows are skipped without a
        -- lock (ON CONFLICT DO NOTHING locks none); new rooms are inserted in sorted order, so
        -- single-statement writers cannot deadlock.
        INSERT INTO rcll.rooms (bank_id, name, created_by, first_used, last_used)
        SELECT g.bank_id, g.room, CASE WHEN g.by_classifier THEN 'system' ELSE 'human' END, now(), now()
        FROM unnest(g_banks, g_rooms, g_by_classifier) WITH ORDINALITY g(bank_id, room, by_classifier, i)
        WHERE g.room IS NOT NULL
        ORDER BY g.i
        ON CONFLICT (bank_id, name) DO NOTHING;
        IF unattributed > 0 THEN
            -- Absent rather than wrong: never the connection's account, and said once per write.
            RAISE WARNING 'author: no identity for this write; % unit(s) stored without an author', unattributed
                USING HINT = 'Map the role in rcll.identities, have the RCLL server authenticate the caller, or declare one (author => ...).';
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO rcll.room_count_queue (bank_id, room, delta)
        SELECT o.bank_id, o.room, -count(*) FROM unnest(changed) o
        WHERE o.room IS NOT NULL GROUP BY o.bank_id, o.room;
    ELSIF TG_OP = 'UPDATE' THEN
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
    ELSE    -- TRUNCATE leaves every room empty
        DELETE FROM rcll.room_count_queue;
        UPDATE rcll.rooms SET fact_count = 0 WHERE fact_count <> 0;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_room_counts() IS 'Trigger (units_room_counts_*): appends per-room count deltas as units are inserted (one per room written; also registers rooms used for the first time - human when a caller named the room, system when the classifier did - and warns once when units were written without an author), deleted (negative), or change room in a move or merge (row-level); TRUNCATE empties every room.';

-- The trigger names are not those of 0.1.0 (units_rooms_inserted, ...): an upgrade drops those
-- triggers, which held the four functions this one replaces, before it drops the functions.
CREATE OR REPLACE TRIGGER units_room_counts_inserted AFTER INSERT ON rcll.memory_units
    REFERENCING NEW TABLE AS new_units
    FOR EACH STATEMENT WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE TRIGGER units_room_counts_deleted AFTER DELETE ON rcll.memory_units
    REFERENCING OLD TABLE AS old_units
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE TRIGGER units_room_counts_changed AFTER UPDATE OF room, bank_id ON rcll.memory_units
    FOR EACH ROW WHEN (OLD.room IS DISTINCT FROM NEW.room OR OLD.bank_id <> NEW.bank_id)
    EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE TRIGGER units_room_counts_truncated AFTER TRUNCATE ON rcll.memory_units
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE FUNCTION rcll.fold_room_counts()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
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
