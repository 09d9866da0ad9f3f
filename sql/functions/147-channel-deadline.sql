-- Recall phase 2 under a deadline: a channel starts only while the deadline leaves it time.

CREATE OR REPLACE FUNCTION rcll._channels_in_run_order(weights rcll.channel_weights, channels text[])
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- The order rcll.recall_channels runs its channels in (dense and the BM25 pair first: the
    -- channels a recall gains most from), kept to those the call runs (rcll._channel_runs).
    SELECT coalesce(array_agg(r.name ORDER BY r.n), '{}')
    FROM unnest('{dense,context,lexical,session,graph,temporal,entity}'::text[]) WITH ORDINALITY AS r(name, n)
    WHERE rcll._channel_runs(r.name, _channels_in_run_order.weights, _channels_in_run_order.channels)
$$;
COMMENT ON FUNCTION rcll._channels_in_run_order(rcll.channel_weights, text[])
    IS 'Internal: the channels rcll.recall_channels runs, in the order it runs them (dense, context, lexical, session, graph, temporal, entity), given the weights and the channels asked for (NULL: all).';

CREATE OR REPLACE FUNCTION rcll._channel_starts(channel text, deadline_ms integer, run_order text[])
RETURNS boolean
-- STABLE although it reads the clock and keeps a setting (it writes nothing to the database):
-- only a stable expression that reads none of a channel's rows becomes that channel's one-time
-- filter, evaluated when the executor reaches the channel - before the channel's function scan
-- starts, so a skipped channel never runs. A volatile one would be evaluated for every row the
-- channel had already returned.
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    -- A channel starts when the time spent so far, plus what it is expected to cost, still leaves
    -- `reserve` of the deadline: what the statement needs after the channels - the fusion, and a
    -- rerank of at least a batch (rcll._recall_rerank asks for none with less than 70 ms left of 1 s).
    -- Expected cost: the mean time of the channels already run in this statement (none before
    -- the first), twice that for the BM25 scan when it runs both the lexical and the session
    -- channel. The first channel that does not fit ends the phase: it and the ones after it are
    -- skipped, so channels run in the order of what they bring, and one NOTICE names them all.
    -- The lexical channel runs when no channel has run before it: it needs nothing but the
    -- query's words - no model, no embedding that a late model service may not have given - so a
    -- recall whose deadline is spent before its channels still answers from the words, never
    -- with nothing; after a channel that ran, it is held to the deadline like the others.
    -- (The rule and its figures: docs/sql-recall.md "The deadline bounds the whole statement".)
    reserve constant double precision := greatest(0.15 * _channel_starts.deadline_ms, 40);
    now_at  constant double precision := extract(epoch FROM clock_timestamp());
    spent   constant double precision := 1000 * (now_at - extract(epoch FROM statement_timestamp()));
    key     constant text := statement_timestamp()::text;
    -- This statement's channel phase so far (seconds since the epoch): when its first channel
    -- started, how many channels started, when the last scan did, whether the deadline ended the
    -- phase. A setting keyed by the statement's start, as rcll._model_service_gave_up's.
    state   text[] := string_to_array(current_setting('rcll.channel_phase', true), '|');
    first   double precision := now_at;
    ran     integer := 0;
    last    double precision := now_at;
    cut     boolean := false;
    -- The session channel rides the lexical channel's scan (rcll._bm25_channels): it is decided
    -- as that scan starts, by the channels before it.
    rides   constant boolean := _channel_starts.channel = 'session' AND 'lexical' = ANY (_channel_starts.run_order);
    pair    constant integer := CASE WHEN _channel_starts.channel IN ('lexical', 'session')
                                      AND _channel_starts.run_order @> '{lexical,session}' THEN 2 ELSE 1 END;
    before  integer;
    pace    double precision := 0;
    starts  boolean;
    skipped text[];
BEGIN
    IF _channel_starts.deadline_ms IS NULL THEN
        RETURN true;
    END IF;
    IF state[1] = key THEN
        first := state[2]::double precision;
        ran := state[3]::integer;
        last := state[4]::double precision;
        cut := state[5]::boolean;
    END IF;
    before := CASE WHEN rides THEN ran - 1 ELSE ran END;
    IF before > 0 THEN
        pace := 1000 * (CASE WHEN rides THEN last ELSE now_at END - first) / before;
    END IF;
    IF NOT cut AND spent + pair * pace + reserve > _channel_starts.deadline_ms THEN
        cut := true;
        skipped := _channel_starts.run_order[array_position(_channel_starts.run_order, _channel_starts.channel):];
        IF ran = 0 THEN
            skipped := array_remove(skipped, 'lexical');     -- it runs all the same
        END IF;
        RAISE NOTICE 'recall: the deadline (% ms) had % ms left when the % channel was to start: the % channel% skipped',
            _channel_starts.deadline_ms, round(greatest(_channel_starts.deadline_ms - spent, 0)), _channel_starts.channel,
            array_to_string(skipped, ', '), CASE WHEN cardinality(skipped) > 1 THEN 's are' ELSE ' is' END
            USING HINT = format('A channel starts while the time spent, plus the mean time of the channels run so far (%s ms; twice that for the lexical and session channels'' one scan), leaves %s ms for the fusion and the rerank%s. Allow a longer deadline_ms for every channel.',
                                round(pace), round(reserve),
                                CASE WHEN ran = 0 AND 'lexical' = ANY (_channel_starts.run_order)
                                     THEN '; the lexical channel runs all the same, as no channel ran before it' ELSE '' END);
    END IF;
    starts := NOT cut OR (_channel_starts.channel = 'lexical' AND ran = 0);
    IF starts THEN
        ran := ran + 1;
        IF NOT rides THEN
            last := now_at;
        END IF;
    END IF;
    PERFORM set_config('rcll.channel_phase', concat_ws('|', key, first, ran, last, cut), false);
    RETURN starts;
END
$$;
COMMENT ON FUNCTION rcll._channel_starts(text, integer, text[])
    IS 'Internal: whether rcll.recall_channels starts a channel (one of run_order, rcll._channels_in_run_order) with deadline_ms (counted from the statement''s start; NULL: always): while the time spent plus the mean time of the channels run so far (twice that for the lexical and session channels'' one scan) leaves 15% of the deadline (at least 40 ms) for the fusion and the rerank. The first channel that does not fit ends the phase (the later ones are skipped too; one NOTICE names them); the lexical channel runs when no channel ran before it. Evaluated as each channel''s one-time filter, when its turn comes.';
