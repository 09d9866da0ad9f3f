-- Generated from sql/ by `make extension`; do not edit.
\echo Use "CREATE EXTENSION rcll CASCADE" to load this file. \quit

-- migration 001-banks-documents-units.sql
-- Run-once: banks, the documents retained into them, and the memory units recall returns.

CREATE TABLE rcll.migrations (
    name        text PRIMARY KEY,
    sha256      text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.migrations IS 'Run-once migrations applied to this database, frozen by hash after release.';
COMMENT ON COLUMN rcll.migrations.name IS 'File name of the migration under sql/migrations/.';
COMMENT ON COLUMN rcll.migrations.sha256 IS 'SHA-256 of the migration file as applied; a released migration must never change.';
COMMENT ON COLUMN rcll.migrations.applied_at IS 'When the migration was applied.';

CREATE TABLE rcll.banks (
    bank_id      integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    description  text,
    text_search_config regconfig NOT NULL DEFAULT 'english',
    settings     jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(settings) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.banks IS 'A memory bank: one agent fleet''s or one user''s store. Every other row belongs to exactly one bank.';
COMMENT ON COLUMN rcll.banks.bank_id IS 'Surrogate key used by every other table.';
COMMENT ON COLUMN rcll.banks.name IS 'Public name of the bank, used by every API (letters, digits, _ . : -; at most 128 characters).';
COMMENT ON COLUMN rcll.banks.description IS 'Free-text description for people.';
COMMENT ON COLUMN rcll.banks.text_search_config IS 'Text search configuration used to build memory_units.lexical for this bank (stemming, stop words).';
COMMENT ON COLUMN rcll.banks.settings IS 'Per-bank settings as a JSON object (e.g. size limits); unknown keys are kept.';
COMMENT ON COLUMN rcll.banks.created_at IS 'When the bank was created.';

CREATE TABLE rcll.documents (
    document_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    content      text NOT NULL CHECK (length(btrim(content, E' \t\r\n')) > 0),
    content_hash bytea NOT NULL,
    source       text,
    thread       text,
    occurred_at  timestamptz,
    provenance   jsonb NOT NULL CHECK (jsonb_typeof(provenance) = 'object' AND provenance ? 'via'),
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    extraction   text NOT NULL DEFAULT 'chunks'
                 CHECK (extraction IN ('chunks', 'offline', 'llm', 'failed')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (bank_id, content_hash)
);
COMMENT ON TABLE rcll.documents IS 'Documents as retained: the raw text every memory unit was extracted or chunked from.';
COMMENT ON COLUMN rcll.documents.document_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.documents.bank_id IS 'Bank the document was retained into.';
COMMENT ON COLUMN rcll.documents.content IS 'The full text as retained (never empty).';
COMMENT ON COLUMN rcll.documents.content_hash IS 'SHA-256 of content (with thread); re-retaining the same content into the same bank is a no-op.';
COMMENT ON COLUMN rcll.documents.source IS 'Where the text came from, as the caller named it (a file, a URL, a conversation id).';
COMMENT ON COLUMN rcll.documents.thread IS 'Thread namespace the document was written in; NULL for none.';
COMMENT ON COLUMN rcll.documents.occurred_at IS 'When the document was written or said; relative dates in it ("yesterday") resolve against this.';
COMMENT ON COLUMN rcll.documents.provenance IS 'Who wrote it, via what interface, when (JSON object; "via" is required).';
COMMENT ON COLUMN rcll.documents.metadata IS 'Caller-supplied JSON object, kept as given.';
COMMENT ON COLUMN rcll.documents.extraction IS 'How units were made from it: chunks (keyless), offline (rule extractor), llm, or failed (LLM failed; stored as chunks).';
COMMENT ON COLUMN rcll.documents.created_at IS 'When the document was retained.';

CREATE TABLE rcll.memory_units (
    unit_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id        integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    document_id    bigint REFERENCES rcll.documents ON DELETE CASCADE,
    kind           text NOT NULL DEFAULT 'chunk' CHECK (kind IN ('chunk', 'fact', 'observation')),
    text           text NOT NULL CHECK (length(btrim(text, E' \t\r\n')) > 0),
    embedding      vector(384),
    lexical        tsvector NOT NULL DEFAULT ''::tsvector,
    lexical_length integer NOT NULL DEFAULT 0,
    hall           text,
    layer          text NOT NULL DEFAULT 'L2' CHECK (layer IN ('L0', 'L1', 'L2')),
    room           text,
    author         text,
    author_source  text NOT NULL DEFAULT 'none' CHECK (author_source IN ('server', 'self_declared', 'none')),
    thread         text,
    tags           text[] NOT NULL DEFAULT '{}',
    valid          tstzrange NOT NULL DEFAULT tstzrange(now(), NULL),
    occurred_start timestamptz,
    occurred_end   timestamptz,
    mentioned_at   timestamptz,
    chunk_index    integer,
    superseded_by  bigint REFERENCES rcll.memory_units ON DELETE SET NULL,
    consolidation_state text NOT NULL DEFAULT 'pending'
                   CHECK (consolidation_state IN ('pending', 'consolidated', 'skipped')),
    provenance     jsonb NOT NULL CHECK (jsonb_typeof(provenance) = 'object' AND provenance ? 'via'),
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (occurred_end IS NULL OR occurred_start IS NULL OR occurred_end >= occurred_start)
) WITH (toast_tuple_target = 8160);
-- Keep the 1.5 kB vector inside the row: out-of-line (TOAST) vectors made filtered exact scans
-- 3-10x slower in our probes, and PLAIN alone pushed text and lexical out of line instead.
ALTER TABLE rcll.memory_units ALTER COLUMN embedding SET STORAGE PLAIN;

COMMENT ON TABLE rcll.memory_units IS 'Memory units: the facts, chunks and observations recall returns. One row per unit; nothing is ever deleted by supersession.';
COMMENT ON COLUMN rcll.memory_units.unit_id IS 'Surrogate key; recall returns it.';
COMMENT ON COLUMN rcll.memory_units.bank_id IS 'Bank the unit belongs to; every recall filters on it first.';
COMMENT ON COLUMN rcll.memory_units.document_id IS 'Document the unit was extracted or chunked from (NULL for consolidation observations).';
COMMENT ON COLUMN rcll.memory_units.kind IS 'chunk (a piece of a document, keyless mode), fact (extracted), observation (written by consolidation).';
COMMENT ON COLUMN rcll.memory_units.text IS 'The unit''s text as recall returns it.';
COMMENT ON COLUMN rcll.memory_units.embedding IS 'bge-small-en-v1.5 embedding of text (384 dims, L2-normalised); stored inline (STORAGE PLAIN).';
COMMENT ON COLUMN rcll.memory_units.lexical IS 'tsvector of text under the bank''s text search configuration; the BM25 channel reads it.';
COMMENT ON COLUMN rcll.memory_units.lexical_length IS 'Number of indexed tokens in lexical (BM25 document length).';
COMMENT ON COLUMN rcll.memory_units.hall IS 'Hall: the fact type (decision, event, preference, rule, warning, discovery, fact...). NULL = not yet typed.';
COMMENT ON COLUMN rcll.memory_units.layer IS 'Layer: L0 rules and procedures, L1 decisions, L2 raw observations.';
COMMENT ON COLUMN rcll.memory_units.room IS 'Room: the topic label, free text, canonicalised by the janitor trigger. A recall filters on it before ranking.';
COMMENT ON COLUMN rcll.memory_units.author IS 'Who wrote the unit, as resolved by the server (never taken from the caller when the server knows).';
COMMENT ON COLUMN rcll.memory_units.author_source IS 'How author was resolved: server (authenticated identity), self_declared (caller''s word, no server identity), none.';
COMMENT ON COLUMN rcll.memory_units.thread IS 'Thread namespace; a recall scoped to one thread never sees another thread''s units.';
COMMENT ON COLUMN rcll.memory_units.tags IS 'Free tags; colon tags carry structure (author:x, room-alias:x, room-new:x, extraction:failed).';
COMMENT ON COLUMN rcll.memory_units.valid IS 'Validity window: when the unit is believed true. Supersession closes it; "as of" recall filters on it.';
COMMENT ON COLUMN rcll.memory_units.occurred_start IS 'Start of when the described event happened (NULL if unknown).';
COMMENT ON COLUMN rcll.memory_units.occurred_end IS 'End of when the described event happened (NULL if unknown or instantaneous).';
COMMENT ON COLUMN rcll.memory_units.mentioned_at IS 'When the unit was said or written (the document''s time).';
COMMENT ON COLUMN rcll.memory_units.chunk_index IS 'Position of a chunk (or fact) within its document, from 0.';
COMMENT ON COLUMN rcll.memory_units.superseded_by IS 'The unit that replaced this one, if any (its validity window is then closed).';
COMMENT ON COLUMN rcll.memory_units.consolidation_state IS 'Background consolidation state: pending, consolidated (folded into an observation), skipped.';
COMMENT ON COLUMN rcll.memory_units.provenance IS 'Who, via what interface, from which document, when (JSON object; "via" is required).';
COMMENT ON COLUMN rcll.memory_units.metadata IS 'Caller or extractor JSON object, kept as given.';
COMMENT ON COLUMN rcll.memory_units.created_at IS 'When the row was written.';
COMMENT ON COLUMN rcll.memory_units.updated_at IS 'When the row was last changed (supersession, room move).';

CREATE INDEX memory_units_embedding_hnsw ON rcll.memory_units
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
CREATE INDEX memory_units_lexical_gin ON rcll.memory_units USING gin (lexical);
CREATE INDEX memory_units_tags_gin ON rcll.memory_units USING gin (tags);
CREATE INDEX memory_units_bank_room ON rcll.memory_units (bank_id, room);
CREATE INDEX memory_units_bank_hall ON rcll.memory_units (bank_id, hall);
CREATE INDEX memory_units_bank_layer ON rcll.memory_units (bank_id, layer);
CREATE INDEX memory_units_bank_author ON rcll.memory_units (bank_id, author);
CREATE INDEX memory_units_bank_thread ON rcll.memory_units (bank_id, thread);
CREATE INDEX memory_units_bank_occurred ON rcll.memory_units (bank_id, occurred_start);
CREATE INDEX memory_units_valid_gist ON rcll.memory_units USING gist (valid);
CREATE INDEX memory_units_document ON rcll.memory_units (document_id);
CREATE INDEX memory_units_superseded_by ON rcll.memory_units (superseded_by) WHERE superseded_by IS NOT NULL;

INSERT INTO rcll.migrations (name, sha256) VALUES ('001-banks-documents-units.sql', 'b2bfd0eb36d4182aa44cb6d1f69093298c375ff3097aa1e72c521724a065370e');

-- migration 002-entities-links.sql
-- Run-once: resolved entities, their aliases, which units mention them, and links between units.

CREATE TABLE rcll.entities (
    entity_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(btrim(name)) > 0),
    entity_type  text,
    embedding    vector(384),
    mention_count integer NOT NULL DEFAULT 0,
    metadata     jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (bank_id, name)
);
COMMENT ON TABLE rcll.entities IS 'Entities resolved within a bank: people, projects, services, places. The graph channel spreads activation from them.';
COMMENT ON COLUMN rcll.entities.entity_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.entities.bank_id IS 'Bank the entity belongs to; entities never cross banks.';
COMMENT ON COLUMN rcll.entities.name IS 'Canonical name (one spelling); other spellings live in entity_aliases.';
COMMENT ON COLUMN rcll.entities.entity_type IS 'person, organization, place, project, service, concept... (NULL if unknown).';
COMMENT ON COLUMN rcll.entities.embedding IS 'Embedding of the canonical name, used for embedding-based entity resolution.';
COMMENT ON COLUMN rcll.entities.mention_count IS 'Number of units linked to the entity when last resolved (a hub indicator for capping fan-out).';
COMMENT ON COLUMN rcll.entities.metadata IS 'Extractor JSON object.';
COMMENT ON COLUMN rcll.entities.created_at IS 'When the entity was first seen.';
CREATE INDEX entities_name_trgm ON rcll.entities USING gin (lower(name) gin_trgm_ops);

CREATE TABLE rcll.entity_aliases (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    alias        text NOT NULL CHECK (length(btrim(alias)) > 0),
    entity_id    bigint NOT NULL REFERENCES rcll.entities ON DELETE CASCADE,
    source       text NOT NULL DEFAULT 'extractor' CHECK (source IN ('extractor', 'resolver', 'human')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bank_id, alias)
);
COMMENT ON TABLE rcll.entity_aliases IS 'Every spelling an entity has been seen under (the canonical name included), lower-cased.';
COMMENT ON COLUMN rcll.entity_aliases.bank_id IS 'Bank of the entity.';
COMMENT ON COLUMN rcll.entity_aliases.alias IS 'A spelling, lower-cased and whitespace-folded.';
COMMENT ON COLUMN rcll.entity_aliases.entity_id IS 'The entity this spelling resolves to.';
COMMENT ON COLUMN rcll.entity_aliases.source IS 'Who established the alias: extractor, resolver (trigram/embedding match), human.';
COMMENT ON COLUMN rcll.entity_aliases.created_at IS 'When the alias was recorded.';
CREATE INDEX entity_aliases_alias_trgm ON rcll.entity_aliases USING gin (alias gin_trgm_ops);
CREATE INDEX entity_aliases_entity ON rcll.entity_aliases (entity_id);

CREATE TABLE rcll.unit_entities (
    unit_id      bigint NOT NULL REFERENCES rcll.memory_units ON DELETE CASCADE,
    entity_id    bigint NOT NULL REFERENCES rcll.entities ON DELETE CASCADE,
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    role         text,
    PRIMARY KEY (unit_id, entity_id)
);
COMMENT ON TABLE rcll.unit_entities IS 'Which units mention which entities (the bipartite half of the graph).';
COMMENT ON COLUMN rcll.unit_entities.unit_id IS 'The mentioning unit.';
COMMENT ON COLUMN rcll.unit_entities.entity_id IS 'The mentioned entity.';
COMMENT ON COLUMN rcll.unit_entities.bank_id IS 'Bank of both (denormalised for filtering).';
COMMENT ON COLUMN rcll.unit_entities.role IS 'Role of the entity in the unit (subject, object, speaker...), if known.';
CREATE INDEX unit_entities_entity ON rcll.unit_entities (entity_id, unit_id);

CREATE TABLE rcll.links (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    from_unit    bigint NOT NULL REFERENCES rcll.memory_units ON DELETE CASCADE,
    to_unit      bigint NOT NULL REFERENCES rcll.memory_units ON DELETE CASCADE,
    link_type    text NOT NULL CHECK (link_type IN ('entity', 'temporal', 'semantic', 'causal', 'supersedes', 'consolidates')),
    weight       real NOT NULL DEFAULT 1.0 CHECK (weight > 0 AND weight <= 1),
    provenance   jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(provenance) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (from_unit, to_unit, link_type),
    CHECK (from_unit <> to_unit)
);
COMMENT ON TABLE rcll.links IS 'Directed, typed, weighted links between units (the unit-to-unit half of the graph).';
COMMENT ON COLUMN rcll.links.bank_id IS 'Bank of both units.';
COMMENT ON COLUMN rcll.links.from_unit IS 'Source unit (for supersedes: the newer unit; for causal: the cause; for consolidates: the observation).';
COMMENT ON COLUMN rcll.links.to_unit IS 'Target unit (for supersedes: the older unit; for causal: the effect; for consolidates: a source).';
COMMENT ON COLUMN rcll.links.link_type IS 'entity (share an entity), temporal (adjacent in time), semantic (near in embedding), causal, supersedes, consolidates.';
COMMENT ON COLUMN rcll.links.weight IS 'Strength in (0, 1]; activation spreading multiplies by it.';
COMMENT ON COLUMN rcll.links.provenance IS 'Who or what created the link (extractor, resolver, consolidation).';
COMMENT ON COLUMN rcll.links.created_at IS 'When the link was created.';
CREATE INDEX links_to_unit ON rcll.links (to_unit);

INSERT INTO rcll.migrations (name, sha256) VALUES ('002-entities-links.sql', 'ae13ad3b41babb1b48f585cf68ff28e85e37370ef9deb4521ffa3ffb042a4ca9');

-- migration 003-rooms-state.sql
-- Run-once: the room registry, its write-side count queue, and the keyed per-room state store.

CREATE TABLE rcll.rooms (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(btrim(name)) > 0),
    status       text NOT NULL DEFAULT 'live' CHECK (status IN ('live', 'provisional', 'merged')),
    merged_into  text,
    created_by   text NOT NULL DEFAULT 'system' CHECK (created_by IN ('human', 'system')),
    fact_count   bigint NOT NULL DEFAULT 0,
    first_used   timestamptz,
    last_used    timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bank_id, name),
    CHECK ((status = 'merged') = (merged_into IS NOT NULL))
);
COMMENT ON TABLE rcll.rooms IS 'Room registry: an observed index of the rooms in use, not a constraint (room stays free text).';
COMMENT ON COLUMN rcll.rooms.bank_id IS 'Bank the room is used in.';
COMMENT ON COLUMN rcll.rooms.name IS 'Canonical room name.';
COMMENT ON COLUMN rcll.rooms.status IS 'live (in use), provisional (a proposed merge awaiting a person), merged (folded into merged_into; its name stays readable).';
COMMENT ON COLUMN rcll.rooms.merged_into IS 'For a merged room: the room its facts now live in.';
COMMENT ON COLUMN rcll.rooms.created_by IS 'human (a caller named it) or system (the classifier assigned it).';
COMMENT ON COLUMN rcll.rooms.fact_count IS 'Units in the room as of the last fold of room_count_queue; rcll.rooms() adds the pending queue so reads are exact.';
COMMENT ON COLUMN rcll.rooms.first_used IS 'First write into the room.';
COMMENT ON COLUMN rcll.rooms.last_used IS 'Last write into the room (as of the last fold).';
COMMENT ON COLUMN rcll.rooms.created_at IS 'When the registry row was created.';

CREATE TABLE rcll.room_aliases (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    alias        text NOT NULL,
    room         text NOT NULL,
    reason       text NOT NULL CHECK (reason IN ('spelling', 'merge')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bank_id, alias)
);
COMMENT ON TABLE rcll.room_aliases IS 'Spellings and merged names that resolve to a canonical room; readable forever (a recall naming an alias reads the room).';
COMMENT ON COLUMN rcll.room_aliases.bank_id IS 'Bank of the room.';
COMMENT ON COLUMN rcll.room_aliases.alias IS 'The string as a caller typed it (or the old name of a merged room).';
COMMENT ON COLUMN rcll.room_aliases.room IS 'The canonical room it resolves to.';
COMMENT ON COLUMN rcll.room_aliases.reason IS 'spelling (janitor: case, separators, plural, prefix) or merge (approved by a person).';
COMMENT ON COLUMN rcll.room_aliases.created_at IS 'When the alias was recorded.';

CREATE TABLE rcll.room_count_queue (
    bank_id      integer NOT NULL,
    room         text NOT NULL,
    delta        bigint NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE rcll.room_count_queue IS 'Append-only count deltas written by statement triggers; rcll.fold_room_counts() folds them into rooms.fact_count. Appending never locks a shared row, so concurrent writers neither serialise nor deadlock.';
COMMENT ON COLUMN rcll.room_count_queue.bank_id IS 'Bank of the room.';
COMMENT ON COLUMN rcll.room_count_queue.room IS 'Room whose count changed.';
COMMENT ON COLUMN rcll.room_count_queue.delta IS 'Change in the number of units (negative for deletes and moves out).';
COMMENT ON COLUMN rcll.room_count_queue.at IS 'When the change was made.';
CREATE INDEX room_count_queue_bank_room ON rcll.room_count_queue (bank_id, room);

CREATE TABLE rcll.room_state (
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    room         text NOT NULL,
    key          text NOT NULL CHECK (length(key) > 0),
    version      integer NOT NULL CHECK (version > 0),
    value        jsonb NOT NULL,
    provenance   jsonb NOT NULL CHECK (jsonb_typeof(provenance) = 'object' AND provenance ? 'via'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bank_id, room, key, version)
);
COMMENT ON TABLE rcll.room_state IS 'Keyed per-room state (e.g. a room''s live spread): exact key lookup only, never similarity; every version is kept.';
COMMENT ON COLUMN rcll.room_state.bank_id IS 'Bank of the room.';
COMMENT ON COLUMN rcll.room_state.room IS 'Room the state belongs to (exact string, not canonicalised: a key is a key).';
COMMENT ON COLUMN rcll.room_state.key IS 'State key within the room.';
COMMENT ON COLUMN rcll.room_state.version IS 'Version number, 1 for the first put; a put names the version it expects to replace.';
COMMENT ON COLUMN rcll.room_state.value IS 'The state value as JSON.';
COMMENT ON COLUMN rcll.room_state.provenance IS 'Who wrote this version, via what, when.';
COMMENT ON COLUMN rcll.room_state.created_at IS 'When this version was written.';

INSERT INTO rcll.migrations (name, sha256) VALUES ('003-rooms-state.sql', '9123abc5610347cf1a16d9a96e61aa768de4eca50c4726c6525ee15004f4cd1f');

-- migration 004-stats-audit-identity.sql
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

INSERT INTO rcll.migrations (name, sha256) VALUES ('004-stats-audit-identity.sql', '6933757e5af0d51ecb8f53b1fcd41535fb70c85f987ff5a95480288a6e771ae4');

-- functions 010-banks.sql
-- Banks: creating them and resolving a bank name to its id with an error that says the fix.

CREATE OR REPLACE FUNCTION rcll._bank_id(bank text)
RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id integer;
BEGIN
    IF bank IS NULL THEN
        RAISE EXCEPTION 'bank is required' USING ERRCODE = '22004',
            HINT = 'Pass bank => ''name''; list banks with SELECT * FROM rcll.banks.';
    END IF;
    SELECT b.bank_id INTO id FROM rcll.banks b WHERE b.name = bank;
    IF id IS NULL THEN
        RAISE EXCEPTION 'bank: unknown bank "%"', bank USING ERRCODE = '42704',
            HINT = format('Create it first: SELECT rcll.create_bank(%L) or `rcll bank create %s`.', bank, bank);
    END IF;
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll._bank_id(text) IS 'Internal: the bank_id of a bank name; raises 42704 naming the fix when the bank does not exist.';

CREATE OR REPLACE FUNCTION rcll.create_bank(name text, description text DEFAULT NULL,
                                            text_search_config regconfig DEFAULT 'english')
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id integer;
BEGIN
    IF name IS NULL OR name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
        RAISE EXCEPTION 'bank: invalid bank name %', coalesce(quote_literal(name), 'NULL') USING ERRCODE = '22023',
            HINT = 'A bank name is 1-128 characters: letters, digits, _ . : - and starts with a letter or digit.';
    END IF;
    INSERT INTO rcll.banks AS b (name, description, text_search_config)
    VALUES (create_bank.name, create_bank.description, create_bank.text_search_config)
    ON CONFLICT ON CONSTRAINT banks_name_key DO NOTHING
    RETURNING b.bank_id INTO id;
    IF id IS NULL THEN
        SELECT b.bank_id INTO id FROM rcll.banks b WHERE b.name = create_bank.name;
    ELSE
        INSERT INTO rcll.bank_stats (bank_id) VALUES (id);
    END IF;
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll.create_bank(text, text, regconfig) IS 'Create a bank (idempotent: returns the existing id if it exists).';

CREATE OR REPLACE FUNCTION rcll.list_banks()
RETURNS TABLE (name text, description text, unit_count bigint, document_count bigint, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT b.name, b.description,
           (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b.bank_id),
           (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = b.bank_id),
           b.created_at
    FROM rcll.banks b ORDER BY b.name
$$;
COMMENT ON FUNCTION rcll.list_banks() IS 'Every bank with its unit and document counts.';


-- functions 020-lexical.sql
-- Lexical representation of a unit: its tsvector and BM25 document length, kept by a trigger.

CREATE OR REPLACE FUNCTION rcll._lexical_length(doc tsvector)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0)::integer FROM unnest(doc) AS t
$$;
COMMENT ON FUNCTION rcll._lexical_length(tsvector) IS 'Internal: number of token positions in a tsvector (BM25 document length).';

CREATE OR REPLACE FUNCTION rcll._units_lexical()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.lexical := to_tsvector(
        (SELECT b.text_search_config FROM rcll.banks b WHERE b.bank_id = NEW.bank_id), NEW.text);
    NEW.lexical_length := rcll._lexical_length(NEW.lexical);
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_lexical() IS 'Trigger: computes lexical and lexical_length from text under the bank''s text search configuration.';

CREATE OR REPLACE TRIGGER units_lexical BEFORE INSERT OR UPDATE OF text ON rcll.memory_units
    FOR EACH ROW EXECUTE FUNCTION rcll._units_lexical();


-- functions 030-authors.sql
-- Authors: who wrote a unit, resolved by the server, never taken from the caller when the server knows.

CREATE OR REPLACE FUNCTION rcll.current_agent()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- A role mapped in rcll.identities always writes as its agent. Otherwise the RCLL server, which
    -- authenticated the caller, may set rcll.agent for the transaction - honoured only when the
    -- session's role is a member of rcll_identity_server, so a psql user cannot forge it.
    SELECT coalesce(
        (SELECT i.agent FROM rcll.identities i WHERE i.role_name = session_user),
        CASE WHEN nullif(current_setting('rcll.agent', true), '') IS NOT NULL
                  AND EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'rcll_identity_server')
                  AND pg_has_role(session_user, 'rcll_identity_server', 'MEMBER')
             THEN current_setting('rcll.agent', true) END)
$$;
COMMENT ON FUNCTION rcll.current_agent() IS 'The agent identity the server resolved for this session or transaction, or NULL: a role mapped in rcll.identities, else rcll.agent set by a member of rcll_identity_server.';

CREATE OR REPLACE FUNCTION rcll._resolve_author(claimed text, OUT author text, OUT author_source text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    author := rcll.current_agent();
    IF author IS NOT NULL THEN
        author_source := 'server';             -- a claimed author is discarded
    ELSIF nullif(btrim(claimed), '') IS NOT NULL THEN
        author := btrim(claimed);
        author_source := 'self_declared';
    ELSE
        author_source := 'none';
        RAISE WARNING 'author: no identity for this write; stored without an author'
            USING HINT = 'Map the role in rcll.identities, or have the RCLL server authenticate the caller.';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._resolve_author(text) IS 'Internal: the author of a write and how it was resolved (server, self_declared, none). Never falls back to the connection''s role name.';


-- functions 040-retain-chunks.sql
-- Chunk-mode retain: one document and its pre-embedded chunks written in one statement.

CREATE OR REPLACE FUNCTION rcll._content_hash(content text, thread text)
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT sha256(convert_to(coalesce(thread, '') || E'\x1f' || content, 'UTF8'))
$$;
COMMENT ON FUNCTION rcll._content_hash(text, text) IS 'Internal: the identity of a document within a bank (thread and content).';

CREATE OR REPLACE FUNCTION rcll._check_document(bank_id integer, content text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    limit_bytes bigint := coalesce(
        nullif(current_setting('rcll.max_document_bytes', true), '')::bigint,
        (SELECT (b.settings ->> 'max_document_bytes')::bigint FROM rcll.banks b WHERE b.bank_id = _check_document.bank_id),
        1048576);
BEGIN
    IF content IS NULL OR btrim(content, E' \t\r\n\f\v') = '' THEN
        RAISE EXCEPTION 'content: empty or whitespace-only text' USING ERRCODE = '22023',
            HINT = 'Pass the text to retain in content.';
    END IF;
    IF octet_length(content) > limit_bytes THEN
        RAISE EXCEPTION 'content: % bytes is over the limit of % bytes', octet_length(content), limit_bytes
            USING ERRCODE = '54000',
            HINT = 'Split the document, or raise the limit (SET rcll.max_document_bytes, or the bank setting max_document_bytes).';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._check_document(integer, text) IS 'Internal: rejects empty and oversized documents with an error naming the field and the fix.';

CREATE OR REPLACE FUNCTION rcll.retain_chunks(
    bank        text,
    content     text,
    chunks      text[],
    embeddings  vector[],
    source      text DEFAULT NULL,
    occurred_at timestamptz DEFAULT NULL,
    room        text DEFAULT NULL,
    thread      text DEFAULT NULL,
    tags        text[] DEFAULT '{}',
    hall        text DEFAULT NULL,
    layer       text DEFAULT NULL,
    metadata    jsonb DEFAULT '{}',
    via         text DEFAULT 'sql',
    author      text DEFAULT NULL)
RETURNS TABLE (document_id bigint, unit_ids bigint[], created boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    h bytea;
    doc bigint;
    who record;
    prov jsonb;
    n integer := coalesce(array_length(chunks, 1), 0);
BEGIN
    PERFORM rcll._check_document(b, content);
    IF n = 0 THEN
        RAISE EXCEPTION 'chunks: at least one chunk is required' USING ERRCODE = '22023';
    END IF;
    IF embeddings IS NOT NULL AND coalesce(array_length(embeddings, 1), 0) <> n THEN
        RAISE EXCEPTION 'embeddings: % embeddings for % chunks', coalesce(array_length(embeddings, 1), 0), n
            USING ERRCODE = '22023', HINT = 'Pass one embedding per chunk, in the same order (or NULL for none).';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(chunks) c WHERE c IS NULL OR btrim(c, E' \t\r\n\f\v') = '') THEN
        RAISE EXCEPTION 'chunks: a chunk is empty' USING ERRCODE = '22023';
    END IF;
    IF layer IS NOT NULL AND layer NOT IN ('L0', 'L1', 'L2') THEN
        RAISE EXCEPTION 'layer: % is not a layer', quote_literal(layer) USING ERRCODE = '22023',
            HINT = 'Use L0 (rules and procedures), L1 (decisions) or L2 (observations).';
    END IF;
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata: must be a JSON object' USING ERRCODE = '22023';
    END IF;

    h := rcll._content_hash(content, thread);
    SELECT d.document_id INTO doc FROM rcll.documents d WHERE d.bank_id = b AND d.content_hash = h;
    IF doc IS NOT NULL THEN
        RETURN QUERY SELECT doc, array_agg(u.unit_id ORDER BY u.chunk_index, u.unit_id), false
                     FROM rcll.memory_units u WHERE u.document_id = doc;
        RETURN;
    END IF;

    who := rcll._resolve_author(author);
    prov := jsonb_build_object('via', coalesce(via, 'sql'), 'who', who.author,
                               'author_source', who.author_source, 'at', now(), 'source', source);
    INSERT INTO rcll.documents AS d (bank_id, content, content_hash, source, thread, occurred_at, provenance, metadata, extraction)
    VALUES (b, content, h, source, thread, occurred_at, prov, metadata, 'chunks')
    RETURNING d.document_id INTO doc;
    prov := prov || jsonb_build_object('document_id', doc);

    RETURN QUERY
    WITH ins AS (
        INSERT INTO rcll.memory_units AS u
            (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source,
             thread, tags, valid, mentioned_at, chunk_index, provenance, metadata)
        SELECT b, doc, 'chunk', c.chunk, e.embedding, retain_chunks.hall,
               coalesce(retain_chunks.layer, (SELECT r.layer FROM rcll.layer_rules r WHERE r.hall = retain_chunks.hall), 'L2'),
               retain_chunks.room, who.author, who.author_source, retain_chunks.thread,
               coalesce(retain_chunks.tags, '{}'),
               tstzrange(coalesce(occurred_at, now()), NULL), occurred_at, c.i - 1, prov, '{}'::jsonb
        FROM unnest(chunks) WITH ORDINALITY AS c(chunk, i)
        LEFT JOIN unnest(embeddings) WITH ORDINALITY AS e(embedding, i) USING (i)
        RETURNING u.unit_id, u.chunk_index
    )
    SELECT doc, array_agg(ins.unit_id ORDER BY ins.chunk_index), true FROM ins;
END
$$;
COMMENT ON FUNCTION rcll.retain_chunks(text, text, text[], vector[], text, timestamptz, text, text, text[], text, text, jsonb, text, text)
    IS 'Chunk-mode retain: store a document and its chunks (with their embeddings) in one statement. Re-retaining the same content and thread into the same bank returns the existing units (created = false).';

