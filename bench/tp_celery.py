"""Celery row of bench/throughput.sh: the tool a Python user would pick instead of mqproc.

Celery 5 from Debian (python3-celery), RabbitMQ broker, result backend db+postgresql via
SQLAlchemy, task_acks_late=True, a no-op task. The worker is started by the script:

    python3 -m celery -A tp_celery worker --pool=prefork --concurrency=2 -Q $TP_CELERY_QUEUE

and this file also drives it:

    python3 tp_celery.py setup            create the result tables (in $TP_CELERY_SCHEMA)
    python3 tp_celery.py publish N        N x noop.apply_async() (publisher confirms);
                                          prints n= secs= rate=
    python3 tp_celery.py collect N IDLE_S EXEC_MS
        waits until N results are stored (or none came for IDLE_S seconds), then prints
        received=, first_ms= (first date_done), last_ms=, rate = (N-1) / (last - first),
        first_task_ms = first date_done - EXEC_MS (the worker's exec time, epoch ms).
        It polls inside ONE read-committed transaction that it rolls back, so it adds no
        commit to pg_stat_database.xact_commit.

Environment: TP_AMQP (amqp URL), TP_PG (postgresql URL of the bench database),
TP_CELERY_QUEUE, TP_CELERY_SCHEMA.
"""
import os
import sys
import time

from celery import Celery

QUEUE = os.environ.get("TP_CELERY_QUEUE", "tp-celery")
SCHEMA = os.environ.get("TP_CELERY_SCHEMA", "celery")

app = Celery("tp_celery", broker=os.environ["TP_AMQP"], backend="db+" + os.environ["TP_PG"])
app.conf.update(
    task_acks_late=True,
    task_default_queue=QUEUE,
    database_table_schemas={"task": SCHEMA, "group": SCHEMA},
    broker_connection_retry_on_startup=True,
)


@app.task(name="noop")
def noop():
    return None


def publish(n):
    # With publisher confirms: unconfirmed messages can be lost when this process exits
    # right after its last publish (seen here: 112 of 5000 missing).
    app.conf.broker_transport_options = {"confirm_publish": True}
    t0 = time.monotonic()
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            noop.apply_async(producer=producer)
    secs = time.monotonic() - t0
    print(f"n={n} secs={secs:.3f} rate={n / secs:.1f}")


def collect(n, idle_s, exec_ms):
    import psycopg2

    db = psycopg2.connect(os.environ["TP_PG"])
    cur = db.cursor()  # one transaction (psycopg2 default), read committed: fresh rows per query
    got, last_change = -1, time.monotonic()
    while True:
        cur.execute(f"SELECT count(*) FROM {SCHEMA}.celery_taskmeta WHERE status = 'SUCCESS'")
        count = cur.fetchone()[0]
        if count != got:
            got, last_change = count, time.monotonic()
        if got >= n or time.monotonic() - last_change > idle_s:
            break
        time.sleep(0.2)
    cur.execute(
        f"SELECT extract(epoch FROM min(date_done)) * 1000, extract(epoch FROM max(date_done)) * 1000"
        f" FROM {SCHEMA}.celery_taskmeta WHERE status = 'SUCCESS'"
    )
    first, last = (float(v or 0) for v in cur.fetchone())
    db.rollback()
    db.close()
    rate = (got - 1) / ((last - first) / 1000) if got > 1 and last > first else 0
    print(
        f"received={got} first_ms={first:.1f} last_ms={last:.1f} rate={rate:.1f}"
        f" first_task_ms={first - exec_ms:.0f}"
    )
    return 0 if got >= n else 1


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "setup":
        app.backend.ResultSession().close()
    elif cmd == "publish":
        publish(int(sys.argv[2]))
    elif cmd == "collect":
        sys.exit(collect(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])))
    else:
        sys.exit(__doc__)
