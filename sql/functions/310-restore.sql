-- Restore: load an export back exactly, for the store's administrator only (rcll import --restore).
--
--   BEGIN;
--   SELECT rcll.restore_begin(bank_row => '<the banks.jsonl line>', on_conflict => 'error', max_ids => '<manifest max_ids>');
--   SELECT rcll.restore_rows('documents', '[<rows>]');  -- ... every table in rcll.export_tables() order
--   SELECT rcll.restore_finish();
--   COMMIT;
--
-- Rows are written as exported: the write-path triggers (janitor, author resolution, room counts)
-- are switched off for the insert - they already ran when the rows were first written, and running
-- them again would rewrite authors, rooms and tags. Ids are kept; an id another bank already uses
-- is renumbered, and every column holding it (rcll.export_tables().refs) follows. The stream is
-- trusted: authors, grants and audit rows come back as they were, and ALTER TABLE ... DISABLE
-- TRIGGER locks the tables (every bank's writes wait until the restore commits). So it is refused
-- to anyone but a member of the tables' owner role; an agent's import is rcll.import_begin
-- (315-import.sql), which trusts nothing in the stream.

CREATE OR REPLACE FUNCTION rcll._restore_state()
RETURNS TABLE (bank_id integer, bank_name text, fresh boolean, on_conflict text)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF to_regclass('pg_temp.rcll_restore_state') IS NULL THEN
        RAISE EXCEPTION 'restore_begin: no restore in progress in this session' USING ERRCODE = 'RC008', COLUMN = 'restore_begin',
            HINT = 'Call rcll.restore_begin(bank_row, on_conflict, max_ids) first, in the same transaction.';
    END IF;
    RETURN QUERY EXECUTE 'SELECT s.bank_id, s.bank_name, s.fresh, s.on_conflict FROM pg_temp.rcll_restore_state s';
END
$$;
COMMENT ON FUNCTION rcll._restore_state() IS 'Internal: the restore in progress in this session (set by rcll.restore_begin), or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll._restore_ref(table_name text, old jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n bigint;
BEGIN
    IF old IS NULL OR jsonb_typeof(old) = 'null' THEN
        RETURN old;
    END IF;
    EXECUTE 'SELECT m.new_id FROM pg_temp.rcll_restore_ids m WHERE m.tbl = $1 AND m.old_id = $2'
        INTO n USING table_name, (old #>> '{}')::bigint;
    RETURN coalesce(to_jsonb(n), old);
END
$$;
COMMENT ON FUNCTION rcll._restore_ref(text, jsonb) IS 'Internal: the id an exported identity of table_name has in this database (renumbered when another bank held it, else unchanged).';

CREATE OR REPLACE FUNCTION rcll._restore_execute(table_name text, stmt text, rows jsonb, bank_id integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    rel regclass := format('rcll.%I', table_name)::regclass;
    trg text[];
    t   text;
    n   bigint;
BEGIN
    -- The rows are written exactly as exported: the write-path triggers are off for the statement.
    -- Only the triggers that are on now are switched off, and exactly those are switched back on:
    -- a trigger an administrator disabled stays disabled. The copy into rcll.unit_lexicon stays
    -- on: it is not a write-path decision but the lexical channel's view of the rows, and must
    -- hold every imported unit.
    SELECT coalesce(array_agg(g.tgname::text ORDER BY g.tgname), '{}') INTO trg
    FROM pg_trigger g WHERE g.tgrelid = rel AND NOT g.tgisinternal AND g.tgenabled <> 'D'
      AND g.tgname NOT IN ('units_lexicon_inserted', 'units_lexicon_changed');
    FOREACH t IN ARRAY trg LOOP
        EXECUTE format('ALTER TABLE %s DISABLE TRIGGER %I', rel, t);
    END LOOP;
    BEGIN
        EXECUTE stmt USING rows, bank_id;
        GET DIAGNOSTICS n = ROW_COUNT;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'on_conflict: a % row of this import already exists (%)', table_name, SQLERRM
            USING ERRCODE = 'RC004', COLUMN = 'on_conflict',
            HINT = 'Import into an empty database, or choose on_conflict => ''skip'' (keep existing rows) or ''replace'' (overwrite them).';
    END;
    FOREACH t IN ARRAY trg LOOP
        EXECUTE format('ALTER TABLE %s ENABLE TRIGGER %I', rel, t);
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._restore_execute(text, text, jsonb, integer) IS 'Internal: run one statement of an import ($1 the rows, $2 the bank id) on an rcll table with its enabled user triggers switched off, and exactly those on again; a unique violation is reported as the import''s on_conflict error. Needs the table owner; transactional, so a failed import leaves the triggers as they were. Returns the rows written.';

CREATE OR REPLACE FUNCTION rcll._restore_sequence(table_name text, id_column text, at_least bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    seq  text := pg_get_serial_sequence(format('rcll.%I', table_name), id_column);
    top  bigint;
    last bigint;
    called boolean;
    g    integer;
    lo   bigint;
    hi   bigint;
BEGIN
    IF rcll._bank_pinned() THEN
        -- On a Citus cluster each node draws a table's ids from a range of its own (node group g:
        -- from g * 2^48), from its own copy of the sequence: each copy is moved past the largest id
        -- in its node's range, the worker's by a command on the workers that only it runs.
        FOR g IN SELECT DISTINCT n.groupid FROM pg_catalog.pg_dist_node n WHERE n.noderole = 'primary' ORDER BY 1 LOOP
            lo := g::bigint << 48;
            hi := (g::bigint + 1) << 48;
            EXECUTE format('SELECT max(x.%I)::bigint FROM rcll.%I x WHERE x.%I >= $1 AND x.%I < $2',
                           id_column, table_name, id_column, id_column) INTO top USING lo, hi;
            top := CASE WHEN at_least >= lo AND at_least < hi THEN greatest(top, at_least) ELSE top END;
            CONTINUE WHEN coalesce(top, 0) < 1;
            IF g = 0 THEN
                PERFORM setval(seq, greatest(top, (SELECT s.last_value FROM pg_catalog.pg_sequences s
                                                    WHERE format('%I.%I', s.schemaname, s.sequencename)::regclass = seq::regclass)), true);
            ELSE
                PERFORM pg_catalog.run_command_on_workers(format(
                    'SELECT setval(%L, %s, true) FROM pg_dist_local_group l WHERE l.groupid = %s '
                    'AND coalesce((SELECT s.last_value FROM pg_sequences s WHERE format(''%%I.%%I'', s.schemaname, s.sequencename)::regclass = %L::regclass), 0) < %s',
                    seq, top, g, seq, top));
            END IF;
        END LOOP;
        RETURN;
    END IF;
    top := rcll._max_id(table_name, id_column);
    EXECUTE format('SELECT s.last_value, s.is_called FROM %s s', seq) INTO last, called;
    top := greatest(coalesce(top, 0), coalesce(at_least, 0), CASE WHEN called THEN last ELSE last - 1 END);
    IF top > 0 THEN
        PERFORM setval(seq, top, true);
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._restore_sequence(text, text, bigint) IS 'Internal: move an identity sequence past the table''s largest id and at_least (never backwards); on a Citus cluster each node''s copy past the largest id in its node''s range.';

CREATE OR REPLACE FUNCTION rcll.restore_begin(bank_row jsonb, on_conflict text DEFAULT 'error', max_ids jsonb DEFAULT '{}')
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    bname  text := bank_row ->> 'name';
    b      integer;
    fresh  boolean;
    t      record;
BEGIN
    IF NOT pg_has_role(session_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = 'rcll.memory_units'::regclass), 'MEMBER') THEN
        RAISE EXCEPTION 'restore: only the owner of the rcll tables may restore (it keeps authors, grants and ids as the stream says)'
            USING ERRCODE = 'RC006', COLUMN = 'restore',
            HINT = 'Import with rcll.import_begin (rcll import without --restore), which writes into one bank and trusts nothing in the stream.';
    END IF;
    IF on_conflict IS NULL OR on_conflict NOT IN ('error', 'skip', 'replace') THEN
        RAISE EXCEPTION 'on_conflict: % is not a conflict policy', coalesce(quote_literal(on_conflict), 'NULL')
            USING ERRCODE = 'RC001', COLUMN = 'on_conflict',
            HINT = 'Use error (the default: refuse rows that already exist), skip (keep what is there) or replace (overwrite it).';
    END IF;
    IF bank_row IS NULL OR jsonb_typeof(bank_row) <> 'object' OR bname IS NULL THEN
        RAISE EXCEPTION 'bank_row: must be the exported banks row (a JSON object with a name)' USING ERRCODE = 'RC008', COLUMN = 'bank_row',
            HINT = 'Pass the one line of banks.jsonl from the export.';
    END IF;
    IF max_ids IS NULL OR jsonb_typeof(max_ids) <> 'object' THEN
        RAISE EXCEPTION 'max_ids: must be a JSON object' USING ERRCODE = 'RC008', COLUMN = 'max_ids',
            HINT = 'Pass the manifest''s max_ids, or ''{}''.';
    END IF;
    -- A fresh slate for this session's import bookkeeping.
    DROP TABLE IF EXISTS pg_temp.rcll_restore_state, pg_temp.rcll_restore_ids, pg_temp.rcll_restore_pending;
    CREATE TEMP TABLE rcll_restore_state (bank_id integer, bank_name text, fresh boolean, on_conflict text,
                                         counts jsonb NOT NULL DEFAULT '{}');
    CREATE TEMP TABLE rcll_restore_ids (tbl text, old_id bigint, new_id bigint, PRIMARY KEY (tbl, old_id));
    CREATE TEMP TABLE rcll_restore_pending (unit_id bigint PRIMARY KEY, superseded_by bigint NOT NULL);

    SELECT x.bank_id INTO b FROM rcll.banks x WHERE x.name = bname FOR UPDATE;
    fresh := b IS NULL;
    IF NOT fresh AND on_conflict = 'error' THEN
        RAISE EXCEPTION 'bank: bank "%" already exists in this database', bname USING ERRCODE = 'RC004', COLUMN = 'bank',
            HINT = 'Restore into an empty database, or choose on_conflict => ''skip'' (keep existing rows) or ''replace'' (overwrite them).';
    END IF;
    -- On a Citus cluster the sequences below are moved past the largest id of every bank (a read
    -- of every shard, in parallel by default), then the banks row is written - to a reference
    -- table, which Citus refuses after a parallel read in one transaction ("cannot modify table
    -- banks because there was a parallel operation on a distributed table"): one connection a node.
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true) WHERE rcll._bank_pinned();
    -- Only once the restore is accepted: setval is not rolled back with a refused transaction.
    FOR t IN SELECT * FROM rcll.export_tables() e WHERE e.id_column IS NOT NULL LOOP
        PERFORM rcll._restore_sequence(t.table_name, t.id_column, (max_ids ->> t.table_name)::bigint);
    END LOOP;
    IF NOT fresh THEN
        IF on_conflict = 'replace' THEN
            UPDATE rcll.banks x SET description = r.description, text_search_config = r.text_search_config,
                                    settings = r.settings, created_at = r.created_at
            FROM jsonb_populate_record(NULL::rcll.banks, bank_row) r WHERE x.bank_id = b;
        END IF;
    ELSE
        b := (bank_row ->> 'bank_id')::integer;
        IF b IS NULL OR EXISTS (SELECT 1 FROM rcll.banks x WHERE x.bank_id = b) THEN
            b := nextval(pg_get_serial_sequence('rcll.banks', 'bank_id'));
        END IF;
        INSERT INTO rcll.banks OVERRIDING SYSTEM VALUE
        SELECT (jsonb_populate_record(NULL::rcll.banks, bank_row || jsonb_build_object('bank_id', b))).*;
    END IF;
    INSERT INTO pg_temp.rcll_restore_state (bank_id, bank_name, fresh, on_conflict) VALUES (b, bname, fresh, on_conflict);
    RETURN b;
END
$$;
COMMENT ON FUNCTION rcll.restore_begin(jsonb, text, jsonb) IS 'Start restoring one exported bank in this transaction, exactly (the store''s owner only: triggers off, ids, authors, grants and audit rows as exported): creates the bank from its exported row (keeping its id when free) or, when a bank of that name exists, refuses (on_conflict error), keeps it (skip) or overwrites its settings (replace). max_ids (the manifest''s) moves sequences past every exported id once the restore is accepted. Follow with rcll.restore_rows per table and rcll.restore_finish. Returns the bank id.';

CREATE OR REPLACE FUNCTION rcll.restore_rows(table_name text, rows jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st     record;
    t      record;
    rel    text;
    cols   text;
    pk     text;
    upd    text;
    fix    text;
    seq    text;
    stmt   text;
    n      bigint := 0;
    k      text;
    v      text;
    taken  bigint[];
BEGIN
    SELECT * INTO st FROM rcll._restore_state();
    SELECT e.* INTO t FROM rcll._export_table(table_name) e;
    IF table_name = 'banks' THEN
        RAISE EXCEPTION 'table_name: the banks row is imported by rcll.restore_begin' USING ERRCODE = 'RC008', COLUMN = 'table_name',
            HINT = 'Pass the banks row to rcll.restore_begin and every other table to rcll.restore_rows.';
    END IF;
    IF rows IS NULL OR jsonb_typeof(rows) <> 'array' THEN
        RAISE EXCEPTION 'rows: must be a JSON array of exported rows' USING ERRCODE = 'RC008', COLUMN = 'rows',
            HINT = 'Pass lines of <table>.jsonl as one JSON array.';
    END IF;
    IF jsonb_array_length(rows) = 0 THEN
        RETURN 0;
    END IF;
    -- Count deltas not yet folded belong to the exported rooms; into an existing bank the counts
    -- are recounted by import_finish instead.
    IF table_name = 'room_count_queue' AND NOT st.fresh THEN
        RETURN 0;
    END IF;
    rel := format('rcll.%I', t.table_name);

    SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum),
           string_agg(format('%I = excluded.%I', a.attname, a.attname), ', ' ORDER BY a.attnum)
               FILTER (WHERE a.attidentity = '' AND a.attname <> 'bank_id'
                       AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = a.attrelid
                                       AND c.contype = 'p' AND a.attnum = ANY (c.conkey)))
    INTO cols, upd
    FROM pg_attribute a WHERE a.attrelid = rel::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
    SELECT string_agg(format('%I', a.attname), ', ' ORDER BY array_position(c.conkey, a.attnum))
    INTO pk
    FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
    WHERE c.conrelid = rel::regclass AND c.contype = 'p';

    -- 1. Identities another bank already uses are renumbered; a document or entity this bank
    --    already has under its natural key (content hash, name) maps onto the existing row.
    IF t.id_column IS NOT NULL THEN
        seq := pg_get_serial_sequence(rel, t.id_column);
        IF t.table_name = 'documents' AND NOT st.fresh THEN
            INSERT INTO pg_temp.rcll_restore_ids (tbl, old_id, new_id)
            SELECT 'documents', (x ->> 'document_id')::bigint, d.document_id
            FROM jsonb_array_elements(rows) x
            JOIN rcll.documents d ON d.bank_id = st.bank_id AND d.content_hash = decode(substr(x ->> 'content_hash', 3), 'hex')
            WHERE d.document_id <> (x ->> 'document_id')::bigint
            ON CONFLICT DO NOTHING;
        ELSIF t.table_name = 'entities' AND NOT st.fresh THEN
            INSERT INTO pg_temp.rcll_restore_ids (tbl, old_id, new_id)
            SELECT 'entities', (x ->> 'entity_id')::bigint, e.entity_id
            FROM jsonb_array_elements(rows) x
            JOIN rcll.entities e ON e.bank_id = st.bank_id AND e.name = x ->> 'name'
            WHERE e.entity_id <> (x ->> 'entity_id')::bigint
            ON CONFLICT DO NOTHING;
        END IF;
        -- The ids of the batch another bank holds, read apart from the session's own tables (Citus
        -- refuses a statement joining a temporary table with a distributed one).
        EXECUTE format('SELECT coalesce(array_agg(DISTINCT y.%I), ''{}'') FROM %s y WHERE y.%I = ANY ($1) AND y.bank_id <> $2',
                       t.id_column, rel, t.id_column)
            INTO taken USING ARRAY(SELECT DISTINCT (x ->> t.id_column)::bigint FROM jsonb_array_elements(rows) x), st.bank_id;
        INSERT INTO pg_temp.rcll_restore_ids (tbl, old_id, new_id)
        SELECT t.table_name, s.old, nextval(seq::regclass) FROM unnest(taken) AS s(old)
        WHERE NOT EXISTS (SELECT 1 FROM pg_temp.rcll_restore_ids m WHERE m.tbl = t.table_name AND m.old_id = s.old)
        ORDER BY s.old;
    END IF;

    -- 2. Each row as this database will hold it: this bank's id, identities mapped.
    fix := format('x || jsonb_build_object(%L, %s', 'bank_id', st.bank_id);
    IF t.id_column IS NOT NULL THEN
        fix := fix || format(', %L, rcll._restore_ref(%L, x -> %L)', t.id_column, t.table_name, t.id_column);
    END IF;
    FOR k, v IN SELECT r.key, r.value #>> '{}' FROM jsonb_each(t.refs) r LOOP
        IF t.table_name = 'memory_units' AND k = 'superseded_by' THEN
            fix := fix || ', ''superseded_by'', NULL';   -- set by import_finish, once every unit exists
        ELSE
            fix := fix || format(', %L, rcll._restore_ref(%L, x -> %L)', k, v, k);
        END IF;
    END LOOP;
    fix := fix || ')';
    IF t.table_name = 'memory_units' THEN
        INSERT INTO pg_temp.rcll_restore_pending (unit_id, superseded_by)
        SELECT (rcll._restore_ref('memory_units', x -> 'unit_id') #>> '{}')::bigint, (x ->> 'superseded_by')::bigint
        FROM jsonb_array_elements(rows) x WHERE x ->> 'superseded_by' IS NOT NULL
        ON CONFLICT (unit_id) DO UPDATE SET superseded_by = excluded.superseded_by;
    END IF;

    stmt := format('INSERT INTO %s AS y (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM ('
                   'SELECT (jsonb_populate_record(NULL::%s, %s)).* FROM jsonb_array_elements($1) x) r',
                   rel, cols, cols, rel, fix);
    IF st.on_conflict = 'skip' THEN
        stmt := stmt || ' ON CONFLICT DO NOTHING';
    ELSIF st.on_conflict = 'replace' AND pk IS NOT NULL AND upd IS NULL THEN
        stmt := stmt || ' ON CONFLICT DO NOTHING';          -- every column is key: nothing to replace
    ELSIF st.on_conflict = 'replace' AND pk IS NOT NULL THEN
        stmt := stmt || format(' ON CONFLICT (%s) DO UPDATE SET %s', pk, upd);
    END IF;

    n := rcll._restore_execute(t.table_name, stmt, rows, st.bank_id);
    EXECUTE 'UPDATE pg_temp.rcll_restore_state SET counts = counts || jsonb_build_object($1::text, coalesce((counts ->> $1)::bigint, 0) + $2)'
        USING t.table_name, n;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.restore_rows(text, jsonb) IS 'Restore a batch of exported rows (a JSON array of rcll.export_rows lines) of one table into the bank rcll.restore_begin started, exactly as exported: write-path triggers off, ids kept unless another bank holds them (then renumbered consistently), conflicts handled by the import''s on_conflict. Returns the number of rows written.';

CREATE OR REPLACE FUNCTION rcll.restore_finish()
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st     record;
    t      record;
    counts jsonb;
    missing bigint;
    pairs  jsonb;
BEGIN
    SELECT * INTO st FROM rcll._restore_state();
    -- Supersession links, now that every unit of the import exists: the pairs (unit, the unit
    -- superseding it, as this database numbers them) read from the session's table first - Citus
    -- refuses a statement joining a temporary table with a distributed one.
    EXECUTE 'SELECT coalesce(jsonb_agg(jsonb_build_array(p.unit_id, rcll._restore_ref(''memory_units'', to_jsonb(p.superseded_by))) '
            'ORDER BY p.unit_id), ''[]'') FROM pg_temp.rcll_restore_pending p'
        INTO pairs;
    SELECT count(*) INTO missing FROM jsonb_array_elements(pairs) p
    WHERE NOT EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.bank_id = st.bank_id AND u.unit_id = (p ->> 1)::bigint);
    IF missing > 0 THEN
        RAISE EXCEPTION 'memory_units: % unit(s) are superseded by units the import does not contain', missing
            USING ERRCODE = 'RC008', COLUMN = 'memory_units', HINT = 'Import every table of the export (memory_units.jsonl in full).';
    END IF;
    PERFORM rcll._restore_execute('memory_units',
        'UPDATE rcll.memory_units u SET superseded_by = (p ->> 1)::bigint '
        'FROM jsonb_array_elements($1) p WHERE u.bank_id = $2 AND u.unit_id = (p ->> 0)::bigint', pairs, st.bank_id);

    FOR t IN SELECT * FROM rcll.export_tables() e WHERE e.id_column IS NOT NULL LOOP
        PERFORM rcll._restore_sequence(t.table_name, t.id_column, 0);
    END LOOP;

    IF NOT st.fresh THEN
        -- Merged into an existing bank: the room registry counts and BM25 statistics are recounted.
        DELETE FROM rcll.room_count_queue q WHERE q.bank_id = st.bank_id;
        INSERT INTO rcll.rooms (bank_id, name, created_by, first_used, last_used)
        SELECT st.bank_id, u.room, 'human', min(u.created_at), max(u.created_at)
        FROM rcll.memory_units u WHERE u.bank_id = st.bank_id AND u.room IS NOT NULL GROUP BY u.room
        ON CONFLICT (bank_id, name) DO NOTHING;
        UPDATE rcll.rooms r SET fact_count = coalesce((SELECT count(*) FROM rcll.memory_units u
                                                      WHERE u.bank_id = st.bank_id AND u.room = r.name), 0)
        WHERE r.bank_id = st.bank_id;
        PERFORM rcll.refresh_bank_stats(st.bank_name);
    END IF;

    EXECUTE 'SELECT counts FROM pg_temp.rcll_restore_state' INTO counts;
    -- Audited database-wide (bank_id NULL): the bank's own rows stay exactly as exported.
    PERFORM rcll._audit(NULL, 'restore', jsonb_build_object('bank', st.bank_name, 'bank_id', st.bank_id),
                        jsonb_build_object('on_conflict', st.on_conflict, 'fresh', st.fresh, 'rows', counts));
    DROP TABLE IF EXISTS pg_temp.rcll_restore_state, pg_temp.rcll_restore_ids, pg_temp.rcll_restore_pending;
    RETURN jsonb_build_object('bank', st.bank_name, 'bank_id', st.bank_id, 'fresh', st.fresh, 'rows', counts);
END
$$;
COMMENT ON FUNCTION rcll.restore_finish() IS 'Finish the restore rcll.restore_begin started: set supersession links, move sequences past the imported ids, recount room counts and BM25 statistics when the bank already existed, and record the restore in rcll.audit_log (database-wide, so the bank''s rows stay as exported). Returns the bank and rows written per table.';
