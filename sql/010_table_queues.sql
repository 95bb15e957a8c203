-- mqproc job store, version 10: table queues (docs/table-queue.md). The database can be the
-- queue too: `--queue postgresql://…` keeps every queue's messages in mqproc_messages, a
-- row per message, and a server takes them with FOR UPDATE SKIP LOCKED (store/queue.c).
--
-- A message is ready (consumer NULL) or held (consumer = the worker id of the server that
-- took it, visible_at = the deadline its holder keeps pushing out while it holds it). A
-- take marks up to n ready messages of a queue held, highest priority first, then oldest,
-- and also takes back held ones whose deadline passed (their holder died); an ack deletes
-- the message, fenced by its holder and its delivery count (a holder whose deadline passed
-- and whose message another server took deletes nothing).

CREATE TABLE mqproc_messages (
  id            bigserial PRIMARY KEY,                     -- the delivery tag; never reused
  queue         text NOT NULL,                             -- the queue (a job queue is its
                                                           -- processor's name)
  priority      integer NOT NULL DEFAULT 0,                -- higher first (AMQP's 0-255)
  body          bytea NOT NULL,                            -- the message as sent
  content_type  text NOT NULL DEFAULT 'application/json',
  message_id    text,                                      -- a result's: its job id
  headers       jsonb,                                     -- AMQP-style headers, an object
  enqueued_at   timestamptz NOT NULL DEFAULT now(),
  visible_at    timestamptz NOT NULL DEFAULT now(),        -- held: its holder's deadline
  deliveries    integer NOT NULL DEFAULT 0,                -- takes so far (> 1: redelivered)
  consumer      text                                       -- its holder's worker id; NULL:
                                                           -- ready
);

-- The take walks the ready messages of one queue in its order and stops after n: a key
-- range, however many messages other servers hold (held ones are not in this index).
CREATE INDEX mqproc_messages_ready_idx ON mqproc_messages (queue, priority DESC, id)
  WHERE consumer IS NULL;
-- Held messages by deadline: the take's look for expired ones (a dead holder's) and the
-- reset of a server's own at its (re)connect.
CREATE INDEX mqproc_messages_held_idx ON mqproc_messages (queue, visible_at)
  WHERE consumer IS NOT NULL;

-- The channel a queue's new messages are told on: one per queue, so a NOTIFY wakes only
-- the servers (and other listeners) of that queue; "mqproc_q_" and the first 32 hex digits
-- of the SHA-256 of the queue's name (a channel name has at most 63 bytes, a queue's 255).
CREATE FUNCTION mqproc_queue_channel(queue text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 'mqproc_q_' || left(encode(sha256(convert_to(queue, 'UTF8')), 'hex'), 32)
$$;

-- A producer without our code: SELECT mqproc_enqueue('ocrd-tesserocr', '{"job_id": …}');
-- returns the message's id. Servers consuming the queue are woken by a NOTIFY on the
-- queue's channel (mqproc_queue_channel(queue)) with the queue's name, sent when the
-- transaction commits.
CREATE FUNCTION mqproc_enqueue(queue text, body bytea, priority integer DEFAULT 0,
                               message_id text DEFAULT NULL,
                               content_type text DEFAULT 'application/json',
                               headers jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  new_id bigint;
BEGIN
  INSERT INTO mqproc_messages AS m (queue, priority, body, content_type, message_id, headers)
    VALUES (mqproc_enqueue.queue, coalesce(mqproc_enqueue.priority, 0), mqproc_enqueue.body,
            coalesce(mqproc_enqueue.content_type, 'application/json'),
            mqproc_enqueue.message_id, mqproc_enqueue.headers)
    RETURNING m.id INTO new_id;
  PERFORM pg_notify(mqproc_queue_channel(mqproc_enqueue.queue), mqproc_enqueue.queue);
  RETURN new_id;
END $$;

-- The same with the body as text (a JSON or YAML document), stored as its UTF-8 bytes.
CREATE FUNCTION mqproc_enqueue(queue text, body text, priority integer DEFAULT 0,
                               message_id text DEFAULT NULL,
                               content_type text DEFAULT 'application/json',
                               headers jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE sql AS $$
  SELECT mqproc_enqueue($1, convert_to($2, 'UTF8'), $3, $4, $5, $6)
$$;
