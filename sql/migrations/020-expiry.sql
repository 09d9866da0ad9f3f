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
