-- Links made on the write path for newly written units: entity, temporal adjacency, semantic
-- neighbours. Symmetric link types are stored in both directions, so a graph walk can follow
-- from_unit -> to_unit alone. Fan-out is capped per unit so hub entities do not explode the table.

CREATE OR REPLACE FUNCTION rcll._link_units(
    bank_id      integer,
    unit_ids     bigint[],
    entity_fanout integer DEFAULT 20,
    semantic_k   integer DEFAULT 5,
    semantic_min real DEFAULT 0.80,
    temporal_window interval DEFAULT '7 days',
    horizon      bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := _link_units.bank_id;
    n integer := 0;
    k integer;
BEGIN
    -- Every table is read with bank_id = b and joined on bank_id: on a Citus cluster the statement
    -- then runs whole on the shards of the bank (a join on the other ids alone is refused there).
    -- Each an INSERT ... SELECT counted by ROW_COUNT, not a data-modifying CTE counted by a
    -- SELECT: Citus runs such a CTE apart and sends its result to every worker (so that a retain
    -- extracting facts failed while any worker was down: bench.citus_worker_down).
    -- entity: units sharing an entity, most shared entities first, then most recent
    WITH pairs AS (
        SELECT src.unit_id AS a, nb.unit_id AS c, nb.shared
        FROM unnest(unit_ids) AS src(unit_id)
        CROSS JOIN LATERAL (
            SELECT o.unit_id, count(*) AS shared
            FROM rcll.unit_entities me
            JOIN rcll.unit_entities o ON o.bank_id = me.bank_id AND o.entity_id = me.entity_id AND o.unit_id <> me.unit_id
            WHERE me.bank_id = b AND me.unit_id = src.unit_id AND o.bank_id = b AND (horizon IS NULL OR o.unit_id <= horizon)
            GROUP BY o.unit_id
            ORDER BY count(*) DESC, o.unit_id DESC
            LIMIT entity_fanout
        ) nb
    )
    INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
    SELECT b, x.f, x.t, 'entity', least(1.0, 0.5 + 0.25 * x.shared)::real,
           jsonb_build_object('by', 'retain', 'shared_entities', x.shared)
    FROM (SELECT a AS f, c AS t, shared FROM pairs UNION SELECT c, a, shared FROM pairs) x
    ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING;
    GET DIAGNOSTICS k = ROW_COUNT;
    n := n + k;

    -- temporal: the nearest unit before and after in time (by occurred_start) within the window,
    -- and consecutive units of one document
    WITH me AS (
        SELECT u.unit_id, u.document_id, u.chunk_index, u.occurred_start, u.thread
        FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (unit_ids)
    ), pairs AS (
        SELECT me.unit_id AS a, nb.unit_id AS c,
               greatest(0.05, 1 - abs(extract(epoch FROM nb.occurred_start - me.occurred_start))
                                  / extract(epoch FROM temporal_window))::real AS w
        FROM me
        CROSS JOIN LATERAL (
            (SELECT o.unit_id, o.occurred_start FROM rcll.memory_units o
             WHERE o.bank_id = b AND o.unit_id <> me.unit_id AND o.thread IS NOT DISTINCT FROM me.thread
               AND (horizon IS NULL OR o.unit_id <= horizon)
               AND o.occurred_start <= me.occurred_start AND o.occurred_start >= me.occurred_start - temporal_window
             ORDER BY o.occurred_start DESC, o.unit_id DESC LIMIT 1)
            UNION ALL
            (SELECT o.unit_id, o.occurred_start FROM rcll.memory_units o
             WHERE o.bank_id = b AND o.unit_id <> me.unit_id AND o.thread IS NOT DISTINCT FROM me.thread
               AND (horizon IS NULL OR o.unit_id <= horizon)
               AND o.occurred_start > me.occurred_start AND o.occurred_start <= me.occurred_start + temporal_window
             ORDER BY o.occurred_start, o.unit_id LIMIT 1)
        ) nb
        WHERE me.occurred_start IS NOT NULL
        UNION
        SELECT me.unit_id, o.unit_id, 1.0::real
        FROM me JOIN rcll.memory_units o
          ON o.bank_id = b AND o.document_id = me.document_id AND o.chunk_index = me.chunk_index + 1
    )
    INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
    SELECT DISTINCT ON (x.f, x.t) b, x.f, x.t, 'temporal', x.w, jsonb_build_object('by', 'retain')
    FROM (SELECT a AS f, c AS t, w FROM pairs UNION ALL SELECT c, a, w FROM pairs) x
    ORDER BY x.f, x.t, x.w DESC
    ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING;
    GET DIAGNOSTICS k = ROW_COUNT;
    n := n + k;

    -- semantic: the nearest units by embedding above a similarity floor
    WITH pairs AS (
        SELECT me.unit_id AS a, nb.unit_id AS c, nb.sim
        FROM rcll.memory_units me
        CROSS JOIN LATERAL (
            SELECT o.unit_id, (1 - (o.embedding OPERATOR(public.<=>) me.embedding))::real AS sim
            FROM rcll.memory_units o
            WHERE o.bank_id = b AND o.unit_id <> me.unit_id AND o.embedding IS NOT NULL
              AND (horizon IS NULL OR o.unit_id <= horizon)
            ORDER BY o.embedding OPERATOR(public.<=>) me.embedding
            LIMIT semantic_k
        ) nb
        WHERE me.bank_id = b AND me.unit_id = ANY (unit_ids) AND me.embedding IS NOT NULL AND nb.sim >= semantic_min
    )
    INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
    SELECT DISTINCT ON (x.f, x.t) b, x.f, x.t, 'semantic', least(1.0, x.sim)::real, jsonb_build_object('by', 'retain')
    FROM (SELECT a AS f, c AS t, sim FROM pairs UNION ALL SELECT c, a, sim FROM pairs) x
    ORDER BY x.f, x.t, x.sim DESC
    ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING;
    GET DIAGNOSTICS k = ROW_COUNT;
    RETURN n + k;
END
$$;
COMMENT ON FUNCTION rcll._link_units(integer, bigint[], integer, integer, real, interval, bigint)
    IS 'Internal: link newly written units to the bank (horizon: only to units up to that id, the ones that existed when they were written - a forget re-links survivors so) - entity (units sharing an entity, at most entity_fanout per unit), temporal (nearest unit before and after by occurred_start within temporal_window, and consecutive units of one document), semantic (semantic_k nearest by embedding with cosine similarity >= semantic_min). Symmetric links are stored both ways. Returns the number of links written.';

CREATE OR REPLACE FUNCTION rcll._supersede(bank_id integer, old_unit bigint, new_unit bigint, at timestamptz DEFAULT NULL,
                                           reason jsonb DEFAULT '{}')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    o rcll.memory_units%ROWTYPE;
    nw rcll.memory_units%ROWTYPE;
    t timestamptz;
    missing text;
BEGIN
    IF old_unit = new_unit THEN
        RAISE EXCEPTION 'new_unit: a unit cannot supersede itself' USING ERRCODE = 'RC001', COLUMN = 'new_unit',
            HINT = 'Pass the newer unit as new_unit and the unit it replaces as old_unit.';
    END IF;
    -- By the bank as well (a Citus cluster runs each statement on the bank's shards alone).
    SELECT * INTO nw FROM rcll.memory_units u WHERE u.bank_id = _supersede.bank_id AND u.unit_id = new_unit;
    SELECT * INTO o FROM rcll.memory_units u WHERE u.bank_id = _supersede.bank_id AND u.unit_id = old_unit FOR UPDATE;
    IF o.unit_id IS NULL OR nw.unit_id IS NULL THEN
        missing := CASE WHEN o.unit_id IS NULL THEN 'old_unit' ELSE 'new_unit' END;
        RAISE EXCEPTION '%: no such unit', missing
            USING ERRCODE = 'RC003', COLUMN = missing, HINT = 'Pass unit ids of one bank (SELECT unit_id FROM rcll.memory_units).';
    END IF;
    IF o.superseded_by IS NOT NULL OR NOT upper_inf(o.valid) THEN
        RETURN false;                       -- already closed; the first replacement stands
    END IF;
    t := coalesce(at, lower(nw.valid), now());
    IF t <= lower(o.valid) THEN
        RAISE EXCEPTION 'at: % is not after the start of unit %''s validity (%)', t, old_unit, lower(o.valid)
            USING ERRCODE = 'RC001', COLUMN = 'at', HINT = 'A unit can only be superseded by something that became true after it did.';
    END IF;
    UPDATE rcll.memory_units u
    SET valid = tstzrange(lower(u.valid), t), superseded_by = new_unit, updated_at = now()
    WHERE u.bank_id = _supersede.bank_id AND u.unit_id = old_unit;
    INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
    VALUES (o.bank_id, new_unit, old_unit, 'supersedes', 1.0,
        jsonb_build_object('by', 'retain', 'at', t) || coalesce(reason, '{}'))
    ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING;
    RETURN true;
END
$$;
COMMENT ON FUNCTION rcll._supersede(integer, bigint, bigint, timestamptz, jsonb)
    IS 'Internal: rcll.supersede within one bank (both units of bank_id; RC003 when one is not), what the write paths call with the bank they write.';

CREATE OR REPLACE FUNCTION rcll.supersede(old_unit bigint, new_unit bigint, at timestamptz DEFAULT NULL,
                                          reason jsonb DEFAULT '{}')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer;
BEGIN
    SELECT u.bank_id INTO b FROM rcll.memory_units u WHERE u.unit_id = new_unit;
    IF b IS NOT NULL AND NOT EXISTS (SELECT FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = old_unit)
       AND EXISTS (SELECT FROM rcll.memory_units u WHERE u.unit_id = old_unit) THEN
        RAISE EXCEPTION 'new_unit: units % and % are in different banks', old_unit, new_unit USING ERRCODE = 'RC001', COLUMN = 'new_unit',
            HINT = 'A unit is superseded only by a unit of its own bank.';
    END IF;
    RETURN rcll._supersede(b, old_unit, new_unit, at, reason);
END
$$;
COMMENT ON FUNCTION rcll.supersede(bigint, bigint, timestamptz, jsonb)
    IS 'Record that new_unit replaces old_unit: closes old_unit''s validity window at `at` (default: the start of new_unit''s validity), sets its superseded_by and writes a supersedes link (new -> old). Nothing is deleted. Returns false if old_unit was already superseded or closed.';
