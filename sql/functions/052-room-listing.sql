-- Room listing: rcll.rooms(), the floor plan of a bank with counts, status, merges and aliases.

CREATE OR REPLACE FUNCTION rcll._wildcard(pattern text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- * any run, ? one character; everything else literal (LIKE's own % _ \ are escaped).
    SELECT replace(replace(replace(replace(replace(pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%'), '?', '_')
$$;
COMMENT ON FUNCTION rcll._wildcard(text) IS 'Internal: a * and ? wildcard pattern as a LIKE pattern, every other character literal.';

CREATE OR REPLACE FUNCTION rcll.rooms(bank text, pattern text DEFAULT '*')
RETURNS TABLE (name text, status text, merged_into text, proposed_into text, fact_count bigint,
               aliases text[], created_by text, first_used timestamptz, last_used timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    -- The bank's id as a value, not a CTE: on a Citus cluster every table below is then pinned to
    -- the bank's shard by bk and the whole statement runs on the bank's worker (a bank from a CTE
    -- under correlated subqueries is refused there); on one node the plan is the same.
    bk   integer := rcll._bank_id(rooms.bank);
    like_pattern text := rcll._wildcard(coalesce(rooms.pattern, '*'));
BEGIN
    RETURN QUERY
    WITH pending AS (
        SELECT q.room, sum(q.delta)::bigint AS delta,
               min(q.at) FILTER (WHERE q.delta > 0) AS first_at, max(q.at) FILTER (WHERE q.delta > 0) AS last_at
        FROM rcll.room_count_queue q WHERE q.bank_id = bk GROUP BY q.room
    ),
    listed AS (
        SELECT r.name, r.status, r.merged_into, r.fact_count + coalesce(p.delta, 0) AS fact_count, r.created_by,
               least(r.first_used, p.first_at) AS first_used, greatest(r.last_used, p.last_at) AS last_used
        FROM rcll.rooms r LEFT JOIN pending p ON p.room = r.name
        WHERE r.bank_id = bk
        UNION ALL   -- deltas for a room whose registry row is gone (not expected; kept so counts stay exact)
        SELECT p.room, 'live', NULL, p.delta, 'human', p.first_at, p.last_at
        FROM pending p WHERE NOT EXISTS (SELECT 1 FROM rcll.rooms r WHERE r.bank_id = bk AND r.name = p.room)
        UNION ALL   -- the classifier's vocabulary, so the floor plan is not empty on day one
        SELECT DISTINCT rr.room, 'live', NULL, 0::bigint, 'system', NULL::timestamptz, NULL::timestamptz
        FROM rcll.room_rules rr
        WHERE rr.enabled
          AND NOT EXISTS (SELECT 1 FROM rcll.rooms r WHERE r.bank_id = bk AND r.name = rr.room)
          AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.room = rr.room)
    )
    SELECT l.name, l.status, l.merged_into,
           (SELECT mp.into_room FROM rcll.room_merge_proposals mp
            WHERE mp.bank_id = bk AND mp.from_room = l.name AND mp.status = 'pending'),
           l.fact_count,
           coalesce((SELECT array_agg(a.alias ORDER BY a.alias) FROM rcll.room_aliases a
                     WHERE a.bank_id = bk AND a.room = l.name), '{}'),
           l.created_by, l.first_used, l.last_used
    FROM listed l
    WHERE l.name ILIKE like_pattern
       OR EXISTS (SELECT 1 FROM rcll.room_aliases a WHERE a.bank_id = bk AND a.room = l.name
                  AND a.alias ILIKE like_pattern)
    ORDER BY l.fact_count DESC, l.name;
END
$$;
COMMENT ON FUNCTION rcll.rooms(text, text) IS 'The room floor plan of a bank: every room (registry plus the classifier''s vocabulary) with its exact unit count (folded base plus pending deltas), status, merge target or pending proposal, aliases, who created it and first/last use. pattern matches the name or an alias, with * and ? wildcards, case-insensitively.';
