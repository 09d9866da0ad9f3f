-- Run-once: what each mention said of its entity, so that forgetting a unit can give the entities
-- it touched back the type, spellings and name the surviving mentions alone would have given them.
-- An entity's type is set by its first typed mention, its aliases are every spelling a mention
-- gave it (the first entity to receive a spelling keeps it), its name is its first mention's
-- spelling: all three are replayed from these columns, in unit order, by rcll._forget_units.
-- NULL on links written before this migration (what they said is not known: those entities keep
-- what they have).
ALTER TABLE rcll.unit_entities ADD COLUMN entity_type text;
ALTER TABLE rcll.unit_entities ADD COLUMN spellings text[];
COMMENT ON COLUMN rcll.unit_entities.entity_type IS 'The type this mention gave its entity (the extractor''s), if any.';
COMMENT ON COLUMN rcll.unit_entities.spellings IS 'The spellings this mention gave its entity, as written: the name first, then the extractor''s aliases (keyless links: the spelling in the text; known-entity mentions: the spelling matched). NULL: written before rcll recorded them.';
-- The mentions that may carry a spelling their entity did not receive (an extractor's alias that
-- another entity already held): the only ones a forget must look through when that spelling is freed.
CREATE INDEX unit_entities_aliased ON rcll.unit_entities (bank_id, unit_id) WHERE cardinality(spellings) > 1;
