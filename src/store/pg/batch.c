/* Batched statements of the PostgreSQL store (see store/pg/int.h): the array parameters
 * one execution carries for several requests, and the rows of its result matched back to
 * each request by the ordinality in column 0. */
#include <stdlib.h>
#include <string.h>

#include "store/pg/int.h"
#include "base/util.h"

char *mqproc__pg_text_array(const char *const *vals, size_t n) {
  size_t len = 3;
  char *out, *p;
  for (size_t k = 0; k < n; k++)
    len += vals[k] == NULL ? 5 : 2 * strlen(vals[k]) + 3;
  if ((out = p = mqproc__malloc(len)) == NULL)
    return NULL;
  *p++ = '{';
  for (size_t k = 0; k < n; k++) {
    const char *v = vals[k];
    if (k > 0)
      *p++ = ',';
    if (v == NULL) {
      memcpy(p, "NULL", 4);
      p += 4;
      continue;
    }
    *p++ = '"';
    for (; *v != '\0'; v++) {
      if (*v == '"' || *v == '\\')
        *p++ = '\\';
      *p++ = *v;
    }
    *p++ = '"';
  }
  *p++ = '}';
  *p = '\0';
  return out;
}

char *mqproc__pg_array_param(pg_req_t *const *reqs, int nreqs, int i) {
  const char **vals = mqproc__malloc((size_t)nreqs * sizeof(*vals) + 1);
  char *out;
  if (vals == NULL)
    return NULL;
  for (int k = 0; k < nreqs; k++)
    vals[k] = reqs[k]->vals[i];
  out = mqproc__pg_text_array(vals, (size_t)nreqs);
  free(vals);
  return out;
}

/* A forgotten request (its caller is gone) is not parsed: its out struct may be freed. */
static void parse(pg_req_t *r, PGresult *res, const int *rows, int n) {
  r->rc = r->done != NULL && r->stmt->parse != NULL ? r->stmt->parse(r, res, rows, n) : MQPROC_OK;
}

void mqproc__pg_parse_batched(pg_req_t *const *reqs, int nreqs, PGresult *res) {
  /* one pass over the rows: the rows of request k are rows[start[k] .. start[k + 1]) */
  int nt = PQntuples(res), *start = mqproc__calloc((size_t)nreqs + 2, sizeof(int));
  int *rows = mqproc__calloc((size_t)nt + 1, sizeof(int)), *req_of = NULL;
  if (start != NULL && rows != NULL && (req_of = mqproc__calloc((size_t)nt + 1, sizeof(int))))
    for (int row = 0; row < nt; row++) {
      int k = atoi(PQgetvalue(res, row, 0)) - 1; /* the ordinality: 1-based */
      req_of[row] = k >= 0 && k < nreqs ? k : -1;
      if (req_of[row] >= 0)
        start[k + 2]++;
    }
  for (int k = 0; req_of != NULL && k < nreqs; k++)
    start[k + 2] += start[k + 1];
  for (int row = 0; req_of != NULL && row < nt; row++)
    if (req_of[row] >= 0)
      rows[start[req_of[row] + 1]++] = row;
  for (int k = 0; k < nreqs; k++) {
    if (req_of == NULL)
      reqs[k]->rc = mqproc__err(reqs[k]->err, MQPROC_ENOMEM, "out of memory");
    else /* after the fill, start[k] is where request k's rows begin */
      parse(reqs[k], res, rows + start[k], start[k + 1] - start[k]);
  }
  free(start);
  free(rows);
  free(req_of);
}

void mqproc__pg_parse_single(pg_req_t *r, PGresult *res) {
  int nt = PQntuples(res), *rows = mqproc__calloc((size_t)nt + 1, sizeof(int));
  if (rows == NULL) {
    r->rc = mqproc__err(r->err, MQPROC_ENOMEM, "out of memory");
    return;
  }
  for (int row = 0; row < nt; row++)
    rows[row] = row;
  parse(r, res, rows, nt);
  free(rows);
}
