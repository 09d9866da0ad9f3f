-- The scope of a recall: what it may read (bank, rooms, authors, filters), resolved once per recall
-- by rcll.recall_scope and passed to every channel as one rcll.recall_scope value.

CREATE OR REPLACE FUNCTION rcll._recall_authors(authors text[], mine boolean)
RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- mine narrows to the server-resolved agent (intersected with authors when both are given).
    -- With no resolved identity, mine matches nobody: ARRAY[NULL] equals no author.
    SELECT CASE
        WHEN NOT coalesce(_recall_authors.mine, false) THEN _recall_authors.authors
        WHEN _recall_authors.authors IS NULL THEN ARRAY[rcll.current_agent()]
        WHEN rcll.current_agent() = ANY (_recall_authors.authors) THEN ARRAY[rcll.current_agent()]
        ELSE '{}'::text[] END
$$;
COMMENT ON FUNCTION rcll._recall_authors(text[], boolean) IS 'Internal: the author list a recall filters on, given authors and mine (mine = the agent rcll.current_agent() resolves).';

CREATE OR REPLACE FUNCTION rcll._notice(message text, hint text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    -- Lets a LANGUAGE sql function tell the caller why it skipped something; writes nothing.
    RAISE NOTICE '%', message USING HINT = coalesce(hint, '');
    RETURN false;
END
$$;
COMMENT ON FUNCTION rcll._notice(text, text) IS 'Internal: raise a NOTICE (with a hint) and return false; lets a SQL-language recall function explain a skipped phase.';

CREATE OR REPLACE FUNCTION rcll._expand_rooms(bank_id integer, rooms text[])
RETURNS text[]
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    names text[];
BEGIN
    -- The names given are always kept (a recall never loses what it asked for); each adds the
    -- canonical room its spelling, alias or merged name resolves to now - so an old name stays
    -- readable forever - and a canonical room adds the names that resolve to it.
    SELECT array_agg(DISTINCT x.name ORDER BY x.name) INTO names FROM (
        SELECT btrim(g.name) AS name FROM unnest(rooms) AS g(name)
        UNION ALL
        SELECT (rcll._canonical_room(_expand_rooms.bank_id, g.name)).room FROM unnest(rooms) AS g(name)
    ) x WHERE x.name IS NOT NULL AND x.name <> '';
    SELECT array_agg(DISTINCT x.name ORDER BY x.name) INTO names FROM (
        SELECT unnest(names) AS name
        UNION ALL
        SELECT a.alias FROM rcll.room_aliases a
        WHERE a.bank_id = _expand_rooms.bank_id AND a.room = ANY (names)
        UNION ALL
        SELECT r.name FROM rcll.rooms r
        WHERE r.bank_id = _expand_rooms.bank_id AND r.status = 'merged' AND r.merged_into = ANY (names)
    ) x;
    RETURN coalesce(names, '{}');
END
$$;
COMMENT ON FUNCTION rcll._expand_rooms(integer, text[]) IS 'Internal: the rooms a recall reads - the names given, the canonical room each resolves to (spelling, alias, approved merge: an old name stays readable forever), and the aliases and merged names of those rooms. NULL means all rooms. Provisional (unapproved) merges expand nothing.';

CREATE OR REPLACE FUNCTION rcll.recall_scope(
    bank                 text,
    rooms                text[] DEFAULT NULL,
    authors              text[] DEFAULT NULL,
    mine                 boolean DEFAULT false,
    include_unattributed boolean DEFAULT false,
    halls                text[] DEFAULT NULL,
    layers               text[] DEFAULT NULL,
    tags_any             text[] DEFAULT NULL,
    tags_all             text[] DEFAULT NULL,
    thread               text DEFAULT NULL,
    as_of                timestamptz DEFAULT now(),
    include_self_declared boolean DEFAULT false)
RETURNS rcll.recall_scope
LANGUAGE plpgsql STABLE PARALLEL SAFE
-- The bank's id resolved first and the rest by a custom plan with it a constant: on a Citus cluster
-- the expiry probe then reads the bank's own shard (a subquery on a computed id would join shards).
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    b_id integer := rcll._bank_id(recall_scope.bank);
    -- The rooms in a statement of their own: on a Citus cluster the RETURN below names the bank's
    -- shard (the expiry probe) and is sent whole to its worker, where _expand_rooms' queries of
    -- rooms and room_aliases would be refused ("cannot execute a distributed query from a query
    -- on a shard"); here they run on the coordinator, each routed to the bank's shard.
    room_names text[] := rcll._expand_rooms(b_id, recall_scope.rooms);
BEGIN
    -- The only place a recall resolves its bank, rooms and authors; every channel reads the result.
    RETURN ROW(b_id, room_names,
               rcll._recall_authors(recall_scope.authors, recall_scope.mine),
               coalesce(recall_scope.include_unattributed, false), recall_scope.halls, recall_scope.layers,
               recall_scope.tags_any, recall_scope.tags_all, recall_scope.thread, recall_scope.as_of,
               coalesce(recall_scope.include_self_declared, false),
               -- Expired units not yet swept, in this snapshot and by this transaction's now() (the
               -- instant rcll._in_scope compares with): usually none, found by an empty range
               -- scan of the expiry index; then the filters skip the expiry test.
               EXISTS (SELECT 1 FROM rcll.memory_units m
                       WHERE m.expires_at <= now() AND m.bank_id = b_id))::rcll.recall_scope;
END
$$;
COMMENT ON FUNCTION rcll.recall_scope(text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz, boolean)
    IS 'The scope of a recall, resolved once: the bank''s id (unknown bank: error), rooms expanded through aliases and merges (rcll._expand_rooms; NULL = all rooms), authors narrowed by mine (rcll._recall_authors; NULL = all) - matched by server-resolved authors only, unless include_self_declared - the other filters as given, and whether the bank held expired units not yet swept (has_expired: when it did not, the filters skip the expiry test). rcll.recall_candidates builds it once and passes it to every channel.';

CREATE OR REPLACE FUNCTION rcll._in_scope(
    bank_id integer, room text, author text, tags text[], hall text, layer text, thread text,
    valid tstzrange, expires_at timestamptz, scope rcll.recall_scope)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): any SET clause would stop the planner from
-- inlining it into the caller's query (it reads no table and calls only built-ins - now() and
-- operators, which pg_catalog resolves first).
AS $$
    -- The filters every channel applies before ranking, for one unit (of rcll.memory_units, or of
    -- rcll.unit_lexicon, BM25's narrow copy, which carries the same scope columns), the bank
    -- included (so a channel's WHERE needs no separate bank_id test). Callers pass the unit's
    -- columns in this order, u.bank_id, u.room, u.author, u.tags, u.hall, u.layer, u.thread,
    -- u.valid, u.expires_at (tests/test_schema.py checks every call): not the row itself, because
    -- the planner parses an inlined function's body on every plan, and each (u).column of a
    -- memory_units row copied the table's row descriptor with its defaults and CHECK constraints
    -- at every call site, a dozen per recall (docs/scaling.md, "Figures behind the SQL comments"). Inlined into a channel's query, whose custom plan holds the scope as a
    -- constant, each (scope).field folds to a constant: the NULL branches vanish and
    -- bank_id = <id> is a plain qual that the (bank_id, ...) indexes serve.
    SELECT bank_id = (scope).bank_id
       AND ((scope).rooms IS NULL OR room = ANY ((scope).rooms))
       AND ((scope).authors IS NULL
            OR (author = ANY ((scope).authors)
                AND ((scope).include_self_declared OR NOT 'author-source:self_declared' = ANY (tags)))
            OR ((scope).include_unattributed AND author IS NULL))
       AND ((scope).halls IS NULL OR hall = ANY ((scope).halls))
       AND ((scope).layers IS NULL OR layer = ANY ((scope).layers))
       AND ((scope).tags_any IS NULL OR tags && (scope).tags_any)
       AND ((scope).tags_all IS NULL OR tags @> (scope).tags_all)
       AND ((scope).thread IS NULL OR thread = (scope).thread)
       AND ((scope).as_of IS NULL OR valid @> (scope).as_of)
       -- Expired units are out of every scope at once; the sweep (rcll.expire) removes them later.
       -- A scope whose bank held no expired unit (has_expired false) skips the test: in a custom
       -- plan the whole line folds away (reading every unit's expires_at is not free: docs/scaling.md).
       AND ((scope).has_expired IS FALSE OR expires_at IS NULL OR expires_at > now())
$$;
COMMENT ON FUNCTION rcll._in_scope(integer, text, text, text[], text, text, text, tstzrange, timestamptz, rcll.recall_scope)
    IS 'Internal: whether a unit, given by its scope columns (bank_id, room, author, tags, hall, layer, thread, valid, expires_at of a row of rcll.memory_units or rcll.unit_lexicon), passes a recall''s scope (bank, expanded rooms, resolved authors - a self-declared author only with include_self_declared -, halls, layers, tags, thread, validity as of; an expired unit never passes). Every channel filters through it; it is inlined into their queries.';
