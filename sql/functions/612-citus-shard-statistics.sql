-- Where ANALYZE's statistics of a bank's rows are on a Citus worker: its shard's, not the table's.
--
-- PostgreSQL keeps the statistics per table. On one node rcll.unit_lexicon's are the table's own.
-- On a Citus worker rcll.unit_lexicon is an empty shell (never analysed: pg_stats holds nothing for
-- it) and the rows are in shards, unit_lexicon_<shard id>, each analysed on its worker. BM25's
-- pruning reads the most common lexemes from there (rcll._bm25_pruned_terms): reading the shell's,
-- it found none and scored every candidate exactly, so a big bank's SQL phase was several times one
-- node's (bench.recall --fleet 1000000 --citus: docs/benchmarks.md has the figures).

CREATE OR REPLACE FUNCTION rcll._shard_table(tab regclass, bank_id integer)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Called on a Citus node only (rcll._bank_pinned): the name of tab's shard that holds the bank's
    -- rows, on the worker holding it, where a delegated call runs. A shard's statistics are over
    -- every bank in the shard, as one node's are over every bank in the table.
    RETURN (SELECT c.relname::text FROM pg_catalog.pg_class c WHERE c.oid = _shard_table.tab) || '_'
           || pg_catalog.get_shard_id_for_distribution_column(_shard_table.tab, _shard_table.bank_id);
END
$$;
COMMENT ON FUNCTION rcll._shard_table(regclass, integer)
    IS 'Internal: on a Citus node, the name of the shard of tab (in its schema) holding bank_id''s rows - whose ANALYZE statistics describe the bank''s rows there (the shell table has none). rcll._bm25_channels reads unit_lexicon''s most common lexemes from it.';
