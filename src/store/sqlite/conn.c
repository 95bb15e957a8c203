/* SQLite job store, part three: the schema, `migrate`, the check at start (the schema's
 * version, no network filesystem, and for a server a database it can write), on a
 * connection of their own before the loop runs, as store/pg/conn.c does for PostgreSQL;
 * the write check the engine also runs before it ends an outage (mqproc__sq_probe). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "store/sqlite/int.h"
#include "base/util.h"

#define SCHEMA_VERSION 12
/* the time in ms for a DEFAULT (rows inserted by hand, e.g. `mqproc jobs cancel` of a job
 * not delivered yet): mq_now() exists only on the servers' connections */
#define NOW_MS "(CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))"

/* clang-format off */
static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS mqproc_schema_migrations (version integer PRIMARY KEY,"
    "  name text NOT NULL, applied_at integer NOT NULL);"
    "CREATE TABLE IF NOT EXISTS mqproc_jobs ("
    "  job_id text PRIMARY KEY, processor_name text NOT NULL,"
    "  state text NOT NULL DEFAULT 'QUEUED'"
    "    CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCESS', 'FAILED', 'CANCELLED')),"
    "  attempt integer NOT NULL DEFAULT 0, tries integer NOT NULL DEFAULT 0,"
    "  deliveries integer NOT NULL DEFAULT 0, requeues integer NOT NULL DEFAULT 0,"
    "  worker_id text, lease_until integer, created_time integer,"
    "  queued_at integer NOT NULL DEFAULT " NOW_MS ", start_time integer, end_time integer,"
    "  exec_time_ms integer,"
    "  request text, last_error text, log_path text,"
    "  result_published integer NOT NULL DEFAULT 0,"
    "  callback_state text CHECK (callback_state IN ('OK', 'FAILED')), callback_error text,"
    "  updated_at integer NOT NULL DEFAULT " NOW_MS ","
    "  delivery_acked integer NOT NULL DEFAULT 0, republish integer NOT NULL DEFAULT 0,"
    "  request_format text NOT NULL DEFAULT 'json' CHECK (request_format IN ('json', 'yaml')),"
    "  dead_letter_pending integer NOT NULL DEFAULT 0, request_body blob,"
    "  headers text, priority integer, cancel_requested integer NOT NULL DEFAULT 0,"
    "  attempt_base integer NOT NULL DEFAULT 0, log_text text);"
    "CREATE INDEX IF NOT EXISTS mqproc_jobs_active_idx ON mqproc_jobs (processor_name, state)"
    "  WHERE state IN ('QUEUED', 'RUNNING');"
    "CREATE INDEX IF NOT EXISTS mqproc_jobs_sweep_idx ON mqproc_jobs (processor_name, lease_until)"
    "  WHERE delivery_acked OR republish;"
    "CREATE INDEX IF NOT EXISTS mqproc_jobs_list_idx ON mqproc_jobs (queued_at DESC, job_id DESC);"
    "CREATE INDEX IF NOT EXISTS mqproc_jobs_end_idx ON mqproc_jobs (processor_name, end_time)"
    "  WHERE end_time IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS mqproc_jobs_cancel_idx ON mqproc_jobs (worker_id)"
    "  WHERE cancel_requested;"
    "CREATE TABLE IF NOT EXISTS mqproc_job_tries ("
    "  job_id text NOT NULL REFERENCES mqproc_jobs (job_id) ON DELETE CASCADE,"
    "  try integer NOT NULL, attempt integer NOT NULL, worker_id text NOT NULL,"
    "  started_at integer NOT NULL, ended_at integer, ok integer, exit_code integer,"
    "  term_signal integer, duration_ms integer, error text, PRIMARY KEY (job_id, try));"
    "CREATE TABLE IF NOT EXISTS mqproc_dead_letters ("
    "  id integer PRIMARY KEY AUTOINCREMENT, processor_name text NOT NULL, job_id text,"
    "  reason text NOT NULL, body blob NOT NULL, worker_id text, received_at integer NOT NULL,"
    "  body_len integer, body_sha256 blob, requeued_at integer, requeued_by text);"
    "CREATE TABLE IF NOT EXISTS mqproc_workers ("
    "  worker_id text PRIMARY KEY, processor_name text NOT NULL, host text NOT NULL,"
    "  pid integer NOT NULL, version text NOT NULL, started_at integer NOT NULL,"
    "  last_seen integer NOT NULL, interval_ms integer NOT NULL,"
    "  state text NOT NULL CHECK (state IN ('starting', 'running', 'paused', 'draining',"
    "    'stopped', 'dead')),"
    "  concurrency integer NOT NULL, in_flight integer NOT NULL DEFAULT 0,"
    "  jobs_done integer NOT NULL DEFAULT 0, jobs_failed integer NOT NULL DEFAULT 0,"
    "  current_jobs text NOT NULL DEFAULT '[]', restarts integer NOT NULL DEFAULT 0, note text);"
    "CREATE INDEX IF NOT EXISTS mqproc_workers_processor_idx"
    "  ON mqproc_workers (processor_name, last_seen);"
    "CREATE TABLE IF NOT EXISTS mqproc_control ("
    "  processor_name text NOT NULL, worker_id text NOT NULL DEFAULT '',"
    "  wish text NOT NULL CHECK (wish IN ('pause', 'drain')), set_by text NOT NULL,"
    "  set_at integer NOT NULL, PRIMARY KEY (processor_name, worker_id));"
    "CREATE TABLE IF NOT EXISTS mqproc_audit ("
    "  id integer PRIMARY KEY AUTOINCREMENT, at integer NOT NULL, actor text NOT NULL,"
    "  action text NOT NULL, target text NOT NULL, rows_affected integer NOT NULL, detail text);"
    "CREATE TABLE IF NOT EXISTS mqproc_outbox ("
    "  job_id text PRIMARY KEY, processor_name text NOT NULL, attempt integer NOT NULL,"
    "  lease_until integer NOT NULL, dead_letter integer NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS mqproc_outbox_sweep_idx"
    "  ON mqproc_outbox (processor_name, lease_until);"
    "INSERT OR IGNORE INTO mqproc_schema_migrations (version, name, applied_at)"
    "  VALUES (5, 'sqlite schema', mq_now()), (6, 'job_log_text', mq_now());"
    /* version 7 (sql/007_lean_writes.sql): a database of version 5 or 6 moves what its outbox
     * held into the outbox table and trades the state index for the partial one (on a new
     * database these change nothing) */
    "INSERT OR IGNORE INTO mqproc_outbox (job_id, processor_name, attempt, lease_until,"
    "  dead_letter) SELECT job_id, processor_name, attempt, coalesce(lease_until, mq_now()),"
    "  dead_letter_pending FROM mqproc_jobs"
    "  WHERE delivery_acked AND state IN ('SUCCESS', 'FAILED', 'CANCELLED');"
    "UPDATE mqproc_jobs SET delivery_acked = 0, dead_letter_pending = 0, lease_until = NULL"
    "  WHERE delivery_acked AND state IN ('SUCCESS', 'FAILED', 'CANCELLED');"
    "DROP INDEX IF EXISTS mqproc_jobs_state_idx;"
    "CREATE VIEW IF NOT EXISTS mqproc_all_tries AS"
    "  SELECT job_id, try, attempt, worker_id, started_at, ended_at, ok, exit_code, term_signal,"
    "    duration_ms, error FROM mqproc_job_tries"
    "  UNION ALL"
    "  SELECT j.job_id, j.tries, j.attempt, coalesce(j.worker_id, ''), j.start_time, j.end_time,"
    "    1, 0, NULL, j.exec_time_ms, NULL FROM mqproc_jobs j"
    "  WHERE j.state = 'SUCCESS' AND j.tries > 0 AND NOT EXISTS (SELECT 1 FROM mqproc_job_tries t"
    "    WHERE t.job_id = j.job_id AND t.try = j.tries);"
    "INSERT OR IGNORE INTO mqproc_schema_migrations (version, name, applied_at)"
    "  VALUES (7, 'lean writes', mq_now());"
    /* version 8 (sql/008_dead_letter_ops.sql): dead letters for operators; the columns
     * are in the table above, or added by UPGRADE_8 to an older database */
    "CREATE INDEX IF NOT EXISTS mqproc_dead_letters_processor_idx"
    "  ON mqproc_dead_letters (processor_name, id);"
    "CREATE INDEX IF NOT EXISTS mqproc_dead_letters_received_idx"
    "  ON mqproc_dead_letters (received_at);"
    "INSERT OR IGNORE INTO mqproc_schema_migrations (version, name, applied_at)"
    "  VALUES (8, 'dead letter ops', mq_now());";
/* A database made before version 8: its dead letters' new columns (run when the table
 * lacks them: has_column() below). */
static const char UPGRADE_8[] =
    "ALTER TABLE mqproc_dead_letters ADD COLUMN requeued_at integer;"
    "ALTER TABLE mqproc_dead_letters ADD COLUMN requeued_by text;";
/* Version 10 (sql/010_table_queues.sql): the table queues' messages (docs/table-queue.md).
 * An id is never used twice (AUTOINCREMENT): an ack is fenced by the id, its holder and its
 * delivery count, and a late ack must not meet a new message that took a deleted one's id.
 * Times are integer ms since the epoch as elsewhere; a producer that has no mq_now() (any
 * program but a server) leaves them to their defaults. */
static const char QUEUES[] =
    "CREATE TABLE IF NOT EXISTS mqproc_messages ("
    "  id integer PRIMARY KEY AUTOINCREMENT, queue text NOT NULL,"
    "  priority integer NOT NULL DEFAULT 0, body blob NOT NULL,"
    "  content_type text NOT NULL DEFAULT 'application/json', message_id text, headers text,"
    "  enqueued_at integer NOT NULL DEFAULT " NOW_MS ","
    "  visible_at integer NOT NULL DEFAULT " NOW_MS ","
    "  deliveries integer NOT NULL DEFAULT 0, consumer text);"
    "CREATE INDEX IF NOT EXISTS mqproc_messages_ready_idx"
    "  ON mqproc_messages (queue, priority DESC, id) WHERE consumer IS NULL;"
    "CREATE INDEX IF NOT EXISTS mqproc_messages_held_idx"
    "  ON mqproc_messages (queue, visible_at) WHERE consumer IS NOT NULL;"
    "INSERT OR IGNORE INTO mqproc_schema_migrations (version, name, applied_at)"
    "  VALUES (10, 'table queues', mq_now());";
/* Version 11 (sql/011_hostile_rows.sql): a producer's row may not make the table "full".
 * AUTOINCREMENT cannot go past the largest rowid: one row with an id at 2^63-1 made every
 * later insert fail with SQLITE_FULL (taken for a full disk: the servers stopped), and
 * deleting it did not help (sqlite_sequence keeps the largest id given out). An id above
 * 9*10^18 is refused at its insert (NEW.id is -1 where the table gives it); a database
 * that holds such rows gets them moved to negative ids (taken first, dead-lettered or run
 * as any row) and its sequence back to the largest id left. The delivery count and the
 * priority are the take's to read safely (store/sqlite/queue.c). */
static const char SCHEMA_11[] =
    "CREATE TRIGGER IF NOT EXISTS mqproc_messages_id_insert BEFORE INSERT ON mqproc_messages"
    "  WHEN NEW.id > 9000000000000000000 BEGIN"
    "  SELECT RAISE(ABORT, 'mqproc_messages: an id above 9000000000000000000 (leave id out)');"
    "  END;"
    "CREATE TRIGGER IF NOT EXISTS mqproc_messages_id_update BEFORE UPDATE OF id"
    "  ON mqproc_messages WHEN NEW.id > 9000000000000000000 BEGIN"
    "  SELECT RAISE(ABORT, 'mqproc_messages: an id above 9000000000000000000 (leave id out)');"
    "  END;"
    "UPDATE OR IGNORE mqproc_messages SET id = -id WHERE id > 9000000000000000000;"
    "UPDATE sqlite_sequence SET seq = (SELECT coalesce(max(id), 0) FROM mqproc_messages)"
    "  WHERE name = 'mqproc_messages' AND seq > 9000000000000000000;"
    "INSERT OR IGNORE INTO mqproc_schema_migrations (version, name, applied_at)"
    "  VALUES (11, 'hostile rows', mq_now());";
/* Version 12 (sql/012_enqueue_only.sql): PostgreSQL's mqproc_enqueue() runs with its
 * owner's rights, so a producer's role needs EXECUTE on it and no right on the table.
 * SQLite has no roles (whoever can write the file can write anything in it): the version
 * is recorded, so that both databases say the same number, and nothing else changes. */
static const char SCHEMA_12[] =
    "INSERT OR IGNORE INTO mqproc_schema_migrations (version, name, applied_at)"
    "  VALUES (12, 'enqueue only (PostgreSQL)', mq_now());";
/* Version 6 on a database made at 5 (run when mqproc_jobs lacks the column): a first try's
 * output kept in the row (sql/006_job_log_text.sql says why). */
static const char TO_6[] = "ALTER TABLE mqproc_jobs ADD COLUMN log_text text;";
/* Version 9 (sql/009_ocrd_api.sql): OCR-D's Processing Server API over the job table.
 * (mqproc_jobs' state CHECK gains CACHED in widen_states() below.) */
static const char SCHEMA_9[] =
    "CREATE INDEX IF NOT EXISTS mqproc_jobs_cached_idx ON mqproc_jobs (job_id)"
    "  WHERE state = 'CACHED';"
    "CREATE TABLE IF NOT EXISTS mqproc_ocrd_tools ("
    "  processor_name text PRIMARY KEY, tool text NOT NULL, worker_id text,"
    "  updated_at integer NOT NULL);"
    "CREATE TABLE IF NOT EXISTS mqproc_ocrd_jobs ("
    "  job_id text PRIMARY KEY REFERENCES mqproc_jobs (job_id) ON DELETE CASCADE,"
    "  seq integer NOT NULL, workspace text NOT NULL, output_file_grps text NOT NULL,"
    "  pages text, depends_on text NOT NULL DEFAULT '[]', workflow_job_id text,"
    "  created_at integer NOT NULL);"
    "CREATE INDEX IF NOT EXISTS mqproc_ocrd_jobs_ws_idx ON mqproc_ocrd_jobs (workspace, seq);"
    "CREATE INDEX IF NOT EXISTS mqproc_ocrd_jobs_wf_idx ON mqproc_ocrd_jobs (workflow_job_id)"
    "  WHERE workflow_job_id IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS mqproc_workflows ("
    "  workflow_id text PRIMARY KEY, content text NOT NULL, content_hash text NOT NULL,"
    "  created_at integer NOT NULL, updated_at integer NOT NULL);"
    "CREATE INDEX IF NOT EXISTS mqproc_workflows_hash_idx ON mqproc_workflows (content_hash);"
    "CREATE TABLE IF NOT EXISTS mqproc_workflow_jobs ("
    "  job_id text PRIMARY KEY, workflow_id text, path_to_mets text NOT NULL,"
    "  page_id text NOT NULL DEFAULT '', page_wise integer NOT NULL DEFAULT 0,"
    "  processing_job_ids text NOT NULL, callback_url text, state text, ended_at integer,"
    "  callback_state text CHECK (callback_state IN ('OK', 'FAILED')), callback_error text,"
    "  created_at integer NOT NULL);"
    "CREATE INDEX IF NOT EXISTS mqproc_workflow_jobs_open_idx ON mqproc_workflow_jobs"
    "  (created_at) WHERE ended_at IS NULL;"
    "INSERT OR IGNORE INTO mqproc_schema_migrations (version, name, applied_at)"
    "  VALUES (9, 'ocrd api', mq_now());";
/* clang-format on */

/* mqproc_jobs' state CHECK gains CACHED (version 9). SQLite cannot alter a CHECK; a
 * constraint that only allows more values changes nothing stored, so the table's text in
 * the schema is edited in place (SQLite's documented way for such changes, "Making Other
 * Kinds Of Table Schema Changes"), with schema_version raised so that every connection
 * reads the schema again. In migrate's transaction; nothing to do when it is done. */
static int widen_states(sqlite3 *db, char *err) {
  static const char OLD[] = "'CANCELLED'))", NEW[] = "'CANCELLED', 'CACHED'))";
  sqlite3_stmt *st = NULL;
  char *sql = NULL, *msg = NULL;
  int version = 0, rc = SQLITE_OK, done;
  if (sqlite3_prepare_v2(db,
                         "SELECT instr(sql, 'CACHED') > 0, (SELECT schema_version FROM"
                         " pragma_schema_version) FROM sqlite_master WHERE type = 'table'"
                         " AND name = 'mqproc_jobs'",
                         -1, &st, NULL) != SQLITE_OK ||
      sqlite3_step(st) != SQLITE_ROW) {
    sqlite3_finalize(st);
    return mqproc__err(err, MQPROC_ESTORE_QUERY, "migrate: read mqproc_jobs' schema: %s",
                       sqlite3_errmsg(db));
  }
  done = sqlite3_column_int(st, 0);
  version = sqlite3_column_int(st, 1);
  sqlite3_finalize(st);
  if (done)
    return MQPROC_OK;
  sql = sqlite3_mprintf("PRAGMA writable_schema = ON;"
                        "UPDATE sqlite_master SET sql = replace(sql, %Q, %Q)"
                        " WHERE type = 'table' AND name = 'mqproc_jobs';"
                        "PRAGMA schema_version = %d; PRAGMA writable_schema = OFF;",
                        OLD, NEW, version + 1);
  if (sql == NULL || (rc = sqlite3_exec(db, sql, NULL, NULL, &msg)) != SQLITE_OK) {
    mqproc__err(err, MQPROC_ESTORE_QUERY, "migrate: allow state CACHED in mqproc_jobs: %s",
                msg != NULL ? msg : "out of memory");
    sqlite3_free(msg);
    sqlite3_free(sql);
    return MQPROC_ESTORE_QUERY;
  }
  sqlite3_free(sql);
  return MQPROC_OK;
}

/* The schema's version and steps recorded in db (0 and 0 without the table). */
static void read_schema(sqlite3 *db, int *version, int *steps) {
  sqlite3_stmt *st;
  *version = *steps = 0;
  if (sqlite3_prepare_v2(db, "SELECT max(version), count(*) FROM mqproc_schema_migrations", -1, &st,
                         NULL) != SQLITE_OK)
    return;
  if (sqlite3_step(st) == SQLITE_ROW) {
    *version = sqlite3_column_int(st, 0);
    *steps = sqlite3_column_int(st, 1);
  }
  sqlite3_finalize(st);
}

/* A database on a network filesystem is refused: WAL needs shared memory on one host,
 * and SQLite's locks over NFS and SMB are known to fail. */
static int network_fs(const char *path, char *err) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  const char *net;
  int looked;
  snprintf(dir, sizeof(dir), "%.*s", slash != NULL && slash != path ? (int)(slash - path) : 1,
           slash != NULL ? path : ".");
  net = mqproc__network_fs(dir, &looked);
  if (!looked) /* no directory to put it in: not an outage to wait out */
    return mqproc__err(err,
                       errno == ENOENT || errno == ENOTDIR ? MQPROC_ECONFIG : MQPROC_ESTORE_CONNECT,
                       "the database's directory %s: %s", dir, strerror(errno));
  if (net != NULL)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "%s is on a network filesystem (%s): SQLite's write-ahead log needs "
                       "every server on one host and its locks fail over the network; put the "
                       "database on a local disk, or use PostgreSQL (--database "
                       "postgresql://...)",
                       path, net);
  return MQPROC_OK;
}

int mqproc__sq_probe(sqlite3 *db, const char *path, int pages, char *err) {
  /* a real write (SQLite writes the row back though nothing changes), committed: a file,
     directory or filesystem that refuses writes fails here, as a full disk does */
  static const char WRITE[] =
      "UPDATE mqproc_schema_migrations SET applied_at = applied_at"
      " WHERE version = (SELECT max(version) FROM mqproc_schema_migrations)";
  sqlite3_stmt *st;
  int rc;
  if (sqlite3_db_readonly(db, "main") == 1)
    return mqproc__err(err, MQPROC_ESTORE_CONNECT, "%s can only be read by this server (%s)", path,
                       access(path, W_OK) != 0 ? strerror(errno) : "opened read-only");
  if (pages) { /* after corruption: every page, not only those a write happens to touch */
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL) != SQLITE_OK)
      return mqproc__sq_error(db, "check the database's pages", err);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
      rc = mqproc__err(err, MQPROC_ESTORE_CONNECT, "%s is corrupt: %s", path,
                       (const char *)sqlite3_column_text(st, 0));
    else if (rc != SQLITE_ROW)
      rc = mqproc__sq_error(db, "check the database's pages", err);
    else
      rc = MQPROC_OK;
    sqlite3_finalize(st);
    if (rc != MQPROC_OK)
      return rc;
  }
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
    return mqproc__sq_error(db, "write to the database", err);
  if (sqlite3_exec(db, WRITE, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
    rc = mqproc__sq_error(db, "write to the database", err);
    if (!sqlite3_get_autocommit(db))
      sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
  }
  return MQPROC_OK;
}

/* A server's check at start that it can write the database: one it cannot is a
 * configuration error (exit 2) with the reason, not a server that looks healthy while
 * every job waits for the store. A file every user may read is said once (its mode is
 * the operator's to choose, and kept). */
static int server_check(sq_store_t *s, sqlite3 *db, char *err) {
  char why[MQPROC_ERR_LEN];
  struct stat st;
  int rc = mqproc__sq_probe(db, s->path, 0, why);
  if (rc == MQPROC_ESTORE_CONNECT)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "cannot write the database: %s; this server's user needs to write the "
                       "file and its directory (for the -wal and -shm files beside it)",
                       why);
  if (rc != MQPROC_OK) /* busy for the whole busy timeout: another server's long write */
    return mqproc__err(err, MQPROC_ESTORE_CONNECT, "%s", why);
  if (stat(s->path, &st) == 0 && (st.st_mode & S_IROTH) != 0)
    MQPROC__WARN("every user of this host can read %s (mode %04o), which holds the jobs' "
                 "requests and dead letters: chmod o-rwx it (mqproc makes its files 0600, or "
                 "0660 with --group-access, and leaves the mode of a file that exists)",
                 s->path, (unsigned)(st.st_mode & 07777));
  return MQPROC_OK;
}

int mqproc__sq_open(mqproc__store_t *base, char *err) {
  sq_store_t *s = (sq_store_t *)base;
  sqlite3 *db;
  sqlite3_stmt *st;
  int rc, version = 0;
  if ((rc = network_fs(s->path, err)) != MQPROC_OK)
    return rc;
  /* no file: opening would leave an empty one behind (a typo's, or a server's without
   * --migrate) */
  if (access(s->path, F_OK) != 0 && errno == ENOENT)
    return mqproc__err(err, MQPROC_ESTORE_QUERY,
                       "no database at %s: start the server with --migrate, or run `mqproc "
                       "migrate --database sqlite://%s`",
                       s->path, s->path);
  if ((rc = mqproc__sq_open_db(s, &db, err)) != MQPROC_OK)
    return rc;
  if (sqlite3_prepare_v2(db, "SELECT max(version) FROM mqproc_schema_migrations", -1, &st, NULL) ==
      SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW)
      version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
  } else if (sqlite3_errcode(db) == SQLITE_NOTADB || sqlite3_errcode(db) == SQLITE_CORRUPT) {
    rc = mqproc__err(err, MQPROC_ECONFIG, "%s: %s", s->path, sqlite3_errmsg(db));
  }
  /* a server (with a loop) writes; the operators' tools may only read */
  if (rc == MQPROC_OK && version >= SCHEMA_VERSION && s->loop != NULL)
    rc = server_check(s, db, err);
  sqlite3_close(db);
  if (rc != MQPROC_OK)
    return rc;
  if (version == 0)
    return mqproc__err(err, MQPROC_ESTORE_QUERY,
                       "the mqproc schema is not in %s: run `mqproc migrate --database "
                       "sqlite://%s` or start with --migrate",
                       s->path, s->path);
  if (version < SCHEMA_VERSION)
    return mqproc__err(err, MQPROC_ESTORE_QUERY, "%s: schema version %d, this build needs %d",
                       s->path, version, SCHEMA_VERSION);
  return MQPROC_OK;
}

int mqproc__store_sqlite_connect(const char *url, sqlite3 **db, char *err) {
  mqproc__store_t *base;
  int rc;
  *db = NULL;
  if ((rc = mqproc__store_sqlite_new(&base, url, NULL, err)) != MQPROC_OK)
    return rc;
  /* an operator's typo must not leave an empty database behind (a server makes it) */
  if (access(((sq_store_t *)base)->path, F_OK) != 0)
    rc = mqproc__err(err, MQPROC_ECONFIG,
                     "no database at %s: start a server with --migrate, or run `mqproc "
                     "migrate --database %s`",
                     ((sq_store_t *)base)->path, url);
  else if ((rc = mqproc__sq_open(base, err)) == MQPROC_OK)
    rc = mqproc__sq_open_db((sq_store_t *)base, db, err);
  mqproc__store_destroy(base);
  return rc;
}

int mqproc__sq_schema(mqproc__store_t *base, int *version, int *steps, char *err) {
  sq_store_t *s = (sq_store_t *)base;
  sqlite3 *db;
  int rc;
  *version = *steps = 0;
  if (access(s->path, F_OK) != 0) /* none yet: asking must not make one */
    return MQPROC_OK;
  if ((rc = mqproc__sq_open_db(s, &db, err)) != MQPROC_OK)
    return rc;
  read_schema(db, version, steps);
  sqlite3_close(db);
  return MQPROC_OK;
}

/* Whether table has the column: 1, 0 (a table made before it: ALTER TABLE adds it; SQLite
 * has no ADD COLUMN IF NOT EXISTS), -1 without the table (SCHEMA makes it whole). */
static int has_column(sqlite3 *db, const char *table, const char *column) {
  sqlite3_stmt *st;
  int n = -1;
  if (sqlite3_prepare_v2(db,
                         "SELECT count(*) FILTER (WHERE name = ?2), count(*)"
                         " FROM pragma_table_info(?1)",
                         -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 1) > 0)
    n = sqlite3_column_int(st, 0) > 0;
  sqlite3_finalize(st);
  return n;
}

int mqproc__sq_migrate(mqproc__store_t *base, char *err) {
  sq_store_t *s = (sq_store_t *)base;
  sqlite3 *db;
  char *msg = NULL;
  int rc, version = 0, steps = 0;
  if ((rc = network_fs(s->path, err)) != MQPROC_OK ||
      (rc = mqproc__sq_open_db(s, &db, err)) != MQPROC_OK)
    return rc;
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) == SQLITE_OK)
    read_schema(db, &version, &steps); /* under the write lock: no other migrate between */
  if (msg != NULL ||
      (has_column(db, "mqproc_jobs", "log_text") == 0 &&
       sqlite3_exec(db, TO_6, NULL, NULL, &msg) != SQLITE_OK) ||
      (has_column(db, "mqproc_dead_letters", "requeued_at") == 0 &&
       sqlite3_exec(db, UPGRADE_8, NULL, NULL, &msg) != SQLITE_OK) ||
      sqlite3_exec(db, SCHEMA, NULL, NULL, &msg) != SQLITE_OK ||
      (rc = widen_states(db, err)) != MQPROC_OK ||
      sqlite3_exec(db, SCHEMA_9, NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(db, QUEUES, NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(db, SCHEMA_11, NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(db, SCHEMA_12, NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
    if (rc == MQPROC_OK)
      mqproc__err(err, MQPROC_ESTORE_QUERY, "migrate %s: %s", s->path, msg != NULL ? msg : "?");
    sqlite3_free(msg);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return MQPROC_ESTORE_QUERY;
  }
  sqlite3_close(db);
  return MQPROC_OK;
}
