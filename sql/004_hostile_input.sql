-- mqproc job store, version 4: what an unusual or hostile message must not break.
-- request_body: the message exactly as received. A republish and the outbox send and decode
-- these very bytes, not the jsonb copy: jsonb normalises numbers (1e20 comes back as a
-- 21-digit integer that other JSON parsers refuse), so the jsonb is for queries only.
-- Dead letters keep at most --max-message-size bytes of a body, with the body's full length
-- and its SHA-256, so a huge message cannot fill the table.

ALTER TABLE mqproc_jobs
  ADD COLUMN request_body bytea;

ALTER TABLE mqproc_dead_letters
  ADD COLUMN body_len    bigint,
  ADD COLUMN body_sha256 bytea;
