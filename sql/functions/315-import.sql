-- Import: an export stream from elsewhere, written into one bank and trusting nothing it says.
--
--   BEGIN;
--   SELECT rcll.import_begin(bank_row => '<the stream''s banks row>', on_conflict => 'error');
--   SELECT rcll.import_rows('documents', '[<rows>]');   -- every other table, in batches
--   SELECT rcll.import_finish(counts => '<the trailer''s per-table row counts>');
--   COMMIT;
--
-- import_begin and import_rows only stage the stream, in temporary tables typed and checked by the
-- rcll tables' own constraints. import_finish checks the whole stream (the trailer's counts, ids
-- unique, every reference held by the stream itself) before it writes a row or draws an id, so a
-- refused stream leaves no row, no lock and no sequence moved. Then every row gets a new id in
-- the one target bank and every reference follows its row; the write triggers run as for any
-- write (rcll._importing() makes a unit's claimed author provenance only). Grants, audit rows,
-- BM25 statistics and room count deltas in the stream are counted, never written: the grants and
-- audit of this database are its own, the rest is recomputed. Nothing is disabled, so other banks'
-- writes never wait. The exact restore of a whole database (ids, authors, grants kept; triggers
-- off) is rcll.restore_begin, for the tables' owner only (310-restore.sql).

CREATE OR REPLACE FUNCTION rcll.import_tables()
RETURNS TABLE (table_name text, written boolean, match_columns text[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- match_columns: what makes a stream row the same as a row the target bank already holds, for
    -- on_conflict skip / replace (NULL: only the table's own key). Natural-key tables match by key.
    SELECT * FROM (VALUES
        ('banks',                false, NULL::text[]),
        ('bank_stats',           false, NULL),           -- recomputed
        ('bank_grants',          false, NULL),           -- never: grants are this database's
        ('documents',            true,  ARRAY['content_hash']),
        ('memory_units',         true,  ARRAY['document_id', 'kind', 'chunk_index', 'text']),
        ('entities',             true,  ARRAY['name']),
        ('entity_aliases',       true,  NULL),
        ('unit_entities',        true,  NULL),
        ('links',                true,  NULL),
        ('rooms',                true,  NULL),
        ('room_aliases',         true,  NULL),
        ('room_count_queue',     false, NULL),           -- the write triggers count the units
        ('room_merge_proposals', true,  ARRAY['from_room', 'into_room', 'proposed_at']),
        ('room_state',           true,  NULL),
        ('audit_log',            false, NULL),           -- never: the import itself is audited
        ('llm_calls',            true,  ARRAY['document_id', 'purpose', 'provider', 'model', 'at']),
        ('unit_versions',        true,  NULL),           -- a corrected unit's earlier texts (its history)
        ('forget_log',           false, NULL),           -- never: this database's own record of what it forgot
        ('retention_policies',   true,  ARRAY['room', 'hall', 'layer'])
    ) AS t(table_name, written, match_columns)
$$;
COMMENT ON FUNCTION rcll.import_tables() IS 'How an agent''s import (rcll.import_begin) treats each exported table: written (with new ids, references mapped) or counted only (grants, audit rows, statistics, count deltas), and the columns that make a stream row the same as an existing row of the target bank (on_conflict skip / replace).';

CREATE OR REPLACE FUNCTION rcll._import_refuse(field text, message text, hint text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION '%: %', field, message USING ERRCODE = 'RC008', COLUMN = field,
        HINT = coalesce(hint, 'Import a whole, unedited export stream (GET /export, rcll export).');
END
$$;
COMMENT ON FUNCTION rcll._import_refuse(text, text, text) IS 'Internal: refuse an import stream (SQLSTATE RC008, the field named) - nothing of it is written.';

CREATE OR REPLACE FUNCTION rcll._import_state()
RETURNS TABLE (bank_name text, bank_row jsonb, on_conflict text, counts jsonb)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF to_regclass('pg_temp.rcll_import_state') IS NULL THEN
        RAISE EXCEPTION 'import_begin: no import in progress in this transaction' USING ERRCODE = 'RC008', COLUMN = 'import_begin',
            HINT = 'Call rcll.import_begin(bank_row, on_conflict) first, in the same transaction.';
    END IF;
    RETURN QUERY EXECUTE 'SELECT s.bank_name, s.bank_row, s.on_conflict, s.counts FROM pg_temp.rcll_import_state s';
END
$$;
COMMENT ON FUNCTION rcll._import_state() IS 'Internal: the import in progress in this transaction (set by rcll.import_begin), or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll.import_begin(bank_row jsonb, on_conflict text DEFAULT 'error')
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    bname text := CASE WHEN jsonb_typeof(bank_row -> 'name') = 'string' THEN bank_row ->> 'name' END;
    t     record;
BEGIN
    IF on_conflict IS NULL OR on_conflict NOT IN ('error', 'skip', 'replace') THEN
        RAISE EXCEPTION 'on_conflict: % is not a conflict policy', coalesce(quote_literal(on_conflict), 'NULL')
            USING ERRCODE = 'RC001', COLUMN = 'on_conflict',
            HINT = 'Use error (the default: refuse a bank that exists), skip (keep what is there) or replace (overwrite it).';
    END IF;
    IF bank_row IS NULL OR jsonb_typeof(bank_row) <> 'object' OR bname IS NULL
       OR bname !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
        PERFORM rcll._import_refuse('banks.name', 'the stream''s banks row must be a JSON object with a bank name');
    END IF;
    IF bank_row ? 'settings' AND jsonb_typeof(bank_row -> 'settings') <> 'object' THEN
        PERFORM rcll._import_refuse('banks.settings', 'must be a JSON object');
    END IF;
    BEGIN
        PERFORM (bank_row ->> 'text_search_config')::regconfig, (bank_row ->> 'created_at')::timestamptz,
                (bank_row ->> 'description');
    EXCEPTION WHEN data_exception OR undefined_object THEN
        PERFORM rcll._import_refuse('banks', SQLERRM);
    END;
    IF on_conflict = 'error' AND EXISTS (SELECT 1 FROM rcll.banks b WHERE b.name = bname) THEN
        RAISE EXCEPTION 'bank: bank "%" already exists in this database', bname USING ERRCODE = 'RC004', COLUMN = 'bank',
            HINT = 'Import into a bank that does not exist yet, or choose on_conflict => ''skip'' (keep existing rows) or ''replace'' (overwrite them).';
    END IF;
    -- The stream is staged in temporary tables shaped like rcll's (their constraints check each
    -- row); nothing is written to rcll's tables before rcll.import_finish.
    DROP TABLE IF EXISTS pg_temp.rcll_import_state, pg_temp.rcll_import_ids;
    CREATE TEMP TABLE rcll_import_state (bank_name text, bank_row jsonb, on_conflict text, counts jsonb) ON COMMIT DROP;
    INSERT INTO rcll_import_state VALUES (bname, bank_row, on_conflict, '{"banks": 1}');
    CREATE TEMP TABLE rcll_import_ids (tbl text, old_id bigint, new_id bigint, matched boolean,
                                       PRIMARY KEY (tbl, old_id)) ON COMMIT DROP;
    FOR t IN SELECT i.table_name FROM rcll.import_tables() i WHERE i.written LOOP
        EXECUTE format('DROP TABLE IF EXISTS pg_temp.%I', 'rcll_import_' || t.table_name);
        EXECUTE format('CREATE TEMP TABLE %I (LIKE rcll.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS) ON COMMIT DROP',
                       'rcll_import_' || t.table_name, t.table_name);
    END LOOP;
    RETURN bname;
END
$$;
COMMENT ON FUNCTION rcll.import_begin(jsonb, text) IS 'Start an import of an export stream in this transaction into the bank its banks row names: created by rcll.import_finish if it does not exist; if it does, refused (on_conflict error, SQLSTATE RC004), or merged keeping (skip) or overwriting (replace) the rows it already holds. Nothing is written until rcll.import_finish. Returns the bank''s name.';

CREATE OR REPLACE FUNCTION rcll.import_rows(table_name text, rows jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st   record;
    t    record;
    n    bigint;
    col  text;
BEGIN
    SELECT * INTO st FROM rcll._import_state();
    SELECT i.* INTO t FROM rcll.import_tables() i WHERE i.table_name = import_rows.table_name;
    IF NOT FOUND THEN
        PERFORM rcll._import_refuse('table', format('%s is not a table of an export stream', coalesce(quote_literal(table_name), 'NULL')));
    END IF;
    IF table_name = 'banks' THEN
        PERFORM rcll._import_refuse('banks', 'an import holds exactly one banks row, its first line');
    END IF;
    IF rows IS NULL OR jsonb_typeof(rows) <> 'array'
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(rows) x WHERE jsonb_typeof(x) <> 'object') THEN
        PERFORM rcll._import_refuse(table_name, 'rows must be a JSON array of JSON objects (one per exported row)');
    END IF;
    n := jsonb_array_length(rows);
    EXECUTE 'UPDATE pg_temp.rcll_import_state SET counts = counts || jsonb_build_object($1::text, coalesce((counts ->> $1)::bigint, 0) + $2)'
        USING table_name, n;
    IF NOT t.written THEN
        RETURN 0;
    END IF;
    BEGIN
        -- bank_id is the target bank's, whatever the row says (0 until import_finish knows it).
        EXECUTE format('INSERT INTO pg_temp.%1$I SELECT (jsonb_populate_record(NULL::pg_temp.%1$I, x || ''{"bank_id": 0}'')).* '
                       'FROM jsonb_array_elements($1) x', 'rcll_import_' || table_name) USING rows;
    EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
        GET STACKED DIAGNOSTICS col = COLUMN_NAME;
        PERFORM rcll._import_refuse(table_name || coalesce('.' || nullif(col, ''), ''), SQLERRM);
    END;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.import_rows(text, jsonb) IS 'Stage a batch of one table''s rows of the stream rcll.import_begin started (a JSON array of export rows): each row typed and checked by the table''s own constraints, or the stream refused (SQLSTATE RC008, the table and column named). Rows of tables an import never writes (rcll.import_tables()) are counted only. Writes nothing to rcll''s tables. Returns the rows staged.';

CREATE OR REPLACE FUNCTION rcll._import_check()
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t    record;
    ix   record;
    k    text;
    v    text;
    bad  text;
    stage text;
BEGIN
    FOR t IN SELECT e.*, i.written FROM rcll.export_tables() e JOIN rcll.import_tables() i USING (table_name)
             WHERE i.written ORDER BY e.table_position LOOP
        stage := 'rcll_import_' || t.table_name;
        -- Every unique key of the table, on the stream's own values (ids before they are replaced).
        FOR ix IN SELECT (SELECT string_agg(format('s.%I', a.attname), ', ' ORDER BY k.i)
                          FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, i)
                          JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum) AS cols,
                         pg_get_expr(x.indpred, x.indrelid) AS pred
                  FROM pg_index x WHERE x.indrelid = format('rcll.%I', t.table_name)::regclass
                    AND x.indisunique AND x.indexprs IS NULL LOOP
            EXECUTE format('SELECT row(%s)::text FROM pg_temp.%I s %s GROUP BY %s HAVING count(*) > 1 LIMIT 1',
                           ix.cols, stage, coalesce('WHERE ' || ix.pred, ''), ix.cols) INTO bad;
            IF bad IS NOT NULL THEN
                PERFORM rcll._import_refuse(t.table_name, format('two rows of the stream have the same key %s', bad));
            END IF;
        END LOOP;
        -- Every reference names a row of this stream: never another bank's, never one it lacks.
        FOR k, v IN SELECT r.key, r.value #>> '{}' FROM jsonb_each(t.refs) r LOOP
            EXECUTE format('SELECT s.%1$I::text FROM pg_temp.%2$I s WHERE s.%1$I IS NOT NULL AND NOT EXISTS '
                           '(SELECT 1 FROM pg_temp.%3$I r WHERE r.%4$I = s.%1$I) LIMIT 1',
                           k, stage, 'rcll_import_' || v, (SELECT e.id_column FROM rcll.export_tables() e WHERE e.table_name = v))
                INTO bad;
            IF bad IS NOT NULL THEN
                PERFORM rcll._import_refuse(t.table_name || '.' || k,
                                            format('refers to %s %s, which the stream does not hold', v, bad));
            END IF;
        END LOOP;
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll._import_check() IS 'Internal: refuse a staged import stream (RC008) in which two rows share a unique key of their table or a reference names a row the stream does not hold.';

CREATE OR REPLACE FUNCTION rcll._import_value(table_name text, col text, bank_id integer)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- The SQL expression for one column of a staged row (alias s) as the target bank holds it.
    SELECT CASE
        WHEN col = 'bank_id' THEN bank_id || '::integer'      -- a cast, not a bare number: ORDER BY reads those as positions
        WHEN col = e.id_column THEN 'm.new_id'
        WHEN table_name = 'memory_units' AND col = 'superseded_by' THEN 'NULL'     -- once every unit exists
        WHEN table_name = 'rooms' AND col = 'fact_count' THEN '0'                  -- the units' triggers count
        WHEN e.refs ? col THEN format('(SELECT r.new_id FROM pg_temp.rcll_import_ids r WHERE r.tbl = %L AND r.old_id = s.%I)',
                                     e.refs ->> col, col)
        ELSE format('s.%I', col)
    END
    FROM rcll.export_tables() e WHERE e.table_name = _import_value.table_name
$$;
COMMENT ON FUNCTION rcll._import_value(text, text, integer) IS 'Internal: the expression an import writes for one column of a staged row (alias s): the target bank, the row''s new id (m.new_id), a reference mapped to the new id of the stream row it names, or the staged value.';

CREATE OR REPLACE FUNCTION rcll._import_table(table_name text, bank_id integer, on_conflict text, merge boolean)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    e      record;
    match  text[];
    rel    text := format('rcll.%I', table_name);
    stage  text := format('pg_temp.%I', 'rcll_import_' || table_name);
    cols   text;
    vals   text;
    upd    text;
    pk     text;
    pkv    text;
    cond   text;
    mapped text;
    n      bigint := 0;
    -- Never overwritten by a replace: who wrote a row, what is derived from it, what is counted.
    keep   text[] := ARRAY['author', 'author_source', 'provenance', 'lexical', 'lexical_length', 'superseded_by',
                           'fact_count', 'content', 'content_hash', 'created_at'];
BEGIN
    SELECT x.* INTO e FROM rcll.export_tables() x WHERE x.table_name = _import_table.table_name;
    SELECT i.match_columns INTO match FROM rcll.import_tables() i WHERE i.table_name = _import_table.table_name;
    SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum),
           string_agg(rcll._import_value(table_name, a.attname, bank_id), ', ' ORDER BY a.attnum)
    INTO cols, vals
    FROM pg_attribute a WHERE a.attrelid = rel::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';

    IF e.id_column IS NOT NULL THEN
        IF merge THEN
            -- The rows the bank already holds (same match columns) keep their id.
            -- = where the column cannot be NULL (so the join can hash), IS NOT DISTINCT FROM elsewhere.
            -- The staged rows' values as the bank would hold them are made in a subquery over the
            -- staging tables alone (on one node it is flattened into the join): on a Citus cluster
            -- a join condition with the bank's table may not read a local table (the ids mapped).
            SELECT string_agg(format(CASE WHEN a.attnotnull THEN 'y.%1$I = s.%1$I' ELSE 'y.%1$I IS NOT DISTINCT FROM s.%1$I' END, c), ' AND '),
                   string_agg(format('%s AS %I', rcll._import_value(table_name, c, bank_id), c), ', ')
            INTO cond, mapped FROM unnest(match) AS c JOIN pg_attribute a ON a.attrelid = rel::regclass AND a.attname = c;
            EXECUTE format('INSERT INTO pg_temp.rcll_import_ids (tbl, old_id, new_id, matched) '
                           'SELECT DISTINCT ON (s.%2$I) %1$L, s.%2$I, y.%2$I, true '
                           'FROM (SELECT s.%2$I, %7$s FROM %3$s s) s JOIN %4$s y '
                           'ON y.bank_id = %5$s AND %6$s ORDER BY s.%2$I, y.%2$I',
                           table_name, e.id_column, stage, rel, bank_id, cond, mapped);
            IF on_conflict = 'replace' THEN
                -- The new values made from the staging tables alone, as above.
                SELECT string_agg(format('%1$I = s.%1$I', a.attname), ', '),
                       string_agg(format('%s AS %I', rcll._import_value(table_name, a.attname, bank_id), a.attname), ', ')
                INTO upd, mapped
                FROM pg_attribute a WHERE a.attrelid = rel::regclass AND a.attnum > 0 AND NOT a.attisdropped
                  AND a.attgenerated = '' AND a.attname NOT IN ('bank_id', e.id_column) AND NOT a.attname = ANY (match)
                  AND NOT a.attname = ANY (keep);
                IF upd IS NOT NULL THEN
                    EXECUTE format('UPDATE %1$s y SET %2$s FROM (SELECT m.new_id AS rcll_new_id, %7$s FROM %3$s s '
                                   'JOIN pg_temp.rcll_import_ids m ON m.tbl = %4$L AND m.old_id = s.%5$I AND m.matched) s '
                                   'WHERE y.%5$I = s.rcll_new_id AND y.bank_id = %6$s',
                                   rel, upd, stage, table_name, e.id_column, bank_id, mapped);
                END IF;
            END IF;
        END IF;
        -- Every other row: a new id, drawn only now that the whole stream has been accepted.
        EXECUTE format('INSERT INTO pg_temp.rcll_import_ids (tbl, old_id, new_id, matched) '
                       'SELECT %1$L, s.old, nextval(%2$L), false FROM (SELECT s.%3$I AS old FROM %4$s s '
                       'WHERE NOT EXISTS (SELECT 1 FROM pg_temp.rcll_import_ids m WHERE m.tbl = %1$L AND m.old_id = s.%3$I) '
                       'ORDER BY s.%3$I) s',
                       table_name, pg_get_serial_sequence(rel, e.id_column), e.id_column, stage);
        ANALYZE pg_temp.rcll_import_ids;
        EXECUTE format('INSERT INTO %1$s (%2$s) OVERRIDING SYSTEM VALUE SELECT %3$s FROM %4$s s '
                       'JOIN pg_temp.rcll_import_ids m ON m.tbl = %5$L AND m.old_id = s.%6$I AND NOT m.matched '
                       'ORDER BY m.new_id',
                       rel, cols, vals, stage, table_name, e.id_column);
        GET DIAGNOSTICS n = ROW_COUNT;
    ELSE
        -- A natural key: the mapped key decides; keys the bank (or this import's triggers) already
        -- wrote are kept (skip) or overwritten (error: the stream's own rows; replace).
        SELECT string_agg(format('%I', a.attname), ', ' ORDER BY array_position(c.conkey, a.attnum)),
               string_agg(rcll._import_value(table_name, a.attname, bank_id), ', ' ORDER BY array_position(c.conkey, a.attnum))
        INTO pk, pkv
        FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
        WHERE c.conrelid = rel::regclass AND c.contype = 'p';
        SELECT string_agg(format('%I = excluded.%I', a.attname, a.attname), ', ')
        INTO upd
        FROM pg_attribute a WHERE a.attrelid = rel::regclass AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attgenerated = '' AND NOT a.attname = ANY (string_to_array(replace(pk, '"', ''), ', '))
          AND NOT a.attname = ANY (keep);
        -- Counted by what it returns: a Citus coordinator's row count of an INSERT ... SELECT is
        -- the rows it sent, the ones ON CONFLICT kept out too.
        EXECUTE format('WITH w AS (INSERT INTO %1$s AS y (%2$s) SELECT DISTINCT ON (%3$s) %4$s FROM %5$s s ORDER BY %3$s %6$s '
                       'RETURNING 1) SELECT count(*) FROM w',
                       rel, cols, pkv, vals, stage,
                       CASE WHEN on_conflict = 'skip' OR upd IS NULL THEN 'ON CONFLICT DO NOTHING'
                            ELSE format('ON CONFLICT (%s) DO UPDATE SET %s WHERE y.bank_id = %s', pk, upd, bank_id) END)
        INTO n;
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._import_table(text, integer, text, boolean) IS 'Internal: write one staged table of an accepted import into the target bank: rows matching what the bank holds (merge: skip / replace) keep their id, every other row gets a new one, references follow; natural-key rows are inserted, kept or overwritten by on_conflict - only ever rows of the target bank. Returns the rows written.';

CREATE OR REPLACE FUNCTION rcll.import_finish(counts jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st      record;
    t       record;
    b       integer;
    fresh   boolean;
    n       bigint;
    written jsonb := '{}';
    ignored jsonb := '{}';
BEGIN
    SELECT * INTO st FROM rcll._import_state();
    -- 1. The whole stream, before anything is written: the trailer's counts, then keys and references.
    IF counts IS NULL OR jsonb_typeof(counts) <> 'object' THEN
        PERFORM rcll._import_refuse('trailer', 'the stream has no trailer (per-table row counts): it was cut or is not an export');
    END IF;
    FOR t IN SELECT e.table_name FROM rcll.export_tables() e ORDER BY e.table_position LOOP
        IF jsonb_typeof(counts -> t.table_name) IS DISTINCT FROM 'number' THEN
            PERFORM rcll._import_refuse('trailer.rows.' || t.table_name, 'the trailer gives no row count for this table');
        END IF;
        IF (counts ->> t.table_name)::numeric <> coalesce((st.counts ->> t.table_name)::bigint, 0) THEN
            PERFORM rcll._import_refuse('trailer.rows.' || t.table_name,
                format('the trailer says %s rows, the stream holds %s: it was cut or edited',
                       counts ->> t.table_name, coalesce((st.counts ->> t.table_name)::bigint, 0)));
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM jsonb_object_keys(counts) k WHERE k NOT IN (SELECT e.table_name FROM rcll.export_tables() e)) THEN
        PERFORM rcll._import_refuse('trailer.rows', 'names a table an export does not hold');
    END IF;
    -- Temporary tables are never analysed by autovacuum: without statistics the planner would
    -- join 50k staged rows by nested loops.
    FOR t IN SELECT i.table_name FROM rcll.import_tables() i WHERE i.written LOOP
        EXECUTE format('ANALYZE pg_temp.%I', 'rcll_import_' || t.table_name);
    END LOOP;
    PERFORM rcll._import_check();

    -- 2. The target bank: the only bank this import writes.
    SELECT x.bank_id INTO b FROM rcll.banks x WHERE x.name = st.bank_name FOR UPDATE;
    fresh := b IS NULL;
    BEGIN
        PERFORM set_config('rcll.importing', 'on', true);
        IF fresh THEN
            INSERT INTO rcll.banks (name, description, text_search_config, settings, created_at)
            VALUES (st.bank_name, st.bank_row ->> 'description',
                    coalesce((st.bank_row ->> 'text_search_config')::regconfig, 'english'),
                    coalesce(st.bank_row -> 'settings', '{}'), coalesce((st.bank_row ->> 'created_at')::timestamptz, now()))
            RETURNING bank_id INTO b;
        ELSIF st.on_conflict = 'error' THEN
            RAISE EXCEPTION 'bank: bank "%" already exists in this database', st.bank_name USING ERRCODE = 'RC004', COLUMN = 'bank',
                HINT = 'Choose on_conflict => ''skip'' (keep existing rows) or ''replace'' (overwrite them).';
        ELSIF st.on_conflict = 'replace' THEN
            UPDATE rcll.banks x SET description = st.bank_row ->> 'description', settings = coalesce(st.bank_row -> 'settings', x.settings)
            WHERE x.bank_id = b;
        END IF;
        -- 3. Every table, in export order: new ids in this bank, references mapped.
        FOR t IN SELECT e.table_name, i.written FROM rcll.export_tables() e JOIN rcll.import_tables() i USING (table_name)
                 WHERE e.table_name <> 'banks' ORDER BY e.table_position LOOP
            -- A correction's history and the bank's policies are the administrator's tables (an
            -- agent writes them through rcll.correct and rcll.set_retention, as the owner): a role
            -- that may not insert them imports the rest and has them counted, not refused.
            IF t.written AND (t.table_name NOT IN ('unit_versions', 'retention_policies')
                              OR has_table_privilege(format('rcll.%I', t.table_name), 'INSERT')) THEN
                n := rcll._import_table(t.table_name, b, st.on_conflict, NOT fresh AND st.on_conflict <> 'error');
                written := written || jsonb_build_object(t.table_name, n);
            ELSIF coalesce((st.counts ->> t.table_name)::bigint, 0) > 0 THEN
                ignored := ignored || jsonb_build_object(t.table_name, (st.counts ->> t.table_name)::bigint);
            END IF;
        END LOOP;
        -- Policies written: the bank's units expire by them (and by their own expiry).
        IF coalesce((written ->> 'retention_policies')::bigint, 0) > 0 THEN
            PERFORM rcll._apply_retention(b, NULL, NULL, NULL);
        END IF;
        -- Supersession, once every unit of the stream has its id here.
        -- (The staging tables in a subquery of their own, flattened on one node: on a Citus
        -- cluster the bank's table joins the subquery's rows, not the local tables.)
        UPDATE rcll.memory_units u SET superseded_by = x.superseded_by
        FROM (SELECT m.new_id AS unit_id, m2.new_id AS superseded_by
              FROM pg_temp.rcll_import_memory_units s
              JOIN pg_temp.rcll_import_ids m ON m.tbl = 'memory_units' AND m.old_id = s.unit_id
              JOIN pg_temp.rcll_import_ids m2 ON m2.tbl = 'memory_units' AND m2.old_id = s.superseded_by
              WHERE (NOT m.matched OR st.on_conflict = 'replace') AND m2.new_id <> m.new_id) x
        WHERE u.unit_id = x.unit_id AND u.bank_id = b AND u.superseded_by IS DISTINCT FROM x.superseded_by;
        PERFORM set_config('rcll.importing', '', true);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'bank: a row of this import already exists in bank "%" (%)', st.bank_name, SQLERRM
            USING ERRCODE = 'RC004', COLUMN = 'bank',
            HINT = 'Choose on_conflict => ''skip'' (keep existing rows) or ''replace'' (overwrite them).';
    WHEN data_exception OR integrity_constraint_violation OR cardinality_violation THEN
        PERFORM rcll._import_refuse('rows', SQLERRM);
    END;

    PERFORM rcll.refresh_bank_stats(st.bank_name);
    -- The caller's act, in the bank it wrote (rcll._actor(): the agent the server authenticated).
    PERFORM rcll._audit(b, 'import', jsonb_build_object('bank', st.bank_name),
                        jsonb_build_object('on_conflict', st.on_conflict, 'fresh', fresh, 'rows', written,
                                           'not_imported', ignored, 'stream_rows', st.counts));
    RETURN jsonb_build_object('bank', st.bank_name, 'bank_id', b, 'fresh', fresh, 'rows', written, 'not_imported', ignored);
END
$$;
COMMENT ON FUNCTION rcll.import_finish(jsonb) IS 'Finish the import rcll.import_begin started: refuse the stream (SQLSTATE RC008, nothing written, no id drawn) unless counts (the trailer''s per-table row counts) match it, its keys are unique and every reference names one of its own rows; then write it into the one target bank with new ids (references mapped, authors as provenance only, triggers running as for any write), refresh the bank''s BM25 statistics and audit the import as the caller''s act. Returns the bank, rows written per table and rows not imported (grants, audit, statistics, count deltas).';
