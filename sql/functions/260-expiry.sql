-- Expiry: when a unit expires (a retain's own expiry, the bank's retention policies), and the
-- sweep that forgets expired units with the same cascade as rcll.forget. Recall never waits for
-- the sweep: rcll._in_scope (105) leaves an expired unit out from the instant it expires.

CREATE OR REPLACE FUNCTION rcll._policy_expiry(bank_id integer, room text, hall text, layer text, retained timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT min(_policy_expiry.retained + p.keep) FROM rcll.retention_policies p
    WHERE p.bank_id = _policy_expiry.bank_id
      AND (p.room IS NULL OR p.room = _policy_expiry.room)
      AND (p.hall IS NULL OR p.hall = _policy_expiry.hall)
      AND (p.layer IS NULL OR p.layer = _policy_expiry.layer)
$$;
COMMENT ON FUNCTION rcll._policy_expiry(integer, text, text, text, timestamptz)
    IS 'Internal: when a unit of this bank, room, hall and layer retained at `retained` expires under the bank''s retention policies (the earliest matching one), or NULL.';

CREATE OR REPLACE FUNCTION rcll._units_expiry()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer: writers need not read the policies table to be bound by it.
SECURITY DEFINER
AS $$
DECLARE
    asked timestamptz := nullif(current_setting('rcll.expires_at', true), '')::timestamptz;
BEGIN
    IF rcll._importing() THEN
        -- An imported unit's own expiry is the one its provenance remembers (the stream's
        -- expires_at may be a policy's); the imported policies apply once written (import_finish).
        NEW.expires_at := least((NEW.provenance ->> 'expires_at')::timestamptz,
                                rcll._policy_expiry(NEW.bank_id, NEW.room, NEW.hall, NEW.layer, NEW.created_at));
        RETURN NEW;
    END IF;
    -- The earliest of: the expiry the writer set (column, or rcll.expires_at for the transaction,
    -- which the retain verbs set from expires_at / ttl) and the bank's policies for the unit.
    IF least(NEW.expires_at, asked) IS NOT NULL THEN
        -- The writer's own expiry is remembered, so a policy removed later gives it back.
        NEW.provenance := NEW.provenance || jsonb_build_object('expires_at', least(NEW.expires_at, asked));
    END IF;
    NEW.expires_at := least(NEW.expires_at, asked,
                            rcll._policy_expiry(NEW.bank_id, NEW.room, NEW.hall, NEW.layer, NEW.created_at));
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_expiry() IS 'Trigger: a new unit''s expires_at is the earliest of the one written, the transaction''s rcll.expires_at setting (a retain''s expires_at or ttl) and the bank''s retention policies for its room, hall and layer (after the janitor trigger set them).';

-- Named to fire after units_janitor (triggers fire in name order), which settles room and layer.
CREATE OR REPLACE TRIGGER units_retention BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_expiry();

CREATE OR REPLACE FUNCTION rcll._apply_retention(bank_id integer, room text, hall text, layer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    b integer := _apply_retention.bank_id;
    n bigint;
    ids bigint[];
    expiries timestamptz[];
    p_room text[];
    p_hall text[];
    p_layer text[];
    p_keep interval[];
BEGIN
    -- Units already retained follow the policies as they are now (their own expiry, if earlier, stays).
    IF NOT rcll._bank_pinned() THEN
        UPDATE rcll.memory_units u
        SET expires_at = x.e
        FROM (SELECT v.unit_id, least(nullif(v.own, 'infinity'), rcll._policy_expiry(b, v.room, v.hall, v.layer, v.created_at)) AS e
              FROM (SELECT u2.unit_id, u2.room, u2.hall, u2.layer, u2.created_at,
                           coalesce((u2.provenance ->> 'expires_at')::timestamptz, 'infinity') AS own
                    FROM rcll.memory_units u2
                    WHERE u2.bank_id = b AND (room IS NULL OR u2.room = room) AND (hall IS NULL OR u2.hall = hall)
                      AND (layer IS NULL OR u2.layer = layer)) v) x
        WHERE u.unit_id = x.unit_id AND u.expires_at IS DISTINCT FROM x.e;
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END IF;
    -- On a Citus cluster an UPDATE of a distributed table takes no function that is not immutable
    -- in its expressions (the policies' lookup, the text-to-timestamptz cast), and a statement sent
    -- to a shard may not read another distributed table through a function: the bank's policies
    -- are read first, then the new expiries (rcll._policy_expiry's rule, on the policies as
    -- values) on the bank's shard, and those are written by id.
    SELECT array_agg(p.room), array_agg(p.hall), array_agg(p.layer), array_agg(p.keep)
    INTO p_room, p_hall, p_layer, p_keep
    FROM rcll.retention_policies p WHERE p.bank_id = b;
    SELECT array_agg(x.unit_id), array_agg(x.e) INTO ids, expiries
    FROM (SELECT v.unit_id, v.expires_at,
                 least(nullif(v.own, 'infinity'),
                       (SELECT min(v.created_at + p.keep) FROM unnest(p_room, p_hall, p_layer, p_keep) AS p(room, hall, layer, keep)
                        WHERE (p.room IS NULL OR p.room = v.room) AND (p.hall IS NULL OR p.hall = v.hall)
                          AND (p.layer IS NULL OR p.layer = v.layer))) AS e
          FROM (SELECT u2.unit_id, u2.room, u2.hall, u2.layer, u2.created_at, u2.expires_at,
                       coalesce((u2.provenance ->> 'expires_at')::timestamptz, 'infinity') AS own
                FROM rcll.memory_units u2
                WHERE u2.bank_id = b AND (room IS NULL OR u2.room = room) AND (hall IS NULL OR u2.hall = hall)
                  AND (layer IS NULL OR u2.layer = layer)) v) x
    WHERE x.expires_at IS DISTINCT FROM x.e;
    UPDATE rcll.memory_units u
    SET expires_at = x.e
    FROM unnest(ids, expiries) AS x(unit_id, e)
    WHERE u.bank_id = b AND u.unit_id = x.unit_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._apply_retention(integer, text, text, text)
    IS 'Internal: make the expiry of a bank''s units (those of room, hall, layer; NULL: any) the earliest of their own (provenance.expires_at) and the bank''s policies as they are now. Returns the number of units whose expiry changed. Called by rcll.set_retention and by an import that wrote policies.';
REVOKE EXECUTE ON FUNCTION rcll._apply_retention(integer, text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.set_retention(bank text, keep interval, room text DEFAULT NULL, hall text DEFAULT NULL,
                                              layer text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b integer := rcll._actable_bank(set_retention.bank);
    n bigint;
BEGIN
    IF keep IS NOT NULL AND keep <= interval '0' THEN
        RAISE EXCEPTION 'keep: must be a positive interval' USING ERRCODE = 'RC001', COLUMN = 'keep',
            HINT = 'E.g. keep => ''90 days''; pass NULL to remove the policy.';
    END IF;
    IF layer IS NOT NULL AND layer NOT IN ('L0', 'L1', 'L2') THEN
        RAISE EXCEPTION 'layer: % is not a layer', quote_literal(layer) USING ERRCODE = 'RC001', COLUMN = 'layer',
            HINT = 'Use L0, L1 or L2 (or NULL for any layer).';
    END IF;
    IF keep IS NULL THEN
        DELETE FROM rcll.retention_policies p WHERE p.bank_id = b AND p.room IS NOT DISTINCT FROM room
            AND p.hall IS NOT DISTINCT FROM hall AND p.layer IS NOT DISTINCT FROM layer;
    ELSE
        INSERT INTO rcll.retention_policies AS p (bank_id, room, hall, layer, keep, created_by, created_at)
        VALUES (b, room, hall, layer, keep, rcll._actor(), now())
        ON CONFLICT ON CONSTRAINT retention_policies_bank_id_room_hall_layer_key
        -- The values from the row proposed, not now() again: Citus takes no function in DO
        -- UPDATE SET that is not immutable.
        DO UPDATE SET keep = excluded.keep, created_by = excluded.created_by, created_at = excluded.created_at;
    END IF;
    n := rcll._apply_retention(b, room, hall, layer);
    PERFORM rcll._audit(b, 'retention', jsonb_build_object('room', room, 'hall', hall, 'layer', layer),
                        jsonb_build_object('keep', keep::text, 'units_changed', n));
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.set_retention(text, interval, text, text, text)
    IS 'Set (keep => interval) or remove (keep => NULL) a bank''s retention policy for all units or those of one room, hall and/or layer; the bank''s existing units follow at once (each unit expires at the earliest of its own expiry and the matching policies, counted from when it was retained). Audited. Returns the number of units whose expiry changed.';
REVOKE EXECUTE ON FUNCTION rcll.set_retention(text, interval, text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.retention_policies(bank text)
RETURNS TABLE (room text, hall text, layer text, keep interval, units bigint, expired bigint, created_by text,
               created_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    -- The bank's id as a value, and each policy's units counted by a statement of their own on one
    -- table: on a Citus cluster every statement then goes to the one shard holding the bank (a
    -- count correlated with the policy row reached every shard, and a custom plan of the whole
    -- costs more to plan on one node than the statements cost to run).
    b integer := rcll._bank_id(retention_policies.bank);
    p record;
BEGIN
    FOR p IN SELECT x.room, x.hall, x.layer, x.keep, x.created_by, x.created_at FROM rcll.retention_policies x
             WHERE x.bank_id = b
             ORDER BY x.room NULLS FIRST, x.hall NULLS FIRST, x.layer NULLS FIRST
    LOOP
        room := p.room; hall := p.hall; layer := p.layer; keep := p.keep;
        created_by := p.created_by; created_at := p.created_at;
        SELECT count(*), count(*) FILTER (WHERE u.expires_at <= now()) INTO units, expired
        FROM rcll.memory_units u
        WHERE u.bank_id = b AND (p.room IS NULL OR u.room = p.room) AND (p.hall IS NULL OR u.hall = p.hall)
          AND (p.layer IS NULL OR u.layer = p.layer);
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll.retention_policies(bank text)
    IS 'A bank''s retention policies (NULL room, hall, layer: any), each with the units it covers and how many of them have expired and await the sweep.';

CREATE OR REPLACE FUNCTION rcll.expire(bank text DEFAULT NULL, batch integer DEFAULT 10000)
RETURNS TABLE (bank_name text, units bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
DECLARE
    r record;
    ids bigint[];
    counts jsonb;
BEGIN
    -- Per bank, at most `batch` units per call (the periodic job calls again next round): a long
    -- backlog never becomes one long transaction.
    FOR r IN SELECT b.bank_id, b.name FROM rcll.banks b
             WHERE (expire.bank IS NULL OR b.bank_id = rcll._actable_bank(expire.bank))
               -- IN, not a correlated EXISTS (the same semi-join on one node): Citus takes no
               -- correlated subquery over a reference table (banks), and runs this one apart.
               AND b.bank_id IN (SELECT u.bank_id FROM rcll.memory_units u WHERE u.expires_at <= now())
             ORDER BY b.bank_id LOOP
        ids := ARRAY(SELECT u.unit_id FROM rcll.memory_units u
                     WHERE u.bank_id = r.bank_id AND u.expires_at <= now()
                     ORDER BY u.expires_at, u.unit_id LIMIT greatest(coalesce(expire.batch, 10000), 1));
        counts := rcll._forget_units(r.bank_id, ids, '{}', false);
        INSERT INTO rcll.forget_log (bank_id, bank_name, actor, action, selector, counts)
        VALUES (r.bank_id, r.name, 'system:expire', 'expire', jsonb_build_object('expired_before', now()), counts);
        bank_name := r.name;
        units := (counts ->> 'units')::bigint;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll.expire(text, integer)
    IS 'The expiry sweep: forget units whose expires_at has passed, with the same cascade as rcll.forget (rcll._forget_units), at most `batch` per bank per call, each bank''s sweep recorded in rcll.forget_log (actor system:expire). One bank, or every bank when bank is NULL (the periodic jobs, Memory.upkeep). Returns the units forgotten per bank.';
REVOKE EXECUTE ON FUNCTION rcll.expire(text, integer) FROM PUBLIC;
