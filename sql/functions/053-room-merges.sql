-- Room merges: semantic merges are proposals only, held provisional until a person approves.

CREATE OR REPLACE FUNCTION rcll._registry_room(bank_id integer, room text)
RETURNS rcll.rooms
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    r rcll.rooms;
BEGIN
    SELECT * INTO r FROM rcll.rooms x WHERE x.bank_id = _registry_room.bank_id AND x.name = room;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'room: no room "%" in this bank''s registry', room USING ERRCODE = 'RC003', COLUMN = 'room',
            HINT = 'List rooms with SELECT * FROM rcll.rooms(''<bank>''); name a room exactly as listed.';
    END IF;
    RETURN r;
END
$$;
COMMENT ON FUNCTION rcll._registry_room(integer, text) IS 'Internal: a room''s registry row, or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll.propose_room_merge(bank text, from_room text, into_room text, reason text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b   integer := rcll._bank_id(bank);
    why text := rcll._audit_reason(reason, 'merge proposal',
                                   'Say why the two rooms are one subject; a person reads it before approving.');
    src rcll.rooms;
    dst rcll.rooms;
    id  bigint;
BEGIN
    src := rcll._registry_room(b, from_room);
    dst := rcll._registry_room(b, into_room);
    IF src.name = dst.name THEN
        RAISE EXCEPTION 'into_room: a room cannot merge into itself' USING ERRCODE = 'RC001', COLUMN = 'into_room',
            HINT = 'Name two different rooms: from_room merges into into_room.';
    END IF;
    IF src.status <> 'live' THEN
        RAISE EXCEPTION 'from_room: room "%" is %', src.name, src.status USING ERRCODE = 'RC004', COLUMN = 'from_room',
            HINT = 'Only a live room can be proposed for a merge; decide the pending proposal first (rcll.approve_room_merge / rcll.reject_room_merge).';
    END IF;
    IF dst.status <> 'live' THEN
        RAISE EXCEPTION 'into_room: room "%" is %', dst.name, dst.status USING ERRCODE = 'RC004', COLUMN = 'into_room',
            HINT = 'Merge into a live room (a merged room''s facts live in its merged_into).';
    END IF;
    UPDATE rcll.rooms r SET status = 'provisional' WHERE r.bank_id = b AND r.name = src.name;
    INSERT INTO rcll.room_merge_proposals (bank_id, from_room, into_room, reason, proposed_by)
    VALUES (b, src.name, dst.name, why, rcll._actor())
    RETURNING proposal_id INTO id;
    PERFORM rcll._audit(b, 'room_merge_propose', jsonb_build_object('from_room', src.name, 'into_room', dst.name),
                        jsonb_build_object('proposal_id', id, 'reason', why));
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll.propose_room_merge(text, text, text, text) IS 'Propose a semantic merge of from_room into into_room. Nothing moves: from_room is held provisional until a person calls rcll.approve_room_merge or rcll.reject_room_merge. Returns the proposal id.';

CREATE OR REPLACE FUNCTION rcll._pending_merge(bank_id integer, from_room text)
RETURNS rcll.room_merge_proposals
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    p rcll.room_merge_proposals;
BEGIN
    SELECT * INTO p FROM rcll.room_merge_proposals mp
    WHERE mp.bank_id = _pending_merge.bank_id AND mp.from_room = _pending_merge.from_room AND mp.status = 'pending'
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'from_room: no pending merge proposal for room "%"', from_room USING ERRCODE = 'RC003', COLUMN = 'from_room',
            HINT = 'Propose it first with rcll.propose_room_merge(bank, from_room, into_room, reason).';
    END IF;
    RETURN p;
END
$$;
COMMENT ON FUNCTION rcll._pending_merge(integer, text) IS 'Internal: the pending merge proposal for a room, locked, or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll.approve_room_merge(bank text, from_room text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b    integer := rcll._bank_id(bank);
    p    rcll.room_merge_proposals;
    dst  text;
    ids  bigint[];
BEGIN
    -- A person decides: an agent (a mapped role, or rcll.agent set by the server) may propose only.
    IF rcll.current_agent() IS NOT NULL THEN
        RAISE EXCEPTION 'agent: agent "%" cannot approve a merge', rcll.current_agent()
            USING ERRCODE = 'RC006', COLUMN = 'agent',
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
    PERFORM rcll._audit(b, 'room_merge_approve',
                        jsonb_build_object('from_room', p.from_room, 'into_room', dst, 'unit_ids', to_jsonb(ids)),
                        jsonb_build_object('proposal_id', p.proposal_id, 'reason', p.reason, 'proposed_by', p.proposed_by));
    RETURN cardinality(ids);
END
$$;
COMMENT ON FUNCTION rcll.approve_room_merge(text, text) IS 'A person approves the pending merge of from_room: its units move into the target room, the room becomes merged, and its name stays readable forever as an alias (a recall naming it reads the merged room). Refused for agents. Returns the number of units moved.';

CREATE OR REPLACE FUNCTION rcll.reject_room_merge(bank text, from_room text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    p rcll.room_merge_proposals;
BEGIN
    p := rcll._pending_merge(b, btrim(from_room));
    UPDATE rcll.rooms r SET status = 'live' WHERE r.bank_id = b AND r.name = p.from_room AND r.status = 'provisional';
    UPDATE rcll.room_merge_proposals mp SET status = 'rejected', decided_by = rcll._actor(), decided_at = now()
    WHERE mp.proposal_id = p.proposal_id;
    PERFORM rcll._audit(b, 'room_merge_reject', jsonb_build_object('from_room', p.from_room, 'into_room', p.into_room),
                        jsonb_build_object('proposal_id', p.proposal_id, 'reason', reason));
END
$$;
COMMENT ON FUNCTION rcll.reject_room_merge(text, text, text) IS 'Reject the pending merge of from_room: nothing moves and the room is live again.';
