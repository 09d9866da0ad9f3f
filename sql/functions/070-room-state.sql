-- Keyed room state: exact-key, versioned, compare-and-set - never similarity search.

CREATE OR REPLACE FUNCTION rcll._lock_state(bank_id integer, room text, key text)
RETURNS void
LANGUAGE sql VOLATILE STRICT
AS $$
    -- A transaction-level advisory lock per (bank, room, key): writers of one key take turns,
    -- writers of other keys and readers never wait. The jsonb text keeps the three apart
    -- whatever characters room and key hold.
    SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
        pg_catalog.jsonb_build_array('rcll.state', bank_id, room, key)::text, 0))
$$;
COMMENT ON FUNCTION rcll._lock_state(integer, text, text) IS 'Internal: take a keyed state''s write lock until the transaction ends (rcll.put_state takes it, rcll.lock_states takes it for a read-modify-write).';

CREATE OR REPLACE FUNCTION rcll.lock_states(bank text, rooms text[], keys text[])
RETURNS TABLE (room text, key text, version integer, value jsonb, provenance jsonb, created_at timestamptz)
LANGUAGE plpgsql VOLATILE STRICT
AS $$
#variable_conflict use_column
DECLARE
    b integer := rcll._bank_id(bank);
    k record;
BEGIN
    IF cardinality(rooms) IS DISTINCT FROM cardinality(keys) THEN
        RAISE EXCEPTION 'keys: % rooms but % keys', cardinality(rooms), cardinality(keys) USING ERRCODE = 'RC001',
            COLUMN = 'keys', HINT = 'Pass one key per room: the pairs (rooms[i], keys[i]).';
    END IF;
    -- Always in one order (the pairs sorted), so that two callers locking overlapping keys
    -- cannot each hold one the other waits for.
    FOR k IN SELECT DISTINCT u.room COLLATE "C" AS room, u.key COLLATE "C" AS key
             FROM unnest(rooms, keys) AS u(room, key)
             WHERE u.room IS NOT NULL AND u.key IS NOT NULL
             ORDER BY 1, 2 LOOP
        PERFORM rcll._lock_state(b, k.room, k.key);
    END LOOP;
    -- Read after the locks (a new snapshot in READ COMMITTED): what the last writer committed.
    RETURN QUERY SELECT s.room, s.key, s.version, s.value, s.provenance, s.created_at
    FROM rcll.get_states(bank, rooms, keys) s;
END
$$;
COMMENT ON FUNCTION rcll.lock_states(text, text[], text[]) IS 'For a read-modify-write of keyed state in one transaction: lock the pairs (rooms[i], keys[i]) until the transaction ends - every other writer of those keys (rcll.put_state, another lock_states) waits - and return their current versions as rcll.get_states does. A put_state with the version read here then cannot lose (last write wins, every version kept). Under READ COMMITTED, the isolation a read-modify-write needs.';

CREATE OR REPLACE FUNCTION rcll.put_state(bank text, room text, key text, value jsonb, expected_version integer,
                                          via text DEFAULT 'sql', source text DEFAULT NULL, author text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b       integer := rcll._bank_id(bank);
    cur     integer;
    who     record;
    ok      boolean;
BEGIN
    IF room IS NULL OR btrim(room) = '' THEN
        RAISE EXCEPTION 'room: a room is required' USING ERRCODE = 'RC001', COLUMN = 'room',
            HINT = 'State is keyed by (room, key); the room string is used exactly as given.';
    END IF;
    IF key IS NULL OR key = '' THEN
        RAISE EXCEPTION 'key: a key is required' USING ERRCODE = 'RC001', COLUMN = 'key',
            HINT = 'State is keyed by (room, key): pass a non-empty key.';
    END IF;
    IF value IS NULL THEN
        RAISE EXCEPTION 'value: a JSON value is required' USING ERRCODE = 'RC001', COLUMN = 'value',
            HINT = 'Pass ''null''::jsonb to store a JSON null.';
    END IF;
    -- Writers of one key take turns (rcll.lock_states' callers among them); the version read
    -- next is then the one the previous writer committed.
    PERFORM rcll._lock_state(b, put_state.room, put_state.key);
    SELECT max(s.version) INTO cur FROM rcll.room_state s
    WHERE s.bank_id = b AND s.room = put_state.room AND s.key = put_state.key;
    IF coalesce(expected_version, 0) IS DISTINCT FROM coalesce(cur, 0) THEN
        RAISE EXCEPTION 'expected_version: expected version %, current version is %',
            coalesce(expected_version, 0), coalesce(cur, 0) USING ERRCODE = 'RC005', COLUMN = 'expected_version',
            HINT = 'Someone wrote this key since you read it: read it again (rcll.get_state) and retry with its version (0 = no state yet).';
    END IF;
    who := rcll._resolve_author(author);
    -- Two puts expecting the same version race for the same primary key; the loser waits for the
    -- winner, inserts nothing, and fails below like any stale put.
    INSERT INTO rcll.room_state (bank_id, room, key, version, value, provenance)
    VALUES (b, put_state.room, put_state.key, coalesce(cur, 0) + 1, put_state.value,
            jsonb_build_object('via', coalesce(via, 'sql'), 'who', who.author, 'author_source', who.author_source,
                               'source', source, 'at', now(), 'expected_version', coalesce(expected_version, 0)))
    ON CONFLICT ON CONSTRAINT room_state_pkey DO NOTHING
    RETURNING true INTO ok;
    IF ok IS NULL THEN
        SELECT max(s.version) INTO cur FROM rcll.room_state s
        WHERE s.bank_id = b AND s.room = put_state.room AND s.key = put_state.key;
        RAISE EXCEPTION 'expected_version: expected version %, current version is %',
            coalesce(expected_version, 0), cur USING ERRCODE = 'RC005', COLUMN = 'expected_version',
            HINT = 'A concurrent put won: read the key again (rcll.get_state) and retry with its version.';
    END IF;
    RETURN coalesce(cur, 0) + 1;
END
$$;
COMMENT ON FUNCTION rcll.put_state(text, text, text, jsonb, integer, text, text, text) IS 'Write a new version of a room''s keyed state if expected_version is the current version (0 or NULL when there is none); otherwise fail with SQLSTATE RC005 (version conflict, COLUMN expected_version) naming expected and current version. Every version is kept with its provenance (who, as the server resolved it; via; source; when). Returns the new version.';

CREATE OR REPLACE FUNCTION rcll.state_history(bank text, room text, key text)
RETURNS TABLE (version integer, value jsonb, provenance jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    -- The bank's id as a value, not a lookup inside the statement: on a Citus cluster the read
    -- then goes to the one shard holding the bank (by the lookup it reached every shard, so a
    -- bank's state was refused while any worker was down).
    b integer := rcll._bank_id(state_history.bank);
BEGIN
    -- Exact (room, key): an unknown key has no versions - never the nearest room's state, which
    -- would be the wrong lens applied with full confidence.
    RETURN QUERY
    SELECT s.version, s.value, s.provenance, s.created_at
    FROM rcll.room_state s
    WHERE s.bank_id = b AND s.room = state_history.room AND s.key = state_history.key
    ORDER BY s.version DESC;
END
$$;
COMMENT ON FUNCTION rcll.state_history(text, text, text) IS 'Every version of a room''s keyed state, newest first, each with its provenance.';

CREATE OR REPLACE FUNCTION rcll.get_state(bank text, room text, key text, at_version integer DEFAULT NULL)
RETURNS TABLE (value jsonb, version integer, provenance jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    b integer := rcll._bank_id(get_state.bank);      -- a value: the read goes to the bank's shard alone
BEGIN
    RETURN QUERY
    SELECT s.value, s.version, s.provenance, s.created_at
    FROM rcll.room_state s
    WHERE s.bank_id = b AND s.room = get_state.room AND s.key = get_state.key
      AND (get_state.at_version IS NULL OR s.version = get_state.at_version)
    ORDER BY s.version DESC
    LIMIT 1;
END
$$;
COMMENT ON FUNCTION rcll.get_state(text, text, text, integer) IS 'The current version (or at_version) of a room''s keyed state, by exact room and key; no row when the key is unknown.';

CREATE OR REPLACE FUNCTION rcll.get_states(bank text, rooms text[], keys text[])
RETURNS TABLE (room text, key text, version integer, value jsonb, provenance jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    b     integer := rcll._bank_id(get_states.bank);      -- an unknown bank is an error, rows or not
    -- Each pair as one value (a JSON array keeps room and key apart whatever they hold): the read
    -- below is then a statement on one table, which Citus sends to the bank's shard alone even in
    -- a cached plan (a join with the pairs would need a plan made for each call).
    pairs text[] := ARRAY(SELECT pg_catalog.jsonb_build_array(k.room, k.key)::text
                          FROM unnest(get_states.rooms, get_states.keys) AS k(room, key));
BEGIN
    -- Many exact (room, key) pairs in one call (a client's batch of reads), each at its current
    -- version; a pair that has no state has no row.
    RETURN QUERY
    SELECT DISTINCT ON (s.room, s.key) s.room, s.key, s.version, s.value, s.provenance, s.created_at
    FROM rcll.room_state s
    WHERE s.bank_id = b AND s.room = ANY (get_states.rooms) AND s.key = ANY (get_states.keys)
      AND pg_catalog.jsonb_build_array(s.room, s.key)::text = ANY (pairs)
    ORDER BY s.room, s.key, s.version DESC;
END
$$;
COMMENT ON FUNCTION rcll.get_states(text, text[], text[]) IS 'The current version of many rooms'' keyed states at once: the pairs (rooms[i], keys[i]), exact strings; a pair with no state has no row. rcll.get_state for one key, or an older version.';
