/* The METS server's journal: every change it acknowledges (an added file, an added agent),
 * one JSON line each, made durable before the answer goes out, so a server killed before its
 * next save loses none of them: its successor replays them. A file of mqproc's own beside
 * the METS, ".<METS name>.mqproc-journal", opened without following a link, guarded by the
 * workspace lock the server holds.
 *
 * Its first line names the mets.xml its entries are not yet in (device, inode, change time
 * after the save that emptied it). A server that starts and finds another file there knows
 * the entries may be in it already (it died between a save's rename and the journal's reset,
 * or another writer replaced the file meanwhile): files are replayed idempotently anyway;
 * agents, which have no ID, are then added only when no equal agent is there.
 *
 *   mqproc__mets_journal_open()    open or make it; the entries found and whether they are
 *                                  for the METS held now
 *   mqproc__mets_journal_append()  one entry (written, not yet durable)
 *   mqproc__mets_journal_sync()    fdatasync when something was appended since the last one
 *   mqproc__mets_journal_reset()   empty, for the METS just saved (after each save)
 *   mqproc__mets_journal_close()   (removing it after a last save) */
#ifndef MQPROC_HTTP_METS_JOURNAL_H
#define MQPROC_HTTP_METS_JOURNAL_H

#include <jansson.h>

#define MQPROC__METS_JOURNAL_MAX (256u << 20) /* the largest journal read at start */
#define MQPROC__METS_JOURNAL_LINE_MAX (1u << 20)

typedef struct mqproc__mets_journal mqproc__mets_journal_t;

/* Opens the journal of the METS at mets_path (made with mode when missing; a link, or no
 * regular file, is refused), mets_fd the METS held (its identity is compared with the
 * journal's first line). *entries: a new array of the complete entries found (a last line
 * cut short was never acknowledged: dropped; a line that is no JSON object: logged, dropped);
 * *same: 1 when they are for the file held now. MQPROC_OK, or an error with err. */
int mqproc__mets_journal_open(const char *mets_path, int mets_fd, unsigned mode,
                              mqproc__mets_journal_t **out, json_t **entries, int *same, char *err);
/* Appends entry as one line. MQPROC_OK or MQPROC_ESYS with err (the journal may then hold a
 * part of the line: the next start drops it only when it is the last). */
int mqproc__mets_journal_append(mqproc__mets_journal_t *j, const json_t *entry, char *err);
/* Whether something was appended since the last sync. */
int mqproc__mets_journal_unsynced(const mqproc__mets_journal_t *j);
/* Makes what was appended durable (fdatasync); MQPROC_OK or MQPROC_ESYS with err. */
int mqproc__mets_journal_sync(mqproc__mets_journal_t *j, char *err);
/* Empties it for the METS file mets_fd is (just saved, or loaded): its first line only,
 * durable. MQPROC_OK or MQPROC_ESYS with err. */
int mqproc__mets_journal_reset(mqproc__mets_journal_t *j, int mets_fd, char *err);
/* Closes it; remove: unlinks it first (nothing in it is unsaved). NULL is ignored. */
void mqproc__mets_journal_close(mqproc__mets_journal_t *j, int remove);

#endif
