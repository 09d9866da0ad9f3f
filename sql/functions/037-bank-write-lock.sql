-- The bank write lock: every write into a bank shares it, a forget holds it alone.
--
-- Every unit insert takes it (the trigger below, named to fire first), as does a correction
-- (255-correct.sql); forget and the expiry sweep take it exclusively (250-forget.sql). So a forget
-- decides from what the bank holds with no write linking to it meanwhile, and writes into other
-- banks, and every reader, never wait.

CREATE OR REPLACE FUNCTION rcll._bank_write_guard(bank_id integer, forgetting boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
AS $$
BEGIN
    -- A forget decides from what the bank holds (the entities and rooms left with no unit, the
    -- observations of a source); a write committed meanwhile could link to what it is about to
    -- delete. Writes share the bank's lock, a forget holds it alone: it waits for the writes in
    -- flight and the next ones wait for it. Other banks never wait; readers take no lock.
    IF forgetting THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('rcll.bank_writes'), bank_id);
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('rcll.bank_writes'), bank_id);
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._bank_write_guard(integer, boolean)
    IS 'Internal: take a bank''s write lock for the transaction - shared for a write (every unit insert, a correction), exclusive for a forget - so a forget never decides from rows a concurrent write is linking to (a transaction-level advisory lock: other banks and readers never wait).';

CREATE OR REPLACE FUNCTION rcll._units_bank_guard()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM rcll._bank_write_guard(NEW.bank_id, false);
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_bank_guard() IS 'Trigger: a unit insert shares its bank''s write lock (rcll._bank_write_guard) until its transaction ends, before the room janitor and the entity links run.';

-- Named to fire before units_janitor (triggers fire in name order): the room is registered, and
-- entities are looked up, only once the lock is held.
CREATE OR REPLACE TRIGGER units_bank_guard BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_bank_guard();
