/* Whether an OCR-D try left its output in the METS (ocrd_check.h). */
#include "runner/ocrd_check.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "codec/mets.h"

#define CONNECT_TIMEOUT_MS 5000
#define REQUEST_TIMEOUT_MS 60000
#define MAX_ANSWER ((size_t)256 << 20) /* GET /file of a very large workspace */
#define MISSING_SHOWN 10               /* page ids named in the reason */

static char **copy_grps(const json_t *arr) {
  size_t n = json_array_size(arr);
  char **v = mqproc__calloc(n + 1, sizeof(char *));
  for (size_t i = 0; v != NULL && i < n; i++)
    if ((v[i] = mqproc__strdup(json_string_value(json_array_get(arr, i)))) == NULL) {
      for (size_t j = 0; j < i; j++)
        free(v[j]);
      free(v);
      v = NULL;
    }
  return v;
}

static void free_grps(char **v) {
  for (size_t i = 0; v != NULL && v[i] != NULL; i++)
    free(v[i]);
  free(v);
}

mqproc__ocrd_check_t *mqproc__ocrd_check_new(const mqproc__msg_t *msg, const char *mets,
                                             const char *mets_server_url) {
  mqproc__ocrd_check_t *c;
  if (msg->output_file_grps == NULL || json_array_size(msg->output_file_grps) == 0 ||
      (c = mqproc__calloc(1, sizeof(*c))) == NULL)
    return NULL;
  c->mets = mqproc__strdup(mets);
  c->mets_server_url = mqproc__strdup(mets_server_url);
  c->page_id =
      msg->page_id != NULL && msg->page_id[0] != '\0' ? mqproc__strdup(msg->page_id) : NULL;
  c->inputs = copy_grps(msg->input_file_grps);
  c->outputs = copy_grps(msg->output_file_grps);
  if (c->mets == NULL || (mets_server_url != NULL && c->mets_server_url == NULL) ||
      (msg->page_id != NULL && msg->page_id[0] != '\0' && c->page_id == NULL) ||
      c->inputs == NULL || c->outputs == NULL) {
    mqproc__ocrd_check_free(c);
    return NULL;
  }
  return c;
}

void mqproc__ocrd_check_free(mqproc__ocrd_check_t *c) {
  if (c == NULL)
    return;
  free(c->mets);
  free(c->mets_server_url);
  free(c->page_id);
  free_grps(c->inputs);
  free_grps(c->outputs);
  free(c);
}

/* ---- asking the METS server ---------------------------------------------------------- */

typedef struct answer {
  char *data;
  size_t len;
  int too_big;
} answer_t;

static size_t on_data(char *p, size_t size, size_t n, void *ud) {
  answer_t *a = ud;
  size_t len = size * n;
  char *grown;
  if (len > MAX_ANSWER - a->len) {
    a->too_big = 1;
    return 0;
  }
  if ((grown = realloc(a->data, a->len + len + 1)) == NULL)
    return 0;
  memcpy(grown + a->len, p, len);
  a->len += len;
  grown[a->len] = '\0';
  a->data = grown;
  return len;
}

/* The directory of the METS: the workspace OCR-D's /tcp_mets multiplexer knows it by. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash == NULL   ? mqproc__strdup(".")
         : slash == path ? mqproc__strdup("/")
                         : mqproc__strndup(path, (size_t)(slash - path));
}

/* GET /file?file_grp=grp[&page_id=sel] of the METS server at url (a socket's path, an
 * http:// URL, or the Processing Server's /tcp_mets: then a POST of OCR-D's MpxReq):
 * *files the answer's "files"; -1 with why. */
static int server_find(const mqproc__ocrd_check_t *c, const char *grp, json_t **files, char *why,
                       size_t wn) {
  const char *url = c->mets_server_url;
  int tcp = strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0;
  size_t ul = strlen(url);
  int mux;
  char cerr[CURL_ERROR_SIZE] = "", *full = NULL, *body = NULL, *eg = NULL, *ep = NULL;
  answer_t a = {0};
  struct curl_slist *hdr = NULL;
  json_t *doc = NULL;
  long status = 0;
  CURLcode rc = CURLE_OUT_OF_MEMORY;
  CURL *h = curl_easy_init();
  while (tcp && ul > 0 && url[ul - 1] == '/')
    ul--;
  mux = tcp && ul >= 9 && strncmp(url + ul - 9, "/tcp_mets", 9) == 0;
  if (h == NULL)
    goto out;
  if (mux) {
    char *ws = dir_of(c->mets);
    json_t *req = ws == NULL
                      ? NULL
                      : json_pack("{s:s, s:s, s:s, s:s, s:{s:{s:s}}}", "workspace_path", ws,
                                  "method_type", "GET", "response_type", "class", "request_url",
                                  "file", "request_data", "params", "file_grp", grp);
    if (req != NULL && c->page_id != NULL)
      json_object_set_new(json_object_get(json_object_get(req, "request_data"), "params"),
                          "page_id", json_string(c->page_id));
    body = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    free(ws);
    full = mqproc__strndup(url, ul);
    hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (body == NULL || full == NULL || hdr == NULL)
      goto out;
  } else {
    if ((eg = curl_easy_escape(h, grp, 0)) == NULL ||
        (c->page_id != NULL && (ep = curl_easy_escape(h, c->page_id, 0)) == NULL))
      goto out;
    full = mqproc__asprintf("%.*s/file?file_grp=%s%s%s", tcp ? (int)ul : 16,
                            tcp ? url : "http://localhost", eg, ep != NULL ? "&page_id=" : "",
                            ep != NULL ? ep : "");
    if (full == NULL)
      goto out;
  }
  rc = curl_easy_setopt(h, CURLOPT_URL, full);
  rc |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  rc |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  rc |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
  rc |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)REQUEST_TIMEOUT_MS);
  rc |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
  rc |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  rc |= curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
  if (!tcp) {
    rc |= curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, url);
    rc |= curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  }
  if (body != NULL) {
    rc |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    rc |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  }
  if (rc == CURLE_OK)
    rc = curl_easy_perform(h);
  if (rc == CURLE_OK)
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
out:
  if (rc == CURLE_OK && status >= 200 && status <= 299)
    doc = json_loadb(a.data != NULL ? a.data : "", a.len, 0, NULL);
  if (rc == CURLE_OUT_OF_MEMORY && a.data == NULL && full == NULL)
    snprintf(why, wn, "out of memory");
  else if (a.too_big)
    snprintf(why, wn, "its answer exceeds %zu MiB", MAX_ANSWER >> 20);
  else if (rc != CURLE_OK)
    snprintf(why, wn, "%s", cerr[0] != '\0' ? cerr : curl_easy_strerror(rc));
  else if (status < 200 || status > 299)
    snprintf(why, wn, "HTTP %ld: %.300s", status, a.data != NULL ? a.data : "");
  else if (json_object_get(doc, "error") != NULL) /* /tcp_mets: the server behind failed */
    snprintf(why, wn, "%.300s",
             json_is_string(json_object_get(doc, "error"))
                 ? json_string_value(json_object_get(doc, "error"))
                 : "(an error that is not a text)");
  else if (!json_is_array(json_object_get(doc, "files")))
    snprintf(why, wn, "no \"files\" list in its answer: %.200s", a.data != NULL ? a.data : "");
  else
    *files = json_incref(json_object_get(doc, "files"));
  json_decref(doc);
  curl_slist_free_all(hdr);
  curl_free(eg);
  curl_free(ep);
  free(full);
  free(body);
  free(a.data);
  curl_easy_cleanup(h);
  return *files != NULL ? 0 : -1;
}

/* ---- the check ----------------------------------------------------------------------- */

/* The page ids of files (each page once, in the order they come). */
static json_t *pages_of(const json_t *files) {
  json_t *pages = json_array(), *seen = json_object(), *f;
  size_t i;
  json_array_foreach(files, i, f) {
    const char *p = json_string_value(json_object_get(f, "page_id"));
    if (p != NULL && json_object_get(seen, p) == NULL) {
      json_object_set_new(seen, p, json_true());
      json_array_append_new(pages, json_string(p));
    }
  }
  json_decref(seen);
  return pages;
}

/* The pages of group grp among those page_id selects, from the METS server or m. */
static json_t *find_pages(mqproc__ocrd_check_t *c, const mqproc__mets_t *m, const char *grp) {
  json_t *files = NULL, *pages;
  char why[MQPROC_ERR_LEN];
  int rc;
  if (c->mets_server_url != NULL) {
    rc = server_find(c, grp, &files, why, sizeof(why));
  } else {
    mqproc__mets_query_t q = {.file_grp = grp, .page_id = c->page_id};
    rc = mqproc__mets_find(m, &q, &files, why) == MQPROC_OK ? 0 : -1;
  }
  if (rc != 0) {
    c->failed = 1;
    snprintf(c->why, sizeof(c->why), "cannot check the output: %s %.300s: %s",
             c->mets_server_url != NULL ? "the METS server" : "the METS",
             c->mets_server_url != NULL ? c->mets_server_url : c->mets, why);
    return NULL;
  }
  pages = pages_of(files);
  json_decref(files);
  return pages;
}

static int has(const json_t *arr, const char *s) {
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) {
    if (strcmp(json_string_value(v), s) == 0)
      return 1;
  }
  return 0;
}

/* Says which of want (page ids) group grp lacks (present: its pages); 1 when some. */
static int missing(mqproc__ocrd_check_t *c, const json_t *want, const json_t *present,
                   const char *grp) {
  size_t i, n = 0, at;
  json_t *v;
  json_array_foreach(want, i, v) {
    n += !has(present, json_string_value(v));
  }
  if (n == 0)
    return 0;
  at = (size_t)snprintf(c->why, sizeof(c->why),
                        "the processor exited 0, but the %s lists no file in %.100s for %zu of "
                        "%zu pages (",
                        c->mets_server_url != NULL ? "METS server" : "METS", grp, n,
                        json_array_size(want));
  n = 0;
  json_array_foreach(want, i, v) {
    if (has(present, json_string_value(v)) || at >= sizeof(c->why))
      continue;
    if (n++ == MISSING_SHOWN) {
      at += (size_t)snprintf(c->why + at, sizeof(c->why) - at, ", ...");
      break;
    }
    at += (size_t)snprintf(c->why + at, sizeof(c->why) - at, "%s%.100s", n > 1 ? ", " : "",
                           json_string_value(v));
  }
  if (at < sizeof(c->why))
    snprintf(c->why + at, sizeof(c->why) - at,
             "): its output is lost or was never made (--ocrd-check-output=false for a processor "
             "that skips pages)");
  c->failed = 1;
  return 1;
}

void mqproc__ocrd_check_run(mqproc__ocrd_check_t *c) {
  mqproc__mets_t *m = NULL;
  json_t *want = NULL;
  char err[MQPROC_ERR_LEN];
  c->failed = 0;
  c->why[0] = '\0';
  if (c->mets_server_url == NULL && mqproc__mets_load(c->mets, &m, err) != MQPROC_OK) {
    c->failed = 1;
    snprintf(c->why, sizeof(c->why), "cannot check the output: %s", err);
    return;
  }
  /* the pages that have a file in every input group */
  for (size_t i = 0; c->inputs[i] != NULL && !c->failed; i++) {
    json_t *pages = find_pages(c, m, c->inputs[i]), *kept;
    size_t k;
    json_t *v;
    if (pages == NULL)
      break;
    if (want == NULL) {
      want = pages;
      continue;
    }
    kept = json_array();
    json_array_foreach(want, k, v) {
      if (has(pages, json_string_value(v)))
        json_array_append(kept, v);
    }
    json_decref(pages);
    json_decref(want);
    want = kept;
  }
  for (size_t i = 0; c->outputs[i] != NULL && !c->failed && json_array_size(want) > 0; i++) {
    json_t *present = find_pages(c, m, c->outputs[i]);
    if (present != NULL)
      missing(c, want, present, c->outputs[i]);
    json_decref(present);
  }
  json_decref(want);
  mqproc__mets_free(m);
}
