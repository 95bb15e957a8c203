/* Unit: the pure rules behind the hostile-input limits: which SQLSTATEs are outages and
 * which are the message's data, which environment variables reach processors, and the
 * names of job log files. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/joblog.h"
#include "runner/runner.h"
#include "store/pg/int.h"
#include "base/util.h"

Test(sqlstate, outages_data_and_the_rest) {
  static const struct {
    const char *state;
    int want;
  } cases[] = {
      {"08006", MQPROC_ESTORE_CONNECT},                                   /* connection failure */
      {"08P01", MQPROC_ESTORE_CONNECT}, {"53100", MQPROC_ESTORE_CONNECT}, /* disk full */
      {"53300", MQPROC_ESTORE_CONNECT},                                   /* too many connections */
      {"57P01", MQPROC_ESTORE_CONNECT},                                   /* admin shutdown */
      {"57P03", MQPROC_ESTORE_CONNECT},                                   /* cannot connect now */
      {"58030", MQPROC_ESTORE_CONNECT},                                   /* I/O error */
      {"22008", MQPROC_ESTORE_DATA},  /* datetime field overflow: to_timestamp(µs) */
      {"22P05", MQPROC_ESTORE_DATA},  /* untranslatable character: \u0000 in jsonb */
      {"22021", MQPROC_ESTORE_DATA},  /* invalid UTF-8 */
      {"23514", MQPROC_ESTORE_DATA},  /* check constraint */
      {"54000", MQPROC_ESTORE_DATA},  /* index row size exceeded */
      {"57014", MQPROC_ESTORE_QUERY}, /* statement timeout: try again */
      {"40001", MQPROC_ESTORE_QUERY}, /* serialization failure */
      {"42P01", MQPROC_ESTORE_QUERY}, /* undefined table: ours, not the message's */
      {"XX000", MQPROC_ESTORE_QUERY},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    cr_expect_eq(mqproc__pg_classify(cases[i].state), cases[i].want, "%s", cases[i].state);
  cr_expect_eq(mqproc__pg_classify(NULL), MQPROC_ESTORE_QUERY);
}

Test(child_env, an_allowlist_plus_what_the_operator_passes) {
  char *pass[] = {"KEEP_ME", "OCRD_*", NULL};
  cr_expect(mqproc__env_passes("PATH=/usr/bin", NULL));
  cr_expect(mqproc__env_passes("HOME=/root", NULL));
  cr_expect(mqproc__env_passes("LC_ALL=C.UTF-8", NULL));
  cr_expect(mqproc__env_passes("TMPDIR=/tmp", NULL));
  cr_expect_not(mqproc__env_passes("MQPROC_QUEUE=amqp://u:p@h", pass));
  cr_expect_not(mqproc__env_passes("MQPROC_DATABASE=postgresql://u:p@h/db", pass));
  cr_expect_not(mqproc__env_passes("PGPASSWORD=x", pass));
  cr_expect_not(mqproc__env_passes("PATHX=1", NULL), "a name, not a prefix");
  cr_expect_not(mqproc__env_passes("MQPROC_JOB_ID=stale", pass), "set per try, never inherited");
  cr_expect(mqproc__env_passes("KEEP_ME=1", pass));
  cr_expect_not(mqproc__env_passes("KEEP_ME_TOO=1", pass));
  cr_expect(mqproc__env_passes("OCRD_METS_CACHING=1", pass));
  cr_expect(mqproc__env_passes("OCRD_=1", pass));
  cr_expect_not(mqproc__env_passes("NOEQUALS", pass));
}

Test(joblog, plain_ids_are_their_names_others_are_hashed_apart) {
  char a[256], b[256], c[256], long1[256], long2[256], id1[300], id2[300];
  mqproc__joblog_name("job-1.x_y", a, sizeof(a));
  cr_expect_str_eq(a, "job-1.x_y.log");
  mqproc__joblog_name("a/b", a, sizeof(a));
  mqproc__joblog_name("a:b", b, sizeof(b));
  mqproc__joblog_name("a_b", c, sizeof(c));
  cr_expect_str_eq(c, "a_b.log");
  cr_expect_neq(strcmp(a, b), 0);
  cr_expect_neq(strcmp(a, c), 0);
  cr_expect(strncmp(a, "a_b~", 4) == 0 && strchr(a, '/') == NULL, "%s", a);
  mqproc__joblog_name("..", a, sizeof(a));
  cr_expect(a[0] != '.', "%s", a);
  memset(id1, 'x', 250);
  memcpy(id2, id1, 250);
  strcpy(id1 + 250, "1");
  strcpy(id2 + 250, "2");
  mqproc__joblog_name(id1, long1, sizeof(long1));
  mqproc__joblog_name(id2, long2, sizeof(long2));
  cr_expect_neq(strcmp(long1, long2), 0, "ids sharing their first 250 bytes");
  cr_expect_lt(strlen(long1), 100);
}

Test(utf8, clean_and_truncate) {
  const char *in = "plain \xc3\xa9";
  char *copy, s[] = "ab\xc3\xa9\xe2\x82\xac";
  cr_expect_eq(mqproc__utf8_clean(in, &copy), in, "valid text is used as it is");
  cr_expect_null(copy);
  cr_expect_str_eq(mqproc__utf8_clean("cut \xe2\x82", &copy), "cut ??");
  free(copy);
  mqproc__utf8_truncate(s, 4); /* inside the euro sign: cut before it */
  cr_expect_str_eq(s, "ab\xc3\xa9");
  mqproc__utf8_truncate(s, 3); /* inside é */
  cr_expect_str_eq(s, "ab");
}

/* A job's log goes where its name says even when the directory was removed (or replaced)
 * since the last log was opened there: the kept directory fd is not trusted blindly. */
Test(joblog, a_log_directory_removed_or_replaced_between_two_jobs_gets_the_next_log) {
  char dir[] = "/tmp/mqproc-joblog-XXXXXX", err[MQPROC_ERR_LEN], path[256], moved[256];
  int fd;
  cr_assert_not_null(mkdtemp(dir));
  cr_assert_geq(fd = mqproc__joblog_open(dir, "proc", "a.log", err), 0, "%s", err);
  close(fd);
  snprintf(path, sizeof(path), "%s/proc/a.log", dir);
  cr_assert_eq(unlink(path), 0);
  snprintf(path, sizeof(path), "%s/proc", dir);
  cr_assert_eq(rmdir(path), 0); /* removed: made again */
  cr_assert_geq(fd = mqproc__joblog_open(dir, "proc", "b.log", err), 0, "%s", err);
  close(fd);
  snprintf(path, sizeof(path), "%s/proc/b.log", dir);
  cr_expect_eq(access(path, F_OK), 0, "the second log is in the directory of that name");
  snprintf(path, sizeof(path), "%s/proc", dir);
  snprintf(moved, sizeof(moved), "%s/old", dir);
  cr_assert_eq(rename(path, moved), 0); /* replaced by another directory */
  cr_assert_eq(mkdir(path, 0750), 0);
  cr_assert_geq(fd = mqproc__joblog_open(dir, "proc", "c.log", err), 0, "%s", err);
  close(fd);
  snprintf(path, sizeof(path), "%s/proc/c.log", dir);
  cr_expect_eq(access(path, F_OK), 0, "not in the directory that was moved away");
  snprintf(path, sizeof(path), "%s/old/c.log", dir);
  cr_expect_neq(access(path, F_OK), 0);
}
