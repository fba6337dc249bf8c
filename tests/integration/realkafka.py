# SPDX-License-Identifier: Apache-2.0
"""Apache Kafka itself for the tests of Kafka semantics: one KRaft node, or a
cluster of three (each a controller and a broker), on free loopback ports in
a temporary directory, stopped at exit like every process harness starts.

The jars come from Maven Central through tests/kafka/pom.xml (pinned);
tests/kafka/classpath.sh resolves them into Maven's own cache once and
writes the class path to <build>/kafka-classpath.txt, which later runs
reuse. Topics are made, grown, trimmed and described with Kafka's own
command-line tools (the classes of kafka-tools), as an operator would.

The devbroker (harness.DevBroker) stays for the quick ingest tests; a
KafkaCluster has the same `addr`, so test_ingest_lib's helpers take either.
"""
import atexit
import base64
import fcntl
import os
import re
import subprocess
import time
import uuid

import harness

JAVA = "java"
TOOLS = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "storage": "kafka.tools.StorageTool",
}


def new_cluster_id():
    """A random KRaft cluster id: 16 bytes in url-safe base64, drawn again
    while it starts with '-', which kafka-storage's parser would take for an
    option (as Kafka's own Uuid.randomUuid() does)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def classpath():
    """The class path of the pinned Kafka, resolving it with Maven the first
    time (a failure there fails the test, naming Maven's error)."""
    path = os.environ.get("DD_KAFKA_CLASSPATH") or os.path.join(harness.BUILD_ROOT,
                                                                "kafka-classpath.txt")
    lock = None
    if not os.path.exists(path):
        # Two tests at once must not run Maven into one local repository
        # together: the first resolves, the other waits for its file.
        lock = open(path + ".lock", "a")
        fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(path):
        script = os.path.join(harness.SOURCE_ROOT, "tests", "kafka", "classpath.sh")
        harness.log("resolving Apache Kafka with Maven (first run)")
        r = subprocess.run(["bash", script, path], capture_output=True, text=True)
        if r.returncode != 0:
            if "not found" in r.stderr:
                harness.skip(r.stderr.strip())
            harness.fail("tests/kafka/classpath.sh failed:\n" + r.stderr[-3000:])
    if lock is not None:
        lock.close()
    with open(path) as f:
        cp = f.read().strip()
    if not cp:
        harness.fail("empty Kafka class path in " + path)
    return cp


class KafkaCluster:
    """NODES KRaft nodes (1 or 3) with TOPICS ("name:partitions") created by
    kafka-topics, replication factor min(3, NODES) and, with 3 nodes,
    min.insync.replicas=2. kill(i)/start(i) take one node down and back."""

    def __init__(self, nodes=1, topics=("plays:8",), heap_mb=384):
        if nodes not in (1, 3):
            harness.fail("KafkaCluster: 1 or 3 nodes")
        self.cp = classpath()
        self.n = nodes
        self.heap_mb = heap_mb
        self.dir = harness.tmpdir("dedupd-kafka-")
        self.cluster_id = new_cluster_id()
        self.ports = [(harness.free_port(), harness.free_port()) for _ in range(nodes)]
        self.procs = [None] * nodes
        _clusters.append(self)
        voters = ",".join("%d@127.0.0.1:%d" % (i + 1, c) for i, (_, c) in enumerate(self.ports))
        for i in range(nodes):
            self._configure(i, voters)
        for i in range(nodes):
            self.start(i, wait=False)
        self.wait_ready()
        self.rf = min(3, nodes)
        for t in topics:
            name, parts = t.split(":")
            self.create_topic(name, int(parts))
        harness.log("kafka (%d node%s) at %s" % (nodes, "s" if nodes > 1 else "", self.addr))

    def _node_dir(self, i):
        return os.path.join(self.dir, "node%d" % (i + 1))

    def _configure(self, i, voters):
        d = self._node_dir(i)
        os.makedirs(os.path.join(d, "data"))
        broker, controller = self.ports[i]
        rf = min(3, self.n)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(i + 1),
            "controller.quorum.voters": voters,
            "listeners": "PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d" % (broker, controller),
            "advertised.listeners": "PLAINTEXT://127.0.0.1:%d" % broker,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": os.path.join(d, "data"),
            "num.partitions": "1",
            "default.replication.factor": str(rf),
            "min.insync.replicas": "2" if self.n >= 3 else "1",
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": "2" if self.n >= 3 else "1",
            "group.initial.rebalance.delay.ms": "0",
            # Tests kill consumers and want the group to notice in seconds.
            "group.min.session.timeout.ms": "1000",
            "auto.create.topics.enable": "false",
            # A killed node's partitions move within seconds, not minutes.
            "replica.lag.time.max.ms": "5000",
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "500",
        }
        with open(os.path.join(d, "server.properties"), "w") as f:
            for k, v in props.items():
                f.write("%s=%s\n" % (k, v))
        self.java(TOOLS["storage"], "format", "-t", self.cluster_id, "-c",
                  os.path.join(d, "server.properties"), node=i)

    def _jvm(self, i):
        d = self._node_dir(i)
        return [JAVA, "-Xms%dm" % self.heap_mb, "-Xmx%dm" % self.heap_mb, "-XX:+UseSerialGC",
                "-Dkafka.logs.dir=" + d,
                "-Dlog4j.configuration=file:" + os.path.join(harness.SOURCE_ROOT, "tests", "kafka",
                                                             "log4j.properties"),
                "-cp", self.cp]

    def java(self, cls, *args, node=0, check=True, timeout=120):
        """Run one of Kafka's tools (CLS, a class name); returns stdout."""
        r = subprocess.run(self._jvm(node) + [cls] + [str(a) for a in args], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            harness.fail("%s %s exited %d:\n%s%s" % (cls, " ".join(map(str, args)), r.returncode,
                                                      r.stdout[-2000:], r.stderr[-2000:]))
        return r.stdout

    def tool(self, name, *args, check=True):
        """kafka-NAME.sh's class against this cluster (the bootstrap server is added)."""
        return self.java(TOOLS[name], "--bootstrap-server", self.addr, *args, check=check)

    @property
    def addr(self):
        return ",".join("127.0.0.1:%d" % b for b, _ in self.ports)

    def start(self, i, wait=True):
        d = self._node_dir(i)
        self.procs[i] = harness.Proc(self._jvm(i) + ["kafka.Kafka", os.path.join(d, "server.properties")],
                                     "kafka%d" % (i + 1), logfile=os.path.join(d, "stdout.log"))
        if wait:
            harness.wait_port(self.ports[i][0], timeout=90, proc=self.procs[i].p)
            self.wait_ready()

    def kill(self, i):
        """SIGKILL node I (0-based)."""
        self.procs[i].kill9()

    def alive(self, i):
        return self.procs[i] is not None and self.procs[i].alive()

    def wait_ready(self, timeout=120):
        """Until every running node is a registered broker (kcat's metadata)."""
        running = [i for i in range(self.n) if self.alive(i)]
        for i in running:
            harness.wait_port(self.ports[i][0], timeout=timeout, proc=self.procs[i].p)

        def brokers_up():
            r = subprocess.run(["kcat", "-L", "-b", self.addr, "-m", "5"], capture_output=True,
                               text=True, stdin=subprocess.DEVNULL)
            m = re.search(r"(\d+) brokers:", r.stdout)
            return r.returncode == 0 and m is not None and int(m.group(1)) == len(running)

        harness.wait_until("%d Kafka broker(s) registered" % len(running), brokers_up, timeout)

    def create_topic(self, name, partitions, **configs):
        args = ["--create", "--topic", name, "--partitions", partitions,
                "--replication-factor", self.rf]
        for k, v in configs.items():
            args += ["--config", "%s=%s" % (k.replace("_", "."), v)]
        self.tool("topics", *args)

    def add_partitions(self, name, partitions):
        """kafka-topics --alter: the topic grows to PARTITIONS."""
        self.tool("topics", "--alter", "--topic", name, "--partitions", partitions)

    def delete_records(self, topic, offsets):
        """kafka-delete-records: each partition's log starts at OFFSETS[p]."""
        path = os.path.join(self.dir, "delete-records-%d.json" % int(time.time() * 1000))
        parts = ",".join('{"topic":"%s","partition":%d,"offset":%d}' % (topic, p, o)
                         for p, o in sorted(offsets.items()))
        with open(path, "w") as f:
            f.write('{"version":1,"partitions":[%s]}' % parts)
        return self.tool("delete-records", "--offset-json-file", path)

    def end_offsets(self, topic, earliest=False):
        """{partition: offset}: the high watermark (or the log start)."""
        out = self.tool("get-offsets", "--topic", topic, "--time", "-2" if earliest else "-1")
        res = {}
        for line in out.splitlines():
            m = re.match(r"^%s:(\d+):(\d+)$" % re.escape(topic), line.strip())
            if m:
                res[int(m.group(1))] = int(m.group(2))
        return res

    def describe_group(self, group):
        """kafka-consumer-groups --describe: {(topic, partition): (current, end, lag)},
        None for a column Kafka shows as '-'."""
        out = self.tool("consumer-groups", "--describe", "--group", group, check=False)
        rows = {}
        for line in out.splitlines():
            f = line.split()
            # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
            if len(f) >= 6 and f[0] == group and f[2].isdigit():
                num = [None if x == "-" else int(x) for x in f[3:6]]
                rows[(f[1], int(f[2]))] = (num[0], num[1], num[2])
        return rows

    def stop(self):
        """SIGKILL every node: its data is temporary, and a controlled
        shutdown of a KRaft quorum waits for the other voters."""
        for i in range(self.n):
            if self.procs[i] is not None:
                self.procs[i].kill9()


_clusters = []


@atexit.register
def _kill_all():
    # Registered after harness's own cleanup, so it runs first.
    for c in _clusters:
        c.stop()
