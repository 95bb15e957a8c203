/* Unit tests for src/base/wslock.c: the workspace lock on a METS file. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "base/wslock.h"

static char dir[64], mets[128];

static void make_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/mqproc-wslock-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(mets, sizeof(mets), "%s/mets.xml", dir);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

static void clean(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(wslock, .init = make_dir, .fini = clean);

Test(wslock, a_second_taker_is_refused_until_the_first_lets_go) {
  char err[MQPROC_ERR_LEN];
  int a = -1, b = -1;
  write_file(mets, "<mets/>");
  cr_assert_eq(mqproc__wslock(mets, 1, &a, err), 0, "%s", err);
  cr_assert_eq(mqproc__wslock(mets, 0, &b, err), 1, "a second holder got the lock");
  cr_assert_eq(b, -1);
  close(a);
  cr_assert_eq(mqproc__wslock(mets, 0, &b, err), 0, "%s", err);
  close(b);
}

/* A holder that replaces the file locks the new one before its rename: a taker that waited
 * on the old file must not end up holding a lock nobody else looks at. */
Test(wslock, a_replaced_file_stays_locked) {
  char err[MQPROC_ERR_LEN], tmp[160];
  int a = -1, b = -1, t;
  write_file(mets, "<mets/>");
  cr_assert_eq(mqproc__wslock(mets, 1, &a, err), 0, "%s", err);
  snprintf(tmp, sizeof(tmp), "%s/.mets.xml.new", dir);
  t = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  cr_assert_geq(t, 0);
  cr_assert_eq(mqproc__wslock_replace(t, err), 0, "%s", err);
  cr_assert_eq(rename(tmp, mets), 0);
  close(a); /* the old file's lock goes: the path names the new, still locked, file */
  cr_assert_eq(mqproc__wslock(mets, 0, &b, err), 1, "the new file was not locked");
  close(t);
  cr_assert_eq(mqproc__wslock(mets, 0, &b, err), 0, "%s", err);
  close(b);
}

/* The lock was granted on a file that is gone from the path by then: it is taken again on
 * the file the path names now. */
Test(wslock, a_file_replaced_without_a_lock_is_locked_anew) {
  char err[MQPROC_ERR_LEN], tmp[160];
  int a = -1, b = -1;
  struct stat held, now;
  write_file(mets, "<mets/>");
  cr_assert_eq(mqproc__wslock(mets, 1, &a, err), 0, "%s", err);
  snprintf(tmp, sizeof(tmp), "%s/other.xml", dir);
  write_file(tmp, "<mets/>");
  cr_assert_eq(rename(tmp, mets), 0); /* the lock held is now on a file no path names */
  cr_assert_eq(mqproc__wslock(mets, 0, &b, err), 0, "%s", err);
  cr_assert_eq(fstat(b, &held), 0);
  cr_assert_eq(stat(mets, &now), 0);
  cr_assert_eq(held.st_ino, now.st_ino);
  close(a);
  close(b);
}

Test(wslock, links_fifos_and_missing_files_are_refused) {
  char err[MQPROC_ERR_LEN], target[160];
  int fd = -1;
  snprintf(target, sizeof(target), "%s/real.xml", dir);
  write_file(target, "<mets/>");
  cr_assert_eq(symlink(target, mets), 0);
  cr_assert_eq(mqproc__wslock(mets, 1, &fd, err), -1);
  cr_expect(strstr(err, "symbolic link") != NULL, "%s", err);
  cr_assert_eq(unlink(mets), 0);
  cr_assert_eq(mkfifo(mets, 0600), 0); /* opened without blocking, then refused */
  cr_assert_eq(mqproc__wslock(mets, 1, &fd, err), -1);
  cr_expect(strstr(err, "not a regular file") != NULL, "%s", err);
  cr_assert_eq(unlink(mets), 0);
  cr_assert_eq(mqproc__wslock(mets, 1, &fd, err), -1);
  cr_expect(strstr(err, "No such file") != NULL, "%s", err);
  cr_assert_eq(fd, -1);
}
