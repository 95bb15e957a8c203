#!/usr/bin/env bash
# A throwaway CA and the certificates the TLS tests need, made fresh per run (certificates
# depend on the clock: never check them in). Used by scripts/services.sh when
# MQPROC_SERVICES_TLS=1.
#
#   scripts/make-certs.sh DIR
#
# DIR/ca.pem, ca.key          the test CA (what --tls-ca / sslrootcert trust)
# DIR/server.pem, server.key  for the host name localhost only (DNS:localhost): connecting
#                             to 127.0.0.1 is a wrong host name
# DIR/client.pem, client.key  a client certificate (CN=mqproc)
# DIR/other-ca.pem            another CA: trusting only it is a wrong CA
# DIR/expired.pem, .key       signed by the test CA for localhost, expired in 2020
set -euo pipefail
T=${1:?usage: make-certs.sh DIR}
mkdir -p "$T"
cd "$T"
q() { "$@" >/dev/null 2>&1 || { echo "make-certs: failed: $*" >&2; "$@"; exit 1; }; }
ca() { # ca NAME CN
  q openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days 3 \
    -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
}
ca ca mqproc-test-ca
ca other-ca mqproc-other-ca
printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' >server.ext
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >client.ext
q openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=localhost"
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
  -days 3 -extfile server.ext
q openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=mqproc"
q openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem \
  -days 3 -extfile client.ext
# expired: `openssl ca` takes explicit validity dates
mkdir -p db && : >db/index.txt && echo 1000 >db/serial
cat >ca.cnf <<CNF
[ca]
default_ca = d
[d]
database = $T/db/index.txt
serial = $T/db/serial
new_certs_dir = $T/db
default_md = sha256
policy = p
unique_subject = no
[p]
commonName = supplied
CNF
q openssl req -newkey rsa:2048 -nodes -keyout expired.key -out expired.csr -subj "/CN=localhost"
q openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem \
  -startdate 20200101000000Z -enddate 20200102000000Z -notext -extfile server.ext
chmod 600 ./*.key
rm -f ./*.csr ./*.ext ./*.srl
