-- Run-once: room_count_queue has no primary key (an append-only queue of deltas), so logical
-- replication could not send its deletes - and on a Citus cluster a shard move or a rebalance
-- that keeps taking writes (shard_transfer_mode auto, the default; it copies a shard group by
-- logical replication) refused the whole bank group. FULL: a delete is sent with its whole row.
-- Costs nothing on one node (no publication reads it); see docs/scaling.md.
ALTER TABLE rcll.room_count_queue REPLICA IDENTITY FULL;
