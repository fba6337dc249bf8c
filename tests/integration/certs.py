# SPDX-License-Identifier: Apache-2.0
"""Test certificates: a CA made with openssl in a temporary directory and
the certificates it signs (EC P-256, keys PKCS#8, valid 2 days). Shared by
the TLS tests (test_tls, test_cluster_tls, test_fleet_roles,
test_clients_java_tls); imports nothing but the harness, so a test that
uses no Python gRPC can use it."""
import os
import subprocess

import harness


class Certs:
    """A CA and certificates it signs, made with openssl in a temp dir."""

    def __init__(self, openssl, d, name):
        self.openssl, self.d, self.name = openssl, d, name
        self.ca_key = self.path(name + "-ca.key")
        self.ca = self.path(name + "-ca.crt")
        self.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-days", "2", "-subj", "/CN=%s test CA" % name,
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-keyout", self.ca_key, "-out", self.ca)

    def path(self, f):
        return os.path.join(self.d, f)

    def run(self, *args):
        r = subprocess.run([self.openssl] + list(args), capture_output=True, text=True)
        if r.returncode != 0:
            harness.fail("openssl %s: %s" % (" ".join(args), r.stderr))

    def issue(self, leaf, cn, san=None, usage="clientAuth"):
        """(cert, key) paths of a certificate for CN (and SAN) this CA signs."""
        key, csr, crt = (self.path("%s-%s.%s" % (self.name, leaf, e)) for e in ("key", "csr", "crt"))
        ext = self.path("%s-%s.ext" % (self.name, leaf))
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=%s\n" % usage)
            if san:
                f.write("subjectAltName=%s\n" % san)
        self.run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-subj", "/CN=%s" % cn, "-keyout", key, "-out", csr)
        self.run("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
                 "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", crt)
        return crt, key
