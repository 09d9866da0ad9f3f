-- Delegation on a Citus cluster: whole bank-scoped calls run on the worker that holds the bank.
--
-- Citus runs a function on the worker holding a shard when it is distributed by one of its
-- arguments (create_distributed_function), and that argument must have the distribution column's
-- type: bank_id integer. rcll's public functions take the bank's name, or the composite
-- rcll.recall_scope that carries its id, so each delegated one has a twin whose first argument is
-- the bank's id; the public function stays what it is (one node, and the coordinator's own path).
-- The twin must be the statement the client sends (Citus delegates a top-level call only, with the
-- id a literal or a parameter): a client resolves the scope first (SELECT rcll.recall_scope(...)),
-- then calls the twin with its id and the scope as values. Inside, with force_delegation, every
-- statement runs on the worker's own shards of that bank.

CREATE OR REPLACE FUNCTION rcll._bank_pinned()
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = 'rcll.memory_units'::regclass);
END
$$;
COMMENT ON FUNCTION rcll._bank_pinned() IS 'Internal: whether rcll''s tables are distributed by bank (Citus), so that a statement must name its bank to reach its shard. Channels read it into a variable, so that on one node their bank tests fold away in custom plans.';

CREATE OR REPLACE FUNCTION rcll._scope_in_bank(bank_id integer, scope rcll.recall_scope)
RETURNS rcll.recall_scope
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF (_scope_in_bank.scope).bank_id IS DISTINCT FROM _scope_in_bank.bank_id THEN
        RAISE EXCEPTION 'bank_id: % is not the scope''s bank (%)', _scope_in_bank.bank_id, (_scope_in_bank.scope).bank_id
            USING ERRCODE = 'RC001', COLUMN = 'bank_id',
                  HINT = 'Pass the bank_id of the scope you pass: (rcll.recall_scope(...)).bank_id.';
    END IF;
    RETURN _scope_in_bank.scope;
END
$$;
COMMENT ON FUNCTION rcll._scope_in_bank(integer, rcll.recall_scope) IS 'Internal: the scope, when bank_id is its bank''s (the *_in_bank twins are delegated by bank_id and read by scope: the two must agree); RC001 otherwise.';

CREATE OR REPLACE FUNCTION rcll.recall_in_bank(
    bank_id         integer,
    query           text,
    scope           rcll.recall_scope,
    budget          integer DEFAULT (rcll.recall_defaults()).budget,
    rerank_depth    integer DEFAULT (rcll.recall_defaults()).rerank_depth,
    context_depth   integer DEFAULT (rcll.recall_defaults()).context_depth,
    "limit"         integer DEFAULT (rcll.recall_defaults()).candidate_limit,
    query_embedding vector DEFAULT NULL,
    time_range      tstzrange DEFAULT NULL,
    reference_time  timestamptz DEFAULT now(),
    deadline_ms     integer DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision, rerank_score real,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY SELECT * FROM rcll.recall(recall_in_bank.query, rcll._scope_in_bank(recall_in_bank.bank_id, recall_in_bank.scope),
        recall_in_bank.budget, recall_in_bank.rerank_depth, recall_in_bank.context_depth, recall_in_bank."limit",
        recall_in_bank.query_embedding, recall_in_bank.time_range, recall_in_bank.reference_time, recall_in_bank.deadline_ms,
        recall_in_bank.entity_query_embedding);
END
$$;
COMMENT ON FUNCTION rcll.recall_in_bank(integer, text, rcll.recall_scope, integer, integer, integer, integer, vector, tstzrange, timestamptz, integer, vector)
    IS 'rcll.recall with the bank''s id first, the one argument Citus can delegate by: on a Citus cluster, SELECT * FROM rcll.recall_in_bank(<id>, query, <scope>) runs the whole recall on the worker holding the bank (the id and the scope as values: resolve them first with SELECT rcll.recall_scope(...)). On one node it is rcll.recall. RC001 when the id is not the scope''s.';

CREATE OR REPLACE FUNCTION rcll.recall_candidates_in_bank(
    bank_id                integer,
    query                  text,
    scope                  rcll.recall_scope,
    query_embedding        vector DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL,
    time_range             tstzrange DEFAULT NULL,
    reference_time         timestamptz DEFAULT now(),
    channel_limit          integer DEFAULT (rcll.recall_defaults()).channel_limit,
    weights                rcll.channel_weights DEFAULT rcll.channel_weights(),
    "limit"                integer DEFAULT (rcll.recall_defaults()).candidate_limit,
    deadline_ms            integer DEFAULT NULL)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer, context text)
LANGUAGE sql STABLE
AS $$
    SELECT * FROM rcll.recall_candidates(
        query => recall_candidates_in_bank.query,
        scope => rcll._scope_in_bank(recall_candidates_in_bank.bank_id, recall_candidates_in_bank.scope),
        query_embedding => recall_candidates_in_bank.query_embedding,
        entity_query_embedding => recall_candidates_in_bank.entity_query_embedding,
        time_range => recall_candidates_in_bank.time_range, reference_time => recall_candidates_in_bank.reference_time,
        channel_limit => recall_candidates_in_bank.channel_limit,
        weights => recall_candidates_in_bank.weights, "limit" => recall_candidates_in_bank."limit",
        deadline_ms => recall_candidates_in_bank.deadline_ms)
$$;
COMMENT ON FUNCTION rcll.recall_candidates_in_bank(integer, text, rcll.recall_scope, vector, vector, tstzrange, timestamptz, integer, rcll.channel_weights, integer, integer)
    IS 'rcll.recall_candidates (recall phases 2-3) with the bank''s id first: on a Citus cluster the Python client sends it, outside a transaction block (Citus delegates only a top-level call), and the channels and the fusion run on the worker holding the bank. On one node it is rcll.recall_candidates. RC001 when the id is not the scope''s.';

CREATE OR REPLACE FUNCTION rcll._citus_delegate()
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    f record;
    n integer := 0;
BEGIN
    FOR f IN SELECT * FROM (VALUES
        -- The reads with force_delegation: every statement inside must stay on the bank's shards
        -- (Citus checks it).
        ('rcll.recall_in_bank(integer, text, rcll.recall_scope, integer, integer, integer, integer, public.vector, tstzrange, timestamptz, integer, public.vector)'::regprocedure, true),
        ('rcll.recall_candidates_in_bank(integer, text, rcll.recall_scope, public.vector, public.vector, tstzrange, timestamptz, integer, rcll.channel_weights, integer, integer)'::regprocedure, true),
        -- The writes (615-citus-delegated-writes.sql) without: Citus's check refuses the
        -- co-located INSERT ... SELECT of their triggers (rcll._refresh_document_lengths), which
        -- names the bank but which it cannot read a distribution key from. Delegated all the same
        -- when sent outside a transaction block, and then free to reach the reference tables
        -- (forget's audit rows) on every node.
        ('rcll.retain_chunks_in_bank(integer, text, text, text[], public.vector[], text, timestamptz, text, text, text[], text, text, jsonb, text, text, text, jsonb, text, timestamptz)'::regprocedure, false),
        ('rcll.forget_in_bank(integer, text, bigint[], bigint[], text, text, text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, boolean, text, integer, text)'::regprocedure, false)
    ) AS t(fn, forced) LOOP
        PERFORM pg_catalog.create_distributed_function(f.fn, 'bank_id', colocate_with => 'rcll.memory_units',
                                                       force_delegation => f.forced);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._citus_delegate() IS 'Internal: on a Citus coordinator, mark the *_in_bank twins (rcll.recall_in_bank, rcll.recall_candidates_in_bank with force_delegation; rcll.retain_chunks_in_bank, rcll.forget_in_bank without) as distributed functions by bank_id, co-located with memory_units; rcll.distribute_by_bank calls it on every install. Returns how many.';
