-- Run-once: what a forget keeps (who, when, by which selector, how many rows - never the content)
-- and the versions a correction leaves behind.
--
-- rcll.forget_log has no foreign key to rcll.banks on purpose: dropping a bank deletes every row
-- of it (ON DELETE CASCADE from banks on every table), and the record that it was dropped must
-- outlive it. The bank's name is kept beside its id for the same reason.
CREATE TABLE rcll.forget_log (
    forget_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer NOT NULL,
    bank_name    text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    action       text NOT NULL CHECK (action IN ('forget', 'drop_bank', 'forget_state', 'expire', 'correct')),
    selector     jsonb NOT NULL CHECK (jsonb_typeof(selector) = 'object'),
    counts       jsonb NOT NULL CHECK (jsonb_typeof(counts) = 'object'),
    reason       text
);
COMMENT ON TABLE rcll.forget_log IS 'One row per forget, bank drop, state forget, expiry sweep or correction: who, when, by which selector, how many rows of each kind. Never the forgotten content. Outlives the bank it names (no foreign key).';
COMMENT ON COLUMN rcll.forget_log.forget_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.forget_log.bank_id IS 'Id the bank had (the bank may be gone).';
COMMENT ON COLUMN rcll.forget_log.bank_name IS 'Name the bank had when it was acted on.';
COMMENT ON COLUMN rcll.forget_log.at IS 'When it was done.';
COMMENT ON COLUMN rcll.forget_log.actor IS 'Who did it (an agent, role:<role>, or system:<job>).';
COMMENT ON COLUMN rcll.forget_log.action IS 'forget, drop_bank, forget_state, expire (the periodic sweep) or correct.';
COMMENT ON COLUMN rcll.forget_log.selector IS 'The selector as the caller gave it (unit and document ids, thread, author, tag, room, time ranges, everything); ids and names, never text.';
COMMENT ON COLUMN rcll.forget_log.counts IS 'How many rows of each kind went (documents, units, embeddings, lexicon rows, links, entities, observations...).';
COMMENT ON COLUMN rcll.forget_log.reason IS 'The reason the caller gave, if any (kept as given: do not paste the forgotten text into it).';
CREATE INDEX forget_log_bank_at ON rcll.forget_log (bank_id, at);

-- A correction replaces a unit's text in place (its id, links and place in recall stay) and keeps
-- the replaced text here, so the unit's history lists its versions. Forgetting the unit forgets
-- its versions with it.
CREATE TABLE rcll.unit_versions (
    unit_id      bigint NOT NULL REFERENCES rcll.memory_units ON DELETE CASCADE,
    version      integer NOT NULL CHECK (version > 0),
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    text         text NOT NULL,
    reason       text NOT NULL CHECK (length(btrim(reason)) > 0),
    who          text,
    at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (unit_id, version)
);
COMMENT ON TABLE rcll.unit_versions IS 'Earlier texts of corrected units: one row per correction: the text it replaced, why and by whom (the unit holds the current text). Deleted with the unit.';
COMMENT ON COLUMN rcll.unit_versions.unit_id IS 'The corrected unit.';
COMMENT ON COLUMN rcll.unit_versions.version IS 'The version this text was (1 = as retained); the unit''s current text is the next version.';
COMMENT ON COLUMN rcll.unit_versions.bank_id IS 'Bank of the unit (bank isolation covers this table).';
COMMENT ON COLUMN rcll.unit_versions.text IS 'The text of this version, as it was before the correction.';
COMMENT ON COLUMN rcll.unit_versions.reason IS 'Why it was corrected.';
COMMENT ON COLUMN rcll.unit_versions.who IS 'Who corrected it, as the server resolved it.';
COMMENT ON COLUMN rcll.unit_versions.at IS 'When it was corrected.';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.forget_log'::regclass, '');
        PERFORM pg_catalog.pg_extension_config_dump('rcll.unit_versions'::regclass, '');
        PERFORM pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('rcll.forget_log', 'forget_id')::regclass, '');
    END IF;
END
$$;
