-- Bank statistics with the two-column token account: what reading costs (nothing) next to what
-- writing cost (every model call on the write path, from rcll.llm_calls).

CREATE OR REPLACE FUNCTION rcll.stats(bank text)
RETURNS TABLE (section text, name text, value bigint, read_tokens bigint,
               write_input_tokens bigint, write_output_tokens bigint)
LANGUAGE plpgsql STABLE PARALLEL SAFE
-- A custom plan with the bank's id a constant: on a Citus cluster the whole statement then goes to
-- the one worker holding the bank (a join to a computed id would be a join between shards).
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    b_id integer := rcll._bank_id(stats.bank);
BEGIN
    RETURN QUERY
    WITH ledger AS (
        SELECT c.purpose, count(*) AS calls, sum(c.input_tokens)::bigint AS inp, sum(c.output_tokens)::bigint AS outp
        FROM rcll.llm_calls c WHERE c.bank_id = b_id GROUP BY c.purpose
    ),
    purposes AS (SELECT p FROM unnest(ARRAY['extract', 'consolidate']) p)
    -- tokens: recall makes no model call, so the read column is zero by construction
    SELECT 'tokens', p.p, coalesce(l.calls, 0), 0::bigint, coalesce(l.inp, 0), coalesce(l.outp, 0)
    FROM purposes p LEFT JOIN ledger l ON l.purpose = p.p
    UNION ALL
    SELECT 'tokens', 'total', coalesce(sum(l.calls), 0)::bigint, 0::bigint,
           coalesce(sum(l.inp), 0)::bigint, coalesce(sum(l.outp), 0)::bigint FROM ledger l
    UNION ALL
    SELECT 'totals', x.name, x.value, NULL::bigint, NULL::bigint, NULL::bigint FROM (VALUES
        ('documents', (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = b_id)),
        ('units', (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b_id)),
        ('entities', (SELECT count(*) FROM rcll.entities e WHERE e.bank_id = b_id)),
        ('links', (SELECT count(*) FROM rcll.links l WHERE l.bank_id = b_id)),
        ('superseded', (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b_id AND u.superseded_by IS NOT NULL))
    ) x(name, value)
    UNION ALL
    SELECT g.section, g.name, g.value, NULL, NULL, NULL FROM (
        SELECT 'kind' AS section, u.kind AS name, count(*) AS value FROM rcll.memory_units u WHERE u.bank_id = b_id GROUP BY u.kind
        UNION ALL
        SELECT 'room', coalesce(u.room, '(none)'), count(*) FROM rcll.memory_units u WHERE u.bank_id = b_id GROUP BY u.room
        UNION ALL
        SELECT 'hall', coalesce(u.hall, '(untyped)'), count(*) FROM rcll.memory_units u WHERE u.bank_id = b_id GROUP BY u.hall
        UNION ALL
        SELECT 'layer', u.layer, count(*) FROM rcll.memory_units u WHERE u.bank_id = b_id GROUP BY u.layer
        UNION ALL
        SELECT 'author', coalesce(u.author, '(none)'), count(*) FROM rcll.memory_units u WHERE u.bank_id = b_id GROUP BY u.author
        UNION ALL
        SELECT 'link_type', l.link_type, count(*) FROM rcll.links l WHERE l.bank_id = b_id GROUP BY l.link_type
        UNION ALL
        SELECT 'extraction', d.extraction, count(*) FROM rcll.documents d WHERE d.bank_id = b_id GROUP BY d.extraction
        UNION ALL   -- retention policies: what they cover, and how long they keep it (seconds)
        SELECT 'retention', coalesce(nullif(concat_ws(' ', 'room=' || p.room, 'hall=' || p.hall, 'layer=' || p.layer), ''), '*'),
               extract(epoch FROM p.keep)::bigint
        FROM rcll.retention_policies p WHERE p.bank_id = b_id
        ORDER BY 1, 3 DESC, 2
    ) g;
END
$$;
COMMENT ON FUNCTION rcll.stats(text)
    IS 'Statistics of a bank. Section tokens: per purpose (extract, consolidate, total) the number of model calls (value), the read column (read_tokens, always 0: recall makes no model call) next to the write column (write_input_tokens, write_output_tokens from rcll.llm_calls). Section totals: documents, units, entities, links, superseded. Sections kind, room, hall, layer, author, link_type, extraction: counts per value. Section retention: one row per retention policy (room=, hall=, layer= it covers, * for all), value = seconds kept.';
