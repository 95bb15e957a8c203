/* Connecting to AMQP brokers, shared by the server's backend (broker/amqp.c) and the
 * operators' client (broker/client.c):
 *   - a broker list: --queue takes several URLs separated by commas (the nodes of a
 *     cluster), tried in a fresh shuffled order on every (re)connect;
 *   - TLS: an amqps:// URL connects over TLS (rabbitmq-c's OpenSSL socket), checked
 *     against --tls-ca (default: the system's CA bundle), with a client certificate when
 *     --tls-cert/--tls-key are given; --tls-verify full (the certificate and its host
 *     name), ca (the certificate only) or none (nothing: a loud warning at start).
 * A certificate the client refuses is explained: OpenSSL's reason (expired, unknown
 * issuer, ...) or the host name it is not for. */
#ifndef MQPROC_BROKER_AMQP_CONN_H
#define MQPROC_BROKER_AMQP_CONN_H

#include <amqp.h>
#include <stddef.h>

#include "broker/broker.h"

#define MQPROC__SYSTEM_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

/* Splits list (URLs separated by commas, blanks around them ignored) into *out, a
 * NULL-terminated array of copies (mqproc__amqp_urls_free), *n of them; each must be an
 * amqp:// or amqps:// URL. MQPROC_ECONFIG with err naming the bad one (masked). */
int mqproc__amqp_urls(const char *list, char ***out, size_t *n, char *err);
void mqproc__amqp_urls_free(char **urls);
/* Fills order with 0..n-1 in a random order. */
void mqproc__amqp_shuffle(size_t *order, size_t n);

/* Opens a socket on conn to ci's host and port, over TLS when ci->ssl (amqps://) with tls
 * (NULL: the defaults), within timeout_s. MQPROC_EBROKER_CONNECT with err saying where
 * and why, MQPROC_ECONFIG for TLS files that cannot be used. */
int mqproc__amqp_socket_open(amqp_connection_state_t conn, const struct amqp_connection_info *ci,
                             const mqproc__tls_t *tls, int timeout_s, char *err);

#endif
