# SPDX-License-Identifier: MIT
"""The reference docs against the code, both ways: a route, an MCP tool or a
program in tools/ that exists without its doc entry, or an entry whose thing
is gone, fails here (the command line's twin is
test_ctl.py::test_cli_md_matches_help).

- routes: the patterns the daemon registers (the "METHOD /path" string
  literals of every C file outside tests/ that calls ntfs_router_add; the
  fuzzers' toy routers aside) are exactly the routes of docs/protocol.md's
  "Route index"; every route that page or docs/mcp.md names anywhere
  (headings, tables, prose) is one of them; and a running ntfsd serves each
  route of the index: asked with a method nobody registers (OPTIONS), it
  answers 405 and its Allow header names the documented method (the
  catch-all routes of a per-session socket are asked on such a socket).
- MCP tools: the names a running ntfs-mcp answers to tools/list are exactly
  the rows of docs/mcp.md's "Tools" table, and each row names every argument
  of its tool's input schema.
- tools/: every script in tools/ (*.sh, *.py, any executable file) and every
  executable() of tools/meson.build has a "## NAME" entry in docs/tools.md,
  and every entry names one that exists.

Files are found by walking the tree, not by a list of paths, so moving a
route module or a tool between folders needs no change here.
"""
import json
import os
import re
import stat
import subprocess
import urllib.parse

import pytest

from conftest import find_bin
from ctl_fixtures import Daemon, connect, read_response, stop_and_check

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOCS = os.path.join(ROOT, "docs")
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
ROUTE_RE = re.compile(r"^(%s) (/\S*)$" % "|".join(METHODS))
# a route named in Markdown: `METHOD /path...` in backticks, or a heading
DOC_ROUTE_RE = re.compile(r"`(%s) (/[^`\s?\[]*)[^`]*`|^#+ (%s) (/[^\s?\[]*)" % ("|".join(METHODS), "|".join(METHODS)),
                          re.M)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def section(text, title):
    """The body of the Markdown section titled `title` (any level), up to
    the next heading of the same or a higher level."""
    m = re.search(r"^(#+) %s[ \t]*$" % re.escape(title), text, re.M)
    assert m, f"no section '{title}'"
    level = len(m.group(1))
    end = re.compile(r"^#{1,%d} " % level, re.M).search(text, m.end())
    return text[m.end():end.start() if end else len(text)]


def table_rows(text):
    """The data rows of the Markdown tables in text (header rows and
    separator lines left out), as lists of cells."""
    rows, lines = [], [l.strip() for l in text.splitlines()]
    sep = re.compile(r"^\|[\s|:-]+\|$")
    for i, line in enumerate(lines):
        if not line.startswith("|") or sep.match(line):
            continue
        if i + 1 < len(lines) and sep.match(lines[i + 1]):
            continue  # a header
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


# ---- routes ---------------------------------------------------------------------

def is_build_dir(path):
    return os.path.exists(os.path.join(path, "build.ninja")) or os.path.isdir(os.path.join(path, "meson-private"))


def c_sources():
    """Every *.c of the product: the tree minus .git, build directories,
    tests/ and node_modules."""
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and d not in ("tests", "node_modules", "subprojects")
                             and not is_build_dir(os.path.join(dirpath, d)))
        for f in sorted(filenames):
            if f.endswith(".c"):
                yield os.path.join(dirpath, f)


def c_split(src):
    """(code, strings) of C source src: the code with comments, string
    literals and character constants blanked, and the string literals
    (adjacent ones joined)."""
    code, strings, i, n = [], [], 0, len(src)
    joining = False
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
            code.append(" ")
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j, buf = i + 1, []
            while j < n and src[j] != c:
                step = 2 if src[j] == "\\" else 1
                buf.append(src[j:j + step])
                j += step
            if c == '"':
                if joining:
                    strings[-1] += "".join(buf)
                else:
                    strings.append("".join(buf))
                joining = True
            code.append(c + c)
            i = j + 1
        else:
            if not c.isspace():
                joining = False
            code.append(c)
            i += 1
    return "".join(code), strings


def code_routes():
    """{"METHOD /pattern": [files]} of every route the daemon registers."""
    routes, callers = {}, []
    for path in c_sources():
        if os.path.basename(path).startswith("fuzz"):
            continue  # a fuzzer's toy router, not the daemon's
        code, strings = c_split(read(path))
        if not re.search(r"\bntfs_router_add(_table)?\s*\(", code) or re.search(r"\bint\s+ntfs_router_add\s*\(", code):
            continue  # not a caller, or the router itself
        callers.append(os.path.relpath(path, ROOT))
        for s in strings:
            if ROUTE_RE.match(s):
                routes.setdefault(s, []).append(os.path.relpath(path, ROOT))
    assert callers, "no C file calls ntfs_router_add: has the router been renamed?"
    assert "GET /v1/status" in routes and "POST /v1/sessions" in routes, \
        f"the route scan found too little ({sorted(routes)} in {callers})"
    return routes


def doc_routes(text):
    """The routes named anywhere in text (query strings dropped)."""
    found = set()
    for m in DOC_ROUTE_RE.finditer(text):
        method, path = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        found.add(f"{method} {path}")
    return found


@pytest.fixture(scope="module")
def protocol():
    return read(os.path.join(DOCS, "protocol.md"))


def index_routes(protocol):
    """The routes of the "Route index" table (first column)."""
    routes = set()
    for row in table_rows(section(protocol, "Route index")):
        routes |= doc_routes(row[0])
    return routes


def test_every_registered_route_is_in_the_route_index(protocol):
    code = code_routes()
    index = index_routes(protocol)
    missing = sorted(set(code) - index)
    assert not missing, ("routes registered but not in docs/protocol.md's Route index:\n  " +
                         "\n  ".join(f"{r}   ({', '.join(sorted(set(code[r])))})" for r in missing))
    gone = sorted(index - set(code))
    assert not gone, "routes in docs/protocol.md's Route index that no C file registers:\n  " + "\n  ".join(gone)


def test_every_route_named_in_protocol_md_exists(protocol):
    code = set(code_routes())
    named = doc_routes(protocol)
    assert index_routes(protocol) <= named
    unknown = sorted(named - code)
    assert not unknown, "docs/protocol.md names routes that no C file registers:\n  " + "\n  ".join(unknown)


def test_routes_named_in_mcp_md_exist():
    """The daemon requests docs/mcp.md says each tool makes (NAME standing
    for the session, {name} in the pattern) are registered routes."""
    code = set(code_routes())
    named = {r.replace("/NAME/", "/{name}/").replace("/NAME", "/{name}")
             for r in doc_routes(read(os.path.join(DOCS, "mcp.md")))}
    assert named, "docs/mcp.md names no route"
    unknown = sorted(named - code)
    assert not unknown, "docs/mcp.md names routes that no C file registers:\n  " + "\n  ".join(unknown)


def concrete(pattern_path):
    """A request path matching the pattern path: {param} -> a name."""
    return re.sub(r"\{(\w+)\*?\}", lambda m: "drift-" + m.group(1), pattern_path)


def probe(sock, path):
    """(status, allowed methods) of OPTIONS path on sock."""
    s = connect(sock, 30)
    try:
        s.sendall(f"OPTIONS {path} HTTP/1.1\r\nHost: ntfs\r\nConnection: close\r\n\r\n".encode())
        r = read_response(s, 30)
    finally:
        s.close()
    return r.status, {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}


def test_ntfsd_serves_every_documented_route(protocol, scratch):
    """Asks the running daemon: each route of the index answers OPTIONS with
    405 naming its method. A catch-all route (a path that is one {x*}
    capture) exists only on a per-session socket and is asked there; every
    other route is asked on the main socket."""
    d = Daemon(scratch)
    try:
        assert d.http("POST", "/v1/sessions", {"name": "drift"}).status in (200, 201)
        r = d.http("POST", "/v1/sessions/drift/socket", {})
        assert r.status == 201, r
        per_session = r.json["socket"]
        missing = []
        for route in sorted(index_routes(protocol)):
            method, path = route.split(" ", 1)
            sock = per_session if re.fullmatch(r"/\{\w+\*\}", path) else d.sock
            url = urllib.parse.quote(concrete(path), safe="/")
            status, allow = probe(sock, url)
            if status != 405 or method not in allow:
                missing.append(f"{route}  (OPTIONS {url} on {os.path.basename(sock)}: {status} {sorted(allow)})")
        assert not missing, "documented in docs/protocol.md but not served by ntfsd:\n  " + "\n  ".join(missing)
        assert d.http("DELETE", "/v1/sessions/drift/socket").status == 200
    finally:
        stop_and_check(d, scratch)


# ---- MCP tools --------------------------------------------------------------------

def mcp_tools(mcp, sock):
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "test_docs_drift", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    p = subprocess.run([mcp, "--session", "drift", "--create", "--socket", sock],
                       input="".join(json.dumps(m) + "\n" for m in msgs),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ntfs-mcp exited {p.returncode}: {p.stderr}"
    for line in p.stdout.splitlines():
        o = json.loads(line)
        if o.get("id") == 2:
            assert "result" in o, o
            return {t["name"]: t for t in o["result"]["tools"]}
    raise AssertionError(f"no answer to tools/list: {p.stdout!r} {p.stderr!r}")


def mcp_doc_rows():
    """{tool: arguments cell} of docs/mcp.md's Tools table; a cell "same"
    means the arguments of the row above."""
    rows, prev = {}, None
    for row in table_rows(section(read(os.path.join(DOCS, "mcp.md")), "Tools")):
        m = re.fullmatch(r"`([^`]+)`", row[0])
        assert m, f"docs/mcp.md, Tools: a row whose first cell is not one `tool`: {row}"
        args = row[1] if len(row) > 1 else ""
        if args.split(" ")[0] == "same" and prev is not None:
            args = prev
        rows[m.group(1)] = prev = args
    assert rows, "docs/mcp.md's Tools section has no table"
    return rows


def test_mcp_tools_match_mcp_md(scratch):
    mcp = find_bin("ntfs-mcp")
    if mcp is None:
        pytest.skip("ntfs-mcp is not built")
    d = Daemon(scratch)
    try:
        tools = mcp_tools(mcp, d.sock)
    finally:
        stop_and_check(d, scratch)
    rows = mcp_doc_rows()
    missing = sorted(set(tools) - set(rows))
    assert not missing, f"ntfs-mcp lists tools that docs/mcp.md's Tools table lacks: {missing}"
    gone = sorted(set(rows) - set(tools))
    assert not gone, f"docs/mcp.md's Tools table has tools ntfs-mcp does not list: {gone}"
    undocumented = [f"{name}: `{arg}`" for name, t in sorted(tools.items())
                    for arg in sorted(t.get("inputSchema", {}).get("properties", {}))
                    if f"`{arg}`" not in rows[name]]
    assert not undocumented, "tool arguments missing from docs/mcp.md's Tools table:\n  " + "\n  ".join(undocumented)


# ---- tools/ ---------------------------------------------------------------------

def tool_dirs():
    """Every folder named tools/ in the tree (not under tests/ or a build)."""
    for dirpath, dirnames, _ in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and d not in ("tests", "node_modules", "subprojects")
                             and not is_build_dir(os.path.join(dirpath, d)))
        if os.path.basename(dirpath) == "tools":
            yield dirpath


def repo_tools():
    """{name: where} of the programs in tools/: its scripts and executable
    files, and the executables its meson.build builds."""
    tools = {}
    for d in tool_dirs():
        rel = os.path.relpath(d, ROOT)
        for f in sorted(os.listdir(d)):
            p = os.path.join(d, f)
            if not os.path.isfile(p) or f == "meson.build":
                continue
            executable = os.stat(p).st_mode & stat.S_IXUSR
            if f.endswith((".sh", ".py")) or (executable and not f.endswith((".c", ".h"))):
                tools[f] = f"{rel}/{f}"
        mb = os.path.join(d, "meson.build")
        if os.path.exists(mb):
            code = re.sub(r"#[^\n]*", "", read(mb))
            for m in re.finditer(r"\bexecutable\s*\(\s*'([^']+)'", code):
                tools[m.group(1)] = f"{rel}/meson.build"
    assert tools, "no tools/ folder with programs found"
    return tools


def test_every_tool_has_an_entry_in_tools_md():
    doc = read(os.path.join(DOCS, "tools.md"))
    entries = re.findall(r"^## `?([^`\s]+)`?[ \t]*$", doc, re.M)
    tools = repo_tools()
    missing = sorted(set(tools) - set(entries))
    assert not missing, ("programs in tools/ without a '## NAME' entry in docs/tools.md:\n  " +
                         "\n  ".join(f"{t}  ({tools[t]})" for t in missing))
    gone = sorted(set(entries) - set(tools))
    assert not gone, f"docs/tools.md has entries for tools that do not exist: {gone}"
    dup = sorted({e for e in entries if entries.count(e) > 1})
    assert not dup, f"docs/tools.md has several entries for {dup}"
