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
