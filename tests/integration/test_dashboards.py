#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard (deploy/grafana/dedupd.json) and the alert rules
(deploy/prometheus/dedupd-rules.yml) against real dedupd processes: a
cluster of 2 shards x 1 replica (so the cluster families exist) on the
devbroker and redis-server, with traffic: Filter calls for users of both
shards (some forwarded), a delivery, plays and a malformed event from Kafka.

1. /metrics of a node, parsed strictly (test_metrics.parse), has every
   metric the PromQL of the dashboard's targets, its variables' queries and
   the rules' expressions name: _bucket/_sum/_count only on a histogram,
   never a histogram's bare name, at least one sample of each; every label
   they match on exists on that metric (job and instance are Prometheus's
   target labels), and every value they match with `=` is one of its
   samples' values; every label they group by (by, without, on, ignoring)
   is on a metric of the expression; rate/irate/increase only over
   counters and histogram series, deriv/predict_linear/delta over gauges.
   The one name not in /metrics is Prometheus's own `up`, in DedupdDown.
2. The dashboard is well formed: JSON, unique panel ids, every panel on
   the Prometheus data source variable, targets with unique refIds, every
   dedupd selector filtered by the job and instance variables, every
   variable used defined, panels inside the 24-column grid and not
   overlapping; and it shows what issue 20 asks for (Filter rate, latency,
   degraded answers, ingest rate and lag, bad messages, compaction pending,
   disk use, readiness, forwarding, peers up), as do the rules (lag,
   degraded answers, readiness, store errors, disk, Kafka errors, peers).
3. A real Prometheus (the Debian package's server, on loopback) scrapes the
   two nodes every second with the rules loaded: every rule evaluates
   without error, and every dashboard query (its variables replaced as
   Grafana does) is accepted and, unless it filters with a comparison,
   returns series.
4. What Prometheus itself demands of an exporter: `promtool check metrics`
   on both nodes' /metrics is clean (base units: seconds and bytes, no
   `_ms`; counters ending in _total), with every module active (ingest from
   the devbroker, the cluster, the forget-marker producer, a traced user);
   no family exports a negative "unknown" value; the standard process_*
   families are there and plausible (RSS, CPU, open and max fds, start
   time, virtual memory, read from /proc).
5. The README's metrics table ("Metrics") and what the nodes export agree:
   every family on /metrics has a row (names written as `a_{b,c}_total`
   expanded), and every family a row names is exported here or written
   by the code (its name in src/*.c).

Locally a missing redis-server, promtool's package or python3-yaml skips
(77); with CI set it fails.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_ingest_lib as il  # noqa: E402
from harness import fail, log  # noqa: E402
from test_clients_lib import python_stubs  # noqa: E402
from test_metrics import parse  # noqa: E402

try:
    import yaml
except ImportError:
    harness.skip("python3-yaml is not installed")

DASHBOARD = os.path.join(harness.SOURCE_ROOT, "deploy", "grafana", "dedupd.json")
RULES = os.path.join(harness.SOURCE_ROOT, "deploy", "prometheus", "dedupd-rules.yml")

TARGET_LABELS = {"job", "instance"}    # added by Prometheus at scrape time
EXTERNAL = {"up"}                     # Prometheus's own series per target
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}
DS = {"type": "prometheus", "uid": "${datasource}"}

# What issue 20 asks the dashboard and the rules to cover (metric families).
DASHBOARD_MUST = ["dedupd_rpc_requests_total", "dedupd_rpc_duration_seconds",
                  "dedupd_filter_degraded_total", "dedupd_ingest_messages_total",
                  "dedupd_ingest_lag_seconds", "dedupd_ingest_consumer_lag",
                  "dedupd_ingest_dead_lettered_total", "dedupd_history_pending_compaction_bytes",
                  "dedupd_history_live_sst_bytes", "dedupd_history_free_bytes", "dedupd_ready",
                  "dedupd_cluster_forwarded_total", "dedupd_cluster_peer_up"]
RULES_MUST = ["dedupd_ingest_lag_seconds", "dedupd_filter_degraded_total", "dedupd_ready",
              "dedupd_history_writable", "dedupd_history_write_errors_total",
              "dedupd_history_corrupt_values_total", "dedupd_history_wal_failed",
              "dedupd_history_free_bytes", "dedupd_ingest_kafka_errors_total",
              "dedupd_cluster_peer_up"]


# ---- a PromQL scanner: enough to find selectors, matchers and grouping labels

TOKEN = re.compile(r"""
  (?P<ws>\s+)
| (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
| (?P<var>\$\{[^}]+\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]+\]\])
| (?P<dur>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_]))
| (?P<num>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
| (?P<id>[A-Za-z_:][A-Za-z0-9_:]*)
| (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}\[\]:@])
""", re.X)
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = GROUPING | {"bool", "and", "or", "unless", "offset", "inf", "nan", "atan2"}
AGGREGATORS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
               "bottomk", "topk", "quantile"}


def tokens(expr):
    out, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError("cannot read %r at %r" % (expr, expr[pos:pos + 20]))
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def unquote(s):
    if s[0] == "`":
        return s[1:-1]
    return re.sub(r"\\(.)", r"\1", s[1:-1])


def var_name(t):
    return t.strip("${}[]").split(":")[0]


def scan(expr):
    """(selectors, grouping labels, variables) of a PromQL expression; a
    selector is {name, matchers: [(label, op, value)], funcs: the calls
    around it, innermost last, range: bool}."""
    toks = tokens(expr)
    sels, groups, variables = [], set(), set()
    stack, pending_agg = [], None
    i = 0

    def matchers(j):
        """Matchers from the '{' at toks[j]; returns (list, index after '}')."""
        ms = []
        j += 1
        while toks[j][1] != "}":
            if toks[j][1] == ",":
                j += 1
                continue
            (k1, label), (k2, op), (k3, val) = toks[j], toks[j + 1], toks[j + 2]
            if k1 != "id" or op not in ("=", "!=", "=~", "!~") or k3 != "str":
                raise ValueError("bad matcher in %r" % expr)
            ms.append((label, op, unquote(val)))
            j += 3
        return ms, j + 1

    while i < len(toks):
        kind, t = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind == "var":
            variables.add(var_name(t))
        elif kind == "str":
            for v in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", t):
                if not v.isdigit():
                    variables.add(v)
        if kind == "id" and t in GROUPING and nxt == "(":
            j = i + 2
            while toks[j][1] != ")":
                if toks[j][0] == "id":
                    groups.add(toks[j][1])
                j += 1
            i = j + 1
            continue
        if kind == "id" and t in AGGREGATORS and nxt in ("by", "without"):
            pending_agg = t
            i += 1
            continue
        if kind == "id" and t not in KEYWORDS and nxt == "(":
            stack.append(t)
            i += 2
            continue
        if kind == "id" and t not in KEYWORDS or t == "{":
            sel = {"name": t if t != "{" else None, "matchers": [], "funcs": list(stack),
                   "range": False}
            j = i + 1 if t != "{" else i
            if j < len(toks) and toks[j][1] == "{":
                sel["matchers"], j = matchers(j)
            if sel["name"] is None:
                names = [v for (lab, op, v) in sel["matchers"] if lab == "__name__" and op == "="]
                if not names:
                    raise ValueError("a selector without a metric name in %r" % expr)
                sel["name"] = names[0]
            if j < len(toks) and toks[j][1] == "[":
                sel["range"] = True
            sels.append(sel)
            i = j
            continue
        if t == "(":
            stack.append(pending_agg)
            pending_agg = None
        elif t == ")":
            stack.pop()
        i += 1
    return sels, groups, variables


# ---- checks against one scrape ------------------------------------------------

class Metrics:
    def __init__(self, text):
        try:
            self.types, samples = parse(text)
        except ValueError as e:
            fail("/metrics is not valid Prometheus text: %s" % e)
        self.series = {}
        for (name, labels), _ in samples.items():
            self.series.setdefault(name, []).append(dict(labels))

    def family(self, name):
        """(family, type) of the series NAME."""
        if name in self.types:
            return name, self.types[name]
        for suf in ("_bucket", "_sum", "_count"):
            base = name[: -len(suf)]
            if name.endswith(suf) and self.types.get(base) in ("histogram", "summary"):
                return base, self.types[base]
        return None, None

    def labels(self, name):
        return set(k for ls in self.series.get(name, []) for k in ls)


def check_expr(m, expr, where, dashboard, panel=True):
    """Check one PromQL expression against the scrape M; returns the metric
    families it names and the Grafana variables it uses. DASHBOARD: it may
    use variables and its job/instance matchers must be the variables';
    PANEL: every selector must have both."""
    try:
        sels, groups, variables = scan(expr)
    except (ValueError, IndexError) as e:
        fail("%s: %s" % (where, e))
    if not dashboard and variables:
        fail("%s: Grafana variables %s in an alert rule" % (where, sorted(variables)))
    families = set()
    expr_labels = set(TARGET_LABELS)
    for s in sels:
        name = s["name"]
        if name in EXTERNAL:
            continue
        fam, typ = m.family(name)
        if fam is None:
            fail("%s: metric %s is not in /metrics" % (where, name))
        if typ == "histogram" and name == fam:
            fail("%s: %s is a histogram: use %s_bucket, _sum or _count" % (where, name, name))
        if not m.series.get(name):
            fail("%s: /metrics has no sample of %s" % (where, name))
        families.add(fam)
        have = m.labels(name)
        expr_labels |= have
        if name.endswith("_bucket"):
            expr_labels.add("le")
            if "histogram_quantile" not in s["funcs"]:
                fail("%s: %s outside histogram_quantile" % (where, name))
            if "le" not in groups:
                fail("%s: %s aggregated without keeping le" % (where, name))
        inner = next((f for f in reversed(s["funcs"]) if f), None)
        if s["range"] and inner in ("rate", "irate", "increase") and typ not in ("counter",
                                                                                   "histogram"):
            fail("%s: %s(%s) over a %s" % (where, inner, name, typ))
        if s["range"] and inner in ("deriv", "predict_linear", "delta", "idelta") \
                and typ != "gauge":
            fail("%s: %s(%s) over a %s" % (where, inner, name, typ))
        for label, op, value in s["matchers"]:
            if label == "__name__":
                continue
            if label in TARGET_LABELS:
                if dashboard and (op, value) != ("=~", "$" + label):
                    fail("%s: %s{%s%s%r}: the dashboard selects %s by its variable" % (
                        where, name, label, op, value, label))
                continue
            if label not in have:
                fail("%s: %s has no label %s (it has %s)" % (where, name, label, sorted(have)))
            if op == "=" and "$" not in value and value not in {
                    ls.get(label) for ls in m.series[name]}:
                fail("%s: no sample %s{%s=%r} in /metrics" % (where, name, label, value))
        if dashboard and panel:
            got = {lab for lab, op, v in s["matchers"]}
            if not TARGET_LABELS <= got:
                fail("%s: %s is not filtered by the job and instance variables" % (where, name))
    for g in groups:
        if g not in expr_labels:
            fail("%s: grouping by %s, which none of its metrics has" % (where, g))
    return families, variables


def label_values(m, q, where):
    """A Grafana variable query label_values([expr,] label)."""
    mm = re.fullmatch(r"\s*label_values\((?:(.*),)?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q)
    if not mm:
        fail("%s: not a label_values() query: %r" % (where, q))
    families, variables = set(), set()
    if mm.group(1):
        families, variables = check_expr(m, mm.group(1), where, dashboard=True, panel=False)
    label = mm.group(2)
    if label not in TARGET_LABELS and not any(label in m.labels(f) for f in families):
        fail("%s: label_values of %s, which its metric does not have" % (where, label))
    return families, variables


# ---- the dashboard's form ------------------------------------------------------

def all_panels(dash):
    for p in dash["panels"]:
        yield p
        for q in p.get("panels", []):
            yield q


def check_dashboard_form(dash):
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        if key not in dash:
            fail("dashboard: no %r" % key)
    ids = [p.get("id") for p in all_panels(dash)]
    if None in ids or len(set(ids)) != len(ids):
        fail("dashboard: panel ids missing or repeated: %s" % ids)
    tvars = {v["name"]: v for v in dash["templating"]["list"]}
    ds = tvars.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail("dashboard: no Prometheus data source variable 'datasource'")
    for v in ("job", "instance"):
        if v not in tvars or tvars[v].get("datasource") != DS:
            fail("dashboard: no variable %s on the data source variable" % v)
    boxes = []
    for p in all_panels(dash):
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "xywh") or g["x"] < 0 or g["w"] < 1 \
                or g["x"] + g["w"] > 24:
            fail("dashboard: panel %s has a bad gridPos %s" % (p["id"], g))
        for q, h in boxes:
            if g["x"] < h["x"] + h["w"] and h["x"] < g["x"] + g["w"] and \
                    g["y"] < h["y"] + h["h"] and h["y"] < g["y"] + g["h"]:
                fail("dashboard: panels %s and %s overlap" % (q, p["id"]))
        boxes.append((p["id"], g))
        if p["type"] == "row":
            continue
        if not p.get("title"):
            fail("dashboard: panel %s has no title" % p["id"])
        if p.get("datasource") != DS:
            fail("dashboard: panel %r is not on ${datasource}: %s" % (p["title"], p.get("datasource")))
        targets = p.get("targets") or []
        refs = [t.get("refId") for t in targets]
        if not targets or None in refs or len(set(refs)) != len(refs):
            fail("dashboard: panel %r: no targets, or refIds missing or repeated" % p["title"])
        for t in targets:
            if not t.get("expr") or t.get("datasource", DS) != DS:
                fail("dashboard: panel %r target %s: no expr or another data source" % (
                    p["title"], t.get("refId")))
    return tvars


def grafana_expr(expr):
    """EXPR with the dashboard's variables as Grafana sends them (All)."""
    return (expr.replace("$__rate_interval", "15s").replace('"$job"', '"dedupd"')
            .replace('"$instance"', '".*"'))


# ---- Prometheus ---------------------------------------------------------------

class Prometheus:
    def __init__(self, targets, rules):
        exe = shutil.which("prometheus") or "/usr/bin/prometheus"
        if not os.path.exists(exe):
            harness.skip("prometheus is not installed (Debian package prometheus)")
        d = harness.tmpdir("dedupd-prometheus-")
        self.port = harness.free_port()
        conf = os.path.join(d, "prometheus.yml")
        with open(conf, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [rules],
                "scrape_configs": [{"job_name": "dedupd",
                                    "static_configs": [{"targets": targets}]}],
            }, f)
        self.proc = harness.Proc([exe, "--config.file=" + conf,
                                  "--storage.tsdb.path=" + os.path.join(d, "data"),
                                  "--web.listen-address=127.0.0.1:%d" % self.port],
                                 "prometheus")
        # It listens before its storage is open and answers 503 until then.
        harness.wait_until("prometheus ready", lambda: self.ready(), timeout=60, every=0.2)

    def ready(self):
        if not self.proc.alive():
            fail("prometheus exited:\n" + self.proc.tail())
        return harness.http_get(self.port, "/-/ready")[0] == 200

    def api(self, path, **params):
        q = "?" + urllib.parse.urlencode(params) if params else ""
        st, body = harness.http_get(self.port, "/api/v1/" + path + q, timeout=20)
        try:
            doc = json.loads(body)
        except ValueError:
            fail("prometheus %s: %d %r" % (path, st, body[:500]))
        return st, doc


PROCESS_FAMILIES = {"process_resident_memory_bytes": "gauge", "process_virtual_memory_bytes": "gauge",
                    "process_cpu_seconds_total": "counter", "process_open_fds": "gauge",
                    "process_max_fds": "gauge", "process_start_time_seconds": "gauge"}


def check_exposition(admin):
    """promtool check metrics on ADMIN's /metrics (lint problems and parse
    errors both fail), no gauge below zero, the process_* families."""
    st, body = harness.http_get(admin, "/metrics")
    if st != 200:
        fail("/metrics on %d: %d" % (admin, st))
    promtool = shutil.which("promtool")
    if not promtool:
        harness.skip("promtool (package prometheus) is not installed")
    r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
        fail("promtool check metrics on node :%d: exit %d\n%s%s" % (admin, r.returncode, r.stdout,
                                                                   r.stderr))
    m = Metrics(body)
    for fam, typ in m.types.items():
        if typ != "gauge":
            continue
        for line in re.findall(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(fam), body, re.M):
            if line not in ("NaN",) and float(line) < 0:
                fail("%s has a negative value %s (a sentinel for 'unknown'?)" % (fam, line))
    for fam, typ in PROCESS_FAMILIES.items():
        if m.types.get(fam) != typ:
            fail("/metrics has no %s %s" % (typ, fam))
    val = {f: float(re.search(r"^%s (\S+)$" % f, body, re.M).group(1)) for f in PROCESS_FAMILIES}
    if not (1 << 20 < val["process_resident_memory_bytes"] < val["process_virtual_memory_bytes"]):
        fail("process memory implausible: %r" % val)
    if not (0 < val["process_open_fds"] < val["process_max_fds"]):
        fail("process fds implausible: %r" % val)
    if not (time.time() - 3600 < val["process_start_time_seconds"] <= time.time()):
        fail("process_start_time_seconds implausible: %r" % val)
    if not val["process_cpu_seconds_total"] > 0:
        fail("process_cpu_seconds_total implausible: %r" % val)


def readme_families():
    """Family names in the README's metrics table, braces expanded."""
    with open(os.path.join(harness.SOURCE_ROOT, "README.md")) as f:
        text = f.read()
    sec = text.split("\n### Metrics\n", 1)[1].split("\n### ", 1)[0]
    names = set()
    for line in sec.splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        for tok in re.findall(r"`([a-z_{},]+)`", first):
            # {a,b} is a choice of names; {label} (no comma) a label list
            tok = re.sub(r"\{[a-z_]+\}$", "", tok)
            stack = [tok]
            while stack:
                t = stack.pop()
                mm = re.search(r"\{([a-z_,]+)\}", t)
                if mm:
                    stack += [t[:mm.start()] + alt + t[mm.end():] for alt in mm.group(1).split(",")]
                else:
                    names.add(t)
    return names


def check_readme_table(scrapes):
    table = readme_families()
    exported = set()
    for m in scrapes:
        exported |= set(m.types)
    missing = sorted(exported - table)
    if missing:
        fail("README's metrics table has no row for %s" % missing)
    src = ""
    for d in ("src",):
        for fn in os.listdir(os.path.join(harness.SOURCE_ROOT, d)):
            if fn.endswith(".c"):
                with open(os.path.join(harness.SOURCE_ROOT, d, fn)) as f:
                    src += f.read()
    unknown = sorted(n for n in table - exported if '"%s"' % n not in src)
    if unknown:
        fail("README's metrics table names families the code does not write: %s" % unknown)
    log("README metrics table: all %d exported families have a row; its %d names are all written"
        " by the code" % (len(exported), len(table)))


def main():
    pb, pbg, grpc = python_stubs()
    with open(DASHBOARD) as f:
        try:
            dash = json.load(f)
        except ValueError as e:
            fail("%s is not JSON: %s" % (DASHBOARD, e))
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    tvars = check_dashboard_form(dash)
    log("dashboard: %d panels, unique ids, on ${datasource}, inside the grid" %
        len(list(all_panels(dash))))

    # -- a cluster of 2 shards x 1 replica with some traffic
    broker = harness.DevBroker(topics=("plays:4", "plays-dead:1"))
    redis = harness.Redis()
    ports = [harness.free_port() for _ in range(2)]
    admins = [harness.free_port() for _ in range(2)]
    nodes = []
    for shard in range(2):
        o = il.ingest_overrides(broker, group="dd-dashboards", **{
            "log.level": "info",
            "ingest.dead_letter_topic": "plays-dead",
            "kafka.statistics.interval.ms": "500",
            "window.flush_ms": "100",
            "recent.redis": redis.addr,
            "rpc.listen": "127.0.0.1:%d" % ports[shard],
            "admin.listen": "127.0.0.1:%d" % admins[shard],
            "cluster.shards": "2",
            "cluster.shard": str(shard),
            "cluster.replica": "0",
            "cluster.nodes": ";".join("127.0.0.1:%d" % p for p in ports),
            "cluster.health_interval_ms": "200",
            "trace.users": "user-1",
        })
        nodes.append(harness.Dedupd(o, name="dd-%d" % shard))
    harness.wait_until("both nodes ready", lambda: all(
        harness.http_get(a, "/readyz")[0] == 200 for a in admins), timeout=120)
    ch = grpc.insecure_channel("127.0.0.1:%d" % ports[0])
    stub = pbg.DedupStub(ch)
    users = ["user-%d" % i for i in range(40)]
    il.produce(broker, [(u, "played-%s" % u, None, None) for u in users],
               partitioner="murmur2_random")
    il.produce(broker, [("bad", "not json")], fmt="raw", partitioner="murmur2_random")
    stub.RecordDelivery(pb.RecordDeliveryRequest(user_id=users[0], item_ids=["d1"]), timeout=10)
    # a forget marker through the producer (cluster nodes produce one per ForgetUser)
    stub.ForgetUser(pb.ForgetUserRequest(user_id="user-39"), timeout=10)

    def traffic():
        for u in users:
            stub.Filter(pb.FilterRequest(user_id=u, candidate_ids=["played-%s" % u, "x", "x"]),
                        timeout=10)

    def scrape():
        st, body = harness.http_get(admins[0], "/metrics")
        return Metrics(body) if st == 200 else None

    def settled():
        traffic()
        m = scrape()
        if m is None:
            return None
        fwd = [ls for ls in m.series.get("dedupd_cluster_forwarded_total", [])]
        up = m.series.get("dedupd_cluster_peer_up", [])
        bad = harness.http_get(admins[0], "/metrics")[1] + harness.http_get(admins[1], "/metrics")[1]
        return m if (fwd and up and m.series.get("dedupd_ingest_consumer_lag") and
                     re.search(r'^dedupd_ingest_dead_lettered_total [1-9]', bad, re.M)) else None
    m = None
    deadline = time.time() + 90
    while m is None:
        if time.time() > deadline:
            fail("the nodes did not show forwarding, peers, consumer lag and a dead-lettered "
                 "message within 90 s")
        m = settled()
        time.sleep(0.5)
    log("cluster up with traffic: %d metric families on node 0" % len(m.types))

    # -- 4. promtool check metrics, no sentinel values, process_* families
    for a in admins:
        check_exposition(a)
    log("promtool check metrics: clean on both nodes; no negative gauges; process_* present")

    # -- 5. the README's metrics table against what the nodes export
    check_readme_table([Metrics(harness.http_get(a, "/metrics")[1]) for a in admins])

    # -- 1. every name, label and value the dashboard and the rules use
    dash_families, used_vars = set(), set()
    for p in all_panels(dash):
        for t in p.get("targets", []):
            f, v = check_expr(m, t["expr"], "panel %r %s" % (p["title"], t["refId"]), True)
            dash_families |= f
            used_vars |= v
    for name, v in tvars.items():
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            f, vv = label_values(m, q, "variable %s" % name)
            dash_families |= f
            used_vars |= vv
    undefined = used_vars - set(tvars) - GRAFANA_BUILTINS
    if undefined:
        fail("dashboard: variables used but not defined: %s" % sorted(undefined))
    missing = set(DASHBOARD_MUST) - dash_families
    if missing:
        fail("dashboard does not show %s" % sorted(missing))
    rule_families = set()
    rule_list = [r for g in rules["groups"] for r in g["rules"]]
    for r in rule_list:
        f, _ = check_expr(m, str(r["expr"]), "rule %s" % r.get("alert", r.get("record")), False)
        rule_families |= f
    missing = set(RULES_MUST) - rule_families
    if missing:
        fail("no alert on %s" % sorted(missing))
    log("every metric, label and value of %d dashboard and %d rule expressions is in /metrics"
        " (%d families)" % (sum(len(p.get("targets", [])) for p in all_panels(dash)),
                            len(rule_list), len(dash_families | rule_families)))

    # -- 3. a real Prometheus: rules evaluate, every panel query answers
    prom = Prometheus(["127.0.0.1:%d" % a for a in admins], RULES)

    def scraped():
        traffic()
        st, doc = prom.api("targets")
        active = doc.get("data", {}).get("activeTargets", []) if st == 200 else []
        if len(active) != 2 or any(t["health"] != "up" for t in active):
            return False
        st, doc = prom.api("rules")
        groups = doc.get("data", {}).get("groups", []) if st == 200 else []
        rs = [r for g in groups for r in g["rules"]]
        return len(rs) == len(rule_list) and not any(
            r.get("lastEvaluation", "0001").startswith("0001") for r in rs)
    harness.wait_until("prometheus scraping both nodes and evaluating the rules", scraped,
                       timeout=60, every=1)
    time.sleep(3)  # a few more scrapes for the rates' windows
    traffic()
    time.sleep(2)
    st, doc = prom.api("rules")
    for g in doc["data"]["groups"]:
        for r in g["rules"]:
            if r.get("health") != "ok" or r.get("lastError"):
                fail("rule %s: health %s, error %r" % (r["name"], r.get("health"),
                                                       r.get("lastError")))
    log("prometheus: %d rules evaluate without error" % len(rule_list))
    answered = 0
    for p in all_panels(dash):
        for t in p.get("targets", []):
            q = grafana_expr(t["expr"])
            st, res = prom.api("query", query=q)
            if st != 200 or res.get("status") != "success":
                fail("panel %r %s: prometheus refused %r: %s" % (p["title"], t["refId"], q,
                                                                 res.get("error")))
            filters = re.search(r"(==|!=|>=|<=|[<>])\s*[-0-9]", t["expr"])
            if not res["data"]["result"] and not filters:
                fail("panel %r %s: no series for %r" % (p["title"], t["refId"], q))
            answered += 1
    log("prometheus answered all %d dashboard queries" % answered)
    ch.close()
    for n in nodes:
        n.stop()
    log("PASS")


if __name__ == "__main__":
    main()
