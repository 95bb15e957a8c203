-- mqproc job store, version 6: no log file per job.
-- log_text: the output of a job's first try when it succeeded within --log-inline-max bytes
--   (its header line included), written by the success's own statement; no log file is made
--   for such a job and log_path stays NULL. A try that fails, or writes more, makes the job's
--   log file as before (log_path), with that output first; later tries append there.
--   Purging the row removes its log_text; log files stay until removed (docs/operations.md).

ALTER TABLE mqproc_jobs
  ADD COLUMN log_text text;
