#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The habits operators and client authors bring to dedupctl (issue 30),
against one dedupd and one redis-server started once:

- ForgetUser with all_scenes over gRPC: every scene's plays and
  deliveries, the reply listing the scenes; other users (one whose id is a
  glob pattern matching this one's keys included) untouched; `dedupctl
  forget USER` across three scenes, -s for one.
- One way to address a node: -a/--addr and --admin on every command that
  needs them, DEDUPD_ADDR and DEDUPD_ADMIN from the environment, the
  positional admin address of stats; an option a command does not take is
  refused with exit 2.
- -o json / --json on every command, parsed with json.loads (answers and
  errors).
- Exit codes: 2 usage, 3 unavailable, 4 invalid argument, 5 permission,
  6 deadline, 7 degraded with --strict only.
- Ids from standard input with '-'; '-' after '--' is an id.
- --version, error prefixes naming the program, "recorded 1 delivery".
"""
import http.server
import json
import os
import socket
import subprocess
import threading

import harness
from test_clients_lib import Dedupd, python_stubs

EXE = harness.build_path("tools", "dedupctl")


def run(argv, want, env=None, stdin=None):
    """dedupctl ARGV; fail unless it exits WANT. (stdout, stderr)."""
    e = dict(os.environ)
    for k in ("DEDUPD_ADDR", "DEDUPD_ADMIN", "DEDUPCTL_ADMIN_TOKEN_FILE"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run([EXE] + [str(a) for a in argv], capture_output=True, text=True,
                       timeout=30, env=e, input=stdin if stdin is not None else "")
    if p.returncode != want:
        harness.fail("dedupctl %s: exit %d, want %d\nstdout: %s\nstderr: %s"
                     % (" ".join(map(str, argv)), p.returncode, want, p.stdout, p.stderr))
    return p.stdout, p.stderr


def js(argv, want=0, **kw):
    """dedupctl ARGV with -o json: its stdout as one parsed JSON object."""
    out, err = run(list(argv) + ["-o", "json"], want, **kw)
    try:
        return json.loads(out)
    except ValueError as e:
        harness.fail("dedupctl %s -o json: not JSON (%s): %r %r" % (" ".join(argv), e, out, err))


class FakeAdmin:
    """An HTTP server answering every path with (STATUS, BODY) as set."""

    def __init__(self):
        self.status, self.body = 200, "{}"
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                b = outer.body.encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addr = "127.0.0.1:%d" % self.srv.server_address[1]


def main():
    # ---- no server needed -------------------------------------------------
    out, _ = run(["--version"], 0)
    if not out.startswith("dedupctl ") or "\nrevision " not in out:
        harness.fail("--version: %r" % out)
    out, _ = run(["--help"], 0)
    for want in ("--addr", "--admin", "DEDUPD_ADDR", "DEDUPD_ADMIN", "--json", "--strict",
                 "--version", "exit codes:", "  7  degraded"):
        if want not in out:
            harness.fail("--help lacks %r" % want)
    _, err = run(["--bogus", "health"], 2)
    if not err.startswith("dedupctl: "):
        harness.fail("getopt's message should name the program, not its path: %r" % err)
    run(["-o", "yaml", "health"], 2)

    redis = harness.Redis()
    admin_port = harness.free_port()
    d = Dedupd(redis.addr, {"admin.listen": "127.0.0.1:%d" % admin_port,
                            "admin.token_file": harness.admin_token_file()})
    addr, admin = d.addr, "127.0.0.1:%d" % admin_port
    tok = {"DEDUPCTL_ADMIN_TOKEN_FILE": harness.admin_token_file()}

    # ---- ForgetUser all_scenes over gRPC ------------------------------------
    pb2, pb2_grpc, grpc = python_stubs()
    stub = pb2_grpc.DedupStub(grpc.insecure_channel(addr))

    def plays(user, scene, ids):
        stub.RecordPlays(pb2.RecordPlaysRequest(user_id=user, scene=scene,
                                                plays=[pb2.Play(item_id=i) for i in ids]))

    def kept(user, scene, ids):
        return list(stub.Filter(pb2.FilterRequest(user_id=user, scene=scene,
                                                  candidate_ids=ids)).kept_ids)

    plays("g1", "", ["a"])
    plays("g1", "feed", ["b"])
    plays("g1", "x*", ["c"])
    stub.RecordDelivery(pb2.RecordDeliveryRequest(user_id="g1", scene="push", item_ids=["d"]))
    plays("g2", "feed", ["b"])                     # another user: kept
    plays("g*", "feed", ["b"])                     # a glob of g1's keys: kept
    stub.RecordDelivery(pb2.RecordDeliveryRequest(user_id="g*", scene="push", item_ids=["d"]))
    r = stub.ForgetUser(pb2.ForgetUserRequest(user_id="g1", all_scenes=True))
    if list(r.scenes) != ["", "feed", "push", "x*"]:
        harness.fail("ForgetUser all_scenes: scenes %s" % list(r.scenes))
    for scene, ids in (("", ["a"]), ("feed", ["b"]), ("x*", ["c"]), ("push", ["d"])):
        if kept("g1", scene, ids) != ids:
            harness.fail("after ForgetUser all_scenes, scene %r still removes %s" % (scene, ids))
    for user, scene, ids in (("g2", "feed", ["b"]), ("g*", "feed", ["b"]), ("g*", "push", ["d"])):
        if kept(user, scene, ids) != []:
            harness.fail("ForgetUser all_scenes of g1 touched %s in %r" % (user, scene))
    r = stub.ForgetUser(pb2.ForgetUserRequest(user_id="g1", all_scenes=True))
    if list(r.scenes) != []:
        harness.fail("a second ForgetUser all_scenes: %s" % list(r.scenes))
    r = stub.ForgetUser(pb2.ForgetUserRequest(user_id="g2", scene="feed"))
    if list(r.scenes) != ["feed"] or kept("g2", "feed", ["b"]) != ["b"]:
        harness.fail("ForgetUser of one scene: %s" % list(r.scenes))
    try:
        stub.ForgetUser(pb2.ForgetUserRequest(user_id="g1", scene="feed", all_scenes=True))
        harness.fail("scene with all_scenes was accepted")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
            harness.fail("scene with all_scenes: %s" % e.code())
    harness.log("ForgetUser all_scenes: every scene, the reply lists them, others untouched")

    # ---- dedupctl forget across three scenes ------------------------------------
    for scene in ("s1", "s2", "s3"):
        run(["-a", addr, "play", "-s", scene, "fu", "v1"], 0)
    run(["-a", addr, "deliver", "fu", "v2"], 0)
    out, _ = run(["-a", addr, "forget", "fu"], 0)
    if out.strip() != 'forgot fu in 4 scenes: "", "s1", "s2", "s3"':
        harness.fail("dedupctl forget: %r" % out)
    for scene in ("s1", "s2", "s3"):
        j = js(["-a", addr, "filter", "-s", scene, "fu", "v1"])
        if j["kept"] != ["v1"]:
            harness.fail("dedupctl forget left scene %s: %s" % (scene, j))
    run(["-a", addr, "play", "-s", "s1", "fu", "v1"], 0)
    run(["-a", addr, "play", "-s", "s2", "fu", "v1"], 0)
    out, _ = run(["-a", addr, "forget", "-s", "s1", "fu"], 0)
    if 'in scene "s1"' not in out or js(["-a", addr, "filter", "-s", "s2", "fu", "v1"])["kept"]:
        harness.fail("dedupctl forget -s s1: %r" % out)
    j = js(["-a", addr, "forget", "fu"])
    if j != {"user": "fu", "all_scenes": True, "scenes": ["s2"]}:
        harness.fail("dedupctl forget -o json: %s" % j)
    harness.log("dedupctl forget: every scene unless -s, the scenes printed")

    # ---- addresses: flags, environment, positional ----------------------------
    dead = "127.0.0.1:%d" % harness.free_port()
    run(["health"], 0, env={"DEDUPD_ADDR": addr})
    run(["health", "-t", "2000"], 3, env={"DEDUPD_ADDR": dead})
    run(["health", "--addr", addr], 0, env={"DEDUPD_ADDR": dead})   # the flag wins
    j = js(["why", "alice", "x"], env=dict(tok, DEDUPD_ADMIN=admin))
    if j["items"][0]["item"] != "x":
        harness.fail("why with DEDUPD_ADMIN: %s" % j)
    js(["trace", "list", "--admin", admin], env=tok)
    js(["trace", "list"], want=3, env=dict(tok, DEDUPD_ADMIN=dead))
    run(["cluster", dead], 3)                          # positional, as before
    run(["cluster", "--admin", dead], 3)
    run(["cluster", "--admin", admin, dead], 2)        # given twice
    for argv in (["stats", "-a", addr], ["why", "-a", addr, "u", "x"],
                 ["health", "--admin", admin], ["filter", "--admin", admin, "u", "x"],
                 ["health", "-s", "x"], ["forget", "--strict", "u"], ["deliver", "-l", "3", "u", "x"],
                 ["trace", "list", "-s", "x"], ["stats", "-l", "1"], ["play", "--explain", "u", "x"],
                 ["health", "--admin-token-file", "/dev/null"], ["trace", "list", "--tls-ca", "/x"]):
        _, err = run(argv, 2)
        if "does not apply" not in err:
            harness.fail("dedupctl %s: %r" % (" ".join(argv), err))
    harness.log("addresses: -a/--admin, DEDUPD_ADDR/DEDUPD_ADMIN, misplaced options refused")

    # ---- JSON on every command ------------------------------------------------
    j = js(["-a", addr, "play", "ju", "p1", "p2"])
    if j["accepted"] != 2 or j["expired"] != 0 or j["user"] != "ju":
        harness.fail("play json: %s" % j)
    j = js(["-a", addr, "deliver", "ju", "d1"])
    if j["recorded"] != 1 or j["recent_size"] != 1:
        harness.fail("deliver json: %s" % j)
    j = js(["-a", addr, "filter", "ju", "p1", "d1", "n1"])
    if j["kept"] != ["n1"] or j["degraded"] or \
            sorted((r["id"], r["reason"]) for r in j["removed"]) != [("d1", "DELIVERED"),
                                                                      ("p1", "PLAYED")]:
        harness.fail("filter json: %s" % j)
    if js(["--json", "-a", addr, "health"]) != {"service": "", "status": "SERVING"}:
        harness.fail("health json")
    j = js(["--admin", admin, "why", "ju", "p1", "n1"], env=tok)
    if [i["verdict"] for i in j["items"]] != ["played", "kept"]:
        harness.fail("why json: %s" % j)
    if js(["trace", "add", "ju", "--admin", admin], env=tok).get("added") is not True:
        harness.fail("trace add json")
    if "ju" not in [u["user"] for u in js(["trace", "list", "--admin", admin], env=tok)["users"]]:
        harness.fail("trace list json")
    js(["trace", "remove", "ju", "--admin", admin], env=tok)
    j = js(["stats", admin])
    if j["ready"] is not True or "Filter" not in j["methods"] or j["ingest"] is not None:
        harness.fail("stats json: %s" % j)
    fake = FakeAdmin()
    fake.body = json.dumps({"shards": 2, "nodes": [{"node": "0.0", "addr": "a:1"}]})
    if js(["cluster", fake.addr])["nodes"][0]["node"] != "0.0":
        harness.fail("cluster json")
    j = js(["-a", addr, "filter", "", "x"], want=4)
    if j["error"]["status"] != "INVALID_ARGUMENT" or j["error"]["exit"] != 4:
        harness.fail("error json: %s" % j)
    harness.log("-o json: every command's answer and errors parse")

    # ---- exit codes -------------------------------------------------------------
    _, err = run(["-a", addr, "play", "u", "x" * 300], 4)
    if "INVALID_ARGUMENT" not in err:
        harness.fail("invalid argument: %r" % err)
    _, err = run(["-t", "2000", "-a", dead, "filter", "u", "x"], 3)
    _, err = run(["--admin", admin, "why", "u", "x"], 5)            # no token: HTTP 401
    fake.status, fake.body = 403, '{"error": "forbidden"}'
    run(["cluster", fake.addr], 5)
    fake.status, fake.body = 503, '{"error": "down"}'
    run(["cluster", fake.addr], 3)
    # A listener that never answers: the deadline, for gRPC and for HTTP.
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(16)
    mute_addr = "127.0.0.1:%d" % mute.getsockname()[1]
    _, err = run(["-t", "300", "-a", mute_addr, "health"], 6)
    if "DEADLINE_EXCEEDED" not in err:
        harness.fail("deadline: %r" % err)
    run(["-t", "300", "cluster", "--admin", mute_addr], 6)
    harness.log("exit codes: 3 unavailable, 4 invalid, 5 permission, 6 deadline")

    # ---- standard input -----------------------------------------------------------
    out, _ = run(["-a", addr, "deliver", "si", "-"], 0, stdin="a1\n\n  a2 \n")
    if "recorded 2 deliveries" not in out:
        harness.fail("deliver -: %r" % out)
    out, _ = run(["-a", addr, "deliver", "si", "one"], 0)
    if "recorded 1 delivery " not in out:
        harness.fail("one delivery: %r" % out)
    j = js(["-a", addr, "filter", "si", "n0", "-", "n2"], stdin="a1\nn1\na2\n")
    if j["kept"] != ["n0", "n1", "n2"] or j["candidates"] != 5:
        harness.fail("filter with '-': %s" % j)
    out, _ = run(["-a", addr, "--json", "filter", "si", "--", "-"], 0)  # after '--': an id
    j = json.loads(out)
    if j["kept"] != ["-"]:
        harness.fail("'--' then '-': %s" % j)
    run(["-a", addr, "filter", "si", "-", "-"], 2, stdin="a\n")
    harness.log("ids from standard input with '-'")

    # ---- degraded: 0 and a warning, 7 with --strict -----------------------------------
    redis.stop()
    out, err = run(["-a", addr, "filter", "ju", "p1", "n1"], 0)
    if "degraded=yes" not in out or "warning" not in err:
        harness.fail("degraded filter: %r %r" % (out, err))
    if js(["-a", addr, "filter", "ju", "p1", "--strict"], want=7)["degraded"] is not True:
        harness.fail("degraded json")
    run(["--admin", admin, "why", "ju", "p1", "--strict"], 7, env=tok)
    run(["--admin", admin, "why", "ju", "p1"], 0, env=tok)
    harness.log("degraded: exit 0 and a warning; 7 with --strict")
    d.stop()
    harness.log("PASS")


if __name__ == "__main__":
    main()
