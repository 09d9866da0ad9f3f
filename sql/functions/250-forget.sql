-- Forget: remove memories by selector with everything derived from them, so that the bank is what
-- it would be had they never been retained - and record who forgot what, never the content.
--
-- The cascade (rcll._forget_units, in eight steps) is one function that forget, the expiry sweep
-- (260-expiry.sql) and a bank's own units share: documents whose every unit goes are deleted,
-- a document that keeps some units is redacted to their texts; units go with their embeddings,
-- lexicon rows (unit_lexicon, and document_lexicon through its triggers), entity mentions and
-- links (ON DELETE CASCADE); every observation one of whose sources goes is removed and its
-- surviving sources are queued for consolidation again; a unit superseded by a forgotten unit is
-- current again; entities left with no unit go, the others' mention counts are recounted; a room
-- left with no unit leaves the registry; the refreshed BM25 statistics lose exactly what went.
-- A forget holds its bank's write lock alone (037-bank-write-lock.sql).

CREATE OR REPLACE FUNCTION rcll._actable_bank(bank text)
RETURNS integer
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    id integer;
    owner_role name;
BEGIN
    -- Called inside SECURITY DEFINER functions, which bypass row-level security as the owner: the
    -- caller's own isolation is checked here, by session_user (as rcll.current_agent does), and a
    -- bank out of reach is reported exactly like a bank that does not exist.
    IF bank IS NULL OR btrim(bank) = '' THEN
        RAISE EXCEPTION 'bank: a bank is required' USING ERRCODE = 'RC001', COLUMN = 'bank',
            HINT = 'Pass bank => ''name''.';
    END IF;
    SELECT b.bank_id INTO id FROM rcll.banks b WHERE b.name = _actable_bank.bank;
    SELECT pg_catalog.pg_get_userbyid(c.relowner) INTO owner_role FROM pg_catalog.pg_class c WHERE c.oid = 'rcll.banks'::regclass;
    IF id IS NOT NULL
       AND (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid = 'rcll.banks'::regclass)
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)
       AND NOT pg_catalog.pg_has_role(session_user, owner_role, 'MEMBER')
       AND NOT id = ANY (rcll._visible_banks(session_user)) THEN
        id := NULL;
    END IF;
    IF id IS NULL THEN
        RAISE EXCEPTION 'bank: unknown bank "%"', bank USING ERRCODE = 'RC002', COLUMN = 'bank',
            HINT = format('Create it first: SELECT rcll.create_bank(%L) or `rcll bank create %s`.', bank, bank);
    END IF;
    -- Destructive verbs are a writer's: a role that may not write memory may not forget it either.
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)
       AND NOT pg_catalog.has_table_privilege(session_user, 'rcll.memory_units', 'INSERT') THEN
        RAISE EXCEPTION 'bank: role "%" may not write to bank "%", so it may not forget from it', session_user, bank
            USING ERRCODE = 'RC006', COLUMN = 'bank', HINT = 'Connect as a role that writes memory (a read-only role cannot forget).';
    END IF;
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll._actable_bank(text)
    IS 'Internal: the id of a bank the session''s role may change from inside a SECURITY DEFINER function - unknown, or hidden by bank isolation (rcll._visible_banks of session_user): RC002; a role without INSERT on memory_units: RC006.';

CREATE OR REPLACE FUNCTION rcll._forget_plan(b integer, unit_ids bigint[], document_ids bigint[],
    OUT gone bigint[], OUT obs_gone bigint[], OUT requeue bigint[], OUT full_docs bigint[], OUT part_docs bigint[],
    OUT reopen bigint[], OUT touched bigint[], OUT orphans bigint[], OUT rooms_in text[], OUT dead_rooms text[],
    OUT counts jsonb)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Units selected, and every unit of a selected document.
    gone := ARRAY(SELECT u.unit_id FROM rcll.memory_units u
                  WHERE u.bank_id = b AND (u.unit_id = ANY (_forget_plan.unit_ids)
                                           OR u.document_id = ANY (_forget_plan.document_ids)));
    -- Observations one of whose sources goes: removed, not re-derived - their text was written
    -- from every source, the forgotten ones included, and only a model could write it again
    -- without them (the surviving sources are queued: the next consolidation does).
    obs_gone := ARRAY(SELECT DISTINCT l.from_unit FROM rcll.links l
                      JOIN rcll.memory_units o ON o.bank_id = l.bank_id AND o.unit_id = l.from_unit AND o.kind = 'observation'
                      WHERE l.bank_id = b AND l.link_type = 'consolidates' AND l.to_unit = ANY (gone)
                        AND NOT l.from_unit = ANY (gone));
    gone := gone || obs_gone;
    requeue := ARRAY(SELECT DISTINCT l.to_unit FROM rcll.links l
                     WHERE l.bank_id = b AND l.link_type = 'consolidates' AND l.from_unit = ANY (gone)
                       AND NOT l.to_unit = ANY (gone));
    full_docs := ARRAY(SELECT d.document_id FROM rcll.documents d
                       WHERE d.bank_id = b
                         AND (d.document_id = ANY (_forget_plan.document_ids)
                              OR (EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.bank_id = b AND u.document_id = d.document_id AND u.unit_id = ANY (gone))
                                  AND NOT EXISTS (SELECT 1 FROM rcll.memory_units u
                                                  WHERE u.bank_id = b AND u.document_id = d.document_id AND NOT u.unit_id = ANY (gone)))));
    part_docs := ARRAY(SELECT DISTINCT u.document_id FROM rcll.memory_units u
                       WHERE u.bank_id = b AND u.unit_id = ANY (gone) AND u.document_id IS NOT NULL AND NOT u.document_id = ANY (full_docs));
    reopen := ARRAY(SELECT u.unit_id FROM rcll.memory_units u
                    WHERE u.bank_id = b AND u.superseded_by = ANY (gone) AND NOT u.unit_id = ANY (gone));
    touched := ARRAY(SELECT DISTINCT ue.entity_id FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.unit_id = ANY (gone));
    orphans := ARRAY(SELECT e FROM unnest(touched) e
                     WHERE NOT EXISTS (SELECT 1 FROM rcll.unit_entities ue
                                       WHERE ue.bank_id = b AND ue.entity_id = e AND NOT ue.unit_id = ANY (gone)));
    rooms_in := ARRAY(SELECT DISTINCT u.room FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (gone) AND u.room IS NOT NULL);
    dead_rooms := ARRAY(SELECT r.name FROM rcll.rooms r
                        WHERE r.bank_id = b AND r.name = ANY (rooms_in) AND r.status = 'live'
                          AND NOT EXISTS (SELECT 1 FROM rcll.memory_units u
                                          WHERE u.bank_id = b AND u.room = r.name AND NOT u.unit_id = ANY (gone))
                          AND NOT EXISTS (SELECT 1 FROM rcll.room_aliases a WHERE a.bank_id = b AND a.room = r.name AND a.reason = 'merge')
                          AND NOT EXISTS (SELECT 1 FROM rcll.rooms m WHERE m.bank_id = b AND m.merged_into = r.name)
                          AND NOT EXISTS (SELECT 1 FROM rcll.room_merge_proposals p
                                          WHERE p.bank_id = b AND p.status = 'pending' AND r.name IN (p.from_room, p.into_room)));

    SELECT jsonb_build_object(
        'documents', coalesce(array_length(full_docs, 1), 0),
        'documents_redacted', coalesce(array_length(part_docs, 1), 0),
        'units', count(*),
        'chunks', count(*) FILTER (WHERE u.kind = 'chunk'),
        'facts', count(*) FILTER (WHERE u.kind = 'fact'),
        'observations', count(*) FILTER (WHERE u.kind = 'observation'),
        'observations_of_forgotten_sources', coalesce(array_length(obs_gone, 1), 0),
        'sources_requeued', coalesce(array_length(requeue, 1), 0),
        'embeddings', count(u.embedding),
        'lexicon_rows', (SELECT count(*) FROM rcll.unit_lexicon l WHERE l.bank_id = b AND l.unit_id = ANY (gone)),
        'entity_mentions', (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.unit_id = ANY (gone)),
        'links', (SELECT count(*) FROM rcll.links l WHERE l.bank_id = b AND (l.from_unit = ANY (gone) OR l.to_unit = ANY (gone))),
        'entities', coalesce(array_length(orphans, 1), 0),
        'versions', (SELECT count(*) FROM rcll.unit_versions v WHERE v.bank_id = b AND v.unit_id = ANY (gone)),
        'reopened', coalesce(array_length(reopen, 1), 0),
        'rooms', coalesce(array_length(dead_rooms, 1), 0))
    INTO counts
    FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (gone);
END
$$;
COMMENT ON FUNCTION rcll._forget_plan(integer, bigint[], bigint[])
    IS 'Internal: step 1 of rcll._forget_units, read before anything changes - what forgetting these units and documents of bank b removes: the units (gone, observations of a forgotten source included), the sources queued again, the documents deleted and redacted, the units current again, the entities touched and those left without units, the rooms touched and those left empty, and the counts per kind a forget reports (all a dry run returns).';

CREATE OR REPLACE FUNCTION rcll._forget_redo_plan(b integer, gone bigint[],
    OUT relink bigint[], OUT resupersede bigint[], OUT thresholds double precision[], OUT gone_new_rooms text[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    gone_new_rooms := ARRAY(SELECT DISTINCT u.room FROM rcll.memory_units u
                            WHERE u.bank_id = b AND u.unit_id = ANY (gone) AND u.room IS NOT NULL AND u.tags @> ARRAY['room-new:' || u.room]);
    -- Extracted facts and observations linked to a forgotten unit: the links a retain made are its
    -- nearest neighbours among the units that existed then (rcll._link_units), so a survivor that
    -- lost a neighbour is linked again, to the neighbours it would have had without it.
    relink := ARRAY(SELECT DISTINCT l.from_unit FROM rcll.links l JOIN rcll.memory_units u ON u.bank_id = l.bank_id AND u.unit_id = l.from_unit
                    WHERE l.bank_id = b AND l.to_unit = ANY (gone) AND l.link_type IN ('entity', 'temporal', 'semantic')
                      AND u.kind IN ('fact', 'observation') AND NOT l.from_unit = ANY (gone));

    -- A surviving fact that superseded a forgotten unit by its own text (the offline extractor's
    -- descriptions are the fact itself) looks again, below, for what it would have superseded.
    resupersede := ARRAY(SELECT DISTINCT l.from_unit FROM rcll.links l JOIN rcll.memory_units u ON u.bank_id = l.bank_id AND u.unit_id = l.from_unit
                         WHERE l.bank_id = b AND l.link_type = 'supersedes' AND l.to_unit = ANY (gone)
                           AND NOT l.from_unit = ANY (gone) AND l.provenance ->> 'description' = u.text
                           AND l.provenance ? 'threshold' AND u.embedding IS NOT NULL
                         ORDER BY 1);
    thresholds := ARRAY(SELECT max((l.provenance ->> 'threshold')::double precision) FROM unnest(resupersede) r(unit_id)
                        JOIN rcll.links l ON l.bank_id = b AND l.from_unit = r.unit_id AND l.link_type = 'supersedes' AND l.to_unit = ANY (gone)
                        GROUP BY r.unit_id ORDER BY r.unit_id);
END
$$;
COMMENT ON FUNCTION rcll._forget_redo_plan(integer, bigint[])
    IS 'Internal: step 2 of rcll._forget_units, read before anything changes - what the survivors must redo once the units in gone are gone: the facts and observations to link again, the facts to look again for what they supersede (with their thresholds), the rooms whose first write goes.';

CREATE OR REPLACE FUNCTION rcll._forget_bank_stats(b integer, gone bigint[], full_docs bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st record;
BEGIN
    -- The BM25 statistics a refresh counted lose exactly what goes: the units and documents that
    -- existed when it ran (written at or before refreshed_at). Later ones it never counted.
    SELECT s.refreshed_at, s.unit_count INTO st FROM rcll.bank_stats s WHERE s.bank_id = b FOR UPDATE;
    IF coalesce(st.unit_count, 0) > 0 THEN
        UPDATE rcll.bank_stats s
        SET unit_count = greatest(s.unit_count - x.n, 0), total_length = greatest(s.total_length - x.len, 0),
            document_count = greatest(s.document_count - (SELECT count(*) FROM rcll.documents d
                                                          WHERE d.bank_id = b AND d.document_id = ANY (full_docs) AND d.created_at <= st.refreshed_at), 0)
        FROM (SELECT count(*) AS n, coalesce(sum(u.lexical_length), 0) AS len
              FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (gone) AND u.created_at <= st.refreshed_at) x
        WHERE s.bank_id = b;
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._forget_bank_stats(integer, bigint[], bigint[])
    IS 'Internal: step 3 of rcll._forget_units - bank b''s refreshed BM25 statistics lose exactly the units and documents that go and that the refresh counted.';

CREATE OR REPLACE FUNCTION rcll._forget_rows(b integer, gone bigint[], full_docs bigint[], part_docs bigint[],
                                             reopen bigint[], requeue bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- Superseded only by a forgotten unit: current again. rcll.supersede closes only open units,
    -- so "current" is an open validity from the same start.
    UPDATE rcll.memory_units u
    SET superseded_by = NULL, valid = tstzrange(lower(u.valid), NULL), updated_at = now()
    WHERE u.bank_id = b AND u.unit_id = ANY (reopen);
    UPDATE rcll.memory_units u SET consolidation_state = 'pending', updated_at = now()
    WHERE u.bank_id = b AND u.unit_id = ANY (requeue) AND u.consolidation_state <> 'pending';
    -- The consolidation audit row kept the observation's text: the row stays (who, when, which
    -- units), the text goes. Only when there is one: on a Citus cluster audit_log is a reference
    -- table, and a write to it needs every node up (its copy on each), so a forget of units no
    -- consolidation wrote reads it here and runs on the bank's worker alone.
    IF EXISTS (SELECT 1 FROM rcll.audit_log a
               WHERE a.bank_id = b AND a.action = 'consolidate' AND a.detail ? 'text'
                 AND (a.target ->> 'observation')::bigint = ANY (gone)) THEN
        UPDATE rcll.audit_log a SET detail = a.detail - 'text'
        WHERE a.bank_id = b AND a.action = 'consolidate' AND a.detail ? 'text'
          AND (a.target ->> 'observation')::bigint = ANY (gone);
    END IF;

    DELETE FROM rcll.documents d WHERE d.bank_id = b AND d.document_id = ANY (full_docs);
    DELETE FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (gone);
    -- A document that keeps units keeps only their texts: its raw content held the forgotten ones.
    UPDATE rcll.documents d
    SET content = k.content, content_hash = rcll._content_hash(k.content, d.thread),
        metadata = d.metadata || jsonb_build_object('redacted', true)
    FROM (SELECT u.document_id, string_agg(u.text, E'\n\n' ORDER BY u.chunk_index, u.unit_id) AS content
          FROM rcll.memory_units u WHERE u.bank_id = b AND u.document_id = ANY (part_docs) GROUP BY u.document_id) k
    WHERE d.bank_id = b AND d.document_id = k.document_id;
END
$$;
COMMENT ON FUNCTION rcll._forget_rows(integer, bigint[], bigint[], bigint[], bigint[], bigint[])
    IS 'Internal: step 4 of rcll._forget_units - the units superseded only by a forgotten one current again, the surviving sources queued again, the consolidation audit rows without the text, the units and whole documents deleted (embeddings, lexicon rows, mentions and links go with them), the documents that keep units redacted to their texts.';

CREATE OR REPLACE FUNCTION rcll._forget_relink(b integer, relink bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    grp record;
BEGIN
    FOR grp IN SELECT array_agg(u.unit_id ORDER BY u.unit_id) AS ids,
                      coalesce((SELECT max(x.unit_id) FROM rcll.memory_units x WHERE x.bank_id = b AND x.document_id = min(u.document_id)),
                               max(u.unit_id)) AS horizon
               FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (relink)
               GROUP BY coalesce(u.document_id, -u.unit_id) ORDER BY 2 LOOP
        PERFORM rcll._link_units(b, grp.ids, horizon => grp.horizon);
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll._forget_relink(integer, bigint[])
    IS 'Internal: step 5 of rcll._forget_units - the surviving facts and observations that lost a linked neighbour linked again (rcll._link_units), per document, to the neighbours they would have had.';

CREATE OR REPLACE FUNCTION rcll._forget_entities(b integer, touched bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    orphans    bigint[];
    freed      text[] := '{}';
    ent        record;
    first_name text;
BEGIN
    -- Entities: what the surviving mentions alone would have made of them (rcll.unit_entities
    -- records what each mention said: migration 021). A known-entity mention (role 'mention') is
    -- only written when its entity already existed: one whose entity no earlier surviving unit
    -- named goes.
    DELETE FROM rcll.unit_entities m
    WHERE m.bank_id = b AND m.entity_id = ANY (touched) AND m.role = 'mention'
      AND NOT EXISTS (SELECT 1 FROM rcll.unit_entities x
                      WHERE x.bank_id = b AND x.entity_id = m.entity_id AND x.unit_id < m.unit_id AND x.role IS DISTINCT FROM 'mention');
    orphans := ARRAY(SELECT e FROM unnest(touched) e
                     WHERE NOT EXISTS (SELECT 1 FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.entity_id = e));
    freed := ARRAY(SELECT a.alias FROM rcll.entity_aliases a WHERE a.bank_id = b AND a.entity_id = ANY (orphans));
    DELETE FROM rcll.entities e WHERE e.bank_id = b AND e.entity_id = ANY (orphans);
    -- A spelling no surviving mention gave its entity goes (a person's own aliases stay).
    WITH gone_alias AS (
        DELETE FROM rcll.entity_aliases a
        WHERE a.bank_id = b AND a.entity_id = ANY (touched) AND a.source <> 'human'
          AND NOT EXISTS (SELECT 1 FROM rcll.unit_entities ue
                          WHERE ue.bank_id = b AND ue.entity_id = a.entity_id
                            AND (ue.spellings IS NULL
                                 OR EXISTS (SELECT 1 FROM unnest(ue.spellings) sp WHERE rcll._entity_key(sp) = a.alias)))
        RETURNING a.alias)
    SELECT freed || ARRAY(SELECT g.alias FROM gone_alias g) INTO freed;
    -- A freed spelling goes to the entity that would have received it first: the earliest
    -- surviving mention that gave it (only an extractor's extra aliases can have been refused).
    IF cardinality(freed) > 0 THEN
        INSERT INTO rcll.entity_aliases AS a (bank_id, alias, entity_id, source)
        SELECT DISTINCT ON (k.key) b, k.key, k.entity_id, 'extractor'
        FROM (SELECT rcll._entity_key(sp) AS key, ue.entity_id, ue.unit_id
              FROM rcll.unit_entities ue, unnest(ue.spellings) sp
              WHERE ue.bank_id = b AND cardinality(ue.spellings) > 1) k
        WHERE k.key = ANY (freed)
        ORDER BY k.key, k.unit_id
        ON CONFLICT ON CONSTRAINT entity_aliases_pkey DO NOTHING;
    END IF;
    -- Survivors are recounted; their type is their first typed mention's, their name their first
    -- mention's spelling (a chunk's: the least spelling its document wrote, as
    -- rcll._link_keyless_entities names it), and one a chunk named first has no embedding (a
    -- keyless entity is created without one). Mentions written before migration 021 said nothing
    -- recorded: such an entity keeps its type and name.
    FOR ent IN
        SELECT e.entity_id, e.name, e.entity_type,
               (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.entity_id = e.entity_id) AS n,
               f.unit_id AS first_unit, f.role AS first_role, f.spellings AS first_spellings,
               (SELECT ue.entity_type FROM rcll.unit_entities ue
                WHERE ue.bank_id = b AND ue.entity_id = e.entity_id AND ue.entity_type IS NOT NULL ORDER BY ue.unit_id LIMIT 1) AS typ,
               EXISTS (SELECT 1 FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.entity_id = e.entity_id AND ue.spellings IS NULL) AS unknown
        FROM rcll.entities e
        CROSS JOIN LATERAL (SELECT ue.unit_id, ue.role, ue.spellings FROM rcll.unit_entities ue
                            WHERE ue.bank_id = b AND ue.entity_id = e.entity_id ORDER BY ue.unit_id LIMIT 1) f
        WHERE e.bank_id = b AND e.entity_id = ANY (touched) LOOP
        IF ent.unknown THEN
            UPDATE rcll.entities e SET mention_count = ent.n WHERE e.bank_id = b AND e.entity_id = ent.entity_id;
            CONTINUE;
        END IF;
        IF rcll._keyless_link(ent.first_role) THEN
            first_name := (SELECT min(btrim(ue.spellings[1])) FROM rcll.unit_entities ue
                           JOIN rcll.memory_units u ON u.bank_id = ue.bank_id AND u.unit_id = ue.unit_id
                           WHERE ue.bank_id = b AND ue.entity_id = ent.entity_id AND rcll._keyless_link(ue.role)
                             AND u.document_id = (SELECT x.document_id FROM rcll.memory_units x WHERE x.bank_id = b AND x.unit_id = ent.first_unit));
        ELSE
            first_name := btrim(regexp_replace(ltrim(ent.first_spellings[1], '@'), '\s+', ' ', 'g'));
        END IF;
        UPDATE rcll.entities e
        SET mention_count = ent.n, entity_type = ent.typ,
            name = CASE WHEN first_name IS NULL OR first_name = '' OR EXISTS (
                             SELECT 1 FROM rcll.entities y WHERE y.bank_id = b AND y.name = first_name AND y.entity_id <> e.entity_id)
                        THEN e.name ELSE first_name END,
            embedding = CASE WHEN rcll._keyless_link(ent.first_role) THEN NULL ELSE e.embedding END
        -- The bank named (the id alone is unique too): on a Citus cluster the statement, with its
        -- subquery on the same table, then runs on the bank's shard.
        WHERE e.bank_id = b AND e.entity_id = ent.entity_id;
    END LOOP;
    RETURN coalesce(array_length(orphans, 1), 0);
END
$$;
COMMENT ON FUNCTION rcll._forget_entities(integer, bigint[])
    IS 'Internal: step 6 of rcll._forget_units - the touched entities made what the surviving mentions alone would have made: mentions of an entity no earlier surviving unit named go, entities left without mentions go, spellings no surviving mention gave go (or pass to the entity that would have had them first), survivors recounted, typed and named by their first mention. Returns how many entities went.';

CREATE OR REPLACE FUNCTION rcll._forget_resupersede(b integer, resupersede bigint[], thresholds double precision[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    cand bigint;
    i    integer;
BEGIN
    -- Supersession looked again, as rcll.retain_facts does, among the units that existed before
    -- the fact was written (the search is that of retain_facts' step 4, with its own embedding).
    FOR i IN 1 .. coalesce(array_length(resupersede, 1), 0) LOOP
        SELECT c.unit_id INTO cand
        FROM (SELECT o.unit_id,
                     (1 - (o.embedding OPERATOR(public.<=>) s.embedding))::real
                     + 0.05 * (SELECT count(*) FROM rcll.unit_entities x JOIN rcll.unit_entities y ON y.bank_id = b AND y.entity_id = x.entity_id
                               WHERE x.bank_id = b AND x.unit_id = o.unit_id AND y.unit_id = s.unit_id) AS sim
              FROM rcll.memory_units s, rcll.memory_units o
              WHERE s.bank_id = b AND s.unit_id = resupersede[i] AND o.bank_id = b AND o.unit_id < s.unit_id
                AND o.document_id IS DISTINCT FROM s.document_id
                AND o.superseded_by IS NULL AND upper_inf(o.valid) AND o.embedding IS NOT NULL
                AND o.thread IS NOT DISTINCT FROM s.thread AND lower(o.valid) < lower(s.valid)
              ORDER BY o.embedding OPERATOR(public.<=>) s.embedding
              LIMIT 10) c
        WHERE c.sim >= thresholds[i]
        ORDER BY c.sim DESC, c.unit_id DESC
        LIMIT 1;
        IF cand IS NOT NULL THEN
            PERFORM rcll._supersede(b, cand, resupersede[i], NULL,
                jsonb_build_object('by', 'forget', 'description', (SELECT u.text FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = resupersede[i]),
                                   'threshold', thresholds[i]));
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll._forget_resupersede(integer, bigint[], double precision[])
    IS 'Internal: step 7 of rcll._forget_units - a surviving fact that superseded a forgotten unit by its own text looks again, as rcll.retain_facts does, for what it would have superseded among the units before it.';

CREATE OR REPLACE FUNCTION rcll._forget_rooms(b integer, rooms_in text[], dead_rooms text[], gone_new_rooms text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- A room whose first units went: the janitor tags a room's first write room-new:<room>, and
    -- had the forgotten units never been written, that was the first surviving write - all the
    -- chunks of its statement, or the one fact (facts are inserted one by one).
    UPDATE rcll.memory_units u SET tags = u.tags || ('room-new:' || u.room)
    FROM (SELECT DISTINCT ON (s.room) s.room, s.unit_id, s.document_id, s.kind
          FROM rcll.memory_units s
          WHERE s.bank_id = b AND s.room = ANY (rooms_in) AND NOT s.room = ANY (dead_rooms)
          ORDER BY s.room, s.unit_id) f
    WHERE u.bank_id = b AND u.room = f.room
      AND (u.unit_id = f.unit_id OR (f.kind = 'chunk' AND u.kind = 'chunk' AND u.document_id = f.document_id))
      AND NOT EXISTS (SELECT 1 FROM rcll.memory_units x WHERE x.bank_id = b AND x.room = f.room
                      AND x.tags @> ARRAY['room-new:' || f.room])
      AND EXISTS (SELECT 1 FROM unnest(gone_new_rooms) g WHERE g = f.room);

    IF coalesce(array_length(dead_rooms, 1), 0) > 0 THEN
        -- The fold reads and deletes the count queue: it and this must not interleave.
        PERFORM pg_advisory_xact_lock(hashtext('rcll.fold_room_counts'));
        DELETE FROM rcll.room_count_queue q WHERE q.bank_id = b AND q.room = ANY (dead_rooms);
        DELETE FROM rcll.room_aliases a WHERE a.bank_id = b AND a.room = ANY (dead_rooms);
        DELETE FROM rcll.rooms r WHERE r.bank_id = b AND r.name = ANY (dead_rooms);
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._forget_rooms(integer, text[], text[], text[])
    IS 'Internal: step 8 of rcll._forget_units - a room whose first write went has its first surviving write tagged room-new; rooms left empty leave the registry with their aliases and queued counts.';

CREATE OR REPLACE FUNCTION rcll._forget_units(bank_id integer, unit_ids bigint[], document_ids bigint[], dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b    integer := _forget_units.bank_id;
    plan record;
    redo record;
BEGIN
    IF NOT dry_run THEN
        PERFORM rcll._bank_write_guard(b, true);
    END IF;
    SELECT * INTO plan FROM rcll._forget_plan(b, _forget_units.unit_ids, _forget_units.document_ids);
    IF dry_run THEN
        RETURN plan.counts;
    END IF;
    -- Read before the rows go: the links that say what survivors must redo go with them.
    SELECT * INTO redo FROM rcll._forget_redo_plan(b, plan.gone);
    PERFORM rcll._forget_bank_stats(b, plan.gone, plan.full_docs);
    PERFORM rcll._forget_rows(b, plan.gone, plan.full_docs, plan.part_docs, plan.reopen, plan.requeue);
    PERFORM rcll._forget_relink(b, redo.relink);
    plan.counts := plan.counts || jsonb_build_object('entities', rcll._forget_entities(b, plan.touched));
    PERFORM rcll._forget_resupersede(b, redo.resupersede, redo.thresholds);
    PERFORM rcll._forget_rooms(b, plan.rooms_in, plan.dead_rooms, redo.gone_new_rooms);
    RETURN plan.counts;
END
$$;
COMMENT ON FUNCTION rcll._forget_units(integer, bigint[], bigint[], boolean)
    IS 'Internal: forget these units and documents of a bank with everything derived from them (documents left without units, embeddings, lexicon rows, entity mentions, links, observations of a forgotten source - their surviving sources queued again -, entities left without units, rooms left empty, the refreshed BM25 statistics); a unit superseded by a forgotten one is current again; a document that keeps units is redacted to their texts. dry_run: count, change nothing. Returns the counts per kind. Not executable by PUBLIC: reached through rcll.forget and the expiry sweep.';
REVOKE EXECUTE ON FUNCTION rcll._forget_units(integer, bigint[], bigint[], boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_plan(integer, bigint[], bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_redo_plan(integer, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_bank_stats(integer, bigint[], bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_rows(integer, bigint[], bigint[], bigint[], bigint[], bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_relink(integer, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_entities(integer, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_resupersede(integer, bigint[], double precision[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rcll._forget_rooms(integer, text[], text[], text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll._forget_log(bank_id integer, bank_name text, action text, selector jsonb,
                                            counts jsonb, reason text)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO rcll.forget_log (bank_id, bank_name, actor, action, selector, counts, reason)
    VALUES (_forget_log.bank_id, _forget_log.bank_name, rcll._actor(), _forget_log.action,
            jsonb_strip_nulls(_forget_log.selector), _forget_log.counts, nullif(btrim(_forget_log.reason), ''))
    RETURNING forget_id
$$;
COMMENT ON FUNCTION rcll._forget_log(integer, text, text, jsonb, jsonb, text)
    IS 'Internal: record a forget in rcll.forget_log (who: rcll._actor(); the selector without its NULL fields; the counts; the reason). Returns the forget_id.';
REVOKE EXECUTE ON FUNCTION rcll._forget_log(integer, text, text, jsonb, jsonb, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll._forget_refuse(field text, message text, hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RAISE EXCEPTION '%: %', field, message USING ERRCODE = 'RC007', COLUMN = field, HINT = hint;
END
$$;
COMMENT ON FUNCTION rcll._forget_refuse(text, text, text) IS 'Internal: refuse a destructive call as too broad or as matching nothing (SQLSTATE RC007, COLUMN = field).';

CREATE OR REPLACE FUNCTION rcll._forget_refuse_other_ids(field text, ids bigint[], known bigint[], kind text, bank text,
                                                         hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    missing bigint := (SELECT count(*) FROM (SELECT unnest(ids) EXCEPT SELECT unnest(known)) m);
BEGIN
    -- Ids that are not this bank's are a typo or someone else's: refused, not skipped.
    IF missing > 0 THEN
        RAISE EXCEPTION '%: % of % ids are not % of bank "%"', field, missing, cardinality(ids), kind, bank
            USING ERRCODE = 'RC003', COLUMN = field, HINT = hint;
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._forget_refuse_other_ids(text, bigint[], bigint[], text, text, text)
    IS 'Internal: refuse a selector of ids (field) of which some are not among known, the ones the bank holds (SQLSTATE RC003, COLUMN = field; kind names what they should be).';

CREATE OR REPLACE FUNCTION rcll.forget(
    bank          text,
    unit_ids      bigint[] DEFAULT NULL,
    document_ids  bigint[] DEFAULT NULL,
    thread        text DEFAULT NULL,
    author        text DEFAULT NULL,
    tag           text DEFAULT NULL,
    room          text DEFAULT NULL,
    occurred_from timestamptz DEFAULT NULL,
    occurred_to   timestamptz DEFAULT NULL,
    retained_from timestamptz DEFAULT NULL,
    retained_to   timestamptz DEFAULT NULL,
    everything    text DEFAULT NULL,
    dry_run       boolean DEFAULT true,
    reason        text DEFAULT NULL,
    batch         integer DEFAULT NULL)
RETURNS TABLE (kind text, count bigint)
LANGUAGE plpgsql VOLATILE
-- Definer: forgetting deletes derived rows (entities, room registry, statistics, audit text) a
-- writer may not touch directly. rcll._actable_bank applies the caller's bank isolation; EXECUTE
-- is not PUBLIC's (below).
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b        integer := rcll._actable_bank(forget.bank);
    sel_units bigint[];
    sel_docs bigint[] := '{}';
    rooms_x  text[];
    given    text[] := '{}';
    n_bank   bigint;
    empty    text;
    counts   jsonb;
    selector jsonb;
    remaining bigint := 0;
BEGIN
    IF batch IS NOT NULL AND batch < 1 THEN
        RAISE EXCEPTION 'batch: must be at least 1' USING ERRCODE = 'RC001', COLUMN = 'batch',
            HINT = 'Pass the number of units to forget per call (e.g. 1000), or leave batch out to forget all at once.';
    END IF;
    -- Which selectors were given (NULL = not given); an empty one is a mistake, not "nothing".
    IF unit_ids IS NOT NULL THEN given := given || 'unit_ids'::text; END IF;
    IF document_ids IS NOT NULL THEN given := given || 'document_ids'::text; END IF;
    IF thread IS NOT NULL THEN given := given || 'thread'::text; END IF;
    IF author IS NOT NULL THEN given := given || 'author'::text; END IF;
    IF tag IS NOT NULL THEN given := given || 'tag'::text; END IF;
    IF room IS NOT NULL THEN given := given || 'room'::text; END IF;
    IF occurred_from IS NOT NULL OR occurred_to IS NOT NULL THEN given := given || 'occurred'::text; END IF;
    IF retained_from IS NOT NULL OR retained_to IS NOT NULL THEN given := given || 'retained'::text; END IF;
    IF everything IS NOT NULL THEN
        IF everything IS DISTINCT FROM forget.bank THEN
            RAISE EXCEPTION 'everything: must be the bank''s own name to forget every memory in it' USING ERRCODE = 'RC001',
                COLUMN = 'everything', HINT = format('Pass everything => %L (the bank''s name), or a narrower selector.', forget.bank);
        END IF;
        IF cardinality(given) > 0 THEN
            RAISE EXCEPTION 'everything: cannot be combined with %', array_to_string(given, ', ') USING ERRCODE = 'RC001',
                COLUMN = 'everything', HINT = 'Pass either everything => <bank> or selectors, not both.';
        END IF;
    ELSIF cardinality(given) = 0 THEN
        PERFORM rcll._forget_refuse('selector', 'no selector given: forget would match every memory of the bank',
            'Name what to forget (unit_ids, document_ids, thread, author, tag, room, occurred_from/to, retained_from/to), or pass everything => <bank>.');
    END IF;
    IF cardinality(unit_ids) = 0 THEN
        PERFORM rcll._forget_refuse('unit_ids', 'an empty list matches nothing', 'Pass the ids of the units to forget, or leave unit_ids out.');
    END IF;
    IF cardinality(document_ids) = 0 THEN
        PERFORM rcll._forget_refuse('document_ids', 'an empty list matches nothing', 'Pass the ids of the documents to forget, or leave document_ids out.');
    END IF;
    empty := (SELECT s.field FROM unnest(ARRAY['thread', 'author', 'tag', 'room'], ARRAY[thread, author, tag, room])
                                  WITH ORDINALITY AS s(field, value, n)
              WHERE btrim(s.value) = '' ORDER BY s.n LIMIT 1);
    IF empty IS NOT NULL THEN
        PERFORM rcll._forget_refuse(empty, 'an empty value matches nothing', 'Pass the exact value, or leave the selector out.');
    END IF;
    IF occurred_from >= occurred_to OR retained_from >= retained_to THEN
        RAISE EXCEPTION '%: the range is empty (from is not before to)',
            CASE WHEN occurred_from >= occurred_to THEN 'occurred_to' ELSE 'retained_to' END USING ERRCODE = 'RC001',
            COLUMN = CASE WHEN occurred_from >= occurred_to THEN 'occurred_to' ELSE 'retained_to' END,
            HINT = 'A range is [from, to): from must be before to; leave either out for an open end.';
    END IF;
    PERFORM rcll._forget_refuse_other_ids('unit_ids', unit_ids,
        ARRAY(SELECT u.unit_id FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (unit_ids)),
        'units', forget.bank, 'Pass ids recall or rcll.units() returned for this bank.');
    PERFORM rcll._forget_refuse_other_ids('document_ids', document_ids,
        ARRAY(SELECT d.document_id FROM rcll.documents d WHERE d.bank_id = b AND d.document_id = ANY (document_ids)),
        'documents', forget.bank, 'Pass document ids retain returned for this bank.');

    IF room IS NOT NULL THEN
        rooms_x := rcll._expand_rooms(b, ARRAY[room]);
    END IF;
    sel_units := ARRAY(
        SELECT u.unit_id FROM rcll.memory_units u
        WHERE u.bank_id = b
          AND (unit_ids IS NULL OR u.unit_id = ANY (unit_ids))
          AND (document_ids IS NULL OR u.document_id = ANY (document_ids))
          AND (thread IS NULL OR u.thread = thread)
          AND (author IS NULL OR u.author = author)
          AND (tag IS NULL OR u.tags @> ARRAY[tag])
          AND (rooms_x IS NULL OR u.room = ANY (rooms_x))
          AND (occurred_from IS NULL OR coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) >= occurred_from)
          AND (occurred_to IS NULL OR coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) < occurred_to)
          AND (retained_from IS NULL OR u.created_at >= retained_from)
          AND (retained_to IS NULL OR u.created_at < retained_to));
    IF everything IS NOT NULL THEN
        sel_docs := ARRAY(SELECT d.document_id FROM rcll.documents d WHERE d.bank_id = b);
    ELSIF document_ids IS NOT NULL AND given = ARRAY['document_ids'] THEN
        sel_docs := document_ids;   -- a document with no unit left is still forgotten by its id
    END IF;
    IF cardinality(sel_units) = 0 AND cardinality(sel_docs) = 0 AND everything IS NULL THEN
        PERFORM rcll._forget_refuse(CASE WHEN cardinality(given) = 1 THEN given[1] ELSE 'selector' END,
            format('matches nothing in bank "%s"', forget.bank),
            'Check the value (selectors are exact; several selectors must all match), e.g. with rcll.units().');
    END IF;
    IF everything IS NULL THEN
        SELECT count(*) INTO n_bank FROM rcll.memory_units u WHERE u.bank_id = b;
        IF cardinality(sel_units) >= n_bank THEN
            PERFORM rcll._forget_refuse(CASE WHEN cardinality(given) = 1 THEN given[1] ELSE 'selector' END,
                format('matches every memory of bank "%s"', forget.bank),
                format('To forget everything in it, say so: everything => %L (or drop the bank: rcll.drop_bank).', forget.bank));
        END IF;
    END IF;

    -- A batch: the first `batch` selected units, with the rest of the last document they reach (a
    -- document goes whole or not at all in one call); the caller calls again while some remain.
    -- Each call is its own short transaction, so writes into the bank wait at most one batch.
    IF batch IS NOT NULL AND NOT coalesce(dry_run, true) AND cardinality(sel_units) > batch THEN
        remaining := cardinality(sel_units);
        WITH s AS (SELECT u.unit_id, u.document_id, row_number() OVER (ORDER BY u.document_id NULLS LAST, u.unit_id) AS rn
                   FROM rcll.memory_units u WHERE u.bank_id = b AND u.unit_id = ANY (sel_units))
        SELECT ARRAY(SELECT s.unit_id FROM s WHERE s.rn <= batch
                        OR s.document_id = (SELECT c.document_id FROM s c WHERE c.rn = batch))
        INTO sel_units;
        remaining := remaining - cardinality(sel_units);
        sel_docs := ARRAY(SELECT d FROM unnest(sel_docs) d
                          WHERE NOT EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.bank_id = b AND u.document_id = d)
                             OR EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.bank_id = b AND u.document_id = d AND u.unit_id = ANY (sel_units)));
    END IF;
    counts := rcll._forget_units(b, sel_units, sel_docs, coalesce(dry_run, true));
    IF NOT coalesce(dry_run, true) THEN
        selector := jsonb_build_object('unit_ids', to_jsonb(unit_ids), 'document_ids', to_jsonb(document_ids),
            'thread', thread, 'author', author, 'tag', tag, 'room', room,
            'occurred_from', occurred_from, 'occurred_to', occurred_to,
            'retained_from', retained_from, 'retained_to', retained_to, 'everything', everything IS NOT NULL);
        PERFORM rcll._forget_log(b, forget.bank, 'forget', selector, counts, reason);
    END IF;
    IF batch IS NOT NULL THEN
        counts := counts || jsonb_build_object('remaining', remaining);
    END IF;
    RETURN QUERY SELECT k.key, (k.value)::text::bigint FROM jsonb_each(counts) k ORDER BY k.key;
END
$$;
COMMENT ON FUNCTION rcll.forget(text, bigint[], bigint[], text, text, text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, boolean, text, integer)
    IS 'Forget memories of a bank by selector - unit_ids, document_ids, thread, author, tag, room (with its aliases), occurred_from/occurred_to and retained_from/retained_to ([from, to) ranges); several selectors must all match - or everything => <the bank''s name>. A selector that matches nothing, an empty one, or one that matches every memory without everything is refused (RC007, COLUMN names it); ids of another bank are refused (RC003). dry_run (the default) counts what would go and changes nothing. Otherwise removes the units and everything derived (see rcll._forget_units) in one transaction and records who, when, the selector and the counts in rcll.forget_log - never the content. Returns the count per kind. batch => n forgets at most n selected units per call (whole documents; more when the last document reaches past n) and adds the kind remaining: call again until it is 0, each call its own short transaction. Under bank isolation only the caller''s own banks (EXECUTE is rcll_agent''s).';
REVOKE EXECUTE ON FUNCTION rcll.forget(text, bigint[], bigint[], text, text, text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, boolean, text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.forget_state(bank text, room text, key text DEFAULT NULL, all_keys boolean DEFAULT false,
                                             dry_run boolean DEFAULT true, reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b integer := rcll._actable_bank(forget_state.bank);
    n bigint;
BEGIN
    IF room IS NULL OR btrim(room) = '' THEN
        PERFORM rcll._forget_refuse('room', 'a room is required', 'State is keyed by (room, key): name the room exactly.');
    END IF;
    IF key IS NULL AND NOT coalesce(all_keys, false) THEN
        PERFORM rcll._forget_refuse('key', 'no key given: every key of the room would go',
            'Name the key, or pass all_keys => true to forget every key of the room.');
    END IF;
    SELECT count(*) INTO n FROM rcll.room_state s
    WHERE s.bank_id = b AND s.room = forget_state.room AND (key IS NULL OR s.key = key);
    IF n = 0 THEN
        PERFORM rcll._forget_refuse(CASE WHEN key IS NULL THEN 'room' ELSE 'key' END, 'matches no state',
            'Keys and rooms are exact strings: list them with rcll.state_keys(bank).');
    END IF;
    IF NOT coalesce(dry_run, true) THEN
        DELETE FROM rcll.room_state s WHERE s.bank_id = b AND s.room = forget_state.room AND (key IS NULL OR s.key = key);
        PERFORM rcll._forget_log(b, forget_state.bank, 'forget_state',
                                 jsonb_build_object('room', room, 'key', key, 'all_keys', key IS NULL),
                                 jsonb_build_object('state_versions', n), reason);
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.forget_state(text, text, text, boolean, boolean, text)
    IS 'Forget a room''s keyed state with its whole history: one key, or every key of the room with all_keys => true (no key and no all_keys: refused, RC007). dry_run (the default) counts the versions that would go. Recorded in rcll.forget_log without the values. Returns the number of versions.';
REVOKE EXECUTE ON FUNCTION rcll.forget_state(text, text, text, boolean, boolean, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.drop_bank(bank text, confirm text, dry_run boolean DEFAULT true, reason text DEFAULT NULL)
RETURNS TABLE (kind text, count bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b integer := rcll._actable_bank(drop_bank.bank);
    counts jsonb;
BEGIN
    IF confirm IS DISTINCT FROM drop_bank.bank THEN
        PERFORM rcll._forget_refuse('confirm', 'must repeat the bank''s name to drop it',
            format('Pass confirm => %L.', drop_bank.bank));
    END IF;
    SELECT jsonb_build_object(
        'documents', (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = b),
        'units', (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b),
        'entities', (SELECT count(*) FROM rcll.entities e WHERE e.bank_id = b),
        'links', (SELECT count(*) FROM rcll.links l WHERE l.bank_id = b),
        'rooms', (SELECT count(*) FROM rcll.rooms r WHERE r.bank_id = b),
        'state_versions', (SELECT count(*) FROM rcll.room_state s WHERE s.bank_id = b),
        'audit_rows', (SELECT count(*) FROM rcll.audit_log a WHERE a.bank_id = b),
        'llm_calls', (SELECT count(*) FROM rcll.llm_calls c WHERE c.bank_id = b),
        'banks', 1) INTO counts;
    IF NOT coalesce(dry_run, true) THEN
        -- Every bank table cascades from rcll.banks; the count queue is append-only and has no key
        -- (and the cascade's deletes append to it, so it is emptied after).
        PERFORM pg_advisory_xact_lock(hashtext('rcll.fold_room_counts'));
        DELETE FROM rcll.banks x WHERE x.bank_id = b;
        DELETE FROM rcll.room_count_queue q WHERE q.bank_id = b;
        PERFORM rcll._forget_log(b, drop_bank.bank, 'drop_bank', jsonb_build_object('bank', drop_bank.bank), counts, reason);
    END IF;
    RETURN QUERY SELECT k.key, (k.value)::text::bigint FROM jsonb_each(counts) k ORDER BY k.key;
END
$$;
COMMENT ON FUNCTION rcll.drop_bank(text, text, boolean, text)
    IS 'Drop a whole bank and every row of it (documents, units, entities, links, rooms, state, audit rows, ledger, grants), confirmed by repeating its name (confirm => bank; otherwise RC007). dry_run (the default) counts what would go. The drop itself is recorded in rcll.forget_log, which outlives the bank.';
REVOKE EXECUTE ON FUNCTION rcll.drop_bank(text, text, boolean, text) FROM PUBLIC;
