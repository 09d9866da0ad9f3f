-- The search_path every rcll function runs with, declared once for the whole schema instead of in
-- each header: `pg_catalog, pg_temp`, so that no caller's search_path can put an object of theirs in
-- front of a name a function means (every name inside a function is schema-qualified, and pgvector
-- and pg_trgm objects are written as public.*). This file runs last, after every CREATE OR REPLACE
-- (which resets a function's settings), on CREATE EXTENSION, extension updates and `rcll install`
-- alike, so a new function cannot be left without it (tests/test_schema.py checks every one).
--
-- The exceptions are the SQL helpers written to be inlined into their callers' queries: any SET
-- clause stops the planner from inlining a function. They read no table and call only built-in
-- operators, or rcll.recall_channel_names(), a constant (tests/test_channel_plans.py checks that the
-- plans hold _in_scope's and _in_time_range's columns and _bm25_term's arithmetic, not a call;
-- _last_words and _weight_array are inlined into the fusion's rows, _weight_of and _channel_runs into
-- recall_channels').
SELECT rcll._alter_each_routine('ALTER ROUTINE %s SET search_path = pg_catalog, pg_temp', ARRAY(
    SELECT p.oid::regprocedure
    FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'rcll'::regnamespace
      AND p.prokind IN ('f', 'p')
      AND p.proname NOT IN ('_in_scope', '_in_time_range', '_keyless_link', '_bm25_term', '_last_words',
                            '_weight_array', '_weight_of', '_channel_runs')
      AND NOT EXISTS (SELECT FROM pg_catalog.unnest(p.proconfig) setting
                      WHERE setting LIKE 'search\_path=%')));
