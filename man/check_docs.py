#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The man pages and the bash completion against what they describe.

  check_docs.py CONF COMPLETION CONF_PAGE PROG=EXE=PAGE...

Every option a binary's --help prints must appear in its man page (as a
reader sees it: rendered by groff when it is installed, else with roff's
escapes undone) and in its completion function (when the completion file
has one for it); every key of conf/dedupd.conf must have its entry in
dedupd.conf(5) ("section.key = default"), and be in dedupd's completion
of -o. Then the check is run
again on copies with one option, one key and one completion word
removed, and must fail each time: a check that cannot fail checks
nothing. Exit 0, or 1 naming each missing option or key.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docgen  # noqa: E402


def rendered(page):
    with open(page, encoding="utf-8") as f:
        src = f.read()
    if shutil.which("groff"):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-P-c", "-P-b", "-P-u"], input=src,
                           capture_output=True, text=True, timeout=60)
        if p.returncode == 0 and p.stdout.strip():
            # groff may print a hyphen as U+2010 or a minus as U+2212.
            return p.stdout.replace("\u2010", "-").replace("\u2212", "-")
    return docgen.roff_unescape(src)


def has_token(text, tok):
    return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(tok), text) is not None


def completion_block(text, prog):
    fn = "_" + prog.replace("-", "_")
    m = re.search(r"^%s\(\)\n\{\n(.*?)^\}\ncomplete -F %s %s$" % (fn, fn, re.escape(prog)), text,
                  re.M | re.S)
    return m.group(1) if m else None


def check(conf, completion, conf_page, progs):
    errors = []
    with open(completion, encoding="utf-8") as f:
        comp = f.read()
    for prog, exe, page in progs:
        opts = docgen.options(docgen.help_text(exe))
        if not opts:
            errors.append("%s --help: no options found" % prog)
        text = rendered(page)
        block = completion_block(comp, prog)
        if block is None and prog in ("dedupd", "dedupctl"):
            errors.append("%s: no completion function %s" % (completion, prog))
        for o in opts:
            if not has_token(text, o):
                errors.append("%s: %s --help lists %s, the man page does not" % (page, prog, o))
            if block is not None and not has_token(block, o):
                errors.append("%s: %s --help lists %s, its completion does not"
                              % (completion, prog, o))
        for c in docgen.subcommands(docgen.help_text(exe), prog):
            if block is not None and not has_token(block, c):
                errors.append("%s: %s's command %s is not completed" % (completion, prog, c))
    with open(conf_page, encoding="utf-8") as f:
        src = f.read()
    dedupd = completion_block(comp, "dedupd") or ""
    for k in docgen.conf_keys(conf):
        # An entry of its own (a .TP tag "history.path = ./data/history"),
        # not a mention in another key's text.
        tag = r"^\.TP\n\\fB%s\\fR =" % re.escape(docgen.roff_escape(k))
        if not re.search(tag, src, re.M):
            errors.append("%s: key %s of %s has no entry" % (conf_page, k, conf))
        if not has_token(dedupd, k):
            errors.append("%s: key %s is not offered after dedupd -o" % (completion, k))
    return errors


def drop(path, tmp, pattern, name):
    """A copy of PATH without any match of PATTERN."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    new, n = re.subn(pattern, "", src, flags=re.M)
    if n < 1:
        raise SystemExit("self-test: %r not found in %s" % (pattern, path))
    out = os.path.join(tmp, name)
    with open(out, "w", encoding="utf-8") as f:
        f.write(new)
    return out


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    conf, completion, conf_page = argv[:3]
    progs = [tuple(a.split("=", 2)) for a in argv[3:]]
    errors = check(conf, completion, conf_page, progs)
    for e in errors:
        print(e)
    if errors:
        print("%d problems: the pages or the completion drifted from --help or the conf"
              % len(errors))
        return 1
    n_opts = sum(len(docgen.options(docgen.help_text(e))) for _, e, _ in progs)
    print("ok: %d options of %d binaries and %d conf keys documented and completed"
          % (n_opts, len(progs), len(docgen.conf_keys(conf))))

    # The same check must fail on a page, a conf page and a completion
    # that each miss one thing.
    with tempfile.TemporaryDirectory() as tmp:
        prog, exe, page = progs[0]
        opt = [o for o in docgen.options(docgen.help_text(exe)) if o.startswith("--")][0]
        esc = re.escape(opt.replace("-", "\\-"))
        cases = [
            ("an option missing from %s" % os.path.basename(page),
             (conf, completion, conf_page,
              [(prog, exe, drop(page, tmp, r"^.*%s(?![\w\\-]).*\n" % esc, "page"))] + progs[1:])),
            ("a key missing from dedupd.conf(5)",
             (conf, completion, drop(conf_page, tmp, r"^\\fBhistory\.path\\fR.*\n", "conf.5"),
              progs)),
            ("an option missing from the completion",
             (conf, drop(completion, tmp, r"(?<=[ \"])%s(?=[ \"])" % re.escape(opt), "comp"), conf_page,
              progs)),
        ]
        for what, args in cases:
            if not check(*args):
                print("self-test: the check passed with %s" % what)
                return 1
            print("self-test: fails as it should with %s" % what)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
