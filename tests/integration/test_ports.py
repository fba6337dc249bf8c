# SPDX-License-Identifier: Apache-2.0
"""harness.free_port when tests run two at a time (meson's is_parallel):

1. Its ports lie outside the kernel's ephemeral range
   (ip_local_port_range), so no bind(0) and no connection's source port
   can take one between free_port and the server's bind; they are
   distinct and not bound.
2. A port one process holds is never handed to another while the first
   lives, and is handed out again once it has exited: in a range of four
   ports, one bound by a stranger and two held by a child process, the
   parent gets the fourth and then none; after the child exits, the
   child's two.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# 1. the default range
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    eph_lo, eph_hi = (int(x) for x in f.read().split())
ports = [harness.free_port() for _ in range(200)]
if len(set(ports)) != len(ports):
    fail("free_port handed out a port twice: %s" % sorted(p for p in ports if ports.count(p) > 1))
inside = [p for p in ports if eph_lo <= p <= eph_hi]
if inside:
    fail("%d of 200 ports inside the ephemeral range %d-%d (e.g. %d): a bind(0) or a "
         "connection may take them first" % (len(inside), eph_lo, eph_hi, inside[0]))
if not all(bindable(p) for p in ports):
    fail("free_port returned a port that is bound")

# 2. four ports, private lock directory: a stranger, a child, the parent
lo = None
for _ in range(50):
    c = harness.free_port()
    if all(bindable(c + i) for i in range(1, 4)) and c + 3 < eph_lo:
        lo = c
        break
if lo is None:
    fail("no four consecutive free ports for the test")
env = dict(os.environ, DD_TEST_PORT_RANGE="%d-%d" % (lo, lo + 3),
           DD_TEST_PORT_DIR=tempfile.mkdtemp(prefix="dedupd-test-ports-"))
os.environ.update(env)
harness.PORT_LOCK_DIR = env["DD_TEST_PORT_DIR"]
harness._held_ports.clear()
stranger = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
stranger.bind(("127.0.0.1", lo + 2))
child = subprocess.Popen(
    [sys.executable, "-c",
     "import sys; sys.path.insert(0, %r); import harness\n"
     "print(harness.free_port(), harness.free_port(), flush=True)\n"
     "sys.stdin.read()" % HERE],
    env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
held = sorted(int(x) for x in child.stdout.readline().split())
if len(held) != 2 or lo + 2 in held:
    fail("the child got %s of %d-%d, port %d being bound" % (held, lo, lo + 3, lo + 2))
mine = harness.free_port()
want = ({lo, lo + 1, lo + 3} - set(held)).pop()
if mine != want:
    fail("the parent got %d, want %d (the child holds %s, %d is bound)" % (mine, want, held, lo + 2))
try:
    extra = harness.free_port()
    fail("a fifth port %d from a range of four (child %s, bound %d, parent %d)"
         % (extra, held, lo + 2, mine))
except SystemExit as e:
    if e.code != 1:
        raise
child.stdin.close()
child.wait(10)
again = sorted([harness.free_port(), harness.free_port()])
if again != held:
    fail("after the child exited the parent got %s, want the child's %s" % (again, held))
stranger.close()
shutil.rmtree(env["DD_TEST_PORT_DIR"], ignore_errors=True)
print("ok: 200 ports outside %d-%d; held ports never shared between processes"
      % (eph_lo, eph_hi))
