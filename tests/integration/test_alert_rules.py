#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/prometheus/dedupd-rules.yml checked by the tool Prometheus ships
(promtool, Debian package `prometheus`); no server is started.

1. `promtool check rules` accepts the file and counts as many rules as it
   holds.
2. Every rule is an alert with a `for:`, a severity of critical or warning,
   and a summary and a description; each description ends by pointing to
   README "Dashboards and alerts" and its alert, and that README section
   names every alert.
3. `promtool test rules deploy/prometheus/dedupd-rules.test.yml` passes,
   and that file has, for every alert, a case where it fires and a case
   where it is silent (and no case for an alert that does not exist).
4. promtool is not lenient: the same test with one firing case expected
   silent fails.
5. The rules, their tests and the dashboard name no family in a unit
   other than a base unit (`_ms`, `_mb`, ...).

Locally a missing promtool skips (77); with CI set it fails.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import fail, log  # noqa: E402

try:
    import yaml
except ImportError:
    harness.skip("python3-yaml is not installed")

RULES_DIR = os.path.join(harness.SOURCE_ROOT, "deploy", "prometheus")
RULES = os.path.join(RULES_DIR, "dedupd-rules.yml")
TESTS = os.path.join(RULES_DIR, "dedupd-rules.test.yml")
SECTION = "Dashboards and alerts"


def promtool():
    exe = shutil.which("promtool") or ("/usr/bin/promtool" if os.path.exists("/usr/bin/promtool")
                                       else None)
    if exe is None:
        harness.skip("promtool is not installed (Debian package prometheus)")
    return exe


def run(argv, cwd=None):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    return r.returncode, r.stdout + r.stderr


def readme_section(title):
    """The text of README.md's section TITLE, up to the next heading of its
    level or above."""
    with open(os.path.join(harness.SOURCE_ROOT, "README.md")) as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"(#+) (.*)$", line)
        if m and m.group(2).strip() == title:
            level = len(m.group(1))
            out = []
            for rest in lines[i + 1:]:
                h = re.match(r"(#+) ", rest)
                if h and len(h.group(1)) <= level:
                    break
                out.append(rest)
            return "\n".join(out)
    fail("README.md has no section %r" % title)


def main():
    tool = promtool()
    with open(RULES) as f:
        rules_doc = yaml.safe_load(f)
    rules = [r for g in rules_doc["groups"] for r in g["rules"]]
    alerts = [r["alert"] for r in rules if "alert" in r]

    # 1. promtool check rules
    rc, out = run([tool, "check", "rules", RULES])
    if rc != 0:
        fail("promtool check rules failed (%d):\n%s" % (rc, out))
    m = re.search(r"SUCCESS: (\d+) rules found", out)
    if not m or int(m.group(1)) != len(rules):
        fail("promtool check rules: want %d rules found:\n%s" % (len(rules), out))
    log("promtool check rules: %d rules" % len(rules))

    # 2. the shape every alert must have
    if len(alerts) != len(rules):
        fail("recording rules in dedupd-rules.yml: only alerts are expected")
    if len(set(alerts)) != len(alerts):
        fail("an alert name appears twice: %s" % sorted(a for a in alerts if alerts.count(a) > 1))
    section = readme_section(SECTION)
    for r in rules:
        name = r["alert"]
        if not r.get("for"):
            fail("%s has no for:" % name)
        if r.get("labels", {}).get("severity") not in ("critical", "warning"):
            fail("%s: severity %r, want critical or warning" % (name, r.get("labels")))
        ann = r.get("annotations", {})
        if not ann.get("summary") or not ann.get("description"):
            fail("%s lacks a summary or a description" % name)
        if not ann["description"].rstrip().endswith('"%s", %s.' % (SECTION, name)):
            fail("%s: the description must end by pointing to README \"%s\", %s" % (
                name, SECTION, name))
        if not re.search(r"\b%s\b" % name, section):
            fail("README \"%s\" does not explain %s" % (SECTION, name))
    log("every alert has for:, a severity, a summary and a description pointing to the README,"
        " which explains it")

    # 3. promtool test rules, and what it covers
    rc, out = run([tool, "test", "rules", TESTS])
    if rc != 0 or "SUCCESS" not in out:
        fail("promtool test rules failed (%d):\n%s" % (rc, out))
    with open(TESTS) as f:
        tests_doc = yaml.safe_load(f)
    if [os.path.join(RULES_DIR, p) for p in tests_doc["rule_files"]] != [RULES]:
        fail("dedupd-rules.test.yml tests %s, not dedupd-rules.yml" % tests_doc["rule_files"])
    fires, silent = set(), set()
    for t in tests_doc["tests"]:
        for c in t.get("alert_rule_test", []):
            (fires if c.get("exp_alerts") else silent).add(c["alertname"])
    unknown = (fires | silent) - set(alerts)
    if unknown:
        fail("dedupd-rules.test.yml tests alerts that do not exist: %s" % sorted(unknown))
    for name in alerts:
        if name not in fires:
            fail("no test where %s fires" % name)
        if name not in silent:
            fail("no test where %s stays silent" % name)
    log("promtool test rules: every one of the %d alerts fires in a test and is silent in another"
        % len(alerts))

    # 4. a wrong expectation fails (the test above is not vacuous)
    d = harness.tmpdir("dedupd-rules-")
    shutil.copy(RULES, d)
    for t in tests_doc["tests"]:
        for c in t.get("alert_rule_test", []):
            if c["alertname"] == "DedupdNotReady" and c.get("exp_alerts"):
                c["exp_alerts"] = []
    wrong = os.path.join(d, "wrong.test.yml")
    with open(wrong, "w") as f:
        yaml.safe_dump(tests_doc, f)
    rc, out = run([tool, "test", "rules", wrong])
    if rc == 0 or "DedupdNotReady" not in out:
        fail("promtool test rules passed with DedupdNotReady expected silent where it fires:\n%s"
             % out)
    log("a firing alert expected silent fails promtool test rules")

    # 5. base units only: no family named in the rules, their tests or the
    # dashboard has a unit Prometheus's conventions refuse (ms, us, ns, kb,
    # mb, minutes, hours, percent)
    dash = os.path.join(harness.SOURCE_ROOT, "deploy", "grafana", "dedupd.json")
    bad = set()
    for path in (RULES, TESTS, dash):
        with open(path) as f:
            bad |= set(re.findall(r"\b(?:dedupd|process)_\w*?_(?:ms|us|ns|milliseconds|"
                                  r"microseconds|kb|mb|gb|kib|mib|gib|minutes|hours|percent)\b",
                                  f.read()))
    if bad:
        fail("families not in base units in the rules, their tests or the dashboard: %s"
             % sorted(bad))
    log("rules, rule tests and dashboard name families in base units only")
    log("PASS")


if __name__ == "__main__":
    main()
