-- Run-once: BM25 corpus statistics, the audit log, the LLM write-cost ledger, identities, classifier rules.

CREATE TABLE rcll.bank_stats (
    bank_id      integer PRIMARY KEY REFERENCES rcll.banks ON DELETE CASCADE,
    unit_count   bigint NOT NULL DEFAULT 0,
    total_length bigint NOT NULL DEFAULT 0,
    refreshed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.bank_stats IS 'BM25 corpus statistics per bank (document count and total length), refreshed off the write path by rcll.refresh_bank_stats(). Document frequencies need no table: they are counted from the candidates.';
COMMENT ON COLUMN rcll.bank_stats.bank_id IS 'The bank.';
COMMENT ON COLUMN rcll.bank_stats.unit_count IS 'Units in the bank at the last refresh (BM25 N).';
COMMENT ON COLUMN rcll.bank_stats.total_length IS 'Sum of lexical_length at the last refresh (BM25 average length = total_length / unit_count).';
COMMENT ON COLUMN rcll.bank_stats.refreshed_at IS 'When the statistics were last refreshed.';

CREATE TABLE rcll.audit_log (
    audit_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer REFERENCES rcll.banks ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    action       text NOT NULL,
    target       jsonb NOT NULL DEFAULT '{}'::jsonb,
    detail       jsonb NOT NULL DEFAULT '{}'::jsonb
);
COMMENT ON TABLE rcll.audit_log IS 'Audit rows for background and administrative work (consolidation, room moves and merges, imports). Recall never writes here.';
COMMENT ON COLUMN rcll.audit_log.audit_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.audit_log.bank_id IS 'Bank affected (NULL for database-wide actions).';
COMMENT ON COLUMN rcll.audit_log.at IS 'When it happened.';
COMMENT ON COLUMN rcll.audit_log.actor IS 'Who did it (an agent, a person, or system:<job>).';
COMMENT ON COLUMN rcll.audit_log.action IS 'What was done (consolidate, room_move, room_merge_propose, room_merge_approve, import...).';
COMMENT ON COLUMN rcll.audit_log.target IS 'What it was done to (unit ids, room names) as JSON.';
COMMENT ON COLUMN rcll.audit_log.detail IS 'Everything needed to understand or reverse it, as JSON.';
CREATE INDEX audit_log_bank_at ON rcll.audit_log (bank_id, at);

CREATE TABLE rcll.llm_calls (
    call_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    document_id  bigint REFERENCES rcll.documents ON DELETE SET NULL,
    purpose      text NOT NULL CHECK (purpose IN ('extract', 'consolidate')),
    provider     text NOT NULL,
    model        text NOT NULL,
    input_tokens  integer NOT NULL CHECK (input_tokens >= 0),
    output_tokens integer NOT NULL CHECK (output_tokens >= 0),
    outcome      text NOT NULL CHECK (outcome IN ('ok', 'retried', 'failed')),
    at           timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.llm_calls IS 'Write-cost ledger: every language-model call the write path made. The read path makes none.';
COMMENT ON COLUMN rcll.llm_calls.call_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.llm_calls.bank_id IS 'Bank the call was made for.';
COMMENT ON COLUMN rcll.llm_calls.document_id IS 'Document being extracted, if any.';
COMMENT ON COLUMN rcll.llm_calls.purpose IS 'extract (retain) or consolidate (background job).';
COMMENT ON COLUMN rcll.llm_calls.provider IS 'LLM provider (anthropic...).';
COMMENT ON COLUMN rcll.llm_calls.model IS 'Model name as sent.';
COMMENT ON COLUMN rcll.llm_calls.input_tokens IS 'Input tokens billed.';
COMMENT ON COLUMN rcll.llm_calls.output_tokens IS 'Output tokens billed.';
COMMENT ON COLUMN rcll.llm_calls.outcome IS 'ok, retried (a retry followed), failed.';
COMMENT ON COLUMN rcll.llm_calls.at IS 'When the call returned.';
CREATE INDEX llm_calls_bank_at ON rcll.llm_calls (bank_id, at);

CREATE TABLE rcll.identities (
    role_name    name PRIMARY KEY,
    agent        text NOT NULL CHECK (length(btrim(agent)) > 0),
    created_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.identities IS 'Database roles mapped to agent identities: a unit written by such a role is authored by the agent, whatever the caller claims.';
COMMENT ON COLUMN rcll.identities.role_name IS 'A database role (session_user).';
COMMENT ON COLUMN rcll.identities.agent IS 'The agent identity the role writes as.';
COMMENT ON COLUMN rcll.identities.created_at IS 'When the mapping was made.';

CREATE TABLE rcll.room_rules (
    rule_id      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    priority     integer NOT NULL,
    pattern      text NOT NULL,
    room         text NOT NULL,
    enabled      boolean NOT NULL DEFAULT true
);
COMMENT ON TABLE rcll.room_rules IS 'Keyword classifier assigning a room when the caller gives none: the enabled rule with the lowest priority whose pattern matches wins.';
COMMENT ON COLUMN rcll.room_rules.rule_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.room_rules.priority IS 'Lower is tested first; more specific rooms must sort before broader ones.';
COMMENT ON COLUMN rcll.room_rules.pattern IS 'Case-insensitive POSIX regular expression matched against the unit text.';
COMMENT ON COLUMN rcll.room_rules.room IS 'Room assigned when the pattern matches.';
COMMENT ON COLUMN rcll.room_rules.enabled IS 'Disabled rules are kept but not applied.';

CREATE TABLE rcll.layer_rules (
    hall         text PRIMARY KEY,
    layer        text NOT NULL CHECK (layer IN ('L0', 'L1', 'L2'))
);
COMMENT ON TABLE rcll.layer_rules IS 'Which layer a hall lands in when the writer names no layer (rules and procedures L0, decisions L1, the rest L2).';
COMMENT ON COLUMN rcll.layer_rules.hall IS 'Hall (fact type).';
COMMENT ON COLUMN rcll.layer_rules.layer IS 'Layer assigned to units of that hall.';
INSERT INTO rcll.layer_rules (hall, layer) VALUES
    ('rule', 'L0'), ('procedure', 'L0'), ('decision', 'L1'),
    ('event', 'L2'), ('preference', 'L2'), ('warning', 'L2'), ('discovery', 'L2'), ('fact', 'L2'), ('observation', 'L2');
