-- mqproc job store, version 9: OCR-D's Processing Server API over the job table
-- (`mqproc processing-api`, docs/ocrd.md). Nothing of it lives only in a process's memory:
-- mqproc_jobs.state gains CACHED: a job the API accepted that waits for a page lock or a
--   job it depends on. It has its row and its request from the start, and no message until
--   it is released (QUEUED, republish set: sent by the API, else by a server's sweep).
-- mqproc_ocrd_tools: each processor's ocrd-tool description, as its servers print it when
--   they start (`--dump-json` of an OCR-D program, a C processor's ocrd_tool_json): what
--   GET /processor/info answers and parameters are checked against.
-- mqproc_ocrd_jobs: what the API knows of its jobs beyond their rows: the workspace (the
--   page locks' key: path_to_mets, else workspace_id), the output groups and pages the job
--   writes, the jobs it depends on, its workflow run. A job holds its pages while its row is
--   QUEUED or RUNNING: the lock is the row's state, so a lost callback or a restart cannot
--   leave a page locked, and a waiting job is released by whoever looks next (the API on a
--   result callback, its sweep, `mqproc submit --workflow`).
-- mqproc_workflows: stored workflow scripts (POST /workflow); mqproc_workflow_jobs: their
--   runs (POST /workflow/run), the processing jobs of each page in task order.

ALTER TABLE mqproc_jobs DROP CONSTRAINT IF EXISTS mqproc_jobs_state_check;
ALTER TABLE mqproc_jobs ADD CONSTRAINT mqproc_jobs_state_check
  CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCESS', 'FAILED', 'CANCELLED', 'CACHED'));
CREATE INDEX mqproc_jobs_cached_idx ON mqproc_jobs (job_id) WHERE state = 'CACHED';

CREATE TABLE mqproc_ocrd_tools (
  processor_name  text PRIMARY KEY,
  tool            jsonb NOT NULL,                 -- the ocrd-tool.json entry of the processor
  worker_id       text,                           -- the server that stored it last
  updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE mqproc_ocrd_jobs (
  job_id           text PRIMARY KEY REFERENCES mqproc_jobs (job_id) ON DELETE CASCADE,
  seq              bigserial NOT NULL,            -- order of arrival: who waits first goes first
  workspace        text NOT NULL,                 -- path_to_mets, else workspace_id
  output_file_grps jsonb NOT NULL,                -- the groups it writes
  pages            jsonb,                         -- the pages it writes; NULL: every page
  depends_on       jsonb NOT NULL DEFAULT '[]',   -- job ids that must end SUCCESS first
  workflow_job_id  text,
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mqproc_ocrd_jobs_ws_idx ON mqproc_ocrd_jobs (workspace, seq);
CREATE INDEX mqproc_ocrd_jobs_wf_idx ON mqproc_ocrd_jobs (workflow_job_id)
  WHERE workflow_job_id IS NOT NULL;

CREATE TABLE mqproc_workflows (
  workflow_id     text PRIMARY KEY,
  content         text NOT NULL,
  content_hash    text NOT NULL,                  -- md5 of the content, as OCR-D's
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mqproc_workflows_hash_idx ON mqproc_workflows (content_hash);

CREATE TABLE mqproc_workflow_jobs (
  job_id             text PRIMARY KEY,
  workflow_id        text,                        -- the stored script it ran, if any
  path_to_mets       text NOT NULL,
  page_id            text NOT NULL DEFAULT '',
  page_wise          boolean NOT NULL DEFAULT false,
  processing_job_ids jsonb NOT NULL,              -- {page or "": [job ids in task order]}
  callback_url       text,                        -- POSTed once when every job ended
  state              text,                        -- SUCCESS or FAILED once every job ended
  ended_at           timestamptz,
  callback_state     text CHECK (callback_state IN ('OK', 'FAILED')),
  callback_error     text,
  created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mqproc_workflow_jobs_open_idx ON mqproc_workflow_jobs (created_at)
  WHERE ended_at IS NULL;
