# SPDX-License-Identifier: Apache-2.0
"""What the client tests share: a dedupd from the build tree (harness.Dedupd)
without Kafka ingest, over a real redis-server and a fresh history
directory; and Python stubs for dedup.proto generated into a temporary
directory with grpc_tools (python3-grpc-tools).

history.fp_rate is set far below the default so that the clients can check
exact kept sets: with 1e-6 a 10,000-candidate request has about a 1% chance
of holding one bloom false positive, and the ids are fixed, so a run that
passes passes always.
"""
import importlib
import os
import subprocess
import sys

import harness


class Dedupd(harness.Dedupd):
    """harness.Dedupd with ingest.enabled=false, recent.redis = REDIS_ADDR,
    a low history.fp_rate, rpc.listen on port 0 (the port is read back from
    the "msg=serving rpc=HOST:PORT" line). EXTRA: more overrides, a dict
    of key -> value."""

    def __init__(self, redis_addr, extra=None, name="dedupd"):
        overrides = {
            "history.fp_rate": "0.000001",
            "ingest.enabled": "false",
            "recent.redis": redis_addr,
            "log.level": "info",
        }
        overrides.update(extra or {})
        self.port = 0
        super().__init__(overrides, name=name)

    def start(self, timeout=30.0):
        super().start(timeout)
        self.port = self.rpc_port

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port


def python_stubs():
    """Generate dedup_pb2 / dedup_pb2_grpc (and health_pb2 / health_pb2_grpc,
    importable afterwards) and return (pb2, pb2_grpc, grpc)."""
    try:
        import grpc  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError as e:
        harness.skip("python3-grpcio / python3-grpc-tools missing: %s" % e)
    out = harness.tmpdir("dedupd-pystubs-")
    proto_dir = os.path.join(harness.SOURCE_ROOT, "proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + proto_dir,
                    "--python_out=" + out, "--grpc_python_out=" + out,
                    os.path.join(proto_dir, "dedup.proto"),
                    os.path.join(proto_dir, "health.proto")], check=True)
    sys.path.insert(0, out)
    return (importlib.import_module("dedup_pb2"), importlib.import_module("dedup_pb2_grpc"),
            importlib.import_module("grpc"))
