-- Export: every row of every table that belongs to a bank, as one jsonb per row, in a canonical order.
--
-- The canonical order (what makes two exports of one memory byte-identical): tables in
-- rcll.export_tables() position order; within a table, rows by the table's key columns, text keys
-- compared byte-wise (COLLATE "C"). Rows are to_jsonb(row) minus bank_id (the bank is the export's;
-- the banks row keeps it), with TimeZone UTC, DateStyle ISO, IntervalStyle postgres,
-- extra_float_digits 1 and bytea_output hex pinned, so every value prints the same on any server.

CREATE OR REPLACE FUNCTION rcll.export_tables()
RETURNS TABLE (table_position integer, table_name text, key_columns text[], id_column text,
               refs jsonb)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- Import order too: a table comes after every table it references. refs maps a column to the
    -- table whose identity it holds (import remaps it when that identity had to be renumbered).
    -- Global configuration (room_rules, layer_rules, identities, migrations) belongs to no bank.
    SELECT * FROM (VALUES
        (1,  'banks',                ARRAY['bank_id'],                      'bank_id',     '{}'::jsonb),
        (2,  'bank_stats',           ARRAY['bank_id'],                      NULL,          '{}'),
        (3,  'bank_grants',          ARRAY['role_name'],                    NULL,          '{}'),
        (4,  'documents',            ARRAY['document_id'],                  'document_id', '{}'),
        (5,  'memory_units',         ARRAY['unit_id'],                      'unit_id',
             '{"document_id": "documents", "superseded_by": "memory_units"}'),
        (6,  'entities',             ARRAY['entity_id'],                    'entity_id',   '{}'),
        (7,  'entity_aliases',       ARRAY['alias'],                        NULL,          '{"entity_id": "entities"}'),
        (8,  'unit_entities',        ARRAY['unit_id', 'entity_id'],         NULL,
             '{"unit_id": "memory_units", "entity_id": "entities"}'),
        (9,  'links',                ARRAY['from_unit', 'to_unit', 'link_type'], NULL,
             '{"from_unit": "memory_units", "to_unit": "memory_units"}'),
        (10, 'rooms',                ARRAY['name'],                         NULL,          '{}'),
        (11, 'room_aliases',         ARRAY['alias'],                        NULL,          '{}'),
        (12, 'room_count_queue',     ARRAY['room', 'at', 'delta'],          NULL,          '{}'),
        (13, 'room_merge_proposals', ARRAY['proposal_id'],                  'proposal_id', '{}'),
        (14, 'room_state',           ARRAY['room', 'key', 'version'],       NULL,          '{}'),
        (15, 'audit_log',            ARRAY['audit_id'],                     'audit_id',    '{}'),
        (16, 'llm_calls',            ARRAY['call_id'],                      'call_id',     '{"document_id": "documents"}'),
        (17, 'unit_versions',        ARRAY['unit_id', 'version'],           NULL,          '{"unit_id": "memory_units"}'),
        (18, 'forget_log',           ARRAY['forget_id'],                    'forget_id',   '{}'),
        (19, 'retention_policies',   ARRAY['policy_id'],                    'policy_id',   '{}')
    ) AS t(table_position, table_name, key_columns, id_column, refs)
    ORDER BY 1
$$;
COMMENT ON FUNCTION rcll.export_tables() IS 'The tables a bank export carries, in export and import order, with each table''s canonical sort key, its identity column (NULL for natural keys) and the columns holding another table''s identity. Every rcll table with a bank_id column must be listed (a test checks).';

CREATE OR REPLACE FUNCTION rcll._export_table(name text)
RETURNS TABLE (table_position integer, table_name text, key_columns text[], id_column text, refs jsonb)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN QUERY SELECT e.* FROM rcll.export_tables() e WHERE e.table_name = name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table_name: % is not an exported table', coalesce(quote_literal(name), 'NULL')
            USING ERRCODE = 'RC001', COLUMN = 'table_name',
            HINT = 'Name one of SELECT table_name FROM rcll.export_tables().';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._export_table(text) IS 'Internal: the rcll.export_tables() row of one table (by name), or an error naming the fix when it is not exported.';

CREATE OR REPLACE FUNCTION rcll._export_query(bank_id integer, table_name text)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    t record;
    ord text;
BEGIN
    SELECT e.* INTO t FROM rcll._export_table(table_name) e;
    -- Text keys sort byte-wise, whatever the database's collation.
    SELECT string_agg(format('x.%I%s', k, CASE WHEN a.atttypid IN ('text'::regtype, 'name'::regtype)
                                               THEN ' COLLATE "C"' ELSE '' END), ', ' ORDER BY i)
    INTO ord
    FROM unnest(t.key_columns) WITH ORDINALITY AS c(k, i)
    JOIN pg_attribute a ON a.attrelid = format('rcll.%I', t.table_name)::regclass AND a.attname = c.k;
    RETURN format('SELECT CASE WHEN %L = ''banks'' THEN to_jsonb(x) ELSE to_jsonb(x) - ''bank_id'' END AS row '
                  'FROM rcll.%I x WHERE x.bank_id = %s ORDER BY %s',
                  t.table_name, t.table_name, bank_id, ord);
END
$$;
COMMENT ON FUNCTION rcll._export_query(integer, text) IS 'Internal: the canonical export query of one table of one bank (names from rcll.export_tables() only, quoted).';


CREATE OR REPLACE FUNCTION rcll.export_rows(bank text, table_name text)
RETURNS SETOF jsonb
LANGUAGE plpgsql VOLATILE
SET TimeZone = 'UTC'
SET DateStyle = 'ISO, YMD'
SET IntervalStyle = 'postgres'
SET extra_float_digits = 1
SET bytea_output = 'hex'
AS $$
BEGIN
    -- For psql: SELECT rcll.export_rows('b', 'memory_units'). The rows are materialised by the
    -- function (spilling to disk past work_mem); to stream a large table with bounded memory on
    -- both sides, use rcll.export_cursor() and FETCH from it.
    RETURN QUERY EXECUTE rcll._export_query(rcll._bank_id(bank), table_name);
END
$$;
COMMENT ON FUNCTION rcll.export_rows(text, text) IS 'Every row of one exported table (rcll.export_tables()) that belongs to the bank, one jsonb per row with every column (bank_id dropped except on the banks row), in the canonical order, values printed canonically (UTC, ISO dates, shortest exact floats, hex bytea).';

CREATE OR REPLACE FUNCTION rcll._export_settings()
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    -- The print settings are written once, as rcll.export_rows' SET clauses (which hold them for
    -- that call only); here the same settings are pinned transaction-locally, for the rest of the
    -- exporting transaction.
    SELECT count(set_config(split_part(c, '=', 1), substr(c, strpos(c, '=') + 1), true))   -- every one
    FROM pg_proc p, unnest(p.proconfig) AS c
    WHERE p.oid = 'rcll.export_rows(text, text)'::regprocedure AND c NOT LIKE 'search_path=%'
$$;
COMMENT ON FUNCTION rcll._export_settings() IS 'Internal: pins, for the current transaction, the settings that decide how values print - those rcll.export_rows sets for its own call (TimeZone UTC, DateStyle ISO, IntervalStyle postgres, extra_float_digits 1, bytea_output hex).';

CREATE OR REPLACE FUNCTION rcll.export_cursor(bank text, table_name text, cursor_name text DEFAULT NULL)
RETURNS refcursor
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    c refcursor := coalesce(cursor_name, 'rcll_export_' || table_name);
BEGIN
    -- The cursor runs at FETCH time, outside this function: pin the print settings for the
    -- transaction (the export runs in one REPEATABLE READ transaction, one consistent snapshot).
    PERFORM rcll._export_settings();
    OPEN c NO SCROLL FOR EXECUTE rcll._export_query(rcll._bank_id(bank), table_name);
    RETURN c;
END
$$;
COMMENT ON FUNCTION rcll.export_cursor(text, text, text) IS 'Open a cursor over rcll.export_rows(bank, table_name) for streaming (FETCH FORWARD n FROM it) with bounded memory on server and client. Pins TimeZone UTC and the other print settings for the rest of the transaction. Use inside BEGIN ISOLATION LEVEL REPEATABLE READ ... COMMIT so every table comes from one snapshot.';

CREATE OR REPLACE FUNCTION rcll._max_id(table_name text, id_column text, bank_id integer DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    m bigint;
BEGIN
    EXECUTE format('SELECT max(x.%I)::bigint FROM rcll.%I x WHERE $1 IS NULL OR x.bank_id = $1', id_column, table_name)
        INTO m USING bank_id;
    RETURN m;
END
$$;
COMMENT ON FUNCTION rcll._max_id(text, text, integer) IS 'Internal: the largest identity (id_column) in an rcll table, of one bank or (bank_id NULL) of all; NULL when there is none. Names come from rcll.export_tables() only.';

CREATE OR REPLACE FUNCTION rcll.export_max_ids(bank text)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(jsonb_object_agg(e.table_name, coalesce(rcll._max_id(e.table_name, e.id_column, b.id), 0)), '{}')
    FROM (SELECT rcll._bank_id(export_max_ids.bank) AS id) b, rcll.export_tables() e
    WHERE e.id_column IS NOT NULL
$$;
COMMENT ON FUNCTION rcll.export_max_ids(text) IS 'The largest identity per exported table of a bank, for the export manifest; rcll.restore_begin() moves each sequence past it so renumbered rows never take an id a later row of the restore keeps (an agent''s import, rcll.import_begin, never reads it).';
