-- Room moves: units moved to another room, audited and reversible.

CREATE OR REPLACE FUNCTION rcll.move_units(bank text, unit_ids bigint[], to_room text, reason text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b       integer := rcll._bank_id(bank);
    why     text := rcll._audit_reason(reason, 'move',
                                       'Say why the units belong in the other room; it is kept in rcll.audit_log.');
    dst     record;
    ids     bigint[];
    missing bigint[];
    prior   jsonb;
BEGIN
    dst := rcll._canonical_room(b, to_room);
    IF dst.room IS NULL THEN
        RAISE EXCEPTION 'to_room: a room name is required' USING ERRCODE = 'RC001', COLUMN = 'to_room',
            HINT = 'Name the room to move the units into (see rcll.rooms(bank)).';
    END IF;
    ids := ARRAY(SELECT DISTINCT i FROM unnest(unit_ids) AS i WHERE i IS NOT NULL ORDER BY 1);
    IF cardinality(ids) = 0 THEN
        RAISE EXCEPTION 'unit_ids: no units given' USING ERRCODE = 'RC001', COLUMN = 'unit_ids',
            HINT = 'Pass the ids of the units to move (recall returns them).';
    END IF;
    -- Lock in id order so two moves of overlapping sets cannot deadlock.
    PERFORM 1 FROM rcll.memory_units u WHERE u.unit_id = ANY (ids) AND u.bank_id = b ORDER BY u.unit_id FOR UPDATE;
    missing := ARRAY(SELECT i FROM unnest(ids) AS i
                     WHERE NOT EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.unit_id = i AND u.bank_id = b));
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'unit_ids: % not in bank "%"', missing, bank USING ERRCODE = 'RC003', COLUMN = 'unit_ids',
            HINT = 'Pass unit ids recall returned for this bank.';
    END IF;
    SELECT jsonb_agg(jsonb_build_object('unit_id', u.unit_id, 'room', u.room) ORDER BY u.unit_id) INTO prior
    FROM rcll.memory_units u WHERE u.unit_id = ANY (ids);
    UPDATE rcll.memory_units u SET room = dst.room, updated_at = now()
    WHERE u.unit_id = ANY (ids) AND u.room IS DISTINCT FROM dst.room;
    RETURN rcll._audit(b, 'room_move', jsonb_build_object('unit_ids', to_jsonb(ids), 'to_room', dst.room),
                       jsonb_build_object('reason', why, 'typed_room', to_room, 'resolved', dst.how, 'before', prior));
END
$$;
COMMENT ON FUNCTION rcll.move_units(text, bigint[], text, text) IS 'Move units into another room (its name canonicalised by spelling like a write), recording every unit''s previous room in rcll.audit_log. Returns the move id for rcll.undo_move.';

CREATE OR REPLACE FUNCTION rcll.undo_move(bank text, move_id bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE
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
        RAISE EXCEPTION 'move_id: no room move % in bank "%"', move_id, bank USING ERRCODE = 'RC003', COLUMN = 'move_id',
            HINT = 'Use the id rcll.move_units returned (rcll.audit_log rows with action room_move).';
    END IF;
    IF EXISTS (SELECT 1 FROM rcll.audit_log a WHERE a.bank_id = b AND a.action = 'room_move_undo'
               AND (a.detail ->> 'move_id')::bigint = move_id) THEN
        RAISE EXCEPTION 'move_id: move % was already undone', move_id USING ERRCODE = 'RC004', COLUMN = 'move_id',
            HINT = 'Nothing to do: the units are back where they were (rcll.audit_log has the undo).';
    END IF;
    -- Only units still where the move put them: a later move must be undone first.
    moved := ARRAY(SELECT f.unit_id::text
                   FROM jsonb_to_recordset(m.detail -> 'before') AS f(unit_id bigint, room text)
                   JOIN rcll.memory_units u ON u.unit_id = f.unit_id
                   WHERE u.room IS DISTINCT FROM m.target ->> 'to_room' ORDER BY f.unit_id);
    IF cardinality(moved) > 0 THEN
        RAISE EXCEPTION 'move_id: units % were moved again after move %', moved, move_id USING ERRCODE = 'RC004', COLUMN = 'move_id',
            HINT = 'Undo the later moves first (newest first).';
    END IF;
    UPDATE rcll.memory_units u SET room = f.room, updated_at = now()
    FROM jsonb_to_recordset(m.detail -> 'before') AS f(unit_id bigint, room text)
    WHERE u.unit_id = f.unit_id AND u.bank_id = b AND u.room IS DISTINCT FROM f.room;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM rcll._audit(b, 'room_move_undo', m.target, jsonb_build_object('move_id', move_id, 'restored', n));
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.undo_move(text, bigint) IS 'Undo a move: put every unit back in the room it was in before (refused if any was moved again since, or the move was already undone). Audited; returns the number of units restored.';
