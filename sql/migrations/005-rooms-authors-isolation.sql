-- Run-once: the room classifier's vocabulary, merge proposals, bank grants, the identity-server role.

-- Thirteen engineering rooms. Order is precedence (lowest priority first): the narrow subjects sort
-- before the broad ones, and deployment sorts before pipeline - in the engine this replaces, \mdeploy
-- sat inside pipeline, which was tested first, so the classifier could never file anything under
-- deployment. Patterns are matched case-insensitively (~*) against the unit text.
INSERT INTO rcll.room_rules (priority, pattern, room) VALUES
    (10,  '\m(deploy|redeploy|rollouts?\M|roll(ed|ing)? ?back|rollbacks?\M|canary|hotfix|releas(e|es|ed|ing)\M|ship(ped|ping)? to prod)', 'deployment'),
    (20,  '\m(security|vulnerab|cve-|exploit|xss\M|csrf\M|sql injection|secrets?\M|encrypt|decrypt|tls\M|ssl\M|pentest|attack)', 'security'),
    (30,  '\m(auth|login|logout|log in|sign[ -]?in|passwords?\M|oauth|sso\M|jwt\M|tokens?\M|permissions?\M|rbac\M|credentials?\M|api keys?\M)', 'auth'),
    (40,  '\m(schema|migrations?\M|ddl\M|columns?\M|alter table|foreign keys?\M|primary keys?\M|constraints?\M)', 'schema'),
    (50,  '\m(database|postgres|postgresql|pgvector|sql\M|quer(y|ies)\M|vacuum|indexes\M|replica|deadlock|transactions?\M)', 'database'),
    (60,  '\m(tests?\M|testing|pytest|unit tests?|flaky|fixtures?\M|coverage\M|assertions?\M|regression)', 'testing'),
    (70,  '\m(performance|perf\M|latency|throughput|slow(er|ness|ly)?\M|benchmark|p50\M|p95\M|p99\M|memory leak|cpu\M|optimi[sz])', 'performance'),
    (80,  '\m(pipelines?\M|ci\M|ci/cd|cd\M|github actions|workflows?\M|builds?\M|building\M|jenkins|etl\M)', 'pipeline'),
    (90,  '\m(infra|infrastructure|servers?\M|kubernetes|k8s\M|docker|containers?\M|terraform|aws\M|gcp\M|azure|dns\M|load balancer|nginx|clusters?\M|vms?\M|hosting)', 'infrastructure'),
    (100, '\m(api|apis\M|endpoints?\M|rest\M|graphql|grpc|http\M|webhooks?\M|status codes?\M)', 'api'),
    (110, '\m(ui\M|ux\M|frontend|front-end|css\M|html\M|react\M|buttons?\M|layout|dashboard|components?\M|screens?\M)', 'ui'),
    (120, '\m(docs\M|documentation|readme|changelog|tutorial|docstrings?\M|guides?\M)', 'docs'),
    (130, '\m(agents?\M|subagents?\M|llms?\M|ai\M|orchestrator|prompts?\M|model calls?\M)', 'agent');
-- The engine this replaces fell back to "general"; kept but disabled, because a junk room is worse
-- than no room (a room filter then simply does not match the unit). Enable it per deployment.
INSERT INTO rcll.room_rules (priority, pattern, room, enabled) VALUES (1000, '.', 'general', false);

CREATE TABLE rcll.room_merge_proposals (
    proposal_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    from_room    text NOT NULL,
    into_room    text NOT NULL,
    reason       text NOT NULL CHECK (length(btrim(reason)) > 0),
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    proposed_by  text NOT NULL,
    proposed_at  timestamptz NOT NULL DEFAULT now(),
    decided_by   text,
    decided_at   timestamptz,
    CHECK (from_room <> into_room),
    CHECK ((status = 'pending') = (decided_at IS NULL))
);
COMMENT ON TABLE rcll.room_merge_proposals IS 'Semantic room merges (agent into orchestrator): only ever proposals, the from-room held provisional until a person approves or rejects.';
COMMENT ON COLUMN rcll.room_merge_proposals.proposal_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.room_merge_proposals.bank_id IS 'Bank of the rooms.';
COMMENT ON COLUMN rcll.room_merge_proposals.from_room IS 'The room whose units would move (and whose name would become an alias).';
COMMENT ON COLUMN rcll.room_merge_proposals.into_room IS 'The room they would move into.';
COMMENT ON COLUMN rcll.room_merge_proposals.reason IS 'Why the merge was proposed, for the person deciding.';
COMMENT ON COLUMN rcll.room_merge_proposals.status IS 'pending, approved (units rewritten, name kept as an alias) or rejected.';
COMMENT ON COLUMN rcll.room_merge_proposals.proposed_by IS 'Agent or role that proposed it.';
COMMENT ON COLUMN rcll.room_merge_proposals.proposed_at IS 'When it was proposed.';
COMMENT ON COLUMN rcll.room_merge_proposals.decided_by IS 'The person who approved or rejected it.';
COMMENT ON COLUMN rcll.room_merge_proposals.decided_at IS 'When it was decided (NULL while pending).';
CREATE UNIQUE INDEX room_merge_proposals_one_pending ON rcll.room_merge_proposals (bank_id, from_room)
    WHERE status = 'pending';

CREATE TABLE rcll.bank_grants (
    role_name    name NOT NULL,
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role_name, bank_id)
);
COMMENT ON TABLE rcll.bank_grants IS 'Optional bank isolation: which database roles (and their members) see which banks once rcll.enable_bank_isolation() has turned row-level security on. Rooms are a topic, never a permission.';
COMMENT ON COLUMN rcll.bank_grants.role_name IS 'A database role; every member of it sees the bank.';
COMMENT ON COLUMN rcll.bank_grants.bank_id IS 'The bank it may read and write.';
COMMENT ON COLUMN rcll.bank_grants.created_at IS 'When the grant was made.';

-- The layer of a unit written without one comes from rcll.layer_rules by hall (the janitor trigger
-- fills it before NOT NULL is checked), so a column default of L2 would hide the writer's silence.
ALTER TABLE rcll.memory_units ALTER COLUMN layer DROP DEFAULT;

-- The role whose members (the RCLL server) may set rcll.agent for a transaction. Roles are
-- cluster-wide: create it once, tolerate it existing, and tolerate a concurrent installer.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'rcll_identity_server') THEN
        CREATE ROLE rcll_identity_server NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
