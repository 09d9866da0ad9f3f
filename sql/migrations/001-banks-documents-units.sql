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
