-- Recall's defaults and its channel names: the one SQL source of each (Python's is rcll/defaults.py;
-- tests/test_defaults.py holds them equal).

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

CREATE OR REPLACE FUNCTION rcll.recall_channel_names()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- The order of the <channel>_weight parameters of rcll.recall_candidates, rcll.recall_channels
    -- and rcll.fuse_candidates (the fusion reads a channel's weight at its position here). A list of
    -- names anywhere else in sql/ reads this one; a channel's own code (the part of recall_channels
    -- that runs it, its rank_<channel> column) carries its name, and tests/test_defaults.py holds
    -- each of those to this list. Immutable with no argument: the planner folds a call to a
    -- constant, so reading it costs a recall nothing.
    SELECT '{dense,lexical,graph,temporal,entity,session,context}'::text[]
$$;
COMMENT ON FUNCTION rcll.recall_channel_names()
    IS 'The recall channels'' names, in the order of the recall functions'' <channel>_weight parameters: dense, lexical, graph, temporal, entity, session, context (the context channel is off unless context_weight > 0). rcll.recall_channels'' channel column and rcll.fuse_candidates'' rank_<channel> columns use these names.';
