"""Naive Python worker of bench/throughput.sh: what a user writes by hand with pika and
psycopg2 instead of mqproc, doing the same durable steps per job.

    python3 tp_naive_worker.py AMQP_URL PG_URL QUEUE N IDLE_S

Prefetch 1; for each message: claim the job (INSERT ... ON CONFLICT, commit), no work,
mark it SUCCESS (UPDATE, commit), publish the result to the message's result_queue_name
through exchange ocrd-network-default (persistent, mandatory, publisher confirms: pika
blocks until the broker confirms), ack. Exits after N messages, or after IDLE_S seconds
without one (exit 1). The table `jobs` (in PG_URL's search_path) is created by the script.
"""
import json
import sys

import pika
import psycopg2

CLAIM = (
    "INSERT INTO jobs (job_id, state, attempt, worker_id, lease_until)"
    " VALUES (%s, 'RUNNING', 1, 'naive', now() + interval '30 s')"
    " ON CONFLICT (job_id) DO UPDATE SET state = 'RUNNING', attempt = jobs.attempt + 1,"
    " worker_id = EXCLUDED.worker_id, lease_until = EXCLUDED.lease_until"
    " WHERE jobs.state = 'QUEUED' RETURNING attempt"
)
COMPLETE = (
    "UPDATE jobs SET state = 'SUCCESS', lease_until = NULL, updated_at = now()"
    " WHERE job_id = %s AND attempt = %s AND state = 'RUNNING'"
)


def main(amqp_url, pg_url, queue, n, idle_s):
    db = psycopg2.connect(pg_url)
    db.autocommit = True  # each statement its own commit
    cur = db.cursor()
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1)
    ch.confirm_delivery()
    props = pika.BasicProperties(content_type="application/json", delivery_mode=2)
    done = 0
    for method, _, body in ch.consume(queue, inactivity_timeout=idle_s):
        if method is None:
            break
        job = json.loads(body)
        cur.execute(CLAIM, (job["job_id"],))
        row = cur.fetchone()
        if row is not None:  # ours: run it (a no-op), record the outcome
            cur.execute(COMPLETE, (job["job_id"], row[0]))
        result = {"job_id": job["job_id"], "state": "SUCCESS", "path_to_mets": job.get("path_to_mets")}
        ch.basic_publish(
            "ocrd-network-default", job["result_queue_name"], json.dumps(result), props, mandatory=True
        )
        ch.basic_ack(method.delivery_tag)
        done += 1
        if done == n:
            break
    ch.cancel()
    conn.close()
    db.close()
    print(f"processed={done}")
    return 0 if done == n else 1


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))
