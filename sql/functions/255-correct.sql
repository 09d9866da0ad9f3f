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
    -- Its keyless links may name an entity a concurrent forget is dropping: wait for it.
    PERFORM rcll._bank_write_guard(b, false);
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
    SELECT coalesce(max(x.version), 0) + 1 INTO v FROM rcll.unit_versions x WHERE x.bank_id = b AND x.unit_id = u.unit_id;
    INSERT INTO rcll.unit_versions (unit_id, version, bank_id, text, reason, who)
    VALUES (u.unit_id, v, b, u.text, why, rcll._actor());
    -- units_lexical recomputes lexical from text; units_lexicon_changed and the document-length
    -- triggers carry it to unit_lexicon and document_lexicon: no stale lexical row is left.
    UPDATE rcll.memory_units x
    SET text = new_text, embedding = correct.embedding, updated_at = now(),
        provenance = x.provenance || jsonb_build_object('corrected', jsonb_build_object(
            'version', v + 1, 'who', rcll._actor(), 'at', now()))
    WHERE x.bank_id = b AND x.unit_id = u.unit_id;
    -- A chunk's keyless entities (its speaker, the names it writes) come from its text.
    IF u.kind = 'chunk' THEN
        touched := ARRAY(SELECT ue.entity_id FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.unit_id = u.unit_id);
        DELETE FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.unit_id = u.unit_id AND ue.role IN ('speaker', 'name');
        PERFORM rcll._link_keyless_entities(b, ARRAY[u.unit_id]);
        DELETE FROM rcll.entities e WHERE e.bank_id = b AND e.entity_id = ANY (touched)
            AND NOT EXISTS (SELECT 1 FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.entity_id = e.entity_id);
        UPDATE rcll.entities e SET mention_count = (SELECT count(*) FROM rcll.unit_entities ue WHERE ue.bank_id = b AND ue.entity_id = e.entity_id)
        WHERE e.bank_id = b AND e.entity_id = ANY (touched);
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
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    -- The bank as a value that every table below is filtered by: on a Citus cluster the statement
    -- then runs whole on the bank's worker (a join of the unit with its versions by unit_id alone
    -- is refused there: not joined on the distribution column).
    bk  integer := rcll._bank_id(unit_history.bank);
    uid bigint := unit_history.unit_id;
BEGIN
    RETURN QUERY
    WITH u AS (
        SELECT x.unit_id, x.text, x.created_at FROM rcll.memory_units x
        WHERE x.bank_id = bk AND x.unit_id = uid
    ),
    v AS (
        SELECT y.version, y.text, y.at, y.who, y.reason FROM rcll.unit_versions y
        WHERE y.bank_id = bk AND y.unit_id = uid
    )
    SELECT h.version, h.text, h.current, h.since, h.replaced_at, h.replaced_by, h.reason FROM (
        SELECT v.version, v.text, false AS current,
               coalesce(lag(v.at) OVER (ORDER BY v.version), u.created_at) AS since,
               v.at AS replaced_at, v.who AS replaced_by, v.reason
        FROM v CROSS JOIN u
        UNION ALL
        SELECT coalesce((SELECT max(v.version) FROM v), 0) + 1,
               u.text, true, coalesce((SELECT max(v.at) FROM v), u.created_at),
               NULL, NULL, NULL
        FROM u
    ) h
    ORDER BY h.version DESC;
END
$$;
COMMENT ON FUNCTION rcll.unit_history(text, bigint)
    IS 'Every version of a unit, the current one first: its text, since when it held and, for a replaced version, when, by whom and why it was corrected. No rows for a unit that is not in the bank.';
