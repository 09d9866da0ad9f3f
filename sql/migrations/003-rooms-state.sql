-- Run-once: the room registry, its write-side count queue, and the keyed per-room state store.

CREATE TABLE rcll.rooms (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(btrim(name)) > 0),
    status       text NOT NULL DEFAULT 'live' CHECK (status IN ('live', 'provisional', 'merged')),
    merged_into  text,
    created_by   text NOT NULL DEFAULT 'system' CHECK (created_by IN ('human', 'system')),
    fact_count   bigint NOT NULL DEFAULT 0,
    first_used   timestamptz,
    last_used    timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bank_id, name),
    CHECK ((status = 'merged') = (merged_into IS NOT NULL))
);
COMMENT ON TABLE rcll.rooms IS 'Room registry: an observed index of the rooms in use, not a constraint (room stays free text).';
COMMENT ON COLUMN rcll.rooms.bank_id IS 'Bank the room is used in.';
COMMENT ON COLUMN rcll.rooms.name IS 'Canonical room name.';
COMMENT ON COLUMN rcll.rooms.status IS 'live (in use), provisional (a proposed merge awaiting a person), merged (folded into merged_into; its name stays readable).';
COMMENT ON COLUMN rcll.rooms.merged_into IS 'For a merged room: the room its facts now live in.';
COMMENT ON COLUMN rcll.rooms.created_by IS 'human (a caller named it) or system (the classifier assigned it).';
COMMENT ON COLUMN rcll.rooms.fact_count IS 'Units in the room as of the last fold of room_count_queue; rcll.rooms() adds the pending queue so reads are exact.';
COMMENT ON COLUMN rcll.rooms.first_used IS 'First write into the room.';
COMMENT ON COLUMN rcll.rooms.last_used IS 'Last write into the room (as of the last fold).';
COMMENT ON COLUMN rcll.rooms.created_at IS 'When the registry row was created.';

CREATE TABLE rcll.room_aliases (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    alias        text NOT NULL,
    room         text NOT NULL,
    reason       text NOT NULL CHECK (reason IN ('spelling', 'merge')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bank_id, alias)
);
COMMENT ON TABLE rcll.room_aliases IS 'Spellings and merged names that resolve to a canonical room; readable forever (a recall naming an alias reads the room).';
COMMENT ON COLUMN rcll.room_aliases.bank_id IS 'Bank of the room.';
COMMENT ON COLUMN rcll.room_aliases.alias IS 'The string as a caller typed it (or the old name of a merged room).';
COMMENT ON COLUMN rcll.room_aliases.room IS 'The canonical room it resolves to.';
COMMENT ON COLUMN rcll.room_aliases.reason IS 'spelling (janitor: case, separators, plural, prefix) or merge (approved by a person).';
COMMENT ON COLUMN rcll.room_aliases.created_at IS 'When the alias was recorded.';

CREATE TABLE rcll.room_count_queue (
    bank_id      integer NOT NULL,
    room         text NOT NULL,
    delta        bigint NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.room_count_queue IS 'Append-only count deltas written by statement triggers; rcll.fold_room_counts() folds them into rooms.fact_count. Appending never locks a shared row, so concurrent writers neither serialise nor deadlock.';
COMMENT ON COLUMN rcll.room_count_queue.bank_id IS 'Bank of the room.';
COMMENT ON COLUMN rcll.room_count_queue.room IS 'Room whose count changed.';
COMMENT ON COLUMN rcll.room_count_queue.delta IS 'Change in the number of units (negative for deletes and moves out).';
COMMENT ON COLUMN rcll.room_count_queue.at IS 'When the change was made.';
CREATE INDEX room_count_queue_bank_room ON rcll.room_count_queue (bank_id, room);

CREATE TABLE rcll.room_state (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    room         text NOT NULL,
    key          text NOT NULL CHECK (length(key) > 0),
    version      integer NOT NULL CHECK (version > 0),
    value        jsonb NOT NULL,
    provenance   jsonb NOT NULL CHECK (jsonb_typeof(provenance) = 'object' AND provenance ? 'via'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bank_id, room, key, version)
);
COMMENT ON TABLE rcll.room_state IS 'Keyed per-room state (e.g. a room''s live spread): exact key lookup only, never similarity; every version is kept.';
COMMENT ON COLUMN rcll.room_state.bank_id IS 'Bank of the room.';
COMMENT ON COLUMN rcll.room_state.room IS 'Room the state belongs to (exact string, not canonicalised: a key is a key).';
COMMENT ON COLUMN rcll.room_state.key IS 'State key within the room.';
COMMENT ON COLUMN rcll.room_state.version IS 'Version number, 1 for the first put; a put names the version it expects to replace.';
COMMENT ON COLUMN rcll.room_state.value IS 'The state value as JSON.';
COMMENT ON COLUMN rcll.room_state.provenance IS 'Who wrote this version, via what, when.';
COMMENT ON COLUMN rcll.room_state.created_at IS 'When this version was written.';
