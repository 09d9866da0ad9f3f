-- Run-once: whether a recall's bank held expired units not yet swept when its scope was resolved.
-- Every channel filters each unit through rcll._in_scope, which hides an expired unit at once;
-- when the bank holds none (the sweep removes them, and most units never expire), the scope says
-- so and the expiry test folds away from every channel's plan (docs/scaling.md).
ALTER TYPE rcll.recall_scope ADD ATTRIBUTE has_expired boolean;
COMMENT ON COLUMN rcll.recall_scope.has_expired IS 'Whether the bank held units already expired (expires_at <= now()) and not yet swept when the scope was resolved, in the resolving transaction''s snapshot; false: every unit of the bank passes the expiry test, which the filters then skip. NULL (a scope built by hand): the test is made.';
