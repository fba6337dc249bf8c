#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""gRPC as grpcurl users and gRPC clients' health checking expect it, against
one real dedupd (ingest off, a real redis-server, admin.drain_ms 2 s):

1. Server reflection, v1 and v1alpha, through a reflection client speaking
   the published protocol (stubs of proto/reflection.proto, and the same
   under package grpc.reflection.v1alpha, generated with grpc_tools):
   list_services names dedup.v1.Dedup, dedup.v1.Cluster and
   grpc.health.v1.Health; file_containing_symbol (a service, a method, a
   message, a field, an enum value) and file_by_filename answer a
   FileDescriptorProto that python3-protobuf's descriptor pool accepts, from
   which a Filter call is built and made with no generated code, as grpcurl
   does; unknown names are an error_response NOT_FOUND inside the stream;
   several requests on one stream are answered in order; a request that is
   not a ServerReflectionRequest ends the stream INVALID_ARGUMENT.
2. Health/Watch: SERVING at once for "" and dedup.v1.Dedup, SERVICE_UNKNOWN
   for another name (the stream stays open), "liveness" SERVING; at most
   100 watchers at once (the 101st is refused RESOURCE_EXHAUSTED) and a
   closed one frees its place.
3. grpc's own log: 300 gzip-compressed Filter calls (compression is off,
   grpc core refuses each and logs it) leave at most a few lines, each a
   dedupd key=value line of module=grpc, and none of grpc's own format.
4. Drain: on SIGTERM an open Watch gets NOT_SERVING while gRPC still
   serves (Health/Check "" NOT_SERVING, "liveness" SERVING), then its
   stream ends; dedupd exits 0.

Locally a missing redis-server or python3-grpcio skips (77); with CI set it
fails.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_clients_lib  # noqa: E402
from harness import fail, log  # noqa: E402
from test_clients_lib import python_stubs  # noqa: E402

pb, pbg, grpc = python_stubs()
import health_pb2 as hpb  # noqa: E402
import health_pb2_grpc as hpbg  # noqa: E402

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

SERVING, NOT_SERVING, SERVICE_UNKNOWN = 1, 2, 3
SERVICES = {"dedup.v1.Dedup", "dedup.v1.Cluster", "grpc.health.v1.Health"}


def reflection_stubs():
    """(v1 pb2, v1 pb2_grpc, v1alpha pb2, v1alpha pb2_grpc) from
    proto/reflection.proto, the alpha one from a copy under its package."""
    out = harness.tmpdir("dedupd-reflstubs-")
    src = os.path.join(harness.SOURCE_ROOT, "proto", "reflection.proto")
    with open(src) as f:
        text = f.read()
    alpha_dir = os.path.join(out, "alpha")
    os.makedirs(alpha_dir)
    with open(os.path.join(alpha_dir, "reflection_alpha.proto"), "w") as f:
        f.write(text.replace("package grpc.reflection.v1;", "package grpc.reflection.v1alpha;"))
    for d, fn in ((os.path.dirname(src), src),
                  (alpha_dir, os.path.join(alpha_dir, "reflection_alpha.proto"))):
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + d,
                        "--python_out=" + out, "--grpc_python_out=" + out, fn], check=True)
    sys.path.insert(0, out)
    import reflection_pb2
    import reflection_pb2_grpc
    import reflection_alpha_pb2
    import reflection_alpha_pb2_grpc
    return reflection_pb2, reflection_pb2_grpc, reflection_alpha_pb2, reflection_alpha_pb2_grpc


def check_reflection(ch, rpb, rpbg, what):
    stub = rpbg.ServerReflectionStub(ch)
    R = rpb.ServerReflectionRequest
    reqs = [R(host="h", list_services=""),
            R(file_containing_symbol="dedup.v1.Dedup"),
            R(file_containing_symbol="dedup.v1.Dedup.Filter"),
            R(file_containing_symbol="dedup.v1.FilterRequest.candidate_ids"),
            R(file_containing_symbol="grpc.health.v1.Health.Watch"),
            R(file_containing_symbol="grpc.health.v1.HealthCheckResponse.SERVING"),
            R(file_containing_symbol=".dedup.v1.Cluster"),
            R(file_by_filename="health.proto"),
            R(file_by_filename="dedup.proto"),
            R(file_containing_symbol="no.such.Symbol"),
            R(file_by_filename="nosuch.proto"),
            R(all_extension_numbers_of_type="dedup.v1.FilterRequest")]
    resps = list(stub.ServerReflectionInfo(iter(reqs), timeout=10))
    if len(resps) != len(reqs):
        fail("%s: %d answers to %d requests" % (what, len(resps), len(reqs)))
    for q, a in zip(reqs, resps):
        if a.original_request != q:
            fail("%s: answers out of order: %r for %r" % (what, a.original_request, q))
    if resps[0].valid_host != "h":
        fail("%s: valid_host %r" % (what, resps[0].valid_host))
    names = {s.name for s in resps[0].list_services_response.service}
    if names != SERVICES:
        fail("%s: list_services %s, want %s" % (what, sorted(names), sorted(SERVICES)))
    files = {}
    for q, a, want in zip(reqs[1:9], resps[1:9], ["dedup.proto"] * 3 + ["health.proto"] * 2 +
                          ["dedup.proto", "health.proto", "dedup.proto"]):
        if a.WhichOneof("message_response") != "file_descriptor_response":
            fail("%s: %r answered %r" % (what, q, a))
        fds = [descriptor_pb2.FileDescriptorProto.FromString(b)
               for b in a.file_descriptor_response.file_descriptor_proto]
        if [f.name for f in fds] != [want]:
            fail("%s: %r answered files %s, want %s" % (what, q, [f.name for f in fds], want))
        files[want] = a.file_descriptor_response.file_descriptor_proto[0]
    for a, name in ((resps[9], "no.such.Symbol"), (resps[10], "nosuch.proto")):
        e = a.error_response
        if a.WhichOneof("message_response") != "error_response" or e.error_code != 5 or \
                name not in e.error_message:
            fail("%s: unknown %s answered %r" % (what, name, a))
    ext = resps[11]
    if ext.WhichOneof("message_response") != "all_extension_numbers_response" or \
            ext.all_extension_numbers_response.base_type_name != "dedup.v1.FilterRequest" or \
            list(ext.all_extension_numbers_response.extension_number):
        fail("%s: extension numbers answered %r" % (what, ext))
    return files


def call_from_descriptors(ch, files):
    """What grpcurl does: build the Filter request from the reflected
    descriptors alone and call the method they name."""
    pool = descriptor_pool.DescriptorPool()
    for name in ("health.proto", "dedup.proto"):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(files[name]))
    svc = pool.FindServiceByName("dedup.v1.Dedup")
    m = svc.methods_by_name["Filter"]
    if m.input_type.full_name != "dedup.v1.FilterRequest" or \
            {s.full_name for s in pool.FindFileByName("dedup.proto").services_by_name.values()} != \
            {"dedup.v1.Dedup", "dedup.v1.Cluster"}:
        fail("reflected descriptors: Filter takes %s" % m.input_type.full_name)
    factory = message_factory.MessageFactory(pool)
    Req = factory.GetPrototype(m.input_type)
    Resp = factory.GetPrototype(m.output_type)
    call = ch.unary_unary("/dedup.v1.Dedup/Filter", request_serializer=Req.SerializeToString,
                          response_deserializer=Resp.FromString)
    r = call(Req(user_id="refl-user", candidate_ids=["a", "b", "a"]), timeout=10)
    if list(r.kept_ids) != ["a", "b"]:
        fail("Filter from reflected descriptors kept %s" % list(r.kept_ids))


def expect_code(fn, code, what):
    try:
        fn()
    except grpc.RpcError as e:
        if e.code() != code:
            fail("%s: %s %s, want %s" % (what, e.code(), e.details(), code))
        return e
    fail("%s: no error, want %s" % (what, code))


def main():
    rpb, rpbg, apb, apbg = reflection_stubs()
    redis = harness.Redis()
    admin = harness.free_port()
    d = test_clients_lib.Dedupd(redis.addr, {
        "admin.listen": "127.0.0.1:%d" % admin,
        "admin.drain_ms": "2000",
        "rpc.shutdown_grace_ms": "3000",
    })
    ch = grpc.insecure_channel(d.addr)
    t0 = time.time()

    # ---- 1. reflection, v1 and v1alpha --------------------------------------
    files = check_reflection(ch, rpb, rpbg, "v1")
    check_reflection(ch, apb, apbg, "v1alpha")
    call_from_descriptors(ch, files)
    raw = ch.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                           request_serializer=lambda b: b, response_deserializer=lambda b: b)
    e = expect_code(lambda: list(raw(iter([b"\xff\xff\xff"]), timeout=10)),
                    grpc.StatusCode.INVALID_ARGUMENT, "reflection: a request of garbage")
    log("reflection v1 and v1alpha: services listed, descriptors by symbol and file name, a Filter"
        " built from them alone, NOT_FOUND inside the stream, garbage refused (%s)" % e.details())

    # ---- 2. Health/Watch ----------------------------------------------------
    health = hpbg.HealthStub(ch)
    for svc, want in (("", SERVING), ("dedup.v1.Dedup", SERVING), ("liveness", SERVING),
                      ("no.such.Service", SERVICE_UNKNOWN)):
        w = health.Watch(hpb.HealthCheckRequest(service=svc), timeout=10)
        got = next(w).status
        if got != want:
            fail("Watch(%r): first status %s, want %s" % (svc, got, want))
        w.cancel()
    r = health.Check(hpb.HealthCheckRequest(service="liveness"), timeout=5)
    if r.status != SERVING:
        fail("Check(liveness): %s" % r.status)
    # 100 watchers across two connections (100 streams per connection), then one more
    chans = [grpc.insecure_channel(d.addr, options=[("grpc.use_local_subchannel_pool", 1)])
             for _ in range(3)]
    watches = []
    for i in range(100):
        w = hpbg.HealthStub(chans[i % 2]).Watch(hpb.HealthCheckRequest(), timeout=60)
        watches.append(w)
    for w in watches:
        if next(w).status != SERVING:
            fail("a watcher got no SERVING")
    extra = hpbg.HealthStub(chans[2]).Watch(hpb.HealthCheckRequest(), timeout=10)
    e = expect_code(lambda: next(extra), grpc.StatusCode.RESOURCE_EXHAUSTED, "the 101st watcher")
    watches.pop().cancel()

    def freed():
        w = hpbg.HealthStub(chans[2]).Watch(hpb.HealthCheckRequest(), timeout=10)
        try:
            ok = next(w).status == SERVING
        except grpc.RpcError:
            return False
        watches.append(w)
        return ok
    harness.wait_until("a closed watcher's place taken again", freed, timeout=10, every=0.2)
    for w in watches:
        w.cancel()
    log("Watch: SERVING / SERVICE_UNKNOWN at once, liveness SERVING, 100 watchers and the 101st"
        " refused (%s), a closed one's place reused" % e.details())

    # ---- 3. grpc's own log lines, rate-limited, key=value -------------------
    gz = pbg.DedupStub(ch)
    n = 300
    refused = 0
    for i in range(n):
        try:
            gz.Filter(pb.FilterRequest(user_id="gz", candidate_ids=["x"]), timeout=5,
                      compression=grpc.Compression.Gzip)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                refused += 1
    if refused != n:
        fail("%d of %d gzip calls refused UNIMPLEMENTED" % (refused, n))
    text = d.run_log()
    lines = [l for l in text.splitlines() if re.search(r"[Cc]ompression algorithm", l)]
    foreign = [l for l in text.splitlines() if l and not l.startswith("ts=")]
    if foreign:
        fail("log lines not in dedupd's format: %s" % foreign[:3])
    if not lines or len(lines) > 3:
        fail("%d calls gave %d grpc log lines about compression (want 1 to 3):\n%s"
             % (n, len(lines), "\n".join(lines[:5])))
    if not all(" module=grpc " in l and re.search(r' file="[^"]+" line=\d+', l) for l in lines):
        fail("grpc's lines are not module=grpc key=value: %s" % lines)
    log("grpc log: %d refused gzip calls, %d line(s): %s" % (n, len(lines), lines[0]))

    # ---- 4. drain: NOT_SERVING to watchers, liveness still SERVING ----------
    w = health.Watch(hpb.HealthCheckRequest(), timeout=30)
    if next(w).status != SERVING:
        fail("Watch before drain not SERVING")
    seen = []

    def reader():
        try:
            for m in w:
                seen.append((time.time(), m.status))
        except grpc.RpcError as err:
            seen.append((time.time(), err.code()))
    th = threading.Thread(target=reader)
    th.start()
    t_term = time.time()
    d.proc.signal(signal.SIGTERM)
    harness.wait_until("Watch sees NOT_SERVING", lambda: any(s == NOT_SERVING for _, s in seen),
                       timeout=5, every=0.05)
    lag = next(t for t, s in seen if s == NOT_SERVING) - t_term
    r = health.Check(hpb.HealthCheckRequest(service=""), timeout=5)
    live = health.Check(hpb.HealthCheckRequest(service="liveness"), timeout=5)
    if r.status != NOT_SERVING or live.status != SERVING:
        fail("during drain: Check('') %s, Check(liveness) %s" % (r.status, live.status))
    th.join(15)
    if th.is_alive():
        fail("the Watch stream did not end at shutdown")
    rc = d.proc.stop(20)
    if rc != 0:
        fail("dedupd exited %s" % rc)
    log("drain: Watch got NOT_SERVING %.2f s after SIGTERM, Check('') NOT_SERVING, liveness"
        " SERVING, stream ended (%s), exit 0" % (lag, seen[-1][1]))
    for c in chans + [ch]:
        c.close()
    log("PASS (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
