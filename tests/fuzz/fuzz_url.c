/* Fuzz target: the URL handling of our own code: the password mask every log line goes
 * through, and dir:// spool URLs. Properties: masking never grows a line past its buffer,
 * masking twice changes nothing more, the userinfo password of an amqp/postgresql URL
 * never survives it; a spool is absolute and fits its buffer. */
#include <string.h>

#include "broker/amqp_conn.h"
#include "broker/dirq.h"
#include "fuzz.h"
#include "base/log.h"
#include "mqproc/mqproc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char in[4097], once[4097], twice[4097], spool[MQPROC__DIRQ_SPOOL_MAX], err[MQPROC_ERR_LEN];
  size_t n = size < 4096 ? size : 4096;
  memcpy(in, data, n);
  in[n] = '\0';
  mqproc__mask_secret(in, once, sizeof(once));
  FUZZ_CHECK(strlen(once) < sizeof(once), "overflow");
  mqproc__mask_secret(once, twice, sizeof(twice));
  FUZZ_CHECK(strlen(once) >= sizeof(once) - 1 || strcmp(once, twice) == 0,
             "masking again changed '%s' into '%s'", once, twice);
  /* a URL with a password made from the input: the password must be gone */
  if (n > 0 &&
      strspn(in, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == n &&
      n >= 6 && strstr("amqp://user:***@host:5672/vhost", in) == NULL) {
    char url[4200], masked[4200];
    snprintf(url, sizeof(url), "amqp://user:%s@host:5672/vhost", in);
    mqproc__mask_secret(url, masked, sizeof(masked));
    FUZZ_CHECK(strstr(masked, in) == NULL, "the password shows: %s", masked);
  }
  /* a broker list: as many URLs as it has commas plus one, none empty */
  {
    char **urls = NULL;
    size_t count = 0, commas = 0;
    if (mqproc__amqp_urls(in, &urls, &count, err) == MQPROC_OK) {
      for (const char *c = in; *c != '\0'; c++)
        commas += *c == ',';
      FUZZ_CHECK(count == commas + 1 && urls[count] == NULL, "%zu URLs in '%s'", count, in);
      for (size_t i = 0; i < count; i++)
        FUZZ_CHECK(urls[i][0] != '\0', "an empty URL in '%s'", in);
      mqproc__amqp_urls_free(urls);
    } else {
      FUZZ_CHECK(urls == NULL && count == 0, "a refused list left URLs");
    }
  }
  if (mqproc__dirq_spool(in, spool, NULL, err) == MQPROC_OK) {
    FUZZ_CHECK(spool[0] == '/', "a relative spool '%s' from '%s'", spool, in);
    FUZZ_CHECK(strlen(spool) < sizeof(spool), "overflow");
  }
  return 0;
}
