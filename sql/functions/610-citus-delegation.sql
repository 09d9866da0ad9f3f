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

CREATE OR REPLACE FUNCTION rcll._citus_delegate()
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    f record;
    n integer := 0;
BEGIN
    -- Every twin (616-citus-delegated-verbs.sql). The reads with force_delegation: every statement
    -- inside must stay on the bank's shards (Citus checks it). The writes without: Citus's check
    -- refuses the co-located INSERT ... SELECT of their triggers (rcll._refresh_document_lengths),
    -- which names the bank but which it cannot read a distribution key from. Delegated all the
    -- same when sent outside a transaction block, and then free to write the reference tables
    -- (a correction's audit row, forget's) on every node.
    FOR f IN
        SELECT p.oid::regprocedure AS fn, p.provolatile <> 'v' AS forced
        FROM rcll._in_bank_twins() t JOIN pg_catalog.pg_proc b ON b.oid = t.base
        JOIN pg_catalog.pg_proc p ON p.pronamespace = 'rcll'::regnamespace AND p.proname = b.proname || '_in_bank'
        ORDER BY 1
    LOOP
        PERFORM pg_catalog.create_distributed_function(f.fn, 'bank_id', colocate_with => 'rcll.memory_units',
                                                       force_delegation => f.forced);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._citus_delegate() IS 'Internal: on a Citus coordinator, mark every *_in_bank twin (rcll._in_bank_twins; the reads with force_delegation, the writes without) as a distributed function by bank_id, co-located with memory_units; rcll.distribute_by_bank calls it on every install. Returns how many.';
