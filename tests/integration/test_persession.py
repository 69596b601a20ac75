# SPDX-License-Identifier: MIT
"""The per-session socket answers only for its own session and only for
checkpoint, tag, log, diff and status; everything else is refused with a
clear error, and the socket goes away with its session."""
import json
import os

from ctl_fixtures import build_request, connect, daemon, read_response  # noqa: F401 (fixture)


def call(path, method, url, body=None):
    s = connect(path, 10)
    try:
        s.sendall(build_request(method, url, body))
        r = read_response(s, 10)
        return r.status, json.loads(r.body) if r.body else None
    finally:
        s.close()


def test_per_session_socket(daemon):
    daemon.ok("session", "new", "a")
    daemon.ok("session", "new", "b")
    r = daemon.http("POST", "/v1/sessions/a/socket", body={})
    assert r.status == 201, r.body
    path = json.loads(r.body)["socket"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"

    # allowed, for its own session
    st, b = call(path, "GET", "/v1/status")
    assert st == 200 and b["name"] == "a" and b["scope"] == "session"
    st, b = call(path, "POST", "/v1/sessions/a/checkpoint", {"message": "via own socket"})
    assert st == 200 and "commit" in b
    st, b = call(path, "POST", "/v1/sessions/a/tags", {"tag": "t1"})
    assert st == 201
    st, b = call(path, "GET", "/v1/sessions/a/log")
    # a named checkpoint is in the log even with nothing changed (docs/protocol.md)
    assert st == 200 and [c["message"] for c in b["commits"]] == ["via own socket", "session created"]
    st, b = call(path, "GET", "/v1/sessions/a/diff?from=t1")
    assert st == 200 and b["changes"] == []

    # another session: refused, with the reason
    for method, url, body in [("POST", "/v1/sessions/b/checkpoint", {}),
                              ("GET", "/v1/sessions/b/log", None),
                              ("POST", "/v1/sessions/b/tags", {"tag": "x"})]:
        st, b = call(path, method, url, body)
        assert st == 403 and b["error"]["code"] == "policy_denied", (url, b)
        assert "only for session 'a'" in b["error"]["message"]

    # operations outside the list: refused, even for its own session
    for method, url, body in [("POST", "/v1/sessions/a/exec", {"command": "true"}),
                              ("POST", "/v1/sessions/a/fetch", {"url": "http://x/"}),
                              ("POST", "/v1/sessions/a/rollback", {"steps": 1}),
                              ("POST", "/v1/sessions", {"name": "c"}),
                              ("GET", "/v1/sessions", None),
                              ("DELETE", "/v1/sessions/a", None),
                              ("POST", "/v1/mounts", {"session": "a", "mountpoint": "/tmp"}),
                              ("POST", "/tool/execute", {"tool_name": "bash_run",
                                                         "tool_input": {"command": "true"}}),
                              ("POST", "/v1/gc", {})]:
        st, b = call(path, method, url, body)
        assert st == 403 and b["error"]["code"] == "policy_denied", (url, st, b)
    # nothing of that happened
    assert daemon.http("GET", "/v1/sessions/c").status == 404

    # a second socket for the same session is refused; closing works
    assert daemon.http("POST", "/v1/sessions/a/socket", body={}).status == 409
    # the socket goes with its session
    daemon.ok("session", "end", "a")
    assert not os.path.exists(path)
    daemon.healthy()
