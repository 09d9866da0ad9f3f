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
