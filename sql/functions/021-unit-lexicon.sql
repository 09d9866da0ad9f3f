-- The narrow lexical table (rcll.unit_lexicon): kept in step with memory_units by triggers, in
-- the writing transaction, and filtered by the same scope predicate as every channel.

CREATE OR REPLACE FUNCTION rcll._units_lexicon()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer: agents' roles write memory_units; the copy is the owner's bookkeeping (as room counts).
SECURITY DEFINER
AS $$
DECLARE
    inserted rcll.memory_units[];
BEGIN
    IF TG_LEVEL = 'STATEMENT' THEN
        -- Inserted units: one set-based insert per statement (a retain, a COPY, an import batch),
        -- not one per row. Read from the transition table by a statement of its own: on a Citus
        -- shard a statement naming a distributed table is planned by Citus, which cannot see it.
        inserted := ARRAY(SELECT n FROM new_units n);
        INSERT INTO rcll.unit_lexicon (unit_id, bank_id, lexical_length, layer, room, author, hall, thread, tags, valid, lexical, document_id, expires_at)
        SELECT n.unit_id, n.bank_id, n.lexical_length, n.layer, n.room, n.author, n.hall, n.thread, n.tags, n.valid, n.lexical, n.document_id, n.expires_at
        FROM unnest(inserted) n;
    ELSE
        -- A changed unit: its copy follows. The insert arm serves a unit written while the insert
        -- trigger was off (an import switches write triggers off): its copy appears at its first change.
        INSERT INTO rcll.unit_lexicon (unit_id, bank_id, lexical_length, layer, room, author, hall, thread, tags, valid, lexical, document_id, expires_at)
        VALUES (NEW.unit_id, NEW.bank_id, NEW.lexical_length, NEW.layer, NEW.room, NEW.author, NEW.hall, NEW.thread,
                NEW.tags, NEW.valid, NEW.lexical, NEW.document_id, NEW.expires_at)
        ON CONFLICT ON CONSTRAINT unit_lexicon_pkey DO UPDATE
            SET bank_id = excluded.bank_id, lexical_length = excluded.lexical_length, layer = excluded.layer,
                room = excluded.room, author = excluded.author, hall = excluded.hall, thread = excluded.thread,
                tags = excluded.tags, valid = excluded.valid, lexical = excluded.lexical, document_id = excluded.document_id,
                expires_at = excluded.expires_at;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_lexicon() IS 'Trigger: keeps rcll.unit_lexicon a copy of the lexical representation and recall filters of memory_units - the units a statement inserts (units_lexicon_inserted), and a unit whose text, room, author, hall, layer, thread, tags, validity, expiry or bank changed (units_lexicon_changed: room moves and merges, supersession, consolidation).';

-- Not while a dump is restored (rcll._restoring): unit_lexicon is dumped and comes back itself.
CREATE OR REPLACE TRIGGER units_lexicon_inserted AFTER INSERT ON rcll.memory_units
    REFERENCING NEW TABLE AS new_units
    FOR EACH STATEMENT WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_lexicon();

-- Every column the copy holds is listed (UPDATE OF fires on the columns an UPDATE sets: text,
-- because units_lexical recomputes lexical from it); the WHEN clause skips updates that change none.
CREATE OR REPLACE TRIGGER units_lexicon_changed
    AFTER UPDATE OF bank_id, text, lexical, lexical_length, layer, room, author, hall, thread, tags, valid, expires_at
    ON rcll.memory_units
    FOR EACH ROW WHEN ((OLD.bank_id, OLD.lexical_length, OLD.layer, OLD.room, OLD.author, OLD.hall, OLD.thread,
                        OLD.tags, OLD.valid, OLD.lexical, OLD.expires_at)
                       IS DISTINCT FROM (NEW.bank_id, NEW.lexical_length, NEW.layer, NEW.room, NEW.author, NEW.hall,
                                         NEW.thread, NEW.tags, NEW.valid, NEW.lexical, NEW.expires_at))
    EXECUTE FUNCTION rcll._units_lexicon();
