/* The dir:// backend's flusher (broker/dir.c): a thread that makes published files
 * durable off the loop. The loop writes a message into tmp/ (mqproc__dirq_write) and hands
 * the open file over; the thread takes every file handed over meanwhile, starts their
 * writeback together, fdatasyncs each (the filesystem's journal commits them as a group),
 * renames each into place and fsyncs each directory once, then reports them through an
 * eventfd. A publish is confirmed only then, so what a producer is told is durable is, and
 * no consumer sees a file before its data is on disk. It also removes settled jobs' files
 * (the unlink and the last close free an inode: work the loop need not wait for). */
#ifndef MQPROC_BROKER_DIR_FLUSH_H
#define MQPROC_BROKER_DIR_FLUSH_H

#include <stddef.h>
#include <stdint.h>

typedef struct mqproc__dirq_flusher mqproc__dirq_flusher_t;

/* A flusher and its thread; flush 0: no fdatasync and no directory fsync (the relaxed
 * mode: renames only, in the same order). MQPROC_ESYS with err. */
int mqproc__dirq_flusher_new(mqproc__dirq_flusher_t **out, int flush, char *err);
/* The eventfd that is readable when finished files wait for mqproc__dirq_flusher_take. */
int mqproc__dirq_flusher_fd(const mqproc__dirq_flusher_t *f);
/* Hands over fd (written, tmp_dir/name) to be flushed and renamed to dst_dir/name (then
 * dst_dir fsynced), reported as seq. The directory descriptors must stay open until it is
 * reported (or the flusher drained). Takes fd in every case (closed and the tmp file
 * removed when this fails: MQPROC_ENOMEM). */
int mqproc__dirq_flusher_add(mqproc__dirq_flusher_t *f, uint64_t seq, int fd, int tmp_dir,
                             int dst_dir, const char *name, char *err);
/* Removes the settled file dir/name and then closes fd and wfd (-1: none), off the loop
 * (mqproc__dirq_remove; unreported; dir open until drained). Never fails: without memory
 * it is done at once. */
void mqproc__dirq_flusher_remove(mqproc__dirq_flusher_t *f, int dir, const char *name, int fd,
                                 int wfd);
/* Calls done(ud, seq, rc) for each finished file in the order they were added (rc
 * MQPROC_OK: durable in place; else the file is not in place); returns how many. */
size_t mqproc__dirq_flusher_take(mqproc__dirq_flusher_t *f,
                                 void (*done)(void *ud, uint64_t seq, int rc), void *ud);
/* Waits until every file handed over is finished (they are taken after). */
void mqproc__dirq_flusher_drain(mqproc__dirq_flusher_t *f);
/* Drains, stops the thread, closes the eventfd; what was not taken is dropped. */
void mqproc__dirq_flusher_free(mqproc__dirq_flusher_t *f);

#endif
