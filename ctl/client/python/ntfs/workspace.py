# SPDX-License-Identifier: MIT
"""Workspaces: one ntfsd session each, with nontainer's surface
(docs/python.md has the reference and the correspondence table)."""
from __future__ import annotations

import base64
import os
import secrets
import shlex
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

from ._transport import Transport, find_socket, quote
from .errors import Conflict, MergeConflict, NotFound, NtfsError, ReadOnly

DEFAULT_ROOT = "/workspace"

# The ui artifact kinds run_python writes (<root>/ui/NAME.KIND.EXT).
ARTIFACT_KINDS = ("table", "image", "plotly")


class ArtifactPath(str):
    """A `str` holding the absolute path of a ui artifact, with its `kind`
    ("table", "image", "plotly"), derived from the suffix NAME.KIND.EXT."""

    kind: str

    def __new__(cls, path: str, kind: str | None = None) -> "ArtifactPath":
        self = super().__new__(cls, path)
        if kind is None:
            parts = os.path.basename(path).split(".")
            kind = parts[-2] if len(parts) >= 3 else ""
        self.kind = kind
        return self

    def __repr__(self) -> str:
        return f"ArtifactPath({str.__repr__(self)}, kind={self.kind!r})"

    def __reduce__(self) -> Any:
        return (ArtifactPath, (str(self), self.kind))


def _output(a: dict[str, Any], key: str) -> str:
    """A stream of an answer: its exact bytes when the daemon sent them as
    KEY_b64 (output that is not clean text: a NUL, bytes that are not UTF-8;
    docs/protocol.md, "Command output"), decoded with surrogateescape so
    that nothing is lost; else the text."""
    b64 = a.get(key + "_b64")
    if isinstance(b64, str):
        return base64.b64decode(b64).decode("utf-8", "surrogateescape")
    return a.get(key, "")


@dataclass(frozen=True)
class Result:
    """What one terminal or run_python call did.

    checkpoint   the commit the call made (full id), or None (a read-only call)
    stdout, stderr, exit_code, timed_out
    namespace    run_python: the code's bindings that cross as JSON, with
                 "ui" (artifacts as ArtifactPath)
    ui_problems  run_python: "name: why" for each ui value not rendered
    error        run_python: {"type", "message", "traceback"} or None
    cache_problems  run_python: {"key", "reason"} for each cache entry not saved
    omitted      run_python: {"name", "type"} for each binding that did not cross
    artifacts    run_python: the ui values written as files (ArtifactPath)
    raw          the daemon's whole answer
    """

    stdout: str
    stderr: str
    exit_code: int
    checkpoint: str | None
    short: str | None
    changed: bool
    timed_out: bool
    effect_id: int | None
    namespace: dict[str, Any] = field(default_factory=dict)
    ui_problems: tuple[str, ...] = ()
    error: dict[str, Any] | None = None
    cache_problems: tuple[dict[str, Any], ...] = ()
    artifacts: tuple[ArtifactPath, ...] = ()
    omitted: tuple[dict[str, Any], ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """exit code 0, not timed out, no exception."""
        return self.exit_code == 0 and not self.timed_out and self.error is None

    @property
    def traceback(self) -> str:
        return (self.error or {}).get("traceback", "")

    @classmethod
    def from_answer(cls, a: dict[str, Any]) -> "Result":
        arts = {x["name"]: ArtifactPath(x["path"], x.get("kind")) for x in a.get("artifacts") or ()}
        ns = dict(a.get("namespace") or {})
        if isinstance(ns.get("ui"), dict):
            ns["ui"] = {k: arts.get(k, v) if isinstance(v, str) else v for k, v in ns["ui"].items()}
        return cls(stdout=_output(a, "stdout"), stderr=_output(a, "stderr"), exit_code=int(a.get("exit_code", 0)),
                   checkpoint=a.get("checkpoint"), short=a.get("short"), changed=bool(a.get("changed", False)),
                   timed_out=bool(a.get("timed_out", False)), effect_id=a.get("effect_id"), namespace=ns,
                   ui_problems=tuple(f"{p.get('name')}: {p.get('reason')}" for p in a.get("ui_problems") or ()),
                   error=a.get("error"), cache_problems=tuple(a.get("cache_problems") or ()),
                   artifacts=tuple(arts.values()), omitted=tuple(a.get("omitted") or ()), raw=a)

    def __str__(self) -> str:
        return self.stdout


@dataclass(frozen=True)
class Commit:
    """One entry of Workspace.history (newest first)."""

    id: str
    short: str
    parents: tuple[str, ...]
    message: str
    effect: str
    time_ns: int
    tags: tuple[str, ...]


@dataclass(frozen=True)
class Change:
    """One entry of Workspace.diff: kind is added, deleted, modified, type or mode."""

    path: str
    kind: str
    old_mode: int | None = None
    new_mode: int | None = None
    old_size: int | None = None
    new_size: int | None = None


@dataclass(frozen=True)
class MergeResult:
    """A merge that applied: the workspace's new head."""

    checkpoint: str
    short: str
    fast_forward: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


class Mount:
    """A host mount of a workspace (Workspace.mount); unmount() or use it
    as a context manager."""

    def __init__(self, t: Transport, path: str, raw: dict[str, Any]) -> None:
        self._t, self.path, self.raw = t, path, raw

    def unmount(self) -> None:
        self._t.request("POST", "/v1/mounts/unmount", {"mountpoint": self.path})

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unmount()

    def __fspath__(self) -> str:
        return self.path


class Workspace:
    """One ntfsd session. Every state-changing call (terminal, run_python)
    ends with a checkpoint; the shell's working directory and exported
    variables carry from call to call (the daemon keeps them per session)."""

    def __init__(self, transport: Transport, name: str, root: str = DEFAULT_ROOT) -> None:
        if root != DEFAULT_ROOT:
            raise ValueError(f"root must be {DEFAULT_ROOT!r}: the jail binds every session there")
        self._t = transport
        self.name = name
        self.root = root

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _s(self, suffix: str = "") -> str:
        return f"/v1/sessions/{quote(self.name)}{suffix}"

    # -- the two tools ---------------------------------------------------
    def terminal(self, command: str, timeout: float | None = None,
                 tool: Literal["bash_write", "bash_read", "bash_build", "bash_run"] = "bash_write",
                 idempotency_key: str | None = None) -> Result:
        """Runs a bash command in the jail on the workspace (cwd and exported
        variables stick from call to call); a state-changing tool ends with a
        checkpoint (Result.checkpoint)."""
        return Result.from_answer(self._exec(command, tool, timeout, idempotency_key))

    def run_python(self, code: str, timeout: float | None = None, idempotency_key: str | None = None) -> Result:
        """Runs Python code with /usr/bin/python3 in the jail, in the shell's
        working directory, with `cache` (a dict kept in the workspace, so
        checkpoints, forks and rollbacks carry it) and `ui` (values to show)
        in its globals. An exception comes back in Result.error (and
        stderr), not raised; a timeout as Result.timed_out."""
        return Result.from_answer(self._exec(code, "run_python", timeout, idempotency_key))

    def _exec(self, command: str, tool: str, timeout: float | None, key: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"command": command, "tool": tool}
        if timeout is not None:
            body["timeout"] = timeout
        if key is not None:
            body["idempotency_key"] = key
        http_timeout = None if timeout is None else timeout + 60
        return self._t.request("POST", self._s("/exec"), body, timeout=http_timeout)

    # -- history -----------------------------------------------------------
    @property
    def head(self) -> str:
        """The current commit."""
        return self.info()["head"]

    def info(self) -> dict[str, Any]:
        """GET /v1/sessions/NAME: head, floor, dirty, bytes, inodes, ..."""
        return self._t.request("GET", self._s())

    def checkpoint(self, message: str | None = None) -> str:
        """Commits the working state (writes through a mount); the commit id."""
        return self._t.request("POST", self._s("/checkpoint"), {} if message is None else {"message": message})[
            "commit"]

    def fork(self, name: str, at: str | None = None) -> "Workspace":
        """A new workspace starting at this one's head (or at `at`, a commit
        or tag); constant time; this workspace is untouched."""
        body = {"name": name} if at is None else {"name": name, "at": at}
        self._t.request("POST", self._s("/fork"), body)
        return Workspace(self._t, name, self.root)

    def rollback(self, steps: int = 1) -> str:
        """Goes back `steps` checkpoints; the new head. Below the session's
        first checkpoint raises RollbackFloor."""
        return self._t.request("POST", self._s("/rollback"), {"steps": steps})["head"]

    def restore(self, commit: str) -> str:
        """Makes the workspace the state of `commit` (a full or short id, or a
        tag), e.g. a Result.checkpoint; the new head."""
        return self._t.request("POST", self._s("/rollback"), {"to": commit})["head"]

    def tag(self, name: str, scope: Literal["session", "store"] = "session", at: str | None = None) -> str:
        """Names the head (or `at`); a "session" tag ends with the session,
        a "store" tag outlives it and every session can read it. The commit."""
        body: dict[str, Any] = {"tag": name, "scope": scope}
        if at is not None:
            body["at"] = at
        return self._t.request("POST", self._s("/tags"), body)["commit"]

    def tags(self) -> list[dict[str, Any]]:
        """This session's tags and the store's."""
        return self._t.request("GET", f"/v1/tags?session={quote(self.name)}")["tags"]

    def at_tag(self, name: str) -> "FrozenWorkspace":
        """A frozen view of the commit named `name` (a tag of this session or
        of the store, or a commit): terminal reads; writes raise ReadOnly."""
        # The daemon resolves any session's tag by name; the view keeps
        # nontainer's scoping: this session's tags and the store's.
        tags = self.tags()
        if not any(t["tag"] == name and (t["scope"] == "store" or t.get("session") == self.name) for t in tags) \
                and any(t["tag"] == name for t in self._t.request("GET", "/v1/tags")["tags"]):
            raise NotFound("ref_not_found", f"tag '{name}' belongs to another session", 404)
        view = f"view-{secrets.token_hex(6)}-{name}"[:200]
        self._t.request("POST", self._s("/fork"), {"name": view, "at": name})
        return FrozenWorkspace(self._t, view, self.root, label=name)

    @property
    def history(self) -> list[Commit]:
        """The session's commits, newest first."""
        return self.log()

    def log(self, max: int | None = None) -> list[Commit]:
        q = "" if max is None else f"?max={int(max)}"
        return [Commit(c["commit"], c["short"], tuple(c.get("parents") or ()), c.get("message", ""),
                       c.get("effect", ""), c.get("time", 0), tuple(c.get("tags") or ()))
                for c in self._t.request("GET", self._s("/log" + q))["commits"]]

    def diff(self, a: str, b: str | None = None) -> list[Change]:
        """What changed from commit (or tag) a to b (default: the working state)."""
        q = f"?from={quote(a)}" + ("" if b is None else f"&to={quote(b)}")
        return [Change(c["path"], c["kind"], c.get("old_mode"), c.get("new_mode"), c.get("old_size"),
                       c.get("new_size")) for c in self._t.request("GET", self._s("/diff" + q))["changes"]]

    def merge(self, other: "Workspace | str", base: str | None = None) -> MergeResult:
        """Applies the changes `other` (a fork) made since it left this
        workspace onto this one: a three-way merge (docs/trunk.md) of their
        common base, this head and other's head. Both sides' changes to
        different paths (or different lines of a text file) merge; otherwise
        MergeConflict lists each path. base: the common commit (default:
        found from the two histories)."""
        oname = other.name if isinstance(other, Workspace) else other
        theirs = Workspace(self._t, oname, self.root)
        mine_head, their_head = self.head, theirs.head
        if base is None:
            base = _merge_base(self, theirs)
        if base is None:
            raise NotFound("ref_not_found", f"'{self.name}' and '{oname}' share no commit", 404)
        tmp = f"merge-{secrets.token_hex(6)}"
        names = [f"{tmp}-base", f"{tmp}-a", f"{tmp}-b"]
        t = self._t
        try:
            t.request("POST", "/v1/sessions", {"name": names[0], "from": base})
            t.request("POST", "/v1/trunks", {"name": tmp, "from": names[0]})
            t.request("POST", f"/v1/trunks/{tmp}/forks", {"session": names[1], "version": 1})
            t.request("POST", f"/v1/sessions/{names[1]}/rollback", {"to": mine_head})
            t.request("POST", f"/v1/forks/{names[1]}/commit", {})
            t.request("POST", f"/v1/trunks/{tmp}/forks", {"session": names[2], "version": 1})
            t.request("POST", f"/v1/sessions/{names[2]}/rollback", {"to": their_head})
            try:
                res = t.request("POST", f"/v1/forks/{names[2]}/commit", {})
            except Conflict as e:
                body = e.body if isinstance(e.body, dict) else {}
                raise MergeConflict(f"merging '{oname}' into '{self.name}': {len(body.get('conflicts', []))} "
                                    "conflicting path(s)", body.get("conflicts", []), body) from None
            head = self.restore(res["commit"])
            return MergeResult(head, res.get("short", head[:7]), bool(res.get("fast_forward")), res)
        finally:
            for n in names:
                try:
                    t.request("DELETE", f"/v1/sessions/{n}")
                except NtfsError:
                    pass

    def apply(self, other: "Workspace | str", base: str | None = None) -> MergeResult:
        """nontainer's other name for merge: brings a fork's changes back."""
        return self.merge(other, base)

    # -- files -----------------------------------------------------------
    def read_file(self, path: str) -> bytes:
        """A file's bytes (read in the jail, read-only); NotFound when it
        cannot be read."""
        r = self._exec(f"base64 -w0 -- {shlex.quote(path)}", "bash_read", None, None)
        if r.get("exit_code") != 0:
            raise NotFound("not_found", f"{path}: {r.get('stderr', '').strip()}", 404)
        return base64.b64decode(r.get("stdout", ""))

    def read_artifact(self, path: str) -> bytes | None:
        """An artifact's (or any file's) bytes, or None if it cannot be read."""
        try:
            return self.read_file(path)
        except NtfsError:
            return None

    # -- what ntfs adds --------------------------------------------------
    def mount(self, path: str, ro: bool = False, autocheckpoint: float | None = None) -> Mount:
        """Mounts the workspace on the host at `path` (an existing empty
        directory); files written there are checkpointed by checkpoint(),
        the next tool call, or autocheckpoint seconds after writes stop."""
        body: dict[str, Any] = {"session": self.name, "mountpoint": os.path.abspath(path), "ro": ro}
        if autocheckpoint is not None:
            body["autocheckpoint"] = autocheckpoint
        return Mount(self._t, body["mountpoint"], self._t.request("POST", "/v1/mounts", body))

    @property
    def effects(self) -> list[dict[str, Any]]:
        """The session's journal rows (every tool call), in order."""
        return self._t.request("GET", self._s("/effects"))["effects"]

    def export(self, path: str, at: str | None = None, format: str | None = None) -> int:
        """Writes the head (or `at`) as a tarball at `path` (format from the
        suffix: .tar, .tar.gz/.tgz, .tar.zst); its size in bytes."""
        if format is None:
            format = next((f for s, f in ((".tar.gz", "tar.gz"), (".tgz", "tgz"), (".tar.zst", "tar.zst"))
                           if path.endswith(s)), "tar")
        q = f"?format={quote(format)}" + ("" if at is None else f"&at={quote(at)}")
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            n = self._t.download(self._s("/export" + q), f)
        os.replace(tmp, path)
        return n

    def end(self) -> None:
        """Ends the session (its session-scoped tags go with it)."""
        self._t.request("DELETE", self._s())


class FrozenWorkspace(Workspace):
    """A read-only view of one commit (Workspace.at_tag): terminal runs
    read-only (a write raises ReadOnly), run_python, rollback, restore, tag
    and merge raise ReadOnly. close() (or a with block) ends the view."""

    def __init__(self, transport: Transport, name: str, root: str, label: str) -> None:
        super().__init__(transport, name, root)
        self.label = label
        self._fin = weakref.finalize(self, _end_quietly, transport, name)

    def __repr__(self) -> str:
        return f"FrozenWorkspace(at={self.label!r})"

    def _refuse(self, what: str) -> ReadOnly:
        return ReadOnly("read_only", f"{what}: the view at '{self.label}' is frozen", 409)

    def terminal(self, command: str, timeout: float | None = None, tool: Any = "bash_read",
                 idempotency_key: str | None = None) -> Result:
        if tool != "bash_read":
            raise self._refuse(tool)
        r = Result.from_answer(self._exec(command, "bash_read", timeout, idempotency_key))
        if r.exit_code != 0 and "Read-only file system" in r.stderr:
            raise ReadOnly("read_only", f"the view at '{self.label}' is frozen: {r.stderr.strip()}", 409, r.raw)
        return r

    def run_python(self, code: str, timeout: float | None = None, idempotency_key: str | None = None) -> Result:
        raise self._refuse("run_python")

    def rollback(self, steps: int = 1) -> str:
        raise self._refuse("rollback")

    def restore(self, commit: str) -> str:
        raise self._refuse("restore")

    def tag(self, name: str, scope: Literal["session", "store"] = "session", at: str | None = None) -> str:
        raise self._refuse("tag")

    def merge(self, other: "Workspace | str", base: str | None = None) -> MergeResult:
        raise self._refuse("merge")

    def checkpoint(self, message: str | None = None) -> str:
        raise self._refuse("checkpoint")

    def mount(self, path: str, ro: bool = True, autocheckpoint: float | None = None) -> Mount:
        if not ro:
            raise self._refuse("a read-write mount")
        return super().mount(path, ro=True)

    def close(self) -> None:
        self._fin()

    end = close

    def __enter__(self) -> "FrozenWorkspace":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _end_quietly(t: Transport, name: str) -> None:
    try:
        t.request("DELETE", f"/v1/sessions/{quote(name)}", timeout=5)
    except (NtfsError, OSError):
        pass


def _ancestors(ws: Workspace) -> Iterator[str]:
    for c in ws.log(max=100000):
        yield c.id


def _merge_base(a: Workspace, b: Workspace) -> str | None:
    """The newest commit of b's history that is in a's."""
    mine = set(_ancestors(a))
    return next((c for c in _ancestors(b) if c in mine), None)


def workspace(name: str, root: str = DEFAULT_ROOT, *, socket: str | None = None, store: str | None = None,
              start: bool | None = None, create: bool = True, timeout: float | None = None) -> Workspace:
    """The workspace (ntfsd session) `name`, made when it does not exist.

    The daemon is found at `socket`, else $NTFS_SOCKET, else STORE/ntfsd.sock
    (STORE: `store` or $NTFS_STORE), and started for the store when none
    answers (start=False: never). create=False: NotFound for a missing one."""
    t = Transport(find_socket(socket, store, start), timeout)
    if create:
        try:
            t.request("POST", "/v1/sessions", {"name": name})
        except Conflict as e:
            if e.code != "session_exists":
                raise
    else:
        t.request("GET", f"/v1/sessions/{quote(name)}")
    return Workspace(t, name, root)


__all__ = ["ArtifactPath", "Change", "Commit", "FrozenWorkspace", "MergeResult", "Mount", "Result", "Workspace",
           "workspace"]
