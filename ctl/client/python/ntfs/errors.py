# SPDX-License-Identifier: MIT
"""Exceptions: every error of the protocol arrives as an NtfsError (or a
subclass) carrying its stable code (docs/protocol.md, "Errors")."""
from __future__ import annotations

from typing import Any


class NtfsError(Exception):
    """An error answer of ntfsd: `code` (e.g. "session_not_found"), the HTTP
    `status`, the daemon's `message`, and the whole answer as `body`."""

    def __init__(self, code: str, message: str, status: int = 0, body: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.body = body


class DaemonUnavailable(NtfsError):
    """No ntfsd answers on the socket (code "unavailable")."""


class NotFound(NtfsError):
    """session_not_found, ref_not_found, not_found."""


class RollbackFloor(NtfsError):
    """rollback_floor: the session's first checkpoint is as far back as it goes."""


class Conflict(NtfsError):
    """session_exists, tag_exists, ambiguous_ref, already_mounted, conflict, busy."""


class MergeConflict(Conflict):
    """A merge that conflicts: `conflicts` lists each path with its reason
    and both sides (docs/trunk.md)."""

    def __init__(self, message: str, conflicts: list[dict[str, Any]], body: Any = None) -> None:
        super().__init__("conflict", message, 409, body)
        self.conflicts = conflicts


class ReadOnly(NtfsError):
    """A write through a frozen view (Workspace.at_tag), code "read_only"."""


class PolicyDenied(NtfsError):
    """policy_denied, permission_denied, quota_exceeded."""


class BadRequest(NtfsError):
    """bad_request, invalid_name and the other 4xx codes of a malformed request."""


_BY_CODE: dict[str, type[NtfsError]] = {
    "session_not_found": NotFound, "ref_not_found": NotFound, "not_found": NotFound,
    "rollback_floor": RollbackFloor,
    "session_exists": Conflict, "tag_exists": Conflict, "ambiguous_ref": Conflict,
    "already_mounted": Conflict, "conflict": Conflict, "busy": Conflict, "exists": Conflict,
    "read_only": ReadOnly,
    "policy_denied": PolicyDenied, "permission_denied": PolicyDenied, "quota_exceeded": PolicyDenied,
    "bad_request": BadRequest, "invalid_name": BadRequest, "not_a_directory": BadRequest,
}


def error_for(code: str, message: str, status: int, body: Any = None) -> NtfsError:
    """The exception for an error answer (its class chosen by code)."""
    return _BY_CODE.get(code, NtfsError)(code, message, status, body)
