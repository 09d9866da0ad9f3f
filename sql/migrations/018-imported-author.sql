-- Run-once: a unit that arrived in an import names its author as provenance only.
--
-- An export stream is untrusted: whatever author it claims, the unit was written here by whoever
-- imported it. Such a unit keeps the stream's author in provenance ("imported") and is marked
-- author_source 'imported' with no author, so no authors filter, mine or author tag counts it.
ALTER TABLE rcll.memory_units DROP CONSTRAINT memory_units_author_source_check;
ALTER TABLE rcll.memory_units ADD CONSTRAINT memory_units_author_source_check
    CHECK (author_source IN ('server', 'self_declared', 'none', 'imported'));
COMMENT ON COLUMN rcll.memory_units.author_source IS 'How author was resolved: server (authenticated identity), self_declared (caller''s word, no server identity), none, imported (arrived in an import: no author here; the stream''s claim is in provenance.imported).';
