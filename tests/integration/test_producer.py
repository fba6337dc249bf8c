# SPDX-License-Identifier: Apache-2.0
"""src/producer and record's hooks onto it (tests/integration/test_producer.c)
against a real devbroker and redis-server started here: the C program gets
their addresses and the devbroker's pid (it takes the brokers down and up
itself with SIGUSR1/SIGUSR2)."""
import subprocess
import sys

import harness


def main():
    broker = harness.DevBroker(("plays:8", "plays-pb:6", "plays-rp:4", "plays-gone:4"),
                               unavailable=("plays-gone",))
    redis = harness.Redis()
    exe = sys.argv[1] if len(sys.argv) > 1 else harness.build_path("tests", "integration",
                                                                   "test_producer")
    r = subprocess.run([exe, broker.addr, str(broker.proc.pid), redis.addr], timeout=240)
    if r.returncode != 0:
        harness.fail("test_producer exited %d" % r.returncode)
    broker.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
