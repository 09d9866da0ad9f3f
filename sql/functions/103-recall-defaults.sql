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
    -- The order of rcll.channel_weights' fields (rcll._weight_of reads a channel's weight at its
    -- position here). A list of names anywhere else in sql/ reads this one; a channel's own code
    -- (the part of recall_channels that runs it, its rank_<channel> column) carries its name, and
    -- tests/test_defaults.py holds each of those to this list. Immutable with no argument: the planner folds a call to a
    -- constant, so reading it costs a recall nothing.
    SELECT '{dense,lexical,graph,temporal,entity,session,context}'::text[]
$$;
COMMENT ON FUNCTION rcll.recall_channel_names()
    IS 'The recall channels'' names, in the order of rcll.channel_weights'' fields: dense, lexical, graph, temporal, entity, session, context (the context channel is off unless its weight is above 0). rcll.recall_channels'' channel column and rcll.fuse_candidates'' rank_<channel> columns use these names.';

CREATE OR REPLACE FUNCTION rcll.channel_weights(
    dense    double precision DEFAULT 1.0,
    lexical  double precision DEFAULT 1.0,
    graph    double precision DEFAULT 1.0,
    temporal double precision DEFAULT 1.0,
    entity   double precision DEFAULT 1.0,
    session  double precision DEFAULT 1.0,
    context  double precision DEFAULT 0.0)
RETURNS rcll.channel_weights
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    w constant double precision[] := ARRAY[dense, lexical, graph, temporal, entity, session, context];
    field text;
BEGIN
    -- Immutable: with constant arguments (a default, a literal) the planner makes the call a constant.
    FOR i IN 1 .. cardinality(w) LOOP
        IF w[i] IS NULL OR NOT (w[i] >= 0 AND w[i] < 'Infinity'::double precision) THEN  -- NaN is above Infinity
            field := 'weights.' || (rcll.recall_channel_names())[i];
            RAISE EXCEPTION '%: % is not a weight', field, coalesce(w[i]::text, 'NULL')
                USING ERRCODE = 'RC001', COLUMN = field,
                      HINT = 'Give each channel a finite weight of 0 or more (0 skips the channel).';
        END IF;
    END LOOP;
    RETURN ROW(dense, lexical, graph, temporal, entity, session, context)::rcll.channel_weights;
END
$$;
COMMENT ON FUNCTION rcll.channel_weights(double precision, double precision, double precision, double precision, double precision, double precision, double precision)
    IS 'The recall channels'' weights as one value, for rcll.recall_candidates, rcll.recall_channels and rcll.fuse_candidates: each channel''s z-score is multiplied by its weight in the fusion, and a weight of 0 skips the channel. Defaults: 1 for dense, lexical, graph, temporal, entity and session, 0 for context (off). RC001 names a weight that is NULL, negative or not finite. From psql: rcll.channel_weights(graph => 0, context => 0.5).';

CREATE OR REPLACE FUNCTION rcll._weight_array(weights rcll.channel_weights)
RETURNS double precision[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ARRAY[(weights).dense, (weights).lexical, (weights).graph, (weights).temporal, (weights).entity,
                 (weights).session, (weights).context]
$$;
COMMENT ON FUNCTION rcll._weight_array(rcll.channel_weights) IS 'Internal: the weights as an array in rcll.recall_channel_names() order (a channel''s weight is at its position there).';

CREATE OR REPLACE FUNCTION rcll._weight_of(weights rcll.channel_weights, channel text)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (rcll._weight_array(weights))[array_position(rcll.recall_channel_names(), channel)]
$$;
COMMENT ON FUNCTION rcll._weight_of(rcll.channel_weights, text) IS 'Internal: the weight weights gives a channel (by name); NULL for a name that is no channel.';

CREATE OR REPLACE FUNCTION rcll._channel_runs(channel text, weights rcll.channel_weights, channels text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT rcll._weight_of(weights, channel) > 0 AND (channels IS NULL OR channel = ANY (channels))
$$;
COMMENT ON FUNCTION rcll._channel_runs(text, rcll.channel_weights, text[]) IS 'Internal: whether a recall runs a channel: its weight is above 0 and channels is NULL (all) or names it.';
