/* ocrd-dummy METS: read the physical pages and fileGrps, add files, fptrs and agents, dump. */
#ifndef OCRD_DUMMY_METS_H
#define OCRD_DUMMY_METS_H

#include <libxml/hash.h>
#include <libxml/tree.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct dummy_mets {
  xmlDoc *doc;
  xmlNode *root; /* mets:mets */
  xmlNs *ns;     /* the METS namespace as the document declares it */
  size_t n_pages;
  xmlNode **page_divs;   /* structMap[@TYPE=PHYSICAL]/div[@TYPE=physSequence]/div[@TYPE=page] */
  char **page_ids;       /* their @ID, in document order */
  xmlHashTable *files;   /* mets:file @ID -> its node */
  xmlHashTable *file_pg; /* mets:file @ID -> 1 + index of the first page with its fptr */
} dummy_mets_t;

/* Parses a METS document (data, len; name for messages). Returns 0 or -1 with err set. */
int dummy_mets_parse(dummy_mets_t **out, const char *data, size_t len, const char *name, char *err);
/* The same for a document already parsed or built; takes doc (freed on failure too). */
int dummy_mets_from_doc(dummy_mets_t **out, xmlDoc *doc, const char *name, char *err);
void dummy_mets_free(dummy_mets_t *m);

/* The mets:fileGrp with this USE, or NULL. */
xmlNode *dummy_mets_grp(const dummy_mets_t *m, const char *use);
/* The mets:file with this ID (in any fileGrp), or NULL. */
xmlNode *dummy_mets_file(const dummy_mets_t *m, const char *id);
/* Index of the page whose div has an fptr to file id, or -1. */
long dummy_mets_file_page(const dummy_mets_t *m, const char *id);
/* Whether the div of page i points at a file of fileGrp grp. */
bool dummy_mets_page_has_grp(const dummy_mets_t *m, size_t i, const xmlNode *grp);
/* malloc()ed xlink:href of file's local FLocat (LOCTYPE OTHER/OTHERLOCTYPE FILE, else the
 * first FLocat), or NULL. */
char *dummy_mets_href(const xmlNode *file);

/* Adds mets:file ID=id MIMETYPE=mime with a local FLocat href to fileGrp use (created if
 * missing) and an fptr to it in the div of page i. */
int dummy_mets_add_file(dummy_mets_t *m, const char *use, const char *id, const char *mime,
                        const char *href, size_t page, char *err);
/* Removes file and every fptr to it. */
void dummy_mets_remove_file(dummy_mets_t *m, xmlNode *file);

/* One mets:note ocrd:option=option with text. */
typedef struct dummy_note {
  const char *option;
  const char *text;
} dummy_note_t;

/* Adds mets:agent TYPE=OTHER OTHERTYPE=SOFTWARE ROLE=OTHER OTHERROLE=role with mets:name
 * name and the notes after the last agent in mets:metsHdr (created if missing). */
int dummy_mets_add_agent(dummy_mets_t *m, const char *name, const char *role,
                         const dummy_note_t *notes, size_t n_notes, char *err);

/* Serializes the METS (indented, UTF-8); *data malloc()ed. */
int dummy_mets_dump(const dummy_mets_t *m, char **data, size_t *len, char *err);

#endif
