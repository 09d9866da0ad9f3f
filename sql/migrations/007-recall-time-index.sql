-- Run-once: the index the temporal recall channel reads (when a unit happened, else when it was said).

-- One expression for "when": occurred_start for extracted facts, mentioned_at for chunks (whose
-- occurred_start is unknown), the start of validity otherwise. Without it the temporal channel
-- reads every unit of the bank.
CREATE INDEX memory_units_bank_when ON rcll.memory_units
    (bank_id, (coalesce(occurred_start, mentioned_at, lower(valid))));
