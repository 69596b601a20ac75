# SPDX-License-Identifier: MIT
"""ntfs — the Python client of ntfsd (docs/python.md).

nontainer's workspace API over ntfsd's control socket: `workspace(name)`
gives a versioned, forkable workspace with a jailed `terminal` and
`run_python` (a persistent `cache`, `ui` artifacts). Standard library only.
"""
from .errors import (BadRequest, Conflict, DaemonUnavailable, MergeConflict, NotFound, NtfsError, PolicyDenied,
                     ReadOnly, RollbackFloor)
from .workspace import (ARTIFACT_KINDS, ArtifactPath, Change, Commit, FrozenWorkspace, MergeResult, Mount, Result,
                        Workspace, workspace)

__version__ = "0.1.0"

__all__ = ["ARTIFACT_KINDS", "ArtifactPath", "BadRequest", "Change", "Commit", "Conflict", "DaemonUnavailable",
           "FrozenWorkspace", "MergeConflict", "MergeResult", "Mount", "NotFound", "NtfsError", "PolicyDenied",
           "ReadOnly", "Result", "RollbackFloor", "Workspace", "workspace"]
