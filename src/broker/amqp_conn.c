/* Connecting to AMQP brokers: broker lists and TCP or TLS sockets (see amqp_conn.h). */
#include "broker/amqp_conn.h"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

/* ---- broker lists ------------------------------------------------------------------- */

void mqproc__amqp_urls_free(char **urls) {
  for (size_t i = 0; urls != NULL && urls[i] != NULL; i++)
    free(urls[i]);
  free(urls);
}

/* A member that does not parse, fit to show: a password may hold what made it fail (a ','
 * the list split at, a '/' not written as %2F), so everything between "://" and the last
 * '@' is hidden, and with no '@' everything after a ':' (it may be a password's start). */
static void show_member(const char *url, char *out, size_t n) {
  const char *rest = strstr(url, "://"), *at = strrchr(url, '@');
  int scheme = rest != NULL ? (int)(rest - url) : 0;
  char shown[512];
  rest = rest != NULL ? rest + 3 : url;
  if (at != NULL)
    snprintf(shown, sizeof(shown), "%.*s%s…@%s", scheme, url, scheme ? "://" : "", at + 1);
  else if (strchr(rest, ':') != NULL)
    snprintf(shown, sizeof(shown), "%.*s%s…", scheme, url, scheme ? "://" : "");
  else
    snprintf(shown, sizeof(shown), "%s", url);
  mqproc__mask_secret(shown, out, n);
}

int mqproc__amqp_urls(const char *list, char ***out, size_t *n, char *err) {
  char **urls = NULL, masked[512];
  size_t count = 0;
  const char *p = list != NULL ? list : "";
  *out = NULL;
  *n = 0;
  for (;;) {
    size_t len = strcspn(p, ","), a = 0, b = len;
    struct amqp_connection_info ci;
    char *url, *check, **grown;
    while (a < b && (p[a] == ' ' || p[a] == '\t'))
      a++;
    while (b > a && (p[b - 1] == ' ' || p[b - 1] == '\t'))
      b--;
    url = mqproc__strndup(p + a, b - a);
    check = mqproc__strndup(p + a, b - a);
    grown = mqproc__realloc(urls, (count + 2) * sizeof(char *));
    if (url == NULL || check == NULL || grown == NULL) {
      free(url);
      free(check);
      mqproc__amqp_urls_free(grown != NULL ? grown : urls);
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    }
    urls = grown;
    urls[count++] = url;
    urls[count] = NULL;
    amqp_default_connection_info(&ci);
    if (url[0] == '\0' || amqp_parse_url(check, &ci) != AMQP_STATUS_OK) {
      show_member(url, masked, sizeof(masked));
      free(check);
      mqproc__amqp_urls_free(urls);
      return mqproc__err(
          err, MQPROC_ECONFIG,
          "--queue: URL %zu of the list is not an AMQP URL: '%s' (expected "
          "amqp://user:pass@host:port/vhost or amqps://…; several separated by commas; in a "
          "password a comma as %%2C, a slash as %%2F)",
          count, masked);
    }
    free(check);
    if (count > 64) {
      mqproc__amqp_urls_free(urls);
      return mqproc__err(err, MQPROC_ECONFIG, "--queue: more than 64 brokers in the list");
    }
    if (p[len] == '\0')
      break;
    p += len + 1;
  }
  *out = urls;
  *n = count;
  return MQPROC_OK;
}

void mqproc__amqp_shuffle(size_t *order, size_t n) {
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  for (size_t i = n; i > 1; i--) { /* Fisher-Yates */
    size_t j = (size_t)random() % i, t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
}

/* ---- TLS ------------------------------------------------------------------------------ */

/* A blocking TCP connection to host:port with send and receive timeouts; -1 on failure. */
static int dial(const char *host, int port, int timeout_s) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  struct timeval tv = {timeout_s, 0};
  char service[16];
  int fd = -1;
  snprintf(service, sizeof(service), "%d", port);
  if (getaddrinfo(host, service, &hints, &res) != 0)
    return -1;
  for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
      continue;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* connect() obeys it too */
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

/* Why the TLS connection failed, in words: a second handshake that accepts any
 * certificate, then OpenSSL's verdict on it (rabbitmq-c 0.11 reports only "peer
 * verification failed"). Runs only after a failure, bounded by timeout_s. */
static void explain(const struct amqp_connection_info *ci, const mqproc__tls_t *tls, const char *ca,
                    int timeout_s, char *why, size_t n) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  SSL *ssl = NULL;
  X509 *peer = NULL;
  long v;
  int fd = -1, ok;
  snprintf(why, n, "the TLS handshake failed");
  if (ctx == NULL)
    return;
  if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
    snprintf(why, n, "cannot load the CA file %s", ca);
    goto out;
  }
  if (tls->cert != NULL && tls->key != NULL &&
      (SSL_CTX_use_certificate_chain_file(ctx, tls->cert) != 1 ||
       SSL_CTX_use_PrivateKey_file(ctx, tls->key, SSL_FILETYPE_PEM) != 1)) {
    snprintf(why, n, "cannot load the client certificate %s or its key %s", tls->cert, tls->key);
    goto out;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
  if ((fd = dial(ci->host, ci->port, timeout_s)) < 0 || (ssl = SSL_new(ctx)) == NULL) {
    snprintf(why, n, "the TLS handshake failed (and a second connection did not get through)");
    goto out;
  }
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, ci->host);
  ERR_clear_error();
  ok = SSL_connect(ssl) == 1;
  if ((v = SSL_get_verify_result(ssl)) != X509_V_OK) {
    snprintf(why, n, "the broker's certificate was refused: %s (CAs from %s)",
             X509_verify_cert_error_string(v), ca);
  } else if (!ok) {
    char e[256];
    ERR_error_string_n(ERR_get_error(), e, sizeof(e));
    snprintf(why, n, "the TLS handshake failed: %s%s", e,
             tls->cert == NULL ? " (does the broker want a client certificate? --tls-cert)" : "");
  } else if ((peer = SSL_get1_peer_certificate(ssl)) != NULL &&
             X509_check_host(peer, ci->host, 0, 0, NULL) != 1 &&
             X509_check_ip_asc(peer, ci->host, 0) != 1) {
    snprintf(why, n, "the broker's certificate is not for the host name '%s'", ci->host);
  } else if (peer != NULL) {
    snprintf(why, n,
             "the broker's certificate names '%s' only as an IP address, and rabbitmq-c 0.11 "
             "checks DNS names only: connect by host name, or add DNS:%s to the certificate",
             ci->host, ci->host);
  }
out:
  X509_free(peer);
  if (ssl != NULL) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
  }
  if (fd >= 0)
    close(fd);
  SSL_CTX_free(ctx);
}

int mqproc__amqp_socket_open(amqp_connection_state_t conn, const struct amqp_connection_info *ci,
                             const mqproc__tls_t *tls, int timeout_s, char *err) {
  static const mqproc__tls_t defaults = {0};
  struct timeval tv = {timeout_s, 0};
  amqp_socket_t *sock;
  const char *ca;
  char why[MQPROC_ERR_LEN];
  int rc;
  if (tls == NULL)
    tls = &defaults;
  if (!ci->ssl) {
    if ((sock = amqp_tcp_socket_new(conn)) == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    rc = amqp_socket_open_noblock(sock, ci->host, ci->port, &tv);
    if (rc != AMQP_STATUS_OK)
      return mqproc__err(err, MQPROC_EBROKER_CONNECT, "cannot connect to %s:%d: %s", ci->host,
                         ci->port, amqp_error_string2(rc));
    return MQPROC_OK;
  }
  if ((sock = amqp_ssl_socket_new(conn)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "cannot set up TLS (out of memory)");
  ca = tls->ca != NULL ? tls->ca : MQPROC__SYSTEM_CA_BUNDLE;
  if (tls->verify != MQPROC__TLS_VERIFY_NONE &&
      amqp_ssl_socket_set_cacert(sock, ca) != AMQP_STATUS_OK)
    return mqproc__err(err, MQPROC_ECONFIG, "--tls-ca: cannot load the CA certificates in %s", ca);
  if ((tls->cert == NULL) != (tls->key == NULL))
    return mqproc__err(err, MQPROC_ECONFIG, "--tls-cert and --tls-key go together");
  if (tls->cert != NULL && amqp_ssl_socket_set_key(sock, tls->cert, tls->key) != AMQP_STATUS_OK)
    return mqproc__err(
        err, MQPROC_ECONFIG,
        "--tls-cert/--tls-key: cannot load the client certificate %s with the key %s", tls->cert,
        tls->key);
  amqp_ssl_socket_set_verify_peer(sock, tls->verify != MQPROC__TLS_VERIFY_NONE);
  amqp_ssl_socket_set_verify_hostname(sock, tls->verify == MQPROC__TLS_VERIFY_FULL);
  rc = amqp_socket_open_noblock(sock, ci->host, ci->port, &tv);
  if (rc == AMQP_STATUS_OK)
    return MQPROC_OK;
  if (rc == AMQP_STATUS_SSL_PEER_VERIFY_FAILED || rc == AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED ||
      rc == AMQP_STATUS_SSL_CONNECTION_FAILED || rc == AMQP_STATUS_SSL_ERROR) {
    explain(ci, tls, ca, timeout_s, why, sizeof(why));
    return mqproc__err(err, MQPROC_EBROKER_CONNECT, "cannot connect to %s:%d over TLS: %s",
                       ci->host, ci->port, why);
  }
  return mqproc__err(err, MQPROC_EBROKER_CONNECT, "cannot connect to %s:%d over TLS: %s", ci->host,
                     ci->port, amqp_error_string2(rc));
}
