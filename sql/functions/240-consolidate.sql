-- Consolidation, a background job never on the recall path: related pending L2 units are compacted
-- into observations that keep their sources linked. Every observation gets a room.

CREATE OR REPLACE FUNCTION rcll.consolidation_groups(
    bank     text,
    time_window interval DEFAULT '7 days',
    min_size integer DEFAULT 2,
    max_size integer DEFAULT 12,
    max_groups integer DEFAULT 100)
RETURNS TABLE (entity_id bigint, entity_name text, bucket_start timestamptz, unit_ids bigint[], texts text[])
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH b AS (SELECT rcll._bank_id(bank) AS id),
    pending AS (
        SELECT u.unit_id, u.text, coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) AS t
        FROM rcll.memory_units u, b
        WHERE u.bank_id = b.id AND u.layer = 'L2' AND u.kind IN ('fact', 'chunk')
          AND u.consolidation_state = 'pending' AND u.superseded_by IS NULL AND upper_inf(u.valid)
    ),
    -- each unit's primary entity: the one it shares with the most other pending units
    shared AS (
        SELECT p.unit_id, ue.entity_id,
               (SELECT count(*) FROM rcll.unit_entities o JOIN pending q ON q.unit_id = o.unit_id
                WHERE o.entity_id = ue.entity_id) AS pending_mentions
        FROM pending p JOIN rcll.unit_entities ue ON ue.unit_id = p.unit_id
    ),
    primary_entity AS (
        SELECT DISTINCT ON (s.unit_id) s.unit_id, s.entity_id
        FROM shared s WHERE s.pending_mentions >= min_size
        ORDER BY s.unit_id, s.pending_mentions DESC, s.entity_id
    ),
    bucketed AS (
        SELECT pe.entity_id, p.unit_id, p.text, p.t,
               to_timestamp(floor(extract(epoch FROM p.t) / extract(epoch FROM time_window))
                            * extract(epoch FROM time_window)) AS bucket_start,
               row_number() OVER (PARTITION BY pe.entity_id,
                                  floor(extract(epoch FROM p.t) / extract(epoch FROM time_window))
                                  ORDER BY p.t, p.unit_id) AS rn
        FROM primary_entity pe JOIN pending p USING (unit_id)
    ),
    groups AS (
        SELECT x.entity_id, x.bucket_start, ((x.rn - 1) / max_size) AS part,
               array_agg(x.unit_id ORDER BY x.t, x.unit_id) AS unit_ids,
               array_agg(x.text ORDER BY x.t, x.unit_id) AS texts
        FROM bucketed x
        GROUP BY x.entity_id, x.bucket_start, ((x.rn - 1) / max_size)
        HAVING count(*) >= min_size
    )
    SELECT g.entity_id, e.name, g.bucket_start, g.unit_ids, g.texts
    FROM groups g JOIN rcll.entities e ON e.entity_id = g.entity_id
    ORDER BY g.bucket_start, g.entity_id, g.part
    LIMIT max_groups
$$;
COMMENT ON FUNCTION rcll.consolidation_groups(text, interval, integer, integer, integer)
    IS 'Groups of related pending L2 units to consolidate: units are grouped by their primary entity (the entity they share with the most other pending units) within time buckets of time_window, at least min_size and at most max_size units per group. Read-only; rcll consolidate writes one observation per group with rcll.write_observation.';

CREATE OR REPLACE FUNCTION rcll.write_observation(
    bank      text,
    text      text,
    embedding vector,
    sources   bigint[],
    hall      text DEFAULT 'observation',
    room      text DEFAULT NULL,
    actor     text DEFAULT 'system:consolidate',
    method    text DEFAULT 'offline',
    llm_calls jsonb DEFAULT '[]',
    metadata  jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    s record;
    obs bigint;
    r text;
    room_by text;
BEGIN
    IF text IS NULL OR btrim(text, E' \t\r\n\f\v') = '' THEN
        RAISE EXCEPTION 'text: an observation needs text' USING ERRCODE = 'RC001', COLUMN = 'text',
            HINT = 'Pass the observation''s text: what the source units say together.';
    END IF;
    IF coalesce(array_length(sources, 1), 0) = 0 THEN
        RAISE EXCEPTION 'sources: an observation needs at least one source unit' USING ERRCODE = 'RC001', COLUMN = 'sources',
            HINT = 'Pass the ids of the units it consolidates (rcll.consolidation_groups lists them).';
    END IF;
    -- lock the sources: two consolidators must not fold the same unit twice
    PERFORM 1 FROM rcll.memory_units u WHERE u.unit_id = ANY (sources) ORDER BY u.unit_id FOR UPDATE;
    SELECT count(*) AS n,
           count(*) FILTER (WHERE u.bank_id = b AND u.consolidation_state = 'pending') AS ok,
           min(lower(u.valid)) AS valid_from,
           min(u.occurred_start) AS occ_start,
           max(coalesce(u.occurred_end, u.occurred_start)) AS occ_end,
           max(u.mentioned_at) AS mentioned,
           CASE WHEN count(DISTINCT coalesce(u.thread, '')) = 1 THEN min(u.thread) END AS thread,
           CASE WHEN count(DISTINCT coalesce(u.author, '')) = 1 THEN min(u.author) END AS author,
           CASE WHEN count(DISTINCT coalesce(u.author, '')) = 1 THEN min(u.author_source) ELSE 'none' END AS author_source,
           ARRAY(SELECT DISTINCT t FROM rcll.memory_units x, unnest(x.tags) t
                 WHERE x.unit_id = ANY (sources) ORDER BY t) AS tags
      INTO s
    FROM rcll.memory_units u WHERE u.unit_id = ANY (sources);
    IF s.n <> coalesce(array_length(sources, 1), 0) OR s.ok <> s.n THEN
        RAISE EXCEPTION 'sources: % of % units are pending units of bank %', s.ok, array_length(sources, 1), bank
            USING ERRCODE = 'RC001', COLUMN = 'sources', HINT = 'Consolidate only units listed by rcll.consolidation_groups (pending, same bank).';
    END IF;

    -- the room: given, else the sources'' majority room, else the classifier, else general
    r := nullif(btrim(room), ''); room_by := 'caller';
    IF r IS NULL THEN
        SELECT u.room INTO r FROM rcll.memory_units u
        WHERE u.unit_id = ANY (sources) AND u.room IS NOT NULL
        GROUP BY u.room ORDER BY count(*) DESC, u.room LIMIT 1;
        room_by := CASE WHEN r IS NULL THEN 'classifier' ELSE 'majority' END;
    END IF;
    -- (NULL here: the janitor trigger classifies it on insert, and general is the last resort below)

    INSERT INTO rcll.memory_units AS u
        (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source, thread, tags,
         valid, occurred_start, occurred_end, mentioned_at, consolidation_state, provenance, metadata)
    VALUES (b, NULL, 'observation', btrim(write_observation.text), embedding, hall, rcll._layer_for(hall), r,
            s.author, s.author_source, s.thread, s.tags,
            tstzrange(coalesce(s.valid_from, now()), NULL), s.occ_start,
            CASE WHEN s.occ_end > s.occ_start THEN s.occ_end END, s.mentioned, 'consolidated',
            jsonb_build_object('via', 'consolidate', 'who', actor, 'method', method, 'at', now(), 'sources', sources),
            coalesce(metadata, '{}'))
    RETURNING u.unit_id, u.room INTO obs, r;
    IF r IS NULL THEN                 -- no unroomed observations
        r := 'general';
        room_by := 'general';
        UPDATE rcll.memory_units u SET room = r WHERE u.unit_id = obs;
    END IF;

    INSERT INTO rcll.unit_entities (unit_id, entity_id, bank_id, role)
    SELECT DISTINCT obs, ue.entity_id, b, NULL::text FROM rcll.unit_entities ue WHERE ue.unit_id = ANY (sources);
    INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight, provenance)
    SELECT b, obs, src, 'consolidates', 1.0, jsonb_build_object('by', 'consolidate', 'method', method)
    FROM unnest(sources) src;
    UPDATE rcll.memory_units u SET consolidation_state = 'consolidated', updated_at = now()
    WHERE u.unit_id = ANY (sources);
    PERFORM rcll._link_units(b, ARRAY[obs]);
    PERFORM rcll._record_llm_calls(b, NULL, llm_calls);
    PERFORM rcll._audit(b, 'consolidate', jsonb_build_object('observation', obs, 'sources', to_jsonb(sources)),
                        jsonb_build_object('method', method, 'room', r, 'room_by', room_by, 'hall', hall,
                                           'text', btrim(write_observation.text),
                                           'reverse', 'DELETE the observation and set the sources'' consolidation_state back to pending'),
                        actor => actor);
    RETURN obs;
END
$$;
COMMENT ON FUNCTION rcll.write_observation(text, text, vector, bigint[], text, text, text, text, jsonb, jsonb)
    IS 'Consolidation: write one observation (kind observation) compacting pending source units of a bank, in one transaction - the room is the one given, else the sources'' majority room, else the classifier''s, else general (never none); the sources'' entities, tags and shared author carry over; consolidates links go observation -> source; the sources become consolidated; an audit_log row records it. Returns the observation''s unit id.';
