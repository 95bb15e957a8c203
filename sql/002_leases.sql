-- mqproc job store, version 2: early-acked deliveries and republishing.
-- A job that runs longer than --ack-after has its delivery acked while it runs; from then
-- on the row alone carries it. If its holder dies (lease expired), any server's sweeper
-- puts it back to QUEUED and republishes the stored request (republish = true until the
-- broker confirmed the copy).

ALTER TABLE mqproc_jobs
  ADD COLUMN delivery_acked boolean NOT NULL DEFAULT false, -- the holder acked its delivery early
  ADD COLUMN republish      boolean NOT NULL DEFAULT false, -- QUEUED and no message in the broker yet
  ADD COLUMN request_format text NOT NULL DEFAULT 'json'    -- encoding of the request: json | yaml
    CHECK (request_format IN ('json', 'yaml'));

CREATE INDEX mqproc_jobs_sweep_idx ON mqproc_jobs (processor_name, lease_until)
  WHERE delivery_acked OR republish;
