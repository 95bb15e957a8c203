-- mqproc job store, version 5: operating a fleet (docs/operations.md).
-- mqproc_workers: one row per processing server, refreshed every interval_ms by its loop;
--   a row not refreshed for three intervals is a dead server (`mqproc workers` says so,
--   and a job it holds is taken over then, not only when its lease ends). A server that
--   finds a holder on its own host whose pid is gone marks it 'dead' at once.
-- mqproc_control: the operator's standing wish for a processor (worker_id '' = all its
--   servers) or one server: pause or drain; resume deletes the row. Servers read it on
--   every refresh and when `mqproc pause|resume|drain` notifies channel mqproc_control.
-- mqproc_audit: every operator action (who, when, what, how many rows).
-- mqproc_jobs gains the message's AMQP headers and priority, and cancel_requested (the
--   holder of a RUNNING job stops it and records CANCELLED).

CREATE TABLE mqproc_workers (
  worker_id       text PRIMARY KEY,
  processor_name  text NOT NULL,
  host            text NOT NULL,
  pid             integer NOT NULL,
  version         text NOT NULL,
  started_at      timestamptz NOT NULL,
  last_seen       timestamptz NOT NULL DEFAULT now(),
  interval_ms     integer NOT NULL,               -- how often the row is refreshed
  state           text NOT NULL
                  CHECK (state IN ('starting', 'running', 'paused', 'draining', 'stopped', 'dead')),
  concurrency     integer NOT NULL,
  in_flight       integer NOT NULL DEFAULT 0,     -- jobs held now
  jobs_done       bigint NOT NULL DEFAULT 0,      -- ended SUCCESS on this server
  jobs_failed     bigint NOT NULL DEFAULT 0,      -- tries that failed on this server
  current_jobs    text[] NOT NULL DEFAULT '{}',   -- job ids held now (at most 20)
  restarts        integer NOT NULL DEFAULT 0,     -- --instances: restarts of this slot
  note            text                            -- e.g. a supervisor's crash-loop backoff
);

CREATE INDEX mqproc_workers_processor_idx ON mqproc_workers (processor_name, last_seen);
CREATE INDEX mqproc_workers_host_idx ON mqproc_workers (host) WHERE state NOT IN ('stopped', 'dead');

CREATE TABLE mqproc_control (
  processor_name  text NOT NULL,
  worker_id       text NOT NULL DEFAULT '',       -- '' = every server of the processor
  wish            text NOT NULL CHECK (wish IN ('pause', 'drain')),
  set_by          text NOT NULL,
  set_at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (processor_name, worker_id)
);

CREATE TABLE mqproc_audit (
  id              bigserial PRIMARY KEY,
  at              timestamptz NOT NULL DEFAULT now(),
  actor           text NOT NULL,                  -- user@host of the operator
  action          text NOT NULL,                  -- submit, retry, cancel, purge, pause, ...
  target          text NOT NULL,                  -- processor, job ids or the filter
  rows_affected   bigint NOT NULL,
  detail          jsonb
);

ALTER TABLE mqproc_jobs
  ADD COLUMN headers          jsonb,                          -- AMQP headers of the message
  ADD COLUMN priority         smallint,                       -- AMQP priority, when given
  ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false, -- mqproc jobs cancel
  ADD COLUMN attempt_base     integer NOT NULL DEFAULT 0;     -- attempt at the last
                                                              -- `mqproc jobs retry`: the
                                                              -- attempt limit counts from it

-- `mqproc jobs list` pages newest first by (queued_at, job_id), filtered by state or
-- processor; `stats` and `purge` read finished jobs by end_time. Every index costs each
-- claim and outcome a write, so the rare cases get partial ones: the state index leaves
-- out SUCCESS (most rows; a SUCCESS list walks the plain list index), and a server's beat
-- finds the cancels of its jobs through the (empty, almost always) cancel index.
CREATE INDEX mqproc_jobs_list_idx ON mqproc_jobs (queued_at DESC, job_id DESC);
CREATE INDEX mqproc_jobs_proc_list_idx ON mqproc_jobs (processor_name, queued_at DESC, job_id DESC);
CREATE INDEX mqproc_jobs_state_list_idx ON mqproc_jobs (state, queued_at DESC, job_id DESC)
  WHERE state <> 'SUCCESS';
CREATE INDEX mqproc_jobs_end_idx ON mqproc_jobs (processor_name, end_time)
  WHERE end_time IS NOT NULL;
CREATE INDEX mqproc_jobs_cancel_idx ON mqproc_jobs (worker_id) WHERE cancel_requested;
