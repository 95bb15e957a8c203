/* A METS document as OCR-D core 3.12.1's OcrdMets sees it (ocrd_models/ocrd_mets.py, without
 * its caches, as its METS server runs it): libxml2 underneath, the answers and the changes of
 * OCR-D's find_files, add_file, add_agent, agents, physical_pages, file_groups and
 * unique_identifier, and an atomic save. mqproc's METS server (http/mets_server.c) is its
 * user; anything that reads or changes a mets.xml the way OCR-D does may be another.
 *
 * API:
 *   mqproc__mets_load() / _load_fd() / _free()   parse a METS safely (limits below)
 *   mqproc__mets_find() / _query()               find_files: the files a query selects
 *   mqproc__mets_physical_pages() / _file_groups() / _agents() / _unique_identifier()
 *   mqproc__mets_add_file() / _add_agent()       OCR-D's changes, refused as OCR-D refuses
 *   mqproc__mets_dump() / _save()                serialise; write atomically (keeping a lock)
 *
 * Loading: a regular file only (no link followed, no FIFO waited for), at most
 * MQPROC__METS_MAX_BYTES, no network, no DTD (a document with a DOCTYPE is refused, so
 * there is no entity to expand), libxml2's default limits (no XML_PARSE_HUGE), the root
 * mets:mets. Blank text between elements is dropped (as OCR-D's save does), so a save is
 * indented throughout.
 *
 * Regular expressions (a query's "//" values, page_id's "//" tokens, the xs:ID check) are
 * PCRE2's with UTF and Unicode properties, matched whole (Python's re.fullmatch): the syntax
 * Python's re and PCRE2 share behaves alike; docs/ocrd.md says where they differ.
 *
 * Not thread-safe: one thread uses a document at a time. */
#ifndef MQPROC_CODEC_METS_H
#define MQPROC_CODEC_METS_H

#include <jansson.h>
#include <stddef.h>

#define MQPROC__METS_MAX_BYTES (256u << 20) /* the largest mets.xml loaded */
#define MQPROC__METS_RANGE_MAX 100000       /* values an A..B page range may expand to */

typedef struct mqproc__mets mqproc__mets_t;

/* Which of OCR-D's exceptions a refusal is (OCR-D's METS server answers each its own way). */
typedef enum mqproc__mets_why {
  MQPROC__METS_WHY_NONE = 0,
  MQPROC__METS_WHY_VALUE,  /* ValueError: a bad page_id expression, file ID, fileGrp, ... */
  MQPROC__METS_WHY_REGEX,  /* re.error: a regular expression that does not compile */
  MQPROC__METS_WHY_EXISTS, /* FileExistsError: add_file of an ID its fileGrp has */
} mqproc__mets_why_t;

/* Parses the METS at path (opened without following a link or blocking): MQPROC_OK with
 * *out (free with mqproc__mets_free), or an error with err (MQPROC_ERR_LEN bytes):
 * MQPROC_ESYS (cannot open or read it), MQPROC_EINVAL (no regular file, too large, not
 * well-formed, a DOCTYPE, no mets:mets), MQPROC_ENOMEM. */
int mqproc__mets_load(const char *path, mqproc__mets_t **out, char *err);
/* The same from fd (read from its start with pread; the fd stays the caller's); name for
 * messages. */
int mqproc__mets_load_fd(int fd, const char *name, mqproc__mets_t **out, char *err);
/* NULL is ignored. */
void mqproc__mets_free(mqproc__mets_t *m);

/* ---- reading ------------------------------------------------------------------------ */

typedef struct mqproc__mets_query {
  const char *file_grp, *file_id, *page_id, *mimetype, *url, *local_filename; /* NULL: any */
} mqproc__mets_query_t;

/* find_files as OCR-D's OcrdMets.find_files: a value (but page_id) that starts with "//"
 * is a regular expression matched whole (local_filename: never), else compared as it is; an
 * empty value (NULL too) selects nothing out (page_id "": every file is left out, as OCR-D
 * does). page_id is OCR-D's page language: a comma list of tokens, each optionally
 * prefixed "physical:" / "logical:" (+ "id:", "order:", "orderlabel:", "label:",
 * "contentids:" / "id:", "dmdid:", "type:", "label:"), then "~" (not), then "//REGEX", or
 * "A..B" (ocrd_utils.generate_range), or a value; matched against the physical pages'
 * attributes and the logical divs linked to them (mets:structLink).
 * *files: a new JSON array of {"file_grp", "file_id", "page_id", "mimetype", "url",
 * "local_filename"} (JSON null where absent), in document order. MQPROC_EINVAL with err
 * for a page_id or regular expression OCR-D refuses; MQPROC_ENOMEM. */
int mqproc__mets_find(const mqproc__mets_t *m, const mqproc__mets_query_t *q, json_t **files,
                      char *err);
/* The same, and *why (not NULL) says which of OCR-D's errors a refusal is: _VALUE (its
 * ValueError, and what OCR-D would fail on otherwise: an empty A..B range, one beyond
 * MQPROC__METS_RANGE_MAX) or _REGEX. */
int mqproc__mets_query(const mqproc__mets_t *m, const mqproc__mets_query_t *q, json_t **files,
                       mqproc__mets_why_t *why, char *err);

/* The @ID of each structMap[@TYPE=PHYSICAL]/div[@TYPE=physSequence]/div[@TYPE=page], in
 * order: a new JSON array of strings; NULL when out of memory. */
json_t *mqproc__mets_physical_pages(const mqproc__mets_t *m);
/* The @USE of every mets:fileGrp in document order (null where it has none); a new array. */
json_t *mqproc__mets_file_groups(const mqproc__mets_t *m);
/* metsHdr's agents: a new array of {"name", "type", "role", "otherrole", "othertype",
 * "notes"} (null where absent), notes an array of [{attribute: value}, text or null],
 * attributes in a namespace named "{URI}local" (as OCR-D's OcrdAgent.notes). */
json_t *mqproc__mets_agents(const mqproc__mets_t *m);
/* The text of the first mods:identifier of type purl, else urn, doi, url: 1 with *out (a new
 * string; NULL when the element has no text), 0 when there is none, -1 without memory. */
int mqproc__mets_unique_identifier(const mqproc__mets_t *m, char **out);

/* ---- changing ----------------------------------------------------------------------- */

/* A mets:file to add. page_id, url, local_filename: NULL or "" for none. */
typedef struct mqproc__mets_file {
  const char *file_grp, *file_id, *page_id, *mimetype, *url, *local_filename;
} mqproc__mets_file_t;

/* OCR-D's OcrdMets.add_file (ignore never set): the ID and fileGrp must be xs:ID-like
 * (^[a-zA-Z_][\w.-]*$); the fileGrp is made when missing; a file of that ID in that fileGrp
 * is a FileExistsError unless its page and mimetype are f's and force is set (then it is
 * removed first, with its fptrs and any page div left empty); the new mets:file gets
 * FLocats (local: LOCTYPE=OTHER OTHERLOCTYPE=FILE, then url: LOCTYPE=URL) and, with a
 * page, the fptr in that page's div (structMap, physSequence and div made as needed; other
 * fptrs to its ID in the physical pages dropped). MQPROC_OK; MQPROC_EINVAL with err (for a
 * FileExistsError OCR-D's own text) and *why (may be NULL); MQPROC_ENOMEM. Nothing is
 * changed when it fails. */
int mqproc__mets_add_file(mqproc__mets_t *m, const mqproc__mets_file_t *f, int force,
                          mqproc__mets_why_t *why, char *err);

/* An agent to add (OCR-D's OcrdAgent): each NULL is left out. notes: NULL, or an array of
 * [{name: value, ...}, text or null] (an attribute name made ocrd:name). */
typedef struct mqproc__mets_agent {
  const char *name, *type, *othertype, *role, *otherrole;
  const json_t *notes;
} mqproc__mets_agent_t;

/* OCR-D's OcrdMets.add_agent: a mets:agent after metsHdr's last (metsHdr made first in the
 * document when missing). MQPROC_OK; MQPROC_EINVAL (notes of another shape), MQPROC_ENOMEM
 * with err; nothing is changed when it fails. */
int mqproc__mets_add_agent(mqproc__mets_t *m, const mqproc__mets_agent_t *a, char *err);

/* ---- writing ------------------------------------------------------------------------ */

/* The document as UTF-8 XML, indented, with the XML declaration: *data malloc()ed (the
 * caller frees it), NUL-terminated, *len bytes. MQPROC_OK or MQPROC_ENOMEM with err. */
int mqproc__mets_dump(const mqproc__mets_t *m, char **data, size_t *len, char *err);
/* Writes the document over path atomically: a new file beside it (".NAME.mqproc-XXXXXX",
 * the mode of the file it replaces, else 0644 as umask allows), written, fsync()ed,
 * renamed over path, the directory fsync()ed. lock_fd: NULL, or the caller's workspace lock
 * on path (base/wslock.h): the new file is locked before the rename and *lock_fd becomes
 * its fd (the old one closed). MQPROC_OK; MQPROC_ESYS / MQPROC_ENOMEM with err (path is
 * then untouched and *lock_fd still held). */
int mqproc__mets_save(const mqproc__mets_t *m, const char *path, int *lock_fd, char *err);

#endif
