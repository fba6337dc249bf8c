#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks docs/design.md's module table against src/'s includes.

The table lists the modules from the foundation (`dd`, first row) to the
wiring (`main.c`, last row). A module may include only modules in rows
above its own: every `#include "x.h"` in src/<m>.c or src/<m>.h must name a
module whose row comes before <m>'s row (or <m> itself). Headers that are
not modules' (the generated `*.pb-c.h`) are outside the table; a module's
private header M_int.h (the state its files share) is module M's.

Fails, naming file:line and both modules, on an include that points to a
row below; fails on a src/ module with no row and on a row with no file.
Usage: check_includes.py [SOURCE_ROOT]  (default: DD_SOURCE_ROOT or ..)
"""
import os
import re
import sys

ROW = re.compile(r"^\|\s*`([A-Za-z0-9_]+)(\.c)?`\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def table_rows(design):
    """Module names in table order, from the table under '## Modules'."""
    rows = []
    in_section = False
    with open(design, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                if in_section and rows:
                    break
                in_section = line.strip() == "## Modules"
                continue
            if not in_section:
                continue
            m = ROW.match(line)
            if m:
                rows.append(m.group(1))
            elif rows and not line.startswith("|"):
                break  # the table ended
    return rows


def module_of(base):
    """A module's private header M_int.h (the state its own files share)
    is part of module M."""
    return base[:-4] if base.endswith("_int") else base


def src_modules(src):
    mods = set()
    for name in os.listdir(src):
        base, ext = os.path.splitext(name)
        if ext in (".c", ".h") and not name.endswith(".pb-c.h"):
            mods.add(module_of(base))
    return mods


def main():
    root = (sys.argv[1] if len(sys.argv) > 1 else
            os.environ.get("DD_SOURCE_ROOT",
                           os.path.join(os.path.dirname(__file__), "..", "..")))
    src = os.path.join(root, "src")
    design = os.path.join(root, "docs", "design.md")
    rows = table_rows(design)
    errors = []
    if not rows:
        print("%s: no module table under '## Modules'" % design)
        return 1
    rank = {}
    for i, m in enumerate(rows):
        if m in rank:
            errors.append("docs/design.md: module %s has two rows" % m)
        rank.setdefault(m, i)
    mods = src_modules(src)
    for m in sorted(mods - set(rank)):
        errors.append("src/%s: module %s has no row in docs/design.md's "
                      "module table" % (m, m))
    for m in rows:
        if m not in mods:
            errors.append("docs/design.md: row %s names no file in src/" % m)
    up = 0
    for name in sorted(os.listdir(src)):
        base, ext = os.path.splitext(name)
        base = module_of(base)
        if ext not in (".c", ".h") or base not in rank:
            continue
        with open(os.path.join(src, name), encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = module_of(os.path.splitext(os.path.basename(m.group(1)))[0])
                if target == base or target not in rank:
                    continue  # itself, or not a module (generated headers)
                if rank[target] > rank[base]:
                    up += 1
                    errors.append(
                        "src/%s:%d: %s includes %s, which is in a row below "
                        "it in docs/design.md's module table"
                        % (name, lineno, base, target))
    for e in errors:
        print(e)
    if errors:
        print("%d errors (%d includes against the table)" % (len(errors), up))
        return 1
    print("%d modules, includes follow the table" % len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
