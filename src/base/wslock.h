/* The workspace lock: an exclusive flock() on an OCR-D workspace's METS file, the one lock
 * every writer of a mets.xml that mqproc starts or serves takes (ocrd-dummy in C, an --exec
 * OCR-D try without a METS server, mqproc's METS server for as long as it serves).
 *
 * Writers replace mets.xml by a rename (OCR-D core's atomic_write, ocrd-dummy, the METS
 * server), so a lock on the file that was there when one began to wait may be a lock on a
 * file nobody reads any more: after the lock is granted, the path must still name the
 * locked file, else the lock is taken again on the new one. A writer that replaces the file
 * while it holds the lock locks its new file before the rename (mqproc__wslock_replace),
 * so there is never a moment when the path names an unlocked file.
 *
 * The METS may be another party's file (a message names it): it is opened without
 * following a link, without blocking (a FIFO in its place), and must be a regular file. */
#ifndef MQPROC_BASE_WSLOCK_H
#define MQPROC_BASE_WSLOCK_H

/* Takes the lock on path: 0 with *fd (hold it; close it to release), 1 when wait is 0 and
 * another holds it (nothing held), -1 with err (MQPROC_ERR_LEN bytes: path missing, a link,
 * not a regular file, ...). wait: block until granted (EINTR is retried). */
int mqproc__wslock(const char *path, int wait, int *fd, char *err);

/* For a holder about to rename tmp_fd's file over the locked one: locks tmp_fd (a new file
 * of the caller's: granted at once); once the rename is done the caller closes the old fd.
 * 0, or -1 with err. */
int mqproc__wslock_replace(int tmp_fd, char *err);

#endif
