# SPDX-License-Identifier: Apache-2.0
"""Offline checks of deploy/ (no Docker engine, no cluster here).

What can be checked without running the images is checked against the
real build:

- Dockerfile: every COPY source exists; the runtime stage's package list
  (deploy/packages/runtime.txt) names real Debian packages whose dependency
  closure provides every shared library that the installed binaries
  (dedupd and the tools meson installs) need; the build stage installs
  deploy/packages/build.txt, the list CI installs.
- The image's ENTRYPOINT + compose's and the StatefulSet's arguments +
  the ConfigMap's dedupd.conf are accepted by the built dedupd (-t): for
  the StatefulSet, once per pod, each run with the host name that pod
  gets (dedupd-K, in a UTS namespace of its own: unshare --uts, root or a
  user namespace), since cluster.shard = auto takes the pod's place from
  it; a pod one past the map (dedupd-<replicas>) must be refused. Where no
  UTS namespace can be made (never in CI, which fails instead), each pod's
  place is passed as -o cluster.shard/-o cluster.replica by the same
  formula, and the log says that `auto` itself was not exercised.
- Kubernetes manifests and compose.yaml parse, with the kinds, probes,
  ports and volume claim the issue asks for.
- The cluster in the manifests is consistent: the ConfigMap's effective
  configuration has cluster.shard = cluster.replica = auto, the
  StatefulSet's replicas equals shards x replicas in cluster.nodes, every
  address in cluster.nodes is the DNS name of the pod that `auto` puts at
  that place (<statefulset>-K.<headless service>.<ns>.svc.cluster.local
  on the gRPC port, K = replica x shards + shard), the headless service
  selects the pods and publishes not-ready ones, and both allow lists name
  the pods' own identity (<service>.<ns>.svc, the Service name the pods'
  certificate carries, or a pod DNS name or wildcard), which forwarded
  calls present.
- gRPC is mutual TLS in both: the effective configuration (dedupd -p) has
  rpc.tls_cert, rpc.tls_key and rpc.tls_client_ca in the directory the
  Secret dedupd-tls (k8s) or ./certs (compose) is mounted at, under the
  Secret's key names, allow lists that name identities, and no
  rpc.allow_insecure; the image's health check presents those files.
- deploy/docker/make-dev-certs.sh makes certificates that a real dedupd
  (on loopback, with compose's allow lists) and dedupctl accept: health
  answers (and the liveness service the pods' probe asks), the "feed"
  client may write, "recall" may not. That dedupd's RocksDB LOG holds the
  header RocksDB writes at open and nothing after it, as README says.
- Kubernetes probes: readiness on /readyz; liveness (and startup) through
  gRPC health, service "liveness", over the pods' TLS. A PodMonitor
  scrapes the pods' admin port; deploy/k8s/prometheusrule.yaml holds
  deploy/prometheus/dedupd-rules.yml's groups as they are (and is what
  make-prometheusrule.py makes of it).
- Package lists: scripts/run-local.sh installs deploy/packages/build.txt
  and run-local.txt only, none of the test suite's test.txt (no JDK,
  Prometheus, clang); the three lists are disjoint; scripts/test.sh
  installs all of them.
- Every kcat example that produces (compose.yaml, proto/dedup.proto,
  scripts/run-local.sh, README, docs) names cluster.partitioner's default
  (conf/dedupd.conf): kcat's own default partitioner puts a user in
  another partition.

Exit 0 pass, 1 fail, 77 skip (never in CI).
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import harness  # noqa: E402
from harness import fail, log  # noqa: E402

ROOT = harness.SOURCE_ROOT
DEPLOY = os.path.join(ROOT, "deploy")


def read(*p):
    with open(os.path.join(ROOT, *p)) as f:
        return f.read()


def package_list(path):
    out = []
    for line in read(path).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def dpkg_installed():
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Priority}\t${Depends}\t${Pre-Depends}\t${Provides}\n"],
                       capture_output=True, text=True, check=True)
    pkgs = {}
    provides = {}
    for line in r.stdout.splitlines():
        name, prio, dep, predep, prov = (line.split("\t") + [""] * 5)[:5]
        pkgs[name] = (prio, dep + ("," + predep if predep else ""))
        for pv in prov.split(","):
            pv = pv.strip().split(" ")[0]
            if pv:
                provides.setdefault(pv, []).append(name)
    return pkgs, provides


def closure(roots, pkgs, provides):
    seen = set()
    todo = list(roots)
    while todo:
        p = todo.pop().split(":")[0]
        if p in seen:
            continue
        seen.add(p)
        if p not in pkgs:
            continue
        for alt in pkgs[p][1].split(","):
            # "a (>= 1) | b": any alternative installed will do; take those present.
            for choice in alt.split("|"):
                name = choice.strip().split(" ")[0].split(":")[0]
                if not name:
                    continue
                for real in [name] + provides.get(name, []):
                    if real in pkgs and real not in seen:
                        todo.append(real)
    return seen


def spellings(path):
    """PATH, its real path, and their /lib <-> /usr/lib twins (Debian 12 is
    merged-/usr; dpkg knows one spelling)."""
    out = []
    for p in (path, os.path.realpath(path)):
        out.append(p)
        if p.startswith("/usr/lib/"):
            out.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            out.append("/usr" + p)
    return out


def needed_packages(binaries):
    """{binary: set of Debian packages providing the shared libraries it loads}."""
    libs = {}
    for b in binaries:
        r = subprocess.run(["ldd", b], capture_output=True, text=True, check=True)
        libs[b] = [m.group(1) for m in re.finditer(r"=>\s+(/\S+)", r.stdout)]
    paths = sorted({sp for ls in libs.values() for lib in ls for sp in spellings(lib)})
    # One dpkg -S for everything: it reads the whole file database per call.
    r = subprocess.run(["dpkg", "-S"] + paths, capture_output=True, text=True)
    owner = {}
    for line in r.stdout.splitlines():
        pkgs, _, path = line.partition(": ")
        owner[path.strip()] = pkgs.split(",")[0].split(":")[0].strip()
    out = {}
    for b, ls in libs.items():
        out[b] = set()
        for lib in ls:
            pk = next((owner[sp] for sp in spellings(lib) if sp in owner), None)
            if pk is None:
                fail("%s: no Debian package owns %s" % (b, lib))
            out[b].add(pk)
    return out


def installed_binaries():
    """The executables `meson install` puts in the image, from meson's introspection."""
    r = subprocess.run(["meson", "introspect", "--installed", harness.BUILD_ROOT],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("meson introspect --installed: %s" % r.stderr)
    # The image is built with -Dclients=disabled (check_docker): the client
    # libraries and their tools (clients/) are for the callers' builds.
    clients = os.path.join(os.path.realpath(harness.BUILD_ROOT), "clients") + os.sep
    bins = [src for src, dst in json.loads(r.stdout).items()
            if "/bin/" in dst and not os.path.realpath(src).startswith(clients)]
    for b in bins:
        if not os.access(b, os.X_OK):
            fail("%s is installed by meson but not built (run ninja first)" % b)
    return bins


def check_docker():
    df = read("deploy", "docker", "Dockerfile")
    for m in re.finditer(r"^COPY\s+(?!--from)(\S+)\s+\S+", df, re.M):
        if not os.path.exists(os.path.join(ROOT, m.group(1))):
            fail("Dockerfile: COPY source %s does not exist" % m.group(1))
    if "deploy/packages/build.txt" not in df or "deploy/packages/runtime.txt" not in df:
        fail("Dockerfile does not install from deploy/packages/{build,runtime}.txt")
    if "build.txt" not in read("scripts", "install-deps.sh"):
        fail("scripts/install-deps.sh (what CI runs) no longer reads deploy/packages/build.txt")
    if "-Dclients=disabled" not in df:
        fail("Dockerfile: the daemon's image is built without the client libraries "
             "(-Dclients=disabled), which need packages runtime.txt does not list")
    if not re.search(r"^USER\s+(?!0|root)", df, re.M):
        fail("Dockerfile: the runtime stage does not switch to a non-root USER")
    if not re.search(r"^VOLUME\s", df, re.M):
        fail("Dockerfile: no VOLUME for the data")

    pkgs, provides = dpkg_installed()
    runtime = package_list("deploy/packages/runtime.txt")
    for p in runtime:
        if subprocess.run(["apt-cache", "show", p], capture_output=True).returncode != 0 and p not in pkgs:
            fail("runtime.txt: %s is not a Debian package here" % p)
    base = {p for p, (prio, _) in pkgs.items() if prio == "required"}
    have = closure(set(runtime) | base, pkgs, provides)
    bins = installed_binaries()
    if not any(b.endswith("/dedupd") for b in bins):
        fail("meson does not install dedupd: %r" % bins)
    needs = needed_packages(bins)
    for b in bins:
        missing = needs[b] - have
        if missing:
            fail("%s needs %s, which runtime.txt does not bring in" % (b, " ".join(sorted(missing))))
    log("docker: COPY sources exist; runtime.txt covers the libraries of",
        ", ".join(os.path.basename(b) for b in bins))
    m = re.search(r"^ENTRYPOINT\s+(\[.*?\])\s*$", df.replace("\\\n", " "), re.M)
    if not m:
        fail("Dockerfile: no exec-form ENTRYPOINT")
    return json.loads(m.group(1))


_uts = None


def uts_prefix():
    """The argv prefix that runs a command as `PREFIX + [hostname, cmd...]`
    in a UTS namespace of its own with that host name, or None where this
    machine cannot make one."""
    global _uts
    if _uts is None:
        unshare = shutil.which("unshare")
        setname = ("import os, socket, sys; socket.sethostname(sys.argv[1]); "
                   "os.execv(sys.argv[2], sys.argv[2:])")
        _uts = []
        if unshare:
            userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
            prefix = [unshare, "--uts"] + userns + [sys.executable, "-c", setname]
            r = subprocess.run(prefix + ["dedupd-check-7", "/bin/sh", "-c", "uname -n"],
                               capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() == "dedupd-check-7":
                _uts = prefix
            else:
                log("unshare --uts: %s" % (r.stderr.strip() or r.stdout.strip()))
    return _uts or None


def run_dedupd(entrypoint, extra_args, conf_text, flag, hostname=None):
    """The built dedupd with the image's ENTRYPOINT arguments (its -c
    pointing at CONF_TEXT), EXTRA_ARGS and FLAG (-t or -p); with HOSTNAME,
    as a process whose host name that is (uts_prefix must be available)."""
    d = harness.tmpdir("dedupd-deploy-")
    conf = os.path.join(d, "dedupd.conf")
    # The pods' forget key (the Secret dedupd-forget) is read by -t: a
    # throwaway key stands in for it here.
    conf_text = conf_text.replace("/etc/dedupd-forget/key", harness.forget_key_file())
    with open(conf, "w") as f:
        f.write(conf_text)
    argv = [harness.build_path("src", "dedupd")] + \
        [conf if a == "/etc/dedupd/dedupd.conf" else a for a in entrypoint[1:]]
    argv = argv + extra_args + [flag]
    if hostname is not None:
        argv = uts_prefix() + [hostname] + argv
    return subprocess.run(argv, capture_output=True, text=True)


def check_config(entrypoint, extra_args, conf_text, what, hostname=None):
    r = run_dedupd(entrypoint, extra_args, conf_text, "-t", hostname)
    if r.returncode != 0 or "configuration ok" not in r.stdout:
        fail("%s: dedupd rejects its configuration: %s%s" % (what, r.stdout, r.stderr))
    log("%s: dedupd -t accepts it" % what)


TLS_FILES = {"rpc.tls_cert": "tls.crt", "rpc.tls_key": "tls.key", "rpc.tls_client_ca": "ca.crt"}


def effective(entrypoint, extra_args, conf_text, hostname=None):
    """Every key of what dedupd -p prints for this configuration, as
    {"section.key": value} (quotes removed)."""
    r = run_dedupd(entrypoint, extra_args, conf_text, "-p", hostname)
    if r.returncode != 0:
        fail("dedupd -p: %s" % r.stderr)
    out, section = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif " = " in line and section:
            k, v = line.split(" = ", 1)
            out[section + "." + k] = v[1:-1] if v.startswith('"') else v
    return out


def effective_rpc(entrypoint, extra_args, conf_text, hostname=None):
    """The [rpc] keys of what dedupd -p prints for this configuration."""
    return {k: v for k, v in effective(entrypoint, extra_args, conf_text, hostname).items()
            if k.startswith("rpc.")}


def check_tls(rpc, tls_dir, what):
    """RPC (effective_rpc) is mutual TLS from files in TLS_DIR named as a
    Kubernetes TLS Secret names them, with identity allow lists."""
    for key, name in TLS_FILES.items():
        if rpc.get(key) != tls_dir + "/" + name:
            fail("%s: %s is %r, not %s/%s" % (what, key, rpc.get(key), tls_dir, name))
    if rpc.get("rpc.allow_insecure") != "false":
        fail("%s: rpc.allow_insecure is set" % what)
    for key in ("rpc.allow_read", "rpc.allow_write"):
        if rpc.get(key, "*").strip() in ("*", ""):
            fail("%s: %s does not name client identities (%r)" % (what, key, rpc.get(key)))
    log("%s: gRPC is mutual TLS from %s; allow_read %r, allow_write %r"
        % (what, tls_dir, rpc["rpc.allow_read"], rpc["rpc.allow_write"]))


def check_dev_certs(compose_args):
    """make-dev-certs.sh's output works with a real dedupd and dedupctl."""
    script = os.path.join(DEPLOY, "docker", "make-dev-certs.sh")
    if not os.access(script, os.X_OK):
        fail("deploy/docker/make-dev-certs.sh is missing or not executable")
    d = os.path.join(harness.tmpdir("dedupd-devcerts-"), "certs")
    r = subprocess.run([script, d], capture_output=True, text=True)
    if r.returncode != 0:
        fail("make-dev-certs.sh: %s%s" % (r.stdout, r.stderr))
    allow = {}
    for i, a in enumerate(compose_args):
        if i > 0 and compose_args[i - 1] == "-o" and a.startswith("rpc.allow_"):
            k, v = a.split("=", 1)
            allow[k] = v
    dd = harness.Dedupd(dict(allow, **{
        "ingest.enabled": "false",
        "rpc.tls_cert": os.path.join(d, "tls.crt"), "rpc.tls_key": os.path.join(d, "tls.key"),
        "rpc.tls_client_ca": os.path.join(d, "ca.crt")}), name="dedupd-devcerts")
    ctl = harness.build_path("tools", "dedupctl")

    def run(client, *args):
        argv = [ctl, "-a", "localhost:%d" % dd.rpc_port, "--tls-ca", os.path.join(d, "ca.crt"),
                "--tls-cert", os.path.join(d, client + ".crt"),
                "--tls-key", os.path.join(d, client + ".key")] + list(args)
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    r = run("tls", "health")
    if r.returncode != 0 or r.stdout.strip() != "SERVING":
        fail("dev certs: health with the server's own certificate: %s%s" % (r.stdout, r.stderr))
    r = run("tls", "health", "liveness")
    if r.returncode != 0 or r.stdout.strip() != "SERVING":
        fail("dev certs: health of the liveness service: %s%s" % (r.stdout, r.stderr))
    r = run("recall", "play", "u1", "v1")
    if r.returncode != 5 or "PERMISSION_DENIED" not in r.stderr:  # 5: permission (dedupctl --help, exit codes)
        fail("dev certs: recall may write: %s%s" % (r.stdout, r.stderr))
    r = run("feed", "play", "u1", "v1")
    if r.returncode != 0 or "accepted 1" not in r.stdout:
        fail("dev certs: feed may not write: %s%s" % (r.stdout, r.stderr))
    dd.stop()
    log("make-dev-certs.sh: dedupd and dedupctl accept its certificates; feed writes, recall not")
    check_rocksdb_log(os.path.join(dd.dir, "db"))


def check_rocksdb_log(db):
    """README ("Full disk"): the LOG holds RocksDB's header from the open
    and nothing after it (a line from RocksDB's code carries its source
    file, [db/...cc:N])."""
    with open(os.path.join(db, "LOG"), errors="replace") as f:
        text = f.read()
    later = re.findall(r"^.*\[[\w/.-]+\.(?:cc|h):\d+\].*$", text, re.M)
    if later:
        fail("RocksDB LOG has lines past its header: %s" % later[:3])
    if "RocksDB version" not in text or len(text) > 64 * 1024:
        fail("RocksDB LOG is not the header README describes (%d bytes)" % len(text))
    if "header to `LOG` at each open" not in read("README.md"):
        fail("README no longer says what RocksDB's LOG holds")
    log("RocksDB LOG: the %d-byte header from the open, nothing after it" % len(text))


def check_packages():
    lists = {n: set(package_list("deploy/packages/%s.txt" % n))
             for n in ("build", "run-local", "test")}
    for a in lists:
        for b in lists:
            if a < b and lists[a] & lists[b]:
                fail("packages in both %s.txt and %s.txt: %s" % (a, b, sorted(lists[a] & lists[b])))
    run_local = read("scripts", "run-local.sh")
    m = re.search(r'^"\$here/scripts/install-deps.sh"(.*)$', run_local, re.M)
    given = re.findall(r"deploy/packages/([\w-]+)\.txt", m.group(1)) if m else None
    if given != ["build", "run-local"]:
        fail("scripts/run-local.sh installs %s, not build.txt and run-local.txt" % given)
    for p in ("default-jdk-headless", "prometheus", "clang-14", "maven"):
        if p in lists["build"] | lists["run-local"] or p not in lists["test"]:
            fail("%s: in run-local.sh's lists, or not in test.txt" % p)
    test_sh = read("scripts", "test.sh")
    if not re.search(r'^"\$here/scripts/install-deps.sh" \|\|', test_sh, re.M):
        fail("scripts/test.sh does not install every list (install-deps.sh without arguments)")
    deps = read("scripts", "install-deps.sh")
    for n in lists:
        if "deploy/packages/%s.txt" % n not in deps:
            fail("scripts/install-deps.sh's default does not include %s.txt" % n)
    pkgs, _ = dpkg_installed()
    missing = sorted(p for s in lists.values() for p in s if p not in pkgs)
    if missing:
        fail("listed packages not installed here: %s" % missing)
    log("packages: run-local.sh installs %d (build.txt, run-local.txt), the test command %d more"
        % (len(lists["build"] | lists["run-local"]), len(lists["test"])))


def check_kcat():
    conf = read("conf", "dedupd.conf")
    default = ini_value(conf, "cluster", "partitioner")
    if not default:
        fail("conf/dedupd.conf: no cluster.partitioner")
    files = ["deploy/docker/compose.yaml", "proto/dedup.proto", "scripts/run-local.sh", "README.md",
             "deploy/docker/README.md", "deploy/k8s/README.md", "scripts/migrate/README.md"]
    files += ["docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]
    n = 0
    for fn in files:
        if not os.path.exists(os.path.join(ROOT, fn)):
            continue
        text = read(fn).replace("\\\n//", " ").replace("\\\n", " ")
        for line in text.splitlines():
            if re.search(r"\bkcat\b.*\s-P\b", line):
                n += 1
                if "-X partitioner=%s" % default not in line:
                    fail("%s: a kcat example without -X partitioner=%s: %s"
                         % (fn, default, line.strip()))
    if n < 3:
        fail("found only %d kcat examples (compose.yaml, proto, run-local.sh)" % n)
    log("kcat: all %d producing examples use -X partitioner=%s" % (n, default))


def check_monitoring(docs, sts, c, yaml):
    for kind in ("PodMonitor", "PrometheusRule"):
        if kind not in docs:
            fail("k8s: no %s" % kind)
    pm = docs["PodMonitor"][0]["spec"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    sel = pm["selector"]["matchLabels"]
    if any(labels.get(k) != v for k, v in sel.items()):
        fail("k8s: the PodMonitor selects %s, not the pods (%s)" % (sel, labels))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    eps = pm["podMetricsEndpoints"]
    if not eps or eps[0].get("port") != "admin" or eps[0].get("path") != "/metrics" or \
            "admin" not in ports:
        fail("k8s: the PodMonitor does not scrape the admin port's /metrics: %s" % eps)
    rules = yaml.safe_load(read("deploy", "prometheus", "dedupd-rules.yml"))
    pr = docs["PrometheusRule"][0]
    if pr["spec"]["groups"] != rules["groups"]:
        fail("k8s: prometheusrule.yaml's groups differ from deploy/prometheus/dedupd-rules.yml")
    r = subprocess.run([sys.executable, os.path.join(DEPLOY, "prometheus", "make-prometheusrule.py"),
                        "--check"], capture_output=True, text=True)
    if r.returncode != 0:
        fail("k8s: %s" % r.stderr.strip())
    kust = read("deploy", "k8s", "kustomization.yaml")
    if "podmonitor.yaml" in kust or "prometheusrule.yaml" in kust:
        fail("kustomization.yaml lists the Operator's kinds, which clusters without its CRDs refuse")
    log("k8s: PodMonitor on the pods' admin port; PrometheusRule = dedupd-rules.yml (%d alerts)"
        % sum(len(g["rules"]) for g in rules["groups"]))


def ini_value(text, section, key):
    """KEY's last value in [SECTION] of the INI TEXT (quotes removed), or None."""
    value, current = None, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            current = line.strip("[]").strip()
        elif current == section and "=" in line and not line.startswith(("#", ";")):
            k, v = (x.strip() for x in line.split("=", 1))
            if k == key:
                value = v[1:-1] if v.startswith('"') and v.endswith('"') else v
    return value


def check_cluster(entry, sts, services, cm):
    """The StatefulSet's pods and the ConfigMap's [cluster] agree (see the
    module's docstring); returns pod 0's effective [rpc] keys."""
    name = sts["metadata"]["name"]
    replicas = sts["spec"]["replicas"]
    pod = sts["spec"]["template"]
    c = pod["spec"]["containers"][0]
    grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
    pod_labels = pod["metadata"].get("labels", {})

    def selects(svc):
        sel = svc["spec"].get("selector") or {}
        return bool(sel) and all(pod_labels.get(k) == v for k, v in sel.items())

    headless = next((v for v in services if v["metadata"]["name"] == sts["spec"]["serviceName"]),
                    None)
    if not headless or headless["spec"].get("clusterIP") != "None" or not selects(headless):
        fail("k8s: the StatefulSet's serviceName %r is not a headless Service selecting its pods"
             % sts["spec"]["serviceName"])
    if not headless["spec"].get("publishNotReadyAddresses"):
        fail("k8s: %s does not publish pods that are not ready: a peer catching up would not "
             "resolve" % headless["metadata"]["name"])
    front = [v["metadata"]["name"] for v in services
             if v["spec"].get("clusterIP") != "None" and selects(v)]
    if not front:
        fail("k8s: no ClusterIP Service over the pods for clients")
    sel = sts["spec"]["selector"]["matchLabels"]
    if any(pod_labels.get(k) != v for k, v in sel.items()):
        fail("k8s: the StatefulSet's selector %r does not match its pod labels %r"
             % (sel, pod_labels))

    def args_for(k):
        return [a.replace("$(POD_NAME)", "%s-%d" % (name, k)) for a in c.get("args", [])]

    # The map, as dedupd reads it (pod 0's effective configuration).
    uts = uts_prefix()
    if not uts:
        if harness.IN_CI:
            fail("k8s: cannot run dedupd with a pod's host name (no UTS namespace: unshare "
                 "--uts needs root or user namespaces), so cluster.shard = auto is not checked")
        log("k8s: NOT CHECKED: cluster.shard = auto itself (this machine cannot make a UTS "
            "namespace); each pod's place is passed with -o instead")
    if uts:
        eff = effective(entry, args_for(0), cm, hostname="%s-0" % name)
        auto = (eff.get("cluster.shard"), eff.get("cluster.replica"))
    else:
        eff = effective(entry, args_for(0) + ["-o", "cluster.shard=0", "-o", "cluster.replica=0"],
                        cm)
        auto = (ini_value(cm, "cluster", "shard"), ini_value(cm, "cluster", "replica"))
    if auto != ("auto", "auto"):
        fail("k8s: cluster.shard and cluster.replica are %r, not auto: every pod would take the "
             "same place" % (auto,))
    shards = int(eff["cluster.shards"])
    layout = [[a.strip() for a in part.split(",")] for part in eff["cluster.nodes"].split(";")]
    if len(layout) != shards or shards < 1:
        fail("k8s: cluster.nodes lists %d shards, cluster.shards is %d" % (len(layout), shards))
    per_shard = {len(x) for x in layout}
    if len(per_shard) != 1:
        fail("k8s: the shards of cluster.nodes have different replica counts %r: auto needs the "
             "same number in every shard" % sorted(per_shard))
    r_count = per_shard.pop()
    if replicas != shards * r_count:
        fail("k8s: the StatefulSet has replicas: %d, but cluster.nodes is %d shards x %d "
             "replicas = %d pods" % (replicas, shards, r_count, shards * r_count))
    addr = re.compile(r"^%s-(\d+)\.%s\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)$"
                      % (re.escape(name), re.escape(headless["metadata"]["name"])))
    namespaces = set()
    for sh, reps in enumerate(layout):
        for rep, a in enumerate(reps):
            m = addr.match(a)
            if not m:
                fail("k8s: cluster.nodes entry %r (shard %d, replica %d) is not a pod of "
                     "StatefulSet %s through service %s (%s-K.%s.<ns>.svc.cluster.local:%d)"
                     % (a, sh, rep, name, headless["metadata"]["name"], name,
                        headless["metadata"]["name"], grpc_port))
            if int(m.group(1)) != rep * shards + sh:
                fail("k8s: cluster.nodes has %s at shard %d, replica %d, where auto puts pod "
                     "%s-%d (ordinal = replica x %d + shard)"
                     % (a, sh, rep, name, rep * shards + sh, shards))
            if int(m.group(3)) != grpc_port:
                fail("k8s: cluster.nodes entry %r is not on the grpc port %d" % (a, grpc_port))
            namespaces.add(m.group(2))
    if len(namespaces) != 1:
        fail("k8s: cluster.nodes spans namespaces %r" % sorted(namespaces))
    ns = namespaces.pop()
    log("k8s: %d pods = %d shards x %d replicas; cluster.nodes names pods %s-0..%d of service "
        "%s in namespace %s, each where auto puts it"
        % (replicas, shards, r_count, name, replicas - 1, headless["metadata"]["name"], ns))

    # Every pod's configuration is accepted with the place it gets; one
    # past the map is refused.
    for k in range(replicas):
        host = "%s-%d" % (name, k)
        if uts:
            check_config(entry, args_for(k), cm, "k8s ConfigMap, pod %s" % host, hostname=host)
        else:
            check_config(entry, args_for(k) + ["-o", "cluster.shard=%d" % (k % shards),
                                               "-o", "cluster.replica=%d" % (k // shards)],
                         cm, "k8s ConfigMap, pod %s (place passed with -o)" % host)
    if uts:
        host = "%s-%d" % (name, replicas)
        r = run_dedupd(entry, args_for(replicas), cm, "-t", hostname=host)
        if r.returncode == 0 or "cluster.shard = auto" not in r.stderr:
            fail("k8s: a pod %s, beyond the map, is not refused: %s%s" % (host, r.stdout, r.stderr))
        log("k8s: a pod %s (replicas raised without the map) is refused: %s"
            % (host, r.stderr.strip()))

    # Forwarded calls, health rounds and copies present the pods' own
    # certificate: its identity must be a peer (rpc.allow_peer), which
    # dedupd refuses as "*" in a cluster under mutual TLS.
    own = {"%s.%s.svc" % (f, ns) for f in front} | \
        {"%s.%s.svc.cluster.local" % (f, ns) for f in front} | \
        {"*.%s.%s.svc.cluster.local" % (headless["metadata"]["name"], ns)}
    pod_name = re.compile(r"^%s-\d+\.%s\.%s\.svc\.cluster\.local$"
                          % (re.escape(name), re.escape(headless["metadata"]["name"]), re.escape(ns)))
    peers = {x.strip() for x in eff.get("rpc.allow_peer", "").split(",")}
    if "*" in peers:
        fail("k8s: rpc.allow_peer is \"*\": every client of the CA could copy the store")
    if not any(i in own or pod_name.match(i) for i in peers):
        fail("k8s: rpc.allow_peer %r names no identity of the pods' own certificate (e.g. %s): "
             "pods call each other with it" % (eff.get("rpc.allow_peer"),
                                               "%s.%s.svc" % (front[0], ns)))
    log("k8s: rpc.allow_peer names the pods' identity (%s)"
        % ", ".join(sorted(peers & own) or "a pod name"))
    return {k: v for k, v in eff.items() if k.startswith("rpc.")}


def main():
    try:
        import yaml
    except ImportError:
        harness.skip("python3-yaml is not installed")
    entry = check_docker()
    if entry[0] != "/usr/bin/dedupd":
        fail("ENTRYPOINT runs %s, not /usr/bin/dedupd (meson --prefix=/usr)" % entry[0])

    compose = yaml.safe_load(read("deploy", "docker", "compose.yaml"))
    svc = compose["services"]
    for s in ("kafka", "redis", "dedupd"):
        if s not in svc:
            fail("compose.yaml: no %s service" % s)
    check_config(entry, svc["dedupd"]["command"], read("conf", "dedupd.conf"), "compose")
    tls_dir = os.path.dirname(effective_rpc(entry, [], read("conf", "dedupd.conf"))
                              .get("rpc.tls_cert", "")) or "(unset)"
    check_tls(effective_rpc(entry, svc["dedupd"]["command"], read("conf", "dedupd.conf")),
              tls_dir, "compose")
    if "./certs:%s:ro" % tls_dir not in svc["dedupd"].get("volumes", []):
        fail("compose.yaml: ./certs is not mounted read-only at %s" % tls_dir)
    hc = re.search(r"^HEALTHCHECK.*?CMD\s+(\[.*?\])\s*$",
                   read("deploy", "docker", "Dockerfile").replace("\\\n", " "), re.M | re.S)
    hc_args = json.loads(hc.group(1)) if hc else []
    for opt, name in (("--tls-ca", "ca.crt"), ("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")):
        if opt not in hc_args or hc_args[hc_args.index(opt) + 1] != tls_dir + "/" + name:
            fail("Dockerfile: HEALTHCHECK does not pass %s %s/%s" % (opt, tls_dir, name))
    check_dev_certs(svc["dedupd"]["command"])

    docs = {}
    for fn in sorted(os.listdir(os.path.join(DEPLOY, "k8s"))):
        if fn.endswith(".yaml") and fn != "kustomization.yaml":
            for doc in yaml.safe_load_all(read("deploy", "k8s", fn)):
                docs.setdefault(doc["kind"], []).append(doc)
    kust = yaml.safe_load(read("deploy", "k8s", "kustomization.yaml"))
    for r in kust["resources"]:
        if not os.path.exists(os.path.join(DEPLOY, "k8s", r)):
            fail("kustomization.yaml lists missing %s" % r)
    for kind in ("StatefulSet", "ConfigMap", "Service"):
        if kind not in docs:
            fail("k8s: no %s" % kind)
    sts = docs["StatefulSet"][0]
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    if ports.get("grpc") != 50051 or ports.get("admin") != 9464:
        fail("k8s: container ports %r" % ports)
    if c["readinessProbe"].get("httpGet", {}).get("path") != "/readyz":
        fail("k8s: readiness is not /readyz")
    for probe in ("livenessProbe", "startupProbe"):
        cmd = c.get(probe, {}).get("exec", {}).get("command", [])
        if not cmd or cmd[0] != "/usr/bin/dedupctl" or cmd[-2:] != ["health", "liveness"]:
            fail("k8s: %s is not gRPC health of the liveness service: %s" % (probe, cmd))
        for opt, name in (("--tls-ca", "ca.crt"), ("--tls-cert", "tls.crt"),
                          ("--tls-key", "tls.key")):
            if opt not in cmd or cmd[cmd.index(opt) + 1] != tls_dir + "/" + name:
                fail("k8s: %s does not pass %s %s/%s" % (probe, opt, tls_dir, name))
        name = cmd[cmd.index("--tls-name") + 1] if "--tls-name" in cmd else None
        if name not in re.findall(r"dnsNames: \[([^,\]]+)", read("deploy", "k8s", "README.md")):
            fail("k8s: %s checks the certificate against %s, not a name the README's "
                 "certificate carries" % (probe, name))
    for k in ("requests", "limits"):
        if k not in c["resources"]:
            fail("k8s: no resource %s" % k)
    vct = sts["spec"]["volumeClaimTemplates"][0]
    if vct["spec"]["storageClassName"] != "ssd":
        fail("k8s: the PVC is not on the ssd storage class")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    if mounts.get(vct["metadata"]["name"]) != "/var/lib/dedupd":
        fail("k8s: the PVC is not mounted at /var/lib/dedupd (the image's VOLUME)")
    if mounts.get("config") != "/etc/dedupd":
        fail("k8s: the ConfigMap is not mounted at /etc/dedupd")
    cm = docs["ConfigMap"][0]["data"]["dedupd.conf"]
    rpc = check_cluster(entry, sts, docs["Service"], cm)
    check_tls(rpc, tls_dir, "k8s")
    secret = next((v for v in pod["volumes"] if v.get("secret", {}).get("secretName")
                   == "dedupd-tls"), None)
    if not secret:
        fail("k8s: no volume from the Secret dedupd-tls")
    if mounts.get(secret["name"]) != tls_dir:
        fail("k8s: the Secret dedupd-tls is not mounted at %s" % tls_dir)
    items = {i["key"]: i["path"] for i in secret["secret"].get("items", [])}
    for name in TLS_FILES.values():
        if items and items.get(name) != name:
            fail("k8s: the Secret's key %s does not land at %s/%s" % (name, tls_dir, name))
    # The drain must outlast the readiness probe noticing, and the grace period the drain.
    m = re.search(r"^\s*drain_ms\s*=\s*(\d+)", cm, re.M)
    rp = c["readinessProbe"]
    notice_ms = rp.get("periodSeconds", 10) * rp.get("failureThreshold", 3) * 1000
    if not m or int(m.group(1)) < notice_ms:
        fail("k8s: admin.drain_ms %s is shorter than readiness needs to notice (%d ms)"
             % (m.group(1) if m else "unset", notice_ms))
    if pod["terminationGracePeriodSeconds"] * 1000 <= int(m.group(1)) + 5000:
        fail("k8s: terminationGracePeriodSeconds does not cover drain + gRPC grace")
    log("k8s: manifests parse; probes, ports, PVC, ConfigMap and shutdown timing agree")
    check_monitoring(docs, sts, c, yaml)
    check_packages()
    check_kcat()
    log("PASS")


if __name__ == "__main__":
    main()
