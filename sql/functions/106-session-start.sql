-- Session start: the L0 rules and procedures an agent loads before its first recall.

CREATE OR REPLACE FUNCTION rcll.session_start(bank text, rooms text[] DEFAULT NULL, thread text DEFAULT NULL)
RETURNS TABLE (unit_id bigint, room text, hall text, text text, author text, tags text[],
               provenance jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    -- The bank's id and its rooms as values, not lookups inside the statement: on a Citus cluster
    -- the read then goes to the one shard holding the bank (by a lookup it reached every shard).
    b   integer := rcll._bank_id(session_start.bank);
    rms text[] := rcll._expand_rooms(b, session_start.rooms);      -- NULL: every room
BEGIN
    -- Current as of now: valid now and not superseded. With rooms, the rooms named (through their
    -- aliases and merges) plus bank-wide rules that carry no room. Thread-scoped rules are only for
    -- that thread: a thread namespace never leaks, here or in recall.
    RETURN QUERY
    SELECT u.unit_id, u.room, u.hall, u.text, u.author, u.tags, u.provenance, u.created_at
    FROM rcll.memory_units u
    WHERE u.bank_id = b AND u.layer = 'L0'
      AND u.valid @> now() AND u.superseded_by IS NULL
      AND (rms IS NULL OR u.room IS NULL OR u.room = ANY (rms))
      AND (u.thread IS NULL OR u.thread = session_start.thread)
    ORDER BY CASE u.hall WHEN 'rule' THEN 0 WHEN 'procedure' THEN 1 ELSE 2 END,
             u.room NULLS FIRST, u.created_at, u.unit_id;
END
$$;
COMMENT ON FUNCTION rcll.session_start(text, text[], text) IS 'The L0 rules and procedures an agent should load at session start, current as of now, rules first then procedures, bank-wide (no room) before room-specific, oldest first. rooms narrows to those rooms (aliases and merges followed) plus bank-wide rules; thread adds that thread''s rules to the unthreaded ones.';
