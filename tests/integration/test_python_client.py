# SPDX-License-Identifier: MIT
"""The Python client (ctl/client/python, docs/python.md) and the run_python
tool against a live ntfsd: nontainer's README examples with only the import
changed, the cache across kill -9, rollback and forks, bad input, merges,
what ntfs adds (mount, effects, export), /tool/execute, and pip install."""
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from conftest import SANITIZER_MARKS, find_bin
from ctl_fixtures import daemon  # noqa: F401  (fixture)
from recovery_fixtures import Runner

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PKG = os.path.join(ROOT, "ctl", "client", "python")
sys.path.insert(0, PKG)

import ntfs  # noqa: E402
from ntfs import ArtifactPath, workspace  # noqa: E402

HEX64 = re.compile(r"[0-9a-f]{64}")


def ws_of(d, name="user-42"):
    return workspace(name, socket=d.sock)


# ---- nontainer's README, verbatim ------------------------------------------
# The README's code blocks as the seed has them (../shared/seeds/002_*.txt;
# checked against it when that folder is beside the repository), run with
# only the import changed and the daemon named by $NTFS_SOCKET.

SEED = os.path.join(ROOT, "..", "shared", "seeds", "002_1044345c7494fff5.txt")

README_API_IN_ONE_GLANCE = """\
from nontainer import workspace

ws = workspace("user-42")            # versioned; a kvgit branch per session

ws.terminal("mkdir -p data && echo 'a,b\\n1,2' > data/in.csv")
r = ws.run_python(\"\"\"
import csv
rows = list(csv.reader(open('data/in.csv')))   # sees the shell's file
cache['n_rows'] = len(rows)                      # persists across the session
print(rows)
\"\"\")

r.checkpoint                 # commit id this call produced; ws.restore(it) undoes it
fork = ws.fork("what-if")    # O(1) branch; the original is untouched
ws.rollback(steps=1)         # or time-travel by steps
ws.tag("v1")                 # name this state; it outlives the call that made it
snap = ws.at_tag("v1")       # a frozen workspace at that name: reads, never writes
"""

README_UI = """\
r = ws.run_python(\"\"\"
import pandas as pd
ui = {"chart": pd.DataFrame({"a": [1, 2, 3]}), "note": "top three"}
\"\"\")

r.namespace["ui"]["chart"]        # ArtifactPath('/workspace/ui/chart.table.json',
                                  #              kind='table')
r.namespace["ui"]["chart"].kind   # 'table'  -- derived from the suffix
r.namespace["ui"]["note"]         # 'top three'  -- plain data is untouched
r.ui_problems                     # () -- or why something did not render
"""

README_TAG_SCOPE = 'ws.tag("v1", scope="store")'


def run_readme(block, g):
    """Runs a README block with `from ntfs` for `from nontainer`; its globals."""
    if os.path.exists(SEED):
        assert block in open(SEED, encoding="utf-8").read(), "the block is not the seed's"
    exec(compile(block.replace("from nontainer import", "from ntfs import"), "<README>", "exec"), g)
    return g


def test_readme_blocks_verbatim(daemon, monkeypatch):
    monkeypatch.setenv("NTFS_SOCKET", daemon.sock)
    g = run_readme(README_API_IN_ONE_GLANCE, {})
    ws, r, fork, snap = g["ws"], g["r"], g["fork"], g["snap"]
    try:
        assert r.ok and r.stdout == "[['a', 'b'], ['1', '2']]\n", r
        # r.checkpoint: the commit id this call produced
        assert HEX64.fullmatch(r.checkpoint)
        shell_commit = ws.head
        assert shell_commit != r.checkpoint and fork.history[0].id == r.checkpoint
        # the call's commit added the cache folder (an added folder is one entry)
        assert [(c.path, c.kind) for c in ws.diff(shell_commit, r.checkpoint)] == [(".ntfs", "added")]
        # the fork is the state after the call; the original was untouched by it
        assert fork.head == r.checkpoint
        assert fork.run_python("print(cache['n_rows'], open('data/in.csv').read())").stdout == "2 a,b\n1,2\n\n"
        # rollback(steps=1): the state before run_python (the shell's file, no cache)
        assert ws.head == shell_commit
        assert ws.run_python("print(dict(cache), open('data/in.csv').read())").stdout == "{} a,b\n1,2\n\n"
        # tag("v1") names this state and outlives the calls after it
        assert {t["tag"]: t["commit"] for t in ws.tags()}["v1"] == shell_commit
        ws.restore(r.checkpoint)     # ws.restore(it): back to what the call produced
        assert ws.run_python("print(cache['n_rows'])").stdout == "2\n"
        ws.terminal("echo later > later.txt")
        # at_tag: a frozen workspace at that name: reads, never writes
        assert snap.terminal("cat data/in.csv; test -e later.txt || echo absent").stdout == "a,b\n1,2\nabsent\n"
        assert snap.terminal("ls -A .ntfs/python/cache 2>/dev/null | wc -l").stdout == "0\n"
        for write in (lambda: snap.terminal("echo x > data/in.csv"), lambda: snap.run_python("cache['x'] = 1"),
                      lambda: snap.rollback(), lambda: snap.tag("v2")):
            with pytest.raises(ntfs.ReadOnly) as e:
                write()
            assert e.value.code == "read_only"
        assert ws.read_file("data/in.csv") == b"a,b\n1,2\n" and ws.read_file("later.txt") == b"later\n"
        with ws.at_tag("v1") as again:  # the tag did not move
            assert again.head == shell_commit

        g = run_readme(README_UI, {"ws": ws})
        r = g["r"]
        chart = r.namespace["ui"]["chart"]
        assert repr(chart) == "ArtifactPath('/workspace/ui/chart.table.json', kind='table')"
        assert isinstance(chart, ArtifactPath) and chart == "/workspace/ui/chart.table.json"
        assert chart.kind == "table"
        assert r.namespace["ui"]["note"] == "top three" and type(r.namespace["ui"]["note"]) is str
        assert r.ui_problems == ()
        assert [row["a"] for row in json.loads(ws.read_artifact(chart))["data"]] == [1, 2, 3]
    finally:
        snap.close()
    daemon.healthy()


def test_readme_tag_scope_verbatim(daemon, monkeypatch):
    """"A tag is session-scoped by default and dies with the session;
    ws.tag("v1", scope="store") makes a publication that outlives it,
    readable from any session on the store.\""""
    monkeypatch.setenv("NTFS_SOCKET", daemon.sock)
    if os.path.exists(SEED):
        text = " ".join(open(SEED, encoding="utf-8").read().split())
        assert "A tag is session-scoped by default and dies with the session; `" + README_TAG_SCOPE + \
            "` makes a publication that outlives it, readable from any session on the store." in text
    ws = workspace("user-42")
    ws.terminal("echo published > f")
    published = ws.head
    exec(README_TAG_SCOPE, {"ws": ws})
    ws.terminal("echo mine > f")
    ws.tag("draft")              # session-scoped by default
    reader = workspace("user-7")
    with reader.at_tag("v1") as snap:
        assert snap.head == published and snap.terminal("cat f").stdout == "published\n"
    with pytest.raises(ntfs.NotFound):
        reader.at_tag("draft")   # another session's tag
    with ws.at_tag("draft") as snap:
        assert snap.terminal("cat f").stdout == "mine\n"
    ws.end()                     # the session ends: its tag with it, the publication stays
    later = workspace("user-8")
    with later.at_tag("v1") as snap:
        assert snap.terminal("cat f").stdout == "published\n"
    assert {(t["tag"], t["scope"]) for t in later.tags()} == {("v1", "store")}
    with pytest.raises(ntfs.NotFound):
        later.at_tag("draft")
    daemon.healthy()


# ---- tags, ui kinds ----------------------------------------------------------

def test_tag_scopes_and_views(daemon):
    """A session tag dies with its session; a store tag outlives it and any
    session reads it."""
    ws = ws_of(daemon, "s1")
    ws.terminal("echo one > f")
    ws.tag("v1")
    ws.tag("pub", scope="store")
    other = ws_of(daemon, "s2")
    with other.at_tag("pub") as snap:
        assert snap.terminal("cat f").stdout == "one\n"
    with pytest.raises(ntfs.NotFound) as e:
        other.at_tag("v1")
    assert e.value.code == "ref_not_found"
    ws.end()
    third = ws_of(daemon, "s3")
    with third.at_tag("pub") as snap:
        assert snap.terminal("cat f").stdout == "one\n"
    with pytest.raises(ntfs.NotFound):
        third.at_tag("v1")
    names = {s["name"] for s in daemon.http("GET", "/v1/sessions").json["sessions"]}
    assert names == {"s2", "s3"}, "views are ended when closed"


def test_ui_kinds(daemon):
    """Each kind docs/python.md lists: a DataFrame and a Series (table), a
    matplotlib figure and a PIL image (PNG), a plotly figure (plotly JSON)."""
    ws = ws_of(daemon)
    r = ws.run_python("""
import pandas as pd
import matplotlib.pyplot as plt
import plotly.graph_objects as go
from PIL import Image
fig, ax = plt.subplots()
ax.plot([1, 2, 3])
ui = {"df": pd.DataFrame({"a": [1, 2, 3]}), "s": pd.Series([4, 5], name="b"), "fig": fig,
      "img": Image.new("RGB", (4, 4)), "bars": go.Figure(go.Bar(y=[7, 8])), "n": [1, 2]}
""")
    assert r.ok, r.stderr
    ui = r.namespace["ui"]
    assert {k: (v, v.kind) for k, v in ui.items() if isinstance(v, ArtifactPath)} == {
        "df": ("/workspace/ui/df.table.json", "table"), "s": ("/workspace/ui/s.table.json", "table"),
        "fig": ("/workspace/ui/fig.image.png", "image"), "img": ("/workspace/ui/img.image.png", "image"),
        "bars": ("/workspace/ui/bars.plotly.json", "plotly")}
    assert ui["n"] == [1, 2] and r.ui_problems == ()
    assert set(r.artifacts) == {ui[k] for k in ("df", "s", "fig", "img", "bars")}
    assert [row["a"] for row in json.loads(ws.read_artifact(ui["df"]))["data"]] == [1, 2, 3]
    assert [row["b"] for row in json.loads(ws.read_artifact(ui["s"]))["data"]] == [4, 5]
    for k in ("fig", "img"):
        assert ws.read_artifact(ui[k]).startswith(b"\x89PNG\r\n\x1a\n")
    bars = json.loads(ws.read_artifact(ui["bars"]))
    assert bars["data"][0]["type"] == "bar" and bars["data"][0]["y"] == [7, 8]
    assert ws.read_artifact("/workspace/ui/nothing.table.json") is None
    assert ws.terminal("ls ui").stdout == "bars.plotly.json\ndf.table.json\nfig.image.png\nimg.image.png\ns.table.json\n"


# ---- the session's shell and files -----------------------------------------

def test_cd_sticks_for_terminal_and_python(daemon):
    ws = ws_of(daemon)
    ws.terminal("mkdir -p a/b && cd a/b && export GREETING=hi")
    assert ws.terminal("pwd; echo $GREETING").stdout == "/workspace/a/b\nhi\n"
    r = ws.run_python("import os; open('here.txt', 'w').write('x'); print(os.getcwd().endswith('/a/b'))")
    assert r.stdout == "True\n"
    assert ws.terminal("cat here.txt").stdout == "x"
    ws.terminal("echo 'def twice(x): return 2 * x' > helper.py")
    assert ws.run_python("import helper\nprint(helper.twice(21))").stdout == "42\n"  # cwd is importable


def test_code_crosses_intact(daemon):
    """The code travels base64 on the jail's command line: every length
    modulo 3, non-ASCII text, quotes and shell characters, and exactly the
    64 KiB limit arrive as written."""
    ws = ws_of(daemon)
    for tail in ("", "x", "xy", "é", "✓'\"$(rm -rf /)`;|&\\"):
        text = "s = " + repr(tail) + "\n"
        r = ws.run_python(text)
        assert r.ok and r.namespace["s"] == tail, (tail, r.stderr)
    code = "n = 1\n"
    code += "#" * (64 * 1024 - len(code.encode()))
    assert len(code.encode()) == 64 * 1024
    assert ws.run_python(code).namespace["n"] == 1


# ---- the cache ---------------------------------------------------------------

def test_cache_survives_kill9_and_restart(scratch):
    """A saved cache outlives kill -9; a call killed before it saved leaves
    the last saved cache, whole."""
    run = Runner(scratch)
    try:
        run.start()
        ws = workspace("k", socket=run.sock)
        assert ws.run_python("cache['k'] = list(range(5)); cache['s'] = {'a': b'\\x00'}").ok
        run.kill9()
        run.start()
        r = ws.run_python("print(cache['k'], cache['s'])")
        assert r.ok, r.stderr
        assert r.stdout == "[0, 1, 2, 3, 4] {'a': b'\\x00'}\n"

        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", _catch(
            ws.run_python, "import time\ncache['k'] = 'half'\ncache['new'] = 1\nprint('in', flush=True)\n"
                           "time.sleep(120)")))
        t.start()
        deadline = time.monotonic() + 60
        while not any(e["tool"] == "run_python" and e.get("status") == "pending" for e in run.effects("k")):
            assert time.monotonic() < deadline, run.effects("k")
            time.sleep(0.1)
        time.sleep(1)  # the code is in its sleep, its cache changes not saved
        run.kill9()
        t.join(60)
        assert not t.is_alive()
        run.start()
        killed = [e for e in run.effects("k") if "'half'" in e["input"]["command"]]
        assert [e["status"] for e in killed] == ["failed"], killed  # closed at restart: in flight at the crash
        r = ws.run_python("print(sorted(cache.items()))")
        assert r.stdout == "[('k', [0, 1, 2, 3, 4]), ('s', {'a': b'\\x00'})]\n", r
        assert ws.run_python("cache['after'] = True").changed
        fsck = run.ctl("fsck")
        assert fsck.returncode == 0 and fsck.stdout.startswith("ok"), fsck.stdout + fsck.stderr
        assert run.stop() == 0
        with open(run.log_path, "rb") as f:
            log = f.read().decode(errors="replace")
        assert not [l for l in log.splitlines() if any(m in l for m in SANITIZER_MARKS)], log[-3000:]
    finally:
        run.close()


def _catch(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # the daemon was killed under the call
        return e


def test_cache_is_restored_by_rollback(daemon):
    ws = ws_of(daemon)
    ws.run_python("cache['x'] = 1")
    ws.run_python("cache['x'] = 2; cache['y'] = 'new'")
    r = ws.run_python("print(cache)")
    assert r.stdout == "{'x': 2, 'y': 'new'}\n"
    assert not r.changed, "a call that changes nothing (the cache included) makes no commit"
    later = ws.head
    ws.rollback(steps=1)
    assert ws.run_python("print(cache)").stdout == "{'x': 1}\n"
    ws.restore(later)
    assert ws.run_python("print(cache)").stdout == "{'x': 2, 'y': 'new'}\n"

    # a big value (read from its file on use) and a file written beside it go back together
    ws.run_python("cache['big'] = b'a' * 300000\nopen('f.txt', 'w').write('a')")
    ws.run_python("cache['big'] = b'b' * 300001\nopen('f.txt', 'w').write('b')")
    ws.rollback(steps=1)
    r = ws.run_python("print(len(cache['big']), cache['big'][:1], open('f.txt').read())")
    assert r.stdout == "300000 b'a' a\n", r.stderr
    ws.rollback(steps=1)
    r = ws.run_python("import os\nprint(sorted(cache), os.path.exists('f.txt'))")
    assert r.stdout == "['x', 'y'] False\n", r.stderr


def test_big_cache_values_load_on_use_and_save_on_change(daemon):
    ws = ws_of(daemon)
    assert ws.run_python("cache['blob'] = b'y' * 200000; cache['big'] = list(range(50000)); cache['s'] = 1").changed
    for code in ("cache['blob'] = b'y' * 200000",           # an equal value: nothing written
                 "x = cache['big'][3]",                      # read only
                 "print(len(cache), sorted(cache))",         # keys without values
                 "d = dict(cache); c = {**cache}; r = repr(cache)"):
        r = ws.run_python(code)
        assert r.ok and not r.changed, (code, r.stderr)
    r = ws.run_python("print(len(dict(cache)['blob']), {**cache}['big'][-1], cache.get('blob')[:2], "
                      "type(cache).__mro__[1].__name__, isinstance(cache, dict))")
    assert r.stdout == "200000 49999 b'yy' dict True\n"
    assert ws.run_python("cache['big'].append(-1)").changed
    assert ws.run_python("print(cache['big'][-2:], cache.pop('blob')[:1], sorted(cache))").stdout == \
        "[49999, -1] b'y' ['big', 's']\n"
    assert ws.run_python("import pickle, copy\nprint(pickle.loads(pickle.dumps(cache)) == copy.copy(cache))").stdout \
        == "True\n"
    keys = "['é✓' * 40, 'x' * 5000, ('t', 1), 7, None, frozenset({1})]"  # long, non-ASCII and non-string keys
    assert ws.run_python(f"for i, k in enumerate({keys}): cache[k] = i").cache_problems == ()
    r = ws.run_python(f"print([cache[k] for k in {keys}], len(cache))")
    assert r.stdout == "[0, 1, 2, 3, 4, 5] 8\n", r.stderr


def test_cache_holds_instances_of_the_codes_classes(daemon):
    ws = ws_of(daemon)
    point = "class Point:\n    def __init__(self, x):\n        self.x = x\n"
    r = ws.run_python(point + "cache['p'] = Point(3)\ncache['n'] = 1")
    assert r.ok and r.cache_problems == (), r.cache_problems
    r = ws.run_python("print(cache['n'], 'p' in cache)")  # Point is not defined: p waits, unread
    assert r.stdout == "1 True\n" and r.cache_problems == () and not r.changed
    r = ws.run_python("cache['p']")
    assert r.error["type"] == "AttributeError" and "Point" in r.error["message"]
    assert ws.run_python(point + "print(cache['p'].x)").stdout == "3\n"


def test_cache_differs_between_a_fork_and_its_origin(daemon):
    ws = ws_of(daemon)
    ws.run_python("cache['who'] = 'origin'; cache['shared'] = 1")
    f = ws.fork("f1")
    ws.run_python("cache['who'] = 'still origin'")
    f.run_python("cache['who'] = 'fork'; del cache['shared']")
    assert ws.run_python("print(sorted(cache.items()))").stdout == "[('shared', 1), ('who', 'still origin')]\n"
    assert f.run_python("print(sorted(cache.items()))").stdout == "[('who', 'fork')]\n"


def test_fork_at_a_past_point_history_and_diff(daemon):
    ws = ws_of(daemon)
    first = ws.run_python("cache['v'] = 1\nopen('a.txt', 'w').write('one\\n')").checkpoint
    second = ws.run_python("cache['v'] = 2\nopen('a.txt', 'w').write('two!\\n')\nopen('b.txt', 'w').write('b')").checkpoint
    hist = ws.history
    assert [c.id for c in hist[:2]] == [second, first]
    assert hist[0].effect and all(HEX64.fullmatch(c.id) for c in hist)
    old = ws.fork("from-first", at=first)  # a fork from a past point, its cache with it
    assert old.head == first and ws.head == second
    assert old.run_python("print(cache['v'], open('a.txt').read(), end='')").stdout == "1 one\n"
    assert ws.run_python("print(cache['v'])").stdout == "2\n"
    changes = {c.path: c for c in ws.diff(first, second)}
    cache_file = [p for p in changes if p.startswith(".ntfs/python/cache/")]
    assert set(changes) - set(cache_file) == {"a.txt", "b.txt"}
    assert len(cache_file) == 1 and cache_file[0].endswith("-s76.pkl")  # the key 'v' (hex 76), rewritten
    assert changes[cache_file[0]].kind == "modified"
    assert changes["a.txt"].kind == "modified" and (changes["a.txt"].old_size, changes["a.txt"].new_size) == (4, 5)
    assert changes["b.txt"].kind == "added"
    ws.terminal("rm b.txt")
    assert [(c.path, c.kind) for c in ws.diff(second)] == [("b.txt", "deleted")]  # to the working state


# ---- bad input ---------------------------------------------------------------

def test_bad_input_gives_clear_results(daemon):
    ws = ws_of(daemon)
    assert ws.run_python("cache['kept'] = 'yes'").ok

    r = ws.run_python("x = 5\ncache['before'] = x\ndef f():\n    raise ValueError('nope')\nf()\n")
    assert r.exit_code == 1 and not r.ok
    assert r.error["type"] == "ValueError" and r.error["message"] == "nope"
    assert 'File "<run_python>", line 5' in r.traceback and "raise ValueError('nope')" in r.traceback
    assert "ValueError: nope" in r.stderr
    assert r.namespace["x"] == 5  # what ran before the exception is kept
    assert ws.run_python("print(cache['before'])").stdout == "5\n"

    t0 = time.monotonic()
    r = ws.run_python("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # deaf to a polite stop
                      "cache['lost'] = 1\nprint('started', flush=True)\nwhile True: pass", timeout=2)
    assert time.monotonic() - t0 < 60
    assert r.timed_out and r.exit_code == 124
    assert r.error["type"] == "Timeout" and "timeout" in r.error["message"]
    assert ws.run_python("print('lost' in cache, cache['kept'])").stdout == "False yes\n"

    r = ws.run_python("import sys, os\nprint('a\\0b')\nos.write(1, b'c\\x00d\\n')\nsys.stderr.write('e\\0')")
    assert r.ok and r.stdout == "a\x00b\nc\x00d\n" and r.stderr == "e\x00"

    r = ws.run_python("import threading\ncache['lock'] = threading.Lock()\ncache['fine'] = [1]\n"
                      "cache['fn'] = lambda: 1")
    assert r.exit_code == 0
    bad = {p["key"]: p["reason"] for p in r.cache_problems}
    assert set(bad) == {"'lock'", "'fn'"}
    assert all(v.startswith("not picklable") for v in bad.values())
    assert ws.run_python("print(sorted(cache))").stdout == "['before', 'fine', 'kept']\n"

    r = ws.run_python("ui = {'odd': object(), 'gen': (i for i in []), 'ok': 1}")
    assert r.ok and r.namespace["ui"] == {"ok": 1}
    assert len(r.ui_problems) == 2
    assert r.ui_problems[0].startswith("odd: cannot render a builtins.object")
    assert r.ui_problems[1].startswith("gen: cannot render a builtins.generator")

    r = ws.run_python("import pandas as pd\nui = {'../evil': pd.DataFrame({'a': [1]}), '../plain': 2, 3: 4}")
    assert r.ok and r.namespace["ui"] == {"../plain": 2}
    assert r.ui_problems == ("../evil: the name of a value written to a file is 1..128 of letters, digits, "
                             "'_', '-' and '.' (not first)", "3: ui names are strings")
    assert ws.terminal("ls ui 2>&1; ls .. | grep -c evil").stdout.endswith("0\n")

    r = ws.run_python("x = (")
    assert r.exit_code == 1 and r.error["type"] == "SyntaxError" and "line 1" in r.error["message"]
    assert 'File "<run_python>", line 1' in r.traceback

    r = ws.run_python("import os; os._exit(3)")
    assert r.exit_code == 3 and r.error["type"] == "Ended"

    r = ws.run_python("import sys; sys.exit(4)")
    assert r.exit_code == 4 and r.error is None

    with pytest.raises(ntfs.BadRequest) as e:
        ws.run_python("#" * (64 * 1024 + 1))
    assert e.value.code == "bad_request" and "64 KiB" in e.value.message

    r = ws.run_python("big = 10 ** 30; nan = float('nan'); ok = 2 ** 62")
    assert "big" not in r.namespace and "nan" not in r.namespace and r.namespace["ok"] == 2 ** 62
    assert {o["name"] for o in r.omitted} == {"big", "nan"}

    r = ws.run_python("cache = 5\nui = 5")  # rebound to what is not a dict: reported, the cache kept
    assert r.exit_code == 0 and not r.changed
    assert [p["reason"] for p in r.cache_problems] == ["'cache' was rebound to a int; not saved"]
    assert r.ui_problems == (": 'ui' is a int, not a dict",)
    assert ws.run_python("cache = {'only': 1}").changed  # rebound to a dict: that is the cache now
    assert ws.run_python("print(cache)").stdout == "{'only': 1}\n"
    daemon.healthy()


def test_errors_carry_the_protocol_code(daemon):
    with pytest.raises(ntfs.NotFound) as e:
        workspace("nobody", socket=daemon.sock, create=False)
    assert e.value.code == "session_not_found" and e.value.status == 404
    ws = ws_of(daemon)
    ws.terminal("echo 1 > f")
    with pytest.raises(ntfs.RollbackFloor) as e:
        ws.rollback(steps=5)
    assert e.value.code == "rollback_floor"
    with pytest.raises(ntfs.Conflict) as e:
        ws.fork("user-42")
    assert e.value.code == "session_exists"
    with pytest.raises(ntfs.DaemonUnavailable):
        workspace("x", socket=os.path.join(daemon.scratch, "none.sock"))
    with pytest.raises(ValueError):
        workspace("x", root="/elsewhere", socket=daemon.sock)


def test_store_starts_a_daemon(scratch, monkeypatch):
    """With only a store, workspace() starts ntfsd for it and finds it again."""
    ntfsd = find_bin("ntfsd")
    if ntfsd is None:
        pytest.skip("ntfsd is not built")
    store = os.path.join(scratch, "store")
    monkeypatch.delenv("NTFS_SOCKET", raising=False)
    monkeypatch.setenv("NTFS_NTFSD", ntfsd)
    monkeypatch.setenv("NTFS_STORE", store)
    ws = workspace("auto")
    pid = ws._t.request("GET", "/v1/status")["pid"]
    try:
        assert ws._t.path == os.path.join(store, "ntfsd.sock")
        assert ws.run_python("print(1 + 1)").stdout == "2\n"
        again = workspace("auto")  # the same daemon answers: none is started
        assert again._t.request("GET", "/v1/status")["pid"] == pid
        with pytest.raises(ntfs.DaemonUnavailable):
            workspace("x", store=os.path.join(scratch, "other"), start=False)
    finally:
        os.kill(pid, signal.SIGTERM)  # the daemon is this process's child (workspace() started it)
        for _ in range(600):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert "error" not in open(os.path.join(store, "ntfsd.log")).read().lower()


# ---- merge -----------------------------------------------------------------

def test_merge_of_a_fork(daemon):
    ws = ws_of(daemon)
    ws.terminal("printf 'l1\\nl2\\nl3\\nl4\\nl5\\n' > shared.txt && echo base > same.txt")
    f = ws.fork("topic")
    ws.terminal("echo mine > mine.txt && sed -i 's/l1/L1/' shared.txt")
    ws.run_python("cache['mine'] = 1")
    f.terminal("echo theirs > theirs.txt && sed -i 's/l5/L5/' shared.txt")
    f.run_python("cache['from_fork'] = True")
    m = ws.merge(f)
    assert ws.head == m.checkpoint
    assert ws.terminal("cat mine.txt theirs.txt shared.txt").stdout == "mine\ntheirs\nL1\nl2\nl3\nl4\nL5\n"
    r = ws.run_python("print(sorted(cache.items()))")  # keys added on both sides merge
    assert r.stdout == "[('from_fork', True), ('mine', 1)]\n" and r.cache_problems == ()

    g = ws.fork("clash")
    ws.terminal("echo A > same.txt")
    g.terminal("echo B > same.txt")
    head = ws.head
    with pytest.raises(ntfs.MergeConflict) as e:
        ws.merge(g)
    assert [c["path"] for c in e.value.conflicts] == ["same.txt"]
    assert e.value.code == "conflict"
    assert ws.head == head and ws.read_file("same.txt") == b"A\n"
    with pytest.raises(ntfs.MergeConflict):
        ws.apply(g)              # nontainer's name for it
    h = ws.fork("later")
    h.terminal("echo applied > applied.txt")
    assert ws.apply(h).checkpoint == ws.head and ws.read_file("applied.txt") == b"applied\n"
    with ws.at_tag(head) as snap:
        with pytest.raises(ntfs.ReadOnly):
            snap.apply(h)
    names = {s["name"] for s in daemon.http("GET", "/v1/sessions").json["sessions"]}
    assert names == {"user-42", "topic", "clash", "later"}, "the merge's scratch sessions are gone"


# ---- what ntfs adds ------------------------------------------------------

def test_mount_effects_export(daemon):
    ws = ws_of(daemon)
    r = ws.run_python("open('hello.txt', 'w').write('hello from python\\n'); cache['c'] = 1")
    mp = os.path.join(daemon.scratch, "mnt")
    os.mkdir(mp)
    with ws.mount(mp) as m:
        assert open(os.path.join(m.path, "hello.txt")).read() == "hello from python\n"
    eff = ws.effects
    assert eff[-1]["tool"] == "run_python" and eff[-1]["effect_class"] == "replayable_fast"
    assert eff[-1]["input"]["command"].startswith("open('hello.txt'")
    assert eff[-1]["commit_after"] == r.checkpoint
    out = os.path.join(daemon.scratch, "ws.tar.gz")
    assert ws.export(out) > 0
    with tarfile.open(out) as t:
        names = t.getnames()
    assert any(n.endswith("hello.txt") for n in names)
    assert any(".ntfs/python" in n for n in names), "the cache folder travels with the files"


def test_run_python_through_tool_execute_and_mcp(daemon):
    s = daemon.http("POST", "/session/start", {}).json["session_id"]
    r = daemon.http("POST", "/tool/execute", {"tool_name": "run_python", "session_id": s,
                                              "tool_input": {"code": "cache['n'] = 7\nprint(6 * 7)"}})
    assert r.status == 200, r
    res = r.json["result"]
    assert res["stdout"] == "42\n" and res["tool"] == "run_python" and r.json["effect"] == "replayable_fast"
    r = daemon.http("POST", "/tool/execute", {"tool_name": "run_python", "session_id": s,
                                              "tool_input": {"code": "print(cache['n'])"}})
    assert r.json["result"]["stdout"] == "7\n"


def test_run_python_as_an_mcp_tool(daemon):
    from test_mcp import INIT, McpPipe
    mcp = find_bin("ntfs-mcp")
    if mcp is None:
        pytest.skip("ntfs-mcp is not built")
    m = McpPipe(mcp, daemon, "mcp-py")
    try:
        assert "result" in m.request(1, "initialize", INIT)
        tools = {t["name"]: t for t in m.request(2, "tools/list")["result"]["tools"]}
        assert tools["run_python"]["inputSchema"]["required"] == ["code"]
        r = m.request(3, "tools/call", {"name": "run_python",
                                        "arguments": {"code": "cache['k'] = 'v'\nx = [1, 2]\nprint('hi')"}})["result"]
        assert not r.get("isError"), r
        assert r["structuredContent"]["stdout"] == "hi\n" and r["structuredContent"]["namespace"]["x"] == [1, 2]
        text = r["content"][0]["text"]
        assert text.startswith("hi\n") and '[namespace] {"ui":{},"x":[1,2]}' in text
        r = m.request(4, "tools/call", {"name": "run_python", "arguments": {"code": "print(cache['k']); 1/0"}})
        text = r["result"]["content"][0]["text"]
        assert text.startswith("v\n[stderr]\nTraceback") and "ZeroDivisionError" in text and "[exit code 1" in text
        r = m.request(5, "tools/call", {"name": "run_python", "arguments": {"command": "x"}})
        assert r["result"].get("isError") and "command" in r["result"]["content"][0]["text"]
    finally:
        rc, err = m.close()
    assert rc == 0, err


# ---- packaging -------------------------------------------------------------

def test_pip_install_in_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-cache-dir", PKG],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    probe = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import ntfs, ntfs.workspace as w; print(ntfs.__file__); "
                            "print(ntfs.workspace, ntfs.ArtifactPath('/workspace/ui/a.table.json').kind)"],
                           capture_output=True, text=True, cwd=str(tmp_path))
    assert probe.returncode == 0, probe.stderr
    first, second = probe.stdout.splitlines()
    assert first.startswith(str(venv)) and "site-packages" in first
    assert second.endswith(" table")
    typed = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import ntfs, os; print(os.path.exists(os.path.join(os.path.dirname(ntfs.__file__), "
                            "'py.typed')))"], capture_output=True, text=True, cwd=str(tmp_path))
    assert typed.stdout.strip() == "True"
