-- Browsing a bank as a person does (the console): its floor plan, its units by filter, merges to decide, state keys.

CREATE OR REPLACE FUNCTION rcll.floor_plan(bank text)
RETURNS TABLE (name text, status text, merged_into text, proposed_into text, fact_count bigint, aliases text[],
               created_by text, first_used timestamptz, last_used timestamptz,
               halls jsonb, layers jsonb, authors jsonb)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    -- An unknown bank is an error, rows or not. The id is a value, not a CTE, so that on a Citus
    -- cluster the grouping below is pinned to the bank's shard and runs whole on its worker.
    bk integer := rcll._bank_id(floor_plan.bank);
    room_of text[];
    n_of bigint[];
    halls_of jsonb[];
    layers_of jsonb[];
    authors_of jsonb[];
BEGIN
    -- One pass over the bank's units (grouping sets) gives every room's halls, layers and writers,
    -- kept as arrays: a statement on the units apart from rcll.rooms() (which makes its own), as
    -- Citus runs no distributed statement inside one it sends to a shard.
    WITH g AS (
        -- GROUPING(hall, layer, author) is a bit mask of the columns grouped away: 7 the room
        -- alone, 3 by hall, 5 by layer, 6 by author.
        SELECT u.room, u.hall, u.layer, u.author, count(*) AS n, GROUPING(u.hall, u.layer, u.author) AS gs
        FROM rcll.memory_units u
        WHERE u.bank_id = bk
        GROUP BY GROUPING SETS ((u.room), (u.room, u.hall), (u.room, u.layer), (u.room, u.author))
    ),
    profile AS (
        SELECT g.room,
               sum(g.n) FILTER (WHERE g.gs = 7)::bigint AS n,
               coalesce(jsonb_object_agg(coalesce(g.hall, '(untyped)'), g.n) FILTER (WHERE g.gs = 3), '{}') AS halls,
               coalesce(jsonb_object_agg(g.layer, g.n) FILTER (WHERE g.gs = 5), '{}') AS layers,
               coalesce(jsonb_object_agg(coalesce(g.author, '(none)'), g.n) FILTER (WHERE g.gs = 6), '{}') AS authors
        FROM g GROUP BY g.room
    )
    SELECT array_agg(p.room), array_agg(p.n), array_agg(p.halls), array_agg(p.layers), array_agg(p.authors)
    INTO room_of, n_of, halls_of, layers_of, authors_of
    FROM profile p;
    -- The registry columns come from rcll.rooms(), so the two listings cannot disagree.
    RETURN QUERY
    WITH profile AS (
        SELECT * FROM unnest(room_of, n_of, halls_of, layers_of, authors_of) AS p(room, n, halls, layers, authors)
    )
    SELECT r.name, r.status, r.merged_into, r.proposed_into, r.fact_count, r.aliases, r.created_by,
           r.first_used, r.last_used,
           coalesce(p.halls, '{}'), coalesce(p.layers, '{}'), coalesce(p.authors, '{}')
    FROM rcll.rooms(floor_plan.bank) r
    LEFT JOIN profile p ON p.room = r.name
    UNION ALL   -- units filed in no room are part of the plan too (a room filter never matches them)
    SELECT NULL, 'none', NULL, NULL, p.n, '{}', NULL, NULL, NULL, p.halls, p.layers, p.authors
    FROM profile p WHERE p.room IS NULL
    ORDER BY 5 DESC, 1 NULLS LAST;
END
$$;
COMMENT ON FUNCTION rcll.floor_plan(text) IS 'The floor plan of a bank for people: every room as rcll.rooms() lists it (exact unit count, status, merge target or pending proposal, aliases, who created it, first/last use) with its units counted by hall, by layer and by author (JSON objects; (untyped) and (none) for missing values), plus one row with a NULL name for units in no room.';

CREATE OR REPLACE FUNCTION rcll.units(
    bank      text,
    rooms     text[] DEFAULT NULL,
    halls     text[] DEFAULT NULL,
    layers    text[] DEFAULT NULL,
    authors   text[] DEFAULT NULL,
    tags_any  text[] DEFAULT NULL,
    tags_all  text[] DEFAULT NULL,
    threads   text[] DEFAULT NULL,
    time_from timestamptz DEFAULT NULL,
    time_to   timestamptz DEFAULT NULL,
    "limit"   integer DEFAULT 50,
    "offset"  integer DEFAULT 0)
RETURNS TABLE (unit_id bigint, kind text, text text, room text, hall text, layer text, author text,
               author_source text, thread text, tags text[], at timestamptz, occurred_start timestamptz,
               mentioned_at timestamptz, created_at timestamptz, superseded_by bigint, document_id bigint,
               total bigint)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    -- An unknown bank is an error, not an empty page. The bank's id and its rooms are values, not
    -- lookups inside the listing: on a Citus cluster the listing then goes to the one shard holding
    -- the bank (by a lookup it reached every shard, so every worker had to answer).
    b   integer := rcll._bank_id(units.bank);
    rms text[] := rcll._expand_rooms(b, units.rooms);        -- NULL: every room
BEGIN
    -- A listing, not a recall: no ranking, newest first by when the unit happened (else was said,
    -- else was written). rooms expand like a recall's (an alias or merged name reads its room);
    -- superseded units are listed too, marked by superseded_by. total counts every match.
    RETURN QUERY
    SELECT u.unit_id, u.kind, u.text, u.room, u.hall, u.layer, u.author, u.author_source, u.thread, u.tags,
           coalesce(u.occurred_start, u.mentioned_at, u.created_at), u.occurred_start, u.mentioned_at,
           u.created_at, u.superseded_by, u.document_id, count(*) OVER ()
    FROM rcll.memory_units u
    WHERE u.bank_id = b
      AND (rms IS NULL OR u.room = ANY (rms))
      AND (units.halls IS NULL OR u.hall = ANY (units.halls))
      AND (units.layers IS NULL OR u.layer = ANY (units.layers))
      AND (units.authors IS NULL OR u.author = ANY (units.authors))
      AND (units.tags_any IS NULL OR u.tags && units.tags_any)
      AND (units.tags_all IS NULL OR u.tags @> units.tags_all)
      AND (units.threads IS NULL OR u.thread = ANY (units.threads))
      AND (units.time_from IS NULL OR coalesce(u.occurred_start, u.mentioned_at, u.created_at) >= units.time_from)
      AND (units.time_to IS NULL OR coalesce(u.occurred_start, u.mentioned_at, u.created_at) < units.time_to)
    ORDER BY coalesce(u.occurred_start, u.mentioned_at, u.created_at) DESC, u.unit_id DESC
    LIMIT least(greatest(coalesce(units."limit", 50), 0), 500) OFFSET greatest(coalesce(units."offset", 0), 0);
END
$$;
COMMENT ON FUNCTION rcll.units(text, text[], text[], text[], text[], text[], text[], text[], timestamptz, timestamptz, integer, integer) IS 'Browse a bank''s units by filter (rooms with their aliases and merged names, halls, layers, authors, tags any / all, threads, and [time_from, time_to) on when each happened, else was said, else was written), newest first, "limit" at most 500 per page from "offset". Not a recall: nothing is ranked. total is the number of matches.';

CREATE OR REPLACE FUNCTION rcll.merge_proposals(bank text, include_decided boolean DEFAULT false)
RETURNS TABLE (proposal_id bigint, from_room text, into_room text, reason text, status text,
               proposed_by text, proposed_at timestamptz, decided_by text, decided_at timestamptz,
               from_units bigint, into_units bigint)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    -- An unknown bank is an error, rows or not. The id is a value, and each proposal's counts are
    -- statements of their own on one table: on a Citus cluster every statement then goes to the
    -- one shard holding the bank (counts correlated with the proposal row reached every shard).
    b integer := rcll._bank_id(merge_proposals.bank);
    p record;
BEGIN
    -- What a person decides on: the pending proposals first (oldest first), each with the number
    -- of units that would move and that the target already holds.
    FOR p IN SELECT x.proposal_id, x.from_room, x.into_room, x.reason, x.status, x.proposed_by, x.proposed_at,
                    x.decided_by, x.decided_at
             FROM rcll.room_merge_proposals x
             WHERE x.bank_id = b AND (x.status = 'pending' OR coalesce(merge_proposals.include_decided, false))
             ORDER BY x.status <> 'pending', CASE WHEN x.status = 'pending' THEN x.proposed_at END, x.decided_at DESC,
                      x.proposal_id
    LOOP
        proposal_id := p.proposal_id; from_room := p.from_room; into_room := p.into_room; reason := p.reason;
        status := p.status; proposed_by := p.proposed_by; proposed_at := p.proposed_at; decided_at := p.decided_at;
        SELECT a.actor INTO decided_by FROM rcll.audit_log a      -- the person, when the server named one
        WHERE a.bank_id = b AND a.action = 'room_merge_decision' AND a.detail ->> 'proposal_id' = p.proposal_id::text
        ORDER BY a.audit_id DESC LIMIT 1;
        decided_by := coalesce(decided_by, p.decided_by);
        -- Top-level statements on one table (not subqueries of an assignment): Citus prunes them by
        -- the bank's id even in a cached plan.
        SELECT count(*) INTO from_units FROM rcll.memory_units u WHERE u.bank_id = b AND u.room = p.from_room;
        SELECT count(*) INTO into_units FROM rcll.memory_units u WHERE u.bank_id = b AND u.room = p.into_room;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll.merge_proposals(text, boolean) IS 'Room merge proposals of a bank awaiting a person (rcll.approve_room_merge / rcll.reject_room_merge), oldest first, with the units that would move (from_units) and those already in the target (into_units); include_decided adds approved and rejected ones, newest decision first, decided_by naming the person when the server recorded one (rcll.decide_room_merge).';

CREATE OR REPLACE FUNCTION rcll.state_keys(bank text, rooms text[] DEFAULT NULL)
RETURNS TABLE (room text, key text, version integer, value jsonb, provenance jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
#variable_conflict use_column
DECLARE
    b integer := rcll._bank_id(state_keys.bank);     -- a value: the read goes to the bank's shard alone
BEGIN
    -- Exact room strings, like rcll.get_state: state is keyed, never resolved by spelling.
    RETURN QUERY
    SELECT DISTINCT ON (s.room, s.key) s.room, s.key, s.version, s.value, s.provenance, s.created_at
    FROM rcll.room_state s
    WHERE s.bank_id = b
      AND (state_keys.rooms IS NULL OR s.room = ANY (state_keys.rooms))
    ORDER BY s.room, s.key, s.version DESC;
END
$$;
COMMENT ON FUNCTION rcll.state_keys(text, text[]) IS 'Every keyed state of a bank (or of the rooms named, exactly as stored) at its current version, with its provenance; rcll.state_history(bank, room, key) lists the versions of one.';

CREATE OR REPLACE FUNCTION rcll.decide_room_merge(bank text, from_room text, approve boolean, reason text DEFAULT NULL,
                                                  person text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b   integer := rcll._bank_id(bank);
    who text := nullif(btrim(person), '');
    n   bigint := 0;
BEGIN
    -- The person is the server's word, like rcll.agent: only a member of rcll_identity_server (the
    -- RCLL server, which authenticated them) may name one. Agents stay refused by approve itself.
    IF who IS NOT NULL AND NOT rcll._identity_server() THEN
        RAISE EXCEPTION 'person: only the RCLL server names the person deciding' USING ERRCODE = 'RC006', COLUMN = 'person',
            HINT = 'Decide as yourself: leave person NULL (the audit then names your role).';
    END IF;
    IF approve IS NULL THEN
        RAISE EXCEPTION 'approve: say true (approve) or false (reject)' USING ERRCODE = 'RC001', COLUMN = 'approve',
            HINT = 'Pass approve => true to merge the room, or false to reject the proposal.';
    ELSIF approve THEN
        n := rcll.approve_room_merge(bank, from_room);
    ELSE
        PERFORM rcll.reject_room_merge(bank, from_room, reason);
    END IF;
    IF who IS NOT NULL THEN
        -- approve/reject audited the decision as the server's role; this row names who made it.
        PERFORM rcll._audit(b, 'room_merge_decision', jsonb_build_object('from_room', d.from_room, 'into_room', d.into_room),
                            jsonb_build_object('proposal_id', d.proposal_id, 'decision', d.status,
                                               'reason', decide_room_merge.reason, 'units_moved', n),
                            actor => 'person:' || who)
        FROM (SELECT mp.* FROM rcll.room_merge_proposals mp
              WHERE mp.bank_id = b AND mp.from_room = btrim(decide_room_merge.from_room) AND mp.status <> 'pending'
              ORDER BY mp.decided_at DESC, mp.proposal_id DESC
              LIMIT 1) d;
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.decide_room_merge(text, text, boolean, text, text) IS 'A person decides a pending room merge: approve (rcll.approve_room_merge; refused for agents) or reject (rcll.reject_room_merge with reason). person names who decided, for the audit log (a room_merge_decision row with actor person:<name>); only the RCLL server (a member of rcll_identity_server) may pass it. Returns the number of units moved (0 for a rejection).';
