# SPDX-License-Identifier: Apache-2.0
"""A real cluster of SHARDS x REPLICAS dedupd nodes on loopback, for the
tests of the client libraries (clients/cpp, clients/java) and of the
cluster RPCs (test_fleet_map.py). Real servers only: one redis-server per
shard, one dedupd per node, each with its own data directory, ingesting a
plays topic of PARTITIONS partitions from the devbroker (the default: up in
seconds) or from Apache Kafka (broker="kafka", through
test_ingest_lib.plays_broker, which honours DD_TEST_BROKER=devbroker).

Nodes are numbered i = shard * replicas + replica; addrs[i] is node i's
gRPC address (as cluster.nodes lists it), admin_ports[i] its admin
listener. Offered:

    f = Fleet()                      # 2 x 2, devbroker, plays:8, murmur2_random
    f.seeds                          # "127.0.0.1:P0,127.0.0.1:P1,..."
    f.kill9(i); f.start(i)           # SIGKILL, then start again (same data dir)
    f.stop(i); f.cont(i)             # SIGSTOP / SIGCONT (a paused replica)
    f.forwarded_total()              # dedupd_cluster_forwarded_total, all nodes
    f.produce([(user, item), ...])   # plays, keyed by user as the producers do
    f.owner(user)                    # shard owning USER (src/partition.c)
    f.wait_ready()                   # every running node's /readyz 200

Resharding N -> 2N in place (deploy/k8s/README.md, "Resharding"), e.g. from
Fleet(shards=1): f.split_start() starts the new shards' nodes (each copies
its parent shard's store, cluster.split_from = N) and waits until they are
ready; f.split_restart(i) restarts old node i with the 2N-shard map; f.split()
does both for every old node in turn; f.wait_swept() waits until every node
has dropped the users it no longer owns. The new nodes are numbered on
(shard s + N replica r is node (s + N) * R + r).

Run as a program it starts a fleet, runs a command with the fleet in its
environment, and exits with the command's status:

    python3 fleet.py [--kafka] [--partitions N] -- CMD ARGS...

CMD sees DD_FLEET_SEEDS (addresses, comma-separated, in node order),
DD_FLEET_ADMIN_PORTS, DD_FLEET_PIDS (node order; a test may SIGSTOP,
SIGCONT or SIGKILL them), DD_FLEET_SHARDS, DD_FLEET_REPLICAS,
DD_FLEET_PARTITIONS, DD_FLEET_PARTITIONER, DD_FLEET_BROKER and
DD_FLEET_ADMIN_TOKEN_FILE (the admin pages' token).

Everything started here is stopped at exit (harness.py).
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import test_ingest_lib as il  # noqa: E402


class Fleet:
    """SHARDS x REPLICAS nodes; EXTRA: more dedupd overrides for every node
    (a dict), NODE_EXTRA: {i: dict} for single nodes."""

    def __init__(self, shards=2, replicas=2, partitions=8, broker="devbroker",
                 partitioner="murmur2_random", health_interval_ms=200, extra=None,
                 node_extra=None, start=True):
        self.shards, self.replicas, self.partitions = shards, replicas, partitions
        self.partitioner = partitioner
        self.health_interval_ms = health_interval_ms
        self.extra = dict(extra or {})
        self.split_from = 0
        topics = ("plays:%d" % partitions,)
        if broker == "devbroker":
            self.broker = harness.DevBroker(topics=topics)
        elif broker == "kafka":
            self.broker = il.plays_broker(topics)
        else:
            harness.fail("Fleet: broker %r is neither devbroker nor kafka" % broker)
        self.redis = [harness.Redis() for _ in range(shards)]
        n = shards * replicas
        self.ports = [harness.free_port() for _ in range(n)]
        self.admin_ports = [harness.free_port() for _ in range(n)]
        self.addrs = ["127.0.0.1:%d" % p for p in self.ports]
        self.nodes = []
        for i in range(n):
            s, r = divmod(i, replicas)
            o = self._overrides(i)
            o.update((node_extra or {}).get(i, {}))
            self.nodes.append(harness.Dedupd(o, name="fleet-%d-%d" % (s, r), start=False))
        self.paused = set()
        if start:
            self.start_all()

    def _map(self):
        """The cluster.* settings of the fleet's map as it stands (shards,
        nodes, Redis, split)."""
        nodes = ";".join(",".join(self.addrs[s * self.replicas + r] for r in range(self.replicas))
                         for s in range(self.shards))
        o = {
            "cluster.shards": str(self.shards),
            "cluster.nodes": nodes,
            "cluster.redis": ";".join(x.addr for x in self.redis),
        }
        if self.split_from:
            o["cluster.split_from"] = str(self.split_from)
        return o

    def _overrides(self, i):
        """Node I's dedupd overrides under the fleet's map as it stands."""
        s, r = divmod(i, self.replicas)
        o = il.ingest_overrides(self.broker, group="dd-fleet")
        o.update({
            "log.level": os.environ.get("DD_LOG_LEVEL", "info"),
            "history.fp_rate": "0.000001",  # exact kept sets in the tests
            "rpc.listen": self.addrs[i],
            "admin.listen": "127.0.0.1:%d" % self.admin_ports[i],
            "admin.token_file": harness.admin_token_file(),
            "cluster.shard": str(s),
            "cluster.replica": str(r),
            "cluster.partitioner": self.partitioner,
            "cluster.health_interval_ms": str(self.health_interval_ms),
            "cluster.max_lag_ms": "3000",
            "recent.timeout_ms": "500",
            "window.flush_ms": "100",
        })
        o.update(self._map())
        o.update(self.extra)
        return o

    # ---- places -----------------------------------------------------------
    def shard_of(self, i):
        return i // self.replicas

    def replica_of(self, i):
        return i % self.replicas

    def node_index(self, shard, replica):
        return shard * self.replicas + replica

    @property
    def seeds(self):
        return ",".join(self.addrs)

    def owner(self, user):
        """The shard owning USER: its partition (tests/tools/ddpartition,
        src/partition.c) modulo the shard count."""
        return self.owners([user])[user]

    def owners(self, users):
        parts = il.partitions_of(users, self.partitions, self.partitioner)
        return {u: parts[u] % self.shards for u in users}

    # ---- processes --------------------------------------------------------
    def _spawn(self, i):
        dd = self.nodes[i]
        dd._log_from = os.path.getsize(dd.logpath) if os.path.exists(dd.logpath) else 0
        dd.proc = harness.Proc([harness.build_path("src", "dedupd")] + dd.option_args(),
                               dd.name, logfile=dd.logpath, env=dd.env)

    def start_all(self, timeout=60.0):
        """Start every node at once and wait until each is ready."""
        t0 = time.time()
        for i in range(len(self.nodes)):
            self._spawn(i)
        for dd in self.nodes:
            dd.wait_log("msg=ready", timeout)
        self.wait_ready(timeout=timeout)
        harness.log("fleet %dx%d up in %.1fs: %s" % (self.shards, self.replicas,
                                                     time.time() - t0, self.seeds))

    def start(self, i, timeout=60.0):
        """Start node I again (after kill9 or terminate) on its data dir;
        returns once it logged ready (its /readyz may take longer)."""
        self._spawn(i)
        self.nodes[i].wait_log("msg=ready", timeout)

    def kill9(self, i):
        self.paused.discard(i)
        self.nodes[i].kill9()

    def terminate(self, i):
        """SIGTERM; fails unless the node exits 0."""
        self.paused.discard(i)
        self.nodes[i].stop()

    def stop(self, i):
        """SIGSTOP node I (it stays connected, answers nothing)."""
        self.nodes[i].proc.signal(signal.SIGSTOP)
        self.paused.add(i)

    def cont(self, i):
        """SIGCONT node I."""
        self.nodes[i].proc.signal(signal.SIGCONT)
        self.paused.discard(i)

    def pid(self, i):
        return self.nodes[i].proc.pid

    def alive(self, i):
        return self.nodes[i].alive()

    def ready(self, i):
        return harness.http_get(self.admin_ports[i], "/readyz", timeout=2)[0] == 200

    def wait_ready(self, nodes=None, timeout=60.0):
        idx = range(len(self.nodes)) if nodes is None else nodes
        harness.wait_until("fleet nodes %s ready" % list(idx),
                           lambda: all(self.ready(i) for i in idx), timeout=timeout, every=0.1)

    # ---- resharding -------------------------------------------------------
    def split_start(self, timeout=120.0):
        """Step 1 of resharding N -> 2N shards in place (deploy/k8s/README.md,
        "Resharding"; test_reshard.py): start the new shards' nodes. Shard
        s + N replica r is node (s + N) * R + r, on a fresh data directory,
        with the 2N-shard map (cluster.split_from = N), shard s's Redis and
        cluster.bootstrap = peer: it copies its parent shard s's store and
        consumes its own partitions from the offsets in the copy. Returns
        once each new node's /readyz is 200. From here on shards, addrs,
        admin_ports, nodes, owner() and env() describe the new map; the old
        nodes still run the N-shard one until split_restart()."""
        if self.split_from:
            harness.fail("Fleet: one split at a time (already split from %d)" % self.split_from)
        t0 = time.time()
        old = self.shards
        first = len(self.nodes)
        self.split_from, self.shards = old, 2 * old
        self.redis += self.redis[:old]
        for _ in range(old * self.replicas):
            self.ports.append(harness.free_port())
            self.admin_ports.append(harness.free_port())
            self.addrs.append("127.0.0.1:%d" % self.ports[-1])
        for i in range(first, len(self.addrs)):
            s, r = divmod(i, self.replicas)
            o = self._overrides(i)
            o["cluster.bootstrap"] = "peer"
            self.nodes.append(harness.Dedupd(o, name="fleet-%d-%d" % (s, r), start=False))
        new = range(first, len(self.nodes))
        for i in new:
            self._spawn(i)
        for i in new:
            self.nodes[i].wait_log('msg="snapshot installed"', timeout)
            self.nodes[i].wait_log("msg=ready", timeout)
        self.wait_ready(new, timeout=timeout)
        harness.log("fleet split %d -> %d shards: nodes %s copied their parents' stores and are "
                    "ready in %.1fs" % (old, self.shards, list(new), time.time() - t0))

    def split_restart(self, i, timeout=120.0):
        """Step 2 of a split, for old node I: SIGTERM (it must exit 0),
        then start it again on its own store with the 2N-shard map; returns
        once its /readyz is 200. Restart the old nodes one at a time."""
        if not self.split_from or i >= self.split_from * self.replicas:
            harness.fail("Fleet: node %d is not a node of the map being split" % i)
        t0 = time.time()
        self.terminate(i)
        self.nodes[i].overrides.update(self._map())
        self.start(i, timeout)
        self.wait_ready([i], timeout=timeout)
        harness.log("fleet: node %d restarted with the %d-shard map, ready in %.1fs"
                    % (i, self.shards, time.time() - t0))

    def split(self, timeout=120.0):
        """The whole split N -> 2N: split_start(), then split_restart() of
        every old node in turn."""
        self.split_start(timeout)
        for i in range(self.split_from * self.replicas):
            self.split_restart(i, timeout)

    def wait_swept(self, timeout=120.0):
        """After a split, once every node runs the new map: until each has
        swept its store of the users it no longer owns (its log says so)."""
        for dd in self.nodes:
            dd.wait_log("store holds only this shard's users now", timeout)

    # ---- figures ----------------------------------------------------------
    def metric(self, i, name, must=()):
        return harness.metric_sum(self.admin_ports[i], name, must)

    def forwarded_total(self, must=()):
        """dedupd_cluster_forwarded_total summed over every running,
        unpaused node (every outcome unless MUST narrows it)."""
        return sum(self.metric(i, "dedupd_cluster_forwarded_total{", must)
                   for i in range(len(self.nodes))
                   if self.alive(i) and i not in self.paused)

    # ---- plays ------------------------------------------------------------
    def produce(self, plays, fmt="json"):
        """Produce PLAYS ((user, item[, played_at_ms[, scene]]) tuples),
        keyed by user with the fleet's partitioner; returns their count
        once all are delivered (ingest follows within the flush interval)."""
        rows = [tuple(p) + (None,) * (4 - len(p)) for p in plays]
        return il.produce(self.broker, rows, fmt=fmt, partitioner=self.partitioner)

    def env(self):
        """The DD_FLEET_* variables describing this fleet (module doc)."""
        return {
            "DD_FLEET_SEEDS": self.seeds,
            "DD_FLEET_ADMIN_PORTS": ",".join(str(p) for p in self.admin_ports),
            "DD_FLEET_PIDS": ",".join(str(self.pid(i)) for i in range(len(self.nodes))),
            "DD_FLEET_SHARDS": str(self.shards),
            "DD_FLEET_REPLICAS": str(self.replicas),
            "DD_FLEET_PARTITIONS": str(self.partitions),
            "DD_FLEET_PARTITIONER": self.partitioner,
            "DD_FLEET_BROKER": self.broker.addr,
            "DD_FLEET_ADMIN_TOKEN_FILE": harness.admin_token_file(),
        }


def main(argv):
    kafka, partitions = False, 8
    args = list(argv)
    while args and args[0] != "--":
        a = args.pop(0)
        if a == "--kafka":
            kafka = True
        elif a == "--partitions" and args:
            partitions = int(args.pop(0))
        else:
            print("usage: fleet.py [--kafka] [--partitions N] -- CMD ARGS...", file=sys.stderr)
            return 2
    if not args or len(args) < 2:
        print("usage: fleet.py [--kafka] [--partitions N] -- CMD ARGS...", file=sys.stderr)
        return 2
    f = Fleet(partitions=partitions, broker="kafka" if kafka else "devbroker")
    env = dict(os.environ)
    env.update(f.env())
    return subprocess.run(args[1:], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
