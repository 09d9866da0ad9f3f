-- Recall's defaults: the one SQL source (Python's is rcll/defaults.py; tests/test_defaults.py holds them equal).

CREATE OR REPLACE FUNCTION rcll.recall_defaults(
    OUT budget          integer,
    OUT rerank_depth    integer,
    OUT context_depth   integer,
    OUT channel_limit   integer,
    OUT candidate_limit integer)
RETURNS record
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- Why these values: research/locomo/RESEARCH.md and docs/benchmarks.md's depth table.
    SELECT 4096,  -- tokens of fact text returned (hindsight's default, counted with cl100k)
           40,    -- fused candidates the cross-encoder reads
           15,    -- of those, how many it reads again with the chunk before them
           300,   -- candidates each channel returns
           100    -- fused candidates recall_candidates returns
$$;
COMMENT ON FUNCTION rcll.recall_defaults()
    IS 'Recall''s defaults, one row: budget (tokens), rerank_depth, context_depth, channel_limit (per channel), candidate_limit (fused candidates). Every recall function''s parameter defaults read them: SELECT * FROM rcll.recall_defaults().';
