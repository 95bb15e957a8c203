-- mqproc job store, version 3: dead letters of early-acked jobs survive their holder.
-- A job that ends FAILED after its delivery was acked early has no broker message left to
-- redeliver: if its holder dies before the broker confirmed the dead letter, the outbox
-- sweep (any server) sends it from the stored request. Cleared once confirmed.

ALTER TABLE mqproc_jobs
  ADD COLUMN dead_letter_pending boolean NOT NULL DEFAULT false;
