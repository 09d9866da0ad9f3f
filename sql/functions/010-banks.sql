-- Banks: creating them and resolving a bank name to its id with an error that says the fix.

CREATE OR REPLACE FUNCTION rcll._bank_id(bank text)
RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
-- On a Citus cluster a bank-scoped statement that names its bank by name is sent whole to the
-- worker holding the bank, this call inside it; there it reads rcll.banks, a reference table,
-- which Citus refuses from inside a query on a shard unless told. Its copy is on every node and
-- never moves, so the read is right wherever it runs. On one node: an unused placeholder.
SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    id integer;
BEGIN
    IF bank IS NULL THEN
        RAISE EXCEPTION 'bank: a bank name is required' USING ERRCODE = 'RC001', COLUMN = 'bank',
            HINT = 'Pass bank => ''name''; list banks with SELECT * FROM rcll.banks.';
    END IF;
    SELECT b.bank_id INTO id FROM rcll.banks b WHERE b.name = bank;
    IF id IS NULL THEN
        RAISE EXCEPTION 'bank: unknown bank "%"', bank USING ERRCODE = 'RC002', COLUMN = 'bank',
            HINT = format('Create it first: SELECT rcll.create_bank(%L) or `rcll bank create %s`.', bank, bank);
    END IF;
    RETURN id;
END
$$;
COMMENT ON FUNCTION rcll._bank_id(text) IS 'Internal: the bank_id of a bank name; raises RC002 (unknown bank, COLUMN bank) naming the fix when the bank does not exist.';

CREATE OR REPLACE FUNCTION rcll.create_bank(name text, description text DEFAULT NULL,
                                            text_search_config regconfig DEFAULT 'english')
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    id integer;
BEGIN
    IF name IS NULL OR name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
        RAISE EXCEPTION 'bank: invalid bank name %', coalesce(quote_literal(name), 'NULL') USING ERRCODE = 'RC001', COLUMN = 'bank',
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
    -- Counted per bank and joined, not by a subquery per bank: on a Citus cluster each count then
    -- runs on the shards (grouped by the distribution column) and banks is a reference table.
    SELECT b.name, b.description, coalesce(u.n, 0), coalesce(d.n, 0), b.created_at
    FROM rcll.banks b
    LEFT JOIN (SELECT u.bank_id, count(*) AS n FROM rcll.memory_units u GROUP BY u.bank_id) u ON u.bank_id = b.bank_id
    LEFT JOIN (SELECT d.bank_id, count(*) AS n FROM rcll.documents d GROUP BY d.bank_id) d ON d.bank_id = b.bank_id
    ORDER BY b.name
$$;
COMMENT ON FUNCTION rcll.list_banks() IS 'Every bank with its unit and document counts.';
