#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes a program's man page from its own `--help`, so the page and the
help can never say different things (docs/install.md, "Man pages").

  dist/help2roff.py --output FILE [--section N] [--version V]
                    [--description TEXT] [--stderr] [--subcommands]
                    [--see-also PAGE]... -- PROGRAM [ARGS...]

The help text is read as the programs here write it: "usage:" lines, a
one-line summary, prose, headings ("Options:"), entries ("  --flag ARG   what
it does", continued by deeper-indented lines) and other indented lines
(examples, kept as they are). With --subcommands (ntfs-ctl), each entry of
its "Commands:" list gets a section made from `PROGRAM help COMMAND`.
--stderr: the program prints its usage on stderr (and may exit non-zero).

tests/integration/test_dist.py checks every page against its program."""
import argparse
import os
import re
import subprocess
import sys

ENTRY = re.compile(r"^( {1,8})(\S(?:\S| (?! ))*)( {2,})(\S.*)$")
HEADING = re.compile(r"^[A-Z][A-Za-z ()'-]*:$")


def esc(text):
    """Roff-escapes text for use inside a line."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return text


def line(text):
    """A text line that roff will not read as a request."""
    text = esc(text)
    return "\\&" + text if text.startswith((".", "'")) else text


def run_help(argv, use_stderr):
    env = dict(os.environ, LC_ALL="C", COLUMNS="80")
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    out = p.stderr if use_stderr else p.stdout
    if not use_stderr and p.returncode != 0:
        sys.exit(f"help2roff: {' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}")
    if not out.strip():
        sys.exit(f"help2roff: {' '.join(argv)} printed no help")
    return out


def split_usage(text):
    """(usage lines, the rest) of a help text."""
    lines = text.rstrip("\n").split("\n")
    usage = []
    i = 0
    while i < len(lines) and (re.match(r"^(?i:usage):", lines[i]) or (usage and lines[i].startswith(" "))):
        usage.append(re.sub(r"^(?i:usage):\s*", "", lines[i]).strip())
        i += 1
    return usage, lines[i:]


def body(lines, heading_macro=".SS"):
    """Roff for the help text after its usage lines."""
    out = []
    mode = None  # None, "para", "entry", "pre"
    indent = 0   # the description column of the current entry

    def close():
        nonlocal mode
        if mode == "pre":
            out.append(".fi")
        if mode in ("entry", "pre"):
            pass
        mode = None

    for raw in lines:
        text = raw.rstrip()
        if not text:
            if mode in ("para", "pre"):
                close()
            continue
        m = ENTRY.match(text)
        lead = len(text) - len(text.lstrip(" "))
        if mode == "entry" and lead >= indent - 2 and lead > 8:
            out.append(line(text.strip()))  # the entry's description goes on
            continue
        if HEADING.match(text):
            close()
            out.append(f"{heading_macro} {esc(text[:-1])}")
            continue
        if m and lead <= 8:
            if mode == "pre":
                out.append(".fi")
            mode = "entry"
            indent = len(m.group(1)) + len(m.group(2)) + len(m.group(3))
            out.append(".TP")
            out.append(f"\\fB{esc(m.group(2))}\\fR")
            out.append(line(m.group(4)))
            continue
        if lead > 0:
            if mode != "pre":
                close()
                out.append(".PP")
                out.append(".nf")
                mode = "pre"
            out.append(line(text))
            continue
        if mode != "para":
            close()
            out.append(".PP")
            mode = "para"
        out.append(line(text))
    close()
    return out


def commands(rest):
    """The entries of the "Commands:" list."""
    names, inside = [], False
    for text in rest:
        if text.strip() == "Commands:":
            inside = True
            continue
        if inside:
            if not text.strip():
                break
            m = ENTRY.match(text)
            if m:
                names.append(m.group(2))
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", required=True)
    ap.add_argument("--section", default="1")
    ap.add_argument("--version", default="")
    ap.add_argument("--description", help="the NAME line's text (default: the help's first sentence)")
    ap.add_argument("--stderr", action="store_true")
    ap.add_argument("--subcommands", action="store_true")
    ap.add_argument("--see-also", action="append", default=[])
    ap.add_argument("program", nargs="+")
    a = ap.parse_args()
    prog = a.program
    name = os.path.basename(prog[0])
    usage, rest = split_usage(run_help(prog + ["--help"], a.stderr))
    while rest and not rest[0].strip():
        rest.pop(0)
    summary = a.description
    if not summary:
        first = rest[0] if rest else name
        summary = re.split(r"(?<=[.:])\s", first, maxsplit=1)[0].rstrip(".:")
        summary = summary[0].lower() + summary[1:]

    r = [f'.TH {name.upper()} {a.section} "" "ntfs {esc(a.version)}" "ntfs"',
         ".SH NAME", f"{esc(name)} \\- {esc(summary)}", ".SH SYNOPSIS", ".nf"]
    r += [line(u) for u in usage] or [f"\\fB{esc(name)}\\fR"]
    r += [".fi", ".SH DESCRIPTION"]
    r += body(rest) or [line(summary[0].upper() + summary[1:] + ".")]
    if a.subcommands:
        r.append(".SH COMMANDS")
        for c in commands(rest):
            sub_usage, sub_rest = split_usage(run_help(prog + ["help"] + c.split(), False))
            r.append(f".SS {esc(c)}")
            r += [".nf"] + [line(u) for u in sub_usage] + [".fi"]
            r += body(sub_rest, heading_macro=".PP\n.B")
    a.see_also = [p for p in a.see_also if p.split("(")[0] != name]
    if a.see_also:
        r += [".SH SEE ALSO", ",\n".join(f"\\fB{esc(p.split('(')[0])}\\fR({p.split('(')[1]}" for p in a.see_also)]
    with open(a.output, "w") as f:
        f.write("\n".join(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
