#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# make-dev-certs.sh DIR [NAME...] - a throwaway CA and certificates for
# trying dedupd's mutual TLS (compose.yaml mounts deploy/docker/certs).
# Not for production: the CA key sits beside the certificates and every key
# is world-readable (the container runs as uid 10001, not as you).
#
# DIR gets:
#   ca.crt, ca.key        the CA (rpc.tls_client_ca; clients' --tls-ca)
#   tls.crt, tls.key      dedupd's certificate: CN dedupd, SANs dedupd,
#                         localhost, 127.0.0.1 and each NAME given; usable
#                         as server and client certificate (the container's
#                         health check, and cluster nodes forwarding calls
#                         to each other, present it as a client)
#   feed.crt, feed.key    a client with CN feed (compose: may write and read)
#   recall.crt, recall.key  a client with CN recall (compose: may read)
#
# Then, from the host:
#   dedupctl -a localhost:50051 --tls-ca DIR/ca.crt \
#       --tls-cert DIR/feed.crt --tls-key DIR/feed.key play u1 v1
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 DIR [EXTRA_SERVER_NAME...]" >&2
    exit 2
fi
dir=$1
shift
mkdir -p "$dir"
cd "$dir"

sans="DNS:dedupd,DNS:localhost,IP:127.0.0.1"
for n in "$@"; do
    sans="$sans,DNS:$n"
done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -days 365 -subj "/CN=dedupd dev CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.crt

# leaf NAME CN USAGE [SANS]
leaf() {
    key "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$3"
        if [ -n "${4:-}" ]; then echo "subjectAltName=$4"; fi
    } >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

leaf tls dedupd serverAuth,clientAuth "$sans"
leaf feed feed clientAuth
leaf recall recall clientAuth
rm -f ca.srl
chmod 0644 ./*.key
echo "certificates in $dir: ca.crt, tls.crt/tls.key (dedupd), feed.*, recall.*"
