#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench_ingest against Apache Kafka itself instead of the in-process mock:
starts one KRaft node (or three, --nodes 3: replication factor 3,
min.insync.replicas 2) on loopback with tests/integration/realkafka.py,
creates the plays topic with --partitions partitions, and runs
build/bench/bench_ingest --bootstrap on it with the remaining arguments.
Prints bench_ingest's figures; stops the broker at exit.

  bench/run_ingest_kafka.py [--nodes 1|3] [--partitions N] [-- BENCH_INGEST_ARGS...]

The broker runs on the same two cores as the benchmark, so compare its
figures with the mock's from the same run (bench_ingest alone), not with
figures from other days.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
import realkafka  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1, choices=(1, 3))
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("rest", nargs="*", help="arguments for bench_ingest (after --)")
    a = ap.parse_args()
    kafka = realkafka.KafkaCluster(nodes=a.nodes, topics=("plays:%d" % a.partitions,),
                                   heap_mb=1024)
    exe = harness.build_path("bench", "bench_ingest")
    r = subprocess.run([exe, "--bootstrap", kafka.addr, "--partitions", str(a.partitions)] + a.rest)
    kafka.stop()
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
