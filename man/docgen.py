# SPDX-License-Identifier: Apache-2.0
"""What the man pages and the bash completion are made of, read from the
binaries' --help and from conf/dedupd.conf; shared by gen_man.py (which
writes them) and check_docs.py (which checks them against the same
sources). Nothing here is written by hand about any option or key: a new
option in --help or a new key in the conf reaches the pages at the next
build."""
import re
import subprocess

# An option token in --help: -x or --long-name, not inside a word
# ("non-zero", "kafka-storage") and not the bare "--".
OPTION = re.compile(r"(?<![\w-])(--[a-zA-Z][a-zA-Z0-9-]*|-[a-zA-Z])(?![\w-])")
# An option followed by an argument placeholder in upper case: "-c FILE".
OPTION_ARG = re.compile(r"(?<![\w-])(--[a-zA-Z][a-zA-Z0-9-]*|-[a-zA-Z])[ =]([A-Z][A-Z_/.|]*)\b")
KEY = re.compile(r"^([A-Za-z0-9_.]+)\s*=\s*(.*)$")
SECTION = re.compile(r"^\[([A-Za-z0-9_]+)\]\s*$")


def help_text(exe):
    """EXE --help as printed (stdout, or stderr if it wrote there); any
    exit status is taken, so a tool whose --help still fails is documented
    by what it prints."""
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    text = p.stdout if p.stdout.strip() else p.stderr
    if not text.strip():
        raise SystemExit("%s --help printed nothing" % exe)
    return text


def options(text):
    """Every option token of a --help text, in order of first mention."""
    seen = []
    for m in OPTION.finditer(text):
        if m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def file_options(text):
    """Options whose argument is a FILE or a DIR (completed as paths)."""
    out = []
    for m in OPTION_ARG.finditer(text):
        if m.group(2) in ("FILE", "DIR", "PATH", "LIST") and m.group(1) not in out:
            out.append(m.group(1))
    return out


def subcommands(text, prog):
    """The COMMAND words of a --help that lists them, two spaces in, at the
    start of a line ("  filter USER ID..."); PROG's own name excluded."""
    out = []
    for m in re.finditer(r"^  ([a-z][a-z0-9-]*)(?= |$)", text, re.M):
        w = m.group(1)
        if w != prog and w not in out:
            out.append(w)
    return out


def conf_sections(path):
    """conf/dedupd.conf as [(section, paragraphs, [(key, value, comment)])]:
    the text before the first section has section None. A key's comment is
    the block of comment lines right above it; other comment blocks are a
    section's paragraphs (or the preamble). Commented-out example keys stay
    comment text."""
    sections = [(None, [], [])]
    block = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            s = line.strip()
            if s.startswith("#") or s.startswith(";"):
                if "SPDX-License-Identifier" not in s:
                    block.append(re.sub(r"^[#;] ?", "", s))
                continue
            if not s:
                if block:
                    sections[-1][1].append(block)
                block = []
                continue
            m = SECTION.match(s)
            if m:
                if block:
                    sections[-1][1].append(block)
                block = []
                sections.append((m.group(1), [], []))
                continue
            m = KEY.match(s)
            if m and sections[-1][0] is not None:
                sections[-1][2].append(("%s.%s" % (sections[-1][0], m.group(1)), m.group(2),
                                        block))
                block = []
    if block:
        sections[-1][1].append(block)
    return sections


def conf_keys(path):
    return [k for _, _, keys in conf_sections(path) for k, _, _ in keys]


def roff_escape(line):
    """One line of text for a roff .nf block: backslashes, hyphens (so that
    options copy and search as typed) and a leading control character."""
    line = line.replace("\\", "\\e").replace("-", "\\-")
    if line.startswith(".") or line.startswith("'"):
        line = "\\&" + line
    return line


def roff_unescape(text):
    """What a reader sees of roff source: escapes and font changes undone."""
    text = re.sub(r"\\f[BIRP]", "", text)
    return text.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")
