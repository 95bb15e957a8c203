-- mqproc job store, version 1: the job table (source of truth), one row per try, and
-- the record of every message the server gave up on. Applied by `mqproc migrate` (or
-- `--migrate`) inside one transaction; docs/protocol.md documents every column.

CREATE TABLE mqproc_jobs (
  job_id            text PRIMARY KEY,
  processor_name    text NOT NULL,
  state             text NOT NULL DEFAULT 'QUEUED'
                    CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCESS', 'FAILED', 'CANCELLED')),
  attempt           integer NOT NULL DEFAULT 0,   -- claims so far; the fencing token
  tries             integer NOT NULL DEFAULT 0,   -- processor runs so far, all attempts
  deliveries        integer NOT NULL DEFAULT 0,   -- deliveries seen (incl. duplicates)
  requeues          integer NOT NULL DEFAULT 0,   -- nacks with requeue after failed attempts
  worker_id         text,                         -- holder of the current attempt
  lease_until       timestamptz,                  -- RUNNING only: holder's lease
  created_time      timestamptz,                  -- the message's created_time
  queued_at         timestamptz NOT NULL DEFAULT now(), -- first seen by a server
  start_time        timestamptz,                  -- current attempt started
  end_time          timestamptz,                  -- terminal state reached
  exec_time_ms      bigint,                       -- successful try's run time
  request           jsonb,                        -- the decoded processing message
  last_error        text,
  log_path          text,                         -- per-job log file
  result_published  boolean NOT NULL DEFAULT false, -- result message confirmed by the broker
  callback_state    text CHECK (callback_state IN ('OK', 'FAILED')),
  callback_error    text,
  updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX mqproc_jobs_state_idx ON mqproc_jobs (processor_name, state);
CREATE INDEX mqproc_jobs_lease_idx ON mqproc_jobs (lease_until) WHERE state = 'RUNNING';

CREATE TABLE mqproc_job_tries (
  job_id       text NOT NULL REFERENCES mqproc_jobs (job_id) ON DELETE CASCADE,
  try          integer NOT NULL,                  -- 1-based over the whole job
  attempt      integer NOT NULL,
  worker_id    text NOT NULL,
  started_at   timestamptz NOT NULL DEFAULT now(),
  ended_at     timestamptz,
  ok           boolean,
  exit_code    integer,
  term_signal  integer,
  duration_ms  bigint,
  error        text,
  PRIMARY KEY (job_id, try)
);

CREATE TABLE mqproc_dead_letters (
  id              bigserial PRIMARY KEY,
  processor_name  text NOT NULL,
  job_id          text,                            -- when one could be read
  reason          text NOT NULL,
  body            bytea NOT NULL,                  -- the message exactly as received
  worker_id       text,
  received_at     timestamptz NOT NULL DEFAULT now()
);
