-- Restoring a dump: the rows come back as they were dumped, not as if an agent had written them.

CREATE OR REPLACE FUNCTION rcll._restoring(table_name regclass)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    -- In an extension install, pg_dump's output runs CREATE EXTENSION (which creates the write
    -- triggers) before it loads the rows, so the triggers see every restored row. Re-resolving the
    -- author, re-canonicalising the room or counting the row again would change the memory. A
    -- restore is told apart by what pg_dump and pg_restore always do - row_security off, the rows
    -- sent by COPY ... FROM (or INSERT with --inserts) as the statement itself, not from a
    -- function - and is honoured only for a role that owns the table: it could disable the
    -- triggers anyway. An agent's role copying rows in still has its author resolved.
    SELECT current_setting('row_security') = 'off'
       AND current_query() ~* '^(\s|--[^\n]*\n)*(COPY\s+[^(\s]|INSERT\s)'
       AND pg_has_role(session_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = table_name), 'MEMBER')
$$;
COMMENT ON FUNCTION rcll._restoring(regclass) IS 'Internal: true while a dump is being restored into the table (row_security off, rows sent by a COPY or INSERT statement, by a member of the table''s owner role); the write triggers then keep the rows as dumped.';
