-- mqproc job store, version 8: dead letters for operators (`mqproc dead-letters
-- list|show|requeue|purge`, the count in `mqproc stats`).
-- requeued_at, requeued_by: when and by whom a dead letter's body was published back to
--   its job queue (`mqproc dead-letters requeue`); the row stays, the record of what
--   arrived, and is not requeued twice by a bulk requeue.
-- The indexes serve a processor's dead letters newest first (and their count) and the
-- purge by age; the whole table is never read for either.

ALTER TABLE mqproc_dead_letters
  ADD COLUMN requeued_at timestamptz,
  ADD COLUMN requeued_by text;

CREATE INDEX mqproc_dead_letters_processor_idx ON mqproc_dead_letters (processor_name, id);
CREATE INDEX mqproc_dead_letters_received_idx ON mqproc_dead_letters (received_at);
