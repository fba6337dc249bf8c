#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Run a gRPC client test program against a real dedupd over a real
redis-server:

    test_clients.py cpp BUILD/tests/clients/cpp_client
    test_clients.py java

The C++ client gets the daemon's address as its only argument and exits 0
when its checks passed. dedupd must then stop cleanly on SIGTERM. A client
that was not built (toolchain missing) skips, except in CI.

java: the Java library (clients/java) on a 2 x 2 fleet (fleet.py), built
with Maven the first time (clients/java/build.sh: mvn package, which runs
its unit tests), driving tests/clients/java/ClientCheck.java command by
command (test_clients_java.py).
"""
import os
import subprocess
import sys

import harness
from test_clients_lib import Dedupd


def client_argv(kind, args):
    if kind == "cpp":
        if not args or not os.path.exists(args[0]):
            harness.skip("C++ client not built (grpc++, protobuf or a C++ compiler missing)")
        return [args[0]]
    harness.fail("unknown client kind %r" % kind)
    return None


def main():
    if len(sys.argv) < 2:
        harness.fail("usage: test_clients.py cpp|java ARTIFACT...")
    kind = sys.argv[1]
    if kind == "java":
        import test_clients_java
        test_clients_java.main()
        return
    argv = client_argv(kind, sys.argv[2:])
    redis = harness.Redis()
    # The clients check exact reasons (DELIVERED needs Redis' answer), not
    # timeouts: those are test_degraded's and test_rpc_python's. With the
    # default 20 ms, one Redis reply held up by a busy CI machine made a
    # call degraded and put the connection in backoff for the next ones.
    d = Dedupd(redis.addr, {"recent.timeout_ms": "2000"})
    harness.log("running", kind, "client against", d.addr)
    try:
        r = subprocess.run(argv + [d.addr], timeout=240)
    except subprocess.TimeoutExpired:
        harness.fail("%s client did not finish in 240 s" % kind)
    if r.returncode != 0:
        harness.log("dedupd log tail:\n" + d.proc.tail())
        harness.fail("%s client exited %d" % (kind, r.returncode))
    d.stop()
    harness.log("PASS:", kind, "client")


if __name__ == "__main__":
    main()
