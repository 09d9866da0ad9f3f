-- Dense indexes: a big bank's own HNSW index (a partial index), the global index without those banks, and the DDL to get there.
--
-- With one HNSW index over every bank, a big bank's dense search walks an index mostly made of other
-- banks' units and filters them out, and every insert walks the whole store's index. A bank of at
-- least min_units units can have its own index instead: memory_units_embedding_hnsw_bank_<id>,
-- WHERE bank_id = <id>; the global index memory_units_embedding_hnsw then leaves those banks out
-- (WHERE bank_id <> ALL (...)), so each unit is in exactly one index. The dense and temporal
-- channels plan with the bank id as a constant, so the planner proves which index serves a bank.
-- On a 1M-unit fleet (python -m bench.recall --fleet 1000000 --split 20000) an own index raised the
-- dense recall against exact search of banks from ~30,000 units up, left the SQL phase as it was, and
-- let writes into the biggest bank keep more of a small fleet's rate than one global index did: hence
-- the default min_units of 20,000. Own indexes are built with m 32 and ef_construction 128 (pgvector's
-- defaults: 16 and 64), which raised the biggest bank's recall further. The figures, dated, are in
-- docs/scaling.md ("Figures behind the SQL comments").
--
-- Index builds cannot run inside a function (CREATE INDEX CONCURRENTLY refuses a transaction
-- block), so this file only reads the catalog and says what to run: in psql,
--     SELECT statement FROM rcll.dense_index_plan() \gexec
-- or `rcll dense-indexes --apply`, which runs the same statements one by one.

CREATE OR REPLACE FUNCTION rcll.dense_indexes()
RETURNS TABLE (index_name text, kind text, bank text, bank_id integer, excluded_banks integer[], valid boolean, bytes bigint,
               build_options text[])
LANGUAGE sql STABLE
AS $$
    -- Every HNSW index on memory_units: the global index (kind 'global'; excluded_banks the banks
    -- it leaves out, empty when it holds every bank; _next and _old are a rebuild's two halves),
    -- each bank's own index (kind 'bank'; _next: a rebuild's new half), and any other a DBA built
    -- (kind 'other').
    SELECT c.relname::text,
           CASE WHEN g.bank_id IS NOT NULL THEN 'bank'
                WHEN c.relname IN ('memory_units_embedding_hnsw', 'memory_units_embedding_hnsw_next',
                                   'memory_units_embedding_hnsw_old') THEN 'global'
                ELSE 'other' END,
           b.name,
           g.bank_id,
           CASE WHEN g.bank_id IS NULL AND c.relname LIKE 'memory_units_embedding_hnsw%' 
                THEN coalesce((regexp_match(pg_catalog.pg_get_expr(i.indpred, i.indrelid),
                                            '^\(bank_id <> ALL \(''(\{[0-9,]*\})''::integer\[\]\)\)$'))[1]::integer[],
                              '{}'::integer[]) END,
           i.indisvalid,
           pg_catalog.pg_relation_size(c.oid),
           coalesce(c.reloptions, '{}')::text[]
    FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
    JOIN pg_catalog.pg_am a ON a.oid = c.relam AND a.amname = 'hnsw'
    CROSS JOIN LATERAL (SELECT (regexp_match(c.relname, '^memory_units_embedding_hnsw_bank_([0-9]+)(_next)?$'))[1]::integer AS bank_id) g
    LEFT JOIN rcll.banks b ON b.bank_id = g.bank_id
    WHERE i.indrelid = 'rcll.memory_units'::regclass
    ORDER BY g.bank_id NULLS FIRST, c.relname
$$;
COMMENT ON FUNCTION rcll.dense_indexes()
    IS 'The HNSW indexes of rcll.memory_units: the global one (kind global; excluded_banks: the banks with their own index, which it leaves out), each bank''s own (kind bank: memory_units_embedding_hnsw_bank_<id>, and _next while it is rebuilt) and any other HNSW index on the table (kind other), with validity, size and build options (e.g. {m=32,ef_construction=128}; empty: pgvector''s defaults, m 16 and ef_construction 64). See rcll.dense_index_plan().';

CREATE OR REPLACE FUNCTION rcll.dense_index_plan(
    min_units       integer DEFAULT 20000,
    max_share       double precision DEFAULT 0.5,
    m               integer DEFAULT 32,
    ef_construction integer DEFAULT 128)
RETURNS TABLE (step integer, statement text, why text)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    target  integer[];
    have    integer[];        -- banks with a valid index of their own
    listed  integer[];        -- banks with an index of their own, valid or an unfinished build
    global  record;
    params  text;             -- the global index's build parameters (a rebuild keeps them)
    own     text;             -- an own index's
    wanted  text[];           -- an own index's, as pg_class.reloptions lists them
    stale   integer[];        -- banks whose valid own index was built with other parameters
    halves  integer[];        -- banks with a rebuild's new half (memory_units_embedding_hnsw_bank_<id>_next)
    b_own   text;
    b_next  text;
    stmts   text[] := '{}';   -- the plan, in order, and why each statement is in it
    whys    text[] := '{}';
    b       integer;
    -- The planner proves "bank_id = 7 implies bank_id <> ALL ('{...}')" for arrays of at most 100
    -- elements (PostgreSQL's predtest.c, MAX_SAOP_ARRAY_SIZE); past that the global index would
    -- serve no bank at all.
    max_own constant integer := 100;
BEGIN
    -- NULL stands for the default (so a client can pass either argument alone).
    min_units := coalesce(min_units, 20000);
    max_share := coalesce(max_share, 0.5);
    IF min_units < 1 THEN
        RAISE EXCEPTION 'min_units: must be a positive number of units (got %)', min_units
            USING ERRCODE = 'RC001', COLUMN = 'min_units',
                  HINT = 'A bank of at least min_units units gets its own HNSW index; 20000 is the default.';
    END IF;
    m := coalesce(m, 32);
    ef_construction := coalesce(ef_construction, 128);
    IF m < 2 OR m > 100 THEN
        RAISE EXCEPTION 'm: must be from 2 to 100 (got %)', m
            USING ERRCODE = 'RC001', COLUMN = 'm',
                  HINT = 'The number of neighbours each unit keeps in a bank''s own HNSW index; 32 is the default.';
    END IF;
    IF ef_construction < 2 * m OR ef_construction > 1000 THEN
        RAISE EXCEPTION 'ef_construction: must be from 2 x m (%) to 1000 (got %)', 2 * m, ef_construction
            USING ERRCODE = 'RC001', COLUMN = 'ef_construction',
                  HINT = 'The candidate list an own index''s build keeps per insert (pgvector requires at least 2 x m); 128 is the default.';
    END IF;
    IF max_share <= 0 OR max_share > 1 THEN
        RAISE EXCEPTION 'max_share: must be a fraction of the store''s units in (0, 1] (got %)', max_share
            USING ERRCODE = 'RC001', COLUMN = 'max_share',
                  HINT = 'A bank holding more than max_share of the units keeps the global index (it is most of it); 0.5 is the default.';
    END IF;
    -- A bank that is most of the store gains nothing from an index of its own (the global index is
    -- mostly its units already): only banks of at most max_share of the units are split out.
    SELECT array_agg(x.bank_id ORDER BY x.bank_id) INTO target
    FROM (SELECT u.bank_id, count(*) AS n, sum(count(*)) OVER () AS total
          FROM rcll.memory_units u GROUP BY u.bank_id) x
    WHERE x.n >= min_units AND x.n <= max_share * x.total;
    target := coalesce(target, '{}');
    IF cardinality(target) > max_own THEN
        RAISE EXCEPTION 'min_units: % banks hold at least % units; at most % can have their own index', cardinality(target), min_units, max_own
            USING ERRCODE = 'RC001', COLUMN = 'min_units',
                  HINT = 'Raise min_units (the planner proves the global index''s predicate for at most 100 banks).';
    END IF;
    -- A bank's own index is built denser than pgvector's default (m 16, ef_construction 64): a big
    -- bank's nearest neighbours are many and close together, and a sparser index misses them
    -- (the recall against exact search, measured: docs/scaling.md).
    own := format(' WITH (m = %s, ef_construction = %s)', m, ef_construction);
    wanted := ARRAY[format('m=%s', m), format('ef_construction=%s', ef_construction)];
    SELECT coalesce(array_agg(g.bank_id ORDER BY g.bank_id) FILTER (WHERE NOT g.half AND g.valid), '{}'),
           coalesce(array_agg(g.bank_id ORDER BY g.bank_id) FILTER (WHERE NOT g.half), '{}'),
           coalesce(array_agg(g.bank_id ORDER BY g.bank_id)
                    FILTER (WHERE NOT g.half AND g.valid AND NOT (g.build_options @> wanted AND wanted @> g.build_options)), '{}'),
           coalesce(array_agg(g.bank_id ORDER BY g.bank_id) FILTER (WHERE g.half), '{}')
    INTO have, listed, stale, halves
    FROM (SELECT x.*, x.index_name <> 'memory_units_embedding_hnsw_bank_' || x.bank_id AS half
          FROM rcll.dense_indexes() x WHERE x.kind = 'bank') g;
    SELECT * INTO global FROM rcll.dense_indexes() g WHERE g.index_name = 'memory_units_embedding_hnsw';
    -- The global index is rebuilt as it was built (m, ef_construction), whatever a DBA chose for it.
    params := coalesce((SELECT ' WITH (' || array_to_string(c.reloptions, ', ') || ')' FROM pg_catalog.pg_class c
                        WHERE c.oid = to_regclass('rcll.memory_units_embedding_hnsw') AND c.reloptions IS NOT NULL), '');

    -- 1. Each bank that should have its own index and has none (an interrupted build leaves an
    --    invalid index: dropped first).
    FOREACH b IN ARRAY target LOOP
        CONTINUE WHEN b = ANY (have) AND b <> ALL (stale);
        b_own := 'memory_units_embedding_hnsw_bank_' || b;
        -- What a rebuild (below) leaves when interrupted: its new half, <own index>_next.
        b_next := b_own || '_next';
        IF b = ANY (stale) OR b = ANY (halves) THEN
            stmts := stmts || format('DROP INDEX CONCURRENTLY IF EXISTS rcll.%I', b_next);
            whys := whys || format('bank %s: clear an unfinished rebuild of its index, if any', b);
        END IF;
        IF b = ANY (stale) THEN
            -- Built with other parameters: the new index beside the old one, which serves until it
            -- is dropped; then the new one under the usual name.
            stmts := stmts || ARRAY[
                format('CREATE INDEX CONCURRENTLY %I ON rcll.memory_units USING hnsw (embedding public.vector_cosine_ops)%s WHERE bank_id = %s',
                       b_next, own, b),
                format('DROP INDEX CONCURRENTLY rcll.%I', b_own),
                format('ALTER INDEX rcll.%I RENAME TO %I', b_next, b_own)];
            whys := whys || ARRAY[format('bank %s: its index again, built with m %s, ef_construction %s', b, m, ef_construction),
                                  format('bank %s: the index built with other parameters, dropped', b),
                                  format('bank %s: the new index, under its usual name', b)];
            CONTINUE;
        END IF;
        IF b = ANY (listed) THEN
            stmts := stmts || format('DROP INDEX CONCURRENTLY IF EXISTS rcll.%I', b_own);
            whys := whys || format('bank %s: an unfinished build of its index', b);
        END IF;
        stmts := stmts || format('CREATE INDEX CONCURRENTLY %I ON rcll.memory_units USING hnsw (embedding public.vector_cosine_ops)%s WHERE bank_id = %s',
                                 b_own, own, b);
        whys := whys || format('bank %s (%s) holds at least %s units: its own index', b, (SELECT x.name FROM rcll.banks x WHERE x.bank_id = b), min_units);
    END LOOP;

    -- 2. The global index, rebuilt to leave out exactly those banks (built beside the old one, then
    --    swapped in by renames, so some global index exists at every moment; the old one dropped last).
    IF global.index_name IS NULL OR NOT global.valid OR global.excluded_banks IS DISTINCT FROM target THEN
        stmts := stmts || ARRAY['DROP INDEX CONCURRENTLY IF EXISTS rcll.memory_units_embedding_hnsw_next',
                                'DROP INDEX CONCURRENTLY IF EXISTS rcll.memory_units_embedding_hnsw_old',
                                format('CREATE INDEX CONCURRENTLY memory_units_embedding_hnsw_next ON rcll.memory_units USING hnsw (embedding public.vector_cosine_ops)%s%s',
                                       params, CASE WHEN cardinality(target) = 0 THEN ''
                                                    ELSE format(' WHERE bank_id <> ALL (%L::integer[])', target::text) END)];
        whys := whys || ARRAY['the global index: clear an unfinished rebuild',
                              'the global index: clear an unfinished swap',
                              CASE WHEN cardinality(target) = 0 THEN 'the global index: every bank'
                                   ELSE format('the global index: every bank but %s', array_to_string(target, ', ')) END];
        IF global.index_name IS NULL THEN
            stmts := stmts || 'ALTER INDEX rcll.memory_units_embedding_hnsw_next RENAME TO memory_units_embedding_hnsw'::text;
            whys := whys || 'the global index: the new one, under its usual name'::text;
        ELSE
            stmts := stmts || ARRAY['ALTER INDEX rcll.memory_units_embedding_hnsw RENAME TO memory_units_embedding_hnsw_old',
                                    'ALTER INDEX rcll.memory_units_embedding_hnsw_next RENAME TO memory_units_embedding_hnsw',
                                    'DROP INDEX CONCURRENTLY rcll.memory_units_embedding_hnsw_old'];
            whys := whys || ARRAY['the global index: the old one, renamed',
                                  'the global index: the new one, under its usual name',
                                  'the global index: the old one, dropped'];
        END IF;
    END IF;

    -- 3. Own indexes no bank needs any more (it shrank below min_units, or min_units rose): dropped
    --    once the global index holds their banks again.
    --    (A rebuild's unfinished new half goes with it.)
    SELECT stmts || coalesce(array_agg(format('DROP INDEX CONCURRENTLY rcll.%I', g.index_name) ORDER BY g.bank_id, g.index_name), '{}'),
           whys || coalesce(array_agg(format('bank %s: below %s units (or over %s of the store), back in the global index',
                                             g.bank_id, min_units, max_share) ORDER BY g.bank_id, g.index_name), '{}')
    INTO stmts, whys
    FROM rcll.dense_indexes() g WHERE g.kind = 'bank' AND g.bank_id <> ALL (target);

    RETURN QUERY SELECT p.n::integer, p.statement, p.why FROM unnest(stmts, whys) WITH ORDINALITY AS p(statement, why, n);
END
$$;
COMMENT ON FUNCTION rcll.dense_index_plan(integer, double precision, integer, integer)
    IS 'The statements, in order, that give every bank of at least min_units units (and at most max_share of the store''s) its own HNSW index (built WITH (m, ef_construction); one built otherwise is rebuilt beside it and swapped in) and rebuild the global index without them (each unit in one index), or undo it for banks below min_units. Reads only; nothing is run. In psql: SELECT statement FROM rcll.dense_index_plan() \gexec (or rcll dense-indexes --apply). Empty when the layout already matches.';

CREATE OR REPLACE FUNCTION rcll.dense_index_builds()
RETURNS TABLE (pid integer, index_name text, bank_id integer, phase text, blocks_done bigint, blocks_total bigint,
               tuples_done bigint, tuples_total bigint, started timestamptz)
LANGUAGE sql STABLE
AS $$
    -- PostgreSQL's own progress report of index builds (pg_stat_progress_create_index), for the
    -- indexes of memory_units: a build run by `rcll dense-indexes --apply`, the periodic jobs or a DBA's
    -- psql alike. An HNSW build counts blocks while it reads the table and tuples as it inserts
    -- them into the index. Another role's build shows with its counts only to members of
    -- pg_read_all_stats (PostgreSQL's rule for every pg_stat_progress view).
    SELECT p.pid, c.relname::text,
           (regexp_match(c.relname, '^memory_units_embedding_hnsw_bank_([0-9]+)(_next)?$'))[1]::integer,
           p.phase, p.blocks_done, p.blocks_total, p.tuples_done, p.tuples_total, a.query_start
    FROM pg_catalog.pg_stat_progress_create_index p
    LEFT JOIN pg_catalog.pg_class c ON c.oid = p.index_relid
    LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = p.pid
    WHERE p.relid = 'rcll.memory_units'::regclass
    ORDER BY a.query_start, p.pid
$$;
COMMENT ON FUNCTION rcll.dense_index_builds()
    IS 'The index builds under way on rcll.memory_units (PostgreSQL''s pg_stat_progress_create_index): the building backend, the index (bank_id for a bank''s own index), the phase, blocks of the table read and tuples inserted so far, and when its statement started. Empty when nothing is being built. See rcll.dense_index_plan().';

CREATE OR REPLACE FUNCTION rcll.dense_index_build_lock()
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    -- A session-level advisory lock: whoever applies rcll.dense_index_plan() holds it for the
    -- whole run (its statements are separate transactions), so two runs - two servers' periodic
    -- jobs, or a server's and `rcll dense-indexes --apply` - never build or drop the same index at once.
    -- A plan read while another run is under way would take its unfinished build for an
    -- interrupted one and drop it. Released when the session ends.
    SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext('rcll.dense_index_plan'))
$$;
COMMENT ON FUNCTION rcll.dense_index_build_lock()
    IS 'Takes the lock a run of rcll.dense_index_plan()''s statements holds (session-level, released when the session ends): true when this session now holds it, false when another session does (a run is under way). rcll dense-indexes --apply and the periodic jobs take it before they read the plan.';

CREATE OR REPLACE FUNCTION rcll.dense_index_build_unlock()
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    -- The run lets the lock go as it ends rather than with its session: a backend releases its
    -- locks as it exits, after its client has hung up, so a run started right after another
    -- could still find the lock held and take the first for one under way.
    SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtext('rcll.dense_index_plan'))
$$;
COMMENT ON FUNCTION rcll.dense_index_build_unlock()
    IS 'Releases the lock rcll.dense_index_build_lock() took in this session: true when it held it. A run of the plan calls it as it ends.';
