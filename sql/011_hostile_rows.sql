-- mqproc job store, version 11: a table queue's row is untrusted input, as an AMQP message
-- is (docs/table-queue.md, "What a producer may write"). Whatever a producer can INSERT is
-- either taken (and dead-lettered with its reason when it is no job) or refused here, at
-- its insert; no row may make a statement that serves other rows fail. The take and the
-- ack (store/pg/queue.c) clamp what they read besides, for rows older than this version.
--
-- The constraints are NOT VALID: a database holding such a row still migrates (the take
-- copes with it); every row inserted or updated from now on is checked.

-- A delivery count is the servers' to keep: 0 .. 10^9. A take adds 1 up to that bound (an
-- integer at 2^31-1 failed every take of its queue: "integer out of range").
ALTER TABLE mqproc_messages
  ADD CONSTRAINT mqproc_messages_deliveries_range
  CHECK (deliveries BETWEEN 0 AND 1000000000) NOT VALID;

-- An id is the one the table's sequence gave out: a producer's explicit id ahead of the
-- sequence (or at or below 0) is refused. Planted ids just ahead of the sequence made every
-- later insert of a result or dead letter fail with a duplicate key, retried with backoff
-- for as long as planted ids lasted. An id the sequence gave out (its default, or a
-- producer's own nextval()) is never ahead of its last value, whoever drew it.
CREATE FUNCTION mqproc_messages_own_id() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.id IS NULL OR NEW.id <= 0 OR NEW.id > coalesce(pg_sequence_last_value(
       format('%I.%I', TG_TABLE_SCHEMA, 'mqproc_messages_id_seq')::regclass), 0) THEN
    RAISE EXCEPTION 'mqproc_messages: id % was not given out by the table (leave id out)',
      NEW.id USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER mqproc_messages_own_id BEFORE INSERT OR UPDATE OF id ON mqproc_messages
  FOR EACH ROW EXECUTE FUNCTION mqproc_messages_own_id();

-- Ids planted before this version: the sequence moves past them.
SELECT setval('mqproc_messages_id_seq', max(id)) FROM mqproc_messages
  HAVING max(id) > (SELECT last_value FROM mqproc_messages_id_seq);
