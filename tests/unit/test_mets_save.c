/* Unit tests for src/codec/mets.c: loading safely (what is refused), and the atomic save:
 * a round trip gives the same answers, the file keeps its mode, nothing is left beside it,
 * and a workspace lock held on the METS is held on the new file. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "base/wslock.h"
#include "codec/mets.h"

#define FIND_XML MQPROC_TEST_DATA "/mets/find.xml"

static char dir[64], path[128];

static void make_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/mqproc-mets-save-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/mets.xml", dir);
}

static void clean(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(mets_save, .init = make_dir, .fini = clean);

static void write_file(const char *p, const char *text) {
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

static void copy_fixture(void) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", FIND_XML, path);
  cr_assert_eq(system(cmd), 0);
}

/* Everything a reader asks, as one JSON text (the caller frees). */
static char *answers(const mqproc__mets_t *m) {
  char err[MQPROC_ERR_LEN], *s, *id = NULL;
  json_t *files, *all;
  cr_assert_eq(mqproc__mets_find(m, &(mqproc__mets_query_t){0}, &files, err), MQPROC_OK, "%s", err);
  cr_assert_geq(mqproc__mets_unique_identifier(m, &id), 0);
  all = json_pack("{s:o, s:o, s:o, s:o, s:s?}", "files", files, "pages",
                  mqproc__mets_physical_pages(m), "groups", mqproc__mets_file_groups(m), "agents",
                  mqproc__mets_agents(m), "id", id);
  free(id);
  s = json_dumps(all, JSON_COMPACT);
  json_decref(all);
  return s;
}

/* The last occurrence of what in s. */
static char *last(char *s, const char *what) {
  char *found = NULL;
  for (char *p = s; (p = strstr(p, what)) != NULL; p++)
    found = p;
  return found;
}

static int count_others(void) { /* entries of dir but mets.xml */
  char cmd[256];
  FILE *p;
  int n = -1;
  snprintf(cmd, sizeof(cmd), "ls -A '%s' | grep -vc '^mets.xml$'", dir);
  cr_assert_not_null(p = popen(cmd, "r"));
  cr_assert_eq(fscanf(p, "%d", &n), 1);
  pclose(p);
  return n;
}

Test(mets_save, a_round_trip_answers_the_same) {
  char err[MQPROC_ERR_LEN], *before, *after;
  mqproc__mets_t *m, *back;
  json_t *notes = json_pack("[[{s:s}, s]]", "option", "page-id", "");
  mqproc__mets_file_t f = {.file_grp = "OUT",
                           .file_id = "OUT_1",
                           .page_id = "PHYS_0001",
                           .mimetype = "text/xml",
                           .local_filename = "OUT/OUT_1.xml"};
  mqproc__mets_agent_t a = {.name = "x", .othertype = "SOFTWARE", .otherrole = "r", .notes = notes};
  struct stat st;
  copy_fixture();
  cr_assert_eq(chmod(path, 0640), 0);
  cr_assert_eq(mqproc__mets_load(path, &m, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__mets_add_file(m, &f, 0, NULL, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__mets_add_agent(m, &a, err), MQPROC_OK, "%s", err);
  json_decref(notes);
  cr_assert_eq(mqproc__mets_save(m, path, NULL, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__mets_load(path, &back, err), MQPROC_OK, "%s", err);
  before = answers(m);
  after = answers(back);
  /* an empty text comes back as none (lxml does the same): that note aside, all is equal */
  cr_assert_not_null(last(before, "\"page-id\"},\"\"]"));
  cr_assert_not_null(last(after, "\"page-id\"},null]"));
  *last(before, "\"page-id\"},\"\"]") = '\0';
  *last(after, "\"page-id\"},null]") = '\0';
  cr_expect_str_eq(after, before);
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0640, "the mode became %o", st.st_mode & 07777);
  cr_expect_eq(count_others(), 0, "a temporary file was left");
  free(before);
  free(after);
  mqproc__mets_free(m);
  mqproc__mets_free(back);
}

Test(mets_save, the_lock_moves_to_the_new_file) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_t *m;
  int lock = -1, other = -1, held;
  struct stat a, b;
  copy_fixture();
  cr_assert_eq(mqproc__wslock(path, 0, &lock, err), 0, "%s", err);
  held = lock;
  cr_assert_eq(mqproc__mets_load_fd(lock, path, &m, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__mets_save(m, path, &lock, err), MQPROC_OK, "%s", err);
  cr_expect_neq(lock, -1);
  cr_expect(fcntl(held, F_GETFD) == -1 || held == lock, "the old fd was not closed");
  cr_assert_eq(fstat(lock, &a), 0);
  cr_assert_eq(stat(path, &b), 0);
  cr_expect(a.st_ino == b.st_ino, "the fd held is not the file's");
  cr_expect_eq(mqproc__wslock(path, 0, &other, err), 1, "the new file is not locked");
  close(lock);
  cr_expect_eq(mqproc__wslock(path, 0, &other, err), 0, "%s", err);
  close(other);
  mqproc__mets_free(m);
}

Test(mets_save, what_is_refused_when_loading) {
  char err[MQPROC_ERR_LEN], p[160];
  mqproc__mets_t *m = NULL;
  int fd;
  cr_expect_eq(mqproc__mets_load(path, &m, err), MQPROC_ESYS, "a missing file");
  copy_fixture();
  snprintf(p, sizeof(p), "%s/link.xml", dir);
  cr_assert_eq(symlink(path, p), 0);
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_ESYS, "a link was followed");
  cr_expect(strstr(err, "symbolic link") != NULL, "%s", err);
  snprintf(p, sizeof(p), "%s/fifo.xml", dir);
  cr_assert_eq(mkfifo(p, 0600), 0);
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_EINVAL, "a FIFO (and it did not block)");
  cr_expect_eq(mqproc__mets_load(dir, &m, err), MQPROC_EINVAL, "a directory");
  snprintf(p, sizeof(p), "%s/huge.xml", dir);
  cr_assert_geq(fd = open(p, O_WRONLY | O_CREAT, 0600), 0);
  cr_assert_eq(ftruncate(fd, (off_t)MQPROC__METS_MAX_BYTES + 1), 0); /* sparse */
  close(fd);
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_EINVAL, "too large");
  cr_expect(strstr(err, "larger than") != NULL, "%s", err);
  snprintf(p, sizeof(p), "%s/bad.xml", dir);
  write_file(p, "<mets:mets xmlns:mets=\"http://www.loc.gov/METS/\"><oops></mets:mets>");
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_EINVAL, "not well-formed");
  write_file(p, "<?xml version=\"1.0\"?><!DOCTYPE m [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b "
                "\"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]><mets:mets "
                "xmlns:mets=\"http://www.loc.gov/METS/\">&b;</mets:mets>");
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_EINVAL, "a DOCTYPE");
  cr_expect(strstr(err, "DOCTYPE") != NULL, "%s", err);
  write_file(p, "<!DOCTYPE m SYSTEM \"http://example.org/x.dtd\"><mets:mets "
                "xmlns:mets=\"http://www.loc.gov/METS/\"/>");
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_EINVAL, "an external DTD");
  write_file(p, "<mets xmlns=\"urn:other\"/>");
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_EINVAL, "not METS");
  cr_expect_null(m);
  write_file(p, "<mets xmlns=\"http://www.loc.gov/METS/\"/>"); /* a default namespace is fine */
  cr_expect_eq(mqproc__mets_load(p, &m, err), MQPROC_OK, "%s", err);
  mqproc__mets_free(m);
}

/* A save that cannot be made (here: its rename, over a directory) leaves the METS, the lock
 * and the directory as they were. */
Test(mets_save, a_failed_save_changes_nothing) {
  char err[MQPROC_ERR_LEN], sub[160], inner[200];
  mqproc__mets_t *m;
  int lock = -1, held;
  copy_fixture();
  cr_assert_eq(mqproc__wslock(path, 0, &lock, err), 0, "%s", err);
  held = lock;
  cr_assert_eq(mqproc__mets_load_fd(lock, path, &m, err), MQPROC_OK, "%s", err);
  snprintf(sub, sizeof(sub), "%s/sub", dir);
  cr_assert_eq(mkdir(sub, 0700), 0);
  snprintf(inner, sizeof(inner), "%s/x", sub);
  write_file(inner, "x");
  cr_expect_eq(mqproc__mets_save(m, sub, &lock, err), MQPROC_ESYS);
  cr_expect(strstr(err, "cannot rename") != NULL, "%s", err);
  cr_expect_eq(lock, held, "the lock moved");
  cr_expect_eq(fcntl(held, F_GETFD) >= 0, 1, "the lock's fd was closed");
  cr_expect_eq(count_others(), 1, "a temporary file was left (or sub went)");
  close(lock);
  mqproc__mets_free(m);
}

Test(mets_save, no_identifier) {
  char err[MQPROC_ERR_LEN], *id = (char *)"x";
  mqproc__mets_t *m;
  write_file(path, "<mets:mets xmlns:mets=\"http://www.loc.gov/METS/\"/>");
  cr_assert_eq(mqproc__mets_load(path, &m, err), MQPROC_OK, "%s", err);
  cr_expect_eq(mqproc__mets_unique_identifier(m, &id), 0);
  cr_expect_null(id);
  mqproc__mets_free(m);
}
