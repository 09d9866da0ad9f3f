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
