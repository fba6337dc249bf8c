# SPDX-License-Identifier: Apache-2.0
"""Nodes of a cluster call each other over mutual TLS with their own
certificates (issue 17, "with rpc.tls_cert set, nodes talk to each other
over TLS with the same certificates").

Two shards of one replica on loopback, mutual TLS with a test CA (openssl):
the nodes share one certificate (CN dedupd-node, serverAuth and clientAuth)
that rpc.allow_peer names; a reader (CN recall) may Filter. Plays come from
ddproduce (murmur2_random). Then:

- the reader's Filter through either node finds every play of every user,
  half of them forwarded over TLS to the other node;
- a node whose allow_peer does not name the nodes' identity refuses the
  calls its peer forwards (PERMISSION_DENIED naming rpc.allow_peer), and the
  peer passes that answer on: the node identity must be in allow_peer (and
  need not be in allow_read: a forwarded call is judged by allow_peer).
"""
import os
import shutil
import subprocess
import time

import harness
import test_ingest_lib as il
from test_clients_lib import python_stubs
from certs import Certs
from test_tls import Client

pb, pbg, grpc = python_stubs()


def check(cond, msg):
    if not cond:
        harness.fail(msg)


def ready(port):
    return harness.http_get(port, "/readyz")[0] == 200


def start_cluster(broker, redis, certs, node, allow_peer, group):
    ports = [harness.free_port(), harness.free_port()]
    admins = [harness.free_port(), harness.free_port()]
    nodes = "127.0.0.1:%d;127.0.0.1:%d" % tuple(ports)
    dds = []
    for s in range(2):
        o = il.ingest_overrides(broker, group=group)
        o.update({
            "log.level": "info",
            "rpc.listen": "127.0.0.1:%d" % ports[s],
            "admin.listen": "127.0.0.1:%d" % admins[s],
            "rpc.tls_cert": node[0], "rpc.tls_key": node[1], "rpc.tls_client_ca": certs.ca,
            "rpc.allow_read": "recall", "rpc.allow_write": "",
            "rpc.allow_peer": allow_peer[s],
            "cluster.shards": "2", "cluster.shard": str(s), "cluster.replica": "0",
            "cluster.nodes": nodes, "cluster.redis": redis.addr + ";" + redis.addr,
            "cluster.health_interval_ms": "200", "window.flush_ms": "100",
        })
        dds.append(harness.Dedupd(o, name="dd-tls-%d-%s" % (s, group)))
    harness.wait_until("both nodes ready", lambda: all(ready(a) for a in admins))
    return dds, ports


def main():
    openssl = shutil.which("openssl")
    if not openssl:
        harness.skip("openssl is not installed")
    d = harness.tmpdir("dedupd-ctls-")
    certs = Certs(openssl, d, "main")
    node = certs.issue("node", "dedupd-node", "DNS:localhost,IP:127.0.0.1",
                       usage="serverAuth,clientAuth")
    reader = certs.issue("reader", "recall")
    broker = harness.DevBroker(topics=("plays:8",))
    redis = harness.Redis()

    users = ["tls-user-%d" % i for i in range(300)]
    plays = [(u, "v-%s" % u, None, None) for u in users]
    path = os.path.join(harness.tmpdir("dedupd-plays-"), "plays.tsv")
    il.write_lines(path, plays)
    r = subprocess.run([harness.build_path("tests", "tools", "ddproduce"), "-b", broker.addr,
                        "-t", "plays", "-F", "json", "-X", "partitioner=murmur2_random", path],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "ddproduce: %s %s" % (r.stdout, r.stderr))

    # ---- forwarding over mutual TLS ---------------------------------------
    allow = "dedupd-node"
    dds, ports = start_cluster(broker, redis, certs, node, [allow, allow], "ctls")
    clients = [Client("127.0.0.1:%d" % p, certs.ca, reader) for p in ports]

    def all_seen(c):
        return all(c.filter(u, ["v-%s" % u, "fresh"]) == ["fresh"] for u in users)

    for i, c in enumerate(clients):
        harness.wait_until("node %d answers for every user" % i, lambda: all_seen(c), timeout=120)
    harness.log("Filter through both nodes finds all %d users' plays over TLS" % len(users))
    for x in dds:
        check("tls=mutual" in x.run_log(), "node not on mutual TLS")
    for c in clients:
        c.close()
    for x in dds:
        x.stop()

    # ---- the node identity must be allowed ----------------------------------
    dds, ports = start_cluster(broker, redis, certs, node, ["recall", allow], "ctls2")
    c = Client("127.0.0.1:%d" % ports[1], certs.ca, reader)
    denied = 0
    for u in users[:40]:
        try:
            c.filter(u, ["v-%s" % u])
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.PERMISSION_DENIED and
                  "rpc.allow_peer" in e.details(),
                  "forwarded to a node that does not allow the node identity: %s %s" %
                  (e.code(), e.details()))
            denied += 1
    check(denied > 5, "no forwarded call was refused (%d)" % denied)
    harness.log("a node whose allow_peer lacks the node identity refuses forwarded calls (%d)"
                % denied)
    c.close()
    for x in dds:
        x.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
