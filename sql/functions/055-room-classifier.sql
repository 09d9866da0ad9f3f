-- Room classifier: the keyword rules that assign a room when the writer names none (and asked for one).

CREATE OR REPLACE FUNCTION rcll.classify_room(text text)
RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$
    -- Regular expressions only: no model call, no embedding, microseconds per unit.
    SELECT r.room FROM rcll.room_rules r
    WHERE r.enabled AND classify_room.text ~* r.pattern
    ORDER BY r.priority, r.rule_id
    LIMIT 1
$$;
COMMENT ON FUNCTION rcll.classify_room(text) IS 'The room the keyword classifier (rcll.room_rules, lowest priority first) assigns to a text, or NULL when no enabled rule matches.';

CREATE OR REPLACE FUNCTION rcll._classify_rooms_enabled(bank_id integer, kind text)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    setting text := lower(coalesce(current_setting('rcll.classify_rooms', true), ''));
    banks   jsonb;
BEGIN
    -- Most specific first: the transaction or session (SET LOCAL rcll.classify_rooms = on|off, what
    -- a retain call's classify flag sets), then the bank (settings.classify_rooms), then the kind.
    -- Chunks are not classified by default: a chunk is a slice of someone's document, and a room
    -- guessed from a slice would scatter one document over several rooms. Extracted facts and
    -- consolidation observations are - that is how raw observations stop arriving unroomed.
    IF setting IN ('on', 'true', '1') THEN
        RETURN true;
    ELSIF setting IN ('off', 'false', '0') THEN
        RETURN false;
    END IF;
    SELECT b.settings -> 'classify_rooms' INTO banks FROM rcll.banks b WHERE b.bank_id = _classify_rooms_enabled.bank_id;
    IF jsonb_typeof(banks) = 'boolean' THEN
        RETURN banks::text::boolean;
    END IF;
    RETURN coalesce(kind, 'chunk') <> 'chunk';
END
$$;
COMMENT ON FUNCTION rcll._classify_rooms_enabled(integer, text) IS 'Internal: whether a unit written without a room gets one from rcll.classify_room: rcll.classify_rooms (transaction/session setting), else the bank setting classify_rooms, else yes for facts and observations and no for chunks.';
