-- The scope of a recall: which authors it reads, resolved once for every channel.

CREATE OR REPLACE FUNCTION rcll._recall_authors(authors text[], mine boolean)
RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Lets a LANGUAGE sql function tell the caller why it skipped something; writes nothing.
    RAISE NOTICE '%', message USING HINT = coalesce(hint, '');
    RETURN false;
END
$$;
COMMENT ON FUNCTION rcll._notice(text, text) IS 'Internal: raise a NOTICE (with a hint) and return false; lets a SQL-language recall function explain a skipped phase.';

CREATE OR REPLACE FUNCTION rcll._in_scope(
    u                    rcll.memory_units,
    bank_id              integer,
    rooms                text[],
    authors              text[],
    include_unattributed boolean,
    halls                text[],
    layers               text[],
    tags_any             text[],
    tags_all             text[],
    thread               text,
    as_of                timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
-- No SET clause: that would stop the planner from inlining it into the caller's query (it reads no
-- table and calls no function; only built-in operators, which pg_catalog resolves first).
AS $$
    -- The filters every channel applies before ranking, for one unit, the bank included (so a
    -- channel's WHERE needs no separate bank_id test: once inlined, (u).bank_id = bank_id is a
    -- plain qual that the (bank_id, ...) indexes serve). rooms are already expanded
    -- (rcll._expand_rooms) and authors resolved (rcll._recall_authors); NULL = no filter.
    SELECT (u).bank_id = _in_scope.bank_id
       AND (_in_scope.rooms IS NULL OR (u).room = ANY (_in_scope.rooms))
       AND (_in_scope.authors IS NULL OR (u).author = ANY (_in_scope.authors)
            OR (_in_scope.include_unattributed AND (u).author IS NULL))
       AND (_in_scope.halls IS NULL OR (u).hall = ANY (_in_scope.halls))
       AND (_in_scope.layers IS NULL OR (u).layer = ANY (_in_scope.layers))
       AND (_in_scope.tags_any IS NULL OR (u).tags && _in_scope.tags_any)
       AND (_in_scope.tags_all IS NULL OR (u).tags @> _in_scope.tags_all)
       AND (_in_scope.thread IS NULL OR (u).thread = _in_scope.thread)
       AND (_in_scope.as_of IS NULL OR (u).valid @> _in_scope.as_of)
$$;
COMMENT ON FUNCTION rcll._in_scope(rcll.memory_units, integer, text[], text[], boolean, text[], text[], text[], text[], text, timestamptz)
    IS 'Internal: whether a unit passes a recall''s filters (bank, expanded rooms, resolved authors, halls, layers, tags, thread, validity as of). Every channel filters through it; it is inlined into their queries.';
