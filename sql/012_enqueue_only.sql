-- mqproc job store, version 12: a producer needs no right on mqproc_messages
-- (docs/table-queue.md, "A role that may only enqueue"; issue 38, F10). mqproc_enqueue()
-- runs with the rights of its owner (the role that migrated the schema, which owns the
-- table), so EXECUTE on it is all a producer needs: it sets the queue, the body, the
-- priority, the message id, the content type and the headers, and nothing else (the id,
-- the delivery count, the holder and the times are the table's). Before, it ran with the
-- caller's rights, so a producer had to hold INSERT and SELECT on the table, and with
-- them could write every column.
--
-- A SECURITY DEFINER function is safe only with a search_path of its own: the schema the
-- table is in (resolved when this runs: mqproc may live in any schema), after pg_catalog
-- and before pg_temp, so that no object a caller creates is found in place of ours.
-- EXECUTE is no longer everyone's (PUBLIC's, the default): whoever held INSERT on the
-- table keeps it (they could write the rows anyway); anyone else is granted it.
-- PostgreSQL only: SQLite has no roles (a producer who can write the file can write
-- anything in it), and records this version with nothing to do.

CREATE OR REPLACE FUNCTION mqproc_enqueue(queue text, body bytea, priority integer DEFAULT 0,
                                          message_id text DEFAULT NULL,
                                          content_type text DEFAULT 'application/json',
                                          headers jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
  new_id bigint;
BEGIN
  -- what the table would take but no server can serve: a queue's name is AMQP's (1 to 255
  -- bytes; the NOTIFY's payload is the name), headers are an object
  IF mqproc_enqueue.queue IS NULL OR octet_length(mqproc_enqueue.queue) NOT BETWEEN 1 AND 255 THEN
    RAISE EXCEPTION 'mqproc_enqueue: a queue name of 1 to 255 bytes, not %',
      coalesce(octet_length(mqproc_enqueue.queue)::text || ' bytes', 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF mqproc_enqueue.body IS NULL THEN
    RAISE EXCEPTION 'mqproc_enqueue: no body' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF mqproc_enqueue.headers IS NOT NULL AND jsonb_typeof(mqproc_enqueue.headers) <> 'object' THEN
    RAISE EXCEPTION 'mqproc_enqueue: headers are a JSON object, not %',
      jsonb_typeof(mqproc_enqueue.headers) USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO mqproc_messages AS m (queue, priority, body, content_type, message_id, headers)
    VALUES (mqproc_enqueue.queue, coalesce(mqproc_enqueue.priority, 0), mqproc_enqueue.body,
            coalesce(mqproc_enqueue.content_type, 'application/json'),
            mqproc_enqueue.message_id, mqproc_enqueue.headers)
    RETURNING m.id INTO new_id;
  PERFORM pg_notify(mqproc_queue_channel(mqproc_enqueue.queue), mqproc_enqueue.queue);
  RETURN new_id;
END $$;

CREATE OR REPLACE FUNCTION mqproc_enqueue(queue text, body text, priority integer DEFAULT 0,
                                          message_id text DEFAULT NULL,
                                          content_type text DEFAULT 'application/json',
                                          headers jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE sql SECURITY DEFINER AS $$
  SELECT mqproc_enqueue($1, convert_to($2, 'UTF8'), $3, $4, $5, $6)
$$;

REVOKE EXECUTE ON FUNCTION mqproc_enqueue(text, bytea, integer, text, text, jsonb),
                           mqproc_enqueue(text, text, integer, text, text, jsonb) FROM PUBLIC;

DO $$
DECLARE
  tbl oid := 'mqproc_messages'::regclass;
  sch text;
  fns text;
  who text;
BEGIN
  SELECT n.nspname INTO sch FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = tbl;
  fns := format('%1$I.mqproc_enqueue(text, bytea, integer, text, text, jsonb), '
                '%1$I.mqproc_enqueue(text, text, integer, text, text, jsonb)', sch);
  EXECUTE format('ALTER FUNCTION %I.mqproc_enqueue(text, bytea, integer, text, text, jsonb)'
                 ' SET search_path = pg_catalog, %I, pg_temp', sch, sch);
  EXECUTE format('ALTER FUNCTION %I.mqproc_enqueue(text, text, integer, text, text, jsonb)'
                 ' SET search_path = pg_catalog, %I, pg_temp', sch, sch);
  FOR who IN
    SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END
      FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
      LEFT JOIN pg_roles r ON r.oid = a.grantee
      WHERE c.oid = tbl AND a.privilege_type = 'INSERT' AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', fns, who);
  END LOOP;
END $$;
