#!/usr/bin/python3
"""The table queues' side of bench/throughput.sh (docs/table-queue.md): jobs in and results
out of mqproc_messages with plain SQL, as a producer and a consumer in another language
would, on PostgreSQL (psycopg2) or SQLite (the standard library).

  tp_table.py fill URL QUEUE N RESULT_QUEUE
      Queues N OCR-D processing messages (job ids QUEUE-0000001...) in one transaction,
      each naming RESULT_QUEUE, then wakes the servers (NOTIFY, or the notice file).
  tp_table.py collect URL RESULT_QUEUE N MAX_S
      Waits (at most MAX_S s) until N results are in RESULT_QUEUE; prints
      received=, success=, rate= ((N - 1) / (last - first result's enqueued_at)),
      first_ms= (wall ms of the first result).
  tp_table.py latency URL QUEUE RESULT_QUEUE RATE SECS DRAIN
      A producer paced by an absolute clock queues RATE jobs a second for SECS seconds
      (one transaction each, the send time in the job id); a consumer takes the results
      as they commit (LISTEN on PostgreSQL; every 2 ms on SQLite) and prints sent=,
      received= (within DRAIN s of the last send), p50_ms=, p99_ms=, max_ms=.

URL: postgresql://... (or a libpq URI with options) or sqlite:///PATH[?synchronous=...].
"""
import json
import select
import sqlite3
import sys
import threading
import time


def is_sqlite(url):
    return url.startswith("sqlite://")


def connect(url):
    if is_sqlite(url):
        path = url[len("sqlite://"):].split("?", 1)[0]
        c = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA busy_timeout = 30000")
        return c
    import psycopg2
    c = psycopg2.connect(url)
    c.autocommit = True
    return c


def body(queue, job_id, resq):
    return json.dumps({"job_id": job_id, "processor_name": queue, "created_time": int(time.time()),
                       "input_file_grps": ["OCR-D-IMG"], "output_file_grps": ["OCR-D-OUT"],
                       "path_to_mets": "/data/ws1/mets.xml", "parameters": {},
                       "result_queue_name": resq}, separators=(",", ":")).encode()


def wake(c, url, queue):
    if is_sqlite(url):
        with open(url[len("sqlite://"):].split("?", 1)[0] + "-control", "a") as f:
            f.write("queue %s\n" % queue)
    else:
        c.cursor().execute("SELECT pg_notify(mqproc_queue_channel(%s), %s)", (queue, queue))


def insert(c, url, rows):
    if is_sqlite(url):
        c.execute("BEGIN IMMEDIATE")
        c.executemany("INSERT INTO mqproc_messages (queue, body) VALUES (?, ?)", rows)
        c.execute("COMMIT")
    else:
        import psycopg2.extras
        cur = c.cursor()
        cur.execute("BEGIN")
        psycopg2.extras.execute_values(cur, "INSERT INTO mqproc_messages (queue, body) VALUES %s",
                                       [(q, b) for q, b in rows], page_size=1000)
        cur.execute("COMMIT")


def fill(url, queue, n, resq):
    c = connect(url)
    insert(c, url, [(queue, body(queue, "%s-%07d" % (queue, i), resq)) for i in range(1, n + 1)])
    wake(c, url, queue)
    print("queued=%d" % n)


def collect(url, resq, n, max_s):
    c = connect(url)
    ph = "?" if is_sqlite(url) else "%s"
    deadline = time.time() + max_s
    first_wall = None
    got = 0
    while time.time() < deadline:
        cur = c.cursor()
        cur.execute("SELECT count(*) FROM mqproc_messages WHERE queue = " + ph, (resq,))
        got = cur.fetchone()[0]
        if got > 0 and first_wall is None:
            first_wall = int(time.time() * 1000)
        if got >= n:
            break
        time.sleep(0.05)
    cur = c.cursor()
    if is_sqlite(url):
        cur.execute("SELECT count(*), min(enqueued_at), max(enqueued_at),"
                    " sum(CAST(body AS TEXT) LIKE '%\"SUCCESS\"%')"
                    " FROM mqproc_messages WHERE queue = ?", (resq,))
        cnt, lo, hi, ok = cur.fetchone()
        span = (hi - lo) / 1000.0 if cnt else 0
    else:
        cur.execute("SELECT count(*), extract(epoch FROM max(enqueued_at) - min(enqueued_at)),"
                    " count(*) FILTER (WHERE convert_from(body, 'UTF8') LIKE '%%\"SUCCESS\"%%')"
                    " FROM mqproc_messages WHERE queue = %s", (resq,))
        cnt, span, ok = cur.fetchone()
        span = float(span or 0)
    rate = (cnt - 1) / span if cnt > 1 and span > 0 else 0
    print("received=%d success=%d rate=%.1f first_ms=%s" % (cnt, ok or 0, rate, first_wall or 0))


def latency(url, queue, resq, rate, secs, drain):
    sent_at = {}
    lat = []
    lock = threading.Lock()
    total = int(rate * secs)
    done = threading.Event()

    def produce():
        c = connect(url)
        t0 = time.time()
        for i in range(total):
            due = t0 + i / rate
            d = due - time.time()
            if d > 0:
                time.sleep(d)
            jid = "lat-%07d" % i
            with lock:
                sent_at[jid] = time.time()
            if is_sqlite(url):  # the documented INSERT and notice line
                insert(c, url, [(queue, body(queue, jid, resq))])
                wake(c, url, queue)
            else:  # mqproc_enqueue(): its NOTIFY goes at the commit
                c.cursor().execute("SELECT mqproc_enqueue(%s, %s)",
                                   (queue, body(queue, jid, resq)))
        done.set()

    def take(c):
        cur = c.cursor()
        if is_sqlite(url):
            cur.execute("DELETE FROM mqproc_messages WHERE queue = ? RETURNING CAST(body AS TEXT)",
                        (resq,))
        else:
            cur.execute("DELETE FROM mqproc_messages WHERE queue = %s"
                        " RETURNING convert_from(body, 'UTF8')", (resq,))
        now = time.time()
        for (b,) in cur.fetchall():
            jid = json.loads(b).get("job_id")
            with lock:
                t = sent_at.get(jid)
            if t is not None:
                lat.append((now - t) * 1000)

    c = connect(url)
    if not is_sqlite(url):
        cur = c.cursor()  # the result queue's own channel (sql/010_table_queues.sql)
        cur.execute("SELECT mqproc_queue_channel(%s)", (resq,))
        cur.execute("LISTEN " + cur.fetchone()[0])
    p = threading.Thread(target=produce)
    p.start()
    end = None
    while True:
        if done.is_set() and end is None:
            end = time.time() + drain
        if end is not None and (time.time() > end or len(lat) >= total):
            break
        if is_sqlite(url):
            time.sleep(0.002)
        else:
            if select.select([c], [], [], 0.05) != ([], [], []):
                c.poll()
                del c.notifies[:]
        take(c)
    p.join()
    lat.sort()
    out = "sent=%d received=%d" % (total, len(lat))
    if lat:
        out += " p50_ms=%.2f p99_ms=%.2f max_ms=%.2f" % (
            lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1])
    print(out)


def main(a):
    if len(a) == 5 and a[0] == "fill":
        return fill(a[1], a[2], int(a[3]), a[4])
    if len(a) == 5 and a[0] == "collect":
        return collect(a[1], a[2], int(a[3]), float(a[4]))
    if len(a) == 7 and a[0] == "latency":
        return latency(a[1], a[2], a[3], float(a[4]), float(a[5]), float(a[6]))
    sys.stderr.write(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
