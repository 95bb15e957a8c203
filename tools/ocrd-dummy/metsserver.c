/* ocrd-dummy's client of OCR-D's METS server: HTTP with libcurl over a Unix socket or TCP,
 * direct or through the Processing Server's /tcp_mets multiplexer (see metsserver.h). */
#include "metsserver.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dummy.h"
#include "fsio.h"
#include "xmlutil.h"

#define CONNECT_TIMEOUT_MS 10000L
/* PUT / writes the whole METS: a big one on a slow shared disk takes its time */
#define REQUEST_TIMEOUT_MS 600000L
/* GET /file lists every file of the workspace: room for a very large METS */
#define MAX_ANSWER ((size_t)256 << 20)

struct dummy_msrv {
  char *url;    /* as given, for messages */
  char *base;   /* "http://localhost" for a socket, else the URL without trailing '/' */
  char *socket; /* the Unix socket's path; NULL over TCP */
  char *ws_dir; /* the workspace: the multiplexer's key */
  bool mux;     /* the Processing Server's /tcp_mets */
  CURL *curl;   /* one handle: its connection is reused from request to request */
};

/* An answer's body, NUL-terminated. */
typedef struct answer {
  char *data;
  size_t len;
  bool too_big;
} answer_t;

/* What a request carries: nothing, a form (a JSON object of strings and booleans) or JSON. */
typedef enum send { SEND_NONE, SEND_FORM, SEND_JSON } send_t;

int dummy_msrv_open(dummy_msrv_t **out, const char *url, const char *ws_dir, char *err) {
  dummy_msrv_t *s = calloc(1, sizeof(*s));
  bool tcp = strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0;
  size_t n = strlen(url);
  if (s == NULL)
    return dummy_err(err, "out of memory");
  while (tcp && n > 0 && url[n - 1] == '/')
    n--;
  s->url = strdup(url);
  s->ws_dir = strdup(ws_dir);
  s->socket = tcp ? NULL : strdup(url);
  s->base = tcp ? strndup(url, n) : strdup("http://localhost");
  s->mux = tcp && n >= 9 && strncmp(url + n - 9, "/tcp_mets", 9) == 0;
  s->curl = curl_easy_init();
  if (s->url == NULL || s->ws_dir == NULL || (!tcp && s->socket == NULL) || s->base == NULL ||
      s->curl == NULL) {
    dummy_msrv_close(s);
    return dummy_err(err, "out of memory");
  }
  if (url[0] == '\0') {
    dummy_msrv_close(s);
    return dummy_err(err, "--mets-server-url is empty");
  }
  *out = s;
  return 0;
}

void dummy_msrv_close(dummy_msrv_t *s) {
  if (s == NULL)
    return;
  curl_easy_cleanup(s->curl);
  free(s->url);
  free(s->base);
  free(s->socket);
  free(s->ws_dir);
  free(s);
}

static size_t on_data(char *p, size_t size, size_t n, void *ud) {
  answer_t *a = ud;
  size_t len = size * n;
  char *grown;
  if (len > MAX_ANSWER - a->len) {
    a->too_big = true;
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

/* The options of one request on the handle (reset first: nothing of the last remains). */
static CURLcode set_request(dummy_msrv_t *s, const char *method, const char *url,
                            struct curl_slist *hdr, const char *body, answer_t *a, char *cerr) {
  CURL *c = s->curl;
  CURLcode rc = CURLE_OK;
  curl_easy_reset(c);
  rc |= curl_easy_setopt(c, CURLOPT_URL, url);
  rc |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  rc |= curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  rc |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* a server's worker threads run us */
  rc |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
  rc |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
  rc |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
  rc |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  rc |= curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
  rc |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
  if (s->socket != NULL) { /* no proxy stands between a process and a local socket */
    rc |= curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, s->socket);
    rc |= curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  }
  if (body != NULL) { /* also "" for a PUT without a body: Content-Length: 0 */
    rc |= curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    rc |= curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
  }
  return rc;
}

/* Why nothing answers on the socket: curl can only say it found no "localhost port 80". */
static int socket_gone(const dummy_msrv_t *s, char *err) {
  struct stat st;
  if (stat(s->socket, &st) != 0)
    return dummy_err(err, "cannot connect to the socket %s: %s", s->socket, strerror(errno));
  if (!S_ISSOCK(st.st_mode))
    return dummy_err(err, "%s is not a socket", s->socket);
  return dummy_err(err, "cannot connect to the socket %s: nothing listens on it", s->socket);
}

/* One HTTP exchange; the answer's status must be 2xx. ctype NULL: no Content-Type. */
static int exchange(dummy_msrv_t *s, const char *method, const char *url, const char *ctype,
                    const char *body, answer_t *a, char *err) {
  char cerr[CURL_ERROR_SIZE] = "", header[128];
  struct curl_slist *hdr = NULL;
  long status = 0;
  CURLcode rc;
  snprintf(header, sizeof(header), "Content-Type:%s%s", ctype != NULL ? " " : "",
           ctype != NULL ? ctype : "");
  if ((hdr = curl_slist_append(NULL, header)) == NULL)
    return dummy_err(err, "out of memory");
  rc = set_request(s, method, url, hdr, body, a, cerr);
  if (rc == CURLE_OK)
    rc = curl_easy_perform(s->curl);
  curl_slist_free_all(hdr);
  if (a->too_big)
    return dummy_err(err, "its answer exceeds %zu bytes", MAX_ANSWER);
  if (rc == CURLE_COULDNT_CONNECT && s->socket != NULL)
    return socket_gone(s, err);
  if (rc != CURLE_OK)
    return dummy_err(err, "%s", cerr[0] != '\0' ? cerr : curl_easy_strerror(rc));
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status > 299)
    return dummy_err(err, "HTTP %ld: %.300s", status, a->data != NULL ? a->data : "");
  return 0;
}

/* data (an object of strings and booleans) as application/x-www-form-urlencoded. */
static char *form_encode(CURL *c, const json_t *data) {
  char *text = NULL, *esc;
  size_t size = 0;
  const char *key;
  json_t *v;
  bool first = true, ok = true;
  FILE *f = open_memstream(&text, &size);
  if (f == NULL)
    return NULL;
  json_object_foreach((json_t *)data, key, v) {
    const char *value = json_is_string(v) ? json_string_value(v)
                        : json_is_true(v) ? "true"
                                          : "false";
    ok = ok && (esc = curl_easy_escape(c, value, 0)) != NULL;
    if (ok) {
      fprintf(f, "%s%s=%s", first ? "" : "&", key, esc);
      curl_free(esc);
    }
    first = false;
  }
  if (fclose(f) != 0 || !ok) {
    free(text);
    return NULL;
  }
  return text;
}

/* The route's request as the multiplexer wants it (MpxReq in ocrd/mets_server.py). */
static char *mux_body(dummy_msrv_t *s, const char *method, const char *route, send_t kind,
                      json_t *data, const char *rtype) {
  json_t *req = json_pack("{s:s, s:s, s:s, s:s, s:{}}", "workspace_path", s->ws_dir, "method_type",
                          method, "response_type", rtype, "request_url", route, "request_data");
  char *text;
  if (req != NULL && kind != SEND_NONE)
    json_object_set(json_object_get(req, "request_data"), kind == SEND_FORM ? "form" : "class",
                    data);
  text = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
  json_decref(req);
  return text;
}

/* The multiplexer answers 200 with {"error": …} when the server behind it failed, and a
 * text answer as {"text": …}: a->data becomes what the route itself would have answered. */
static int mux_unwrap(answer_t *a, const char *rtype, char *err) {
  json_t *doc = json_loadb(a->data != NULL ? a->data : "", a->len, 0, NULL), *e, *t;
  int rc = 0;
  if (!json_is_object(doc))
    rc = dummy_err(err, "the /tcp_mets answer is not a JSON object: %.200s",
                   a->data != NULL ? a->data : "");
  else if ((e = json_object_get(doc, "error")) != NULL)
    rc = dummy_err(err, "%.300s", json_is_string(e) ? json_string_value(e) : "(not a text)");
  else if (strcmp(rtype, "text") == 0) {
    if (!json_is_string(t = json_object_get(doc, "text")))
      rc = dummy_err(err, "the /tcp_mets answer has no \"text\"");
    else {
      free(a->data);
      a->len = json_string_length(t);
      if ((a->data = strndup(json_string_value(t), a->len)) == NULL)
        rc = dummy_err(err, "out of memory");
    }
  }
  json_decref(doc);
  return rc;
}

/* method /route with data (a form or JSON, by kind); *a the route's answer, of the
 * multiplexer's response_type rtype ("text", "dict" or "class"). */
static int call(dummy_msrv_t *s, const char *method, const char *route, send_t kind, json_t *data,
                const char *rtype, answer_t *a, char *err) {
  char why[DUMMY_ERR_LEN], *url = NULL, *body = NULL;
  const char *ctype = NULL;
  int rc;
  memset(a, 0, sizeof(*a));
  if (s->mux) {
    body = mux_body(s, method, route, kind, data, rtype);
    ctype = "application/json";
  } else if (kind == SEND_FORM) {
    body = form_encode(s->curl, data);
    ctype = "application/x-www-form-urlencoded";
  } else if (kind == SEND_JSON) {
    body = json_dumps(data, JSON_COMPACT);
    ctype = "application/json";
  } else if (strcmp(method, "PUT") == 0) {
    body = strdup("");
  }
  if (asprintf(&url, "%s%s%s", s->base, s->mux ? "" : "/", s->mux ? "" : route) < 0)
    url = NULL;
  if (url == NULL || (body == NULL && (s->mux || kind != SEND_NONE || strcmp(method, "PUT") == 0)))
    rc = dummy_err(why, "out of memory");
  else
    rc = exchange(s, s->mux ? "POST" : method, url, ctype, body, a, why);
  if (rc == 0 && s->mux)
    rc = mux_unwrap(a, rtype, why);
  free(url);
  free(body);
  if (rc != 0) {
    free(a->data);
    memset(a, 0, sizeof(*a));
    return dummy_err(err, "METS server %s: %s /%s: %s", s->url, method, route, why);
  }
  return 0;
}

/* The answer as a JSON object with an array under key; NULL with err set. */
static json_t *answer_array(dummy_msrv_t *s, const answer_t *a, const char *route, const char *key,
                            json_t **doc, char *err) {
  json_t *arr;
  *doc = json_loadb(a->data != NULL ? a->data : "", a->len, 0, NULL);
  if (!json_is_array(arr = json_object_get(*doc, key))) {
    dummy_err(err, "METS server %s: GET /%s: no \"%s\" list in the answer: %.200s", s->url, route,
              key, a->data != NULL ? a->data : "");
    return NULL;
  }
  return arr;
}

int dummy_msrv_workspace_path(dummy_msrv_t *s, char **out, char *err) {
  answer_t a;
  char why[DUMMY_ERR_LEN];
  if (call(s, "GET", "workspace_path", SEND_NONE, NULL, "text", &a, why) != 0)
    return dummy_err(err, "cannot reach the %s", why);
  *out = a.data != NULL ? a.data : strdup("");
  return *out != NULL ? 0 : dummy_err(err, "out of memory");
}

/* The fileGrp USE=use under sec, added when missing (grps indexes them). */
static xmlNode *grp_of(xmlNode *sec, xmlNs *ns, xmlHashTable *grps, const char *use) {
  xmlNode *g = xmlHashLookup(grps, BX(use));
  if (g == NULL && (g = dummy_xml_add(sec, ns, "fileGrp", "USE", use, NULL)) != NULL &&
      xmlHashAddEntry(grps, BX(use), g) != 0)
    return NULL;
  return g;
}

/* One file of GET /file's answer into the document: its mets:file and its page's fptr. */
static int add_file_node(xmlNode *sec, xmlHashTable *grps, xmlHashTable *divs, xmlNs *xl,
                         const json_t *f, char *err) {
  const char *id = json_string_value(json_object_get(f, "file_id"));
  const char *use = json_string_value(json_object_get(f, "file_grp"));
  const char *mime = json_string_value(json_object_get(f, "mimetype"));
  const char *page = json_string_value(json_object_get(f, "page_id"));
  const char *local = json_string_value(json_object_get(f, "local_filename"));
  const char *url = json_string_value(json_object_get(f, "url"));
  xmlNode *grp, *file = NULL, *loc = NULL,
                *div = page != NULL ? xmlHashLookup(divs, BX(page)) : NULL;
  if (id == NULL || use == NULL || mime == NULL)
    return dummy_err(err, "a file without file_id, file_grp or mimetype");
  if ((grp = grp_of(sec, sec->ns, grps, use)) != NULL)
    file = dummy_xml_add(grp, sec->ns, "file", "ID", id, "MIMETYPE", mime, NULL);
  if (file != NULL && local != NULL)
    loc = dummy_xml_add(file, sec->ns, "FLocat", "LOCTYPE", "OTHER", "OTHERLOCTYPE", "FILE", NULL);
  else if (file != NULL && url != NULL)
    loc = dummy_xml_add(file, sec->ns, "FLocat", "LOCTYPE", "URL", NULL);
  if (file == NULL ||
      ((local != NULL || url != NULL) &&
       (loc == NULL || xmlNewNsProp(loc, xl, BX("href"), BX(local != NULL ? local : url)) == NULL)))
    return dummy_err(err, "out of memory");
  if (div != NULL && dummy_xml_add(div, sec->ns, "fptr", "FILEID", id, NULL) == NULL)
    return dummy_err(err, "out of memory");
  return 0;
}

/* A METS document of the pages and files (see dummy_msrv_load); NULL with err set. */
static xmlDoc *build_doc(const json_t *pages, const json_t *files, char *err) {
  xmlDoc *doc = xmlNewDoc(BX("1.0"));
  xmlNode *root = doc != NULL ? xmlNewDocNode(doc, NULL, BX("mets"), NULL) : NULL, *sec, *seq;
  xmlNs *ns = root != NULL ? xmlNewNs(root, BX(METS_NS), BX("mets")) : NULL;
  xmlNs *xl = root != NULL ? xmlNewNs(root, BX(XLINK_NS), BX("xlink")) : NULL;
  xmlHashTable *divs = xmlHashCreate(64), *grps = xmlHashCreate(16);
  int rc = doc != NULL && root != NULL && ns != NULL && xl != NULL && divs != NULL && grps != NULL
               ? 0
               : dummy_err(err, "out of memory");
  if (root != NULL) {
    xmlSetNs(root, ns);
    xmlDocSetRootElement(doc, root);
  }
  sec = rc == 0 ? dummy_xml_add(root, ns, "fileSec", NULL) : NULL;
  seq = rc == 0 ? dummy_xml_add(root, ns, "structMap", "TYPE", "PHYSICAL", NULL) : NULL;
  seq = seq != NULL ? dummy_xml_add(seq, ns, "div", "TYPE", "physSequence", NULL) : NULL;
  if (rc == 0 && (sec == NULL || seq == NULL))
    rc = dummy_err(err, "out of memory");
  for (size_t i = 0; rc == 0 && i < json_array_size(pages); i++) {
    const char *id = json_string_value(json_array_get(pages, i));
    xmlNode *div =
        id != NULL ? dummy_xml_add(seq, ns, "div", "TYPE", "page", "ID", id, NULL) : NULL;
    if (id == NULL)
      rc = dummy_err(err, "a physical page that is not a text");
    else if (div == NULL)
      rc = dummy_err(err, "out of memory");
    else
      xmlHashAddEntry(divs, BX(id), div); /* a duplicate ID keeps the first, as mets.c */
  }
  for (size_t i = 0; rc == 0 && i < json_array_size(files); i++)
    rc = add_file_node(sec, grps, divs, xl, json_array_get(files, i), err);
  xmlHashFree(divs, NULL);
  xmlHashFree(grps, NULL);
  if (rc != 0) {
    xmlFreeDoc(doc);
    return NULL;
  }
  return doc;
}

int dummy_msrv_load(dummy_msrv_t *s, dummy_mets_t **out, char *err) {
  answer_t pa = {0}, fa = {0};
  json_t *pdoc = NULL, *fdoc = NULL, *pages = NULL, *files = NULL;
  char why[DUMMY_ERR_LEN], *name = NULL;
  xmlDoc *doc = NULL;
  int rc = call(s, "GET", "physical_pages", SEND_NONE, NULL, "dict", &pa, err);
  if (rc == 0)
    rc = call(s, "GET", "file", SEND_NONE, NULL, "class", &fa, err);
  if (rc == 0 &&
      (pages = answer_array(s, &pa, "physical_pages", "physical_pages", &pdoc, err)) == NULL)
    rc = -1;
  if (rc == 0 && (files = answer_array(s, &fa, "file", "files", &fdoc, err)) == NULL)
    rc = -1;
  if (rc == 0 && (doc = build_doc(pages, files, why)) == NULL)
    rc = dummy_err(err, "METS server %s: GET /file: %s", s->url, why);
  if (rc == 0 && asprintf(&name, "the METS of the METS server %s", s->url) < 0)
    name = NULL;
  if (rc == 0)
    rc = dummy_mets_from_doc(out, doc, name != NULL ? name : s->url, err);
  free(name);
  json_decref(pdoc);
  json_decref(fdoc);
  free(pa.data);
  free(fa.data);
  return rc;
}

int dummy_msrv_add_file(dummy_msrv_t *s, const dummy_msrv_file_t *f, char *err) {
  json_t *d = json_pack("{s:s, s:s, s:s, s:s}", "file_grp", f->file_grp, "file_id", f->file_id,
                        "mimetype", f->mimetype, "local_filename", f->local_filename);
  answer_t a;
  int rc;
  if (d == NULL ||
      (f->page_id != NULL && json_object_set_new(d, "page_id", json_string(f->page_id)) != 0) ||
      (f->force && json_object_set_new(d, "force", json_true()) != 0)) {
    json_decref(d);
    return dummy_err(err, "out of memory");
  }
  rc = call(s, "POST", "file", SEND_FORM, d, "class", &a, err);
  json_decref(d);
  free(a.data);
  return rc;
}

int dummy_msrv_add_agent(dummy_msrv_t *s, const char *name, const char *role,
                         const dummy_note_t *notes, size_t n_notes, char *err) {
  json_t *arr = json_array(), *d;
  answer_t a;
  int rc;
  for (size_t i = 0; arr != NULL && i < n_notes; i++)
    if (json_array_append_new(
            arr, json_pack("[{s:s}, s]", "option", notes[i].option, notes[i].text)) != 0) {
      json_decref(arr);
      arr = NULL;
    }
  d = arr != NULL
          ? json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "name", name, "type", "OTHER", "role",
                      "OTHER", "otherrole", role, "othertype", "SOFTWARE", "notes", arr)
          : NULL;
  if (d == NULL)
    return dummy_err(err, "out of memory");
  rc = call(s, "POST", "agent", SEND_JSON, d, "class", &a, err);
  json_decref(d);
  free(a.data);
  return rc;
}

int dummy_msrv_save(dummy_msrv_t *s, char *err) {
  answer_t a;
  int rc = call(s, "PUT", "", SEND_NONE, NULL, "text", &a, err);
  free(a.data);
  return rc;
}
