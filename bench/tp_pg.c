/* Raw database limit of bench/throughput.sh, on libpq alone (no mqproc code): how many jobs
 * per second one connection can claim and complete on this PostgreSQL.
 *
 *   tp_pg CONNINFO N BATCH
 *
 * The table `jobs` (created by the script, in the connection's search_path) holds one row
 * per job, like a minimal worker's job table. Per job, BATCH 1, each statement autocommitted
 * (2 commits per job):
 *     claim:    INSERT ... ON CONFLICT (job_id) DO UPDATE ... WHERE state = 'QUEUED'
 *               RETURNING attempt
 *     complete: UPDATE ... SET state = 'SUCCESS' WHERE job_id = $1 AND attempt = $2
 *               AND state = 'RUNNING'
 * BATCH B > 1: the same two statements over arrays of B job ids (unnest / = ANY), in one
 * transaction (1 commit per B jobs). Measures the whole loop; prints one key=value line.
 *
 * Build: cc -O2 tp_pg.c -I$(pg_config --includedir) -lpq
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const CLAIM_ONE =
    "INSERT INTO jobs (job_id, state, attempt, worker_id, lease_until) "
    "VALUES ($1, 'RUNNING', 1, 'tp_pg', now() + interval '30 s') "
    "ON CONFLICT (job_id) DO UPDATE SET state = 'RUNNING', attempt = jobs.attempt + 1, "
    "worker_id = EXCLUDED.worker_id, lease_until = EXCLUDED.lease_until "
    "WHERE jobs.state = 'QUEUED' RETURNING attempt";
static const char *const COMPLETE_ONE =
    "UPDATE jobs SET state = 'SUCCESS', lease_until = NULL, updated_at = now() "
    "WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'";
static const char *const CLAIM_MANY =
    "INSERT INTO jobs (job_id, state, attempt, worker_id, lease_until) "
    "SELECT id, 'RUNNING', 1, 'tp_pg', now() + interval '30 s' FROM unnest($1::text[]) AS id "
    "ON CONFLICT (job_id) DO UPDATE SET state = 'RUNNING', attempt = jobs.attempt + 1, "
    "worker_id = EXCLUDED.worker_id, lease_until = EXCLUDED.lease_until "
    "WHERE jobs.state = 'QUEUED' RETURNING job_id, attempt";
static const char *const COMPLETE_MANY =
    "UPDATE jobs SET state = 'SUCCESS', lease_until = NULL, updated_at = now() "
    "WHERE job_id = ANY($1::text[]) AND state = 'RUNNING'";

static PGconn *conn;

static void die(const char *what, PGresult *res) {
  fprintf(stderr, "tp_pg: %s: %s", what, res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
  exit(1);
}

/* Runs a statement (prepared as `name` when given) and checks that it touched `rows` rows. */
static void run(const char *name, const char *sql, int nparams, const char *const *params,
                long rows) {
  PGresult *res =
      name ? PQexecPrepared(conn, name, nparams, params, NULL, NULL, 0) : PQexec(conn, sql);
  ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    die(name ? name : sql, res);
  if (rows >= 0 && atol(PQcmdTuples(res)) != rows) {
    fprintf(stderr, "tp_pg: %s touched %s rows, not %ld\n", name, PQcmdTuples(res), rows);
    exit(1);
  }
  PQclear(res);
}

static void prepare(const char *name, const char *sql) {
  PGresult *res = PQprepare(conn, name, sql, 0, NULL);
  if (PQresultStatus(res) != PGRES_COMMAND_OK)
    die(name, res);
  PQclear(res);
}

static void one_job(long i) {
  char id[32];
  snprintf(id, sizeof(id), "job-%08ld", i);
  const char *claim[] = {id};
  PGresult *res = PQexecPrepared(conn, "claim", 1, claim, NULL, NULL, 0);
  if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
    die("claim", res);
  const char *complete[] = {id, PQgetvalue(res, 0, 0)};
  run("complete", NULL, 2, complete, 1);
  PQclear(res);
}

/* Jobs first..first+b-1 as one transaction. */
static void batch(long first, long b) {
  size_t cap = (size_t)b * 16 + 3, len = 0;
  char *ids = malloc(cap);
  if (ids == NULL)
    exit(1);
  ids[len++] = '{';
  for (long i = first; i < first + b; i++)
    len += (size_t)snprintf(ids + len, cap - len, "%sjob-%08ld", i > first ? "," : "", i);
  snprintf(ids + len, cap - len, "}");
  const char *params[] = {ids};
  run(NULL, "BEGIN", 0, NULL, -1);
  run("claim", NULL, 1, params, b);
  run("complete", NULL, 1, params, b);
  run(NULL, "COMMIT", 0, NULL, -1);
  free(ids);
}

int main(int argc, char **argv) {
  struct timespec t0, t1;
  if (argc != 4 || atol(argv[2]) < 1 || atol(argv[3]) < 1) {
    fprintf(stderr, "usage: tp_pg CONNINFO N BATCH\n");
    return 2;
  }
  long n = atol(argv[2]), b = atol(argv[3]);
  conn = PQconnectdb(argv[1]);
  if (PQstatus(conn) != CONNECTION_OK)
    die("connect", NULL);
  prepare("claim", b == 1 ? CLAIM_ONE : CLAIM_MANY);
  prepare("complete", b == 1 ? COMPLETE_ONE : COMPLETE_MANY);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i += b) {
    if (b == 1)
      one_job(i);
    else
      batch(i, n - i < b ? n - i : b);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("n=%ld secs=%.3f rate=%.1f\n", n, secs, n / secs);
  PQfinish(conn);
  return 0;
}
