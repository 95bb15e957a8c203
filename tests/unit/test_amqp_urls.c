/* Unit: broker lists (--queue with several URLs) (broker/amqp_conn.c); --tls-verify
 * is an option row of base/config.c (unit/test_config.c). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "broker/amqp_conn.h"
#include "mqproc/mqproc.h"

Test(amqp_urls, one_url_or_a_list_with_blanks) {
  char **urls, err[MQPROC_ERR_LEN];
  size_t n;
  cr_assert_eq(mqproc__amqp_urls("amqp://u:p@h1/v", &urls, &n, err), MQPROC_OK, "%s", err);
  cr_expect_eq(n, 1);
  cr_expect_str_eq(urls[0], "amqp://u:p@h1/v");
  cr_expect_null(urls[1]);
  mqproc__amqp_urls_free(urls);
  cr_assert_eq(
      mqproc__amqp_urls(" amqp://h1:5672 ,amqps://u:p%2Cq@h2/%2f,\tamqp://h3 ", &urls, &n, err),
      MQPROC_OK, "%s", err);
  cr_expect_eq(n, 3);
  cr_expect_str_eq(urls[0], "amqp://h1:5672");
  cr_expect_str_eq(urls[1], "amqps://u:p%2Cq@h2/%2f");
  cr_expect_str_eq(urls[2], "amqp://h3");
  mqproc__amqp_urls_free(urls);
}

Test(amqp_urls, a_bad_member_is_named_with_its_password_masked) {
  char **urls = (char **)1, err[MQPROC_ERR_LEN];
  size_t n = 7;
  const char *bad[] = {"", "amqp://h1,", "amqp://h1,,amqp://h2", "amqp://h1,http://u:s3cret@h2/",
                       "amqp://u:s3cret@h1/v/extra",
                       /* what made it fail is in the password: none of it may show */
                       "amqp://u:s3c,ret@h1/", "amqp://h1,amqp://u:s3c/ret@h2",
                       "amqp://u:pa/s3cret@h1", "amqp://u:s3c,ret/x@h1/"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
    cr_expect_eq(mqproc__amqp_urls(bad[i], &urls, &n, err), MQPROC_ECONFIG, "'%s'", bad[i]);
    cr_expect_null(urls);
    cr_expect_eq(n, 0);
    cr_expect(strstr(err, "not an AMQP URL") != NULL, "%s", err);
    cr_expect(strstr(err, "s3c") == NULL && strstr(err, "ret@") == NULL &&
                  strstr(err, "ret/") == NULL,
              "the password shows: %s", err);
  }
}

Test(amqp_urls, at_most_64_brokers) {
  char list[65 * 16 + 1] = "", **urls, err[MQPROC_ERR_LEN];
  size_t n;
  for (int i = 0; i < 65; i++)
    strcat(list, i == 0 ? "amqp://h" : ",amqp://h");
  cr_expect_eq(mqproc__amqp_urls(list, &urls, &n, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "more than 64") != NULL, "%s", err);
  list[strlen(list) - strlen(",amqp://h")] = '\0';
  cr_assert_eq(mqproc__amqp_urls(list, &urls, &n, err), MQPROC_OK, "%s", err);
  cr_expect_eq(n, 64);
  mqproc__amqp_urls_free(urls);
}

Test(amqp_urls, every_order_is_a_permutation_and_orders_vary) {
  size_t order[5], firsts[5] = {0};
  for (int round = 0; round < 400; round++) {
    int seen[5] = {0};
    mqproc__amqp_shuffle(order, 5);
    for (size_t i = 0; i < 5; i++) {
      cr_assert_lt(order[i], 5);
      seen[order[i]]++;
    }
    for (size_t i = 0; i < 5; i++)
      cr_assert_eq(seen[i], 1);
    firsts[order[0]]++;
  }
  for (size_t i = 0; i < 5; i++) /* each first about 80 times in 400; never 0 */
    cr_expect_gt(firsts[i], 20, "broker %zu came first %zu times", i, firsts[i]);
}
