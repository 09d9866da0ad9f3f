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

-- migration 005-rooms-authors-isolation.sql
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

INSERT INTO rcll.migrations (name, sha256) VALUES ('005-rooms-authors-isolation.sql', '40ef5394cc92646898bd54f7e4661ca7105c1d714b3d27b44f1d05c436df6369');

-- migration 006-reader-role.sql
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

INSERT INTO rcll.migrations (name, sha256) VALUES ('006-reader-role.sql', 'a7fd5a8a460fa392e4ea58f388c3d562d8b6eee23e409cca5174deb394198ab6');

-- migration 007-recall-time-index.sql
-- Run-once: the index the temporal recall channel reads (when a unit happened, else when it was said).

-- One expression for "when": occurred_start for extracted facts, mentioned_at for chunks (whose
-- occurred_start is unknown), the start of validity otherwise. Without it the temporal channel
-- reads every unit of the bank.
CREATE INDEX memory_units_bank_when ON rcll.memory_units
    (bank_id, (coalesce(occurred_start, mentioned_at, lower(valid))));

INSERT INTO rcll.migrations (name, sha256) VALUES ('007-recall-time-index.sql', 'b649575e4b098a2ec0174bc895e2c312090690322988f283d43827abc2691f37');

-- migration 008-document-order-index.sql
-- Run-once: find the chunk before or after a unit in its document (the context channel and the
-- reranker's context view). It replaces the (document_id) index, which is its prefix.
CREATE INDEX memory_units_document_chunk ON rcll.memory_units (document_id, chunk_index);
DROP INDEX rcll.memory_units_document;

INSERT INTO rcll.migrations (name, sha256) VALUES ('008-document-order-index.sql', '542932db829d921d7b8b1f0934cf97d0f3e514534eae39defacb9efcddddba85');

-- migration 009-recall-scope.sql
-- Run-once: the type of a recall's scope, resolved once per recall (rcll.recall_scope) and
-- passed to every channel: the bank's id, the rooms with their aliases expanded, the authors
-- with mine applied, and the filters as given.
CREATE TYPE rcll.recall_scope AS (
    bank_id              integer,
    rooms                text[],
    authors              text[],
    include_unattributed boolean,
    halls                text[],
    layers               text[],
    tags_any             text[],
    tags_all             text[],
    thread               text,
    as_of                timestamptz
);
COMMENT ON TYPE rcll.recall_scope IS 'What a recall may read, resolved: bank id, expanded rooms (NULL = all), resolved authors (NULL = all), whether unattributed units pass an author filter, halls, layers, tags (any / all), thread and validity instant (NULL = no filter). Built by rcll.recall_scope(...).';

INSERT INTO rcll.migrations (name, sha256) VALUES ('009-recall-scope.sql', '893295ddea4a942a5d116a0733db11c3bdf0022e7d0ced8863005d0e8c1982cc');

-- migration 010-dump-with-pg-dump.sql
-- Run-once: pg_dump keeps every memory of an extension install.
--
-- pg_dump leaves out the rows of the tables an extension created unless the extension marks
-- them with pg_extension_config_dump; it then dumps them (and the marked sequences' values, so
-- identities continue after a restore) after the CREATE EXTENSION that rebuilds the schema.
-- That function only works inside CREATE/ALTER EXTENSION. Under `rcll install` there is no
-- extension and pg_dump dumps the tables like any other, so there this block does nothing.
--
-- Every table is marked, and every sequence (the identity columns' ones), except
-- rcll.migrations, whose rows the extension script writes itself. The rows the install seeds are
-- left out (CREATE EXTENSION writes them again; dumped too they would collide): the thirteen
-- room rules and the disabled general rule (rule_id 1-14, written by migration 005 right after
-- the table was created, in every install) and the layers of the nine standard halls. A changed
-- seed row (the general rule enabled, a standard hall moved to another layer) is therefore not
-- in the dump: re-apply such changes after a restore (docs/backup.md).
DO $$
DECLARE
    rel regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        RETURN;
    END IF;
    FOR rel IN SELECT c.oid::regclass FROM pg_catalog.pg_class c
               WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p', 'S')
                 AND c.relname <> 'migrations'
               ORDER BY c.relname
    LOOP
        PERFORM pg_catalog.pg_extension_config_dump(rel, CASE rel
            WHEN 'rcll.room_rules'::regclass THEN 'WHERE rule_id > 14'
            WHEN 'rcll.layer_rules'::regclass THEN
                'WHERE hall NOT IN (''rule'', ''procedure'', ''decision'', ''event'', ''preference'', '
                '''warning'', ''discovery'', ''fact'', ''observation'')'
            ELSE '' END);
    END LOOP;
END
$$;

INSERT INTO rcll.migrations (name, sha256) VALUES ('010-dump-with-pg-dump.sql', '979d7d63ad6d5bc65ba5dff46737e06beb2740b9b9967688d8d72b0f3d2d8fa2');

-- migration 012-unit-lexicon.sql
-- Run-once: the narrow table BM25 reads, so the lexical channel stays off the wide unit heap.
--
-- A memory_units row carries its 1.5 kB embedding inline (STORAGE PLAIN, for the dense channel's
-- exact scans), so a page holds about four units: at 100k units BM25 read ~3,700 candidates from
-- ~3,500 heap pages. rcll.unit_lexicon holds, per unit, only what BM25 and the recall scope read
-- (~450 bytes a unit, against ~2.7 kB). memory_units keeps text, lexical and lexical_length as the
-- source; the triggers of sql/functions/021-unit-lexicon.sql copy them here in the writing
-- transaction (no statistics are kept on the write path) and follow every later change of a
-- filter column. Exact BM25 over either table gives the same rankings and scores.
CREATE TABLE rcll.unit_lexicon (
    unit_id        bigint PRIMARY KEY REFERENCES rcll.memory_units ON DELETE CASCADE ON UPDATE CASCADE,
    bank_id        integer NOT NULL,
    lexical_length integer NOT NULL,
    layer          text NOT NULL,
    room           text,
    author         text,
    hall           text,
    thread         text,
    tags           text[] NOT NULL,
    valid          tstzrange NOT NULL,
    lexical        tsvector NOT NULL
);
COMMENT ON TABLE rcll.unit_lexicon IS 'Narrow copy of each unit''s lexical representation and recall filters, the only table the BM25 channel reads. Written by triggers on memory_units in the same transaction; never written directly.';
COMMENT ON COLUMN rcll.unit_lexicon.unit_id IS 'The unit (memory_units.unit_id); deleted with it.';
COMMENT ON COLUMN rcll.unit_lexicon.bank_id IS 'memory_units.bank_id (BM25 statistics are per bank).';
COMMENT ON COLUMN rcll.unit_lexicon.lexical_length IS 'memory_units.lexical_length (BM25 document length).';
COMMENT ON COLUMN rcll.unit_lexicon.layer IS 'memory_units.layer (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.room IS 'memory_units.room (recall filter; follows room moves and merges).';
COMMENT ON COLUMN rcll.unit_lexicon.author IS 'memory_units.author (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.hall IS 'memory_units.hall (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.thread IS 'memory_units.thread (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.tags IS 'memory_units.tags (recall filter).';
COMMENT ON COLUMN rcll.unit_lexicon.valid IS 'memory_units.valid (recall "as of" filter; follows supersession).';
COMMENT ON COLUMN rcll.unit_lexicon.lexical IS 'memory_units.lexical: the tsvector BM25 scores.';

INSERT INTO rcll.unit_lexicon (unit_id, bank_id, lexical_length, layer, room, author, hall, thread, tags, valid, lexical)
SELECT u.unit_id, u.bank_id, u.lexical_length, u.layer, u.room, u.author, u.hall, u.thread, u.tags, u.valid, u.lexical
FROM rcll.memory_units u;

CREATE INDEX unit_lexicon_lexical_gin ON rcll.unit_lexicon USING gin (lexical);
-- Small banks in a big store: the planner reads the bank's rows instead of a common term's
-- posting list over every bank.
CREATE INDEX unit_lexicon_bank ON rcll.unit_lexicon (bank_id);
-- BM25 no longer reads memory_units.lexical through an index.
DROP INDEX rcll.memory_units_lexical_gin;
COMMENT ON COLUMN rcll.memory_units.lexical IS 'tsvector of text under the bank''s text search configuration; copied to rcll.unit_lexicon, which the BM25 channel reads.';

-- Dumped like every other table (see 010): a restore loads these rows as dumped, and the copying
-- trigger stands aside while it does (rcll._restoring).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.unit_lexicon'::regclass, '');
    END IF;
END
$$;

INSERT INTO rcll.migrations (name, sha256) VALUES ('012-unit-lexicon.sql', '002e4dc666058d1114f7d1f1c2fd71aac5a7e905af0fd0d8785f7074663b99c4');

-- migration 013-first-stage-indexes.sql
-- Run-once: what the entity and session channels (sql/functions/125-, 127-) read, kept narrow.
--
-- The session channel scores documents by BM25 over their units: it needs each candidate's
-- document and every touched document's length. Read from memory_units, that is one random visit
-- of a 2.7 kB row per candidate (thousands per query at 100k units); unit_lexicon carries the
-- document id beside the lexical length, and an index on it answers a document's length by an
-- index-only scan.
ALTER TABLE rcll.unit_lexicon ADD COLUMN document_id bigint;
COMMENT ON COLUMN rcll.unit_lexicon.document_id IS 'The unit''s document (memory_units.document_id): the session channel groups BM25 hits by it.';
UPDATE rcll.unit_lexicon l SET document_id = u.document_id
FROM rcll.memory_units u WHERE u.unit_id = l.unit_id AND u.document_id IS NOT NULL;
CREATE INDEX unit_lexicon_document ON rcll.unit_lexicon (document_id) INCLUDE (lexical_length);

-- The graph channel walks the extractor's entity links and leaves the keyless speaker/name links
-- (roles 'speaker', 'name') to the entity channel; without an index on the links it may walk, a
-- hub entity's keyless links were read and discarded one by one (20x slower at 100k units). The
-- predicate is rcll._keyless_link(role) negated, as the channel's queries inline it.
CREATE INDEX unit_entities_walk ON rcll.unit_entities (entity_id, unit_id)
    WHERE NOT coalesce(role IN ('speaker', 'name'), false);

INSERT INTO rcll.migrations (name, sha256) VALUES ('013-first-stage-indexes.sql', '16d1ed5a3925d2f36e8dc001db2c4ca4169968b2e5dbd877e9951f550bbef8e2');

-- migration 014-document-lexicon.sql
-- Run-once: each document's BM25 length, kept beside the units' copy (rcll.unit_lexicon).
--
-- The session channel (sql/functions/120-channel-lexical.sql) scores documents by BM25 over
-- their units, and BM25 needs each candidate document's length: the sum of its units' lexical
-- lengths. Summed at query time, that read every unit of every candidate document through
-- unit_lexicon's document index: at 100k units, ~40,000 index entries for the ~3,200 documents
-- of a typical query, ~18 ms of the channel's ~70. One row per document answers it from one
-- lookup. The triggers of sql/functions/022-document-lexicon.sql keep it in the writing
-- transaction, recomputed from unit_lexicon for every document whose units change.
CREATE TABLE rcll.document_lexicon (
    document_id    bigint PRIMARY KEY REFERENCES rcll.documents ON DELETE CASCADE,
    bank_id        integer NOT NULL,
    lexical_length bigint NOT NULL
);
COMMENT ON TABLE rcll.document_lexicon IS 'Each document''s BM25 length (the sum of its units'' lexical lengths in rcll.unit_lexicon), read by the session channel. Written by triggers on unit_lexicon in the same transaction; never written directly.';
COMMENT ON COLUMN rcll.document_lexicon.document_id IS 'The document (documents.document_id); deleted with it.';
COMMENT ON COLUMN rcll.document_lexicon.bank_id IS 'documents.bank_id (bank isolation covers this table).';
COMMENT ON COLUMN rcll.document_lexicon.lexical_length IS 'Sum of unit_lexicon.lexical_length over the document''s units (all of them: the recall scope does not change a document''s length).';

INSERT INTO rcll.document_lexicon (document_id, bank_id, lexical_length)
SELECT d.document_id, d.bank_id, sum(l.lexical_length)
FROM rcll.documents d JOIN rcll.unit_lexicon l ON l.document_id = d.document_id AND l.bank_id = d.bank_id
GROUP BY d.document_id, d.bank_id;

-- Dumped like unit_lexicon (see 010, 012): a restore loads these rows as dumped, and the
-- triggers that keep them stand aside while unit_lexicon's rows are restored (rcll._restoring).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.document_lexicon'::regclass, '');
    END IF;
END
$$;

INSERT INTO rcll.migrations (name, sha256) VALUES ('014-document-lexicon.sql', '61c8a9da2a28cdbbf0eb32914a05230718484a5e6a0fa08d73c5627fade0e321');

-- migration 015-bank-document-count.sql
-- Run-once: the session channel's document count (its BM25 N) kept with the other corpus
-- statistics in rcll.bank_stats, refreshed off the write path by rcll.refresh_bank_stats.
--
-- The session channel counted the bank's documents on every recall: at 1M units, in a bank of
-- 333,333 units and 39,424 documents, an index-only scan of 15-19 ms (15,778 buffers, 15,410 heap
-- fetches on a bank being written), ~10% of the BM25 channels' time there (docs/scaling.md).
-- NULL (never refreshed) keeps the exact count, as the unit figures do.
ALTER TABLE rcll.bank_stats ADD COLUMN document_count bigint;
COMMENT ON COLUMN rcll.bank_stats.document_count IS 'Documents in the bank at the last refresh (the session channel''s BM25 N); NULL until the first refresh, when recall counts them.';
COMMENT ON TABLE rcll.bank_stats IS 'BM25 corpus statistics per bank (unit and document counts, total length), refreshed off the write path by rcll.refresh_bank_stats(). Document frequencies need no table: they are counted from the candidates.';

-- Counted now for the banks whose unit figures were refreshed, so recall reads what it counted before.
UPDATE rcll.bank_stats s
SET document_count = (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = s.bank_id)
WHERE s.unit_count > 0;

INSERT INTO rcll.migrations (name, sha256) VALUES ('015-bank-document-count.sql', '79f2070d5cf65b45940b0dcec0ff7572eaa2229812aeb9c97d679ee0b13ddb46');

-- migration 016-bank-lexeme-index.sql
-- Run-once: the BM25 candidates' index keyed by (bank, lexeme), so a bank's candidates come from
-- its own posting lists, not every bank's.
--
-- unit_lexicon_lexical_gin indexes lexemes alone: a query term's posting list holds every bank's
-- units that contain it, and the planner ANDs it with the bank index. At 1M units in 400 banks,
-- the biggest bank's (333,333 units) candidates were 26,229 of 70,000 GIN entries read, ANDed with
-- a bitmap of the bank's 339,000 index entries: 24 + 17 ms of the BM25 channels' ~160
-- (docs/scaling.md). Keyed by bank, the scan reads the bank's own entries and nothing else.

-- A unit's lexemes as index keys of its bank: '<bank id> <lexeme>'. Immutable, since an index is
-- built on it; defined here, with the index, and never replaced (a change would be a new
-- migration and a rebuilt index).
CREATE FUNCTION rcll._bank_keys(bank_id integer, lexemes text[])
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT ARRAY(SELECT _bank_keys.bank_id::text || ' ' || l FROM unnest(_bank_keys.lexemes) AS l)
$$;
COMMENT ON FUNCTION rcll._bank_keys(integer, text[])
    IS 'Internal: lexemes as the keys of one bank in unit_lexicon_bank_lexemes (''<bank id> <lexeme>''). The BM25 channels match rcll._bank_keys(bank_id, tsvector_to_array(lexical)) && rcll._bank_keys(<bank>, <query lexemes>).';

CREATE INDEX unit_lexicon_bank_lexemes ON rcll.unit_lexicon
    USING gin (rcll._bank_keys(bank_id, pg_catalog.tsvector_to_array(lexical)));
DROP INDEX rcll.unit_lexicon_lexical_gin;

INSERT INTO rcll.migrations (name, sha256) VALUES ('016-bank-lexeme-index.sql', 'ebeb7a81d595c3f324158d1876ed6f6e23e33cfb13a3a5a81181f90305c2bd63');

-- migration 019-forget.sql
-- Run-once: what a forget keeps (who, when, by which selector, how many rows - never the content)
-- and the versions a correction leaves behind.
--
-- rcll.forget_log has no foreign key to rcll.banks on purpose: dropping a bank deletes every row
-- of it (ON DELETE CASCADE from banks on every table), and the record that it was dropped must
-- outlive it. The bank's name is kept beside its id for the same reason.
CREATE TABLE rcll.forget_log (
    forget_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer NOT NULL,
    bank_name    text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,
    action       text NOT NULL CHECK (action IN ('forget', 'drop_bank', 'forget_state', 'expire', 'correct')),
    selector     jsonb NOT NULL CHECK (jsonb_typeof(selector) = 'object'),
    counts       jsonb NOT NULL CHECK (jsonb_typeof(counts) = 'object'),
    reason       text
);
COMMENT ON TABLE rcll.forget_log IS 'One row per forget, bank drop, state forget, expiry sweep or correction: who, when, by which selector, how many rows of each kind. Never the forgotten content. Outlives the bank it names (no foreign key).';
COMMENT ON COLUMN rcll.forget_log.forget_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.forget_log.bank_id IS 'Id the bank had (the bank may be gone).';
COMMENT ON COLUMN rcll.forget_log.bank_name IS 'Name the bank had when it was acted on.';
COMMENT ON COLUMN rcll.forget_log.at IS 'When it was done.';
COMMENT ON COLUMN rcll.forget_log.actor IS 'Who did it (an agent, role:<role>, or system:<job>).';
COMMENT ON COLUMN rcll.forget_log.action IS 'forget, drop_bank, forget_state, expire (the periodic sweep) or correct.';
COMMENT ON COLUMN rcll.forget_log.selector IS 'The selector as the caller gave it (unit and document ids, thread, author, tag, room, time ranges, everything); ids and names, never text.';
COMMENT ON COLUMN rcll.forget_log.counts IS 'How many rows of each kind went (documents, units, embeddings, lexicon rows, links, entities, observations...).';
COMMENT ON COLUMN rcll.forget_log.reason IS 'The reason the caller gave, if any (kept as given: do not paste the forgotten text into it).';
CREATE INDEX forget_log_bank_at ON rcll.forget_log (bank_id, at);

-- A correction replaces a unit's text in place (its id, links and place in recall stay) and keeps
-- the replaced text here, so the unit's history lists its versions. Forgetting the unit forgets
-- its versions with it.
CREATE TABLE rcll.unit_versions (
    unit_id      bigint NOT NULL REFERENCES rcll.memory_units ON DELETE CASCADE,
    version      integer NOT NULL CHECK (version > 0),
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    text         text NOT NULL,
    reason       text NOT NULL CHECK (length(btrim(reason)) > 0),
    who          text,
    at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (unit_id, version)
);
COMMENT ON TABLE rcll.unit_versions IS 'Earlier texts of corrected units: one row per correction: the text it replaced, why and by whom (the unit holds the current text). Deleted with the unit.';
COMMENT ON COLUMN rcll.unit_versions.unit_id IS 'The corrected unit.';
COMMENT ON COLUMN rcll.unit_versions.version IS 'The version this text was (1 = as retained); the unit''s current text is the next version.';
COMMENT ON COLUMN rcll.unit_versions.bank_id IS 'Bank of the unit (bank isolation covers this table).';
COMMENT ON COLUMN rcll.unit_versions.text IS 'The text of this version, as it was before the correction.';
COMMENT ON COLUMN rcll.unit_versions.reason IS 'Why it was corrected.';
COMMENT ON COLUMN rcll.unit_versions.who IS 'Who corrected it, as the server resolved it.';
COMMENT ON COLUMN rcll.unit_versions.at IS 'When it was corrected.';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.forget_log'::regclass, '');
        PERFORM pg_catalog.pg_extension_config_dump('rcll.unit_versions'::regclass, '');
        PERFORM pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('rcll.forget_log', 'forget_id')::regclass, '');
    END IF;
END
$$;

INSERT INTO rcll.migrations (name, sha256) VALUES ('019-forget.sql', '55ed7978db5acab1b75a6a2f7b9d55786c4449c5f03806c91333b48eeb652219');

-- migration 020-expiry.sql
-- Run-once: expiry. A unit may carry the instant it expires (a retain's expires_at or time to
-- live, or a bank's retention policy for its room, hall or layer); recall stops returning it at
-- that instant - a read-time filter in the scope, so no sweeper lag is ever visible - and the
-- periodic sweep (rcll.expire) forgets it physically, with the same cascade as rcll.forget.
ALTER TABLE rcll.memory_units ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN rcll.memory_units.expires_at IS 'When the unit expires (NULL: never): recall no longer returns it from then on, and the periodic sweep (rcll.expire) forgets it. Set by a retain''s expires_at/ttl or the bank''s retention policies (rcll.retention_policies), the earliest of them.';
CREATE INDEX memory_units_expires ON rcll.memory_units (expires_at) WHERE expires_at IS NOT NULL;

-- The narrow lexical copy carries it too: the scope filter reads it on every channel's rows.
ALTER TABLE rcll.unit_lexicon ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN rcll.unit_lexicon.expires_at IS 'memory_units.expires_at (recall filter: an expired unit is out of scope).';

CREATE TABLE rcll.retention_policies (
    policy_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bank_id      integer NOT NULL REFERENCES rcll.banks ON DELETE CASCADE,
    room         text,
    hall         text,
    layer        text CHECK (layer IN ('L0', 'L1', 'L2')),
    keep         interval NOT NULL CHECK (keep > interval '0'),
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (bank_id, room, hall, layer)
);
COMMENT ON TABLE rcll.retention_policies IS 'How long a bank keeps its units, for all of them or those of one room, hall or layer (NULL = any): a unit expires `keep` after it was retained, at the earliest of the policies that match it. E.g. raw L2 observations kept 90 days.';
COMMENT ON COLUMN rcll.retention_policies.policy_id IS 'Surrogate key.';
COMMENT ON COLUMN rcll.retention_policies.bank_id IS 'The bank.';
COMMENT ON COLUMN rcll.retention_policies.room IS 'Only units of this room (NULL: any room).';
COMMENT ON COLUMN rcll.retention_policies.hall IS 'Only units of this hall (NULL: any hall).';
COMMENT ON COLUMN rcll.retention_policies.layer IS 'Only units of this layer (NULL: any layer).';
COMMENT ON COLUMN rcll.retention_policies.keep IS 'How long a matching unit is kept after it was retained.';
COMMENT ON COLUMN rcll.retention_policies.created_by IS 'Who set the policy.';
COMMENT ON COLUMN rcll.retention_policies.created_at IS 'When the policy was set.';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'rcll') THEN
        PERFORM pg_catalog.pg_extension_config_dump('rcll.retention_policies'::regclass, '');
        PERFORM pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('rcll.retention_policies', 'policy_id')::regclass, '');
    END IF;
END
$$;

INSERT INTO rcll.migrations (name, sha256) VALUES ('020-expiry.sql', 'c813bba1db734d7904a232ebc6e35b119b5780cc139d8c93c48594912c56e387');

-- functions 010-banks.sql
-- Banks: creating them and resolving a bank name to its id with an error that says the fix.

CREATE OR REPLACE FUNCTION rcll._bank_id(bank text)
RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
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
AS $$
    SELECT b.name, b.description,
           (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b.bank_id),
           (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = b.bank_id),
           b.created_at
    FROM rcll.banks b ORDER BY b.name
$$;
COMMENT ON FUNCTION rcll.list_banks() IS 'Every bank with its unit and document counts.';


-- functions 015-restoring.sql
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


-- functions 020-lexical.sql
-- Lexical representation of a unit: its tsvector and BM25 document length, kept by a trigger
-- (and copied, with the recall filters, into rcll.unit_lexicon by 021-unit-lexicon.sql).

CREATE OR REPLACE FUNCTION rcll._lexical_length(doc tsvector)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0)::integer FROM unnest(doc) AS t
$$;
COMMENT ON FUNCTION rcll._lexical_length(tsvector) IS 'Internal: number of token positions in a tsvector (BM25 document length).';

CREATE OR REPLACE FUNCTION rcll._units_lexical()
RETURNS trigger
LANGUAGE plpgsql
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


-- functions 021-unit-lexicon.sql
-- The narrow lexical table (rcll.unit_lexicon): kept in step with memory_units by triggers, in
-- the writing transaction, and filtered by the same scope predicate as every channel.

CREATE OR REPLACE FUNCTION rcll._units_lexicon()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer: agents' roles write memory_units; the copy is the owner's bookkeeping (as room counts).
SECURITY DEFINER
AS $$
BEGIN
    IF TG_LEVEL = 'STATEMENT' THEN
        -- Inserted units: one set-based insert per statement (a retain, a COPY, an import batch),
        -- not one per row.
        INSERT INTO rcll.unit_lexicon (unit_id, bank_id, lexical_length, layer, room, author, hall, thread, tags, valid, lexical, document_id, expires_at)
        SELECT n.unit_id, n.bank_id, n.lexical_length, n.layer, n.room, n.author, n.hall, n.thread, n.tags, n.valid, n.lexical, n.document_id, n.expires_at
        FROM new_units n;
    ELSE
        -- A changed unit: its copy follows. The insert arm serves a unit written while the insert
        -- trigger was off (an import switches write triggers off): its copy appears at its first change.
        INSERT INTO rcll.unit_lexicon (unit_id, bank_id, lexical_length, layer, room, author, hall, thread, tags, valid, lexical, document_id, expires_at)
        VALUES (NEW.unit_id, NEW.bank_id, NEW.lexical_length, NEW.layer, NEW.room, NEW.author, NEW.hall, NEW.thread,
                NEW.tags, NEW.valid, NEW.lexical, NEW.document_id, NEW.expires_at)
        ON CONFLICT (unit_id) DO UPDATE
            SET bank_id = excluded.bank_id, lexical_length = excluded.lexical_length, layer = excluded.layer,
                room = excluded.room, author = excluded.author, hall = excluded.hall, thread = excluded.thread,
                tags = excluded.tags, valid = excluded.valid, lexical = excluded.lexical, document_id = excluded.document_id,
                expires_at = excluded.expires_at;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_lexicon() IS 'Trigger: keeps rcll.unit_lexicon a copy of the lexical representation and recall filters of memory_units - the units a statement inserts (units_lexicon_inserted), and a unit whose text, room, author, hall, layer, thread, tags, validity, expiry or bank changed (units_lexicon_changed: room moves and merges, supersession, consolidation).';

-- Not while a dump is restored (rcll._restoring): unit_lexicon is dumped and comes back itself.
CREATE OR REPLACE TRIGGER units_lexicon_inserted AFTER INSERT ON rcll.memory_units
    REFERENCING NEW TABLE AS new_units
    FOR EACH STATEMENT WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_lexicon();

-- Every column the copy holds is listed (UPDATE OF fires on the columns an UPDATE sets: text,
-- because units_lexical recomputes lexical from it); the WHEN clause skips updates that change none.
CREATE OR REPLACE TRIGGER units_lexicon_changed
    AFTER UPDATE OF bank_id, text, lexical, lexical_length, layer, room, author, hall, thread, tags, valid, expires_at
    ON rcll.memory_units
    FOR EACH ROW WHEN ((OLD.bank_id, OLD.lexical_length, OLD.layer, OLD.room, OLD.author, OLD.hall, OLD.thread,
                        OLD.tags, OLD.valid, OLD.lexical, OLD.expires_at)
                       IS DISTINCT FROM (NEW.bank_id, NEW.lexical_length, NEW.layer, NEW.room, NEW.author, NEW.hall,
                                         NEW.thread, NEW.tags, NEW.valid, NEW.lexical, NEW.expires_at))
    EXECUTE FUNCTION rcll._units_lexicon();


-- functions 022-document-lexicon.sql
-- Each document's BM25 length (rcll.document_lexicon, migration 014): recomputed from
-- rcll.unit_lexicon, in the writing transaction, for every document whose units a statement
-- inserts, deletes or changes the length or document of.

CREATE OR REPLACE FUNCTION rcll._refresh_document_lengths(document_ids bigint[])
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    -- Recomputed, not incremented: a statement that touches a document twice, or a unit copied
    -- late (rcll._units_lexicon's insert arm), cannot make the length drift from its units. Only
    -- the document's own bank's units count: the trigger runs as the owner, past bank isolation,
    -- and a unit another bank's role pointed at this document must not change its length.
    INSERT INTO rcll.document_lexicon AS x (document_id, bank_id, lexical_length)
    SELECT d.document_id, d.bank_id,
           coalesce((SELECT sum(l.lexical_length) FROM rcll.unit_lexicon l
                     WHERE l.document_id = d.document_id AND l.bank_id = d.bank_id), 0)
    FROM rcll.documents d
    WHERE d.document_id = ANY (_refresh_document_lengths.document_ids)
    ON CONFLICT (document_id) DO UPDATE SET lexical_length = excluded.lexical_length
    WHERE x.lexical_length IS DISTINCT FROM excluded.lexical_length
$$;
COMMENT ON FUNCTION rcll._refresh_document_lengths(bigint[])
    IS 'Internal: recompute rcll.document_lexicon for these documents from their units in rcll.unit_lexicon.';

CREATE OR REPLACE FUNCTION rcll._document_lexicon()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer, as rcll._units_lexicon: the length is the owner's bookkeeping, and bank isolation
-- must not hide a document's row from the trigger that keeps it.
SECURITY DEFINER
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM rcll._refresh_document_lengths(ARRAY(SELECT DISTINCT n.document_id FROM new_rows n WHERE n.document_id IS NOT NULL));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM rcll._refresh_document_lengths(ARRAY(SELECT DISTINCT o.document_id FROM old_rows o WHERE o.document_id IS NOT NULL));
    ELSE
        PERFORM rcll._refresh_document_lengths(ARRAY[OLD.document_id, NEW.document_id]);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._document_lexicon() IS 'Trigger: keeps rcll.document_lexicon the sum of unit_lexicon''s lengths per document - for the documents of the units a statement inserts (unit_lexicon_documents_inserted) or deletes (unit_lexicon_documents_deleted), and of a unit whose length or document changed (unit_lexicon_documents_changed: an edited text).';

-- Not while a dump is restored (rcll._restoring): document_lexicon is dumped and comes back itself.
CREATE OR REPLACE TRIGGER unit_lexicon_documents_inserted AFTER INSERT ON rcll.unit_lexicon
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.unit_lexicon'))
    EXECUTE FUNCTION rcll._document_lexicon();

CREATE OR REPLACE TRIGGER unit_lexicon_documents_deleted AFTER DELETE ON rcll.unit_lexicon
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION rcll._document_lexicon();

-- Per row, and only for the rare change that moves a length: room moves and merges,
-- supersession and tag edits rewrite unit_lexicon rows without touching either column.
CREATE OR REPLACE TRIGGER unit_lexicon_documents_changed AFTER UPDATE OF lexical_length, document_id ON rcll.unit_lexicon
    FOR EACH ROW WHEN ((OLD.lexical_length, OLD.document_id) IS DISTINCT FROM (NEW.lexical_length, NEW.document_id))
    EXECUTE FUNCTION rcll._document_lexicon();


-- functions 030-authors.sql
-- Authors: who wrote a unit, resolved by the server, never taken from the caller when the server knows.

CREATE OR REPLACE FUNCTION rcll._identity_server()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Checked by role existence first: pg_has_role fails for a role that does not exist.
    SELECT CASE WHEN to_regrole('rcll_identity_server') IS NULL THEN false
                ELSE pg_has_role(session_user, 'rcll_identity_server', 'MEMBER') END
$$;
COMMENT ON FUNCTION rcll._identity_server() IS 'Internal: true when the session''s role is a member of rcll_identity_server (superusers are), the role trusted to name the agent or person it authenticated.';

CREATE OR REPLACE FUNCTION rcll.current_agent()
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
-- Definer: any writer may learn its own identity without being able to read rcll.identities.
-- session_user (not current_user) is what it checks, and SECURITY DEFINER does not change it.
-- PL/pgSQL rather than SQL: it runs once per written row, and PL/pgSQL keeps its plans.
SECURITY DEFINER
AS $$
DECLARE
    agent   text;
    claimed text;
BEGIN
    -- A role mapped in rcll.identities always writes as its agent.
    SELECT i.agent INTO agent FROM rcll.identities i WHERE i.role_name = session_user;
    IF agent IS NOT NULL THEN
        RETURN agent;
    END IF;
    -- Otherwise the RCLL server, which authenticated the caller, may set rcll.agent for the
    -- transaction - honoured only when the session's role is a member of rcll_identity_server,
    -- so a psql user cannot forge it.
    claimed := nullif(btrim(current_setting('rcll.agent', true)), '');
    IF claimed IS NOT NULL AND rcll._identity_server() THEN
        RETURN claimed;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll.current_agent() IS 'The agent identity the server resolved for this session or transaction, or NULL: a role mapped in rcll.identities, else rcll.agent set by a member of rcll_identity_server (superusers count as members).';

CREATE OR REPLACE FUNCTION rcll._carry_tags()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Consolidation rewrites facts into observations and must carry their author: and room tags
    -- across; only the trusted server may ask for that (SET LOCAL rcll.carry_tags = on).
    SELECT coalesce(current_setting('rcll.carry_tags', true), '') IN ('on', 'true', '1') AND rcll._identity_server()
$$;
COMMENT ON FUNCTION rcll._carry_tags() IS 'Internal: true when a member of rcll_identity_server has set rcll.carry_tags = on, so reserved tags (author:, room-alias:, room-new:) written by it are kept rather than discarded as forged.';

CREATE OR REPLACE FUNCTION rcll._resolve_author(claimed text, OUT author text, OUT author_source text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- No warning here: the units_room_counts_inserted statement trigger (051-room-counts.sql) warns once per
    -- write, for every client, whether or not it came through a function that called this.
    author := rcll.current_agent();
    IF author IS NOT NULL THEN
        author_source := 'server';             -- a claimed author is discarded
    ELSIF nullif(btrim(claimed), '') IS NOT NULL THEN
        author := btrim(claimed);
        author_source := 'self_declared';
    ELSE
        author_source := 'none';
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._resolve_author(text) IS 'Internal: the author of a write and how it was resolved (server, self_declared, none). Never falls back to the connection''s role name.';

CREATE OR REPLACE FUNCTION rcll._units_author()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    who record;
    tag text;
BEGIN
    -- Runs once per written row: every assignment below is skipped when it would change nothing.
    IF NEW.tags IS NULL THEN
        NEW.tags := '{}';
    -- author: tags are the server's to write; one supplied by the caller is forged and discarded.
    ELSIF array_to_string(NEW.tags, E'\x1f') LIKE '%author%' AND NOT rcll._carry_tags() THEN
        NEW.tags := ARRAY(SELECT t FROM unnest(NEW.tags) AS t
                          WHERE t NOT LIKE 'author:%' AND t NOT LIKE 'author-source:%');
    END IF;
    who := rcll._resolve_author(NEW.author);
    NEW.author := who.author;
    NEW.author_source := who.author_source;
    IF NEW.author IS NOT NULL THEN
        -- The tag is what survives consolidation rewrites; the tag roster is the author list.
        tag := 'author:' || NEW.author;
        IF NOT tag = ANY (NEW.tags) THEN
            NEW.tags := NEW.tags || tag;
        END IF;
        IF NEW.author_source = 'self_declared' AND NOT 'author-source:self_declared' = ANY (NEW.tags) THEN
            NEW.tags := NEW.tags || 'author-source:self_declared'::text;
        END IF;
    END IF;
    -- Provenance says who, as resolved here - a "who" the caller put in it is replaced too.
    IF NEW.provenance ->> 'who' IS DISTINCT FROM NEW.author
       OR NEW.provenance ->> 'author_source' IS DISTINCT FROM NEW.author_source
       OR NOT NEW.provenance ? 'at'
       OR (NEW.document_id IS NOT NULL AND NOT NEW.provenance ? 'document_id') THEN
        NEW.provenance := NEW.provenance
            || jsonb_build_object('who', NEW.author, 'author_source', NEW.author_source)
            || CASE WHEN NEW.document_id IS NOT NULL AND NOT NEW.provenance ? 'document_id'
                    THEN jsonb_build_object('document_id', NEW.document_id) ELSE '{}'::jsonb END
            || CASE WHEN NOT NEW.provenance ? 'at' THEN jsonb_build_object('at', now()) ELSE '{}'::jsonb END;
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_author() IS 'Trigger: the author of every new unit, resolved by the server (a caller''s author and author: tags are discarded when it knows; otherwise kept as self_declared), carried on an author:<name> tag and in provenance.';

CREATE OR REPLACE TRIGGER units_author BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_author();

CREATE OR REPLACE FUNCTION rcll._documents_author()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    who record;
BEGIN
    -- The server's identity replaces a caller's "who"; a self-declared one stays as written.
    who := rcll._resolve_author(NEW.provenance ->> 'who');
    NEW.provenance := NEW.provenance
        || CASE WHEN who.author_source = 'server' THEN jsonb_build_object('who', who.author) ELSE '{}'::jsonb END
        || jsonb_build_object('author_source', who.author_source);
    IF NOT NEW.provenance ? 'at' THEN
        NEW.provenance := NEW.provenance || jsonb_build_object('at', now());
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._documents_author() IS 'Trigger: a document''s provenance names the server-resolved writer (a caller''s "who" is replaced when the server knows, else marked self_declared).';

CREATE OR REPLACE TRIGGER documents_author BEFORE INSERT ON rcll.documents
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.documents'))
    EXECUTE FUNCTION rcll._documents_author();


-- functions 035-audit.sql
-- Audit: who is acting, for the rows rcll.audit_log keeps.

CREATE OR REPLACE FUNCTION rcll._actor()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(rcll.current_agent(), 'role:' || session_user)
$$;
COMMENT ON FUNCTION rcll._actor() IS 'Internal: who is acting, for audit rows: the resolved agent, else role:<session role> (audit only; never used as an author).';

CREATE OR REPLACE FUNCTION rcll._audit(bank_id integer, action text, target jsonb, detail jsonb DEFAULT '{}',
                                       actor text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO rcll.audit_log (bank_id, actor, action, target, detail)
    VALUES (_audit.bank_id, coalesce(_audit.actor, rcll._actor()), _audit.action, _audit.target, _audit.detail)
    RETURNING audit_id
$$;
COMMENT ON FUNCTION rcll._audit(integer, text, jsonb, jsonb, text) IS 'Internal: the one way an action is recorded in rcll.audit_log (bank_id NULL: database-wide); the actor is rcll._actor() unless a job or the server names one (system:consolidate, person:<name>). Returns the audit_id.';

CREATE OR REPLACE FUNCTION rcll._audit_reason(reason text, action text, hint text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF nullif(btrim(reason), '') IS NULL THEN
        RAISE EXCEPTION 'reason: a % needs a reason', action USING ERRCODE = '22023', HINT = hint;
    END IF;
    RETURN btrim(reason);
END
$$;
COMMENT ON FUNCTION rcll._audit_reason(text, text, text) IS 'Internal: the reason a person or agent gave for an audited action (a room move, a merge proposal), trimmed, or an error naming the action and the fix (hint).';


-- functions 035-login-author.sql
-- The author of a one-person client (the CLI): resolved from the connection the database authenticated.

CREATE OR REPLACE FUNCTION rcll.login_agent(configured text DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
AS $$
    -- A role mapped in rcll.identities writes as its agent, whatever is configured (and an
    -- rcll.agent the identity server already set for this transaction stands). A role trusted to
    -- name agents (a member of rcll_identity_server; superusers, such as the embedded database's
    -- postgres, are members): the identity the process was configured with, else the login role
    -- itself. Any other role: only rcll.identities makes its name an author (the database cannot
    -- tell a person's login from an account many agents share), so none.
    SELECT coalesce(rcll.current_agent(),
                    CASE WHEN rcll._identity_server() THEN coalesce(nullif(btrim(configured), ''), session_user::text) END)
$$;
COMMENT ON FUNCTION rcll.login_agent(text) IS 'The identity a client that is one person''s own connection (the CLI) writes as, for it to set as rcll.agent: the role''s agent in rcll.identities; for a member of rcll_identity_server the configured identity, else the login role''s name; NULL for an unmapped role outside rcll_identity_server. Not for a server that serves many callers over one role: those set the agent they authenticated.';


-- functions 038-retain-document.sql
-- Retain's document: the checks and the documents row every retain writes first, in chunk or extraction mode.

CREATE OR REPLACE FUNCTION rcll._content_hash(content text, thread text)
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT sha256(convert_to(coalesce(thread, '') || E'\x1f' || content, 'UTF8'))
$$;
COMMENT ON FUNCTION rcll._content_hash(text, text) IS 'Internal: the identity of a document within a bank (thread and content).';

CREATE OR REPLACE FUNCTION rcll._document_units(document_id bigint)
RETURNS bigint[]
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(array_agg(u.unit_id ORDER BY u.chunk_index, u.unit_id), '{}')
    FROM rcll.memory_units u WHERE u.document_id = _document_units.document_id
$$;
COMMENT ON FUNCTION rcll._document_units(bigint) IS 'Internal: the units of a document in chunk (or fact) order - what a re-retain of the same content returns.';

CREATE OR REPLACE FUNCTION rcll._check_document(bank_id integer, content text)
RETURNS void
LANGUAGE plpgsql STABLE
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

CREATE OR REPLACE FUNCTION rcll._store_document(
    bank_id        integer,
    content        text,
    source         text,
    thread         text,
    occurred_at    timestamptz,
    layer          text,
    metadata       jsonb,
    via            text,
    claimed_author text,
    extraction     text,
    OUT document_id   bigint,
    OUT created       boolean,
    OUT author        text,
    OUT author_source text,
    OUT provenance    jsonb)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    h bytea := rcll._content_hash(content, thread);
BEGIN
    -- The document fields every retain takes (the content itself is rcll._check_document's).
    IF layer IS NOT NULL AND layer NOT IN ('L0', 'L1', 'L2') THEN
        RAISE EXCEPTION 'layer: % is not a layer', quote_literal(layer) USING ERRCODE = '22023',
            HINT = 'Use L0 (rules and procedures), L1 (decisions) or L2 (observations).';
    END IF;
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata: must be a JSON object' USING ERRCODE = '22023';
    END IF;

    SELECT r.author, r.author_source INTO author, author_source FROM rcll._resolve_author(claimed_author) r;
    provenance := jsonb_build_object('via', coalesce(via, 'sql'), 'who', author,
                                     'author_source', author_source, 'at', now(), 'source', source);
    INSERT INTO rcll.documents AS d (bank_id, content, content_hash, source, thread, occurred_at, provenance, metadata, extraction)
    VALUES (_store_document.bank_id, content, h, source, thread, occurred_at, provenance, metadata, extraction)
    ON CONFLICT ON CONSTRAINT documents_bank_id_content_hash_key DO NOTHING
    RETURNING d.document_id INTO document_id;
    created := document_id IS NOT NULL;
    IF NOT created THEN                         -- already retained (same thread and content)
        SELECT d.document_id INTO document_id FROM rcll.documents d
        WHERE d.bank_id = _store_document.bank_id AND d.content_hash = h;
    END IF;
    provenance := provenance || jsonb_build_object('document_id', document_id);
END
$$;
COMMENT ON FUNCTION rcll._store_document(integer, text, text, text, timestamptz, text, jsonb, text, text, text)
    IS 'Internal: check a retain''s document fields (layer, metadata), resolve its author, and insert its documents row unless the bank holds the same thread and content already (created = false, the existing document_id). provenance is what its units carry (via, who, author_source, at, source, document_id).';


-- functions 040-retain-chunks.sql
-- Chunk-mode retain: one document and its pre-embedded chunks written in one statement.

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
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    doc bigint;
    stored record;
    n integer := coalesce(array_length(chunks, 1), 0);
    ids bigint[];
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

    stored := rcll._store_document(b, content, source, thread, occurred_at, layer, metadata, via, author, 'chunks');
    doc := stored.document_id;
    IF NOT stored.created THEN
        RETURN QUERY SELECT doc, rcll._document_units(doc), false;
        RETURN;
    END IF;

    WITH ins AS (
        INSERT INTO rcll.memory_units AS u
            (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source,
             thread, tags, valid, mentioned_at, chunk_index, provenance, metadata)
        SELECT b, doc, 'chunk', c.chunk, e.embedding, retain_chunks.hall,
               coalesce(retain_chunks.layer, (SELECT r.layer FROM rcll.layer_rules r WHERE r.hall = retain_chunks.hall), 'L2'),
               retain_chunks.room, stored.author, stored.author_source, retain_chunks.thread,
               coalesce(retain_chunks.tags, '{}'),
               tstzrange(coalesce(occurred_at, now()), NULL), occurred_at, c.i - 1, stored.provenance, '{}'::jsonb
        FROM unnest(chunks) WITH ORDINALITY AS c(chunk, i)
        LEFT JOIN unnest(embeddings) WITH ORDINALITY AS e(embedding, i) USING (i)
        RETURNING u.unit_id, u.chunk_index
    )
    SELECT array_agg(ins.unit_id ORDER BY ins.chunk_index) INTO ids FROM ins;
    -- Who said each chunk and which names it writes (sql/functions/205-keyless-entities.sql):
    -- what the entity channel reads, with no model on the write path.
    PERFORM rcll._link_written_keyless_entities(b, ids);
    RETURN QUERY SELECT doc, ids, true;
END
$$;
COMMENT ON FUNCTION rcll.retain_chunks(text, text, text[], vector[], text, timestamptz, text, text, text[], text, text, jsonb, text, text)
    IS 'Chunk-mode retain: store a document and its chunks (with their embeddings) in one statement. Each chunk is linked to its keyless entities (its speaker and the names it writes; rcll._link_written_keyless_entities). Re-retaining the same content and thread into the same bank returns the existing units (created = false).';


-- functions 050-room-janitor.sql
-- Room janitor: the write-time trigger that files each unit under the canonical spelling of its room.

CREATE OR REPLACE FUNCTION rcll._room_key(room text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Spelling only: case, separators, a plural ending. Both sides of a comparison go through
    -- this, so "docs" and "doc" meet at "doc" however odd the stem looks.
    SELECT regexp_replace(regexp_replace(
               regexp_replace(lower(room), '[[:space:]_./:-]+', '', 'g'),
               'ies$', 'y'), '([^s])s$', '\1')
$$;
COMMENT ON FUNCTION rcll._room_key(text) IS 'Internal: the spelling key of a room name (lower case, no separators, no plural ending); two names with one key are one room.';

CREATE OR REPLACE FUNCTION rcll._follow_merges(bank_id integer, room text)
RETURNS text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    cur  text := room;
    nxt  text;
BEGIN
    FOR hop IN 1 .. 16 LOOP     -- merges form chains, never cycles; the bound is a guard
        SELECT r.merged_into INTO nxt FROM rcll.rooms r
        WHERE r.bank_id = _follow_merges.bank_id AND r.name = cur AND r.status = 'merged';
        EXIT WHEN nxt IS NULL;
        cur := nxt;
        nxt := NULL;
    END LOOP;
    RETURN cur;
END
$$;
COMMENT ON FUNCTION rcll._follow_merges(integer, text) IS 'Internal: the live room a (possibly merged) room name now lives in.';

CREATE OR REPLACE FUNCTION rcll._canonical_room(bank_id integer, typed text, OUT room text, OUT how text)
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    t      text := nullif(btrim(typed), '');
    k      text;
    st     text;
    target text;
    hits   text[];
BEGIN
    IF t IS NULL THEN
        how := 'none';
        RETURN;
    END IF;
    -- 1. A registry name as typed.
    SELECT r.status, r.merged_into INTO st, target FROM rcll.rooms r
    WHERE r.bank_id = _canonical_room.bank_id AND r.name = t;
    IF FOUND THEN
        IF st = 'merged' THEN
            room := rcll._follow_merges(_canonical_room.bank_id, target);
            how := 'merged';
        ELSE
            room := t;
            how := 'exact';
        END IF;
        RETURN;
    END IF;
    -- 2. A spelling (or merged name) recorded before.
    SELECT a.room INTO target FROM rcll.room_aliases a
    WHERE a.bank_id = _canonical_room.bank_id AND a.alias = t;
    IF FOUND THEN
        room := rcll._follow_merges(_canonical_room.bank_id, target);
        how := 'alias';
        RETURN;
    END IF;
    -- 3. Same spelling key as a known room (the bank's registry, or the classifier's vocabulary so
    --    the floor plan is not empty on day one); else an exact prefix of exactly one known room.
    k := rcll._room_key(t);
    IF k = '' THEN
        room := t;
        how := 'new';
        RETURN;
    END IF;
    WITH known AS (
        SELECT r.name, r.status, r.merged_into, 0 AS pref FROM rcll.rooms r
        WHERE r.bank_id = _canonical_room.bank_id
        UNION ALL
        SELECT DISTINCT rr.room, 'live', NULL::text, 1 FROM rcll.room_rules rr
        WHERE rr.enabled AND NOT EXISTS (SELECT 1 FROM rcll.rooms r
                                         WHERE r.bank_id = _canonical_room.bank_id AND r.name = rr.room)
    )
    SELECT array_agg(kn.name ORDER BY kn.pref, kn.status = 'merged', kn.name) INTO hits
    FROM known kn WHERE rcll._room_key(kn.name) = k;
    IF hits IS NOT NULL THEN
        room := rcll._follow_merges(_canonical_room.bank_id, hits[1]);
        how := CASE WHEN room = t THEN 'known' ELSE 'spelling' END;
        RETURN;
    END IF;
    IF length(k) >= 3 THEN
        WITH known AS (
            SELECT r.name FROM rcll.rooms r WHERE r.bank_id = _canonical_room.bank_id
            UNION
            SELECT rr.room FROM rcll.room_rules rr WHERE rr.enabled
        )
        SELECT array_agg(DISTINCT rcll._follow_merges(_canonical_room.bank_id, kn.name)) INTO hits
        FROM known kn WHERE left(rcll._room_key(kn.name), length(k)) = k;
        IF cardinality(hits) = 1 THEN        -- ambiguous prefixes are not spelling: keep as typed
            room := hits[1];
            how := 'spelling';
            RETURN;
        END IF;
    END IF;
    -- 4. Nobody used it before: kept as typed.
    room := t;
    how := 'new';
END
$$;
COMMENT ON FUNCTION rcll._canonical_room(integer, text) IS 'Internal: the canonical room for a typed name and how it was found: exact, merged (followed into the live room), alias, known (vocabulary), spelling (case, separators, plural, unique exact prefix of at least 3 characters) or new (kept as typed). Never semantic.';

CREATE OR REPLACE FUNCTION rcll._units_janitor()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer: a writer needs INSERT on memory_units only; the registry and aliases are bookkeeping.
SECURITY DEFINER
AS $$
DECLARE
    typed   text := nullif(btrim(NEW.room), '');
    res     record;
    auto    text;
    live    text;
    aliased text;
BEGIN
    IF NEW.tags IS NULL THEN
        NEW.tags := '{}';
    END IF;
    -- room-alias: and room-new: are the janitor's record; a caller's are forged and discarded.
    IF array_to_string(NEW.tags, E'\x1f') LIKE '%room-%' AND NOT rcll._carry_tags() THEN
        NEW.tags := ARRAY(SELECT t FROM unnest(NEW.tags) AS t
                          WHERE t NOT LIKE 'room-alias:%' AND t NOT LIKE 'room-new:%');
    END IF;

    IF typed IS NULL THEN
        IF NEW.room IS NOT NULL THEN
            NEW.room := NULL;                       -- blank is no room
        END IF;
        IF rcll._classify_rooms_enabled(NEW.bank_id, NEW.kind) THEN
            auto := rcll.classify_room(NEW.text);
            IF auto IS NOT NULL THEN
                NEW.room := (rcll._canonical_room(NEW.bank_id, auto)).room;
                NEW.provenance := NEW.provenance || '{"room_source": "classifier"}'::jsonb;
            END IF;
        END IF;
    ELSE
        -- The common cases in one index probe each: a live registry name as typed, or a spelling
        -- recorded before (alias targets are never merged rooms: approving a merge repoints them).
        SELECT r.name, a.room INTO live, aliased
        FROM (SELECT 1) AS one
        LEFT JOIN rcll.rooms r ON r.bank_id = NEW.bank_id AND r.name = typed AND r.status <> 'merged'
        LEFT JOIN rcll.room_aliases a ON a.bank_id = NEW.bank_id AND a.alias = typed;
        IF live IS NOT NULL THEN
            IF NEW.room <> typed THEN
                NEW.room := typed;
            END IF;
        ELSIF aliased IS NOT NULL THEN
            NEW.room := aliased;
            NEW.tags := NEW.tags || ('room-alias:' || typed);
        ELSE
            res := rcll._canonical_room(NEW.bank_id, typed);
            NEW.room := res.room;
            IF res.how = 'new' THEN
                NEW.tags := NEW.tags || ('room-new:' || typed);
            ELSIF res.room <> typed THEN
                -- Nothing about the call is lost: the typed string stays on the unit.
                NEW.tags := NEW.tags || ('room-alias:' || typed);
                IF res.how <> 'alias' THEN
                    INSERT INTO rcll.room_aliases (bank_id, alias, room, reason)
                    VALUES (NEW.bank_id, typed, res.room, 'spelling')
                    ON CONFLICT (bank_id, alias) DO NOTHING;
                END IF;
            END IF;
        END IF;
    END IF;

    IF NEW.layer IS NULL THEN
        NEW.layer := coalesce((SELECT l.layer FROM rcll.layer_rules l WHERE l.hall = NEW.hall), 'L2');
    END IF;
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_janitor() IS 'Trigger: canonicalises a new unit''s room by spelling only (the typed string kept as a room-alias:<typed> tag, a first-ever room kept as typed and tagged room-new:<name>), classifies a missing room when enabled, drops forged room tags, and defaults the layer from rcll.layer_rules by hall.';

-- Not while a dump is restored (rcll._restoring): the rows come back as they were.
CREATE OR REPLACE TRIGGER units_janitor BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_janitor();


-- functions 051-room-counts.sql
-- Room counts: the registry triggers append per-room deltas; rcll.fold_room_counts() folds them.

-- Registry counts: writers only ever append deltas (no shared row is locked, so concurrent writers
-- neither serialise nor deadlock); rcll.fold_room_counts() folds them in with sorted upserts.

CREATE OR REPLACE FUNCTION rcll._units_room_counts()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
DECLARE
    unattributed bigint;
BEGIN
    -- One function for every way units enter, leave or change rooms; each trigger below says
    -- which (statement triggers with transition tables for inserts and deletes, a row trigger with
    -- a column list for room changes, because a statement trigger with transition tables cannot
    -- have one and would materialise every row of every UPDATE).
    IF TG_OP = 'INSERT' THEN
        -- One pass over the statement's rows serves the registry and the authorship warning: a
        -- second statement trigger cost as much again per write.
        WITH g AS MATERIALIZED (
            SELECT n.bank_id, n.room, count(*) AS c, count(*) FILTER (WHERE n.author_source = 'none') AS none,
                   bool_and(coalesce(n.provenance ->> 'room_source', '') = 'classifier') AS by_classifier
            FROM new_units n GROUP BY n.bank_id, n.room
        ), q AS (
            INSERT INTO rcll.room_count_queue (bank_id, room, delta)
            SELECT g.bank_id, g.room, g.c FROM g WHERE g.room IS NOT NULL
        ), r AS (
            -- A registry row for a room used for the first time. Existing rows are skipped without a
            -- lock; new rooms are inserted in sorted order, so single-statement writers cannot deadlock.
            INSERT INTO rcll.rooms (bank_id, name, created_by, first_used, last_used)
            SELECT g.bank_id, g.room, CASE WHEN g.by_classifier THEN 'system' ELSE 'human' END, now(), now()
            FROM g
            WHERE g.room IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM rcll.rooms x WHERE x.bank_id = g.bank_id AND x.name = g.room)
            ORDER BY g.bank_id, g.room
            ON CONFLICT (bank_id, name) DO NOTHING
        )
        SELECT sum(g.none) INTO unattributed FROM g;
        IF unattributed > 0 THEN
            -- Absent rather than wrong: never the connection's account, and said once per write.
            RAISE WARNING 'author: no identity for this write; % unit(s) stored without an author', unattributed
                USING HINT = 'Map the role in rcll.identities, have the RCLL server authenticate the caller, or declare one (author => ...).';
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO rcll.room_count_queue (bank_id, room, delta)
        SELECT o.bank_id, o.room, -count(*) FROM old_units o
        WHERE o.room IS NOT NULL GROUP BY o.bank_id, o.room;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO rcll.room_count_queue (bank_id, room, delta)
        SELECT d.bank_id, d.room, d.delta
        FROM (VALUES (OLD.bank_id, OLD.room, -1), (NEW.bank_id, NEW.room, 1)) AS d(bank_id, room, delta)
        WHERE d.room IS NOT NULL;
        IF NEW.room IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rcll.rooms r
                                                WHERE r.bank_id = NEW.bank_id AND r.name = NEW.room) THEN
            INSERT INTO rcll.rooms (bank_id, name, created_by, first_used, last_used)
            VALUES (NEW.bank_id, NEW.room, 'human', now(), now())
            ON CONFLICT (bank_id, name) DO NOTHING;
        END IF;
    ELSE    -- TRUNCATE leaves every room empty
        DELETE FROM rcll.room_count_queue;
        UPDATE rcll.rooms SET fact_count = 0 WHERE fact_count <> 0;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll._units_room_counts() IS 'Trigger (units_room_counts_*): appends per-room count deltas as units are inserted (one per room written; also registers rooms used for the first time - human when a caller named the room, system when the classifier did - and warns once when units were written without an author), deleted (negative), or change room in a move or merge (row-level); TRUNCATE empties every room.';

-- The trigger names are not those of 0.1.0 (units_rooms_inserted, ...): an upgrade drops those
-- triggers, which held the four functions this one replaces, before it drops the functions.
CREATE OR REPLACE TRIGGER units_room_counts_inserted AFTER INSERT ON rcll.memory_units
    REFERENCING NEW TABLE AS new_units
    FOR EACH STATEMENT WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE TRIGGER units_room_counts_deleted AFTER DELETE ON rcll.memory_units
    REFERENCING OLD TABLE AS old_units
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE TRIGGER units_room_counts_changed AFTER UPDATE OF room, bank_id ON rcll.memory_units
    FOR EACH ROW WHEN (OLD.room IS DISTINCT FROM NEW.room OR OLD.bank_id <> NEW.bank_id)
    EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE TRIGGER units_room_counts_truncated AFTER TRUNCATE ON rcll.memory_units
    FOR EACH STATEMENT EXECUTE FUNCTION rcll._units_room_counts();

CREATE OR REPLACE FUNCTION rcll.fold_room_counts()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
DECLARE
    n bigint;
BEGIN
    -- One folder at a time; writers are never blocked (they only append).
    PERFORM pg_advisory_xact_lock(hashtext('rcll.fold_room_counts'));
    WITH d AS (
        DELETE FROM rcll.room_count_queue q RETURNING q.bank_id, q.room, q.delta, q.at
    ), g AS (
        SELECT d.bank_id, d.room, sum(d.delta)::bigint AS delta, count(*) AS c,
               min(d.at) FILTER (WHERE d.delta > 0) AS first_at, max(d.at) FILTER (WHERE d.delta > 0) AS last_at
        FROM d GROUP BY d.bank_id, d.room
    ), up AS (
        INSERT INTO rcll.rooms AS r (bank_id, name, fact_count, first_used, last_used)
        SELECT g.bank_id, g.room, g.delta, g.first_at, g.last_at FROM g
        WHERE EXISTS (SELECT 1 FROM rcll.banks b WHERE b.bank_id = g.bank_id)   -- a dropped bank's deltas go
        ORDER BY g.bank_id, g.room
        ON CONFLICT (bank_id, name) DO UPDATE
            SET fact_count = r.fact_count + excluded.fact_count,
                first_used = coalesce(r.first_used, excluded.first_used),
                last_used  = greatest(r.last_used, excluded.last_used)
        RETURNING 1
    )
    SELECT coalesce(sum(g.c), 0) INTO n FROM g;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.fold_room_counts() IS 'Fold the append-only room_count_queue into rooms.fact_count, first_used and last_used (run it from a background job; reads are exact without it). Returns the number of deltas folded.';


-- functions 052-room-listing.sql
-- Room listing: rcll.rooms(), the floor plan of a bank with counts, status, merges and aliases.

CREATE OR REPLACE FUNCTION rcll._wildcard(pattern text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- * any run, ? one character; everything else literal (LIKE's own % _ \ are escaped).
    SELECT replace(replace(replace(replace(replace(pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%'), '?', '_')
$$;
COMMENT ON FUNCTION rcll._wildcard(text) IS 'Internal: a * and ? wildcard pattern as a LIKE pattern, every other character literal.';

CREATE OR REPLACE FUNCTION rcll.rooms(bank text, pattern text DEFAULT '*')
RETURNS TABLE (name text, status text, merged_into text, proposed_into text, fact_count bigint,
               aliases text[], created_by text, first_used timestamptz, last_used timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH b AS (SELECT rcll._bank_id(rooms.bank) AS id),
    pending AS (
        SELECT q.room, sum(q.delta)::bigint AS delta,
               min(q.at) FILTER (WHERE q.delta > 0) AS first_at, max(q.at) FILTER (WHERE q.delta > 0) AS last_at
        FROM rcll.room_count_queue q, b WHERE q.bank_id = b.id GROUP BY q.room
    ),
    listed AS (
        SELECT r.name, r.status, r.merged_into, r.fact_count + coalesce(p.delta, 0) AS fact_count, r.created_by,
               least(r.first_used, p.first_at) AS first_used, greatest(r.last_used, p.last_at) AS last_used
        FROM rcll.rooms r CROSS JOIN b LEFT JOIN pending p ON p.room = r.name
        WHERE r.bank_id = b.id
        UNION ALL   -- deltas for a room whose registry row is gone (not expected; kept so counts stay exact)
        SELECT p.room, 'live', NULL, p.delta, 'human', p.first_at, p.last_at
        FROM pending p, b WHERE NOT EXISTS (SELECT 1 FROM rcll.rooms r WHERE r.bank_id = b.id AND r.name = p.room)
        UNION ALL   -- the classifier's vocabulary, so the floor plan is not empty on day one
        SELECT DISTINCT rr.room, 'live', NULL, 0::bigint, 'system', NULL::timestamptz, NULL::timestamptz
        FROM rcll.room_rules rr, b
        WHERE rr.enabled
          AND NOT EXISTS (SELECT 1 FROM rcll.rooms r WHERE r.bank_id = b.id AND r.name = rr.room)
          AND NOT EXISTS (SELECT 1 FROM pending p WHERE p.room = rr.room)
    )
    SELECT l.name, l.status, l.merged_into,
           (SELECT mp.into_room FROM rcll.room_merge_proposals mp, b
            WHERE mp.bank_id = b.id AND mp.from_room = l.name AND mp.status = 'pending'),
           l.fact_count,
           coalesce((SELECT array_agg(a.alias ORDER BY a.alias) FROM rcll.room_aliases a, b
                     WHERE a.bank_id = b.id AND a.room = l.name), '{}'),
           l.created_by, l.first_used, l.last_used
    FROM listed l
    WHERE l.name ILIKE rcll._wildcard(coalesce(rooms.pattern, '*'))
       OR EXISTS (SELECT 1 FROM rcll.room_aliases a, b WHERE a.bank_id = b.id AND a.room = l.name
                  AND a.alias ILIKE rcll._wildcard(coalesce(rooms.pattern, '*')))
    ORDER BY l.fact_count DESC, l.name
$$;
COMMENT ON FUNCTION rcll.rooms(text, text) IS 'The room floor plan of a bank: every room (registry plus the classifier''s vocabulary) with its exact unit count (folded base plus pending deltas), status, merge target or pending proposal, aliases, who created it and first/last use. pattern matches the name or an alias, with * and ? wildcards, case-insensitively.';


-- functions 053-room-merges.sql
-- Room merges: semantic merges are proposals only, held provisional until a person approves.

CREATE OR REPLACE FUNCTION rcll._registry_room(bank_id integer, room text)
RETURNS rcll.rooms
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    r rcll.rooms;
BEGIN
    SELECT * INTO r FROM rcll.rooms x WHERE x.bank_id = _registry_room.bank_id AND x.name = room;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'room: no room "%" in this bank''s registry', room USING ERRCODE = '42704',
            HINT = 'List rooms with SELECT * FROM rcll.rooms(''<bank>''); name a room exactly as listed.';
    END IF;
    RETURN r;
END
$$;
COMMENT ON FUNCTION rcll._registry_room(integer, text) IS 'Internal: a room''s registry row, or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll.propose_room_merge(bank text, from_room text, into_room text, reason text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b   integer := rcll._bank_id(bank);
    why text := rcll._audit_reason(reason, 'merge proposal',
                                   'Say why the two rooms are one subject; a person reads it before approving.');
    src rcll.rooms;
    dst rcll.rooms;
    id  bigint;
BEGIN
    src := rcll._registry_room(b, from_room);
    dst := rcll._registry_room(b, into_room);
    IF src.name = dst.name THEN
        RAISE EXCEPTION 'into_room: a room cannot merge into itself' USING ERRCODE = '22023';
    END IF;
    IF src.status <> 'live' THEN
        RAISE EXCEPTION 'from_room: room "%" is %', src.name, src.status USING ERRCODE = '55000',
            HINT = 'Only a live room can be proposed for a merge; decide the pending proposal first (rcll.approve_room_merge / rcll.reject_room_merge).';
    END IF;
    IF dst.status <> 'live' THEN
        RAISE EXCEPTION 'into_room: room "%" is %', dst.name, dst.status USING ERRCODE = '55000',
            HINT = 'Merge into a live room (a merged room''s facts live in its merged_into).';
    END IF;
    UPDATE rcll.rooms r SET status = 'provisional' WHERE r.bank_id = b AND r.name = src.name;
    INSERT INTO rcll.room_merge_proposals (bank_id, from_room, into_room, reason, proposed_by)
    VALUES (b, src.name, dst.name, why, rcll._actor())
    RETURNING proposal_id INTO id;
    PERFORM rcll._audit(b, 'room_merge_propose', jsonb_build_object('from_room', src.name, 'into_room', dst.name),
                        jsonb_build_object('proposal_id', id, 'reason', why));
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll.propose_room_merge(text, text, text, text) IS 'Propose a semantic merge of from_room into into_room. Nothing moves: from_room is held provisional until a person calls rcll.approve_room_merge or rcll.reject_room_merge. Returns the proposal id.';

CREATE OR REPLACE FUNCTION rcll._pending_merge(bank_id integer, from_room text)
RETURNS rcll.room_merge_proposals
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    p rcll.room_merge_proposals;
BEGIN
    SELECT * INTO p FROM rcll.room_merge_proposals mp
    WHERE mp.bank_id = _pending_merge.bank_id AND mp.from_room = _pending_merge.from_room AND mp.status = 'pending'
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'from_room: no pending merge proposal for room "%"', from_room USING ERRCODE = '42704',
            HINT = 'Propose it first with rcll.propose_room_merge(bank, from_room, into_room, reason).';
    END IF;
    RETURN p;
END
$$;
COMMENT ON FUNCTION rcll._pending_merge(integer, text) IS 'Internal: the pending merge proposal for a room, locked, or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll.approve_room_merge(bank text, from_room text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b    integer := rcll._bank_id(bank);
    p    rcll.room_merge_proposals;
    dst  text;
    ids  bigint[];
BEGIN
    -- A person decides: an agent (a mapped role, or rcll.agent set by the server) may propose only.
    IF rcll.current_agent() IS NOT NULL THEN
        RAISE EXCEPTION 'approve_room_merge: agent "%" cannot approve a merge', rcll.current_agent()
            USING ERRCODE = '42501',
            HINT = 'A person approves: connect as a role not mapped in rcll.identities, with rcll.agent unset.';
    END IF;
    p := rcll._pending_merge(b, btrim(from_room));
    dst := rcll._follow_merges(b, p.into_room);
    PERFORM 1 FROM rcll.rooms r WHERE r.bank_id = b AND r.name IN (p.from_room, dst) ORDER BY r.name FOR UPDATE;

    WITH moved AS (
        UPDATE rcll.memory_units u SET room = dst, updated_at = now()
        WHERE u.bank_id = b AND u.room = p.from_room
        RETURNING u.unit_id
    )
    SELECT coalesce(array_agg(moved.unit_id ORDER BY moved.unit_id), '{}') INTO ids FROM moved;

    UPDATE rcll.rooms r SET status = 'merged', merged_into = dst WHERE r.bank_id = b AND r.name = p.from_room;
    UPDATE rcll.rooms r SET merged_into = dst WHERE r.bank_id = b AND r.status = 'merged' AND r.merged_into = p.from_room;
    UPDATE rcll.room_aliases a SET room = dst WHERE a.bank_id = b AND a.room = p.from_room;
    INSERT INTO rcll.room_aliases (bank_id, alias, room, reason) VALUES (b, p.from_room, dst, 'merge')
    ON CONFLICT (bank_id, alias) DO UPDATE SET room = excluded.room, reason = 'merge';
    UPDATE rcll.room_merge_proposals mp SET status = 'approved', decided_by = rcll._actor(), decided_at = now()
    WHERE mp.proposal_id = p.proposal_id;
    PERFORM rcll._audit(b, 'room_merge_approve',
                        jsonb_build_object('from_room', p.from_room, 'into_room', dst, 'unit_ids', to_jsonb(ids)),
                        jsonb_build_object('proposal_id', p.proposal_id, 'reason', p.reason, 'proposed_by', p.proposed_by));
    RETURN cardinality(ids);
END
$$;
COMMENT ON FUNCTION rcll.approve_room_merge(text, text) IS 'A person approves the pending merge of from_room: its units move into the target room, the room becomes merged, and its name stays readable forever as an alias (a recall naming it reads the merged room). Refused for agents. Returns the number of units moved.';

CREATE OR REPLACE FUNCTION rcll.reject_room_merge(bank text, from_room text, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    p rcll.room_merge_proposals;
BEGIN
    p := rcll._pending_merge(b, btrim(from_room));
    UPDATE rcll.rooms r SET status = 'live' WHERE r.bank_id = b AND r.name = p.from_room AND r.status = 'provisional';
    UPDATE rcll.room_merge_proposals mp SET status = 'rejected', decided_by = rcll._actor(), decided_at = now()
    WHERE mp.proposal_id = p.proposal_id;
    PERFORM rcll._audit(b, 'room_merge_reject', jsonb_build_object('from_room', p.from_room, 'into_room', p.into_room),
                        jsonb_build_object('proposal_id', p.proposal_id, 'reason', reason));
END
$$;
COMMENT ON FUNCTION rcll.reject_room_merge(text, text, text) IS 'Reject the pending merge of from_room: nothing moves and the room is live again.';


-- functions 054-room-moves.sql
-- Room moves: units moved to another room, audited and reversible.

CREATE OR REPLACE FUNCTION rcll.move_units(bank text, unit_ids bigint[], to_room text, reason text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b       integer := rcll._bank_id(bank);
    why     text := rcll._audit_reason(reason, 'move',
                                       'Say why the units belong in the other room; it is kept in rcll.audit_log.');
    dst     record;
    ids     bigint[];
    missing bigint[];
    prior   jsonb;
BEGIN
    dst := rcll._canonical_room(b, to_room);
    IF dst.room IS NULL THEN
        RAISE EXCEPTION 'to_room: a room name is required' USING ERRCODE = '22023',
            HINT = 'Name the room to move the units into (see rcll.rooms(bank)).';
    END IF;
    ids := ARRAY(SELECT DISTINCT i FROM unnest(unit_ids) AS i WHERE i IS NOT NULL ORDER BY 1);
    IF cardinality(ids) = 0 THEN
        RAISE EXCEPTION 'unit_ids: no units given' USING ERRCODE = '22023';
    END IF;
    -- Lock in id order so two moves of overlapping sets cannot deadlock.
    PERFORM 1 FROM rcll.memory_units u WHERE u.unit_id = ANY (ids) AND u.bank_id = b ORDER BY u.unit_id FOR UPDATE;
    missing := ARRAY(SELECT i FROM unnest(ids) AS i
                     WHERE NOT EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.unit_id = i AND u.bank_id = b));
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'unit_ids: % not in bank "%"', missing, bank USING ERRCODE = '42704',
            HINT = 'Pass unit ids recall returned for this bank.';
    END IF;
    SELECT jsonb_agg(jsonb_build_object('unit_id', u.unit_id, 'room', u.room) ORDER BY u.unit_id) INTO prior
    FROM rcll.memory_units u WHERE u.unit_id = ANY (ids);
    UPDATE rcll.memory_units u SET room = dst.room, updated_at = now()
    WHERE u.unit_id = ANY (ids) AND u.room IS DISTINCT FROM dst.room;
    RETURN rcll._audit(b, 'room_move', jsonb_build_object('unit_ids', to_jsonb(ids), 'to_room', dst.room),
                       jsonb_build_object('reason', why, 'typed_room', to_room, 'resolved', dst.how, 'before', prior));
END
$$;
COMMENT ON FUNCTION rcll.move_units(text, bigint[], text, text) IS 'Move units into another room (its name canonicalised by spelling like a write), recording every unit''s previous room in rcll.audit_log. Returns the move id for rcll.undo_move.';

CREATE OR REPLACE FUNCTION rcll.undo_move(bank text, move_id bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b     integer := rcll._bank_id(bank);
    m     rcll.audit_log;
    moved text[];
    n     integer;
BEGIN
    SELECT * INTO m FROM rcll.audit_log a
    WHERE a.audit_id = move_id AND a.bank_id = b AND a.action = 'room_move' FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'move_id: no room move % in bank "%"', move_id, bank USING ERRCODE = '42704',
            HINT = 'Use the id rcll.move_units returned (rcll.audit_log rows with action room_move).';
    END IF;
    IF EXISTS (SELECT 1 FROM rcll.audit_log a WHERE a.bank_id = b AND a.action = 'room_move_undo'
               AND (a.detail ->> 'move_id')::bigint = move_id) THEN
        RAISE EXCEPTION 'move_id: move % was already undone', move_id USING ERRCODE = '55000';
    END IF;
    -- Only units still where the move put them: a later move must be undone first.
    moved := ARRAY(SELECT f.unit_id::text
                   FROM jsonb_to_recordset(m.detail -> 'before') AS f(unit_id bigint, room text)
                   JOIN rcll.memory_units u ON u.unit_id = f.unit_id
                   WHERE u.room IS DISTINCT FROM m.target ->> 'to_room' ORDER BY f.unit_id);
    IF cardinality(moved) > 0 THEN
        RAISE EXCEPTION 'move_id: units % were moved again after move %', moved, move_id USING ERRCODE = '55000',
            HINT = 'Undo the later moves first (newest first).';
    END IF;
    UPDATE rcll.memory_units u SET room = f.room, updated_at = now()
    FROM jsonb_to_recordset(m.detail -> 'before') AS f(unit_id bigint, room text)
    WHERE u.unit_id = f.unit_id AND u.bank_id = b AND u.room IS DISTINCT FROM f.room;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM rcll._audit(b, 'room_move_undo', m.target, jsonb_build_object('move_id', move_id, 'restored', n));
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.undo_move(text, bigint) IS 'Undo a move: put every unit back in the room it was in before (refused if any was moved again since, or the move was already undone). Audited; returns the number of units restored.';


-- functions 055-room-classifier.sql
-- Room classifier: the keyword rules that assign a room when the writer names none (and asked for one).

CREATE OR REPLACE FUNCTION rcll.classify_room(text text)
RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $$
    -- Regular expressions only: no model call, no embedding, microseconds per unit.
    SELECT r.room FROM rcll.room_rules r
    WHERE r.enabled AND classify_room.text ~* r.pattern
    ORDER BY r.priority, r.rule_id
    LIMIT 1
$$;
COMMENT ON FUNCTION rcll.classify_room(text) IS 'The room the keyword classifier (rcll.room_rules, lowest priority first) assigns to a text, or NULL when no enabled rule matches.';

CREATE OR REPLACE FUNCTION rcll._classify_rooms_enabled(bank_id integer, kind text)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    setting text := lower(coalesce(current_setting('rcll.classify_rooms', true), ''));
    banks   jsonb;
BEGIN
    -- Most specific first: the transaction or session (SET LOCAL rcll.classify_rooms = on|off, what
    -- a retain call's classify flag sets), then the bank (settings.classify_rooms), then the kind.
    -- Chunks are not classified by default: a chunk is a slice of someone's document, and a room
    -- guessed from a slice would scatter one document over several rooms. Extracted facts and
    -- consolidation observations are - that is how raw observations stop arriving unroomed.
    IF setting IN ('on', 'true', '1') THEN
        RETURN true;
    ELSIF setting IN ('off', 'false', '0') THEN
        RETURN false;
    END IF;
    SELECT b.settings -> 'classify_rooms' INTO banks FROM rcll.banks b WHERE b.bank_id = _classify_rooms_enabled.bank_id;
    IF jsonb_typeof(banks) = 'boolean' THEN
        RETURN banks::text::boolean;
    END IF;
    RETURN coalesce(kind, 'chunk') <> 'chunk';
END
$$;
COMMENT ON FUNCTION rcll._classify_rooms_enabled(integer, text) IS 'Internal: whether a unit written without a room gets one from rcll.classify_room: rcll.classify_rooms (transaction/session setting), else the bank setting classify_rooms, else yes for facts and observations and no for chunks.';


-- functions 060-tags.sql
-- Tags: the listing call with usage counts and wildcards (author:* is the roster of a bank's writers).

CREATE OR REPLACE FUNCTION rcll.tags(bank text, pattern text DEFAULT '*')
RETURNS TABLE (tag text, unit_count bigint)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Counted from the units, not kept on the write path: a listing is rare, a write is not, and a
    -- count nobody maintains cannot drift.
    SELECT t.tag, count(*)::bigint
    FROM rcll.memory_units u CROSS JOIN LATERAL unnest(u.tags) AS t(tag)
    WHERE u.bank_id = rcll._bank_id(tags.bank)
      AND t.tag ILIKE rcll._wildcard(coalesce(tags.pattern, '*'))
    GROUP BY t.tag
    ORDER BY count(*) DESC, t.tag
$$;
COMMENT ON FUNCTION rcll.tags(text, text) IS 'Tags in use in a bank with the number of units carrying each; pattern takes * and ? wildcards, case-insensitively. rcll.tags(bank, ''author:*'') is the roster of everyone who wrote to the bank, room-alias:* every rewritten room spelling.';


-- functions 070-room-state.sql
-- Keyed room state: exact-key, versioned, compare-and-set - never similarity search.

CREATE OR REPLACE FUNCTION rcll.put_state(bank text, room text, key text, value jsonb, expected_version integer,
                                          via text DEFAULT 'sql', source text DEFAULT NULL, author text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b       integer := rcll._bank_id(bank);
    cur     integer;
    who     record;
    ok      boolean;
BEGIN
    IF room IS NULL OR btrim(room) = '' THEN
        RAISE EXCEPTION 'room: a room is required' USING ERRCODE = '22023',
            HINT = 'State is keyed by (room, key); the room string is used exactly as given.';
    END IF;
    IF key IS NULL OR key = '' THEN
        RAISE EXCEPTION 'key: a key is required' USING ERRCODE = '22023';
    END IF;
    IF value IS NULL THEN
        RAISE EXCEPTION 'value: a JSON value is required' USING ERRCODE = '22004',
            HINT = 'Pass ''null''::jsonb to store a JSON null.';
    END IF;
    SELECT max(s.version) INTO cur FROM rcll.room_state s
    WHERE s.bank_id = b AND s.room = put_state.room AND s.key = put_state.key;
    IF coalesce(expected_version, 0) IS DISTINCT FROM coalesce(cur, 0) THEN
        RAISE EXCEPTION 'expected_version: expected version %, current version is %',
            coalesce(expected_version, 0), coalesce(cur, 0) USING ERRCODE = '40001',
            HINT = 'Someone wrote this key since you read it: read it again (rcll.get_state) and retry with its version (0 = no state yet).';
    END IF;
    who := rcll._resolve_author(author);
    -- Two puts expecting the same version race for the same primary key; the loser waits for the
    -- winner, inserts nothing, and fails below like any stale put.
    INSERT INTO rcll.room_state (bank_id, room, key, version, value, provenance)
    VALUES (b, put_state.room, put_state.key, coalesce(cur, 0) + 1, put_state.value,
            jsonb_build_object('via', coalesce(via, 'sql'), 'who', who.author, 'author_source', who.author_source,
                               'source', source, 'at', now(), 'expected_version', coalesce(expected_version, 0)))
    ON CONFLICT ON CONSTRAINT room_state_pkey DO NOTHING
    RETURNING true INTO ok;
    IF ok IS NULL THEN
        SELECT max(s.version) INTO cur FROM rcll.room_state s
        WHERE s.bank_id = b AND s.room = put_state.room AND s.key = put_state.key;
        RAISE EXCEPTION 'expected_version: expected version %, current version is %',
            coalesce(expected_version, 0), cur USING ERRCODE = '40001',
            HINT = 'A concurrent put won: read the key again (rcll.get_state) and retry with its version.';
    END IF;
    RETURN coalesce(cur, 0) + 1;
END
$$;
COMMENT ON FUNCTION rcll.put_state(text, text, text, jsonb, integer, text, text, text) IS 'Write a new version of a room''s keyed state if expected_version is the current version (0 or NULL when there is none); otherwise fail with SQLSTATE 40001 naming expected and current version. Every version is kept with its provenance (who, as the server resolved it; via; source; when). Returns the new version.';

CREATE OR REPLACE FUNCTION rcll.state_history(bank text, room text, key text)
RETURNS TABLE (version integer, value jsonb, provenance jsonb, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Exact (room, key): an unknown key has no versions - never the nearest room's state, which
    -- would be the wrong lens applied with full confidence.
    SELECT s.version, s.value, s.provenance, s.created_at
    FROM rcll.room_state s
    WHERE s.bank_id = rcll._bank_id(state_history.bank) AND s.room = state_history.room AND s.key = state_history.key
    ORDER BY s.version DESC
$$;
COMMENT ON FUNCTION rcll.state_history(text, text, text) IS 'Every version of a room''s keyed state, newest first, each with its provenance.';

CREATE OR REPLACE FUNCTION rcll.get_state(bank text, room text, key text, at_version integer DEFAULT NULL)
RETURNS TABLE (value jsonb, version integer, provenance jsonb, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT h.value, h.version, h.provenance, h.created_at
    FROM rcll.state_history(get_state.bank, get_state.room, get_state.key) h
    WHERE get_state.at_version IS NULL OR h.version = get_state.at_version
    ORDER BY h.version DESC
    LIMIT 1
$$;
COMMENT ON FUNCTION rcll.get_state(text, text, text, integer) IS 'The current version (or at_version) of a room''s keyed state, by exact room and key; no row when the key is unknown.';


-- functions 090-bank-isolation.sql
-- Optional bank isolation: row-level security a deployment can switch on so a role sees only its banks.

CREATE OR REPLACE FUNCTION rcll._visible_banks(role_name name)
RETURNS integer[]
LANGUAGE sql STABLE STRICT PARALLEL SAFE
-- Definer: policies call it for roles that cannot read rcll.bank_grants. The role is passed in
-- (the policy passes current_user), because inside a definer current_user is the owner.
SECURITY DEFINER
AS $$
    SELECT coalesce(array_agg(DISTINCT g.bank_id), '{}')
    FROM rcll.bank_grants g
    WHERE EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = g.role_name)
      AND pg_has_role(_visible_banks.role_name, g.role_name, 'MEMBER')
$$;
COMMENT ON FUNCTION rcll._visible_banks(name) IS 'Internal: ids of the banks a role may see under bank isolation (granted to it or to a role it is a member of).';

CREATE OR REPLACE FUNCTION rcll.grant_bank(role_name name, bank text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = grant_bank.role_name) THEN
        RAISE EXCEPTION 'role_name: no database role "%"', role_name USING ERRCODE = '42704',
            HINT = 'Create the role first (CREATE ROLE ...); grants name roles, and their members inherit them.';
    END IF;
    INSERT INTO rcll.bank_grants (role_name, bank_id) VALUES (grant_bank.role_name, rcll._bank_id(bank))
    ON CONFLICT ON CONSTRAINT bank_grants_pkey DO NOTHING;
END
$$;
COMMENT ON FUNCTION rcll.grant_bank(name, text) IS 'Let a role (and its members) see a bank once bank isolation is enabled. Idempotent.';

CREATE OR REPLACE FUNCTION rcll.revoke_bank(role_name name, bank text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM rcll.bank_grants g WHERE g.role_name = revoke_bank.role_name AND g.bank_id = rcll._bank_id(revoke_bank.bank)
$$;
COMMENT ON FUNCTION rcll.revoke_bank(name, text) IS 'Withdraw a role''s grant on a bank.';

CREATE OR REPLACE FUNCTION rcll._bank_tables()
RETURNS SETOF regclass
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Every rcll table with a bank_id column, found when called: tables added later are covered.
    -- The grants themselves are not isolated (a role must be able to use its grants).
    SELECT c.oid::regclass FROM pg_class c
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'bank_id' AND NOT a.attisdropped
    WHERE c.relnamespace = 'rcll'::regnamespace AND c.relkind IN ('r', 'p') AND c.relname <> 'bank_grants'
    ORDER BY c.relname
$$;
COMMENT ON FUNCTION rcll._bank_tables() IS 'Internal: the tables bank isolation covers (every rcll table with a bank_id column, bank_grants excepted).';

CREATE OR REPLACE FUNCTION rcll._bank_isolation(enable boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t regclass;
    n integer := 0;
BEGIN
    -- Superusers and the tables' owner bypass row-level security: the installing role stays an
    -- administrator, and agents connect as their own roles.
    FOR t IN SELECT rcll._bank_tables() LOOP
        EXECUTE format('DROP POLICY IF EXISTS bank_isolation ON %s', t);
        IF enable THEN
            EXECUTE format('CREATE POLICY bank_isolation ON %s USING (bank_id = ANY ((SELECT rcll._visible_banks(current_user))::integer[])) '
                           'WITH CHECK (bank_id = ANY ((SELECT rcll._visible_banks(current_user))::integer[]))', t);
        END IF;
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', t, CASE WHEN enable THEN 'ENABLE' ELSE 'DISABLE' END);
        n := n + 1;
    END LOOP;
    PERFORM rcll._audit(NULL, CASE WHEN enable THEN 'bank_isolation_enable' ELSE 'bank_isolation_disable' END,
                        jsonb_build_object('tables', n));
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._bank_isolation(boolean) IS 'Internal: switch row-level security with the bank_isolation policy on (enable) or off on every table rcll._bank_tables() lists, audited; returns the number of tables.';

CREATE OR REPLACE FUNCTION rcll.enable_bank_isolation()
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._bank_isolation(enable => true)
$$;
COMMENT ON FUNCTION rcll.enable_bank_isolation() IS 'Turn on bank isolation: row-level security on every rcll table with a bank_id, so a role sees and writes only the banks rcll.bank_grants gives it (superusers and the owner are exempt). Rooms stay a topic, not a permission. Returns the number of tables covered; an upgrade that adds tables covers them itself (end of 090-bank-isolation.sql).';

CREATE OR REPLACE FUNCTION rcll.disable_bank_isolation()
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._bank_isolation(enable => false)
$$;
COMMENT ON FUNCTION rcll.disable_bank_isolation() IS 'Turn bank isolation off again: every role sees every bank (grants are kept).';

-- An upgrade (ALTER EXTENSION rcll UPDATE, `rcll install`) runs this file after its migrations:
-- when bank isolation is on, the tables those migrations added (rcll.unit_lexicon holds every
-- unit's lexemes and scope columns) are covered before the upgrade commits, instead of being
-- readable across banks by every role granted SELECT until an administrator re-runs
-- rcll.enable_bank_isolation(). Isolation is on when a bank table has the policy; nothing happens
-- in a fresh install or with isolation off.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM rcll._bank_tables() t JOIN pg_catalog.pg_policy p ON p.polrelid = t
               WHERE p.polname = 'bank_isolation')
       AND EXISTS (SELECT 1 FROM rcll._bank_tables() t JOIN pg_catalog.pg_class c ON c.oid = t
                   WHERE NOT c.relrowsecurity
                      OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policy p WHERE p.polrelid = t AND p.polname = 'bank_isolation')) THEN
        PERFORM rcll._bank_isolation(enable => true);
    END IF;
END
$$;


-- functions 100-bank-stats.sql
-- BM25 corpus statistics (document count, average length) per bank, refreshed off the write path.

CREATE OR REPLACE FUNCTION rcll.refresh_bank_stats(bank text DEFAULT NULL)
RETURNS TABLE (bank_name text, unit_count bigint, total_length bigint, document_count bigint)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    only_bank integer := CASE WHEN refresh_bank_stats.bank IS NULL THEN NULL ELSE rcll._bank_id(refresh_bank_stats.bank) END;
BEGIN
    -- One aggregate per bank, written with a single upsert: a periodic job (or a person after a
    -- bulk load) calls this; writers never touch bank_stats, so they never contend on it.
    RETURN QUERY
    WITH counted AS (
        SELECT b.bank_id, count(u.unit_id) AS n, coalesce(sum(u.lexical_length), 0)::bigint AS total
        FROM rcll.banks b LEFT JOIN rcll.memory_units u ON u.bank_id = b.bank_id
        WHERE only_bank IS NULL OR b.bank_id = only_bank
        GROUP BY b.bank_id
    ), written AS (
        INSERT INTO rcll.bank_stats AS s (bank_id, unit_count, total_length, document_count, refreshed_at)
        SELECT c.bank_id, c.n, c.total,
               (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = c.bank_id), now()
        FROM counted c
        ON CONFLICT (bank_id) DO UPDATE
            SET unit_count = excluded.unit_count, total_length = excluded.total_length,
                document_count = excluded.document_count, refreshed_at = excluded.refreshed_at
        RETURNING s.bank_id, s.unit_count, s.total_length, s.document_count
    )
    SELECT b.name, w.unit_count, w.total_length, w.document_count
    FROM written w JOIN rcll.banks b ON b.bank_id = w.bank_id ORDER BY b.name;
END
$$;
COMMENT ON FUNCTION rcll.refresh_bank_stats(text) IS 'Recount BM25 corpus statistics (units, total lexical length, documents) for one bank, or every bank when bank is NULL. Run it periodically or after a bulk load; recall only reads the result.';

CREATE OR REPLACE FUNCTION rcll._bm25_corpus(
    bank_id integer, OUT n double precision, OUT avgdl double precision, OUT ndocs double precision)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT s.unit_count, s.total_length::double precision / nullif(s.unit_count, 0), s.document_count
    INTO n, avgdl, ndocs
    FROM rcll.bank_stats s WHERE s.bank_id = _bm25_corpus.bank_id;
    IF coalesce(n, 0) = 0 THEN
        -- Never refreshed (a new bank, or a replica of one): count exactly. Correct, just slower.
        SELECT count(*), avg(u.lexical_length) INTO n, avgdl
        FROM rcll.memory_units u WHERE u.bank_id = _bm25_corpus.bank_id;
        ndocs := NULL;
    END IF;
    n := greatest(coalesce(n, 0), 1);
    avgdl := greatest(coalesce(avgdl, 1), 1);
END
$$;
COMMENT ON FUNCTION rcll._bm25_corpus(integer) IS 'Internal: BM25 N and average unit length of a bank, and its document count (the session channel''s N; NULL: count them), from bank_stats (exact unit counts and a NULL document count when never refreshed).';


-- functions 103-recall-defaults.sql
-- Recall's defaults: the one SQL source (Python's is rcll/defaults.py; tests/test_defaults.py holds them equal).

CREATE OR REPLACE FUNCTION rcll.recall_defaults(
    OUT budget          integer,
    OUT rerank_depth    integer,
    OUT context_depth   integer,
    OUT channel_limit   integer,
    OUT candidate_limit integer)
RETURNS record
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- Why these values: bench/locomo/RESEARCH.md and the README's depth table.
    SELECT 4096,  -- tokens of fact text returned (hindsight's default, counted with cl100k)
           40,    -- fused candidates the cross-encoder reads
           15,    -- of those, how many it reads again with the chunk before them
           300,   -- candidates each channel returns
           100    -- fused candidates recall_candidates returns
$$;
COMMENT ON FUNCTION rcll.recall_defaults()
    IS 'Recall''s defaults, one row: budget (tokens), rerank_depth, context_depth, channel_limit (per channel), candidate_limit (fused candidates). Every recall function''s parameter defaults read them: SELECT * FROM rcll.recall_defaults().';


-- functions 105-recall-scope.sql
-- The scope of a recall: what it may read (bank, rooms, authors, filters), resolved once per recall
-- by rcll.recall_scope and passed to every channel as one rcll.recall_scope value.

CREATE OR REPLACE FUNCTION rcll._recall_authors(authors text[], mine boolean)
RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- mine narrows to the server-resolved agent (intersected with authors when both are given).
    -- With no resolved identity, mine matches nobody: ARRAY[NULL] equals no author.
    SELECT CASE
        WHEN NOT coalesce(_recall_authors.mine, false) THEN _recall_authors.authors
        WHEN _recall_authors.authors IS NULL THEN ARRAY[rcll.current_agent()]
        WHEN rcll.current_agent() = ANY (_recall_authors.authors) THEN ARRAY[rcll.current_agent()]
        ELSE '{}'::text[] END
$$;
COMMENT ON FUNCTION rcll._recall_authors(text[], boolean) IS 'Internal: the author list a recall filters on, given authors and mine (mine = the agent rcll.current_agent() resolves).';

CREATE OR REPLACE FUNCTION rcll._notice(message text, hint text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    -- Lets a LANGUAGE sql function tell the caller why it skipped something; writes nothing.
    RAISE NOTICE '%', message USING HINT = coalesce(hint, '');
    RETURN false;
END
$$;
COMMENT ON FUNCTION rcll._notice(text, text) IS 'Internal: raise a NOTICE (with a hint) and return false; lets a SQL-language recall function explain a skipped phase.';

CREATE OR REPLACE FUNCTION rcll._expand_rooms(bank_id integer, rooms text[])
RETURNS text[]
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    names text[];
BEGIN
    -- The names given are always kept (a recall never loses what it asked for); each adds the
    -- canonical room its spelling, alias or merged name resolves to now - so an old name stays
    -- readable forever - and a canonical room adds the names that resolve to it.
    SELECT array_agg(DISTINCT x.name ORDER BY x.name) INTO names FROM (
        SELECT btrim(g.name) AS name FROM unnest(rooms) AS g(name)
        UNION ALL
        SELECT (rcll._canonical_room(_expand_rooms.bank_id, g.name)).room FROM unnest(rooms) AS g(name)
    ) x WHERE x.name IS NOT NULL AND x.name <> '';
    SELECT array_agg(DISTINCT x.name ORDER BY x.name) INTO names FROM (
        SELECT unnest(names) AS name
        UNION ALL
        SELECT a.alias FROM rcll.room_aliases a
        WHERE a.bank_id = _expand_rooms.bank_id AND a.room = ANY (names)
        UNION ALL
        SELECT r.name FROM rcll.rooms r
        WHERE r.bank_id = _expand_rooms.bank_id AND r.status = 'merged' AND r.merged_into = ANY (names)
    ) x;
    RETURN coalesce(names, '{}');
END
$$;
COMMENT ON FUNCTION rcll._expand_rooms(integer, text[]) IS 'Internal: the rooms a recall reads - the names given, the canonical room each resolves to (spelling, alias, approved merge: an old name stays readable forever), and the aliases and merged names of those rooms. NULL means all rooms. Provisional (unapproved) merges expand nothing.';

CREATE OR REPLACE FUNCTION rcll.recall_scope(
    bank                 text,
    rooms                text[] DEFAULT NULL,
    authors              text[] DEFAULT NULL,
    mine                 boolean DEFAULT false,
    include_unattributed boolean DEFAULT false,
    halls                text[] DEFAULT NULL,
    layers               text[] DEFAULT NULL,
    tags_any             text[] DEFAULT NULL,
    tags_all             text[] DEFAULT NULL,
    thread               text DEFAULT NULL,
    as_of                timestamptz DEFAULT now())
RETURNS rcll.recall_scope
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- The only place a recall resolves its bank, rooms and authors; every channel reads the result.
    SELECT ROW(b.id, rcll._expand_rooms(b.id, recall_scope.rooms),
               rcll._recall_authors(recall_scope.authors, recall_scope.mine),
               coalesce(recall_scope.include_unattributed, false), recall_scope.halls, recall_scope.layers,
               recall_scope.tags_any, recall_scope.tags_all, recall_scope.thread, recall_scope.as_of)::rcll.recall_scope
    FROM (SELECT rcll._bank_id(recall_scope.bank) AS id) b
$$;
COMMENT ON FUNCTION rcll.recall_scope(text, text[], text[], boolean, boolean, text[], text[], text[], text[], text, timestamptz)
    IS 'The scope of a recall, resolved once: the bank''s id (unknown bank: error), rooms expanded through aliases and merges (rcll._expand_rooms; NULL = all rooms), authors narrowed by mine (rcll._recall_authors; NULL = all), and the other filters as given. rcll.recall_candidates builds it once and passes it to every channel.';

CREATE OR REPLACE FUNCTION rcll._in_scope(u anyelement, scope rcll.recall_scope)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): any SET clause would stop the planner from
-- inlining it into the caller's query (it reads no table and calls only built-ins - now() and
-- operators, which pg_catalog resolves first).
AS $$
    -- u is a row of rcll.memory_units, or of rcll.unit_lexicon (BM25's narrow copy, which carries
    -- the same scope columns): polymorphic, so both read one predicate and it still inlines.
    -- The filters every channel applies before ranking, for one unit, the bank included (so a
    -- channel's WHERE needs no separate bank_id test). Inlined into a channel's query, whose
    -- custom plan holds the scope as a constant, each (scope).field folds to a constant: the NULL
    -- branches vanish and (u).bank_id = <id> is a plain qual that the (bank_id, ...) indexes serve.
    SELECT (u).bank_id = (scope).bank_id
       AND ((scope).rooms IS NULL OR (u).room = ANY ((scope).rooms))
       AND ((scope).authors IS NULL OR (u).author = ANY ((scope).authors)
            OR ((scope).include_unattributed AND (u).author IS NULL))
       AND ((scope).halls IS NULL OR (u).hall = ANY ((scope).halls))
       AND ((scope).layers IS NULL OR (u).layer = ANY ((scope).layers))
       AND ((scope).tags_any IS NULL OR (u).tags && (scope).tags_any)
       AND ((scope).tags_all IS NULL OR (u).tags @> (scope).tags_all)
       AND ((scope).thread IS NULL OR (u).thread = (scope).thread)
       AND ((scope).as_of IS NULL OR (u).valid @> (scope).as_of)
       -- Expired units are out of every scope at once; the sweep (rcll.expire) removes them later.
       AND ((u).expires_at IS NULL OR (u).expires_at > now())
$$;
COMMENT ON FUNCTION rcll._in_scope(anyelement, rcll.recall_scope)
    IS 'Internal: whether a unit (a row of rcll.memory_units or rcll.unit_lexicon) passes a recall''s scope (bank, expanded rooms, resolved authors, halls, layers, tags, thread, validity as of; an expired unit never passes). Every channel filters through it; it is inlined into their queries.';


-- functions 106-session-start.sql
-- Session start: the L0 rules and procedures an agent loads before its first recall.

CREATE OR REPLACE FUNCTION rcll.session_start(bank text, rooms text[] DEFAULT NULL, thread text DEFAULT NULL)
RETURNS TABLE (unit_id bigint, room text, hall text, text text, author text, tags text[],
               provenance jsonb, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- Current as of now: valid now and not superseded. With rooms, the rooms named (through their
    -- aliases and merges) plus bank-wide rules that carry no room. Thread-scoped rules are only for
    -- that thread: a thread namespace never leaks, here or in recall.
    WITH b AS (SELECT rcll._bank_id(session_start.bank) AS id)
    SELECT u.unit_id, u.room, u.hall, u.text, u.author, u.tags, u.provenance, u.created_at
    FROM rcll.memory_units u, b
    WHERE u.bank_id = b.id AND u.layer = 'L0'
      AND u.valid @> now() AND u.superseded_by IS NULL
      AND (session_start.rooms IS NULL OR u.room IS NULL
           OR u.room = ANY (rcll._expand_rooms(b.id, session_start.rooms)))
      AND (u.thread IS NULL OR u.thread = session_start.thread)
    ORDER BY CASE u.hall WHEN 'rule' THEN 0 WHEN 'procedure' THEN 1 ELSE 2 END,
             u.room NULLS FIRST, u.created_at, u.unit_id
$$;
COMMENT ON FUNCTION rcll.session_start(text, text[], text) IS 'The L0 rules and procedures an agent should load at session start, current as of now, rules first then procedures, bank-wide (no room) before room-specific, oldest first. rooms narrows to those rooms (aliases and merges followed) plus bank-wide rules; thread adds that thread''s rules to the unthreaded ones.';


-- functions 110-channel-dense.sql
-- Dense channel: cosine similarity to the query embedding, filtered before ranking, routed by filtered-set size.

CREATE OR REPLACE FUNCTION rcll.channel_dense(
    query_embedding vector,
    scope           rcll.recall_scope,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    exact_below     integer DEFAULT 3000)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
-- Custom plans: with the filter values folded in as constants, the NULL branches of the filter
-- disappear and the planner sees the real selectivity of each one.
SET plan_cache_mode = force_custom_plan
-- HNSW with a filter: keep scanning until enough rows pass it (never iterative_scan = off, which
-- returns almost nothing for selective filters); relaxed order is re-sorted below.
SET hnsw.iterative_scan = relaxed_order
-- HNSW's candidate list: at least the rows asked for (pgvector: one pass returns at most
-- ef_search rows; below the LIMIT the iterative scan restarts from a worse frontier), with a third
-- more for rows the scope drops: 400 for the default channel_limit of 300 (a test keeps it above).
SET hnsw.ef_search = 400
AS $$
#variable_conflict use_column
DECLARE
    b    integer := (scope).bank_id;
    q    public.vector := channel_dense.query_embedding;
    lim  integer := greatest(coalesce(channel_dense."limit", (rcll.recall_defaults()).channel_limit), 0);
    n    integer;
BEGIN
    IF q IS NULL OR lim = 0 THEN
        RETURN;
    END IF;
    -- How big is the filtered set? An upper bound first, from btree index-only scans that stop
    -- at exact_below + 1 entries (well under a millisecond each): the bank's rooms, and for each
    -- further filter that has a (bank_id, column) index, that filter alone; the conjunction is
    -- at most the smallest. Only tag filters (GIN, no index-only scan) may still shrink a big
    -- bound: then the filtered rows themselves are counted, up to exact_below + 1.
    SELECT count(*) INTO n FROM (
        SELECT 1 FROM rcll.memory_units u
        WHERE u.bank_id = b AND ((scope).rooms IS NULL OR u.room = ANY ((scope).rooms))
        LIMIT exact_below + 1) s;
    IF n > exact_below AND (scope).authors IS NOT NULL AND NOT (scope).include_unattributed THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.author = ANY ((scope).authors) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND (scope).thread IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.thread = (scope).thread LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND (scope).halls IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.hall = ANY ((scope).halls) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND (scope).layers IS NOT NULL THEN
        n := least(n, (SELECT count(*) FROM (SELECT 1 FROM rcll.memory_units u
                                             WHERE u.bank_id = b AND u.layer = ANY ((scope).layers) LIMIT exact_below + 1) s));
    END IF;
    IF n > exact_below AND ((scope).tags_any IS NOT NULL OR (scope).tags_all IS NOT NULL
                            OR ((scope).authors IS NOT NULL AND (scope).include_unattributed)) THEN
        SELECT count(*) INTO n FROM (
            SELECT 1 FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_scope(u, scope)
            LIMIT exact_below + 1) s;
    END IF;

    IF n <= exact_below THEN
        -- Small filtered set: exact scan (recall 1.0, under a millisecond per thousand rows).
        -- MATERIALIZED keeps the planner from answering the ORDER BY with the HNSW index.
        RETURN QUERY
        WITH f AS MATERIALIZED (
            SELECT u.unit_id, u.embedding FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_scope(u, scope))
        SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id))::integer
        FROM (SELECT f.unit_id, f.embedding OPERATOR(public.<=>) q AS dist FROM f ORDER BY 2, 1 LIMIT lim) d
        ORDER BY 3;
    ELSE
        -- Large filtered set: HNSW iterative scan, then re-sorted (relaxed_order may return rows
        -- slightly out of order).
        RETURN QUERY
        SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id))::integer
        FROM (
            SELECT u.unit_id, u.embedding OPERATOR(public.<=>) q AS dist FROM rcll.memory_units u
            WHERE rcll._in_scope(u, scope)
            ORDER BY u.embedding OPERATOR(public.<=>) q
            LIMIT lim) d
        ORDER BY 3;
    END IF;
END
$$;
COMMENT ON FUNCTION rcll.channel_dense(vector, rcll.recall_scope, integer, integer)
    IS 'Dense recall channel: units ranked by cosine similarity to query_embedding (score = 1 - cosine distance), filtered before ranking by the scope (rcll.recall_scope: bank, rooms with aliases expanded, authors, halls, layers, tags, thread, validity). Filtered sets of at most exact_below units are scanned exactly; larger ones use the HNSW index with iterative scans. From psql: SELECT * FROM rcll.channel_dense(<embedding>, rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';


-- functions 112-dense-graphs.sql
-- Dense graphs: a big bank's own HNSW graph (a partial index), the global graph without those banks, and the DDL to get there.
--
-- With one HNSW graph over every bank, a big bank's dense search walks a graph mostly made of other
-- banks' units and filters them out, and every insert walks the whole store's graph. A bank of at
-- least min_units units can have its own graph instead: memory_units_embedding_hnsw_bank_<id>,
-- WHERE bank_id = <id>; the global graph memory_units_embedding_hnsw then leaves those banks out
-- (WHERE bank_id <> ALL (...)), so each unit is in exactly one graph. The dense and temporal
-- channels plan with the bank id as a constant, so the planner proves which graph serves a bank.
-- Measured on a 1M-unit fleet (docs/scaling.md, python -m bench.recall --fleet 1000000 --split 20000):
-- a 29,922-unit bank's dense recall@10 against exact search 0.90-0.95 -> 1.00 (its 6 fleet queries,
-- two stores) and 0.92 -> 0.99 (40 harsher probe queries); the 333,333-unit bank's 0.79 -> 0.85-0.88
-- (probe); the SQL phase unchanged within noise; writes into the biggest bank at 0.87-0.93 of a
-- 100k fleet's rate (0.70-0.73 with one global graph). Hence the default min_units of 20,000.
-- Own graphs are built with m 32 and ef_construction 128 (pgvector's defaults: 16 and 64): the
-- 333,333-unit bank's recall@10 0.89 -> 0.98 on the same probe queries (0.96 in its big room).
--
-- Index builds cannot run inside a function (CREATE INDEX CONCURRENTLY refuses a transaction
-- block), so this file only reads the catalog and says what to run: in psql,
--     SELECT statement FROM rcll.dense_graph_plan() \gexec
-- or `rcll graphs --apply`, which runs the same statements one by one.

CREATE OR REPLACE FUNCTION rcll.dense_graphs()
RETURNS TABLE (index_name text, kind text, bank text, bank_id integer, excluded_banks integer[], valid boolean, bytes bigint,
               build_options text[])
LANGUAGE sql STABLE
AS $$
    -- Every HNSW index on memory_units: the global graph (kind 'global'; excluded_banks the banks
    -- it leaves out, empty when it holds every bank; _next and _old are a rebuild's two halves),
    -- each bank's own graph (kind 'bank'; _next: a rebuild's new half), and any other a DBA built
    -- (kind 'other').
    SELECT c.relname::text,
           CASE WHEN g.bank_id IS NOT NULL THEN 'bank'
                WHEN c.relname IN ('memory_units_embedding_hnsw', 'memory_units_embedding_hnsw_next',
                                   'memory_units_embedding_hnsw_old') THEN 'global'
                ELSE 'other' END,
           b.name,
           g.bank_id,
           CASE WHEN g.bank_id IS NULL AND c.relname LIKE 'memory_units_embedding_hnsw%' 
                THEN coalesce((regexp_match(pg_catalog.pg_get_expr(i.indpred, i.indrelid),
                                            '^\(bank_id <> ALL \(''(\{[0-9,]*\})''::integer\[\]\)\)$'))[1]::integer[],
                              '{}'::integer[]) END,
           i.indisvalid,
           pg_catalog.pg_relation_size(c.oid),
           coalesce(c.reloptions, '{}')::text[]
    FROM pg_catalog.pg_index i
    JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
    JOIN pg_catalog.pg_am a ON a.oid = c.relam AND a.amname = 'hnsw'
    CROSS JOIN LATERAL (SELECT (regexp_match(c.relname, '^memory_units_embedding_hnsw_bank_([0-9]+)(_next)?$'))[1]::integer AS bank_id) g
    LEFT JOIN rcll.banks b ON b.bank_id = g.bank_id
    WHERE i.indrelid = 'rcll.memory_units'::regclass
    ORDER BY g.bank_id NULLS FIRST, c.relname
$$;
COMMENT ON FUNCTION rcll.dense_graphs()
    IS 'The HNSW graphs of rcll.memory_units: the global one (kind global; excluded_banks: the banks with their own graph, which it leaves out), each bank''s own (kind bank: memory_units_embedding_hnsw_bank_<id>, and _next while it is rebuilt) and any other HNSW index on the table (kind other), with validity, size and build options (e.g. {m=32,ef_construction=128}; empty: pgvector''s defaults, m 16 and ef_construction 64). See rcll.dense_graph_plan().';

CREATE OR REPLACE FUNCTION rcll.dense_graph_plan(
    min_units       integer DEFAULT 20000,
    max_share       double precision DEFAULT 0.5,
    m               integer DEFAULT 32,
    ef_construction integer DEFAULT 128)
RETURNS TABLE (step integer, statement text, why text)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    target  integer[];
    have    integer[];        -- banks with a valid graph of their own
    listed  integer[];        -- banks with a graph of their own, valid or an unfinished build
    global  record;
    params  text;             -- the global graph's build parameters (a rebuild keeps them)
    own     text;             -- an own graph's
    wanted  text[];           -- an own graph's, as pg_class.reloptions lists them
    stale   integer[];        -- banks whose valid own graph was built with other parameters
    halves  integer[];        -- banks with a rebuild's new half (memory_units_embedding_hnsw_bank_<id>_next)
    b_own   text;
    b_next  text;
    stmts   text[] := '{}';   -- the plan, in order, and why each statement is in it
    whys    text[] := '{}';
    b       integer;
    -- The planner proves "bank_id = 7 implies bank_id <> ALL ('{...}')" for arrays of at most 100
    -- elements (PostgreSQL's predtest.c, MAX_SAOP_ARRAY_SIZE); past that the global graph would
    -- serve no bank at all.
    max_own constant integer := 100;
BEGIN
    -- NULL stands for the default (so a client can pass either argument alone).
    min_units := coalesce(min_units, 20000);
    max_share := coalesce(max_share, 0.5);
    IF min_units < 1 THEN
        RAISE EXCEPTION 'min_units: must be a positive number of units (got %)', min_units
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A bank of at least min_units units gets its own HNSW graph; 20000 is the default.';
    END IF;
    m := coalesce(m, 32);
    ef_construction := coalesce(ef_construction, 128);
    IF m < 2 OR m > 100 THEN
        RAISE EXCEPTION 'm: must be from 2 to 100 (got %)', m
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The number of neighbours each unit keeps in a bank''s own HNSW graph; 32 is the default.';
    END IF;
    IF ef_construction < 2 * m OR ef_construction > 1000 THEN
        RAISE EXCEPTION 'ef_construction: must be from 2 x m (%) to 1000 (got %)', 2 * m, ef_construction
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The candidate list an own graph''s build keeps per insert (pgvector requires at least 2 x m); 128 is the default.';
    END IF;
    IF max_share <= 0 OR max_share > 1 THEN
        RAISE EXCEPTION 'max_share: must be a fraction of the store''s units in (0, 1] (got %)', max_share
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A bank holding more than max_share of the units keeps the global graph (it is most of it); 0.5 is the default.';
    END IF;
    -- A bank that is most of the store gains nothing from a graph of its own (the global graph is
    -- mostly its units already): only banks of at most max_share of the units are split out.
    SELECT array_agg(x.bank_id ORDER BY x.bank_id) INTO target
    FROM (SELECT u.bank_id, count(*) AS n, sum(count(*)) OVER () AS total
          FROM rcll.memory_units u GROUP BY u.bank_id) x
    WHERE x.n >= min_units AND x.n <= max_share * x.total;
    target := coalesce(target, '{}');
    IF cardinality(target) > max_own THEN
        RAISE EXCEPTION 'min_units: % banks hold at least % units; at most % can have their own graph', cardinality(target), min_units, max_own
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Raise min_units (the planner proves the global graph''s predicate for at most 100 banks).';
    END IF;
    -- A bank's own graph is built denser than pgvector's default (m 16, ef_construction 64): a big
    -- bank's nearest neighbours are many and close together, and a sparser graph misses them
    -- (docs/scaling.md: a 333,333-unit bank's dense recall@10 against exact 0.89 -> 0.97-0.98).
    own := format(' WITH (m = %s, ef_construction = %s)', m, ef_construction);
    wanted := ARRAY[format('m=%s', m), format('ef_construction=%s', ef_construction)];
    SELECT coalesce(array_agg(g.bank_id ORDER BY g.bank_id) FILTER (WHERE NOT g.half AND g.valid), '{}'),
           coalesce(array_agg(g.bank_id ORDER BY g.bank_id) FILTER (WHERE NOT g.half), '{}'),
           coalesce(array_agg(g.bank_id ORDER BY g.bank_id)
                    FILTER (WHERE NOT g.half AND g.valid AND NOT (g.build_options @> wanted AND wanted @> g.build_options)), '{}'),
           coalesce(array_agg(g.bank_id ORDER BY g.bank_id) FILTER (WHERE g.half), '{}')
    INTO have, listed, stale, halves
    FROM (SELECT x.*, x.index_name <> 'memory_units_embedding_hnsw_bank_' || x.bank_id AS half
          FROM rcll.dense_graphs() x WHERE x.kind = 'bank') g;
    SELECT * INTO global FROM rcll.dense_graphs() g WHERE g.index_name = 'memory_units_embedding_hnsw';
    -- The global graph is rebuilt as it was built (m, ef_construction), whatever a DBA chose for it.
    params := coalesce((SELECT ' WITH (' || array_to_string(c.reloptions, ', ') || ')' FROM pg_catalog.pg_class c
                        WHERE c.oid = to_regclass('rcll.memory_units_embedding_hnsw') AND c.reloptions IS NOT NULL), '');

    -- 1. Each bank that should have its own graph and has none (an interrupted build leaves an
    --    invalid index: dropped first).
    FOREACH b IN ARRAY target LOOP
        CONTINUE WHEN b = ANY (have) AND b <> ALL (stale);
        b_own := 'memory_units_embedding_hnsw_bank_' || b;
        -- What a rebuild (below) leaves when interrupted: its new half, <own graph>_next.
        b_next := b_own || '_next';
        IF b = ANY (stale) OR b = ANY (halves) THEN
            stmts := stmts || format('DROP INDEX CONCURRENTLY IF EXISTS rcll.%I', b_next);
            whys := whys || format('bank %s: clear an unfinished rebuild of its graph, if any', b);
        END IF;
        IF b = ANY (stale) THEN
            -- Built with other parameters: the new graph beside the old one, which serves until it
            -- is dropped; then the new one under the usual name.
            stmts := stmts || ARRAY[
                format('CREATE INDEX CONCURRENTLY %I ON rcll.memory_units USING hnsw (embedding public.vector_cosine_ops)%s WHERE bank_id = %s',
                       b_next, own, b),
                format('DROP INDEX CONCURRENTLY rcll.%I', b_own),
                format('ALTER INDEX rcll.%I RENAME TO %I', b_next, b_own)];
            whys := whys || ARRAY[format('bank %s: its graph again, built with m %s, ef_construction %s', b, m, ef_construction),
                                  format('bank %s: the graph built with other parameters, dropped', b),
                                  format('bank %s: the new graph, under its usual name', b)];
            CONTINUE;
        END IF;
        IF b = ANY (listed) THEN
            stmts := stmts || format('DROP INDEX CONCURRENTLY IF EXISTS rcll.%I', b_own);
            whys := whys || format('bank %s: an unfinished build of its graph', b);
        END IF;
        stmts := stmts || format('CREATE INDEX CONCURRENTLY %I ON rcll.memory_units USING hnsw (embedding public.vector_cosine_ops)%s WHERE bank_id = %s',
                                 b_own, own, b);
        whys := whys || format('bank %s (%s) holds at least %s units: its own graph', b, (SELECT x.name FROM rcll.banks x WHERE x.bank_id = b), min_units);
    END LOOP;

    -- 2. The global graph, rebuilt to leave out exactly those banks (built beside the old one, then
    --    swapped in by renames, so some global graph exists at every moment; the old one dropped last).
    IF global.index_name IS NULL OR NOT global.valid OR global.excluded_banks IS DISTINCT FROM target THEN
        stmts := stmts || ARRAY['DROP INDEX CONCURRENTLY IF EXISTS rcll.memory_units_embedding_hnsw_next',
                                'DROP INDEX CONCURRENTLY IF EXISTS rcll.memory_units_embedding_hnsw_old',
                                format('CREATE INDEX CONCURRENTLY memory_units_embedding_hnsw_next ON rcll.memory_units USING hnsw (embedding public.vector_cosine_ops)%s%s',
                                       params, CASE WHEN cardinality(target) = 0 THEN ''
                                                    ELSE format(' WHERE bank_id <> ALL (%L::integer[])', target::text) END)];
        whys := whys || ARRAY['the global graph: clear an unfinished rebuild',
                              'the global graph: clear an unfinished swap',
                              CASE WHEN cardinality(target) = 0 THEN 'the global graph: every bank'
                                   ELSE format('the global graph: every bank but %s', array_to_string(target, ', ')) END];
        IF global.index_name IS NULL THEN
            stmts := stmts || 'ALTER INDEX rcll.memory_units_embedding_hnsw_next RENAME TO memory_units_embedding_hnsw'::text;
            whys := whys || 'the global graph: the new one, under its usual name'::text;
        ELSE
            stmts := stmts || ARRAY['ALTER INDEX rcll.memory_units_embedding_hnsw RENAME TO memory_units_embedding_hnsw_old',
                                    'ALTER INDEX rcll.memory_units_embedding_hnsw_next RENAME TO memory_units_embedding_hnsw',
                                    'DROP INDEX CONCURRENTLY rcll.memory_units_embedding_hnsw_old'];
            whys := whys || ARRAY['the global graph: the old one, renamed',
                                  'the global graph: the new one, under its usual name',
                                  'the global graph: the old one, dropped'];
        END IF;
    END IF;

    -- 3. Own graphs no bank needs any more (it shrank below min_units, or min_units rose): dropped
    --    once the global graph holds their banks again.
    --    (A rebuild's unfinished new half goes with it.)
    SELECT stmts || coalesce(array_agg(format('DROP INDEX CONCURRENTLY rcll.%I', g.index_name) ORDER BY g.bank_id, g.index_name), '{}'),
           whys || coalesce(array_agg(format('bank %s: below %s units (or over %s of the store), back in the global graph',
                                             g.bank_id, min_units, max_share) ORDER BY g.bank_id, g.index_name), '{}')
    INTO stmts, whys
    FROM rcll.dense_graphs() g WHERE g.kind = 'bank' AND g.bank_id <> ALL (target);

    RETURN QUERY SELECT p.n::integer, p.statement, p.why FROM unnest(stmts, whys) WITH ORDINALITY AS p(statement, why, n);
END
$$;
COMMENT ON FUNCTION rcll.dense_graph_plan(integer, double precision, integer, integer)
    IS 'The statements, in order, that give every bank of at least min_units units (and at most max_share of the store''s) its own HNSW graph (built WITH (m, ef_construction); one built otherwise is rebuilt beside it and swapped in) and rebuild the global graph without them (each unit in one graph), or undo it for banks below min_units. Reads only; nothing is run. In psql: SELECT statement FROM rcll.dense_graph_plan() \gexec (or rcll graphs --apply). Empty when the layout already matches.';


-- functions 115-channel-context.sql
-- Context: a unit read together with the chunk before it in its document.
--
-- In a conversation or a long text a chunk's meaning often sits partly in the chunk before it: an
-- answer ("Yes, last Friday!") means something only after its question. The context channel
-- ranks a unit by the mean of its own and its predecessor's similarity to the query, so the reply
-- to a matching question comes back even when its own words do not match. It costs nothing at
-- write time: it starts from the dense channel's hits, and adds the chunk after each of them.

CREATE OR REPLACE FUNCTION rcll._last_words(t text, n integer)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
-- One expression, no FROM, no STRICT, and no search_path (990-search-path.sql leaves it out): the
-- planner inlines it into the 100 rows a recall returns, where a call cost ~20 us each (~2 ms of a
-- recall's fusion, measured on a 1M-unit fleet's small bank). NULL in, NULL out, as when strict.
-- STABLE, as array_to_string is: a body more volatile than its declaration is not inlined.
-- Words are split on ASCII whitespace (space, tab, LF, CR, VT, FF) by translate and
-- string_to_array, not by a regular expression: the fusion's 100 rows in ~0.9x the time (the
-- same words on every unit of bench.recall's 100k store; a regex's \s also takes what a locale
-- calls a space, such as U+00A0, which is kept inside a word here). VT is written \x0B: an E''
-- string's \v is not an escape on PostgreSQL 15 (E'\v' is a plain v there: a test caught it).
AS $$
    SELECT CASE WHEN n IS NOT NULL THEN
        array_to_string((array_remove(string_to_array(translate(t, E'\t\n\r\x0B\f', '     '), ' '), ''))
            [greatest(cardinality(array_remove(string_to_array(translate(t, E'\t\n\r\x0B\f', '     '), ' '), '')) - n + 1, 1):], ' ') END
$$;
COMMENT ON FUNCTION rcll._last_words(text, integer) IS 'Internal: the last n words of a text (separated by ASCII whitespace), joined by single spaces.';

CREATE OR REPLACE FUNCTION rcll.preceding_units(unit_ids bigint[], scope rcll.recall_scope)
RETURNS TABLE (unit_id bigint, preceding_id bigint, preceding_text text)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    -- The predecessor counts only if the same recall could return it: context never carries
    -- text in from another room, author, thread or validity window.
    RETURN QUERY
    SELECT u.unit_id, p.unit_id, p.text
    FROM rcll.memory_units u
    JOIN rcll.memory_units p ON p.document_id = u.document_id AND p.chunk_index = u.chunk_index - 1
    WHERE u.unit_id = ANY (preceding_units.unit_ids) AND u.bank_id = (scope).bank_id
      AND rcll._in_scope(p, scope);
END
$$;
COMMENT ON FUNCTION rcll.preceding_units(bigint[], rcll.recall_scope)
    IS 'For each given unit, the chunk right before it in its document (chunk_index - 1), if that chunk passes the scope (rcll.recall_scope); units without one are absent. The cross-encoder''s context view reads it. From psql: SELECT * FROM rcll.preceding_units(ARRAY[42, 43], rcll.recall_scope(''fleet'')).';

CREATE OR REPLACE FUNCTION rcll.channel_context(
    query_embedding vector,
    seeds           bigint[],
    scope           rcll.recall_scope,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    q    public.vector := channel_context.query_embedding;
    lim  integer := greatest(coalesce(channel_context."limit", (rcll.recall_defaults()).channel_limit), 0);
BEGIN
    IF q IS NULL OR lim = 0 OR seeds IS NULL THEN
        RETURN;
    END IF;
    -- Candidates: the seeds (the dense channel's hits) and the chunk after each; score: the
    -- mean of a unit's similarity and its predecessor's, a unit without one counting its own
    -- twice. Every unit read passes the filters (seeds too: a caller may pass any ids). One
    -- index range scan per seed fetches both of its neighbours.
    RETURN QUERY
    WITH s AS (
        SELECT u.unit_id, u.document_id, u.chunk_index, 1 - (u.embedding OPERATOR(public.<=>) q) AS sim
        FROM rcll.memory_units u
        WHERE u.unit_id = ANY (channel_context.seeds) AND u.embedding IS NOT NULL
          AND rcll._in_scope(u, scope)
    ), w AS (
        SELECT DISTINCT n.unit_id, n.document_id, n.chunk_index, 1 - (n.embedding OPERATOR(public.<=>) q) AS sim
        FROM s JOIN rcll.memory_units n
          ON n.document_id = s.document_id AND n.chunk_index IN (s.chunk_index - 1, s.chunk_index + 1)
        WHERE n.embedding IS NOT NULL
          AND rcll._in_scope(n, scope)
    ), known AS (
        SELECT s.unit_id, s.document_id, s.chunk_index, s.sim FROM s
        UNION SELECT w.unit_id, w.document_id, w.chunk_index, w.sim FROM w
    ), c AS (
        SELECT s.unit_id, s.document_id, s.chunk_index, s.sim FROM s
        UNION SELECT w.unit_id, w.document_id, w.chunk_index, w.sim FROM w
        JOIN s ON s.document_id = w.document_id AND w.chunk_index = s.chunk_index + 1
    ), scored AS (
        SELECT c.unit_id, (c.sim + coalesce(p.sim, c.sim)) / 2 AS score
        FROM c LEFT JOIN known p ON p.document_id = c.document_id AND p.chunk_index = c.chunk_index - 1
    )
    SELECT r.unit_id, r.score, r.rank FROM (
        SELECT scored.unit_id, scored.score,
               (row_number() OVER (ORDER BY scored.score DESC, scored.unit_id))::integer AS rank
        FROM scored) r
    WHERE r.rank <= lim
    ORDER BY r.rank;
END
$$;
COMMENT ON FUNCTION rcll.channel_context(vector, bigint[], rcll.recall_scope, integer)
    IS 'Context recall channel: the seed units (the dense channel''s hits) and the chunk after each, ranked by the mean cosine similarity to query_embedding of the unit and of the chunk before it in its document (score = 1 - mean distance). Every unit read passes the scope (rcll.recall_scope), as in every channel. Finds replies whose meaning is in the chunk they answer. From psql: SELECT * FROM rcll.channel_context(<embedding>, ARRAY[42, 43], rcll.recall_scope(''fleet'')).';


-- functions 120-channel-lexical.sql
-- Lexical channel: Okapi BM25 over the units' tsvectors, with no statistics kept on the write path - and the
-- session channel's document BM25 (127) from the same candidate scan (rcll._bm25_channels).

CREATE OR REPLACE FUNCTION rcll._tsquery_any(lexemes text[])
RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Quoted, so lexemes are taken verbatim (no second round of parsing or stemming).
    SELECT string_agg('''' || replace(replace(l, '\', '\\'), '''', '''''') || '''', ' | ')::tsquery
    FROM unnest(lexemes) AS l
$$;
COMMENT ON FUNCTION rcll._tsquery_any(text[]) IS 'Internal: a tsquery matching any of the given lexemes, each taken verbatim.';

CREATE OR REPLACE FUNCTION rcll._bm25_term(
    idf double precision, tf double precision, dl double precision, avgdl double precision,
    k1 double precision, b double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): inlined into the BM25 query, where it is the
-- expression itself, not a call per term.
AS $$
    SELECT idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
$$;
COMMENT ON FUNCTION rcll._bm25_term(double precision, double precision, double precision, double precision, double precision, double precision)
    IS 'Internal: one term''s Okapi BM25 weight: idf x tf x (k1 + 1) / (tf + k1 x (1 - b + b x dl / avgdl)). Inlined into rcll._bm25_channels.';

CREATE OR REPLACE FUNCTION rcll._query_lexemes(query text, bank_id integer)
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT ARRAY(SELECT DISTINCT t.lexeme
                 FROM rcll.banks x, unnest(to_tsvector(x.text_search_config, coalesce(_query_lexemes.query, ''))) t
                 WHERE x.bank_id = _query_lexemes.bank_id
                 ORDER BY 1)
$$;
COMMENT ON FUNCTION rcll._query_lexemes(text, integer)
    IS 'Internal: the distinct lexemes of a query under its bank''s text search config, sorted. The BM25 channels'' query terms.';

CREATE OR REPLACE FUNCTION rcll._bm25_pruned_terms(
    terms text[], n double precision, prune_above double precision,
    OUT common text[], OUT common_freq double precision[], OUT gen text[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Candidates come from the rarer query terms only: every unit containing one of them is read,
    -- so their document frequencies are exact counts over the candidates. Terms in more than
    -- prune_above of the n units (known from ANALYZE's lexeme statistics, ~1% accurate) generate
    -- no candidates but still score; their frequency comes back with them (each channel turns it
    -- into a df; their IDF is small). Measured at 100k units: p50 ~500 ms exact vs ~30 ms pruned,
    -- top-10 agreement 0.997. Small banks (estimated df of at most 1,000 units) are always exact:
    -- a bank of at most 1,000 units cannot have such a term, and skips the statistics (a read of
    -- the whole table's most common lexemes, 2-3.5 ms in a 300k-unit fleet: docs/scaling.md).
    IF _bm25_pruned_terms.n <= 1000 OR coalesce(_bm25_pruned_terms.prune_above, 1) >= 1 THEN
        gen := _bm25_pruned_terms.terms;
        RETURN;
    END IF;
    SELECT array_agg(e.elem ORDER BY e.freq), array_agg(e.freq ORDER BY e.freq) INTO common, common_freq
    FROM pg_catalog.pg_stats s,
         unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(elem, freq)
    WHERE s.schemaname = 'rcll' AND s.tablename = 'unit_lexicon' AND s.attname = 'lexical'
      AND e.elem = ANY (_bm25_pruned_terms.terms)
      AND e.freq > coalesce(_bm25_pruned_terms.prune_above, 1) AND e.freq * _bm25_pruned_terms.n > 1000;
    gen := ARRAY(SELECT t FROM unnest(_bm25_pruned_terms.terms) t WHERE common IS NULL OR t <> ALL (common));
    IF cardinality(gen) = 0 THEN
        gen := common[1:1];          -- every term is common: generate from the least common one
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._bm25_pruned_terms(text[], double precision, double precision)
    IS 'Internal: of a query''s terms, those too common to generate BM25 candidates (common, by rising frequency common_freq among n units, from ANALYZE''s statistics of unit_lexicon) and those that generate them (gen). Shared by the lexical and session channels.';

CREATE OR REPLACE FUNCTION rcll._bm25_channels(
    query           text,
    scope           rcll.recall_scope,
    query_embedding vector DEFAULT NULL,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above     double precision DEFAULT 0.05,
    k1              double precision DEFAULT 1.2,
    b               double precision DEFAULT 0.75,
    lexical         boolean DEFAULT true,
    session         boolean DEFAULT true)
RETURNS TABLE (channel text, unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    bk     integer := (scope).bank_id;
    lim    integer := greatest(coalesce(_bm25_channels."limit", (rcll.recall_defaults()).channel_limit), 0);
    q      public.vector := _bm25_channels.query_embedding;
    terms  text[];
    corpus record;
    ndocs  double precision := 1;
    avgdl  double precision := 1;
    common text[];
    common_freq double precision[];
    gen    text[];
    gen_keys text[];
    scoped bigint[];
    -- A filtered scope of at most this many units gets exact candidates (below).
    scope_exact constant integer := 2000;
BEGIN
    terms := rcll._query_lexemes(_bm25_channels.query, bk);
    IF cardinality(terms) = 0 OR lim = 0 OR NOT (coalesce(_bm25_channels.lexical, false) OR coalesce(_bm25_channels.session, false)) THEN
        RETURN;
    END IF;
    corpus := rcll._bm25_corpus(bk);
    IF _bm25_channels.session THEN
        -- Document statistics: N = the bank's documents, average length = the units' total
        -- length over N - all three from the same refresh of rcll.bank_stats (rcll._bm25_corpus);
        -- counted here only when never refreshed (counting them on every recall was an index scan
        -- of 15-19 ms in a bank of 39,424 documents: migration 015).
        ndocs := greatest(coalesce(corpus.ndocs, (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = bk)), 1);
        avgdl := greatest(corpus.avgdl * corpus.n / ndocs, 1);
    END IF;
    -- Candidates from the rarer terms only (rcll._bm25_pruned_terms); a pruned term still scores,
    -- its df estimated from its frequency f among the N units: f x N units (lexical); for the
    -- session channel the documents holding it, were its units spread at random over documents of
    -- the average size m = N / ndocs: ndocs x (1 - (1 - f)^m). (f x N, capped at every document,
    -- overstated a term in 5% of the units of 10-unit documents by a quarter; on bench.recall's
    -- 100k store, 100 queries, the session channel's top-10 overlap with exact BM25 went from 0.919
    -- to 0.930 with this alone, 0.972 with the rescoring below: docs/scaling.md.)
    SELECT t.common, t.common_freq, t.gen INTO common, common_freq, gen
    FROM rcll._bm25_pruned_terms(terms, corpus.n, _bm25_channels.prune_above) t;
    -- The candidate-generating terms as keys of this bank's posting lists (migration 016).
    gen_keys := rcll._bank_keys(bk, gen);
    -- Pruning decides by a term's frequency in the whole bank, so a unit that matches only pruned
    -- terms is never a candidate. Across a bank the rarer terms' matches fill the top; in a room of
    -- a hundred units few of them are in scope, and the units matching the common terms alone are
    -- exact BM25's next best there (bench.recall at 100k: top-10 overlap with exact 0.58 in such
    -- rooms, 1.00 unfiltered). So when terms were pruned and the scope is filtered down to at most
    -- scope_exact units, the scope's own units (found through memory_units' scope indexes) that
    -- match a pruned term are candidates too: inside a small scope every matching unit is read.
    IF common IS NOT NULL AND ((scope).rooms IS NOT NULL OR (scope).authors IS NOT NULL
            OR (scope).halls IS NOT NULL OR (scope).layers IS NOT NULL OR (scope).tags_any IS NOT NULL
            OR (scope).tags_all IS NOT NULL OR (scope).thread IS NOT NULL) THEN
        scoped := ARRAY(SELECT m.unit_id FROM rcll.memory_units m WHERE rcll._in_scope(m, scope) LIMIT scope_exact + 1);
        IF cardinality(scoped) > scope_exact THEN
            scoped := NULL;
        END IF;
    END IF;

    RETURN QUERY
    WITH hits AS MATERIALIZED (
        -- One scan for both channels: a row per candidate unit and query lexeme it holds, with
        -- the lexeme's tf. Only the query's lexemes are unnested: marking them with weight A and
        -- filtering on it is ~3x cheaper than unnesting the whole tsvector of every candidate.
        -- (lexical carries no weights - the units_lexical trigger writes plain to_tsvector - so
        -- nothing else is A.) unnest is in the select list (a ProjectSet, one row at a time) and
        -- the candidates are not materialised first: measured at 100k units, this step 37 ms
        -- against 45 with the candidates materialised and unnested in FROM (docs/scaling.md). Read
        -- from rcll.unit_lexicon, the narrow copy (453 bytes a unit against 2.7 kB for a
        -- memory_units row with its inline embedding): the same rows and scores, about half the
        -- pages touched (migration 012, docs/scaling.md).
        SELECT c.unit_id, c.document_id, c.keep, c.dl, (c.e).lexeme,
               coalesce(array_length((c.e).positions, 1), 1)::double precision AS tf
        FROM (
            SELECT u.unit_id, u.document_id, u.lexical_length AS dl, rcll._in_scope(u, scope) AS keep,
                   unnest(ts_filter(setweight(u.lexical, 'A', terms), '{a}')) AS e
            FROM rcll.unit_lexicon u
            -- The bank's own posting lists of the terms (unit_lexicon_bank_lexemes, migration 016):
            -- a key names its bank, so no bank_id test - with one, the planner ANDed the bank
            -- index's bitmap in (every unit of the bank: 10 ms in a 333,933-unit bank).
            WHERE rcll._bank_keys(u.bank_id, tsvector_to_array(u.lexical)) && gen_keys
            UNION ALL
            -- A small scope's units that match only pruned terms (above; none when scoped is NULL).
            SELECT u.unit_id, u.document_id, u.lexical_length, rcll._in_scope(u, scope),
                   unnest(ts_filter(setweight(u.lexical, 'A', terms), '{a}'))
            FROM rcll.unit_lexicon u
            WHERE u.unit_id = ANY (scoped) AND u.lexical @@ rcll._tsquery_any(common)
              AND NOT u.lexical @@ rcll._tsquery_any(gen)) c
    ),
    -- Lexical: units scored by Okapi BM25 over their own text.
    l_df AS (
        -- Per-bank document frequency: counted (exact) for candidate-generating terms, estimated
        -- from ANALYZE for the pruned common ones. The bank (not the filtered set) is the corpus.
        SELECT h.lexeme, count(*)::double precision AS df FROM hits h WHERE h.lexeme = ANY (gen) GROUP BY h.lexeme
        UNION ALL
        SELECT c.lexeme, c.f * corpus.n FROM unnest(common, common_freq) c(lexeme, f) WHERE c.lexeme <> ALL (gen)
    ), l_idf AS (
        SELECT d.lexeme,
               ln(1 + (greatest(corpus.n, (SELECT max(x.df) FROM l_df x)) - d.df + 0.5) / (d.df + 0.5)) AS idf
        FROM l_df d
    ), l_scored AS (
        SELECT h.unit_id,
               sum(rcll._bm25_term(i.idf, h.tf, h.dl, corpus.avgdl, _bm25_channels.k1, _bm25_channels.b)) AS s
        FROM hits h JOIN l_idf i ON i.lexeme = h.lexeme
        WHERE h.keep
        GROUP BY h.unit_id
    ),
    -- Session: documents scored by BM25 over their units in scope; their units inherit the score.
    s_hits AS (
        SELECT h.* FROM hits h WHERE h.document_id IS NOT NULL
    ), s_dt AS MATERIALIZED (
        -- Per document and lexeme, one hash aggregate for both uses: whether the document holds it
        -- (document frequency, over the bank) and its tf over the units in scope (the text scored).
        SELECT h.document_id, h.lexeme, sum(h.tf) FILTER (WHERE h.keep) AS tf, bool_or(h.keep) AS kept
        FROM s_hits h GROUP BY h.document_id, h.lexeme
    ), s_df AS (
        -- Document frequency over the bank's documents: counted for candidate-generating terms,
        -- estimated for the pruned common ones (above).
        SELECT t.lexeme, count(*)::double precision AS df FROM s_dt t
        WHERE t.lexeme = ANY (gen) GROUP BY t.lexeme
        UNION ALL
        -- ndocs x (1 - (1 - f)^m), written with exp and ln so that a huge m cannot underflow
        SELECT c.lexeme, ndocs * (1 - exp(greatest(corpus.n / ndocs * ln(greatest(1 - c.f, 1e-12)), -700)))
        FROM unnest(common, common_freq) c(lexeme, f) WHERE c.lexeme <> ALL (gen)
    ), s_idf AS (
        SELECT d.lexeme, ln(1 + (greatest(ndocs, (SELECT max(x.df) FROM s_df x)) - d.df + 0.5) / (d.df + 0.5)) AS idf
        FROM s_df d
    ), s_tf AS (
        -- A document's text is what the recall may read of it: its units in scope.
        SELECT t.document_id, t.lexeme, t.tf FROM s_dt t WHERE t.kept
    ), s_dl AS (
        -- Every touched document's length, one row each (rcll.document_lexicon, kept by triggers):
        -- summed here from unit_lexicon it read ~12 index entries a document, ~18 of the
        -- channel's ~70 ms at 100k units (docs/scaling.md).
        SELECT m.document_id, m.lexical_length::double precision AS dl
        FROM rcll.document_lexicon m
        WHERE m.document_id IN (SELECT t.document_id FROM s_tf t)
    ), s_first AS MATERIALIZED (
        -- The documents scored from their candidate units: exact when no term was pruned. A
        -- pruned term's tf then counts only the units that also hold a rarer term, so these are
        -- lower bounds, and the best `lim` of them are scored again below over all their units.
        SELECT t.document_id
        FROM s_tf t JOIN s_idf i ON i.lexeme = t.lexeme JOIN s_dl l ON l.document_id = t.document_id
        GROUP BY t.document_id
        ORDER BY sum(rcll._bm25_term(i.idf, t.tf, l.dl, avgdl, _bm25_channels.k1, _bm25_channels.b)) DESC,
                 t.document_id
        LIMIT lim                 -- every document holds at least one unit
    ), s_tf_all AS (
        -- Their pruned terms' tf from the units that were not candidates (in scope, as above).
        SELECT x.document_id, x.lexeme, sum(x.tf) AS tf
        FROM (SELECT t.document_id, t.lexeme, t.tf FROM s_tf t WHERE t.document_id IN (SELECT f.document_id FROM s_first f)
              UNION ALL
              SELECT u.document_id, t.lexeme, coalesce(array_length(t.positions, 1), 1)::double precision
              FROM rcll.unit_lexicon u, unnest(ts_filter(setweight(u.lexical, 'A', common), '{a}')) t
              WHERE common IS NOT NULL
                AND u.document_id IN (SELECT f.document_id FROM s_first f)
                AND u.lexical @@ rcll._tsquery_any(common) AND NOT u.lexical @@ rcll._tsquery_any(gen)
                AND (scoped IS NULL OR u.unit_id <> ALL (scoped))
                AND rcll._in_scope(u, scope)) x
        GROUP BY x.document_id, x.lexeme
    ), s_docs AS (
        SELECT t.document_id,
               sum(rcll._bm25_term(i.idf, t.tf, l.dl, avgdl, _bm25_channels.k1, _bm25_channels.b)) AS s
        FROM s_tf_all t JOIN s_idf i ON i.lexeme = t.lexeme JOIN s_dl l ON l.document_id = t.document_id
        GROUP BY t.document_id
        ORDER BY 2 DESC, 1
    ), s_units AS (
        SELECT u.unit_id, d.s, d.document_id,
               CASE WHEN q IS NULL OR u.embedding IS NULL THEN NULL
                    ELSE u.embedding OPERATOR(public.<=>) q END AS dist, u.chunk_index
        FROM s_docs d JOIN rcll.memory_units u ON u.document_id = d.document_id
        WHERE rcll._in_scope(u, scope)
    )
    -- Both lists are cut with ORDER BY ... LIMIT and numbered after: a top-N sort of the scored
    -- units, and the session's units read document by document only until the limit is reached
    -- (not every unit of every listed document).
    (SELECT 'lexical'::text, x.unit_id, x.s, (row_number() OVER (ORDER BY x.s DESC, x.unit_id))::integer
     FROM (SELECT y.unit_id, y.s FROM l_scored y WHERE _bm25_channels.lexical
           ORDER BY y.s DESC, y.unit_id LIMIT lim) x
     ORDER BY x.s DESC, x.unit_id)
    UNION ALL
    (SELECT 'session'::text, x.unit_id, x.s,
            (row_number() OVER (ORDER BY x.s DESC, x.document_id, x.dist NULLS LAST, x.chunk_index, x.unit_id))::integer
     FROM (SELECT y.unit_id, y.s, y.document_id, y.dist, y.chunk_index FROM s_units y WHERE _bm25_channels.session
           ORDER BY y.s DESC, y.document_id, y.dist NULLS LAST, y.chunk_index, y.unit_id LIMIT lim) x
     ORDER BY x.s DESC, x.document_id, x.dist NULLS LAST, x.chunk_index, x.unit_id);
END
$$;
COMMENT ON FUNCTION rcll._bm25_channels(text, rcll.recall_scope, vector, integer, double precision, double precision, double precision, boolean, boolean)
    IS 'Internal: the lexical (units by Okapi BM25) and session (documents by BM25 over their units in scope, units inheriting the score) channels from one candidate scan of rcll.unit_lexicon - rcll.recall_candidates runs both in one call; rcll.channel_lexical and rcll.channel_session are each one of them. channel is ''lexical'' or ''session''; a false flag skips that channel.';

CREATE OR REPLACE FUNCTION rcll.channel_lexical(
    query       text,
    scope       rcll.recall_scope,
    "limit"     integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above double precision DEFAULT 0.05,
    k1          double precision DEFAULT 1.2,
    b           double precision DEFAULT 0.75)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
AS $$
    SELECT c.unit_id, c.score, c.rank
    FROM rcll._bm25_channels(channel_lexical.query, channel_lexical.scope, NULL, channel_lexical."limit",
                             channel_lexical.prune_above, channel_lexical.k1, channel_lexical.b,
                             lexical => true, session => false) c
    ORDER BY c.rank
$$;
COMMENT ON FUNCTION rcll.channel_lexical(text, rcll.recall_scope, integer, double precision, double precision, double precision)
    IS 'Lexical recall channel: Okapi BM25 (k1, b) of the query''s lexemes under the bank''s text search configuration, per-bank IDF, filtered before ranking by the scope (rcll.recall_scope). Candidates come from terms in at most prune_above of the units (NULL or 1: exact, all terms); all terms score. Reads plain tables only, so it runs on replicas. From psql: SELECT * FROM rcll.channel_lexical(''deploy'', rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';


-- functions 125-channel-entity.sql
-- Entity channel (who): the units linked to the entities a query names, ranked by what is asked about them.
--
-- "What did Caroline research?" names a person; half a conversation may be hers. The channel lists
-- the units linked to a named entity (rcll.unit_entities: keyless speaker and name links written at
-- retain, sql/functions/205-keyless-entities.sql, or the extractor's) and ranks them by cosine to the
-- query *with the names removed* ("What did research?"): with the name gone, the similarity
-- measures what is asked about the person, not that the person is named (bench/locomo/RESEARCH.md,
-- third round: ranked by the whole query instead, R@40 0.873 vs 0.891 on conversations 0-4).

CREATE OR REPLACE FUNCTION rcll._query_named_entities(query text, bank_id integer)
RETURNS TABLE (entity_id bigint, name text, matched text)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    -- PL/pgSQL only so that this file may precede 200-entities.sql (rcll._entity_key).
    -- Word n-grams (1-3 words) of the query in which every word is written capitalised,
    -- possessives dropped, matched exactly (by key) against the bank's entity spellings.
    RETURN QUERY
    WITH w AS (
        SELECT array_remove(regexp_split_to_array(
                   regexp_replace(coalesce(_query_named_entities.query, ''), '[''’]s\M', '', 'g'),
                   '[^[:alnum:]_.''’-]+'), '') AS words
    ), g AS (
        SELECT DISTINCT array_to_string(w.words[i:i + len - 1], ' ') AS gram
        FROM w, generate_series(1, coalesce(cardinality(w.words), 0)) AS i, generate_series(1, 3) AS len
        WHERE i + len - 1 <= cardinality(w.words)
          AND NOT EXISTS (SELECT 1 FROM unnest(w.words[i:i + len - 1]) x WHERE x !~ '^[[:upper:]]')
    )
    SELECT DISTINCT ON (a.entity_id) a.entity_id, e.name, rcll._entity_key(g.gram)
    FROM g
    JOIN rcll.entity_aliases a ON a.bank_id = _query_named_entities.bank_id AND a.alias = rcll._entity_key(g.gram)
    JOIN rcll.entities e ON e.entity_id = a.entity_id
    ORDER BY a.entity_id, length(g.gram) DESC;
END
$$;
COMMENT ON FUNCTION rcll._query_named_entities(text, integer)
    IS 'Internal: the bank''s entities a query names, written capitalised (every word of a one- to three-word n-gram starts with a capital; possessives dropped), matched exactly by spelling key against entity_aliases. The entity channel''s entities.';

CREATE OR REPLACE FUNCTION rcll._query_without_entities(query text, bank_id integer)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    rest text := _query_without_entities.query;
    m text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM rcll._query_named_entities(_query_without_entities.query, _query_without_entities.bank_id)) THEN
        RETURN NULL;
    END IF;
    FOR m IN SELECT q.matched FROM rcll._query_named_entities(_query_without_entities.query, _query_without_entities.bank_id) q
             ORDER BY length(q.matched) DESC, q.matched LOOP
        rest := regexp_replace(rest, '\m' || regexp_replace(m, '([.^$*+?()\[\]{}|\\-])', '\\\1', 'g')
                                      || '(?:[''’]s)?\M', ' ', 'gi');
    END LOOP;
    rest := btrim(regexp_replace(rest, '\s+', ' ', 'g'));
    -- Nothing left but punctuation: the whole query.
    RETURN CASE WHEN rest ~ '[[:alnum:]]' THEN rest ELSE _query_without_entities.query END;
END
$$;
COMMENT ON FUNCTION rcll._query_without_entities(text, integer)
    IS 'Internal: rcll.query_without_entities for a resolved bank id.';

CREATE OR REPLACE FUNCTION rcll.query_without_entities(query text, bank text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT rcll._query_without_entities(query_without_entities.query, rcll._bank_id(query_without_entities.bank))
$$;
COMMENT ON FUNCTION rcll.query_without_entities(text, text)
    IS 'The query with the entities it names (rcll._query_named_entities: capitalised, known in the bank; a trailing ''s too) removed - what the entity channel''s second query embedding embeds. NULL when the query names no known entity (the entity channel is then silent); the whole query when nothing else is left. The rcll client embeds it with the query (one batch) and passes it as recall_candidates'' entity_query_embedding. From psql: SELECT rcll.query_without_entities(''What did Caroline research?'', ''fleet'').';

CREATE OR REPLACE FUNCTION rcll.channel_entity(
    query           text,
    scope           rcll.recall_scope,
    query_embedding vector,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    q    public.vector := channel_entity.query_embedding;
    lim  integer := greatest(coalesce(channel_entity."limit", (rcll.recall_defaults()).channel_limit), 0);
    ents bigint[];
BEGIN
    IF q IS NULL OR lim = 0 THEN
        RETURN;
    END IF;
    ents := ARRAY(SELECT e.entity_id FROM rcll._query_named_entities(channel_entity.query, (scope).bank_id) e);
    IF cardinality(ents) = 0 THEN
        RETURN;
    END IF;
    -- Every unit linked to a named entity, scanned exactly (MATERIALIZED: never the HNSW index,
    -- which would filter after a fixed-size search); no weight per entity - the fusion's
    -- standardisation already turns a hub's long flat list into a weak vote.
    RETURN QUERY
    WITH f AS MATERIALIZED (
        SELECT u.unit_id, u.embedding FROM rcll.memory_units u
        WHERE u.unit_id IN (SELECT ue.unit_id FROM rcll.unit_entities ue WHERE ue.entity_id = ANY (ents))
          AND u.embedding IS NOT NULL
          AND rcll._in_scope(u, scope))
    SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id))::integer
    FROM (SELECT f.unit_id, f.embedding OPERATOR(public.<=>) q AS dist FROM f ORDER BY 2, 1 LIMIT lim) d
    ORDER BY 3;
END
$$;
COMMENT ON FUNCTION rcll.channel_entity(text, rcll.recall_scope, vector, integer)
    IS 'Entity recall channel (who): the units linked (rcll.unit_entities) to an entity the query names, written capitalised (rcll._query_named_entities), ranked by cosine similarity to query_embedding - for recall, the embedding of the query with the names removed (rcll.query_without_entities) - score = 1 - cosine distance. Empty when the query names no known entity or no embedding is given. Filtered before ranking by the scope (rcll.recall_scope). From psql: SELECT * FROM rcll.channel_entity(''What did Caroline research?'', rcll.recall_scope(''fleet''), <embedding>).';


-- functions 127-channel-session.sql
-- Session channel (where): documents scored by BM25 over their whole text; their units inherit the score.
--
-- A conversation's session (a document) shares a question's vocabulary far more often than the one
-- turn that answers it does: "When did Melanie run a charity race?" matches the session about the
-- race although the answering turn says "last Saturday". The channel scores each document by Okapi
-- BM25 over its text (tf summed over its units, length the sum of their lengths, IDF over the
-- bank's documents), from the same candidate units the lexical channel reads (one scan for both:
-- rcll._bm25_channels, 120-channel-lexical.sql), and lists the units
-- of the best documents - inside a document by cosine to the query. On LoCoMo it is the first
-- stage's largest single gain (bench/locomo/RESEARCH.md, third round: -0.033 / -0.036 R@40 without it).

CREATE OR REPLACE FUNCTION rcll.channel_session(
    query           text,
    scope           rcll.recall_scope,
    query_embedding vector DEFAULT NULL,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    prune_above     double precision DEFAULT 0.05,
    k1              double precision DEFAULT 1.2,
    b               double precision DEFAULT 0.75)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
AS $$
    -- Scored in rcll._bm25_channels (120-channel-lexical.sql), from the lexical channel's candidates.
    SELECT c.unit_id, c.score, c.rank
    FROM rcll._bm25_channels(channel_session.query, channel_session.scope, channel_session.query_embedding,
                             channel_session."limit", channel_session.prune_above, channel_session.k1,
                             channel_session.b, lexical => false, session => true) c
    ORDER BY c.rank
$$;
COMMENT ON FUNCTION rcll.channel_session(text, rcll.recall_scope, vector, integer, double precision, double precision, double precision)
    IS 'Session recall channel (where): documents scored by Okapi BM25 (k1, b) of the query over their whole text - tf summed over their units in scope, length the sum of their units'' lexical lengths, IDF over the bank''s documents - from the candidate units rcll.channel_lexical reads (same prune_above rule); each unit inherits its document''s score (score = the document''s BM25), listed best document first, inside a document by cosine to query_embedding (else in document order), at most "limit" units. Filtered before ranking by the scope (rcll.recall_scope). From psql: SELECT * FROM rcll.channel_session(''charity race'', rcll.recall_scope(''fleet'')).';


-- functions 130-channel-graph.sql
-- Graph channel: activation spread from the entities the query names, over unit_entities and links.

CREATE OR REPLACE FUNCTION rcll._query_ngrams(query text, max_words integer DEFAULT 3)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Lower-cased word n-grams (1..max_words) of the query, possessives dropped: the spellings an
    -- entity alias can match exactly.
    WITH w AS (
        SELECT array_remove(regexp_split_to_array(
                   regexp_replace(lower(query), '''s\M', '', 'g'), '[^[:alnum:]_.''-]+'), '') AS words
    )
    SELECT coalesce(array_agg(DISTINCT array_to_string(w.words[i:i + len - 1], ' ')), '{}')
    FROM w, generate_series(1, coalesce(cardinality(w.words), 0)) AS i, generate_series(1, max_words) AS len
    WHERE i + len - 1 <= cardinality(w.words)
$$;
COMMENT ON FUNCTION rcll._query_ngrams(text, integer) IS 'Internal: lower-cased word n-grams of a query (possessives dropped), for matching entity names and aliases.';

CREATE OR REPLACE FUNCTION rcll._query_entities(
    query          text,
    bank_id        integer,
    min_similarity real DEFAULT 0.6,
    max_entities   integer DEFAULT 16)
RETURNS TABLE (entity_id bigint, name text, matched text, similarity real)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    bk  integer := _query_entities.bank_id;
    cfg regconfig;
    grams text[];
BEGIN
    SELECT x.text_search_config INTO cfg FROM rcll.banks x WHERE x.bank_id = bk;
    -- Single stop words ("the", "we") never name an entity; short single tokens only match exactly.
    grams := ARRAY(SELECT g FROM unnest(rcll._query_ngrams(coalesce(_query_entities.query, ''), 3)) g
                   WHERE g LIKE '% %' OR length(to_tsvector(cfg, g)) > 0);
    IF cardinality(grams) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT m.entity_id, e.name, m.matched, m.sim
    FROM (
        SELECT DISTINCT ON (c.entity_id) c.entity_id, c.matched, c.sim
        FROM (
            SELECT a.entity_id, a.alias AS matched, 1.0::real AS sim
            FROM rcll.entity_aliases a WHERE a.bank_id = bk AND a.alias = ANY (grams)
            UNION ALL
            SELECT x.entity_id, lower(x.name), 1.0::real
            FROM rcll.entities x WHERE x.bank_id = bk AND lower(x.name) = ANY (grams)
        ) c
        ORDER BY c.entity_id, c.sim DESC, c.matched
    ) m
    JOIN rcll.entities e ON e.entity_id = m.entity_id
    ORDER BY m.sim DESC, m.entity_id
    LIMIT _query_entities.max_entities;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Nothing named exactly: trigram similarity of an alias (every spelling, the canonical name
    -- included) to a one- or two-word n-gram of the query. One GIN probe per n-gram, so only
    -- when the exact match found nothing.
    RETURN QUERY
    SELECT m.entity_id, e.name, m.matched, m.sim
    FROM (
        SELECT DISTINCT ON (a.entity_id) a.entity_id, a.alias AS matched, public.similarity(a.alias, g.g) AS sim
        FROM unnest(grams) g(g)
        JOIN rcll.entity_aliases a ON a.bank_id = bk AND a.alias OPERATOR(public.%) g.g
        WHERE length(g.g) >= 4 AND g.g NOT LIKE '% % %'
          AND public.similarity(a.alias, g.g) >= _query_entities.min_similarity
        ORDER BY a.entity_id, 3 DESC, a.alias
    ) m
    JOIN rcll.entities e ON e.entity_id = m.entity_id
    ORDER BY m.sim DESC, m.entity_id
    LIMIT _query_entities.max_entities;
END
$$;
COMMENT ON FUNCTION rcll._query_entities(text, integer, real, integer)
    IS 'Internal: rcll.query_entities for a resolved bank id (the graph channel''s seeds).';

CREATE OR REPLACE FUNCTION rcll.query_entities(
    query          text,
    bank           text,
    min_similarity real DEFAULT 0.6,
    max_entities   integer DEFAULT 16)
RETURNS TABLE (entity_id bigint, name text, matched text, similarity real)
LANGUAGE sql STABLE
AS $$
    SELECT * FROM rcll._query_entities(query_entities.query, rcll._bank_id(query_entities.bank),
                                       query_entities.min_similarity, query_entities.max_entities)
$$;
COMMENT ON FUNCTION rcll.query_entities(text, text, real, integer)
    IS 'Entities a query names: exact matches of its word n-grams (up to three words) against entity names and aliases; when there are none, trigram matches of aliases to its one- and two-word n-grams with similarity >= min_similarity. The graph channel''s seeds.';

CREATE OR REPLACE FUNCTION rcll._keyless_link(role text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): inlined into the graph channel's queries.
AS $$
    -- The roles chunk-mode retain gives its keyless links (sql/functions/205-keyless-entities.sql).
    -- Those are the entity channel's: spreading activation from a speaker over every one of their
    -- turns (a hub, half a conversation) adds only the newest of them - on LoCoMo the fused pool
    -- with the graph walking them held R@50 0.907 / nDCG@5 0.546 against 0.909 / 0.550 without.
    SELECT coalesce(role IN ('speaker', 'name'), false)
$$;
COMMENT ON FUNCTION rcll._keyless_link(text) IS 'Internal: whether a unit_entities role is a keyless link written by chunk-mode retain (speaker, name): read by the entity channel, not walked by the graph channel.';

CREATE OR REPLACE FUNCTION rcll.channel_graph(
    query   text,
    scope   rcll.recall_scope,
    "limit" integer DEFAULT (rcll.recall_defaults()).channel_limit,
    hops    integer DEFAULT 2,
    decay   double precision DEFAULT 0.5,
    fanout  integer DEFAULT 100)
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    lim  integer := greatest(coalesce(channel_graph."limit", (rcll.recall_defaults()).channel_limit), 0);
    cap  integer := greatest(coalesce(channel_graph.fanout, 100), 1);
    ents bigint[];            -- entity frontier
    eact double precision[];
    seen_ents bigint[];
    units bigint[];           -- unit frontier
    uact double precision[];
    all_units bigint[] := '{}';
    all_act double precision[] := '{}';
    hop integer := 1;
BEGIN
    IF lim = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(s.entity_id), array_agg(s.similarity::double precision) INTO ents, eact
    FROM rcll._query_entities(channel_graph.query, (scope).bank_id) s;
    IF ents IS NULL THEN
        RETURN;
    END IF;
    seen_ents := ents;

    -- Plain joins over arrays, one statement per hop: no recursive path enumeration (which
    -- explodes on hubs), no temp tables (a hot standby cannot create them), no graph extension.
    -- Each hop is capped: at most `fanout` units per entity (the newest) and a frontier of at
    -- most `fanout` units, so a hub entity costs as much as an ordinary one.
    WHILE hop <= greatest(coalesce(channel_graph.hops, 2), 1) LOOP
        -- Entities -> the units that mention them (filtered: activation never flows through
        -- units the recall may not read). A unit naming several active entities adds them up.
        SELECT array_agg(x.unit_id ORDER BY x.act DESC, x.unit_id DESC), array_agg(x.act ORDER BY x.act DESC, x.unit_id DESC)
        INTO units, uact
        FROM (
            SELECT m.unit_id, sum(m.act) AS act FROM (
                SELECT s.unit_id, e.act * power(channel_graph.decay, hop - 1) AS act
                FROM unnest(ents, eact) AS e(entity_id, act)
                CROSS JOIN LATERAL (
                    SELECT ue.unit_id FROM rcll.unit_entities ue
                    JOIN rcll.memory_units u ON u.unit_id = ue.unit_id
                    WHERE ue.entity_id = e.entity_id AND NOT rcll._keyless_link(ue.role)
                      AND rcll._in_scope(u, scope)
                    ORDER BY ue.unit_id DESC LIMIT cap) s
                UNION ALL
                -- Units -> linked units (both directions), weighted by the link.
                SELECT l.other, f.act * l.weight * channel_graph.decay
                FROM unnest(units, uact) AS f(unit_id, act)
                CROSS JOIN LATERAL (
                    SELECT k.to_unit AS other, k.weight FROM rcll.links k WHERE k.from_unit = f.unit_id
                    UNION ALL
                    SELECT k.from_unit, k.weight FROM rcll.links k WHERE k.to_unit = f.unit_id) l
                JOIN rcll.memory_units u ON u.unit_id = l.other
                WHERE hop > 1
                  AND rcll._in_scope(u, scope)
            ) m
            WHERE m.unit_id <> ALL (all_units)
            GROUP BY m.unit_id
            ORDER BY act DESC, m.unit_id DESC
            LIMIT cap * 4) x;
        EXIT WHEN units IS NULL;
        all_units := all_units || units;
        all_act := all_act || uact;
        hop := hop + 1;
        EXIT WHEN hop > greatest(coalesce(channel_graph.hops, 2), 1);

        units := units[1:cap];
        uact := uact[1:cap];
        -- Units -> the other entities they mention, each entity's activation split over the
        -- frontier units that reach it (a hub reached from many units is not amplified).
        SELECT array_agg(y.entity_id ORDER BY y.act DESC, y.entity_id), array_agg(y.act ORDER BY y.act DESC, y.entity_id)
        INTO ents, eact
        FROM (
            SELECT ue.entity_id, sum(f.act) / sqrt(count(*)) AS act
            FROM unnest(units, uact) AS f(unit_id, act)
            JOIN rcll.unit_entities ue ON ue.unit_id = f.unit_id
            WHERE ue.entity_id <> ALL (seen_ents) AND NOT rcll._keyless_link(ue.role)
            GROUP BY ue.entity_id
            ORDER BY act DESC, ue.entity_id
            LIMIT greatest(cap / 10, 8)) y;
        ents := coalesce(ents, '{}');
        eact := coalesce(eact, '{}');
        seen_ents := seen_ents || ents;
    END LOOP;

    RETURN QUERY
    SELECT a.unit_id, a.act, (row_number() OVER (ORDER BY a.act DESC, a.unit_id DESC))::integer
    FROM unnest(all_units, all_act) AS a(unit_id, act)
    ORDER BY a.act DESC, a.unit_id DESC
    LIMIT lim;
END
$$;
COMMENT ON FUNCTION rcll.channel_graph(text, rcll.recall_scope, integer, integer, double precision, integer)
    IS 'Graph recall channel: activation spread from the entities the query names (rcll.query_entities) to the units mentioning them (the extractor''s links; keyless speaker/name links are the entity channel''s), then over links and shared entities for `hops` hops, multiplied by decay per hop and capped at fanout per entity and per frontier. Filtered before ranking by the scope (rcll.recall_scope): activation never passes through units the recall may not read. Plain SQL: runs on hot standbys. From psql: SELECT * FROM rcll.channel_graph(''where did Caroline move?'', rcll.recall_scope(''fleet'')).';


-- functions 140-temporal-parse.sql
-- Time expressions in a query ("last week", "in May 2023", "2 years ago", "before June") resolved to a range, in SQL.

CREATE OR REPLACE FUNCTION rcll._number_word(word text)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN word ~ '^\d+$' THEN least(word::bigint, 100000)::integer
        ELSE (ARRAY[1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 3, 3, 2, 2])[
            array_position(ARRAY['a', 'an', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight',
                                 'nine', 'ten', 'eleven', 'twelve', 'a few', 'several', 'a couple of', 'couple of'],
                           regexp_replace(btrim(word), '\s+', ' ', 'g'))] END
$$;
COMMENT ON FUNCTION rcll._number_word(text) IS 'Internal: a count written as digits or words ("two", "a few" = 3, "a couple of" = 2); NULL if not a count.';

CREATE OR REPLACE FUNCTION rcll._month_number(name text)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT array_position(ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'],
                          left(lower(name), 3))
$$;
COMMENT ON FUNCTION rcll._month_number(text) IS 'Internal: 1-12 for an English month name or abbreviation.';

CREATE OR REPLACE FUNCTION rcll.parse_time_range(query text, reference_time timestamptz DEFAULT now())
RETURNS tstzrange
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    q     text := ' ' || regexp_replace(lower(coalesce(query, '')), '\s+', ' ', 'g') || ' ';
    ref   timestamptz := coalesce(reference_time, now());
    today timestamptz := date_trunc('day', ref);
    mon   constant text := '(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)';
    num   constant text := '(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|several|a couple of|couple of)';
    days  constant text[] := ARRAY['monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday'];
    m     text[];
    r     tstzrange;
    d     timestamptz;
    n     integer;
    y     integer;
    mo    integer;
BEGIN
    IF q ~ '\mday before yesterday\M' THEN
        RETURN tstzrange(today - interval '2 days', today - interval '1 day');
    END IF;
    -- Open ranges wrap another expression: "before <x>", "after <x>", "since <x>", "until <x>".
    m := regexp_match(q, '\m(before|after|since|until|till|prior to|earlier than|later than) (.+)$');
    IF m IS NOT NULL THEN
        r := rcll.parse_time_range(m[2], ref);
        IF r IS NOT NULL THEN
            RETURN CASE
                WHEN m[1] IN ('before', 'prior to', 'earlier than') THEN tstzrange(NULL, lower(r))
                WHEN m[1] IN ('until', 'till') THEN tstzrange(NULL, upper(r))
                WHEN m[1] = 'since' THEN tstzrange(lower(r), NULL)
                ELSE tstzrange(upper(r), NULL) END;
        END IF;
    END IF;

    -- Dates: 2023-05-07, 7 May 2023, May 7th, 2023.
    m := regexp_match(q, '\m(\d{4})-(\d{1,2})-(\d{1,2})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[1]::int, m[2]::int, m[3]::int, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    m := regexp_match(q, '\m(\d{1,2})(?:st|nd|rd|th)? (?:of )?' || mon || '\.?,? (\d{4})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[3]::int, rcll._month_number(m[2]), m[1]::int, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    m := regexp_match(q, '\m' || mon || '\.? (\d{1,2})(?:st|nd|rd|th)?,? (\d{4})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[3]::int, rcll._month_number(m[1]), m[2]::int, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    -- Month and year: "May 2023", "in may of 2023".
    m := regexp_match(q, '\m' || mon || '\.?,? (?:of )?(\d{4})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[2]::int, rcll._month_number(m[1]), 1, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 month');
    END IF;

    -- "3 days ago", "two weeks ago", "a year ago": the day/week/month/year that contains it.
    m := regexp_match(q, '\m' || num || ' (day|week|month|year)s? ago\M');
    IF m IS NOT NULL AND rcll._number_word(m[1]) IS NOT NULL THEN
        d := date_trunc(m[2], ref - make_interval(days => CASE m[2] WHEN 'day' THEN 1 WHEN 'week' THEN 7 ELSE 0 END * rcll._number_word(m[1]),
                                                  months => CASE m[2] WHEN 'month' THEN 1 WHEN 'year' THEN 12 ELSE 0 END * rcll._number_word(m[1])));
        RETURN tstzrange(d, d + ('1 ' || m[2])::interval);
    END IF;
    -- "in the last 3 days", "past two weeks": up to the reference time.
    m := regexp_match(q, '\m(?:last|past|previous) ' || num || ' (day|week|month|year)s?\M');
    IF m IS NOT NULL AND rcll._number_word(m[1]) IS NOT NULL THEN
        RETURN tstzrange(ref - rcll._number_word(m[1]) * ('1 ' || m[2])::interval, ref, '[]');
    END IF;
    -- "last week", "this month", "next year", "last weekend", "earlier this week".
    m := regexp_match(q, '\m(last|this|next|previous|past|current) (week|month|year|weekend)\M');
    IF m IS NOT NULL THEN
        IF m[2] = 'weekend' THEN
            d := date_trunc('week', ref) + interval '5 days';          -- this week's Saturday
            d := d + CASE WHEN m[1] IN ('last', 'previous', 'past') THEN interval '-7 days'
                          WHEN m[1] = 'next' THEN interval '7 days' ELSE interval '0' END;
            RETURN tstzrange(d, d + interval '2 days');
        END IF;
        d := date_trunc(m[2], ref) + CASE WHEN m[1] IN ('last', 'previous', 'past') THEN -1 WHEN m[1] = 'next' THEN 1 ELSE 0 END
                                     * ('1 ' || m[2])::interval;
        RETURN tstzrange(d, d + ('1 ' || m[2])::interval);
    END IF;
    IF q ~ '\m(yesterday|last night)\M' THEN
        RETURN tstzrange(today - interval '1 day', today);
    ELSIF q ~ '\m(today|tonight|this morning|this afternoon|this evening)\M' THEN
        RETURN tstzrange(today, today + interval '1 day');
    ELSIF q ~ '\mtomorrow\M' THEN
        RETURN tstzrange(today + interval '1 day', today + interval '2 days');
    END IF;

    -- Weekdays: "on Monday", "last friday" = the most recent one before today ("on Monday" may
    -- be today).
    m := regexp_match(q, '\m(last |on |this |past )?(monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\M');
    IF m IS NOT NULL THEN
        n := (extract(isodow FROM today)::int - array_position(days, m[2]) + 7) % 7;
        IF n = 0 AND coalesce(m[1], '') = 'last ' THEN
            n := 7;
        END IF;
        d := today - n * interval '1 day';
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    -- Day and month without a year ("May 7th", "7 of May"): the most recent one.
    m := regexp_match(q, '\m' || mon || '\.? (\d{1,2})(?:st|nd|rd|th)?\M');
    IF m IS NULL THEN
        m := regexp_match(q, '\m(\d{1,2})(?:st|nd|rd|th)? (?:of )?' || mon || '\M');
        IF m IS NOT NULL THEN
            m := ARRAY[m[2], m[1]];
        END IF;
    END IF;
    IF m IS NOT NULL AND m[2]::int BETWEEN 1 AND 31 THEN
        mo := rcll._month_number(m[1]);
        y := extract(year FROM today)::int;
        d := make_timestamptz(y, mo, least(m[2]::int, 28), 0, 0, 0) + (least(m[2]::int, 31) - least(m[2]::int, 28)) * interval '1 day';
        IF d > ref THEN
            d := d - interval '1 year';
        END IF;
        RETURN tstzrange(d, d + interval '1 day');
    END IF;
    -- A month alone ("in March", "last May"): the most recent one that has begun. "may" counts as a
    -- month only after a preposition ("in may"), not as a verb.
    m := regexp_match(q, '\m(in |during |since |of |early |late |mid |mid-|last |this |by )?' || mon || '\M');
    IF m IS NOT NULL AND NOT (m[2] = 'may' AND m[1] IS NULL) THEN
        mo := rcll._month_number(m[2]);
        y := extract(year FROM today)::int;
        IF mo > extract(month FROM today)::int OR (coalesce(m[1], '') = 'last ' AND mo = extract(month FROM today)::int) THEN
            y := y - 1;
        END IF;
        d := make_timestamptz(y, mo, 1, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 month');
    END IF;
    -- A year ("in 2023").
    m := regexp_match(q, '\m((?:19|20)\d{2})\M');
    IF m IS NOT NULL THEN
        d := make_timestamptz(m[1]::int, 1, 1, 0, 0, 0);
        RETURN tstzrange(d, d + interval '1 year');
    END IF;
    IF q ~ '\m(recently|lately|recent)\M' THEN
        RETURN tstzrange(ref - interval '30 days', ref, '[]');
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION rcll.parse_time_range(text, timestamptz)
    IS 'The time range a query''s time expression names, resolved against reference_time in the session time zone: dates, "May 2023", "in March", "2023", "yesterday", "last week", "this month", "3 days ago", "past two weeks", weekdays, "recently", and "before/after/since/until <any of those>". NULL when the query names no time.';


-- functions 145-channel-temporal.sql
-- Temporal channel: units whose time falls in the range the query names (or the caller passes).

CREATE OR REPLACE FUNCTION rcll._in_time_range(
    u rcll.memory_units, lo timestamptz, hi timestamptz, hi_mentioned timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
-- No search_path (990-search-path.sql leaves it out): inlined into the channel's queries (as
-- rcll._in_scope, 105-recall-scope.sql), whose custom plans then compare the unit's columns with the
-- range's constants.
AS $$
    -- A unit's time is when it happened (occurred_start..occurred_end), else when it was said
    -- (mentioned_at), else when it became valid. In range = starts in [lo, hi) - a unit known only
    -- by when it was said, in [lo, hi_mentioned) - or, for an event with an end, spans into it.
    SELECT (coalesce((u).occurred_start, (u).mentioned_at, lower((u).valid)) >= lo
            AND coalesce((u).occurred_start, (u).mentioned_at, lower((u).valid)) < hi_mentioned
            AND ((u).occurred_start IS NOT NULL OR (u).mentioned_at IS NULL OR (u).mentioned_at < hi_mentioned)
            AND ((u).occurred_start IS NULL OR (u).occurred_start < hi))
        OR ((u).occurred_end IS NOT NULL AND (u).occurred_start < lo AND (u).occurred_end >= lo)
$$;
COMMENT ON FUNCTION rcll._in_time_range(rcll.memory_units, timestamptz, timestamptz, timestamptz)
    IS 'Internal: whether a unit''s time (occurred_start..occurred_end, else mentioned_at, else the start of validity) falls in [lo, hi) - up to hi_mentioned for a unit known only by when it was said. Inlined into rcll.channel_temporal''s queries.';

CREATE OR REPLACE FUNCTION rcll.channel_temporal(
    query           text,
    scope           rcll.recall_scope,
    time_range      tstzrange DEFAULT NULL,
    reference_time  timestamptz DEFAULT now(),
    query_embedding vector DEFAULT NULL,
    "limit"         integer DEFAULT (rcll.recall_defaults()).channel_limit,
    scan_limit      integer DEFAULT 5000,
    mention_slack   interval DEFAULT '7 days')
RETURNS TABLE (unit_id bigint, score double precision, rank integer)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 400      -- as rcll.channel_dense (110): above the default channel_limit
AS $$
#variable_conflict use_column
DECLARE
    lim    integer := greatest(coalesce(channel_temporal."limit", (rcll.recall_defaults()).channel_limit), 0);
    r      tstzrange := coalesce(channel_temporal.time_range,
                                 rcll.parse_time_range(channel_temporal.query, coalesce(channel_temporal.reference_time, now())));
    lo     timestamptz;
    hi     timestamptz;
    hi_mentioned timestamptz;
    anchor timestamptz;
BEGIN
    IF r IS NULL OR isempty(r) OR lim = 0 THEN
        RETURN;
    END IF;
    lo := coalesce(lower(r), '-infinity');
    hi := coalesce(upper(r), 'infinity');
    IF upper_inc(r) THEN
        hi := hi + interval '1 microsecond';
    END IF;
    -- Things are talked about after they happen: a unit known only by when it was said (a chunk)
    -- matches if it was said in the range or up to mention_slack after it.
    hi_mentioned := hi + coalesce(channel_temporal.mention_slack, interval '0');
    -- Closeness is measured to the middle of a bounded range, or to its one finite end.
    anchor := CASE WHEN lower(r) IS NOT NULL AND upper(r) IS NOT NULL THEN lower(r) + (upper(r) - lower(r)) / 2
                   ELSE coalesce(lower(r), upper(r), reference_time) END;

    IF channel_temporal.query_embedding IS NOT NULL THEN
        -- Within the range, the query's meaning orders units: a dense search filtered by time.
        -- With the filter values as constants the planner picks, from the statistics of the
        -- time index, an exact scan of a narrow range or an HNSW iterative scan of a wide one.
        RETURN QUERY
        SELECT d.unit_id, 1 - d.dist, (row_number() OVER (ORDER BY d.dist, d.unit_id DESC))::integer
        FROM (
            SELECT u.unit_id, u.embedding OPERATOR(public.<=>) channel_temporal.query_embedding AS dist
            FROM rcll.memory_units u
            WHERE u.embedding IS NOT NULL
              AND rcll._in_time_range(u, lo, hi, hi_mentioned)
              AND rcll._in_scope(u, scope)
            ORDER BY u.embedding OPERATOR(public.<=>) channel_temporal.query_embedding
            LIMIT lim) d
        ORDER BY 3;
        RETURN;
    END IF;
    -- Without an embedding: closeness in time to the range (the first scan_limit units found).
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT u.unit_id, coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) AS t
        FROM rcll.memory_units u
        WHERE rcll._in_time_range(u, lo, hi, hi_mentioned)
          AND rcll._in_scope(u, scope)
        LIMIT greatest(coalesce(channel_temporal.scan_limit, 5000), lim)
    ), s AS (
        SELECT c.unit_id, 1 / (1 + abs(extract(epoch FROM c.t - anchor)::double precision) / 86400) AS score
        FROM c
    )
    SELECT s.unit_id, s.score, (row_number() OVER (ORDER BY s.score DESC, s.unit_id DESC))::integer
    FROM s
    ORDER BY s.score DESC, s.unit_id DESC
    LIMIT lim;
END
$$;
COMMENT ON FUNCTION rcll.channel_temporal(text, rcll.recall_scope, tstzrange, timestamptz, vector, integer, integer, interval)
    IS 'Temporal recall channel: units whose time (occurred_start..occurred_end, else mentioned_at, else start of validity) falls in time_range (a unit known only by mentioned_at also up to mention_slack after it: things are said after they happen), or in the range rcll.parse_time_range finds in the query relative to reference_time; ordered by similarity to query_embedding when given, else by closeness to the range. Empty when the query names no time. Filtered before ranking by the scope (rcll.recall_scope). From psql: SELECT * FROM rcll.channel_temporal(''what did we decide last week'', rcll.recall_scope(''fleet'')).';


-- functions 148-recall-channels.sql
-- Recall phase 2: every channel's ranked list, before fusion - one call for all of them, or any subset.

CREATE OR REPLACE FUNCTION rcll._runs_channel(channel text, channels text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT channels IS NULL OR channel = ANY (channels)
$$;
COMMENT ON FUNCTION rcll._runs_channel(text, text[]) IS 'Internal: whether rcll.recall_channels runs a channel: channels is NULL (all) or names it.';

CREATE OR REPLACE FUNCTION rcll._known_channels(channels text[])
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    known constant text[] := '{dense,context,lexical,graph,temporal,entity,session}';
    bad   text;
BEGIN
    SELECT c INTO bad FROM unnest(channels) c WHERE c IS NULL OR c <> ALL (known) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'channels: % is not a recall channel', coalesce('"' || bad || '"', 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Name channels among ' || array_to_string(known, ', ') || ', or pass NULL for all.';
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION rcll._known_channels(text[]) IS 'Internal: true when every name in channels is a recall channel (NULL: all), else an error naming the one that is not.';

CREATE OR REPLACE FUNCTION rcll.recall_channels(
    query                  text,
    scope                  rcll.recall_scope,
    query_embedding        vector DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL,
    time_range             tstzrange DEFAULT NULL,
    reference_time         timestamptz DEFAULT now(),
    channel_limit          integer DEFAULT (rcll.recall_defaults()).channel_limit,
    dense_weight           double precision DEFAULT 1.0,
    lexical_weight         double precision DEFAULT 1.0,
    graph_weight           double precision DEFAULT 1.0,
    temporal_weight        double precision DEFAULT 1.0,
    entity_weight          double precision DEFAULT 1.0,
    session_weight         double precision DEFAULT 1.0,
    context_weight         double precision DEFAULT 0.0,
    channels               text[] DEFAULT NULL)
RETURNS TABLE (channel text, unit_id bigint, score double precision, rank integer)
LANGUAGE sql STABLE
-- SQL, not PL/pgSQL: the output columns would be variables in PL/pgSQL. Each channel is PL/pgSQL
-- with custom plans, so the scope's fields fold as constants where it matters.
AS $$
    -- Channels run one after another inside this statement; a channel with weight 0, or not named
    -- in `channels`, is not run. A client that wants them side by side calls this once per subset
    -- on connections of its own and fuses the lists with rcll.fuse_candidates (rcll.recall does).
    WITH d AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_dense(
            query_embedding => recall_channels.query_embedding, scope => recall_channels.scope,
            "limit" => recall_channels.channel_limit) c
        WHERE ((recall_channels.dense_weight > 0 AND rcll._runs_channel('dense', recall_channels.channels))
               OR (recall_channels.context_weight > 0 AND rcll._runs_channel('context', recall_channels.channels)))
          AND (recall_channels.query_embedding IS NOT NULL OR rcll._notice(
                'recall: dense channel skipped: no query_embedding was passed',
                'Pass query_embedding (the rcll Python client does), or let rcll.recall embed the query in the database (SELECT rcll.enable_in_database_models(...)).'))
    ), ctx AS (
        -- Context (off by default since the session and entity channels: RESEARCH.md, third round):
        -- the top 100 dense hits and the chunk after each, scored with the chunk before them.
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_context(
            query_embedding => recall_channels.query_embedding,
            seeds => (SELECT array_agg(d.unit_id) FROM d WHERE d.rank <= 100),
            scope => recall_channels.scope, "limit" => recall_channels.channel_limit) c
        WHERE recall_channels.context_weight > 0 AND rcll._runs_channel('context', recall_channels.channels)
    ), bm25 AS (
        -- The lexical and session channels share one candidate scan (rcll._bm25_channels).
        SELECT c.channel, c.unit_id, c.score, c.rank FROM rcll._bm25_channels(
            query => recall_channels.query, scope => recall_channels.scope,
            query_embedding => recall_channels.query_embedding, "limit" => recall_channels.channel_limit,
            lexical => recall_channels.lexical_weight > 0 AND rcll._runs_channel('lexical', recall_channels.channels),
            session => recall_channels.session_weight > 0 AND rcll._runs_channel('session', recall_channels.channels)) c
    ), g AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_graph(
            query => recall_channels.query, scope => recall_channels.scope, "limit" => recall_channels.channel_limit) c
        WHERE recall_channels.graph_weight > 0 AND rcll._runs_channel('graph', recall_channels.channels)
    ), t AS (
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_temporal(
            query => recall_channels.query, scope => recall_channels.scope,
            time_range => recall_channels.time_range, reference_time => recall_channels.reference_time,
            query_embedding => recall_channels.query_embedding, "limit" => recall_channels.channel_limit) c
        WHERE recall_channels.temporal_weight > 0 AND rcll._runs_channel('temporal', recall_channels.channels)
    ), e AS (
        -- Without the embedding of the query minus its names, the query's own (psql: still works).
        SELECT c.unit_id, c.score, c.rank FROM rcll.channel_entity(
            query => recall_channels.query, scope => recall_channels.scope,
            query_embedding => coalesce(recall_channels.entity_query_embedding, recall_channels.query_embedding),
            "limit" => recall_channels.channel_limit) c
        WHERE recall_channels.entity_weight > 0 AND rcll._runs_channel('entity', recall_channels.channels)
    )
    SELECT x.* FROM (
        SELECT 'dense'::text AS channel, d.unit_id, d.score, d.rank FROM d
        WHERE recall_channels.dense_weight > 0 AND rcll._runs_channel('dense', recall_channels.channels)
        UNION ALL SELECT 'context', ctx.unit_id, ctx.score, ctx.rank FROM ctx
        UNION ALL SELECT bm25.channel, bm25.unit_id, bm25.score, bm25.rank FROM bm25
        UNION ALL SELECT 'graph', g.unit_id, g.score, g.rank FROM g
        UNION ALL SELECT 'temporal', t.unit_id, t.score, t.rank FROM t
        UNION ALL SELECT 'entity', e.unit_id, e.score, e.rank FROM e) x
    -- checked once, before any channel runs: a misspelt name is an error, not an empty list
    WHERE rcll._known_channels(recall_channels.channels)
$$;
COMMENT ON FUNCTION rcll.recall_channels(text, rcll.recall_scope, vector, vector, tstzrange, timestamptz, integer, double precision, double precision, double precision, double precision, double precision, double precision, double precision, text[])
    IS 'Recall phase 2 without the fusion: each channel''s own ranked list (channel = dense, context, lexical, graph, temporal, entity or session; score and rank as that channel gives them), every channel filtered before ranking by scope (rcll.recall_scope). channels (NULL: all) names the ones to run, and a weight of 0 skips one too; the context channel runs only with context_weight > 0. rcll.fuse_candidates fuses the lists; rcll.recall_candidates is the two in one call. Clients run subsets on separate connections side by side and fuse afterwards. From psql: SELECT * FROM rcll.recall_channels(''deploy'', rcll.recall_scope(''fleet''), channels => ''{lexical,session}'').';


-- functions 150-recall-candidates.sql
-- Recall phase 3: the channels' lists fused by a per-query z-score sum; and phases 2-3 in one call.

CREATE OR REPLACE FUNCTION rcll.fuse_candidates(
    scope           rcll.recall_scope,
    channels        text[],
    unit_ids        bigint[],
    scores          double precision[],
    ranks           integer[],
    dense_weight    double precision DEFAULT 1.0,
    lexical_weight  double precision DEFAULT 1.0,
    graph_weight    double precision DEFAULT 1.0,
    temporal_weight double precision DEFAULT 1.0,
    entity_weight   double precision DEFAULT 1.0,
    session_weight  double precision DEFAULT 1.0,
    context_weight  double precision DEFAULT 0.0,
    "limit"         integer DEFAULT (rcll.recall_defaults()).candidate_limit)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer, context text)
LANGUAGE sql STABLE
AS $$
    WITH hits AS (
        -- One row per (channel, unit): rcll.recall_channels' rows, as four parallel arrays.
        SELECT h.channel AS ch, h.unit_id, h.score, h.rank,
               CASE h.channel WHEN 'dense' THEN fuse_candidates.dense_weight
                              WHEN 'lexical' THEN fuse_candidates.lexical_weight
                              WHEN 'graph' THEN fuse_candidates.graph_weight
                              WHEN 'temporal' THEN fuse_candidates.temporal_weight
                              WHEN 'entity' THEN fuse_candidates.entity_weight
                              WHEN 'session' THEN fuse_candidates.session_weight
                              WHEN 'context' THEN fuse_candidates.context_weight
                              -- a list under a name that is no channel is an error, not a list
                              -- silently dropped; only such a row evaluates this branch
                              ELSE CASE WHEN rcll._known_channels(ARRAY[h.channel]) THEN NULL::double precision END END AS w
        FROM unnest(fuse_candidates.channels, fuse_candidates.unit_ids, fuse_candidates.scores,
                    fuse_candidates.ranks) AS h(channel, unit_id, score, rank)
    ), z AS (
        -- Z-score sum (bench/locomo/RESEARCH.md, third round): each channel's scores standardised
        -- over the list it returned for this query, z = (score - mean) / sd (population sd); a
        -- unit a channel did not return counts that channel's lowest z; a channel with fewer than
        -- two hits or flat scores says nothing about order and adds nothing. No k, no fitted
        -- weight: the channel that is sure of something this time (its top far above its own
        -- distribution) decides more, and a channel with nothing to say (no date, no name in the
        -- query) is silent. The weights only scale a channel's z (default 1). Each channel's rows
        -- are read in rank order, so the fused scores do not depend on the order the lists arrived
        -- in (one call, or several side by side): every sum below sees its rows in that order.
        SELECT h.unit_id, h.rank, h.ch, h.w,
               CASE WHEN count(*) OVER c >= 2 AND stddev_pop(h.score) OVER c > 1e-12 * greatest(abs(avg(h.score) OVER c), 1)
                    THEN (h.score - avg(h.score) OVER c) / stddev_pop(h.score) OVER c END AS z
        FROM hits h
        WHERE h.w > 0
        WINDOW c AS (PARTITION BY h.ch ORDER BY h.rank, h.unit_id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
    ), zmin AS (
        SELECT z.ch, z.w, min(z.z) AS zmin FROM z WHERE z.z IS NOT NULL GROUP BY z.ch, z.w
    ), fused AS (
        -- fused = sum over channels of w * z, a missing unit at the channel's lowest z: the sum of
        -- every channel's w * zmin, plus w * (z - zmin) where the unit was found. A unit only a
        -- silent channel found keeps the base (it follows every unit a speaking channel found).
        SELECT z.unit_id,
               (SELECT coalesce(sum(m.w * m.zmin), 0) FROM zmin m)
                 + coalesce(sum(z.w * (z.z - m.zmin)) FILTER (WHERE z.z IS NOT NULL), 0) AS score,
               min(z.rank) FILTER (WHERE z.ch = 'dense') AS rd,
               min(z.rank) FILTER (WHERE z.ch = 'lexical') AS rl,
               min(z.rank) FILTER (WHERE z.ch = 'graph') AS rg,
               min(z.rank) FILTER (WHERE z.ch = 'temporal') AS rt,
               min(z.rank) FILTER (WHERE z.ch = 'context') AS rx,
               min(z.rank) FILTER (WHERE z.ch = 'entity') AS re,
               min(z.rank) FILTER (WHERE z.ch = 'session') AS rs
        FROM z LEFT JOIN zmin m ON m.ch = z.ch
        GROUP BY z.unit_id
        ORDER BY score DESC, z.unit_id
        LIMIT greatest(coalesce(fuse_candidates."limit", (rcll.recall_defaults()).candidate_limit), 0)
    ), kept AS (
        -- The scope is applied again to the units themselves: lists read on other connections
        -- (side by side) saw their own snapshot, so a unit moved out of scope, superseded or
        -- deleted since is dropped here, not returned (the answer is then one shorter). Within
        -- one call it drops nothing. After the limit: the wide rows are read for those units only.
        SELECT f.*, u.text, u.room, u.hall, u.layer, u.author, u.thread, u.tags, u.valid, u.occurred_start,
               u.mentioned_at, u.document_id, u.provenance
        FROM fused f JOIN rcll.memory_units u ON u.unit_id = f.unit_id
        WHERE rcll._in_scope(u, fuse_candidates.scope)
    )
    SELECT k.unit_id, k.text, k.room, k.hall, k.layer, k.author, k.thread, k.tags, k.valid, k.occurred_start,
           k.mentioned_at, k.document_id, k.provenance, k.score, k.rd, k.rl, k.rg, k.rt, k.rx, k.re, k.rs,
           -- the end of the chunk before: what this one answers or continues (16 words keep the
           -- cross-encoder's second view short; on LoCoMo the whole chunk scored no better)
           rcll._last_words(p.preceding_text, 16)
    FROM kept k
    LEFT JOIN rcll.preceding_units(
        unit_ids => (SELECT array_agg(kept.unit_id) FROM kept), scope => fuse_candidates.scope) p ON p.unit_id = k.unit_id
    ORDER BY k.score DESC, k.unit_id
$$;
COMMENT ON FUNCTION rcll.fuse_candidates(rcll.recall_scope, text[], bigint[], double precision[], integer[], double precision, double precision, double precision, double precision, double precision, double precision, double precision, integer)
    IS 'Recall phase 3: channel lists (rcll.recall_channels'' rows as the parallel arrays channels, unit_ids, scores, ranks) fused by a per-query z-score sum: each channel''s scores standardised over its own list, a unit it did not return at its lowest z, a channel with fewer than two hits or flat scores silent; fused_score = sum of weight * z (a weight of 0 drops a channel). Of the best "limit" units, those that pass scope now (a unit out of it is dropped, not replaced), each with its axes, the fused score, its rank in each channel (NULL = not found there) and context, the last 16 words of the chunk before it in its document when that chunk passes the same scope (the reranker''s second view). Lists read side by side on several connections fuse exactly as lists read in one call.';

CREATE OR REPLACE FUNCTION rcll.recall_candidates(
    query                  text,
    scope                  rcll.recall_scope,
    query_embedding        vector DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL,
    time_range             tstzrange DEFAULT NULL,
    reference_time         timestamptz DEFAULT now(),
    channel_limit          integer DEFAULT (rcll.recall_defaults()).channel_limit,
    dense_weight           double precision DEFAULT 1.0,
    lexical_weight         double precision DEFAULT 1.0,
    graph_weight           double precision DEFAULT 1.0,
    temporal_weight        double precision DEFAULT 1.0,
    entity_weight          double precision DEFAULT 1.0,
    session_weight         double precision DEFAULT 1.0,
    context_weight         double precision DEFAULT 0.0,
    "limit"                integer DEFAULT (rcll.recall_defaults()).candidate_limit)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer, context text)
LANGUAGE sql STABLE
AS $$
    -- Phase 2 then phase 3, in one statement: the channels one after another, then their fusion.
    SELECT f.*
    FROM (SELECT array_agg(c.channel) AS channels, array_agg(c.unit_id) AS unit_ids,
                 array_agg(c.score) AS scores, array_agg(c.rank) AS ranks
          FROM rcll.recall_channels(
              query => recall_candidates.query, scope => recall_candidates.scope,
              query_embedding => recall_candidates.query_embedding,
              entity_query_embedding => recall_candidates.entity_query_embedding,
              time_range => recall_candidates.time_range, reference_time => recall_candidates.reference_time,
              channel_limit => recall_candidates.channel_limit, dense_weight => recall_candidates.dense_weight,
              lexical_weight => recall_candidates.lexical_weight, graph_weight => recall_candidates.graph_weight,
              temporal_weight => recall_candidates.temporal_weight, entity_weight => recall_candidates.entity_weight,
              session_weight => recall_candidates.session_weight, context_weight => recall_candidates.context_weight) c) h
    CROSS JOIN LATERAL rcll.fuse_candidates(
        scope => recall_candidates.scope, channels => h.channels, unit_ids => h.unit_ids, scores => h.scores,
        ranks => h.ranks, dense_weight => recall_candidates.dense_weight,
        lexical_weight => recall_candidates.lexical_weight, graph_weight => recall_candidates.graph_weight,
        temporal_weight => recall_candidates.temporal_weight, entity_weight => recall_candidates.entity_weight,
        session_weight => recall_candidates.session_weight, context_weight => recall_candidates.context_weight,
        "limit" => recall_candidates."limit") f
    ORDER BY f.fused_score DESC, f.unit_id
$$;
COMMENT ON FUNCTION rcll.recall_candidates(text, rcll.recall_scope, vector, vector, tstzrange, timestamptz, integer, double precision, double precision, double precision, double precision, double precision, double precision, double precision, integer)
    IS 'Recall without the rerank: the dense, lexical, graph, temporal, entity (who: units linked to an entity the query names, ranked by entity_query_embedding - the query without its names, rcll.query_without_entities - else query_embedding) and session (where: documents by BM25 over their whole text) channels, each at most channel_limit units, all filtered before ranking, fused by a per-query z-score sum: each channel''s scores standardised over its own list, a unit it did not return at its lowest z, a channel with fewer than two hits or flat scores silent; fused_score = sum of weight * z. The context channel (dense hits read with the chunk before them) runs only with context_weight > 0. Each row: the unit, its axes, the fused score, its rank in each channel (NULL = not found there) and context, the last 16 words of the chunk before it in its document when that chunk passes the same scope (the reranker''s second view). What it may read is one value, scope (rcll.recall_scope: bank, rooms, authors, filters), built once by the caller and passed to every channel; a weight of 0 skips a channel. Without query_embedding the dense channel is skipped (NOTICE). From psql: SELECT * FROM rcll.recall_candidates(''deploy'', rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';


-- functions 160-recall.sql
-- Recall, all five phases from SQL: embed, four channels + fusion, cross-encoder rerank, token-budget cut.

CREATE OR REPLACE FUNCTION rcll._recall_embedding(query text, query_embedding vector)
RETURNS vector
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- Phase 1: embed the query here when the models live in the database.
    IF NOT rcll.in_database_models() THEN
        RAISE NOTICE 'recall: in-database models are not enabled: %',
            CASE WHEN _recall_embedding.query_embedding IS NULL THEN 'the dense channel and the rerank are skipped'
                 ELSE 'the rerank is skipped' END
            USING HINT = CASE WHEN EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u')
                              THEN 'A superuser can run SELECT rcll.enable_in_database_models(ARRAY[''<venv>/lib/python3.11/site-packages'', ''<repo>/python'']).'
                              ELSE 'This server has no plpython3u: recall through the rcll client, which embeds and reranks outside the database.' END;
        RETURN _recall_embedding.query_embedding;
    END IF;
    -- COALESCE evaluates its second argument only when the first is NULL: a given embedding is never recomputed.
    RETURN coalesce(_recall_embedding.query_embedding, rcll._model_embed_query(_recall_embedding.query));
END
$$;
COMMENT ON FUNCTION rcll._recall_embedding(text, vector)
    IS 'Internal: rcll.recall''s phase 1 - the query embedding to use: the one given, else (with in-database models) the query embedded here; without in-database models a NOTICE says what recall skips.';

CREATE OR REPLACE FUNCTION rcll._recall_entity_embedding(query text, bank_id integer, entity_query_embedding vector)
RETURNS vector
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    rest text;
BEGIN
    -- The entity channel's query: the one given, else (with in-database models) the query without
    -- the entities it names embedded here, else NULL (recall_candidates then uses the query's).
    IF _recall_entity_embedding.entity_query_embedding IS NOT NULL OR NOT rcll.in_database_models() THEN
        RETURN _recall_entity_embedding.entity_query_embedding;
    END IF;
    rest := rcll._query_without_entities(_recall_entity_embedding.query, _recall_entity_embedding.bank_id);
    RETURN CASE WHEN rest IS NULL THEN NULL ELSE rcll._model_embed_query(rest) END;
END
$$;
COMMENT ON FUNCTION rcll._recall_entity_embedding(text, integer, vector)
    IS 'Internal: rcll.recall''s second query embedding, for the entity channel: the one given, else with in-database models the embedding of rcll.query_without_entities (NULL when the query names no entity), else NULL.';

CREATE OR REPLACE FUNCTION rcll._recall_rerank(
    query         text,
    texts         text[],
    contexts      text[],
    "limit"       integer,
    rerank_depth  integer,
    context_depth integer,
    budget        integer,
    deadline_ms   integer DEFAULT NULL)
RETURNS TABLE (candidate integer, rerank_score real, tokens integer, ordinal integer)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    models boolean := rcll.in_database_models();
    depth  integer := greatest(coalesce(_recall_rerank.rerank_depth, 0), 0);
    lim    integer := greatest(coalesce(_recall_rerank."limit", (rcll.recall_defaults()).candidate_limit), 0);
    scores real[];
    second real[];
    head   integer[];
    top    integer[];
    views  text[];
    toks   integer[];
    ord    integer[];
    keep   integer[] := '{}';
    used   bigint := 0;
    n      integer;
    ms     double precision := _recall_rerank.deadline_ms;
BEGIN
    IF texts IS NULL THEN
        RETURN;
    END IF;
    -- Phase 4: the cross-encoder reads the top `depth` candidates with the query; the top
    -- context_depth of its order are read again with the chunk before them ("<previous> / <text>")
    -- and scored by the mean of both logits (as rcll.recall.rerank in Python). Reranked
    -- candidates move to the front in that order, the rest keep their fused order behind them.
    -- With deadline_ms (counted from the start of the statement) both views read in fused order
    -- while time is left (rcll._model_rerank_until); what is not read keeps its fused order.
    IF models AND depth > 0 THEN
        depth := least(depth, cardinality(texts));
        scores := CASE WHEN ms IS NULL THEN rcll._model_rerank(_recall_rerank.query, texts[1:depth])
                       ELSE rcll._model_rerank_until(_recall_rerank.query, texts[1:depth], ms, extract(epoch FROM statement_timestamp())) END;
        SELECT (array_agg(o.i ORDER BY scores[o.i] DESC, o.i))[1:greatest(coalesce(_recall_rerank.context_depth, 0), 0)]
        INTO head FROM generate_subscripts(scores, 1) AS o(i);
        SELECT array_agg(t.i ORDER BY t.pos), array_agg(contexts[t.i] || ' / ' || texts[t.i] ORDER BY t.pos)
        INTO top, views
        FROM unnest(head) WITH ORDINALITY AS t(i, pos) WHERE contexts[t.i] <> '';
        IF coalesce(cardinality(scores), 0) < depth THEN
            head := NULL;                        -- the deadline cut the first view: no second one
            RAISE NOTICE 'recall: the deadline (% ms) cut the rerank at depth % of %', ms, coalesce(cardinality(scores), 0), depth;
        ELSIF views IS NOT NULL THEN
            second := CASE WHEN ms IS NULL THEN rcll._model_rerank(_recall_rerank.query, views)
                           ELSE rcll._model_rerank_until(_recall_rerank.query, views, ms, extract(epoch FROM statement_timestamp())) END;
            FOR n IN 1 .. coalesce(cardinality(second), 0) LOOP
                scores[top[n]] := (scores[top[n]] + second[n]) / 2;
            END LOOP;
            IF coalesce(cardinality(second), 0) < cardinality(top) THEN
                -- Cut in the second view: the head read twice ends before the first unread one.
                head := head[1 : array_position(head, top[coalesce(cardinality(second), 0) + 1]) - 1];
                RAISE NOTICE 'recall: the deadline (% ms) cut the context view at % of % candidates', ms,
                    coalesce(cardinality(head), 0), greatest(coalesce(_recall_rerank.context_depth, 0), 0);
            END IF;
        END IF;
    END IF;
    -- Order: the context-read head by its mean score, the rest of the reranked ones by theirs,
    -- then the unreranked candidates in fused order.
    SELECT array_agg(o.i ORDER BY o.i > cardinality(coalesce(scores, '{}')), NOT (o.i = ANY (coalesce(head, '{}'))),
                     scores[o.i] DESC NULLS LAST, o.i) INTO ord
    FROM generate_subscripts(texts, 1) AS o(i);

    -- Phase 5: fill the token budget (fact text only): a fact that does not fit is skipped and
    -- the next, shorter one may still fit.
    IF models THEN
        toks := rcll._model_count_tokens(texts);
    ELSE
        toks := rcll._approx_tokens(texts);
    END IF;
    FOREACH n IN ARRAY ord LOOP
        EXIT WHEN cardinality(keep) >= lim;
        CONTINUE WHEN _recall_rerank.budget IS NOT NULL AND used + toks[n] > _recall_rerank.budget;
        keep := keep || n;
        used := used + toks[n];
    END LOOP;

    RETURN QUERY
    SELECT x.i::integer, scores[x.i], toks[x.i], x.pos::integer
    FROM unnest(keep) WITH ORDINALITY AS x(i, pos)
    ORDER BY x.pos;
END
$$;
COMMENT ON FUNCTION rcll._recall_rerank(text, text[], text[], integer, integer, integer, integer, integer)
    IS 'Internal: rcll.recall''s phases 4-5 over its candidates in fused order (texts and the context before each): the in-database cross-encoder rerank of the top rerank_depth (the top context_depth of its order read again with their context; with deadline_ms, only while the statement is younger than that), then the cut to "limit" facts and budget tokens. Returns the kept candidates'' positions (candidate, 1-based) in final order, with their rerank scores and token counts.';

CREATE OR REPLACE FUNCTION rcll.recall(
    query           text,
    scope           rcll.recall_scope,
    budget          integer DEFAULT (rcll.recall_defaults()).budget,
    rerank_depth    integer DEFAULT (rcll.recall_defaults()).rerank_depth,
    context_depth   integer DEFAULT (rcll.recall_defaults()).context_depth,
    "limit"         integer DEFAULT (rcll.recall_defaults()).candidate_limit,
    query_embedding vector DEFAULT NULL,
    time_range      tstzrange DEFAULT NULL,
    reference_time  timestamptz DEFAULT now(),
    deadline_ms     integer DEFAULT NULL,
    entity_query_embedding vector DEFAULT NULL)
RETURNS TABLE (unit_id bigint, text text, room text, hall text, layer text, author text, thread text,
               tags text[], valid tstzrange, occurred_start timestamptz, mentioned_at timestamptz,
               document_id bigint, provenance jsonb, fused_score double precision, rerank_score real,
               rank_dense integer, rank_lexical integer, rank_graph integer, rank_temporal integer,
               rank_context integer, rank_entity integer, rank_session integer)
LANGUAGE sql STABLE
AS $$
    -- SQL, not PL/pgSQL: the output column thread would shadow the scope's rows in PL/pgSQL. Phase 1
    -- (rcll._recall_embedding), phases 2-3 (rcll.recall_candidates: enough candidates for the
    -- rerank and the final list), phases 4-5 (rcll._recall_rerank) over the candidates in fused order.
    WITH c AS MATERIALIZED (
        SELECT * FROM rcll.recall_candidates(
            query => recall.query, scope => recall.scope,
            query_embedding => rcll._recall_embedding(recall.query, recall.query_embedding),
            entity_query_embedding => rcll._recall_entity_embedding(recall.query, (recall.scope).bank_id,
                                                                    recall.entity_query_embedding),
            time_range => recall.time_range, reference_time => recall.reference_time,
            "limit" => greatest(greatest(coalesce(recall."limit", (rcll.recall_defaults()).candidate_limit), 0),
                                greatest(coalesce(recall.rerank_depth, 0), 0))) WITH ORDINALITY AS c
    )
    SELECT c.unit_id, c.text, c.room, c.hall, c.layer, c.author, c.thread, c.tags, c.valid, c.occurred_start,
           c.mentioned_at, c.document_id, c.provenance, c.fused_score, r.rerank_score, c.rank_dense,
           c.rank_lexical, c.rank_graph, c.rank_temporal, c.rank_context, c.rank_entity, c.rank_session
    FROM rcll._recall_rerank(
        query => recall.query,
        texts => (SELECT array_agg(c.text ORDER BY c.ordinality) FROM c),
        contexts => (SELECT array_agg(c.context ORDER BY c.ordinality) FROM c),
        "limit" => recall."limit", rerank_depth => recall.rerank_depth,
        context_depth => recall.context_depth, budget => recall.budget, deadline_ms => recall.deadline_ms) r
    JOIN c ON c.ordinality = r.candidate
    ORDER BY r.ordinal
$$;
COMMENT ON FUNCTION rcll.recall(text, rcll.recall_scope, integer, integer, integer, integer, vector, tstzrange, timestamptz, integer, vector)
    IS 'Recall from SQL: rcll.recall_candidates over the scope (rcll.recall_scope: bank, rooms, authors, filters), then the cross-encoder rerank of the top rerank_depth candidates (the top context_depth of its order read again with the chunk before them, by the mean of both scores), then the cut to "limit" facts and budget tokens of fact text (skipping facts that do not fit). Fusion runs with rcll.recall_candidates'' defaults: tuning it (channel_limit, the channel weights) is rcll.recall_candidates'' job. With in-database models (rcll.enable_in_database_models) the query (and, for the entity channel, the query without the entities it names) is embedded and reranked here; without them pass query_embedding (and entity_query_embedding, the embedding of rcll.query_without_entities; else the entity channel ranks by query_embedding), and the rerank is skipped (NOTICE). deadline_ms (default none) is a latency budget from the start of the statement: the cross-encoder reads candidates in fused order while time is left, the rest keep their fused order (rerank_score NULL), and a NOTICE says where the deadline cut it. Never writes. From psql: SELECT text FROM rcll.recall(''how do we deploy?'', rcll.recall_scope(''fleet'', rooms => ''{deployment}'')).';


-- functions 170-in-database-models.sql
-- In-database models: query embedding, cross-encoder rerank and token counts inside PostgreSQL (plpython3u).

CREATE OR REPLACE FUNCTION rcll.in_database_models()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT to_regprocedure('rcll._model_embed_query(text)') IS NOT NULL
       AND to_regprocedure('rcll._model_rerank(text,text[])') IS NOT NULL
       AND to_regprocedure('rcll._model_count_tokens(text[])') IS NOT NULL
$$;
COMMENT ON FUNCTION rcll.in_database_models() IS 'Whether rcll.enable_in_database_models() has been run here: rcll.recall then embeds the query, reranks and counts tokens inside the database.';

CREATE OR REPLACE FUNCTION rcll.enable_in_database_models(python_path text[] DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    paths text[] := coalesce(python_path,
                             string_to_array(nullif(current_setting('rcll.python_path', true), ''), ':'));
    -- Every function puts the configured directories first on sys.path (so the server's own
    -- dist-packages cannot shadow the venv's numpy) and keeps the loaded module in GD: the
    -- models load once per backend (~0.2 s) and answer in milliseconds after.
    prelude text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u') THEN
        RAISE EXCEPTION 'plpython3u: this server has no plpython3u, so models cannot run inside it'
            USING ERRCODE = '0A000',
            HINT = 'Install the server''s plpython3 package (Debian: postgresql-plpython3-NN), or keep embedding and reranking in the client: pass query_embedding to rcll.recall_candidates (the rcll Python client does).';
    END IF;
    IF paths IS NULL OR cardinality(paths) = 0 THEN
        RAISE EXCEPTION 'python_path: no directories given' USING ERRCODE = '22023',
            HINT = 'Pass the venv''s site-packages and the directory holding the rcll package, readable by the server''s OS user: SELECT rcll.enable_in_database_models(ARRAY[''/srv/rcll/.venv/lib/python3.11/site-packages'', ''/srv/rcll/python'']), or set rcll.python_path (colon-separated) with ALTER DATABASE ... SET.';
    END IF;
    EXECUTE 'CREATE EXTENSION IF NOT EXISTS plpython3u';
    prelude := format($py$
m = GD.get("rcll.models")
if m is None:
    import sys
    for p in reversed(%s):
        if p in sys.path:
            sys.path.remove(p)
        sys.path.insert(0, p)
    from rcll import models as m
    GD["rcll.models"] = m
$py$, to_json(paths)::text);

    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_embed_query(query text) RETURNS public.vector
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
v = m.get_embedder().embed_query(query)
return "[" + ",".join(repr(float(x)) for x in v) + "]"
$py$);
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_rerank(query text, passages text[]) RETURNS real[]
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
if not passages:
    return []
return [float(x) for x in m.get_reranker().score(query, list(passages))]
$py$);
    -- Recall's deadline (rcll._recall_rerank): the client's reader (rcll.deadline.read_prefix),
    -- so both legs batch and stop alike; its running cost per token lives in this backend.
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_rerank_until(query text, passages text[], deadline_ms double precision,
                                                    started double precision) RETURNS real[]
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
import time
from rcll.deadline import Deadline, read_prefix
since = time.time() - started        # the statement's age: the deadline counts from its start
return read_prefix(query, list(passages), m.get_reranker(), Deadline(deadline_ms, time.perf_counter() - since))
$py$);
    EXECUTE format($sql$
CREATE OR REPLACE FUNCTION rcll._model_count_tokens(texts text[]) RETURNS integer[]
LANGUAGE plpython3u STABLE STRICT SET search_path = pg_catalog, pg_temp AS %L$sql$,
        prelude || $py$
return m.count_tokens(list(texts)) if texts else []
$py$);
    COMMENT ON FUNCTION rcll._model_embed_query(text) IS 'Internal (created by rcll.enable_in_database_models): the bge-small-en-v1.5 embedding of a query, computed in this backend.';
    COMMENT ON FUNCTION rcll._model_rerank(text, text[]) IS 'Internal (created by rcll.enable_in_database_models): cross-encoder logits of (query, passage) pairs, in input order.';
    COMMENT ON FUNCTION rcll._model_rerank_until(text, text[], double precision, double precision) IS 'Internal (created by rcll.enable_in_database_models): cross-encoder logits of the passages read in order while the statement that started at `started` (epoch seconds) is younger than deadline_ms - the prefix read, shorter than passages when the deadline cut it.';
    COMMENT ON FUNCTION rcll._model_count_tokens(text[]) IS 'Internal (created by rcll.enable_in_database_models): bge wordpiece tokens per text (for the token budget).';
    -- Fail now, with the reason, rather than at the first recall.
    EXECUTE 'SELECT rcll._model_count_tokens(ARRAY[''ok''])';
    RETURN format('in-database models enabled (python path: %s)', array_to_string(paths, ':'));
END
$fn$;
COMMENT ON FUNCTION rcll.enable_in_database_models(text[]) IS 'Let rcll.recall run all five phases inside the database: creates plpython3u and the model functions, importing rcll.models from python_path (default: the rcll.python_path setting, colon-separated). Needs a superuser and a server with plpython3u; the directories must be readable by the server''s OS user.';

CREATE OR REPLACE FUNCTION rcll.disable_in_database_models()
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    DROP FUNCTION IF EXISTS rcll._model_embed_query(text);
    DROP FUNCTION IF EXISTS rcll._model_rerank(text, text[]);
    DROP FUNCTION IF EXISTS rcll._model_rerank_until(text, text[], double precision, double precision);
    DROP FUNCTION IF EXISTS rcll._model_count_tokens(text[]);
    RETURN 'in-database models disabled';
END
$$;
COMMENT ON FUNCTION rcll.disable_in_database_models() IS 'Drop the in-database model functions; rcll.recall then needs query_embedding and skips the rerank.';

CREATE OR REPLACE FUNCTION rcll._approx_tokens(texts text[])
RETURNS integer[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- Without the tokenizer: about one token per four characters of English (rounded up).
    SELECT coalesce(array_agg(greatest(1, ceil(char_length(coalesce(t, '')) / 4.0))::integer ORDER BY i), '{}')
    FROM unnest(texts) WITH ORDINALITY AS x(t, i)
$$;
COMMENT ON FUNCTION rcll._approx_tokens(text[]) IS 'Internal: token counts estimated as characters / 4, used for the budget when the tokenizer is not in the database.';


-- functions 200-entities.sql
-- Entity resolution on the write path: exact spelling, known alias, trigram, then embedding.
-- pgvector and pg_trgm are installed in schema public (install.py and CREATE EXTENSION ... CASCADE
-- both put them there), so their operators are named OPERATOR(public.<=>) / public.similarity().

CREATE OR REPLACE FUNCTION rcll._entity_key(name text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- lower-cased, whitespace folded, leading "@" and surrounding punctuation dropped:
    -- "  Argo  CD." and "argo cd" are one key; "@alice" and "Alice" are one key.
    SELECT nullif(btrim(regexp_replace(regexp_replace(lower(name), '\s+', ' ', 'g'),
                                       '^[[:punct:][:space:]]+|[[:punct:][:space:]]+$', '', 'g')), '')
$$;
COMMENT ON FUNCTION rcll._entity_key(text) IS 'Internal: the lookup key of an entity spelling (lower-cased, whitespace folded, surrounding punctuation and @ dropped); entity_aliases.alias holds these keys.';

CREATE OR REPLACE FUNCTION rcll._types_compatible(a text, b text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a IS NULL OR b IS NULL OR lower(a) = lower(b)
$$;
COMMENT ON FUNCTION rcll._types_compatible(text, text) IS 'Internal: two entity types may name one entity (equal, or either unknown).';

CREATE OR REPLACE FUNCTION rcll._resolve_entity(
    bank_id     integer,
    name        text,
    entity_type text DEFAULT NULL,
    embedding   vector DEFAULT NULL,
    aliases     text[] DEFAULT '{}',
    trigram_threshold real DEFAULT 0.55,
    embedding_threshold real DEFAULT 0.92,
    OUT entity_id bigint,
    OUT matched_by text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := _resolve_entity.bank_id;
    key text := rcll._entity_key(_resolve_entity.name);
    keys text[];
    score real;
    display text := btrim(regexp_replace(ltrim(_resolve_entity.name, '@'), '\s+', ' ', 'g'));
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'name: entity name is empty' USING ERRCODE = '22023',
            HINT = 'Drop entities without a name before resolving.';
    END IF;
    SELECT array_agg(DISTINCT k) INTO keys
    FROM unnest(coalesce(_resolve_entity.aliases, '{}') || ARRAY[_resolve_entity.name]) AS s(spelling),
         LATERAL rcll._entity_key(s.spelling) AS k
    WHERE k IS NOT NULL;

    -- 1. exact spelling, 2. any spelling the extractor says is the same entity
    SELECT a.entity_id, CASE WHEN a.alias = key THEN 'exact' ELSE 'alias' END
      INTO entity_id, matched_by
    FROM rcll.entity_aliases a
    WHERE a.bank_id = b AND a.alias = ANY (keys)
    ORDER BY (a.alias = key) DESC, a.entity_id
    LIMIT 1;

    -- 3. trigram similarity against every known spelling (names of a few characters are too short
    -- for trigrams to mean anything)
    IF entity_id IS NULL AND length(key) >= 4 THEN
        SELECT a.entity_id, public.similarity(a.alias, key) INTO entity_id, score
        FROM rcll.entity_aliases a JOIN rcll.entities e ON e.entity_id = a.entity_id
        WHERE a.bank_id = b AND a.alias OPERATOR(public.%) key
          AND rcll._types_compatible(e.entity_type, _resolve_entity.entity_type)
          AND public.similarity(a.alias, key) >= trigram_threshold
        ORDER BY public.similarity(a.alias, key) DESC, a.entity_id
        LIMIT 1;
        IF entity_id IS NOT NULL THEN
            matched_by := 'trigram';
        END IF;
    END IF;

    -- 4. embedding of the name, against the canonical names' embeddings
    IF entity_id IS NULL AND _resolve_entity.embedding IS NOT NULL THEN
        SELECT e.entity_id, (1 - (e.embedding OPERATOR(public.<=>) _resolve_entity.embedding))::real
          INTO entity_id, score
        FROM rcll.entities e
        WHERE e.bank_id = b AND e.embedding IS NOT NULL
          AND rcll._types_compatible(e.entity_type, _resolve_entity.entity_type)
        ORDER BY e.embedding OPERATOR(public.<=>) _resolve_entity.embedding, e.entity_id
        LIMIT 1;
        IF entity_id IS NOT NULL AND score >= embedding_threshold THEN
            matched_by := 'embedding';
        ELSE
            entity_id := NULL;
        END IF;
    END IF;

    IF entity_id IS NULL THEN
        INSERT INTO rcll.entities AS e (bank_id, name, entity_type, embedding)
        VALUES (b, display, _resolve_entity.entity_type, _resolve_entity.embedding)
        ON CONFLICT ON CONSTRAINT entities_bank_id_name_key DO UPDATE SET name = EXCLUDED.name
        RETURNING e.entity_id INTO entity_id;
        matched_by := 'new';
    ELSIF _resolve_entity.entity_type IS NOT NULL THEN
        UPDATE rcll.entities e SET entity_type = _resolve_entity.entity_type
        WHERE e.entity_id = _resolve_entity.entity_id AND e.entity_type IS NULL;
    END IF;

    -- every spelling seen becomes an alias of the entity (the first owner of a spelling keeps it)
    INSERT INTO rcll.entity_aliases AS a (bank_id, alias, entity_id, source)
    SELECT b, k, entity_id, CASE WHEN matched_by IN ('trigram', 'embedding') AND k = key THEN 'resolver' ELSE 'extractor' END
    FROM unnest(keys) AS k
    ON CONFLICT ON CONSTRAINT entity_aliases_pkey DO NOTHING;
END
$$;
COMMENT ON FUNCTION rcll._resolve_entity(integer, text, text, vector, text[], real, real)
    IS 'Internal: resolve an entity mention to an entity of the bank - by exact spelling, by an alias the extractor gave, by trigram similarity (pg_trgm) of the spelling, then by embedding of the name - creating it if nothing matches. Every spelling seen is recorded in entity_aliases, so two spellings of one name become one entity with aliases. Returns the entity and how it was matched (exact, alias, trigram, embedding, new).';

CREATE OR REPLACE FUNCTION rcll.resolve_entity(bank text, name text, entity_type text DEFAULT NULL,
                                               embedding vector DEFAULT NULL, aliases text[] DEFAULT '{}')
RETURNS TABLE (entity_id bigint, canonical_name text, matched_by text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r record;
BEGIN
    r := rcll._resolve_entity(rcll._bank_id(bank), name, entity_type, embedding, aliases);
    RETURN QUERY SELECT e.entity_id, e.name, r.matched_by FROM rcll.entities e WHERE e.entity_id = r.entity_id;
END
$$;
COMMENT ON FUNCTION rcll.resolve_entity(text, text, text, vector, text[])
    IS 'Resolve (or create) an entity of a bank by name: exact spelling, alias, trigram, embedding. Returns the entity id, its canonical name and how it matched.';

CREATE OR REPLACE FUNCTION rcll._known_entities(bank_id integer, text text)
RETURNS TABLE (entity_id bigint, alias text)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- known spellings of at least 3 characters that occur in the text as whole words
    SELECT DISTINCT ON (a.entity_id) a.entity_id, a.alias
    FROM rcll.entity_aliases a
    WHERE a.bank_id = _known_entities.bank_id AND length(a.alias) >= 3
      AND strpos(lower(_known_entities.text), a.alias) > 0
      AND lower(_known_entities.text) ~ ('(^|[^[:alnum:]_])' || regexp_replace(a.alias, '([.^$*+?()\[\]{}|\\-])', '\\\1', 'g') || '($|[^[:alnum:]_])')
    ORDER BY a.entity_id, length(a.alias) DESC
$$;
COMMENT ON FUNCTION rcll._known_entities(integer, text) IS 'Internal: entities of the bank one of whose known spellings occurs in the text as a whole word (the offline extractor''s known-entity lookup).';


-- functions 205-keyless-entities.sql
-- Keyless entities: who said a chunk and which names it writes, linked at retain with no model.
--
-- Chunk mode has no extractor, yet recall needs to know *who* a unit is about: on LoCoMo almost
-- every question names a speaker (bench/locomo/RESEARCH.md, third round). A chunk is linked to
-- (a) its speaker - a leading "Name:" of its text (after an optional "[date]"), else its author -
-- and (b) every word it writes capitalised away from a sentence start (stop words and one-letter
-- words excepted): names, places, titles. The links go into the same entities / entity_aliases /
-- unit_entities tables the offline extractor writes, with role 'speaker' or 'name', and the
-- entity channel (sql/functions/125-channel-entity.sql) reads them.

CREATE OR REPLACE FUNCTION rcll._keyless_mentions(text text, author text, config regconfig DEFAULT 'english')
RETURNS TABLE (name text, role text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    WITH p AS (
        -- "[<date>] <Speaker>: <body>": the speaker is one to three capitalised words before a colon.
        SELECT r.m[2] AS speaker,
               CASE WHEN r.m IS NULL THEN coalesce(_keyless_mentions.text, '')
                    ELSE substr(_keyless_mentions.text, length(r.m[1]) + 1) END AS body
        FROM (SELECT regexp_match(coalesce(_keyless_mentions.text, ''),
                  '^(\s*(?:\[[^]]*\]\s*)?([[:upper:]][[:alnum:]_.''-]*(?: [[:upper:]][[:alnum:]_.''-]*){0,2})\s*:)(?:\s|$)') AS m) r
    ), tokens AS (
        SELECT t.tok, t.i, lag(t.tok) OVER (ORDER BY t.i) AS prev
        FROM p, regexp_split_to_table(btrim(p.body), '\s+') WITH ORDINALITY AS t(tok, i)
    ), words AS (
        -- A word is capitalised "away from a sentence start" when it is not the body's first
        -- token, the token before it does not end a sentence (. ! ? :) and it opens no
        -- parenthesis, quote or bracket. Possessives are cut at the apostrophe.
        SELECT split_part((regexp_match(k.tok, '^[^[:alpha:]]*([[:alpha:]][[:alpha:]''’-]*)'))[1], '''', 1) AS w,
               k.prev IS NULL OR k.prev ~ '[.!?:]["'')\]’”]*$' OR k.tok ~ '^[("\[/“‘]' AS starts
        FROM tokens k
    )
    SELECT DISTINCT ON (lower(s.name)) s.name, s.role FROM (
        SELECT coalesce(p.speaker, nullif(btrim(_keyless_mentions.author), '')) AS name, 'speaker' AS role, 0 AS o FROM p
        UNION ALL
        SELECT split_part(w.w, '’', 1), 'name', 1 FROM words w
        WHERE w.w ~ '^[[:upper:]]' AND NOT w.starts AND length(split_part(w.w, '’', 1)) > 1
          AND length(to_tsvector(_keyless_mentions.config, split_part(w.w, '’', 1))) > 0
    ) s
    WHERE s.name IS NOT NULL AND rcll._entity_key(s.name) IS NOT NULL
    ORDER BY lower(s.name), s.o
$$;
COMMENT ON FUNCTION rcll._keyless_mentions(text, text, regconfig)
    IS 'Internal: the keyless entities of a chunk - its speaker (a leading "Name:" after an optional "[date]", else the author; role speaker) and the words it writes capitalised away from a sentence start, stop words (under config) and one-letter words excepted (role name). One row per entity key.';

CREATE OR REPLACE FUNCTION rcll._link_keyless_entities(bank_id integer, unit_ids bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
-- Invoker, and not executable by PUBLIC (below): it writes any bank's entities. Agents reach it
-- only through rcll._link_written_keyless_entities, for the units their own transaction wrote.
AS $$
DECLARE
    b      integer := _link_keyless_entities.bank_id;
    cfg    regconfig;
    m      record;
    eid    bigint;
    linked integer := 0;
    touched bigint[] := '{}';
    n      integer;
BEGIN
    SELECT x.text_search_config INTO cfg FROM rcll.banks x WHERE x.bank_id = b;
    -- One lookup or insert per distinct spelling (exact key only: no trigram or embedding
    -- resolution, which could merge two people whose names look alike).
    FOR m IN
        SELECT rcll._entity_key(k.name) AS key, min(k.name) AS name,
               array_agg(k.unit_id) AS units, array_agg(k.role) AS roles
        FROM (SELECT u.unit_id, x.name, x.role
              FROM rcll.memory_units u, LATERAL rcll._keyless_mentions(u.text, u.author, cfg) x
              WHERE u.unit_id = ANY (_link_keyless_entities.unit_ids) AND u.bank_id = b) k
        GROUP BY 1
    LOOP
        SELECT a.entity_id INTO eid FROM rcll.entity_aliases a WHERE a.bank_id = b AND a.alias = m.key;
        IF eid IS NULL THEN
            INSERT INTO rcll.entities AS e (bank_id, name)
            VALUES (b, btrim(m.name))
            ON CONFLICT ON CONSTRAINT entities_bank_id_name_key DO UPDATE SET name = EXCLUDED.name
            RETURNING e.entity_id INTO eid;
            INSERT INTO rcll.entity_aliases AS a (bank_id, alias, entity_id, source)
            VALUES (b, m.key, eid, 'extractor')
            ON CONFLICT ON CONSTRAINT entity_aliases_pkey DO NOTHING;
        END IF;
        INSERT INTO rcll.unit_entities AS ue (unit_id, entity_id, bank_id, role)
        SELECT x.unit_id, eid, b, x.role FROM unnest(m.units, m.roles) AS x(unit_id, role)
        ON CONFLICT ON CONSTRAINT unit_entities_pkey DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        linked := linked + n;
        touched := touched || eid;
    END LOOP;
    UPDATE rcll.entities e
    SET mention_count = (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.entity_id = e.entity_id)
    WHERE e.entity_id = ANY (touched);
    RETURN linked;
END
$$;
COMMENT ON FUNCTION rcll._link_keyless_entities(integer, bigint[])
    IS 'Internal: link the given units of a bank to their keyless entities (rcll._keyless_mentions: speaker, capitalised names), creating entities and aliases by exact spelling key. Returns the number of new links. Not executable by PUBLIC: writers reach it through rcll._link_written_keyless_entities; the backfill rcll.link_keyless_entities is for the owner.';
REVOKE EXECUTE ON FUNCTION rcll._link_keyless_entities(integer, bigint[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll._link_written_keyless_entities(bank_id integer, unit_ids bigint[])
RETURNS integer
LANGUAGE sql VOLATILE
-- Definer: agents' roles may insert units but not update entities; the links are the owner's
-- bookkeeping, derived from the units' own text (as the lexical copy and room counts are). Only
-- units this very transaction wrote (created_at = now(), the transaction's start) are linked, so
-- a caller cannot reach another bank's units by passing their ids: under bank isolation it could
-- not have written them.
SECURITY DEFINER
AS $$
    SELECT rcll._link_keyless_entities(_link_written_keyless_entities.bank_id, ARRAY(
        SELECT u.unit_id FROM rcll.memory_units u
        WHERE u.unit_id = ANY (_link_written_keyless_entities.unit_ids)
          AND u.bank_id = _link_written_keyless_entities.bank_id
          AND u.created_at = now()))
$$;
COMMENT ON FUNCTION rcll._link_written_keyless_entities(integer, bigint[])
    IS 'Internal: rcll._link_keyless_entities for the units of a bank that the calling transaction wrote (created_at = now()); others are ignored. rcll.retain_chunks calls it for every chunk it writes.';

CREATE OR REPLACE FUNCTION rcll.link_keyless_entities(bank text)
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._link_keyless_entities(b.id, ARRAY(
        SELECT u.unit_id FROM rcll.memory_units u WHERE u.bank_id = b.id AND u.kind = 'chunk' ORDER BY u.unit_id))
    FROM (SELECT rcll._bank_id(link_keyless_entities.bank) AS id) b
$$;
COMMENT ON FUNCTION rcll.link_keyless_entities(text)
    IS 'Backfill, for the schema owner: link every chunk of a bank to its keyless entities (speaker, capitalised names), as rcll.retain_chunks does for new chunks. Re-runnable (existing links are kept). Returns the number of new links. For a store written before the entity channel: SELECT rcll.link_keyless_entities(''fleet'').';


-- functions 210-links.sql
-- Links made on the write path for newly written units: entity, temporal adjacency, semantic
-- neighbours. Symmetric link types are stored in both directions, so a graph walk can follow
-- from_unit -> to_unit alone. Fan-out is capped per unit so hub entities do not explode the table.

CREATE OR REPLACE FUNCTION rcll._link_units(
    bank_id      integer,
    unit_ids     bigint[],
    entity_fanout integer DEFAULT 20,
    semantic_k   integer DEFAULT 5,
    semantic_min real DEFAULT 0.80,
    temporal_window interval DEFAULT '7 days',
    horizon      bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := _link_units.bank_id;
    n integer := 0;
    k integer;
BEGIN
    -- entity: units sharing an entity, most shared entities first, then most recent
    WITH pairs AS (
        SELECT src.unit_id AS a, nb.unit_id AS c, nb.shared
        FROM unnest(unit_ids) AS src(unit_id)
        CROSS JOIN LATERAL (
            SELECT o.unit_id, count(*) AS shared
            FROM rcll.unit_entities me
            JOIN rcll.unit_entities o ON o.entity_id = me.entity_id AND o.unit_id <> me.unit_id
            WHERE me.unit_id = src.unit_id AND o.bank_id = b AND (horizon IS NULL OR o.unit_id <= horizon)
            GROUP BY o.unit_id
            ORDER BY count(*) DESC, o.unit_id DESC
            LIMIT entity_fanout
        ) nb
    ), ins AS (
        INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
        SELECT b, x.f, x.t, 'entity', least(1.0, 0.5 + 0.25 * x.shared)::real,
               jsonb_build_object('by', 'retain', 'shared_entities', x.shared)
        FROM (SELECT a AS f, c AS t, shared FROM pairs UNION SELECT c, a, shared FROM pairs) x
        ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO k FROM ins;
    n := n + k;

    -- temporal: the nearest unit before and after in time (by occurred_start) within the window,
    -- and consecutive units of one document
    WITH me AS (
        SELECT u.unit_id, u.document_id, u.chunk_index, u.occurred_start, u.thread
        FROM rcll.memory_units u WHERE u.unit_id = ANY (unit_ids)
    ), pairs AS (
        SELECT me.unit_id AS a, nb.unit_id AS c,
               greatest(0.05, 1 - abs(extract(epoch FROM nb.occurred_start - me.occurred_start))
                                  / extract(epoch FROM temporal_window))::real AS w
        FROM me
        CROSS JOIN LATERAL (
            (SELECT o.unit_id, o.occurred_start FROM rcll.memory_units o
             WHERE o.bank_id = b AND o.unit_id <> me.unit_id AND o.thread IS NOT DISTINCT FROM me.thread
               AND (horizon IS NULL OR o.unit_id <= horizon)
               AND o.occurred_start <= me.occurred_start AND o.occurred_start >= me.occurred_start - temporal_window
             ORDER BY o.occurred_start DESC, o.unit_id DESC LIMIT 1)
            UNION ALL
            (SELECT o.unit_id, o.occurred_start FROM rcll.memory_units o
             WHERE o.bank_id = b AND o.unit_id <> me.unit_id AND o.thread IS NOT DISTINCT FROM me.thread
               AND (horizon IS NULL OR o.unit_id <= horizon)
               AND o.occurred_start > me.occurred_start AND o.occurred_start <= me.occurred_start + temporal_window
             ORDER BY o.occurred_start, o.unit_id LIMIT 1)
        ) nb
        WHERE me.occurred_start IS NOT NULL
        UNION
        SELECT me.unit_id, o.unit_id, 1.0::real
        FROM me JOIN rcll.memory_units o
          ON o.document_id = me.document_id AND o.chunk_index = me.chunk_index + 1
    ), ins AS (
        INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
        SELECT DISTINCT ON (x.f, x.t) b, x.f, x.t, 'temporal', x.w, jsonb_build_object('by', 'retain')
        FROM (SELECT a AS f, c AS t, w FROM pairs UNION ALL SELECT c, a, w FROM pairs) x
        ORDER BY x.f, x.t, x.w DESC
        ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO k FROM ins;
    n := n + k;

    -- semantic: the nearest units by embedding above a similarity floor
    WITH pairs AS (
        SELECT me.unit_id AS a, nb.unit_id AS c, nb.sim
        FROM rcll.memory_units me
        CROSS JOIN LATERAL (
            SELECT o.unit_id, (1 - (o.embedding OPERATOR(public.<=>) me.embedding))::real AS sim
            FROM rcll.memory_units o
            WHERE o.bank_id = b AND o.unit_id <> me.unit_id AND o.embedding IS NOT NULL
              AND (horizon IS NULL OR o.unit_id <= horizon)
            ORDER BY o.embedding OPERATOR(public.<=>) me.embedding
            LIMIT semantic_k
        ) nb
        WHERE me.unit_id = ANY (unit_ids) AND me.embedding IS NOT NULL AND nb.sim >= semantic_min
    ), ins AS (
        INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
        SELECT DISTINCT ON (x.f, x.t) b, x.f, x.t, 'semantic', least(1.0, x.sim)::real, jsonb_build_object('by', 'retain')
        FROM (SELECT a AS f, c AS t, sim FROM pairs UNION ALL SELECT c, a, sim FROM pairs) x
        ORDER BY x.f, x.t, x.sim DESC
        ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO k FROM ins;
    RETURN n + k;
END
$$;
COMMENT ON FUNCTION rcll._link_units(integer, bigint[], integer, integer, real, interval, bigint)
    IS 'Internal: link newly written units to the bank (horizon: only to units up to that id, the ones that existed when they were written - a forget re-links survivors so) - entity (units sharing an entity, at most entity_fanout per unit), temporal (nearest unit before and after by occurred_start within temporal_window, and consecutive units of one document), semantic (semantic_k nearest by embedding with cosine similarity >= semantic_min). Symmetric links are stored both ways. Returns the number of links written.';

CREATE OR REPLACE FUNCTION rcll.supersede(old_unit bigint, new_unit bigint, at timestamptz DEFAULT NULL,
                                          reason jsonb DEFAULT '{}')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    o rcll.memory_units%ROWTYPE;
    nw rcll.memory_units%ROWTYPE;
    t timestamptz;
BEGIN
    IF old_unit = new_unit THEN
        RAISE EXCEPTION 'new_unit: a unit cannot supersede itself' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO nw FROM rcll.memory_units u WHERE u.unit_id = new_unit;
    SELECT * INTO o FROM rcll.memory_units u WHERE u.unit_id = old_unit FOR UPDATE;
    IF o.unit_id IS NULL OR nw.unit_id IS NULL THEN
        RAISE EXCEPTION '%: no such unit', CASE WHEN o.unit_id IS NULL THEN 'old_unit' ELSE 'new_unit' END
            USING ERRCODE = '42704', HINT = 'Pass unit ids of one bank (SELECT unit_id FROM rcll.memory_units).';
    END IF;
    IF o.bank_id <> nw.bank_id THEN
        RAISE EXCEPTION 'new_unit: units % and % are in different banks', old_unit, new_unit USING ERRCODE = '22023';
    END IF;
    IF o.superseded_by IS NOT NULL OR NOT upper_inf(o.valid) THEN
        RETURN false;                       -- already closed; the first replacement stands
    END IF;
    t := coalesce(at, lower(nw.valid), now());
    IF t <= lower(o.valid) THEN
        RAISE EXCEPTION 'at: % is not after the start of unit %''s validity (%)', t, old_unit, lower(o.valid)
            USING ERRCODE = '22023', HINT = 'A unit can only be superseded by something that became true after it did.';
    END IF;
    UPDATE rcll.memory_units u
    SET valid = tstzrange(lower(u.valid), t), superseded_by = new_unit, updated_at = now()
    WHERE u.unit_id = old_unit;
    INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
    VALUES (o.bank_id, new_unit, old_unit, 'supersedes', 1.0,
            jsonb_build_object('by', 'retain', 'at', t) || coalesce(reason, '{}'))
    ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING;
    RETURN true;
END
$$;
COMMENT ON FUNCTION rcll.supersede(bigint, bigint, timestamptz, jsonb)
    IS 'Record that new_unit replaces old_unit: closes old_unit''s validity window at `at` (default: the start of new_unit''s validity), sets its superseded_by and writes a supersedes link (new -> old). Nothing is deleted. Returns false if old_unit was already superseded or closed.';


-- functions 220-retain-facts.sql
-- Extraction-mode retain: a document and the facts extracted from it (LLM or offline rules),
-- with entities resolved, links made, supersession recorded and the LLM ledger written - one call,
-- so one transaction.

CREATE OR REPLACE FUNCTION rcll._fact_time(fact jsonb, key text, i integer)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF fact ->> key IS NULL OR btrim(fact ->> key) = '' THEN
        RETURN NULL;
    END IF;
    RETURN (fact ->> key)::timestamptz;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
    RAISE EXCEPTION 'facts: fact % has % = % which is not a timestamp', i, key, quote_literal(fact ->> key)
        USING ERRCODE = '22007', HINT = 'Use ISO 8601 (2026-08-26T14:00:00Z) or null.';
END
$$;
COMMENT ON FUNCTION rcll._fact_time(jsonb, text, integer) IS 'Internal: a timestamp field of an extracted fact (ISO 8601 or null), with an error naming the fact and field.';

CREATE OR REPLACE FUNCTION rcll._layer_for(hall text, layer text DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(layer, (SELECT r.layer FROM rcll.layer_rules r WHERE r.hall = _layer_for.hall), 'L2')
$$;
COMMENT ON FUNCTION rcll._layer_for(text, text) IS 'Internal: the layer a unit lands in - the one named, else rcll.layer_rules for its hall, else L2.';

CREATE OR REPLACE FUNCTION rcll._record_llm_calls(bank_id integer, document_id bigint, calls jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n integer;
BEGIN
    IF calls IS NULL OR jsonb_typeof(calls) <> 'array' THEN
        RAISE EXCEPTION 'llm_calls: must be a JSON array of calls' USING ERRCODE = '22023',
            HINT = 'Pass [{"purpose": "extract", "provider": ..., "model": ..., "input_tokens": n, "output_tokens": n, "outcome": "ok"}].';
    END IF;
    INSERT INTO rcll.llm_calls (bank_id, document_id, purpose, provider, model, input_tokens, output_tokens, outcome)
    SELECT _record_llm_calls.bank_id, _record_llm_calls.document_id, coalesce(c.purpose, 'extract'), c.provider,
           c.model, coalesce(c.input_tokens, 0), coalesce(c.output_tokens, 0), coalesce(c.outcome, 'ok')
    FROM jsonb_to_recordset(calls) AS c(purpose text, provider text, model text, input_tokens integer,
                                        output_tokens integer, outcome text);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._record_llm_calls(integer, bigint, jsonb) IS 'Internal: append LLM calls (a JSON array of {purpose, provider, model, input_tokens, output_tokens, outcome}) to the write-cost ledger.';

CREATE OR REPLACE FUNCTION rcll.record_llm_calls(bank text, calls jsonb, document_id bigint DEFAULT NULL)
RETURNS integer
LANGUAGE sql VOLATILE
AS $$
    SELECT rcll._record_llm_calls(rcll._bank_id(bank), document_id, calls)
$$;
COMMENT ON FUNCTION rcll.record_llm_calls(text, jsonb, bigint) IS 'Append LLM calls to the write-cost ledger of a bank (used when a retain fails with nothing stored: the tokens were still spent).';

CREATE OR REPLACE FUNCTION rcll.find_document(bank text, content text, thread text DEFAULT NULL)
RETURNS TABLE (document_id bigint, unit_ids bigint[], extraction text)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT d.document_id, rcll._document_units(d.document_id), d.extraction
    FROM rcll.documents d
    WHERE d.bank_id = rcll._bank_id(find_document.bank)
      AND d.content_hash = rcll._content_hash(find_document.content, find_document.thread)
$$;
COMMENT ON FUNCTION rcll.find_document(text, text, text) IS 'The document already retained with this content and thread in the bank, with its units - so a re-retain can skip extraction (and its model call).';

CREATE OR REPLACE FUNCTION rcll.retain_facts(
    bank        text,
    content     text,
    facts       jsonb,
    embeddings  vector[],
    aux_texts   text[] DEFAULT '{}',
    aux_embeddings vector[] DEFAULT '{}',
    extraction  text DEFAULT 'llm',
    llm_calls   jsonb DEFAULT '[]',
    source      text DEFAULT NULL,
    occurred_at timestamptz DEFAULT NULL,
    room        text DEFAULT NULL,
    thread      text DEFAULT NULL,
    tags        text[] DEFAULT '{}',
    hall        text DEFAULT NULL,
    layer       text DEFAULT NULL,
    metadata    jsonb DEFAULT '{}',
    via         text DEFAULT 'sql',
    author      text DEFAULT NULL,
    match_known_entities boolean DEFAULT false,
    supersede_threshold double precision DEFAULT 0.80)
RETURNS TABLE (document_id bigint, unit_ids bigint[], created boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    doc bigint;
    stored record;
    prov jsonb;
    n integer := coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(facts) = 'array' THEN facts END), 0);
    doc_time timestamptz := coalesce(retain_facts.occurred_at, now());
    ids bigint[] := '{}';
    f jsonb;
    i integer;
    uid bigint;
    t_start timestamptz; t_end timestamptz; v_from timestamptz; v_to timestamptz;
    f_hall text;
    f_room text;
    ent jsonb;
    ent_emb public.vector;
    res record;
    touched bigint[] := '{}';
    cause jsonb;
    target text;
    target_emb public.vector;
    cand record;
BEGIN
    PERFORM rcll._check_document(b, content);
    IF facts IS NULL OR jsonb_typeof(facts) <> 'array' OR n = 0 THEN
        RAISE EXCEPTION 'facts: must be a non-empty JSON array of facts' USING ERRCODE = '22023',
            HINT = 'An extraction with no facts is a failed extraction: store chunks (rcll.retain_extraction_failed) instead.';
    END IF;
    IF coalesce(array_length(embeddings, 1), 0) <> n THEN
        RAISE EXCEPTION 'embeddings: % embeddings for % facts', coalesce(array_length(embeddings, 1), 0), n
            USING ERRCODE = '22023', HINT = 'Pass one embedding per fact, in the same order.';
    END IF;
    IF coalesce(array_length(aux_texts, 1), 0) <> coalesce(array_length(aux_embeddings, 1), 0) THEN
        RAISE EXCEPTION 'aux_embeddings: % embeddings for % aux_texts', coalesce(array_length(aux_embeddings, 1), 0),
            coalesce(array_length(aux_texts, 1), 0) USING ERRCODE = '22023';
    END IF;
    IF extraction NOT IN ('llm', 'offline') THEN
        RAISE EXCEPTION 'extraction: % is not an extraction mode', quote_literal(extraction) USING ERRCODE = '22023',
            HINT = 'Use llm or offline (chunk mode is rcll.retain_chunks).';
    END IF;
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        IF jsonb_typeof(f) <> 'object' OR jsonb_typeof(f -> 'text') <> 'string'
           OR btrim(f ->> 'text', E' \t\r\n\f\v') = '' THEN
            RAISE EXCEPTION 'facts: fact % is not an object with a non-empty text', i USING ERRCODE = '22023';
        END IF;
    END LOOP;

    stored := rcll._store_document(b, content, source, thread, retain_facts.occurred_at, layer, metadata, via, author,
                                   extraction);
    doc := stored.document_id;
    IF NOT stored.created THEN                  -- already retained: no duplicate facts
        PERFORM rcll._record_llm_calls(b, doc, llm_calls);
        RETURN QUERY SELECT doc, rcll._document_units(doc), false;
        RETURN;
    END IF;
    prov := stored.provenance || jsonb_build_object('extraction', extraction);

    -- 1. the facts
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        t_start := rcll._fact_time(f, 'occurred_start', i);
        t_end := rcll._fact_time(f, 'occurred_end', i);
        IF t_end < t_start THEN t_end := NULL; END IF;
        v_from := coalesce(rcll._fact_time(f, 'valid_from', i), t_start, doc_time);
        v_to := rcll._fact_time(f, 'valid_to', i);
        IF v_to <= v_from THEN v_to := NULL; END IF;
        f_hall := coalesce(retain_facts.hall, nullif(lower(btrim(f ->> 'hall')), ''));
        -- no room given: the janitor trigger (050-room-janitor.sql) classifies facts with rcll.classify_room
        f_room := coalesce(retain_facts.room, nullif(btrim(f ->> 'room'), ''));
        INSERT INTO rcll.memory_units AS u
            (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source, thread, tags,
             valid, occurred_start, occurred_end, mentioned_at, chunk_index, provenance, metadata)
        VALUES (b, doc, 'fact', btrim(f ->> 'text'), embeddings[i + 1], f_hall,
                rcll._layer_for(f_hall, retain_facts.layer), f_room, stored.author, stored.author_source,
                retain_facts.thread,
                ARRAY(SELECT DISTINCT x FROM unnest(coalesce(retain_facts.tags, '{}')
                      || ARRAY(SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(f -> 'tags') = 'array'
                                                                     THEN f -> 'tags' ELSE '[]' END))) x ORDER BY x),
                tstzrange(v_from, v_to), t_start, t_end, retain_facts.occurred_at, i, prov,
                CASE WHEN jsonb_typeof(f -> 'metadata') = 'object' THEN f -> 'metadata' ELSE '{}' END)
        RETURNING u.unit_id INTO uid;
        ids := ids || uid;

        -- 2. its entities
        FOR ent IN SELECT e FROM jsonb_array_elements(CASE WHEN jsonb_typeof(f -> 'entities') = 'array'
                                                           THEN f -> 'entities' ELSE '[]' END) e LOOP
            CONTINUE WHEN jsonb_typeof(ent) <> 'object' OR rcll._entity_key(ent ->> 'name') IS NULL;
            ent_emb := aux_embeddings[array_position(aux_texts, ent ->> 'name')];
            res := rcll._resolve_entity(b, ent ->> 'name', nullif(btrim(ent ->> 'type'), ''), ent_emb,
                                        ARRAY(SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(ent -> 'aliases') = 'array'
                                                                                   THEN ent -> 'aliases' ELSE '[]' END)));
            INSERT INTO rcll.unit_entities AS ue (unit_id, entity_id, bank_id, role)
            VALUES (uid, res.entity_id, b, nullif(btrim(ent ->> 'role'), ''))
            ON CONFLICT ON CONSTRAINT unit_entities_pkey DO NOTHING;
            touched := touched || res.entity_id;
        END LOOP;
        IF match_known_entities THEN
            INSERT INTO rcll.unit_entities AS ue (unit_id, entity_id, bank_id, role)
            SELECT uid, k.entity_id, b, 'mention' FROM rcll._known_entities(b, f ->> 'text') k
            ON CONFLICT ON CONSTRAINT unit_entities_pkey DO NOTHING;
            touched := touched || ARRAY(SELECT ue.entity_id FROM rcll.unit_entities ue WHERE ue.unit_id = uid);
        END IF;
    END LOOP;
    UPDATE rcll.entities e
    SET mention_count = (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.entity_id = e.entity_id)
    WHERE e.entity_id = ANY (touched);

    -- 3. causal links within the document (cause -> effect)
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        CONTINUE WHEN jsonb_typeof(f -> 'caused_by') IS DISTINCT FROM 'array';
        FOR cause IN SELECT c FROM jsonb_array_elements(f -> 'caused_by') c LOOP
            CONTINUE WHEN jsonb_typeof(cause) <> 'number' OR (cause)::numeric <> trunc((cause)::numeric)
                          OR (cause)::integer < 0 OR (cause)::integer >= n OR (cause)::integer = i;
            INSERT INTO rcll.links AS l (bank_id, from_unit, to_unit, link_type, weight, provenance)
            VALUES (b, ids[(cause)::integer + 1], ids[i + 1], 'causal', 1.0,
                    jsonb_build_object('by', extraction, 'document_id', doc))
            ON CONFLICT ON CONSTRAINT links_pkey DO NOTHING;
        END LOOP;
    END LOOP;

    -- 4. supersession: each description of a replaced fact closes the closest open unit of the bank
    --    (same thread, valid before the new fact, not from this document)
    FOR i IN 0 .. n - 1 LOOP
        f := facts -> i;
        CONTINUE WHEN jsonb_typeof(f -> 'supersedes') IS DISTINCT FROM 'array';
        FOR target IN SELECT s FROM jsonb_array_elements_text(f -> 'supersedes') s LOOP
            target_emb := coalesce(aux_embeddings[array_position(aux_texts, target)], embeddings[i + 1]);
            CONTINUE WHEN target_emb IS NULL;
            SELECT c.unit_id, c.sim INTO cand
            FROM (SELECT o.unit_id,
                         (1 - (o.embedding OPERATOR(public.<=>) target_emb))::real
                         + 0.05 * (SELECT count(*) FROM rcll.unit_entities x JOIN rcll.unit_entities y
                                     ON y.entity_id = x.entity_id
                                   WHERE x.unit_id = o.unit_id AND y.unit_id = ids[i + 1]) AS sim
                  FROM rcll.memory_units o
                  WHERE o.bank_id = b AND o.document_id IS DISTINCT FROM doc
                    AND o.superseded_by IS NULL AND upper_inf(o.valid) AND o.embedding IS NOT NULL
                    AND o.thread IS NOT DISTINCT FROM retain_facts.thread
                    AND lower(o.valid) < (SELECT lower(u.valid) FROM rcll.memory_units u WHERE u.unit_id = ids[i + 1])
                  ORDER BY o.embedding OPERATOR(public.<=>) target_emb
                  LIMIT 10) c
            WHERE c.sim >= supersede_threshold
            ORDER BY c.sim DESC, c.unit_id DESC
            LIMIT 1;
            IF cand.unit_id IS NOT NULL THEN
                PERFORM rcll.supersede(cand.unit_id, ids[i + 1], NULL,
                                       jsonb_build_object('by', extraction, 'description', target, 'similarity', round(cand.sim::numeric, 3)));
            END IF;
        END LOOP;
    END LOOP;

    -- 5. entity, temporal and semantic links; 6. the ledger
    PERFORM rcll._link_units(b, ids);
    PERFORM rcll._record_llm_calls(b, doc, llm_calls);
    RETURN QUERY SELECT doc, ids, true;
END
$$;
COMMENT ON FUNCTION rcll.retain_facts(text, text, jsonb, vector[], text[], vector[], text, jsonb, text, timestamptz, text, text, text[], text, text, jsonb, text, text, boolean, double precision)
    IS 'Extraction-mode retain, one transaction: store a document and its extracted facts (a JSON array of {text, hall, occurred_start, occurred_end, valid_from, valid_to, entities: [{name, type, role, aliases}], caused_by: [fact index], supersedes: [description], room, tags, metadata}) with one embedding per fact; aux_texts/aux_embeddings give embeddings of entity names and supersession descriptions. Resolves entities, writes causal, entity, temporal and semantic links, closes the validity of the units each fact supersedes (similarity >= supersede_threshold), assigns layers by rcll.layer_rules (rooms: the caller''s, else the fact''s, else the janitor trigger''s classifier), and appends llm_calls to the ledger. Re-retaining the same content and thread returns the existing units (created = false).';

CREATE OR REPLACE FUNCTION rcll.retain_extraction_failed(
    bank        text,
    content     text,
    chunks      text[],
    embeddings  vector[],
    error       text,
    llm_calls   jsonb DEFAULT '[]',
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
AS $$
DECLARE
    r record;
BEGIN
    SELECT * INTO r FROM rcll.retain_chunks(
        bank => bank, content => content, chunks => chunks, embeddings => embeddings, source => source,
        occurred_at => occurred_at, room => room, thread => thread,
        tags => ARRAY(SELECT DISTINCT x FROM unnest(coalesce(tags, '{}') || ARRAY['extraction:failed']) x ORDER BY x),
        hall => hall, layer => layer, metadata => metadata, via => via, author => author);
    IF r.created THEN
        UPDATE rcll.documents d
        SET extraction = 'failed', metadata = d.metadata || jsonb_build_object('extraction_error', error)
        WHERE d.document_id = r.document_id;
    END IF;
    PERFORM rcll._record_llm_calls(rcll._bank_id(bank), r.document_id, llm_calls);
    RETURN QUERY SELECT r.document_id, r.unit_ids, r.created;
END
$$;
COMMENT ON FUNCTION rcll.retain_extraction_failed(text, text, text[], vector[], text, jsonb, text, timestamptz, text, text, text[], text, text, jsonb, text, text)
    IS 'Retain a document whose LLM extraction failed (RCLL_EXTRACTION_FAILURE=chunks), in one transaction: stored as chunks tagged extraction:failed, documents.extraction = failed with the error in metadata.extraction_error, and the calls that failed appended to the ledger.';


-- functions 230-stats.sql
-- Bank statistics with the two-column token account: what reading costs (nothing) next to what
-- writing cost (every model call on the write path, from rcll.llm_calls).

CREATE OR REPLACE FUNCTION rcll.stats(bank text)
RETURNS TABLE (section text, name text, value bigint, read_tokens bigint,
               write_input_tokens bigint, write_output_tokens bigint)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH b AS (SELECT rcll._bank_id(bank) AS id),
    ledger AS (
        SELECT c.purpose, count(*) AS calls, sum(c.input_tokens)::bigint AS inp, sum(c.output_tokens)::bigint AS outp
        FROM rcll.llm_calls c, b WHERE c.bank_id = b.id GROUP BY c.purpose
    ),
    purposes AS (SELECT p FROM unnest(ARRAY['extract', 'consolidate']) p)
    -- tokens: recall makes no model call, so the read column is zero by construction
    SELECT 'tokens', p.p, coalesce(l.calls, 0), 0::bigint, coalesce(l.inp, 0), coalesce(l.outp, 0)
    FROM purposes p LEFT JOIN ledger l ON l.purpose = p.p
    UNION ALL
    SELECT 'tokens', 'total', coalesce(sum(l.calls), 0)::bigint, 0::bigint,
           coalesce(sum(l.inp), 0)::bigint, coalesce(sum(l.outp), 0)::bigint FROM ledger l
    UNION ALL
    SELECT 'totals', x.name, x.value, NULL::bigint, NULL::bigint, NULL::bigint FROM b, LATERAL (VALUES
        ('documents', (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = b.id)),
        ('units', (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b.id)),
        ('entities', (SELECT count(*) FROM rcll.entities e WHERE e.bank_id = b.id)),
        ('links', (SELECT count(*) FROM rcll.links l WHERE l.bank_id = b.id)),
        ('superseded', (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b.id AND u.superseded_by IS NOT NULL))
    ) x(name, value)
    UNION ALL
    SELECT g.section, g.name, g.value, NULL, NULL, NULL FROM (
        SELECT 'kind' AS section, u.kind AS name, count(*) AS value FROM rcll.memory_units u, b WHERE u.bank_id = b.id GROUP BY u.kind
        UNION ALL
        SELECT 'room', coalesce(u.room, '(none)'), count(*) FROM rcll.memory_units u, b WHERE u.bank_id = b.id GROUP BY u.room
        UNION ALL
        SELECT 'hall', coalesce(u.hall, '(untyped)'), count(*) FROM rcll.memory_units u, b WHERE u.bank_id = b.id GROUP BY u.hall
        UNION ALL
        SELECT 'layer', u.layer, count(*) FROM rcll.memory_units u, b WHERE u.bank_id = b.id GROUP BY u.layer
        UNION ALL
        SELECT 'author', coalesce(u.author, '(none)'), count(*) FROM rcll.memory_units u, b WHERE u.bank_id = b.id GROUP BY u.author
        UNION ALL
        SELECT 'link_type', l.link_type, count(*) FROM rcll.links l, b WHERE l.bank_id = b.id GROUP BY l.link_type
        UNION ALL
        SELECT 'extraction', d.extraction, count(*) FROM rcll.documents d, b WHERE d.bank_id = b.id GROUP BY d.extraction
        UNION ALL   -- retention policies: what they cover, and how long they keep it (seconds)
        SELECT 'retention', coalesce(nullif(concat_ws(' ', 'room=' || p.room, 'hall=' || p.hall, 'layer=' || p.layer), ''), '*'),
               extract(epoch FROM p.keep)::bigint
        FROM rcll.retention_policies p, b WHERE p.bank_id = b.id
        ORDER BY 1, 3 DESC, 2
    ) g
$$;
COMMENT ON FUNCTION rcll.stats(text)
    IS 'Statistics of a bank. Section tokens: per purpose (extract, consolidate, total) the number of model calls (value), the read column (read_tokens, always 0: recall makes no model call) next to the write column (write_input_tokens, write_output_tokens from rcll.llm_calls). Section totals: documents, units, entities, links, superseded. Sections kind, room, hall, layer, author, link_type, extraction: counts per value. Section retention: one row per retention policy (room=, hall=, layer= it covers, * for all), value = seconds kept.';


-- functions 240-consolidate.sql
-- Consolidation, a background job never on the recall path: related pending L2 units are compacted
-- into observations that keep their sources linked. Every observation gets a room.

CREATE OR REPLACE FUNCTION rcll.consolidation_groups(
    bank     text,
    time_window interval DEFAULT '7 days',
    min_size integer DEFAULT 2,
    max_size integer DEFAULT 12,
    max_groups integer DEFAULT 100)
RETURNS TABLE (entity_id bigint, entity_name text, bucket_start timestamptz, unit_ids bigint[], texts text[])
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH b AS (SELECT rcll._bank_id(bank) AS id),
    pending AS (
        SELECT u.unit_id, u.text, coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) AS t
        FROM rcll.memory_units u, b
        WHERE u.bank_id = b.id AND u.layer = 'L2' AND u.kind IN ('fact', 'chunk')
          AND u.consolidation_state = 'pending' AND u.superseded_by IS NULL AND upper_inf(u.valid)
    ),
    -- each unit's primary entity: the one it shares with the most other pending units
    shared AS (
        SELECT p.unit_id, ue.entity_id,
               (SELECT count(*) FROM rcll.unit_entities o JOIN pending q ON q.unit_id = o.unit_id
                WHERE o.entity_id = ue.entity_id) AS pending_mentions
        FROM pending p JOIN rcll.unit_entities ue ON ue.unit_id = p.unit_id
    ),
    primary_entity AS (
        SELECT DISTINCT ON (s.unit_id) s.unit_id, s.entity_id
        FROM shared s WHERE s.pending_mentions >= min_size
        ORDER BY s.unit_id, s.pending_mentions DESC, s.entity_id
    ),
    bucketed AS (
        SELECT pe.entity_id, p.unit_id, p.text, p.t,
               to_timestamp(floor(extract(epoch FROM p.t) / extract(epoch FROM time_window))
                            * extract(epoch FROM time_window)) AS bucket_start,
               row_number() OVER (PARTITION BY pe.entity_id,
                                  floor(extract(epoch FROM p.t) / extract(epoch FROM time_window))
                                  ORDER BY p.t, p.unit_id) AS rn
        FROM primary_entity pe JOIN pending p USING (unit_id)
    ),
    groups AS (
        SELECT x.entity_id, x.bucket_start, ((x.rn - 1) / max_size) AS part,
               array_agg(x.unit_id ORDER BY x.t, x.unit_id) AS unit_ids,
               array_agg(x.text ORDER BY x.t, x.unit_id) AS texts
        FROM bucketed x
        GROUP BY x.entity_id, x.bucket_start, ((x.rn - 1) / max_size)
        HAVING count(*) >= min_size
    )
    SELECT g.entity_id, e.name, g.bucket_start, g.unit_ids, g.texts
    FROM groups g JOIN rcll.entities e ON e.entity_id = g.entity_id
    ORDER BY g.bucket_start, g.entity_id, g.part
    LIMIT max_groups
$$;
COMMENT ON FUNCTION rcll.consolidation_groups(text, interval, integer, integer, integer)
    IS 'Groups of related pending L2 units to consolidate: units are grouped by their primary entity (the entity they share with the most other pending units) within time buckets of time_window, at least min_size and at most max_size units per group. Read-only; rcll consolidate writes one observation per group with rcll.write_observation.';

CREATE OR REPLACE FUNCTION rcll.write_observation(
    bank      text,
    text      text,
    embedding vector,
    sources   bigint[],
    hall      text DEFAULT 'observation',
    room      text DEFAULT NULL,
    actor     text DEFAULT 'system:consolidate',
    method    text DEFAULT 'offline',
    llm_calls jsonb DEFAULT '[]',
    metadata  jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b integer := rcll._bank_id(bank);
    s record;
    obs bigint;
    r text;
    room_by text;
BEGIN
    IF text IS NULL OR btrim(text, E' \t\r\n\f\v') = '' THEN
        RAISE EXCEPTION 'text: an observation needs text' USING ERRCODE = '22023';
    END IF;
    IF coalesce(array_length(sources, 1), 0) = 0 THEN
        RAISE EXCEPTION 'sources: an observation needs at least one source unit' USING ERRCODE = '22023';
    END IF;
    -- lock the sources: two consolidators must not fold the same unit twice
    PERFORM 1 FROM rcll.memory_units u WHERE u.unit_id = ANY (sources) ORDER BY u.unit_id FOR UPDATE;
    SELECT count(*) AS n,
           count(*) FILTER (WHERE u.bank_id = b AND u.consolidation_state = 'pending') AS ok,
           min(lower(u.valid)) AS valid_from,
           min(u.occurred_start) AS occ_start,
           max(coalesce(u.occurred_end, u.occurred_start)) AS occ_end,
           max(u.mentioned_at) AS mentioned,
           CASE WHEN count(DISTINCT coalesce(u.thread, '')) = 1 THEN min(u.thread) END AS thread,
           CASE WHEN count(DISTINCT coalesce(u.author, '')) = 1 THEN min(u.author) END AS author,
           CASE WHEN count(DISTINCT coalesce(u.author, '')) = 1 THEN min(u.author_source) ELSE 'none' END AS author_source,
           ARRAY(SELECT DISTINCT t FROM rcll.memory_units x, unnest(x.tags) t
                 WHERE x.unit_id = ANY (sources) ORDER BY t) AS tags
      INTO s
    FROM rcll.memory_units u WHERE u.unit_id = ANY (sources);
    IF s.n <> coalesce(array_length(sources, 1), 0) OR s.ok <> s.n THEN
        RAISE EXCEPTION 'sources: % of % units are pending units of bank %', s.ok, array_length(sources, 1), bank
            USING ERRCODE = '22023', HINT = 'Consolidate only units listed by rcll.consolidation_groups (pending, same bank).';
    END IF;

    -- the room: given, else the sources'' majority room, else the classifier, else general
    r := nullif(btrim(room), ''); room_by := 'caller';
    IF r IS NULL THEN
        SELECT u.room INTO r FROM rcll.memory_units u
        WHERE u.unit_id = ANY (sources) AND u.room IS NOT NULL
        GROUP BY u.room ORDER BY count(*) DESC, u.room LIMIT 1;
        room_by := CASE WHEN r IS NULL THEN 'classifier' ELSE 'majority' END;
    END IF;
    -- (NULL here: the janitor trigger classifies it on insert, and general is the last resort below)

    INSERT INTO rcll.memory_units AS u
        (bank_id, document_id, kind, text, embedding, hall, layer, room, author, author_source, thread, tags,
         valid, occurred_start, occurred_end, mentioned_at, consolidation_state, provenance, metadata)
    VALUES (b, NULL, 'observation', btrim(write_observation.text), embedding, hall, rcll._layer_for(hall), r,
            s.author, s.author_source, s.thread, s.tags,
            tstzrange(coalesce(s.valid_from, now()), NULL), s.occ_start,
            CASE WHEN s.occ_end > s.occ_start THEN s.occ_end END, s.mentioned, 'consolidated',
            jsonb_build_object('via', 'consolidate', 'who', actor, 'method', method, 'at', now(), 'sources', sources),
            coalesce(metadata, '{}'))
    RETURNING u.unit_id, u.room INTO obs, r;
    IF r IS NULL THEN                 -- no unroomed observations
        r := 'general';
        room_by := 'general';
        UPDATE rcll.memory_units u SET room = r WHERE u.unit_id = obs;
    END IF;

    INSERT INTO rcll.unit_entities (unit_id, entity_id, bank_id, role)
    SELECT DISTINCT obs, ue.entity_id, b, NULL::text FROM rcll.unit_entities ue WHERE ue.unit_id = ANY (sources);
    INSERT INTO rcll.links (bank_id, from_unit, to_unit, link_type, weight, provenance)
    SELECT b, obs, src, 'consolidates', 1.0, jsonb_build_object('by', 'consolidate', 'method', method)
    FROM unnest(sources) src;
    UPDATE rcll.memory_units u SET consolidation_state = 'consolidated', updated_at = now()
    WHERE u.unit_id = ANY (sources);
    PERFORM rcll._link_units(b, ARRAY[obs]);
    PERFORM rcll._record_llm_calls(b, NULL, llm_calls);
    PERFORM rcll._audit(b, 'consolidate', jsonb_build_object('observation', obs, 'sources', to_jsonb(sources)),
                        jsonb_build_object('method', method, 'room', r, 'room_by', room_by, 'hall', hall,
                                           'text', btrim(write_observation.text),
                                           'reverse', 'DELETE the observation and set the sources'' consolidation_state back to pending'),
                        actor => actor);
    RETURN obs;
END
$$;
COMMENT ON FUNCTION rcll.write_observation(text, text, vector, bigint[], text, text, text, text, jsonb, jsonb)
    IS 'Consolidation: write one observation (kind observation) compacting pending source units of a bank, in one transaction - the room is the one given, else the sources'' majority room, else the classifier''s, else general (never none); the sources'' entities, tags and shared author carry over; consolidates links go observation -> source; the sources become consolidated; an audit_log row records it. Returns the observation''s unit id.';


-- functions 250-forget.sql
-- Forget: remove memories by selector with everything derived from them, so that the bank is what
-- it would be had they never been retained - and record who forgot what, never the content.
--
-- The cascade (rcll._forget_units) is one function that forget, the expiry sweep
-- (260-expiry.sql) and a bank's own units share: documents whose every unit goes are deleted,
-- a document that keeps some units is redacted to their texts; units go with their embeddings,
-- lexicon rows (unit_lexicon, and document_lexicon through its triggers), entity mentions and
-- links (ON DELETE CASCADE); every observation one of whose sources goes is removed and its
-- surviving sources are queued for consolidation again; a unit superseded by a forgotten unit is
-- current again; entities left with no unit go, the others' mention counts are recounted; a room
-- left with no unit leaves the registry; the refreshed BM25 statistics lose exactly what went.

CREATE OR REPLACE FUNCTION rcll._actable_bank(bank text)
RETURNS integer
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    id integer;
    owner_role name;
BEGIN
    -- Called inside SECURITY DEFINER functions, which bypass row-level security as the owner: the
    -- caller's own isolation is checked here, by session_user (as rcll.current_agent does), and a
    -- bank out of reach is reported exactly like a bank that does not exist.
    IF bank IS NULL OR btrim(bank) = '' THEN
        RAISE EXCEPTION 'bank: a bank is required' USING ERRCODE = 'RC001', COLUMN = 'bank',
            HINT = 'Pass bank => ''name''.';
    END IF;
    SELECT b.bank_id INTO id FROM rcll.banks b WHERE b.name = _actable_bank.bank;
    SELECT pg_catalog.pg_get_userbyid(c.relowner) INTO owner_role FROM pg_catalog.pg_class c WHERE c.oid = 'rcll.banks'::regclass;
    IF id IS NOT NULL
       AND (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid = 'rcll.banks'::regclass)
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)
       AND NOT pg_catalog.pg_has_role(session_user, owner_role, 'MEMBER')
       AND NOT id = ANY (rcll._visible_banks(session_user)) THEN
        id := NULL;
    END IF;
    IF id IS NULL THEN
        RAISE EXCEPTION 'bank: unknown bank "%"', bank USING ERRCODE = 'RC002', COLUMN = 'bank',
            HINT = 'List the banks you can reach with rcll.list_banks().';
    END IF;
    -- Destructive verbs are a writer's: a role that may not write memory may not forget it either.
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user)
       AND NOT pg_catalog.has_table_privilege(session_user, 'rcll.memory_units', 'INSERT') THEN
        RAISE EXCEPTION 'bank: role "%" may not write to bank "%", so it may not forget from it', session_user, bank
            USING ERRCODE = 'RC006', COLUMN = 'bank', HINT = 'Connect as a role that writes memory (a read-only role cannot forget).';
    END IF;
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll._actable_bank(text)
    IS 'Internal: the id of a bank the session''s role may change from inside a SECURITY DEFINER function - unknown, or hidden by bank isolation (rcll._visible_banks of session_user): RC002; a role without INSERT on memory_units: RC006.';

CREATE OR REPLACE FUNCTION rcll._forget_units(bank_id integer, unit_ids bigint[], document_ids bigint[], dry_run boolean)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b         integer := _forget_units.bank_id;
    full_docs bigint[];
    part_docs bigint[];
    gone      bigint[];
    obs_gone  bigint[];
    requeue   bigint[];
    reopen    bigint[];
    touched   bigint[];
    orphans   bigint[];
    rooms_in  text[];
    dead_rooms text[];
    relink    bigint[];
    gone_new_rooms text[];
    grp       record;
    counts    jsonb;
    st        record;
BEGIN
    -- Units selected, and every unit of a selected document.
    gone := ARRAY(SELECT u.unit_id FROM rcll.memory_units u
                  WHERE u.bank_id = b AND (u.unit_id = ANY (_forget_units.unit_ids)
                                           OR u.document_id = ANY (_forget_units.document_ids)));
    -- Observations one of whose sources goes: removed, not re-derived - their text was written
    -- from every source, the forgotten ones included, and only a model could write it again
    -- without them (the surviving sources are queued: the next consolidation does).
    obs_gone := ARRAY(SELECT DISTINCT l.from_unit FROM rcll.links l
                      JOIN rcll.memory_units o ON o.unit_id = l.from_unit AND o.kind = 'observation'
                      WHERE l.bank_id = b AND l.link_type = 'consolidates' AND l.to_unit = ANY (gone)
                        AND NOT l.from_unit = ANY (gone));
    gone := gone || obs_gone;
    requeue := ARRAY(SELECT DISTINCT l.to_unit FROM rcll.links l
                     WHERE l.bank_id = b AND l.link_type = 'consolidates' AND l.from_unit = ANY (gone)
                       AND NOT l.to_unit = ANY (gone));
    full_docs := ARRAY(SELECT d.document_id FROM rcll.documents d
                       WHERE d.bank_id = b
                         AND (d.document_id = ANY (_forget_units.document_ids)
                              OR (EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.document_id = d.document_id AND u.unit_id = ANY (gone))
                                  AND NOT EXISTS (SELECT 1 FROM rcll.memory_units u
                                                  WHERE u.document_id = d.document_id AND NOT u.unit_id = ANY (gone)))));
    part_docs := ARRAY(SELECT DISTINCT u.document_id FROM rcll.memory_units u
                       WHERE u.unit_id = ANY (gone) AND u.document_id IS NOT NULL AND NOT u.document_id = ANY (full_docs));
    reopen := ARRAY(SELECT u.unit_id FROM rcll.memory_units u
                    WHERE u.bank_id = b AND u.superseded_by = ANY (gone) AND NOT u.unit_id = ANY (gone));
    touched := ARRAY(SELECT DISTINCT ue.entity_id FROM rcll.unit_entities ue WHERE ue.unit_id = ANY (gone));
    orphans := ARRAY(SELECT e FROM unnest(touched) e
                     WHERE NOT EXISTS (SELECT 1 FROM rcll.unit_entities ue
                                       WHERE ue.entity_id = e AND NOT ue.unit_id = ANY (gone)));
    rooms_in := ARRAY(SELECT DISTINCT u.room FROM rcll.memory_units u WHERE u.unit_id = ANY (gone) AND u.room IS NOT NULL);
    dead_rooms := ARRAY(SELECT r.name FROM rcll.rooms r
                        WHERE r.bank_id = b AND r.name = ANY (rooms_in) AND r.status = 'live'
                          AND NOT EXISTS (SELECT 1 FROM rcll.memory_units u
                                          WHERE u.bank_id = b AND u.room = r.name AND NOT u.unit_id = ANY (gone))
                          AND NOT EXISTS (SELECT 1 FROM rcll.room_aliases a WHERE a.bank_id = b AND a.room = r.name AND a.reason = 'merge')
                          AND NOT EXISTS (SELECT 1 FROM rcll.rooms m WHERE m.bank_id = b AND m.merged_into = r.name)
                          AND NOT EXISTS (SELECT 1 FROM rcll.room_merge_proposals p
                                          WHERE p.bank_id = b AND p.status = 'pending' AND r.name IN (p.from_room, p.into_room)));

    SELECT jsonb_build_object(
        'documents', coalesce(array_length(full_docs, 1), 0),
        'documents_redacted', coalesce(array_length(part_docs, 1), 0),
        'units', count(*),
        'chunks', count(*) FILTER (WHERE u.kind = 'chunk'),
        'facts', count(*) FILTER (WHERE u.kind = 'fact'),
        'observations', count(*) FILTER (WHERE u.kind = 'observation'),
        'observations_of_forgotten_sources', coalesce(array_length(obs_gone, 1), 0),
        'sources_requeued', coalesce(array_length(requeue, 1), 0),
        'embeddings', count(u.embedding),
        'lexicon_rows', (SELECT count(*) FROM rcll.unit_lexicon l WHERE l.unit_id = ANY (gone)),
        'entity_mentions', (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.unit_id = ANY (gone)),
        'links', (SELECT count(*) FROM rcll.links l WHERE l.bank_id = b AND (l.from_unit = ANY (gone) OR l.to_unit = ANY (gone))),
        'entities', coalesce(array_length(orphans, 1), 0),
        'versions', (SELECT count(*) FROM rcll.unit_versions v WHERE v.unit_id = ANY (gone)),
        'reopened', coalesce(array_length(reopen, 1), 0),
        'rooms', coalesce(array_length(dead_rooms, 1), 0))
    INTO counts
    FROM rcll.memory_units u WHERE u.unit_id = ANY (gone);
    IF dry_run THEN
        RETURN counts;
    END IF;
    gone_new_rooms := ARRAY(SELECT DISTINCT u.room FROM rcll.memory_units u
                            WHERE u.unit_id = ANY (gone) AND u.room IS NOT NULL AND u.tags @> ARRAY['room-new:' || u.room]);
    -- Extracted facts and observations linked to a forgotten unit: the links a retain made are its
    -- nearest neighbours among the units that existed then (rcll._link_units), so a survivor that
    -- lost a neighbour is linked again, to the neighbours it would have had without it.
    relink := ARRAY(SELECT DISTINCT l.from_unit FROM rcll.links l JOIN rcll.memory_units u ON u.unit_id = l.from_unit
                    WHERE l.bank_id = b AND l.to_unit = ANY (gone) AND l.link_type IN ('entity', 'temporal', 'semantic')
                      AND u.kind IN ('fact', 'observation') AND NOT l.from_unit = ANY (gone));

    -- The BM25 statistics a refresh counted lose exactly what goes: the units and documents that
    -- existed when it ran (written at or before refreshed_at). Later ones it never counted.
    SELECT s.refreshed_at, s.unit_count INTO st FROM rcll.bank_stats s WHERE s.bank_id = b FOR UPDATE;
    IF coalesce(st.unit_count, 0) > 0 THEN
        UPDATE rcll.bank_stats s
        SET unit_count = greatest(s.unit_count - x.n, 0), total_length = greatest(s.total_length - x.len, 0),
            document_count = greatest(s.document_count - (SELECT count(*) FROM rcll.documents d
                                                          WHERE d.document_id = ANY (full_docs) AND d.created_at <= st.refreshed_at), 0)
        FROM (SELECT count(*) AS n, coalesce(sum(u.lexical_length), 0) AS len
              FROM rcll.memory_units u WHERE u.unit_id = ANY (gone) AND u.created_at <= st.refreshed_at) x
        WHERE s.bank_id = b;
    END IF;

    -- Superseded only by a forgotten unit: current again. rcll.supersede closes only open units,
    -- so "current" is an open validity from the same start.
    UPDATE rcll.memory_units u
    SET superseded_by = NULL, valid = tstzrange(lower(u.valid), NULL), updated_at = now()
    WHERE u.unit_id = ANY (reopen);
    UPDATE rcll.memory_units u SET consolidation_state = 'pending', updated_at = now()
    WHERE u.unit_id = ANY (requeue) AND u.consolidation_state <> 'pending';
    -- The consolidation audit row kept the observation's text: the row stays (who, when, which
    -- units), the text goes.
    UPDATE rcll.audit_log a SET detail = a.detail - 'text'
    WHERE a.bank_id = b AND a.action = 'consolidate' AND a.detail ? 'text'
      AND (a.target ->> 'observation')::bigint = ANY (gone);

    DELETE FROM rcll.documents d WHERE d.document_id = ANY (full_docs);
    DELETE FROM rcll.memory_units u WHERE u.unit_id = ANY (gone);
    -- A document that keeps units keeps only their texts: its raw content held the forgotten ones.
    UPDATE rcll.documents d
    SET content = k.content, content_hash = rcll._content_hash(k.content, d.thread),
        metadata = d.metadata || jsonb_build_object('redacted', true)
    FROM (SELECT u.document_id, string_agg(u.text, E'\n\n' ORDER BY u.chunk_index, u.unit_id) AS content
          FROM rcll.memory_units u WHERE u.document_id = ANY (part_docs) GROUP BY u.document_id) k
    WHERE d.document_id = k.document_id;

    FOR grp IN SELECT array_agg(u.unit_id ORDER BY u.unit_id) AS ids,
                      coalesce((SELECT max(x.unit_id) FROM rcll.memory_units x WHERE x.document_id = min(u.document_id)),
                               max(u.unit_id)) AS horizon
               FROM rcll.memory_units u WHERE u.unit_id = ANY (relink)
               GROUP BY coalesce(u.document_id, -u.unit_id) ORDER BY 2 LOOP
        PERFORM rcll._link_units(b, grp.ids, horizon => grp.horizon);
    END LOOP;

    DELETE FROM rcll.entities e WHERE e.entity_id = ANY (orphans);
    -- Survivors are recounted; one that only chunks still name (keyless links,
    -- rcll._link_keyless_entities, which give no type) loses the type and embedding a forgotten
    -- extracted fact gave it.
    UPDATE rcll.entities e
    SET mention_count = k.n,
        entity_type = CASE WHEN k.chunks_only THEN NULL ELSE e.entity_type END,
        embedding = CASE WHEN k.chunks_only THEN NULL ELSE e.embedding END
    FROM (SELECT x.entity_id, count(*) AS n, bool_and(u.kind = 'chunk') AS chunks_only
          FROM unnest(touched) x(entity_id) JOIN rcll.unit_entities ue ON ue.entity_id = x.entity_id
          JOIN rcll.memory_units u ON u.unit_id = ue.unit_id
          GROUP BY x.entity_id) k
    WHERE e.entity_id = k.entity_id AND NOT e.entity_id = ANY (orphans);

    -- A room whose first units went: the janitor tags a room's first write room-new:<room>, and
    -- had the forgotten units never been written, that was the first surviving write - all the
    -- chunks of its statement, or the one fact (facts are inserted one by one).
    UPDATE rcll.memory_units u SET tags = u.tags || ('room-new:' || u.room)
    FROM (SELECT DISTINCT ON (s.room) s.room, s.unit_id, s.document_id, s.kind
          FROM rcll.memory_units s
          WHERE s.bank_id = b AND s.room = ANY (rooms_in) AND NOT s.room = ANY (dead_rooms)
          ORDER BY s.room, s.unit_id) f
    WHERE u.bank_id = b AND u.room = f.room
      AND (u.unit_id = f.unit_id OR (f.kind = 'chunk' AND u.kind = 'chunk' AND u.document_id = f.document_id))
      AND NOT EXISTS (SELECT 1 FROM rcll.memory_units x WHERE x.bank_id = b AND x.room = f.room
                      AND x.tags @> ARRAY['room-new:' || f.room])
      AND EXISTS (SELECT 1 FROM unnest(gone_new_rooms) g WHERE g = f.room);

    IF coalesce(array_length(dead_rooms, 1), 0) > 0 THEN
        -- The fold reads and deletes the count queue: it and this must not interleave.
        PERFORM pg_advisory_xact_lock(hashtext('rcll.fold_room_counts'));
        DELETE FROM rcll.room_count_queue q WHERE q.bank_id = b AND q.room = ANY (dead_rooms);
        DELETE FROM rcll.room_aliases a WHERE a.bank_id = b AND a.room = ANY (dead_rooms);
        DELETE FROM rcll.rooms r WHERE r.bank_id = b AND r.name = ANY (dead_rooms);
    END IF;
    RETURN counts;
END
$$;
COMMENT ON FUNCTION rcll._forget_units(integer, bigint[], bigint[], boolean)
    IS 'Internal: forget these units and documents of a bank with everything derived from them (documents left without units, embeddings, lexicon rows, entity mentions, links, observations of a forgotten source - their surviving sources queued again -, entities left without units, rooms left empty, the refreshed BM25 statistics); a unit superseded by a forgotten one is current again; a document that keeps units is redacted to their texts. dry_run: count, change nothing. Returns the counts per kind. Not executable by PUBLIC: reached through rcll.forget and the expiry sweep.';
REVOKE EXECUTE ON FUNCTION rcll._forget_units(integer, bigint[], bigint[], boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll._forget_log(bank_id integer, bank_name text, action text, selector jsonb,
                                            counts jsonb, reason text)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO rcll.forget_log (bank_id, bank_name, actor, action, selector, counts, reason)
    VALUES (_forget_log.bank_id, _forget_log.bank_name, rcll._actor(), _forget_log.action,
            jsonb_strip_nulls(_forget_log.selector), _forget_log.counts, nullif(btrim(_forget_log.reason), ''))
    RETURNING forget_id
$$;
COMMENT ON FUNCTION rcll._forget_log(integer, text, text, jsonb, jsonb, text)
    IS 'Internal: record a forget in rcll.forget_log (who: rcll._actor(); the selector without its NULL fields; the counts; the reason). Returns the forget_id.';
REVOKE EXECUTE ON FUNCTION rcll._forget_log(integer, text, text, jsonb, jsonb, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll._forget_refuse(field text, message text, hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RAISE EXCEPTION '%: %', field, message USING ERRCODE = 'RC007', COLUMN = field, HINT = hint;
END
$$;
COMMENT ON FUNCTION rcll._forget_refuse(text, text, text) IS 'Internal: refuse a destructive call as too broad or as matching nothing (SQLSTATE RC007, COLUMN = field).';

CREATE OR REPLACE FUNCTION rcll.forget(
    bank          text,
    unit_ids      bigint[] DEFAULT NULL,
    document_ids  bigint[] DEFAULT NULL,
    thread        text DEFAULT NULL,
    author        text DEFAULT NULL,
    tag           text DEFAULT NULL,
    room          text DEFAULT NULL,
    occurred_from timestamptz DEFAULT NULL,
    occurred_to   timestamptz DEFAULT NULL,
    retained_from timestamptz DEFAULT NULL,
    retained_to   timestamptz DEFAULT NULL,
    everything    text DEFAULT NULL,
    dry_run       boolean DEFAULT true,
    reason        text DEFAULT NULL)
RETURNS TABLE (kind text, count bigint)
LANGUAGE plpgsql VOLATILE
-- Definer: forgetting deletes derived rows (entities, room registry, statistics, audit text) a
-- writer may not touch directly. rcll._actable_bank applies the caller's bank isolation; EXECUTE
-- is not PUBLIC's (below).
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b        integer := rcll._actable_bank(forget.bank);
    sel_units bigint[];
    sel_docs bigint[] := '{}';
    rooms_x  text[];
    given    text[] := '{}';
    n_bank   bigint;
    missing  bigint;
    counts   jsonb;
    selector jsonb;
BEGIN
    -- Which selectors were given (NULL = not given); an empty one is a mistake, not "nothing".
    IF unit_ids IS NOT NULL THEN given := given || 'unit_ids'::text; END IF;
    IF document_ids IS NOT NULL THEN given := given || 'document_ids'::text; END IF;
    IF thread IS NOT NULL THEN given := given || 'thread'::text; END IF;
    IF author IS NOT NULL THEN given := given || 'author'::text; END IF;
    IF tag IS NOT NULL THEN given := given || 'tag'::text; END IF;
    IF room IS NOT NULL THEN given := given || 'room'::text; END IF;
    IF occurred_from IS NOT NULL OR occurred_to IS NOT NULL THEN given := given || 'occurred'::text; END IF;
    IF retained_from IS NOT NULL OR retained_to IS NOT NULL THEN given := given || 'retained'::text; END IF;
    IF everything IS NOT NULL THEN
        IF everything IS DISTINCT FROM forget.bank THEN
            RAISE EXCEPTION 'everything: must be the bank''s own name to forget every memory in it' USING ERRCODE = 'RC001',
                COLUMN = 'everything', HINT = format('Pass everything => %L (the bank''s name), or a narrower selector.', forget.bank);
        END IF;
        IF cardinality(given) > 0 THEN
            RAISE EXCEPTION 'everything: cannot be combined with %', array_to_string(given, ', ') USING ERRCODE = 'RC001',
                COLUMN = 'everything', HINT = 'Pass either everything => <bank> or selectors, not both.';
        END IF;
    ELSIF cardinality(given) = 0 THEN
        PERFORM rcll._forget_refuse('selector', 'no selector given: forget would match every memory of the bank',
            'Name what to forget (unit_ids, document_ids, thread, author, tag, room, occurred_from/to, retained_from/to), or pass everything => <bank>.');
    END IF;
    IF cardinality(unit_ids) = 0 THEN
        PERFORM rcll._forget_refuse('unit_ids', 'an empty list matches nothing', 'Pass the ids of the units to forget, or leave unit_ids out.');
    END IF;
    IF cardinality(document_ids) = 0 THEN
        PERFORM rcll._forget_refuse('document_ids', 'an empty list matches nothing', 'Pass the ids of the documents to forget, or leave document_ids out.');
    END IF;
    IF btrim(thread) = '' OR btrim(author) = '' OR btrim(tag) = '' OR btrim(room) = '' THEN
        RAISE EXCEPTION '%: an empty value matches nothing',
            CASE WHEN btrim(thread) = '' THEN 'thread' WHEN btrim(author) = '' THEN 'author'
                 WHEN btrim(tag) = '' THEN 'tag' ELSE 'room' END
            USING ERRCODE = 'RC007',
            COLUMN = CASE WHEN btrim(thread) = '' THEN 'thread' WHEN btrim(author) = '' THEN 'author'
                          WHEN btrim(tag) = '' THEN 'tag' ELSE 'room' END,
            HINT = 'Pass the exact value, or leave the selector out.';
    END IF;
    IF occurred_from >= occurred_to OR retained_from >= retained_to THEN
        RAISE EXCEPTION '%: the range is empty (from is not before to)',
            CASE WHEN occurred_from >= occurred_to THEN 'occurred_to' ELSE 'retained_to' END USING ERRCODE = 'RC001',
            COLUMN = CASE WHEN occurred_from >= occurred_to THEN 'occurred_to' ELSE 'retained_to' END,
            HINT = 'A range is [from, to): from must be before to; leave either out for an open end.';
    END IF;
    -- Ids that are not this bank's are a typo or someone else's: refused, not skipped.
    IF unit_ids IS NOT NULL THEN
        SELECT count(*) INTO missing FROM (SELECT DISTINCT x FROM unnest(unit_ids) x) i
        WHERE NOT EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.unit_id = i.x AND u.bank_id = b);
        IF missing > 0 THEN
            RAISE EXCEPTION 'unit_ids: % of % ids are not units of bank "%"', missing, cardinality(unit_ids), forget.bank
                USING ERRCODE = 'RC003', COLUMN = 'unit_ids', HINT = 'Pass ids recall or rcll.units() returned for this bank.';
        END IF;
    END IF;
    IF document_ids IS NOT NULL THEN
        SELECT count(*) INTO missing FROM (SELECT DISTINCT x FROM unnest(document_ids) x) i
        WHERE NOT EXISTS (SELECT 1 FROM rcll.documents d WHERE d.document_id = i.x AND d.bank_id = b);
        IF missing > 0 THEN
            RAISE EXCEPTION 'document_ids: % of % ids are not documents of bank "%"', missing, cardinality(document_ids), forget.bank
                USING ERRCODE = 'RC003', COLUMN = 'document_ids', HINT = 'Pass document ids retain returned for this bank.';
        END IF;
    END IF;

    IF room IS NOT NULL THEN
        rooms_x := rcll._expand_rooms(b, ARRAY[room]);
    END IF;
    sel_units := ARRAY(
        SELECT u.unit_id FROM rcll.memory_units u
        WHERE u.bank_id = b
          AND (unit_ids IS NULL OR u.unit_id = ANY (unit_ids))
          AND (document_ids IS NULL OR u.document_id = ANY (document_ids))
          AND (thread IS NULL OR u.thread = thread)
          AND (author IS NULL OR u.author = author)
          AND (tag IS NULL OR u.tags @> ARRAY[tag])
          AND (rooms_x IS NULL OR u.room = ANY (rooms_x))
          AND (occurred_from IS NULL OR coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) >= occurred_from)
          AND (occurred_to IS NULL OR coalesce(u.occurred_start, u.mentioned_at, lower(u.valid)) < occurred_to)
          AND (retained_from IS NULL OR u.created_at >= retained_from)
          AND (retained_to IS NULL OR u.created_at < retained_to));
    IF everything IS NOT NULL THEN
        sel_docs := ARRAY(SELECT d.document_id FROM rcll.documents d WHERE d.bank_id = b);
    ELSIF document_ids IS NOT NULL AND given = ARRAY['document_ids'] THEN
        sel_docs := document_ids;   -- a document with no unit left is still forgotten by its id
    END IF;
    IF cardinality(sel_units) = 0 AND cardinality(sel_docs) = 0 AND everything IS NULL THEN
        PERFORM rcll._forget_refuse(CASE WHEN cardinality(given) = 1 THEN given[1] ELSE 'selector' END,
            format('matches nothing in bank "%s"', forget.bank),
            'Check the value (selectors are exact; several selectors must all match), e.g. with rcll.units().');
    END IF;
    IF everything IS NULL THEN
        SELECT count(*) INTO n_bank FROM rcll.memory_units u WHERE u.bank_id = b;
        IF cardinality(sel_units) >= n_bank THEN
            PERFORM rcll._forget_refuse(CASE WHEN cardinality(given) = 1 THEN given[1] ELSE 'selector' END,
                format('matches every memory of bank "%s"', forget.bank),
                format('To forget everything in it, say so: everything => %L (or drop the bank: rcll.drop_bank).', forget.bank));
        END IF;
    END IF;

    counts := rcll._forget_units(b, sel_units, sel_docs, coalesce(dry_run, true));
    IF NOT coalesce(dry_run, true) THEN
        selector := jsonb_build_object('unit_ids', to_jsonb(unit_ids), 'document_ids', to_jsonb(document_ids),
            'thread', thread, 'author', author, 'tag', tag, 'room', room,
            'occurred_from', occurred_from, 'occurred_to', occurred_to,
            'retained_from', retained_from, 'retained_to', retained_to, 'everything', everything IS NOT NULL);
        PERFORM rcll._forget_log(b, forget.bank, 'forget', selector, counts, reason);
    END IF;
    RETURN QUERY SELECT k.key, (k.value)::text::bigint FROM jsonb_each(counts) k ORDER BY k.key;
END
$$;
COMMENT ON FUNCTION rcll.forget(text, bigint[], bigint[], text, text, text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, boolean, text)
    IS 'Forget memories of a bank by selector - unit_ids, document_ids, thread, author, tag, room (with its aliases), occurred_from/occurred_to and retained_from/retained_to ([from, to) ranges); several selectors must all match - or everything => <the bank''s name>. A selector that matches nothing, an empty one, or one that matches every memory without everything is refused (RC007, COLUMN names it); ids of another bank are refused (RC003). dry_run (the default) counts what would go and changes nothing. Otherwise removes the units and everything derived (see rcll._forget_units) in one transaction and records who, when, the selector and the counts in rcll.forget_log - never the content. Returns the count per kind. Under bank isolation only the caller''s own banks.';
REVOKE EXECUTE ON FUNCTION rcll.forget(text, bigint[], bigint[], text, text, text, text, timestamptz, timestamptz, timestamptz, timestamptz, text, boolean, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.forget_state(bank text, room text, key text DEFAULT NULL, all_keys boolean DEFAULT false,
                                             dry_run boolean DEFAULT true, reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b integer := rcll._actable_bank(forget_state.bank);
    n bigint;
BEGIN
    IF room IS NULL OR btrim(room) = '' THEN
        PERFORM rcll._forget_refuse('room', 'a room is required', 'State is keyed by (room, key): name the room exactly.');
    END IF;
    IF key IS NULL AND NOT coalesce(all_keys, false) THEN
        PERFORM rcll._forget_refuse('key', 'no key given: every key of the room would go',
            'Name the key, or pass all_keys => true to forget every key of the room.');
    END IF;
    SELECT count(*) INTO n FROM rcll.room_state s
    WHERE s.bank_id = b AND s.room = forget_state.room AND (key IS NULL OR s.key = key);
    IF n = 0 THEN
        PERFORM rcll._forget_refuse(CASE WHEN key IS NULL THEN 'room' ELSE 'key' END, 'matches no state',
            'Keys and rooms are exact strings: list them with rcll.state_keys(bank).');
    END IF;
    IF NOT coalesce(dry_run, true) THEN
        DELETE FROM rcll.room_state s WHERE s.bank_id = b AND s.room = forget_state.room AND (key IS NULL OR s.key = key);
        PERFORM rcll._forget_log(b, forget_state.bank, 'forget_state',
                                 jsonb_build_object('room', room, 'key', key, 'all_keys', key IS NULL),
                                 jsonb_build_object('state_versions', n), reason);
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.forget_state(text, text, text, boolean, boolean, text)
    IS 'Forget a room''s keyed state with its whole history: one key, or every key of the room with all_keys => true (no key and no all_keys: refused, RC007). dry_run (the default) counts the versions that would go. Recorded in rcll.forget_log without the values. Returns the number of versions.';
REVOKE EXECUTE ON FUNCTION rcll.forget_state(text, text, text, boolean, boolean, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.drop_bank(bank text, confirm text, dry_run boolean DEFAULT true, reason text DEFAULT NULL)
RETURNS TABLE (kind text, count bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b integer := rcll._actable_bank(drop_bank.bank);
    counts jsonb;
BEGIN
    IF confirm IS DISTINCT FROM drop_bank.bank THEN
        PERFORM rcll._forget_refuse('confirm', 'must repeat the bank''s name to drop it',
            format('Pass confirm => %L.', drop_bank.bank));
    END IF;
    SELECT jsonb_build_object(
        'documents', (SELECT count(*) FROM rcll.documents d WHERE d.bank_id = b),
        'units', (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = b),
        'entities', (SELECT count(*) FROM rcll.entities e WHERE e.bank_id = b),
        'links', (SELECT count(*) FROM rcll.links l WHERE l.bank_id = b),
        'rooms', (SELECT count(*) FROM rcll.rooms r WHERE r.bank_id = b),
        'state_versions', (SELECT count(*) FROM rcll.room_state s WHERE s.bank_id = b),
        'audit_rows', (SELECT count(*) FROM rcll.audit_log a WHERE a.bank_id = b),
        'llm_calls', (SELECT count(*) FROM rcll.llm_calls c WHERE c.bank_id = b),
        'banks', 1) INTO counts;
    IF NOT coalesce(dry_run, true) THEN
        -- Every bank table cascades from rcll.banks; the count queue is append-only and has no key
        -- (and the cascade's deletes append to it, so it is emptied after).
        PERFORM pg_advisory_xact_lock(hashtext('rcll.fold_room_counts'));
        DELETE FROM rcll.banks x WHERE x.bank_id = b;
        DELETE FROM rcll.room_count_queue q WHERE q.bank_id = b;
        PERFORM rcll._forget_log(b, drop_bank.bank, 'drop_bank', jsonb_build_object('bank', drop_bank.bank), counts, reason);
    END IF;
    RETURN QUERY SELECT k.key, (k.value)::text::bigint FROM jsonb_each(counts) k ORDER BY k.key;
END
$$;
COMMENT ON FUNCTION rcll.drop_bank(text, text, boolean, text)
    IS 'Drop a whole bank and every row of it (documents, units, entities, links, rooms, state, audit rows, ledger, grants), confirmed by repeating its name (confirm => bank; otherwise RC007). dry_run (the default) counts what would go. The drop itself is recorded in rcll.forget_log, which outlives the bank.';
REVOKE EXECUTE ON FUNCTION rcll.drop_bank(text, text, boolean, text) FROM PUBLIC;


-- functions 255-correct.sql
-- Correct: replace a unit's text with a reason. The unit keeps its id, links and place; its text,
-- embedding and lexical rows become the corrected ones in the same transaction, and the text it
-- replaced is kept as a numbered version (rcll.unit_versions) with who and why.

CREATE OR REPLACE FUNCTION rcll.correct(bank text, unit_id bigint, text text, embedding vector, reason text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
-- Definer: a correction rewrites derived rows (keyless entity links, entity counts) a writer may
-- not touch; rcll._actable_bank applies the caller's bank isolation. EXECUTE is not PUBLIC's.
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b       integer := rcll._actable_bank(correct.bank);
    u       rcll.memory_units%ROWTYPE;
    v       integer;
    why     text := nullif(btrim(correct.reason), '');
    new_text text := btrim(correct.text, E' \t\r\n\f\v');
    touched bigint[];
BEGIN
    SELECT * INTO u FROM rcll.memory_units x WHERE x.unit_id = correct.unit_id AND x.bank_id = b FOR UPDATE;
    IF u.unit_id IS NULL THEN
        RAISE EXCEPTION 'unit_id: % is not a unit of bank "%"', correct.unit_id, correct.bank USING ERRCODE = 'RC003',
            COLUMN = 'unit_id', HINT = 'Pass an id recall or rcll.units() returned for this bank.';
    END IF;
    IF new_text IS NULL OR new_text = '' THEN
        RAISE EXCEPTION 'text: the corrected text is empty' USING ERRCODE = 'RC001', COLUMN = 'text',
            HINT = 'Pass the text the unit should say; to remove it, forget it (rcll.forget).';
    END IF;
    IF why IS NULL THEN
        RAISE EXCEPTION 'reason: a correction needs a reason' USING ERRCODE = 'RC001', COLUMN = 'reason',
            HINT = 'Say why the text was wrong (it is kept in the unit''s history).';
    END IF;
    IF embedding IS NULL AND u.embedding IS NOT NULL THEN
        RAISE EXCEPTION 'embedding: the corrected text needs its embedding' USING ERRCODE = 'RC001', COLUMN = 'embedding',
            HINT = 'Embed the corrected text (Memory.correct does) and pass it; the old one would be a stale copy.';
    END IF;
    IF new_text = u.text THEN
        RAISE EXCEPTION 'text: the unit already says this' USING ERRCODE = 'RC004', COLUMN = 'text',
            HINT = 'Nothing to correct.';
    END IF;
    SELECT coalesce(max(x.version), 0) + 1 INTO v FROM rcll.unit_versions x WHERE x.unit_id = u.unit_id;
    INSERT INTO rcll.unit_versions (unit_id, version, bank_id, text, reason, who)
    VALUES (u.unit_id, v, b, u.text, why, rcll._actor());
    -- units_lexical recomputes lexical from text; units_lexicon_changed and the document-length
    -- triggers carry it to unit_lexicon and document_lexicon: no stale lexical row is left.
    UPDATE rcll.memory_units x
    SET text = new_text, embedding = correct.embedding, updated_at = now(),
        provenance = x.provenance || jsonb_build_object('corrected', jsonb_build_object(
            'version', v + 1, 'who', rcll._actor(), 'at', now()))
    WHERE x.unit_id = u.unit_id;
    -- A chunk's keyless entities (its speaker, the names it writes) come from its text.
    IF u.kind = 'chunk' THEN
        touched := ARRAY(SELECT ue.entity_id FROM rcll.unit_entities ue WHERE ue.unit_id = u.unit_id);
        DELETE FROM rcll.unit_entities ue WHERE ue.unit_id = u.unit_id AND ue.role IN ('speaker', 'name');
        PERFORM rcll._link_keyless_entities(b, ARRAY[u.unit_id]);
        DELETE FROM rcll.entities e WHERE e.entity_id = ANY (touched)
            AND NOT EXISTS (SELECT 1 FROM rcll.unit_entities ue WHERE ue.entity_id = e.entity_id);
        UPDATE rcll.entities e SET mention_count = (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.entity_id = e.entity_id)
        WHERE e.entity_id = ANY (touched);
    END IF;
    PERFORM rcll._audit(b, 'correct', jsonb_build_object('unit_id', u.unit_id),
                        jsonb_build_object('version', v + 1, 'reason', why));
    RETURN v + 1;
END
$$;
COMMENT ON FUNCTION rcll.correct(text, bigint, text, vector, text)
    IS 'Correct a unit''s text with a reason: the text it had is kept as a version in rcll.unit_versions (who, why, when), the unit gets the new text and embedding (pass the embedding of the new text), its lexical rows follow in the same transaction, a chunk''s keyless entity links are re-derived, and an audit row records it (without text). Returns the unit''s new version number. Unknown unit: RC003; empty text or no reason: RC001.';
REVOKE EXECUTE ON FUNCTION rcll.correct(text, bigint, text, vector, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.unit_history(bank text, unit_id bigint)
RETURNS TABLE (version integer, text text, current boolean, since timestamptz, replaced_at timestamptz,
               replaced_by text, reason text)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH u AS (
        SELECT x.unit_id, x.text, x.created_at FROM rcll.memory_units x
        WHERE x.unit_id = unit_history.unit_id AND x.bank_id = rcll._bank_id(unit_history.bank)
    )
    SELECT h.version, h.text, h.current, h.since, h.replaced_at, h.replaced_by, h.reason FROM (
        SELECT v.version, v.text, false AS current,
               coalesce(lag(v.at) OVER (ORDER BY v.version), u.created_at) AS since,
               v.at AS replaced_at, v.who AS replaced_by, v.reason
        FROM rcll.unit_versions v JOIN u ON u.unit_id = v.unit_id
        UNION ALL
        SELECT coalesce((SELECT max(v.version) FROM rcll.unit_versions v WHERE v.unit_id = u.unit_id), 0) + 1,
               u.text, true, coalesce((SELECT max(v.at) FROM rcll.unit_versions v WHERE v.unit_id = u.unit_id), u.created_at),
               NULL, NULL, NULL
        FROM u
    ) h
    ORDER BY h.version DESC
$$;
COMMENT ON FUNCTION rcll.unit_history(text, bigint)
    IS 'Every version of a unit, the current one first: its text, since when it held and, for a replaced version, when, by whom and why it was corrected. No rows for a unit that is not in the bank.';


-- functions 260-expiry.sql
-- Expiry: when a unit expires (a retain's own expiry, the bank's retention policies), and the
-- sweep that forgets expired units with the same cascade as rcll.forget. Recall never waits for
-- the sweep: rcll._in_scope (105) leaves an expired unit out from the instant it expires.

CREATE OR REPLACE FUNCTION rcll._policy_expiry(bank_id integer, room text, hall text, layer text, retained timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT min(_policy_expiry.retained + p.keep) FROM rcll.retention_policies p
    WHERE p.bank_id = _policy_expiry.bank_id
      AND (p.room IS NULL OR p.room = _policy_expiry.room)
      AND (p.hall IS NULL OR p.hall = _policy_expiry.hall)
      AND (p.layer IS NULL OR p.layer = _policy_expiry.layer)
$$;
COMMENT ON FUNCTION rcll._policy_expiry(integer, text, text, text, timestamptz)
    IS 'Internal: when a unit of this bank, room, hall and layer retained at `retained` expires under the bank''s retention policies (the earliest matching one), or NULL.';

CREATE OR REPLACE FUNCTION rcll._units_expiry()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer: writers need not read the policies table to be bound by it.
SECURITY DEFINER
AS $$
DECLARE
    asked timestamptz := nullif(current_setting('rcll.expires_at', true), '')::timestamptz;
BEGIN
    -- The earliest of: the expiry the writer set (column, or rcll.expires_at for the transaction,
    -- which the retain verbs set from expires_at / ttl) and the bank's policies for the unit.
    IF least(NEW.expires_at, asked) IS NOT NULL THEN
        -- The writer's own expiry is remembered, so a policy removed later gives it back.
        NEW.provenance := NEW.provenance || jsonb_build_object('expires_at', least(NEW.expires_at, asked));
    END IF;
    NEW.expires_at := least(NEW.expires_at, asked,
                            rcll._policy_expiry(NEW.bank_id, NEW.room, NEW.hall, NEW.layer, NEW.created_at));
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION rcll._units_expiry() IS 'Trigger: a new unit''s expires_at is the earliest of the one written, the transaction''s rcll.expires_at setting (a retain''s expires_at or ttl) and the bank''s retention policies for its room, hall and layer (after the janitor trigger set them).';

-- Named to fire after units_janitor (triggers fire in name order), which settles room and layer.
CREATE OR REPLACE TRIGGER units_retention BEFORE INSERT ON rcll.memory_units
    FOR EACH ROW WHEN (current_setting('row_security') <> 'off' OR NOT rcll._restoring('rcll.memory_units'))
    EXECUTE FUNCTION rcll._units_expiry();

CREATE OR REPLACE FUNCTION rcll.set_retention(bank text, keep interval, room text DEFAULT NULL, hall text DEFAULT NULL,
                                              layer text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
#variable_conflict use_variable
DECLARE
    b integer := rcll._actable_bank(set_retention.bank);
    n bigint;
BEGIN
    IF keep IS NOT NULL AND keep <= interval '0' THEN
        RAISE EXCEPTION 'keep: must be a positive interval' USING ERRCODE = 'RC001', COLUMN = 'keep',
            HINT = 'E.g. keep => ''90 days''; pass NULL to remove the policy.';
    END IF;
    IF layer IS NOT NULL AND layer NOT IN ('L0', 'L1', 'L2') THEN
        RAISE EXCEPTION 'layer: % is not a layer', quote_literal(layer) USING ERRCODE = 'RC001', COLUMN = 'layer',
            HINT = 'Use L0, L1 or L2 (or NULL for any layer).';
    END IF;
    IF keep IS NULL THEN
        DELETE FROM rcll.retention_policies p WHERE p.bank_id = b AND p.room IS NOT DISTINCT FROM room
            AND p.hall IS NOT DISTINCT FROM hall AND p.layer IS NOT DISTINCT FROM layer;
    ELSE
        INSERT INTO rcll.retention_policies AS p (bank_id, room, hall, layer, keep, created_by)
        VALUES (b, room, hall, layer, keep, rcll._actor())
        ON CONFLICT ON CONSTRAINT retention_policies_bank_id_room_hall_layer_key
        DO UPDATE SET keep = excluded.keep, created_by = excluded.created_by,
            created_at = now();
    END IF;
    -- Units already retained follow the policies as they are now (their own expiry, if earlier, stays).
    UPDATE rcll.memory_units u
    SET expires_at = x.e
    FROM (SELECT v.unit_id, least(nullif(v.own, 'infinity'), rcll._policy_expiry(b, v.room, v.hall, v.layer, v.created_at)) AS e
          FROM (SELECT u2.unit_id, u2.room, u2.hall, u2.layer, u2.created_at,
                       coalesce((u2.provenance ->> 'expires_at')::timestamptz, 'infinity') AS own
                FROM rcll.memory_units u2
                WHERE u2.bank_id = b AND (room IS NULL OR u2.room = room) AND (hall IS NULL OR u2.hall = hall)
                  AND (layer IS NULL OR u2.layer = layer)) v) x
    WHERE u.unit_id = x.unit_id AND u.expires_at IS DISTINCT FROM x.e;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM rcll._audit(b, 'retention', jsonb_build_object('room', room, 'hall', hall, 'layer', layer),
                        jsonb_build_object('keep', keep::text, 'units_changed', n));
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.set_retention(text, interval, text, text, text)
    IS 'Set (keep => interval) or remove (keep => NULL) a bank''s retention policy for all units or those of one room, hall and/or layer; the bank''s existing units follow at once (each unit expires at the earliest of its own expiry and the matching policies, counted from when it was retained). Audited. Returns the number of units whose expiry changed.';
REVOKE EXECUTE ON FUNCTION rcll.set_retention(text, interval, text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION rcll.retention_policies(bank text)
RETURNS TABLE (room text, hall text, layer text, keep interval, units bigint, expired bigint, created_by text,
               created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p.room, p.hall, p.layer, p.keep,
           (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = p.bank_id AND (p.room IS NULL OR u.room = p.room)
              AND (p.hall IS NULL OR u.hall = p.hall) AND (p.layer IS NULL OR u.layer = p.layer)),
           (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = p.bank_id AND u.expires_at <= now()
              AND (p.room IS NULL OR u.room = p.room) AND (p.hall IS NULL OR u.hall = p.hall)
              AND (p.layer IS NULL OR u.layer = p.layer)),
           p.created_by, p.created_at
    FROM rcll.retention_policies p
    WHERE p.bank_id = rcll._bank_id(retention_policies.bank)
    ORDER BY p.room NULLS FIRST, p.hall NULLS FIRST, p.layer NULLS FIRST
$$;
COMMENT ON FUNCTION rcll.retention_policies(bank text)
    IS 'A bank''s retention policies (NULL room, hall, layer: any), each with the units it covers and how many of them have expired and await the sweep.';

CREATE OR REPLACE FUNCTION rcll.expire(bank text DEFAULT NULL, batch integer DEFAULT 10000)
RETURNS TABLE (bank_name text, units bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
AS $$
DECLARE
    r record;
    ids bigint[];
    counts jsonb;
BEGIN
    -- Per bank, at most `batch` units per call (the periodic job calls again next round): a long
    -- backlog never becomes one long transaction.
    FOR r IN SELECT b.bank_id, b.name FROM rcll.banks b
             WHERE (expire.bank IS NULL OR b.bank_id = rcll._actable_bank(expire.bank))
               AND EXISTS (SELECT 1 FROM rcll.memory_units u WHERE u.bank_id = b.bank_id AND u.expires_at <= now())
             ORDER BY b.bank_id LOOP
        ids := ARRAY(SELECT u.unit_id FROM rcll.memory_units u
                     WHERE u.bank_id = r.bank_id AND u.expires_at <= now()
                     ORDER BY u.expires_at, u.unit_id LIMIT greatest(coalesce(expire.batch, 10000), 1));
        counts := rcll._forget_units(r.bank_id, ids, '{}', false);
        INSERT INTO rcll.forget_log (bank_id, bank_name, actor, action, selector, counts)
        VALUES (r.bank_id, r.name, 'system:expire', 'expire', jsonb_build_object('expired_before', now()), counts);
        bank_name := r.name;
        units := (counts ->> 'units')::bigint;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION rcll.expire(text, integer)
    IS 'The expiry sweep: forget units whose expires_at has passed, with the same cascade as rcll.forget (rcll._forget_units), at most `batch` per bank per call, each bank''s sweep recorded in rcll.forget_log (actor system:expire). One bank, or every bank when bank is NULL (the periodic jobs, Memory.upkeep). Returns the units forgotten per bank.';
REVOKE EXECUTE ON FUNCTION rcll.expire(text, integer) FROM PUBLIC;


-- functions 300-export.sql
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
            USING ERRCODE = '22023',
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
COMMENT ON FUNCTION rcll.export_max_ids(text) IS 'The largest identity per exported table of a bank, for the export manifest; rcll.import_begin() moves each sequence past it so renumbered rows never take an id a later row of the import keeps.';


-- functions 310-import.sql
-- Import: load an export (rcll.export_rows output) back, exactly, in one transaction.
--
--   BEGIN;
--   SELECT rcll.import_begin(bank_row => '<the banks.jsonl line>', on_conflict => 'error', max_ids => '<manifest max_ids>');
--   SELECT rcll.import_rows('documents', '[<rows>]');  -- ... every table in rcll.export_tables() order
--   SELECT rcll.import_finish();
--   COMMIT;
--
-- Rows are written as exported: the write-path triggers (janitor, author resolution, room counts)
-- are switched off for the insert - they already ran when the rows were first written, and running
-- them again would rewrite authors, rooms and tags. Ids are kept; an id another bank already uses
-- is renumbered, and every column holding it (rcll.export_tables().refs) follows. Importing needs
-- the tables' owner (ALTER TABLE ... DISABLE TRIGGER), so a read-only or agent role cannot import.

CREATE OR REPLACE FUNCTION rcll._import_state()
RETURNS TABLE (bank_id integer, bank_name text, fresh boolean, on_conflict text)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF to_regclass('pg_temp.rcll_import_state') IS NULL THEN
        RAISE EXCEPTION 'import_begin: no import in progress in this session' USING ERRCODE = '55000',
            HINT = 'Call rcll.import_begin(bank_row, on_conflict, max_ids) first, in the same transaction.';
    END IF;
    RETURN QUERY EXECUTE 'SELECT s.bank_id, s.bank_name, s.fresh, s.on_conflict FROM pg_temp.rcll_import_state s';
END
$$;
COMMENT ON FUNCTION rcll._import_state() IS 'Internal: the import in progress in this session (set by rcll.import_begin), or an error naming the fix.';

CREATE OR REPLACE FUNCTION rcll._import_ref(table_name text, old jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n bigint;
BEGIN
    IF old IS NULL OR jsonb_typeof(old) = 'null' THEN
        RETURN old;
    END IF;
    EXECUTE 'SELECT m.new_id FROM pg_temp.rcll_import_ids m WHERE m.tbl = $1 AND m.old_id = $2'
        INTO n USING table_name, (old #>> '{}')::bigint;
    RETURN coalesce(to_jsonb(n), old);
END
$$;
COMMENT ON FUNCTION rcll._import_ref(text, jsonb) IS 'Internal: the id an exported identity of table_name has in this database (renumbered when another bank held it, else unchanged).';

CREATE OR REPLACE FUNCTION rcll._import_execute(table_name text, stmt text, rows jsonb, bank_id integer)
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
            USING ERRCODE = '23505',
            HINT = 'Import into an empty database, or choose on_conflict => ''skip'' (keep existing rows) or ''replace'' (overwrite them).';
    END;
    FOREACH t IN ARRAY trg LOOP
        EXECUTE format('ALTER TABLE %s ENABLE TRIGGER %I', rel, t);
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll._import_execute(text, text, jsonb, integer) IS 'Internal: run one statement of an import ($1 the rows, $2 the bank id) on an rcll table with its enabled user triggers switched off, and exactly those on again; a unique violation is reported as the import''s on_conflict error. Needs the table owner; transactional, so a failed import leaves the triggers as they were. Returns the rows written.';

CREATE OR REPLACE FUNCTION rcll._import_sequence(table_name text, id_column text, at_least bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    seq  text := pg_get_serial_sequence(format('rcll.%I', table_name), id_column);
    top  bigint;
    last bigint;
    called boolean;
BEGIN
    top := rcll._max_id(table_name, id_column);
    EXECUTE format('SELECT s.last_value, s.is_called FROM %s s', seq) INTO last, called;
    top := greatest(coalesce(top, 0), coalesce(at_least, 0), CASE WHEN called THEN last ELSE last - 1 END);
    IF top > 0 THEN
        PERFORM setval(seq, top, true);
    END IF;
END
$$;
COMMENT ON FUNCTION rcll._import_sequence(text, text, bigint) IS 'Internal: move an identity sequence past the table''s largest id and at_least (never backwards).';

CREATE OR REPLACE FUNCTION rcll.import_begin(bank_row jsonb, on_conflict text DEFAULT 'error', max_ids jsonb DEFAULT '{}')
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    bname  text := bank_row ->> 'name';
    b      integer;
    fresh  boolean;
    t      record;
BEGIN
    IF on_conflict IS NULL OR on_conflict NOT IN ('error', 'skip', 'replace') THEN
        RAISE EXCEPTION 'on_conflict: % is not a conflict policy', coalesce(quote_literal(on_conflict), 'NULL')
            USING ERRCODE = '22023',
            HINT = 'Use error (the default: refuse rows that already exist), skip (keep what is there) or replace (overwrite it).';
    END IF;
    IF bank_row IS NULL OR jsonb_typeof(bank_row) <> 'object' OR bname IS NULL THEN
        RAISE EXCEPTION 'bank_row: must be the exported banks row (a JSON object with a name)' USING ERRCODE = '22023',
            HINT = 'Pass the one line of banks.jsonl from the export.';
    END IF;
    IF max_ids IS NULL OR jsonb_typeof(max_ids) <> 'object' THEN
        RAISE EXCEPTION 'max_ids: must be a JSON object' USING ERRCODE = '22023',
            HINT = 'Pass the manifest''s max_ids, or ''{}''.';
    END IF;
    -- A fresh slate for this session's import bookkeeping.
    DROP TABLE IF EXISTS pg_temp.rcll_import_state, pg_temp.rcll_import_ids, pg_temp.rcll_import_pending;
    CREATE TEMP TABLE rcll_import_state (bank_id integer, bank_name text, fresh boolean, on_conflict text,
                                         counts jsonb NOT NULL DEFAULT '{}');
    CREATE TEMP TABLE rcll_import_ids (tbl text, old_id bigint, new_id bigint, PRIMARY KEY (tbl, old_id));
    CREATE TEMP TABLE rcll_import_pending (unit_id bigint PRIMARY KEY, superseded_by bigint NOT NULL);

    FOR t IN SELECT * FROM rcll.export_tables() e WHERE e.id_column IS NOT NULL LOOP
        PERFORM rcll._import_sequence(t.table_name, t.id_column, (max_ids ->> t.table_name)::bigint);
    END LOOP;

    SELECT x.bank_id INTO b FROM rcll.banks x WHERE x.name = bname FOR UPDATE;
    fresh := b IS NULL;
    IF NOT fresh THEN
        IF on_conflict = 'error' THEN
            RAISE EXCEPTION 'bank: bank "%" already exists in this database', bname USING ERRCODE = '23505',
                HINT = 'Import into an empty database, or choose on_conflict => ''skip'' (keep existing rows) or ''replace'' (overwrite them).';
        ELSIF on_conflict = 'replace' THEN
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
    INSERT INTO pg_temp.rcll_import_state (bank_id, bank_name, fresh, on_conflict) VALUES (b, bname, fresh, on_conflict);
    RETURN b;
END
$$;
COMMENT ON FUNCTION rcll.import_begin(jsonb, text, jsonb) IS 'Start importing one exported bank in this transaction: creates the bank from its exported row (keeping its id when free) or, when a bank of that name exists, refuses (on_conflict error), keeps it (skip) or overwrites its settings (replace). max_ids (the manifest''s) moves sequences past every exported id. Follow with rcll.import_rows per table and rcll.import_finish. Returns the bank id.';

CREATE OR REPLACE FUNCTION rcll.import_rows(table_name text, rows jsonb)
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
BEGIN
    SELECT * INTO st FROM rcll._import_state();
    SELECT e.* INTO t FROM rcll._export_table(table_name) e;
    IF table_name = 'banks' THEN
        RAISE EXCEPTION 'table_name: the banks row is imported by rcll.import_begin' USING ERRCODE = '22023';
    END IF;
    IF rows IS NULL OR jsonb_typeof(rows) <> 'array' THEN
        RAISE EXCEPTION 'rows: must be a JSON array of exported rows' USING ERRCODE = '22023',
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
            INSERT INTO pg_temp.rcll_import_ids (tbl, old_id, new_id)
            SELECT 'documents', (x ->> 'document_id')::bigint, d.document_id
            FROM jsonb_array_elements(rows) x
            JOIN rcll.documents d ON d.bank_id = st.bank_id AND d.content_hash = decode(substr(x ->> 'content_hash', 3), 'hex')
            WHERE d.document_id <> (x ->> 'document_id')::bigint
            ON CONFLICT DO NOTHING;
        ELSIF t.table_name = 'entities' AND NOT st.fresh THEN
            INSERT INTO pg_temp.rcll_import_ids (tbl, old_id, new_id)
            SELECT 'entities', (x ->> 'entity_id')::bigint, e.entity_id
            FROM jsonb_array_elements(rows) x
            JOIN rcll.entities e ON e.bank_id = st.bank_id AND e.name = x ->> 'name'
            WHERE e.entity_id <> (x ->> 'entity_id')::bigint
            ON CONFLICT DO NOTHING;
        END IF;
        EXECUTE format(
            'INSERT INTO pg_temp.rcll_import_ids (tbl, old_id, new_id) '
            'SELECT %L, s.old, nextval(%L) FROM (SELECT DISTINCT (x ->> %L)::bigint AS old FROM jsonb_array_elements($1) x) s '
            'WHERE NOT EXISTS (SELECT 1 FROM pg_temp.rcll_import_ids m WHERE m.tbl = %L AND m.old_id = s.old) '
            '  AND EXISTS (SELECT 1 FROM %s y WHERE y.%I = s.old AND y.bank_id <> $2) '
            'ORDER BY s.old',
            t.table_name, seq, t.id_column, t.table_name, rel, t.id_column) USING rows, st.bank_id;
    END IF;

    -- 2. Each row as this database will hold it: this bank's id, identities mapped.
    fix := format('x || jsonb_build_object(%L, %s', 'bank_id', st.bank_id);
    IF t.id_column IS NOT NULL THEN
        fix := fix || format(', %L, rcll._import_ref(%L, x -> %L)', t.id_column, t.table_name, t.id_column);
    END IF;
    FOR k, v IN SELECT r.key, r.value #>> '{}' FROM jsonb_each(t.refs) r LOOP
        IF t.table_name = 'memory_units' AND k = 'superseded_by' THEN
            fix := fix || ', ''superseded_by'', NULL';   -- set by import_finish, once every unit exists
        ELSE
            fix := fix || format(', %L, rcll._import_ref(%L, x -> %L)', k, v, k);
        END IF;
    END LOOP;
    fix := fix || ')';
    IF t.table_name = 'memory_units' THEN
        INSERT INTO pg_temp.rcll_import_pending (unit_id, superseded_by)
        SELECT (rcll._import_ref('memory_units', x -> 'unit_id') #>> '{}')::bigint, (x ->> 'superseded_by')::bigint
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

    n := rcll._import_execute(t.table_name, stmt, rows, st.bank_id);
    EXECUTE 'UPDATE pg_temp.rcll_import_state SET counts = counts || jsonb_build_object($1::text, coalesce((counts ->> $1)::bigint, 0) + $2)'
        USING t.table_name, n;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.import_rows(text, jsonb) IS 'Import a batch of exported rows (a JSON array of rcll.export_rows lines) of one table into the bank rcll.import_begin started, exactly as exported: write-path triggers off, ids kept unless another bank holds them (then renumbered consistently), conflicts handled by the import''s on_conflict. Returns the number of rows written.';

CREATE OR REPLACE FUNCTION rcll.import_finish()
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    st     record;
    t      record;
    counts jsonb;
    missing bigint;
BEGIN
    SELECT * INTO st FROM rcll._import_state();
    -- Supersession links, now that every unit of the import exists.
    EXECUTE 'SELECT count(*) FROM pg_temp.rcll_import_pending p WHERE NOT EXISTS ('
            'SELECT 1 FROM rcll.memory_units u WHERE u.unit_id = (rcll._import_ref(''memory_units'', to_jsonb(p.superseded_by)) #>> ''{}'')::bigint)'
        INTO missing;
    IF missing > 0 THEN
        RAISE EXCEPTION 'memory_units: % unit(s) are superseded by units the import does not contain', missing
            USING ERRCODE = '23503', HINT = 'Import every table of the export (memory_units.jsonl in full).';
    END IF;
    PERFORM rcll._import_execute('memory_units',
        'UPDATE rcll.memory_units u SET superseded_by = (rcll._import_ref(''memory_units'', to_jsonb(p.superseded_by)) #>> ''{}'')::bigint '
        'FROM pg_temp.rcll_import_pending p WHERE u.unit_id = p.unit_id AND u.bank_id = $2', NULL, st.bank_id);

    FOR t IN SELECT * FROM rcll.export_tables() e WHERE e.id_column IS NOT NULL LOOP
        PERFORM rcll._import_sequence(t.table_name, t.id_column, 0);
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

    EXECUTE 'SELECT counts FROM pg_temp.rcll_import_state' INTO counts;
    -- Audited database-wide (bank_id NULL): the bank's own rows stay exactly as exported.
    PERFORM rcll._audit(NULL, 'import', jsonb_build_object('bank', st.bank_name, 'bank_id', st.bank_id),
                        jsonb_build_object('on_conflict', st.on_conflict, 'fresh', st.fresh, 'rows', counts));
    DROP TABLE IF EXISTS pg_temp.rcll_import_state, pg_temp.rcll_import_ids, pg_temp.rcll_import_pending;
    RETURN jsonb_build_object('bank', st.bank_name, 'bank_id', st.bank_id, 'fresh', st.fresh, 'rows', counts);
END
$$;
COMMENT ON FUNCTION rcll.import_finish() IS 'Finish the import rcll.import_begin started: set supersession links, move sequences past the imported ids, recount room counts and BM25 statistics when the bank already existed, and record the import in rcll.audit_log (database-wide, so the bank''s rows stay as exported). Returns the bank and rows written per table.';


-- functions 400-browse.sql
-- Browsing a bank as a person does (the console): its floor plan, its units by filter, merges to decide, state keys.

CREATE OR REPLACE FUNCTION rcll.floor_plan(bank text)
RETURNS TABLE (name text, status text, merged_into text, proposed_into text, fact_count bigint, aliases text[],
               created_by text, first_used timestamptz, last_used timestamptz,
               halls jsonb, layers jsonb, authors jsonb)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT rcll._bank_id(floor_plan.bank);           -- an unknown bank is an error, rows or not
    -- One pass over the bank's units (grouping sets) gives every room's halls, layers and writers;
    -- the registry columns come from rcll.rooms(), so the two listings cannot disagree.
    WITH b AS (SELECT rcll._bank_id(floor_plan.bank) AS id),
    g AS (
        -- GROUPING(hall, layer, author) is a bit mask of the columns grouped away: 7 the room
        -- alone, 3 by hall, 5 by layer, 6 by author.
        SELECT u.room, u.hall, u.layer, u.author, count(*) AS n, GROUPING(u.hall, u.layer, u.author) AS gs
        FROM rcll.memory_units u, b
        WHERE u.bank_id = b.id
        GROUP BY GROUPING SETS ((u.room), (u.room, u.hall), (u.room, u.layer), (u.room, u.author))
    ),
    profile AS (
        SELECT g.room,
               sum(g.n) FILTER (WHERE g.gs = 7)::bigint AS n,
               coalesce(jsonb_object_agg(coalesce(g.hall, '(untyped)'), g.n) FILTER (WHERE g.gs = 3), '{}') AS halls,
               coalesce(jsonb_object_agg(g.layer, g.n) FILTER (WHERE g.gs = 5), '{}') AS layers,
               coalesce(jsonb_object_agg(coalesce(g.author, '(none)'), g.n) FILTER (WHERE g.gs = 6), '{}') AS authors
        FROM g GROUP BY g.room
    )
    SELECT r.name, r.status, r.merged_into, r.proposed_into, r.fact_count, r.aliases, r.created_by,
           r.first_used, r.last_used,
           coalesce(p.halls, '{}'), coalesce(p.layers, '{}'), coalesce(p.authors, '{}')
    FROM rcll.rooms(floor_plan.bank) r
    LEFT JOIN profile p ON p.room = r.name
    UNION ALL   -- units filed in no room are part of the plan too (a room filter never matches them)
    SELECT NULL, 'none', NULL, NULL, p.n, '{}', NULL, NULL, NULL, p.halls, p.layers, p.authors
    FROM profile p WHERE p.room IS NULL
    ORDER BY 5 DESC, 1 NULLS LAST
$$;
COMMENT ON FUNCTION rcll.floor_plan(text) IS 'The floor plan of a bank for people: every room as rcll.rooms() lists it (exact unit count, status, merge target or pending proposal, aliases, who created it, first/last use) with its units counted by hall, by layer and by author (JSON objects; (untyped) and (none) for missing values), plus one row with a NULL name for units in no room.';

CREATE OR REPLACE FUNCTION rcll.units(
    bank      text,
    rooms     text[] DEFAULT NULL,
    halls     text[] DEFAULT NULL,
    layers    text[] DEFAULT NULL,
    authors   text[] DEFAULT NULL,
    tags_any  text[] DEFAULT NULL,
    tags_all  text[] DEFAULT NULL,
    threads   text[] DEFAULT NULL,
    time_from timestamptz DEFAULT NULL,
    time_to   timestamptz DEFAULT NULL,
    "limit"   integer DEFAULT 50,
    "offset"  integer DEFAULT 0)
RETURNS TABLE (unit_id bigint, kind text, text text, room text, hall text, layer text, author text,
               author_source text, thread text, tags text[], at timestamptz, occurred_start timestamptz,
               mentioned_at timestamptz, created_at timestamptz, superseded_by bigint, document_id bigint,
               total bigint)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- An unknown bank is an error, not an empty page: checked by a statement of its own, which
    -- runs even when no row would ever reach the bank test below.
    SELECT rcll._bank_id(units.bank);
    -- A listing, not a recall: no ranking, newest first by when the unit happened (else was said,
    -- else was written). rooms expand like a recall's (an alias or merged name reads its room);
    -- superseded units are listed too, marked by superseded_by. total counts every match.
    WITH b AS (SELECT rcll._bank_id(units.bank) AS id),
    scope AS (SELECT b.id, rcll._expand_rooms(b.id, units.rooms) AS rooms FROM b)
    SELECT u.unit_id, u.kind, u.text, u.room, u.hall, u.layer, u.author, u.author_source, u.thread, u.tags,
           coalesce(u.occurred_start, u.mentioned_at, u.created_at), u.occurred_start, u.mentioned_at,
           u.created_at, u.superseded_by, u.document_id, count(*) OVER ()
    FROM rcll.memory_units u, scope s
    WHERE u.bank_id = s.id
      AND (s.rooms IS NULL OR u.room = ANY (s.rooms))
      AND (units.halls IS NULL OR u.hall = ANY (units.halls))
      AND (units.layers IS NULL OR u.layer = ANY (units.layers))
      AND (units.authors IS NULL OR u.author = ANY (units.authors))
      AND (units.tags_any IS NULL OR u.tags && units.tags_any)
      AND (units.tags_all IS NULL OR u.tags @> units.tags_all)
      AND (units.threads IS NULL OR u.thread = ANY (units.threads))
      AND (units.time_from IS NULL OR coalesce(u.occurred_start, u.mentioned_at, u.created_at) >= units.time_from)
      AND (units.time_to IS NULL OR coalesce(u.occurred_start, u.mentioned_at, u.created_at) < units.time_to)
    ORDER BY coalesce(u.occurred_start, u.mentioned_at, u.created_at) DESC, u.unit_id DESC
    LIMIT least(greatest(coalesce(units."limit", 50), 0), 500) OFFSET greatest(coalesce(units."offset", 0), 0)
$$;
COMMENT ON FUNCTION rcll.units(text, text[], text[], text[], text[], text[], text[], text[], timestamptz, timestamptz, integer, integer) IS 'Browse a bank''s units by filter (rooms with their aliases and merged names, halls, layers, authors, tags any / all, threads, and [time_from, time_to) on when each happened, else was said, else was written), newest first, "limit" at most 500 per page from "offset". Not a recall: nothing is ranked. total is the number of matches.';

CREATE OR REPLACE FUNCTION rcll.merge_proposals(bank text, include_decided boolean DEFAULT false)
RETURNS TABLE (proposal_id bigint, from_room text, into_room text, reason text, status text,
               proposed_by text, proposed_at timestamptz, decided_by text, decided_at timestamptz,
               from_units bigint, into_units bigint)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT rcll._bank_id(merge_proposals.bank);      -- an unknown bank is an error, rows or not
    -- What a person decides on: the pending proposals first (oldest first), each with the number
    -- of units that would move and that the target already holds.
    SELECT p.proposal_id, p.from_room, p.into_room, p.reason, p.status, p.proposed_by, p.proposed_at,
           coalesce((SELECT a.actor FROM rcll.audit_log a   -- the person, when the server named one
                     WHERE a.bank_id = p.bank_id AND a.action = 'room_merge_decision'
                       AND a.detail ->> 'proposal_id' = p.proposal_id::text
                     ORDER BY a.audit_id DESC LIMIT 1), p.decided_by),
           p.decided_at,
           (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = p.bank_id AND u.room = p.from_room),
           (SELECT count(*) FROM rcll.memory_units u WHERE u.bank_id = p.bank_id AND u.room = p.into_room)
    FROM rcll.room_merge_proposals p
    WHERE p.bank_id = rcll._bank_id(merge_proposals.bank)
      AND (p.status = 'pending' OR coalesce(merge_proposals.include_decided, false))
    ORDER BY p.status <> 'pending', CASE WHEN p.status = 'pending' THEN p.proposed_at END, p.decided_at DESC, p.proposal_id
$$;
COMMENT ON FUNCTION rcll.merge_proposals(text, boolean) IS 'Room merge proposals of a bank awaiting a person (rcll.approve_room_merge / rcll.reject_room_merge), oldest first, with the units that would move (from_units) and those already in the target (into_units); include_decided adds approved and rejected ones, newest decision first, decided_by naming the person when the server recorded one (rcll.decide_room_merge).';

CREATE OR REPLACE FUNCTION rcll.state_keys(bank text, rooms text[] DEFAULT NULL)
RETURNS TABLE (room text, key text, version integer, value jsonb, provenance jsonb, created_at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT rcll._bank_id(state_keys.bank);           -- an unknown bank is an error, rows or not
    -- Exact room strings, like rcll.get_state: state is keyed, never resolved by spelling.
    SELECT DISTINCT ON (s.room, s.key) s.room, s.key, s.version, s.value, s.provenance, s.created_at
    FROM rcll.room_state s
    WHERE s.bank_id = rcll._bank_id(state_keys.bank)
      AND (state_keys.rooms IS NULL OR s.room = ANY (state_keys.rooms))
    ORDER BY s.room, s.key, s.version DESC
$$;
COMMENT ON FUNCTION rcll.state_keys(text, text[]) IS 'Every keyed state of a bank (or of the rooms named, exactly as stored) at its current version, with its provenance; rcll.state_history(bank, room, key) lists the versions of one.';

CREATE OR REPLACE FUNCTION rcll.decide_room_merge(bank text, from_room text, approve boolean, reason text DEFAULT NULL,
                                                  person text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    b   integer := rcll._bank_id(bank);
    who text := nullif(btrim(person), '');
    n   bigint := 0;
BEGIN
    -- The person is the server's word, like rcll.agent: only a member of rcll_identity_server (the
    -- RCLL server, which authenticated them) may name one. Agents stay refused by approve itself.
    IF who IS NOT NULL AND NOT rcll._identity_server() THEN
        RAISE EXCEPTION 'person: only the RCLL server names the person deciding' USING ERRCODE = '42501',
            HINT = 'Decide as yourself: leave person NULL (the audit then names your role).';
    END IF;
    IF approve IS NULL THEN
        RAISE EXCEPTION 'approve: say true (approve) or false (reject)' USING ERRCODE = '22004';
    ELSIF approve THEN
        n := rcll.approve_room_merge(bank, from_room);
    ELSE
        PERFORM rcll.reject_room_merge(bank, from_room, reason);
    END IF;
    IF who IS NOT NULL THEN
        -- approve/reject audited the decision as the server's role; this row names who made it.
        PERFORM rcll._audit(b, 'room_merge_decision', jsonb_build_object('from_room', d.from_room, 'into_room', d.into_room),
                            jsonb_build_object('proposal_id', d.proposal_id, 'decision', d.status,
                                               'reason', decide_room_merge.reason, 'units_moved', n),
                            actor => 'person:' || who)
        FROM (SELECT mp.* FROM rcll.room_merge_proposals mp
              WHERE mp.bank_id = b AND mp.from_room = btrim(decide_room_merge.from_room) AND mp.status <> 'pending'
              ORDER BY mp.decided_at DESC, mp.proposal_id DESC
              LIMIT 1) d;
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION rcll.decide_room_merge(text, text, boolean, text, text) IS 'A person decides a pending room merge: approve (rcll.approve_room_merge; refused for agents) or reject (rcll.reject_room_merge with reason). person names who decided, for the audit log (a room_merge_decision row with actor person:<name>); only the RCLL server (a member of rcll_identity_server) may pass it. Returns the number of units moved (0 for a rejection).';


-- functions 990-search-path.sql
-- The search_path every rcll function runs with, declared once for the whole schema instead of in
-- each header: `pg_catalog, pg_temp`, so that no caller's search_path can put an object of theirs in
-- front of a name a function means (every name inside a function is schema-qualified, and pgvector
-- and pg_trgm objects are written as public.*). This file runs last, after every CREATE OR REPLACE
-- (which resets a function's settings), on CREATE EXTENSION, extension updates and `rcll install`
-- alike, so a new function cannot be left without it (tests/test_schema.py checks every one).
--
-- The exceptions are the SQL helpers written to be inlined into their callers' queries: any SET
-- clause stops the planner from inlining a function. They read no table and call only built-in
-- operators (tests/test_channel_plans.py checks that the plans hold _in_scope's and _in_time_range's
-- columns and _bm25_term's arithmetic, not a call; _last_words is inlined into the fusion's rows).
DO $$
DECLARE
    routine regprocedure;
BEGIN
    FOR routine IN
        SELECT p.oid::regprocedure
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'rcll'::regnamespace
          AND p.prokind IN ('f', 'p')
          AND p.proname NOT IN ('_in_scope', '_in_time_range', '_keyless_link', '_bm25_term', '_last_words')
          AND NOT EXISTS (SELECT FROM pg_catalog.unnest(p.proconfig) setting
                          WHERE setting LIKE 'search\_path=%')
    LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s SET search_path = pg_catalog, pg_temp', routine);
    END LOOP;
END
$$;

