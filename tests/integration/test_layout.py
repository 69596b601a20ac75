# SPDX-License-Identifier: MIT
"""The layout holds: docs/architecture.md's map ("The map") against the tree.

Every source file belongs to the most specific folder of the map; each of its
`#include "dir/file.h"` lines names a header of its own folder, of a folder
in its row's "may include" cell, and never of one in its "never includes"
cell. Every folder holding sources has a row, every row's folder exists, and
no source file outside tests/ is longer than 1,500 lines (issue 68)."""
import os
import re

import pytest

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAX_LINES = 1500
SKIP_DIRS = {".git", "node_modules", "__pycache__"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_map():
    """{folder: (may set or None for 'any', never set, header set)} from the map's table."""
    doc = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    section = doc.split("## The map", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`[a-z/]+/`", cells[0]):
            continue
        folder = cells[0].strip("`")
        may = None if cells[2] == "any" else set(re.findall(r"`([a-z/]+/)`", cells[2]))
        never = set(re.findall(r"`([a-z/]+/)`", cells[3]))
        # single headers named in the "may include" cell, allowed even from
        # a folder on the 'never' list ("`ctl/http.h` only")
        headers = set(re.findall(r"`([a-z/-]+\.h)`", cells[2]))
        rows[folder] = (may, never, headers)
    return rows


def is_build_dir(d):
    return os.path.exists(os.path.join(ROOT, d, "meson-private")) or os.path.exists(
        os.path.join(ROOT, d, "build.ninja"))


def sources():
    for top in sorted(os.listdir(ROOT)):
        if top in SKIP_DIRS or top.startswith(".") or not os.path.isdir(os.path.join(ROOT, top)) \
                or is_build_dir(top):
            continue
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, f), ROOT)


def owner(rows, path):
    """The most specific folder of the map holding path (a file or a header)."""
    best = None
    for folder in rows:
        if path.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best


@pytest.fixture(scope="module")
def layout():
    rows = read_map()
    assert len(rows) >= 10, "docs/architecture.md has no map table (## The map)"
    return rows


def test_every_row_names_a_folder_and_every_folder_has_a_row(layout):
    for folder in layout:
        assert os.path.isdir(os.path.join(ROOT, folder)), f"the map names {folder}, which does not exist"
    missing = sorted({os.path.dirname(p) + "/" for p in sources() if owner(layout, p) is None})
    assert not missing, f"folders with sources but no row in docs/architecture.md's map: {missing}"


def violations(rows, p, text):
    """What is wrong with the includes of source file p (its text)."""
    wrong = []
    mine = owner(rows, p)
    may, never, headers = rows[mine]
    for inc in INCLUDE.findall(text):
        if "/" not in inc or inc in headers:
            continue  # a header beside the file ("tap.h"), or one the row names
        theirs = owner(rows, inc)
        if theirs is None:
            wrong.append(f"{p}: includes {inc}, which is in no folder of the map")
        elif theirs in never:
            wrong.append(f"{p} ({mine}): includes {inc} ({theirs}), on its 'never' list")
        elif theirs != mine and may is not None and theirs not in may:
            wrong.append(f"{p} ({mine}): includes {inc} ({theirs}), not in its 'may include' cell")
    return wrong


def test_includes_follow_the_map(layout):
    wrong = []
    for p in sources():
        wrong += violations(layout, p, open(os.path.join(ROOT, p), errors="replace").read())
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_wrong_arrow(layout):
    """The checker itself: arrows up from a library or sideways are caught,
    the allowed ones pass."""
    assert violations(layout, "fs/ws.c", '#include "ctl/daemon.h"\n')
    assert violations(layout, "fs/store.c", '#include "fs/sync/merge.h"\n')
    assert violations(layout, "agent/ntfs-agent.c", '#include "journal/journal.h"\n')
    assert violations(layout, "ctl/cli/main.c", '#include "ctl/daemon.h"\n')
    assert violations(layout, "journal/journal.c", '#include "nowhere/x.h"\n')
    assert not violations(layout, "agent/ntfs-agent.c", '#include "ctl/client/client.h"\n#include "common/err.h"\n')
    assert not violations(layout, "fs/sync/merge.c", '#include "fs/store.h"\n')
    # a header a row names one by one: that header, not its folder
    assert not violations(layout, "ctl/cli/web.c", '#include "ctl/http.h"\n')
    assert violations(layout, "ctl/cli/web.c", '#include "ctl/router.h"\n')


def test_no_source_file_is_too_long(layout):
    long = []
    for p in sources():
        if p.startswith("tests/"):
            continue
        with open(os.path.join(ROOT, p), errors="replace") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            long.append(f"{p}: {n} lines")
    assert not long, f"source files over {MAX_LINES} lines: {long}"
