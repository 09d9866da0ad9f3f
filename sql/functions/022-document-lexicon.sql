-- Each document's BM25 length (rcll.document_lexicon, migration 014): recomputed from
-- rcll.unit_lexicon, in the writing transaction, for every document whose units a statement
-- inserts, deletes or changes the length or document of.

CREATE OR REPLACE FUNCTION rcll._refresh_document_lengths(bank_id integer, document_ids bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
-- A custom plan: the bank folds into a constant, so on a Citus cluster the statement is pruned to
-- the bank's own shards (a trigger on a shard may reach local shards only).
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    -- Recomputed, not incremented: a statement that touches a document twice, or a unit copied
    -- late (rcll._units_lexicon's insert arm), cannot make the length drift from its units. Only
    -- the document's own bank's units count: the trigger runs as the owner, past bank isolation,
    -- and a unit another bank's role pointed at this document must not change its length. One
    -- bank a call, joined on it: on a Citus cluster the statement then runs on the bank's own shards.
    INSERT INTO rcll.document_lexicon AS x (document_id, bank_id, lexical_length)
    SELECT d.document_id, d.bank_id, coalesce(sum(l.lexical_length), 0)
    FROM rcll.documents d
    LEFT JOIN rcll.unit_lexicon l ON l.bank_id = d.bank_id AND l.document_id = d.document_id
    WHERE d.bank_id = _refresh_document_lengths.bank_id AND d.document_id = ANY (_refresh_document_lengths.document_ids)
    GROUP BY d.document_id, d.bank_id
    ON CONFLICT ON CONSTRAINT document_lexicon_pkey DO UPDATE SET lexical_length = excluded.lexical_length
    WHERE x.lexical_length IS DISTINCT FROM excluded.lexical_length;
END
$$;
COMMENT ON FUNCTION rcll._refresh_document_lengths(integer, bigint[])
    IS 'Internal: recompute rcll.document_lexicon for these documents of one bank from their units in rcll.unit_lexicon.';

CREATE OR REPLACE FUNCTION rcll._document_lexicon()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Definer, as rcll._units_lexicon: the length is the owner's bookkeeping, and bank isolation
-- must not hide a document's row from the trigger that keeps it.
SECURITY DEFINER
AS $$
DECLARE
    per_bank record;
BEGIN
    -- Bank by bank (a statement's rows are one bank's but for an import or a bank drop).
    IF TG_OP = 'INSERT' THEN
        FOR per_bank IN SELECT n.bank_id, array_agg(DISTINCT n.document_id) AS ids FROM new_rows n
                        WHERE n.document_id IS NOT NULL GROUP BY n.bank_id LOOP
            PERFORM rcll._refresh_document_lengths(per_bank.bank_id, per_bank.ids);
        END LOOP;
    ELSIF TG_OP = 'DELETE' THEN
        FOR per_bank IN SELECT o.bank_id, array_agg(DISTINCT o.document_id) AS ids FROM old_rows o
                        WHERE o.document_id IS NOT NULL GROUP BY o.bank_id LOOP
            PERFORM rcll._refresh_document_lengths(per_bank.bank_id, per_bank.ids);
        END LOOP;
    ELSE
        PERFORM rcll._refresh_document_lengths(OLD.bank_id, ARRAY[OLD.document_id]);
        PERFORM rcll._refresh_document_lengths(NEW.bank_id, ARRAY[NEW.document_id]);
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
