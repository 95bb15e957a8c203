/* The store's one factory (store.h): the backend a URL names is chosen here and nowhere
 * else. */
#include "store/store.h"

int mqproc__store_new(mqproc__store_t **out, const char *url, mqproc__loop_t *loop, int pooled,
                      char *err) {
  int rc;
  if (mqproc__store_is_sqlite(url))
    return mqproc__store_sqlite_new(out, url, loop, err); /* (no pooler: one file) */
  if ((rc = mqproc__store_pg_new(out, url, loop, err)) == MQPROC_OK && pooled)
    mqproc__store_pg_pooled(*out);
  return rc;
}
