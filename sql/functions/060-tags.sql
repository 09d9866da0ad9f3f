-- Tags: the listing call with usage counts and wildcards (author:* is the roster of a bank's writers).

CREATE OR REPLACE FUNCTION rcll.tags(bank text, pattern text DEFAULT '*')
RETURNS TABLE (tag text, unit_count bigint)
LANGUAGE plpgsql STABLE PARALLEL SAFE
-- The bank's id resolved first and the count by a custom plan with it a constant: on a Citus
-- cluster the statement then goes to the one worker holding the bank (a filter on the name's
-- lookup reaches every shard, so every worker would have to answer).
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    b integer := rcll._bank_id(tags.bank);
BEGIN
    -- Counted from the units, not kept on the write path: a listing is rare, a write is not, and a
    -- count nobody maintains cannot drift.
    RETURN QUERY
    SELECT t.tag, count(*)::bigint
    FROM rcll.memory_units u CROSS JOIN LATERAL unnest(u.tags) AS t(tag)
    WHERE u.bank_id = b
      AND t.tag ILIKE rcll._wildcard(coalesce(tags.pattern, '*'))
    GROUP BY t.tag
    ORDER BY count(*) DESC, t.tag;
END
$$;
COMMENT ON FUNCTION rcll.tags(text, text) IS 'Tags in use in a bank with the number of units carrying each; pattern takes * and ? wildcards, case-insensitively. rcll.tags(bank, ''author:*'') is the roster of everyone who wrote to the bank, room-alias:* every rewritten room spelling.';
