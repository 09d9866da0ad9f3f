-- Tags: the listing call with usage counts and wildcards (author:* is the roster of a bank's writers).

CREATE OR REPLACE FUNCTION rcll.tags(bank text, pattern text DEFAULT '*')
RETURNS TABLE (tag text, unit_count bigint)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Counted from the units, not kept on the write path: a listing is rare, a write is not, and a
    -- count nobody maintains cannot drift.
    SELECT t.tag, count(*)::bigint
    FROM rcll.memory_units u CROSS JOIN LATERAL unnest(u.tags) AS t(tag)
    WHERE u.bank_id = rcll._bank_id(tags.bank)
      AND t.tag ILIKE rcll._wildcard(coalesce(tags.pattern, '*'))
    GROUP BY t.tag
    ORDER BY count(*) DESC, t.tag
$$;
COMMENT ON FUNCTION rcll.tags(text, text) IS 'Tags in use in a bank with the number of units carrying each; pattern takes * and ? wildcards, case-insensitively. rcll.tags(bank, ''author:*'') is the roster of everyone who wrote to the bank, room-alias:* every rewritten room spelling.';
