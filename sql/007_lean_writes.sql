-- mqproc job store, version 7: lean job writes (docs/performance.md, "The cost per job").
-- A job's hot path wrote its wide mqproc_jobs row three times (claim, success, the
-- outbox's end), each version into up to nine indexes, plus a try row and its update, and
-- the request twice. Now:
-- mqproc_outbox: the outcome of a final job that its holder still sends (its delivery was
--   acked at the success): a narrow row the success inserts and the sent outcome deletes;
--   the outbox sweep (any server) takes over a dead holder's row. The job row is not
--   written a third time.
-- Try rows (mqproc_job_tries) only for tries that failed or were cut short: a try that
--   succeeded is the job row's (worker_id, start_time, end_time, exec_time_ms).
-- The request is stored once, as its bytes (request_body); the jsonb `request` stays for
--   rows written before and is no longer written.
-- Indexes whose keys or predicates a job's own writes change cost each write: the state
--   index is now partial (queued and running jobs only: what stats count live), and the
--   lease index, which no statement read, is gone.

CREATE TABLE mqproc_outbox (
  job_id          text PRIMARY KEY,
  processor_name  text NOT NULL,
  attempt         integer NOT NULL,              -- the attempt that recorded the outcome
  lease_until     timestamptz NOT NULL,          -- its sender's lease (renewed while it sends)
  dead_letter     boolean NOT NULL DEFAULT false -- FAILED: its dead letter is not confirmed
);

CREATE INDEX mqproc_outbox_sweep_idx ON mqproc_outbox (processor_name, lease_until);

-- what was in the outbox: the final rows an early-acked holder still sent
INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until, dead_letter)
  SELECT job_id, processor_name, attempt, coalesce(lease_until, now()), dead_letter_pending
  FROM mqproc_jobs WHERE delivery_acked AND state IN ('SUCCESS', 'FAILED', 'CANCELLED');
UPDATE mqproc_jobs SET delivery_acked = false, dead_letter_pending = false, lease_until = NULL
  WHERE delivery_acked AND state IN ('SUCCESS', 'FAILED', 'CANCELLED');

DROP INDEX mqproc_jobs_state_idx;
DROP INDEX mqproc_jobs_lease_idx;
CREATE INDEX mqproc_jobs_active_idx ON mqproc_jobs (processor_name, state)
  WHERE state IN ('QUEUED', 'RUNNING');

-- Every try, as operators read them: the rows of tries that failed or were cut short, and
-- the try that succeeded, from its job's row.
CREATE VIEW mqproc_all_tries AS
  SELECT job_id, try, attempt, worker_id, started_at, ended_at, ok, exit_code, term_signal,
         duration_ms, error
  FROM mqproc_job_tries
  UNION ALL
  SELECT j.job_id, j.tries, j.attempt, coalesce(j.worker_id, ''), j.start_time, j.end_time, true,
         0, NULL, j.exec_time_ms, NULL
  FROM mqproc_jobs j
  WHERE j.state = 'SUCCESS' AND j.tries > 0
    AND NOT EXISTS (SELECT 1 FROM mqproc_job_tries t WHERE t.job_id = j.job_id AND t.try = j.tries);
