-- Run-once: rcll_reader, the role a read-only recall deployment connects as (SELECT and EXECUTE only).

-- Roles are cluster-wide and many databases may install rcll, some at the same moment: create the
-- role only if no other database has, and treat losing that race as success.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rcll_reader') THEN
        CREATE ROLE rcll_reader NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- Functions are executable by PUBLIC by default; reading needs the schema and SELECT on tables,
-- including tables later migrations add.
GRANT USAGE ON SCHEMA rcll TO rcll_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA rcll TO rcll_reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA rcll GRANT SELECT ON TABLES TO rcll_reader;
