#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerates the command reference in docs/cli.md from `ntfs-ctl --help`
and `ntfs-ctl help COMMAND`: everything between "## Overview" and
"## Output formats" is rewritten; the prose around it is kept.

  tools/gen-cli-md.py [--build DIR]

tests/integration/test_ctl.py checks that the file matches the binary."""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("NTFS_BUILD", os.path.join(ROOT, "build")))
    a = ap.parse_args()
    ctl = os.path.join(a.build, "ctl", "ntfs-ctl")
    overview = subprocess.run([ctl, "--help"], capture_output=True, text=True, check=True).stdout
    listed = [re.match(r"^  (.*?)\s{2,}", l).group(1)
              for l in overview.split("Commands:\n")[1].split("\n\n")[0].splitlines()]
    parts = ["## Overview\n\n```\n" + overview + "```\n"]
    for c in listed:
        out = subprocess.run([ctl, "help", *c.split()], capture_output=True, text=True, check=True).stdout
        parts.append(f"## {c}\n\n```\n{out}```\n")
    path = os.path.join(ROOT, "docs", "cli.md")
    doc = open(path).read()
    start = doc.index("## Overview")
    end = doc.index("## Output formats")
    doc = doc[:start] + "\n".join(parts) + "\n" + doc[end:]
    with open(path, "w") as f:
        f.write(doc)
    print(f"docs/cli.md: {len(listed)} commands")
    return 0


if __name__ == "__main__":
    sys.exit(main())
