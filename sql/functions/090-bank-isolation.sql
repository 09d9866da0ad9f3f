-- Optional bank isolation: row-level security a deployment can switch on so a role sees only its banks.

CREATE OR REPLACE FUNCTION rcll._visible_banks(role_name name)
RETURNS integer[]
LANGUAGE sql STABLE STRICT PARALLEL SAFE
-- Definer: policies call it for roles that cannot read rcll.bank_grants. The role is passed in
-- (the policy passes current_user), because inside a definer current_user is the owner. Only a
-- role the session may act as is answered (current_user always is one: SET ROLE needs
-- membership), so no caller can list another role's grants through it.
SECURITY DEFINER
-- On a Citus cluster the policies call it inside the query on a shard, on the worker, where it
-- reads rcll.bank_grants, a reference table: Citus refuses that ("cannot execute a distributed
-- query from a query on a shard") unless told. The table's copy is on every node and never moves,
-- so the read is right wherever it runs (as rcll._bank_id's of rcll.banks). On one node: unused.
SET citus.allow_nested_distributed_execution = on
AS $$
    SELECT coalesce(array_agg(DISTINCT g.bank_id), '{}')
    FROM rcll.bank_grants g
    WHERE pg_has_role(session_user, _visible_banks.role_name, 'MEMBER')
      AND pg_has_role(_visible_banks.role_name, to_regrole(quote_ident(g.role_name)), 'MEMBER')
$$;
COMMENT ON FUNCTION rcll._visible_banks(name) IS 'Internal: ids of the banks a role may see under bank isolation (granted to it or to a role it is a member of); empty for a role the session is not a member of. Executable by rcll_reader (and so rcll_agent): the policies call it as the querying role.';

CREATE OR REPLACE FUNCTION rcll.grant_bank(role_name name, bank text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = grant_bank.role_name) THEN
        RAISE EXCEPTION 'role_name: no database role "%"', role_name USING ERRCODE = 'RC003', COLUMN = 'role_name',
            HINT = 'Create the role first (CREATE ROLE ...); grants name roles, and their members inherit them.';
    END IF;
    INSERT INTO rcll.bank_grants (role_name, bank_id) VALUES (grant_bank.role_name, rcll._bank_id(bank))
    ON CONFLICT ON CONSTRAINT bank_grants_pkey DO NOTHING;
END
$$;
COMMENT ON FUNCTION rcll.grant_bank(name, text) IS 'Let a role (and its members) see a bank once bank isolation is enabled. Idempotent.';

CREATE OR REPLACE FUNCTION rcll.revoke_bank(role_name name, bank text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM rcll.bank_grants g WHERE g.role_name = revoke_bank.role_name AND g.bank_id = rcll._bank_id(revoke_bank.bank)
$$;
COMMENT ON FUNCTION rcll.revoke_bank(name, text) IS 'Withdraw a role''s grant on a bank.';

CREATE OR REPLACE FUNCTION rcll._bank_tables()
RETURNS SETOF regclass
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Every rcll table with a bank_id column, found when called: tables added later are covered.
    -- The grants themselves are not isolated (a role must be able to use its grants).
    SELECT c.oid::regclass FROM pg_class c
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'bank_id' AND NOT a.attisdropped
    WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p') AND c.relname <> 'bank_grants'
    ORDER BY c.relname
$$;
COMMENT ON FUNCTION rcll._bank_tables() IS 'Internal: the tables bank isolation covers (every rcll table with a bank_id column, bank_grants excepted).';

CREATE OR REPLACE FUNCTION rcll._isolation_on_cluster()
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    -- rcll._bank_pinned is made by a later file (610): an upgrade from a release without it runs
    -- this file's last block first, on a store that is not distributed yet.
    IF pg_catalog.to_regprocedure('rcll._bank_pinned()') IS NULL THEN
        RETURN false;
    END IF;
    RETURN rcll._bank_pinned();
END
$$;
COMMENT ON FUNCTION rcll._isolation_on_cluster() IS 'Internal: whether bank isolation applies to tables Citus distributes by bank (rcll._bank_pinned, false while that function does not exist yet).';

CREATE OR REPLACE FUNCTION rcll._bank_isolation_policy()
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    -- One node: the grants read once per statement (an InitPlan). Citus refuses any subquery in a
    -- policy on a distributed or reference table (commands/policy.c, ErrorIfUnsupportedPolicyExpr:
    -- "Subqueries are not supported in policies on distributed tables"), so on a cluster the
    -- function is compared bare: evaluated once per scan where the planner makes it an index
    -- condition on the bank's index, but again at each rescan of a nested loop's inner side and
    -- per row where it is a filter (bench/citus_isolation.py counts the calls; docs/scaling.md).
    RETURN CASE WHEN rcll._isolation_on_cluster()
                THEN 'bank_id = ANY (rcll._visible_banks(current_user))'
                ELSE 'bank_id = ANY ((SELECT rcll._visible_banks(current_user))::integer[])' END;
END
$$;
COMMENT ON FUNCTION rcll._bank_isolation_policy() IS 'Internal: the bank_isolation policy''s expression - the grants read once per statement by a subquery on one node; on a Citus cluster, which refuses subqueries in policies, rcll._visible_banks compared bare.';

CREATE OR REPLACE FUNCTION rcll._set_bank_isolation(enable boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t regclass;
    policy text := rcll._bank_isolation_policy();
    n integer := 0;
BEGIN
    -- On a Citus coordinator each statement below is propagated to the table's shards on every
    -- worker (and to the workers' copies of the table); one connection per worker keeps the
    -- statements of one transaction on the connections that made the earlier ones.
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true) WHERE rcll._isolation_on_cluster();
    -- Superusers and the tables' owner bypass row-level security: the installing role stays an
    -- administrator, and agents connect as their own roles.
    FOR t IN SELECT rcll._bank_tables() LOOP
        -- Dropped only when there (DROP POLICY IF EXISTS would say it skipped from every shard).
        IF EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = t AND p.polname = 'bank_isolation') THEN
            EXECUTE format('DROP POLICY bank_isolation ON %s', t);
        END IF;
        IF enable THEN
            EXECUTE format('CREATE POLICY bank_isolation ON %s USING (%s) WITH CHECK (%s)', t, policy, policy);
        END IF;
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', t, CASE WHEN enable THEN 'ENABLE' ELSE 'DISABLE' END);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._set_bank_isolation(boolean) IS 'Internal: on every table rcll._bank_tables() lists, row-level security with the bank_isolation policy (enable) or neither; on a Citus coordinator Citus carries both to every shard. Returns the number of tables.';

CREATE OR REPLACE FUNCTION rcll._apply_bank_isolation()
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._set_bank_isolation(EXISTS (SELECT 1 FROM rcll.bank_isolation_state))
$$;
COMMENT ON FUNCTION rcll._apply_bank_isolation() IS 'Internal: make every table rcll._bank_tables() lists match rcll.bank_isolation_state - row-level security with the bank_isolation policy when it holds a row, neither when it is empty; returns the number of tables.';

CREATE OR REPLACE FUNCTION rcll._bank_isolation_applied()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- pg_dump keeps neither the row-level security nor the policies of an extension's tables, but
    -- keeps this table's row: restoring it runs this trigger (CREATE EXTENSION made it before the
    -- rows are loaded), so a restored store is isolated again with no step by hand.
    -- On a Citus cluster the table is a reference table and this fires on its placements, on every
    -- node, where policies made would stay on that node's copy of each table: there
    -- rcll._bank_isolation applies them from the coordinator instead, which Citus propagates.
    IF rcll._isolation_on_cluster() THEN
        RETURN NULL;
    END IF;
    PERFORM rcll._apply_bank_isolation();
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._bank_isolation_applied() IS 'Trigger: apply rcll.bank_isolation_state to the bank tables whenever it changes - by rcll.enable_bank_isolation / disable_bank_isolation, or by a restore loading its row.';

CREATE OR REPLACE TRIGGER bank_isolation_applied AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rcll.bank_isolation_state
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._bank_isolation_applied();

CREATE OR REPLACE FUNCTION rcll._bank_isolation(enable boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF rcll._isolation_on_cluster() THEN
        IF NOT pg_catalog.citus_is_coordinator() THEN
            -- A worker's policies would stay on its own copies of the tables.
            RAISE EXCEPTION 'enable: bank isolation is switched on the Citus coordinator, not on a worker' USING ERRCODE = 'RC001',
                COLUMN = 'enable', HINT = 'Connect to the coordinator and call it there: Citus carries the policies to every shard.';
        END IF;
    END IF;
    IF enable THEN
        INSERT INTO rcll.bank_isolation_state (enabled) VALUES (true) ON CONFLICT (enabled) DO NOTHING;
    ELSE
        DELETE FROM rcll.bank_isolation_state;
    END IF;
    IF rcll._isolation_on_cluster() THEN
        -- The state's trigger does nothing on a cluster (rcll._bank_isolation_applied): applied here,
        -- on the coordinator, whence Citus carries the policies to every shard on every worker.
        PERFORM rcll._apply_bank_isolation();
    END IF;
    PERFORM rcll._audit(NULL, CASE WHEN enable THEN 'bank_isolation_enable' ELSE 'bank_isolation_disable' END,
                        jsonb_build_object('tables', (SELECT count(*) FROM rcll._bank_tables())));
    RETURN (SELECT count(*) FROM rcll._bank_tables());
END
$$;
COMMENT ON FUNCTION rcll._bank_isolation(boolean) IS 'Internal: switch bank isolation on (enable) or off in rcll.bank_isolation_state, whose trigger applies it to every table rcll._bank_tables() lists (on a Citus cluster: applied from the coordinator, which Citus carries to every shard; RC001 on a worker); audited; returns the number of tables.';

CREATE OR REPLACE FUNCTION rcll.enable_bank_isolation()
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._bank_isolation(enable => true)
$$;
COMMENT ON FUNCTION rcll.enable_bank_isolation() IS 'Turn on bank isolation: row-level security on every rcll table with a bank_id, so a role sees and writes only the banks rcll.bank_grants gives it (superusers and the owner are exempt). Rooms stay a topic, not a permission. Returns the number of tables covered. It stays on through upgrades (which cover the tables they add) and through pg_dump / pg_restore (the switch is a dumped row).';

CREATE OR REPLACE FUNCTION rcll.disable_bank_isolation()
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._bank_isolation(enable => false)
$$;
COMMENT ON FUNCTION rcll.disable_bank_isolation() IS 'Turn bank isolation off again: every role sees every bank (grants are kept).';

-- An upgrade (ALTER EXTENSION rcll UPDATE, `rcll install`) runs this file after its migrations:
-- when bank isolation is on, the tables those migrations added (rcll.unit_lexicon holds every
-- unit's lexemes and scope columns) are covered before the upgrade commits, instead of being
-- readable across banks by every role granted SELECT until an administrator re-runs
-- rcll.enable_bank_isolation(). Nothing happens in a fresh install or with isolation off.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM rcll.bank_isolation_state) THEN
        PERFORM rcll._apply_bank_isolation();
    END IF;
END
$$;
