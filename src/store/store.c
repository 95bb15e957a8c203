/* The store's one factory (store.h): the backend a URL names is chosen here and nowhere
 * else; and what both backends' beats share. */
#include "store/store.h"

#include <stdio.h>
#include <string.h>

int mqproc__store_new(mqproc__store_t **out, const char *url, mqproc__loop_t *loop, int pooled,
                      char *err) {
  int rc;
  if (mqproc__store_is_sqlite(url))
    return mqproc__store_sqlite_new(out, url, loop, err); /* (no pooler: one file) */
  if ((rc = mqproc__store_pg_new(out, url, loop, err)) == MQPROC_OK && pooled)
    mqproc__store_pg_pooled(*out);
  return rc;
}

void mqproc__beat_wish(mqproc__beat_t *b, const char *text, long long at_ms) {
  const char *tab = strchr(text, '\t');
  size_t n = tab != NULL ? (size_t)(tab - text) : strlen(text);
  snprintf(b->wish, sizeof(b->wish), "%.*s", (int)(n < sizeof(b->wish) ? n : 0), text);
  snprintf(b->wish_by, sizeof(b->wish_by), "%s", tab != NULL ? tab + 1 : "");
  b->wish_at = at_ms;
}
