/* SPDX-License-Identifier: MIT
 * ntfs-ctl's command table: for each command its name, group, synopsis,
 * summary, help text, flags, positional bounds and handler. The table is
 * the one place a command is declared: dispatch, the `--help` overview,
 * `help COMMAND` and docs/cli.md (tools/gen-cli-md.py) all come from it.
 *
 * Adding a command: write its handler in the file of its group (declared in
 * cli.h), add a row here where the overview should list it, and regenerate
 * docs/cli.md.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

/* ---- flags: the options a command takes (struct flagspec) -------------------- */

static const struct flagspec no_flags[] = { { NULL, 0, false } };
static const struct flagspec trunk_version_flags[] = { { "version", 0, true }, { NULL, 0, false } };
static const struct flagspec from_flags[] = { { "from", 0, true }, { NULL, 0, false } };
static const struct flagspec mount_flags[] = { { "ro", 0, false },
                                               { "at", 0, true },
                                               { "autocheckpoint", 0, true },
                                               { "autocheckpoint-max", 0, true },
                                               { "relatime", 0, false },
                                               { NULL, 0, false } };
static const struct flagspec checkpoint_flags[] = { { "message", 'm', true }, { NULL, 0, false } };
static const struct flagspec at_flags[] = { { "at", 0, true }, { NULL, 0, false } };
static const struct flagspec tag_flags[] = { { "at", 0, true }, { "scope", 0, true }, { NULL, 0, false } };
static const struct flagspec rollback_flags[] = { { "to", 0, true }, { "steps", 0, true }, { NULL, 0, false } };
static const struct flagspec log_flags[] = { { "max-count", 'n', true }, { NULL, 0, false } };
static const struct flagspec exec_flags[] = {
        { "tool", 0, true }, { "timeout", 0, true }, { "idempotency-key", 0, true }, { "tty", 't', false },
        { "no-stdin", 'n', false }, { NULL, 0, false }
};
static const struct flagspec effects_flags[] = { { "limit", 'n', true }, { NULL, 0, false } };
static const struct flagspec fetch_flags[] = { { "method", 0, true }, { "idempotency-key", 0, true }, { NULL, 0, false } };
static const struct flagspec replay_flags[] = { { "into", 0, true }, { "from", 0, true }, { NULL, 0, false } };
static const struct flagspec quota_flags[] = { { "bytes", 0, true }, { "inodes", 0, true }, { NULL, 0, false } };
static const struct flagspec export_flags[] = {
        { "format", 0, true }, { "at", 0, true }, { "quiet", 'q', false }, { "no-sync", 0, false },
        { "keep-setid", 0, false }, { NULL, 0, false }
};
static const struct flagspec import_flags[] = { { "message", 'm', true },
                                                { "max-entries", 0, true },
                                                { "max-bytes", 0, true },
                                                { "quiet", 'q', false },
                                                { NULL, 0, false } };

static const struct flagspec remote_add_flags[] = {
        { "access-key", 0, true }, { "secret-key", 0, true }, { "region", 0, true }, { NULL, 0, false }
};
static const struct flagspec push_flags[] = { { "tags", 0, false }, { "quiet", 'q', false }, { NULL, 0, false } };
static const struct flagspec pull_flags[] = { { "merge", 0, false }, { "quiet", 'q', false }, { NULL, 0, false } };
static const struct flagspec clone_flags[] = { { "quiet", 'q', false }, { NULL, 0, false } };
static const struct flagspec web_flags[] = { { "port", 'p', true }, { NULL, 0, false } };
static const struct flagspec compact_flags[] = { { "quiet", 'q', false }, { "remount", 0, false },
                                                 { NULL, 0, false } };
static const struct flagspec prune_flags[] = { { "grace", 0, true }, { "dry-run", 'n', false }, { NULL, 0, false } };

/* ---- the table ------------------------------------------------------------------ */

const struct cmd cli_commands[] = {
        {
                .name = "status",
                .group = CLI_GROUP_STORE,
                .synopsis = "",
                .summary = "show the daemon, the store and its mounts",
                .help = "Shows ntfsd's version and pid, the store directory, the number of sessions,\n"
                        "tags and objects, the size of the store's database (objects:, in brackets),\n"
                        "the disk space of the working data files (working data: file content written\n"
                        "since the last checkpoints; in brackets, how much of it is freed content\n"
                        "kept for reuse, given back once the store is idle), the store file's\n"
                        "space (store file: the live bytes, the free pages inside the file that\n"
                        "later writes reuse, what 'ntfs-ctl compact' would give back, and its size\n"
                        "on disk with the held reserve), the jail's cgroup controls and every\n"
                        "mount.\n"
                        "\nExample:\n  ntfs-ctl status\n",
                .flags = no_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_status,
        },
        {
                .name = "session new",
                .group = CLI_GROUP_SESSIONS,
                .synopsis = "NAME [--from SESSION|COMMIT|TAG]",
                .summary = "create a session",
                .help = "Creates the session NAME: empty, or starting from the head of another session,\n"
                        "a commit (full id or unique prefix) or a tag. Prints its head.\n"
                        "\nOptions:\n  --from REF   start from this session, commit or tag\n"
                        "\nExamples:\n  ntfs-ctl session new main\n  ntfs-ctl session new try2 --from v1\n",
                .flags = from_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_session_new,
        },
        {
                .name = "session ls",
                .group = CLI_GROUP_SESSIONS,
                .synopsis = "",
                .summary = "list sessions",
                .help = "Lists every session: name, head (short id), whether the working state has\n"
                        "changed since the head, bytes and inodes used, creation time and mounts.\n"
                        "\nExample:\n  ntfs-ctl session ls\n",
                .flags = no_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_session_ls,
        },
        {
                .name = "session show",
                .group = CLI_GROUP_SESSIONS,
                .synopsis = "NAME",
                .summary = "show one session",
                .help = "Shows the session's head (full id), its rollback floor, dirty state, usage,\n"
                        "quota, creation time and mounts.\n"
                        "\nExample:\n  ntfs-ctl session show main\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_session_show,
        },
        {
                .name = "session end",
                .group = CLI_GROUP_SESSIONS,
                .synopsis = "NAME",
                .summary = "end a session",
                .help = "Ends the session NAME: its mounts are unmounted first. Its commits stay\n"
                        "reachable through tags.\n"
                        "\nExample:\n  ntfs-ctl session end try2\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_session_end,
        },
        {
                .name = "mount",
                .group = CLI_GROUP_SESSIONS,
                .synopsis = "NAME MOUNTPOINT [--ro] [--at COMMIT|TAG] [--autocheckpoint IDLE_SECONDS] [--relatime]",
                .summary = "mount a session (or a past commit) on a directory",
                .help = "Mounts the working state of session NAME on the existing directory MOUNTPOINT\n"
                        "(made absolute before it is sent). With --at, mounts that commit or tag\n"
                        "read-only instead.\n"
                        "\nOptions:\n"
                        "  --ro                        mount read-only (writes fail with EROFS)\n"
                        "  --at REF                    mount this commit or tag (implies read-only)\n"
                        "  --autocheckpoint SECONDS    checkpoint after the mount has been idle this long\n"
                        "                              following writes (0 or absent: off)\n"
                        "  --autocheckpoint-max SECONDS  also checkpoint at most every SECONDS while\n"
                        "                              writes go on\n"
                        "  --relatime                  keep atime as ext4's default does (a read updates it\n"
                        "                              when older than mtime/ctime or a day); default noatime\n"
                        "\nExamples:\n  ntfs-ctl mount main /tmp/ws --autocheckpoint 1\n"
                        "  ntfs-ctl mount main /tmp/v1 --at v1\n",
                .flags = mount_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_mount,
        },
        {
                .name = "mounts",
                .group = CLI_GROUP_SESSIONS,
                .synopsis = "",
                .summary = "list mounts",
                .help = "Lists every mount: mountpoint, session, ro/rw, the commit it shows when\n"
                        "mounted --at, and its auto-checkpoint idle time.\n"
                        "\nExample:\n  ntfs-ctl mounts\n",
                .flags = no_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_mounts,
        },
        {
                .name = "umount",
                .group = CLI_GROUP_SESSIONS,
                .synopsis = "MOUNTPOINT",
                .summary = "unmount",
                .help = "Unmounts MOUNTPOINT (made absolute; the mountpoint itself is not touched, so a\n"
                        "stuck mount can still be named). Unsaved writes stay in the session's working\n"
                        "state.\n"
                        "\nExample:\n  ntfs-ctl umount /tmp/ws\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_umount,
        },
        {
                .name = "checkpoint",
                .group = CLI_GROUP_HISTORY,
                .synopsis = "NAME [-m MESSAGE]",
                .summary = "record the working state as a commit",
                .help = "Commits the working state of NAME and prints the new commit's short id (the\n"
                        "head's when nothing changed and no -m was given; with -m a commit of the same\n"
                        "state is made, so the message is in the log). Returns once the commit is\n"
                        "durable.\n"
                        "\nOptions:\n  -m, --message MESSAGE   the commit message\n"
                        "\nExample:\n  ntfs-ctl checkpoint main -m 'tests pass'\n",
                .flags = checkpoint_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_checkpoint,
        },
        {
                .name = "fork",
                .group = CLI_GROUP_HISTORY,
                .synopsis = "NAME NEWNAME [--at COMMIT|TAG]",
                .summary = "start a new session from another",
                .help = "Creates session NEWNAME from the head of NAME (or from a commit or tag of it\n"
                        "with --at). Constant time whatever the workspace size.\n"
                        "\nOptions:\n  --at REF   fork from this commit or tag instead of the head\n"
                        "\nExamples:\n  ntfs-ctl fork main experiment\n"
                        "  ntfs-ctl fork main retry --at 3f2a1c\n",
                .flags = at_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_fork,
        },
        {
                .name = "tag",
                .group = CLI_GROUP_HISTORY,
                .synopsis = "NAME TAGNAME [--at COMMIT] [--scope session|store]",
                .summary = "name a commit",
                .help = "Tags the head of NAME (or the commit given with --at) as TAGNAME. Tags never\n"
                        "move; an existing name fails with tag_exists. A session tag belongs to the\n"
                        "session; a store tag outlives it.\n"
                        "\nOptions:\n  --at REF                 tag this commit instead of the head\n"
                        "  --scope session|store    default: session\n"
                        "\nExample:\n  ntfs-ctl tag main v1 --scope store\n",
                .flags = tag_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_tag,
        },
        {
                .name = "tags",
                .group = CLI_GROUP_HISTORY,
                .synopsis = "[NAME]",
                .summary = "list tags",
                .help = "Lists every tag, or with NAME the tags of that session plus the store tags.\n"
                        "\nExamples:\n  ntfs-ctl tags\n  ntfs-ctl tags main\n",
                .flags = no_flags,
                .min_pos = 0,
                .max_pos = 1,
                .run = cmd_tags,
        },
        {
                .name = "rollback",
                .group = CLI_GROUP_HISTORY,
                .synopsis = "NAME (--to COMMIT|TAG | --steps N)",
                .summary = "move a session back",
                .help = "Moves NAME's head back to a commit or tag, or N checkpoints back from the head,\n"
                        "and resets its working state to it (changes not checkpointed are dropped);\n"
                        "live mounts show the restored state at once. Not below the session's first\n"
                        "checkpoint (rollback_floor).\n"
                        "\nOptions:\n  --to REF     the commit or tag to return to\n"
                        "  --steps N    how many checkpoints back (N >= 1)\n"
                        "\nExamples:\n  ntfs-ctl rollback main --steps 1\n  ntfs-ctl rollback main --to v1\n",
                .flags = rollback_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_rollback,
        },
        {
                .name = "log",
                .group = CLI_GROUP_HISTORY,
                .synopsis = "NAME [-n N]",
                .summary = "show a session's history",
                .help = "Shows NAME's commits newest first, one per line, like git log --oneline:\n"
                        "short id, tags in parentheses, first line of the message (or the effect id).\n"
                        "\nOptions:\n  -n, --max-count N   at most N commits\n"
                        "\nExample:\n  ntfs-ctl log main -n 10\n",
                .flags = log_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_log,
        },
        {
                .name = "diff",
                .group = CLI_GROUP_HISTORY,
                .synopsis = "NAME FROM [TO]",
                .summary = "list changed paths",
                .help = "Lists the paths that differ between FROM and TO (commits or tags; TO defaults\n"
                        "to NAME's working state), sorted, like git diff --name-status: a letter, a\n"
                        "tab, the path. A added, D deleted, M content modified, T type changed, P only\n"
                        "the mode (or owner/xattrs) changed, followed by a tab and OLD -> NEW mode.\n"
                        "Paths with control characters, quotes or backslashes are C-quoted.\n"
                        "\nExamples:\n  ntfs-ctl diff main v1\n  ntfs-ctl diff main 3f2a1c 9b0e44\n",
                .flags = no_flags,
                .min_pos = 2,
                .max_pos = 3,
                .run = cmd_diff,
        },
        {
                .name = "exec",
                .group = CLI_GROUP_EFFECTS,
                .synopsis = "NAME [-t] [-n] [--tool T] [--timeout S] [--idempotency-key K] -- CMD...",
                .summary = "run a command in the jail",
                .help = "Runs CMD in the jail of session NAME (its workspace at /workspace) and exits\n"
                        "with its exit code (124 if it timed out without one). Its stdout and stderr\n"
                        "are written here as it writes them, byte for byte, and this command's stdin\n"
                        "is its stdin (as ssh does; -n for none). SIGINT, SIGTERM or SIGHUP to ntfs-ctl\n"
                        "(Ctrl-C without -t), or ntfs-ctl going away, cancels the command: every\n"
                        "process of it ends, the journal records it failed with reason \"cancelled\",\n"
                        "and ntfs-ctl exits 128+signal. One word after -- is a shell command line as\n"
                        "is; several words are quoted one by one and joined. The effect is journaled.\n"
                        "--json runs it without streaming and prints the whole result at the end\n"
                        "(output that is not UTF-8 text also as stdout_b64/stderr_b64).\n"
                        "\nOptions:\n"
                        "  -t, --tty              run it on a terminal in the jail: this terminal in raw\n"
                        "                         mode, its window size passed on (Ctrl-C then goes to\n"
                        "                         the command, as in a local terminal)\n"
                        "  -n, --no-stdin         the command's stdin is /dev/null\n"
                        "  --tool T               bash_read, bash_write (default), bash_build, bash_run\n"
                        "  --timeout S            wall-clock limit in seconds\n"
                        "  --idempotency-key K    the same key never runs twice (replayed: the recorded\n"
                        "                         output is written again)\n"
                        "\nExamples:\n  ntfs-ctl exec main -- make test\n"
                        "  ntfs-ctl exec main --tool bash_read -- 'ls | wc -l'\n"
                        "  echo hi | ntfs-ctl exec main -- cat\n"
                        "  ntfs-ctl exec main -t -- bash\n",
                .flags = exec_flags,
                .min_pos = 1,
                .max_pos = 1,
                .wants_rest = true,
                .run = cmd_exec,
        },
        {
                .name = "fetch",
                .group = CLI_GROUP_EFFECTS,
                .synopsis = "NAME URL [--method GET|HEAD|POST] [--idempotency-key K]",
                .summary = "fetch a URL through the gateway",
                .help = "Fetches URL from the host through ntfsd's gateway, under the policy's [fetch]\n"
                        "rules (allow-listed hosts and ports, no private addresses, size, time and\n"
                        "redirect limits; credentials are added host-side and never shown), journaled\n"
                        "as an irreversible effect of session NAME. Prints the body as received (a\n"
                        "binary body is decoded); exit 1 for an HTTP status >= 400. --json prints the\n"
                        "result: url, status, headers, body, body_encoding, truncated, bytes,\n"
                        "redirects, duration_ms, effect_id, replayed.\n"
                        "\nOptions:\n  --method M             GET (default), HEAD or POST (empty body)\n"
                        "  --idempotency-key K    the same key never fetches twice: the recorded result\n"
                        "                         (or error) is served from the journal\n"
                        "\nExamples:\n  ntfs-ctl fetch main https://pypi.org/simple/requests/\n"
                        "  ntfs-ctl --json fetch main https://example.com/ --idempotency-key k1\n",
                .flags = fetch_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_fetch,
        },
        {
                .name = "effects",
                .group = CLI_GROUP_EFFECTS,
                .synopsis = "NAME [-n N]",
                .summary = "show a session's effect journal",
                .help = "Lists the journaled effects of NAME: id, step, tool, effect class, status\n"
                        "(pending, done, failed, outcome_unknown), the commit after it, its input and\n"
                        "the reason of a failed or outcome_unknown effect (e.g. \"interrupted by daemon\n"
                        "crash\"). --json gives the full rows, results included.\n"
                        "\nOptions:\n  -n, --limit N   only the latest N rows\n"
                        "\nExample:\n  ntfs-ctl effects main -n 20\n",
                .flags = effects_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_effects,
        },
        {
                .name = "conversation",
                .group = CLI_GROUP_EFFECTS,
                .synopsis = "NAME",
                .summary = "show an agent session's messages and tool calls",
                .help = "Prints the conversation an agent saved for session NAME (ntfs-run,\n"
                        "ntfs-agent or /step save it with each step), in order: each message's text,\n"
                        "each tool call with its input and each tool result, numbered by message.\n"
                        "Control characters are shown as '?'. --json gives the messages as saved.\n"
                        "It is how to look at a session after ntfs-run has ended.\n"
                        "\nExample:\n  ntfs-ctl conversation s-20261207-1\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_conversation,
        },
        {
                .name = "replay",
                .group = CLI_GROUP_EFFECTS,
                .synopsis = "NAME --into NEWNAME [--from STEP]",
                .summary = "re-run a session's effects on a fork",
                .help = "Forks NAME at the state before its first effect at step >= STEP (default: the\n"
                        "first effect) into the new session NEWNAME, re-runs the replayable effects\n"
                        "(bash_write, bash_build) there and compares each resulting tree with the\n"
                        "recorded one: same or diverged. Other effects (bash_read, bash_run,\n"
                        "fetch_url, ...) are served from the journal and never re-run; a recorded\n"
                        "state change of theirs is applied from its commit. Prints one line per step,\n"
                        "then 'first divergence: step N' or 'no divergence'. Exit 0 either way.\n"
                        "\nOptions:\n  --into NEWNAME   the fork to replay into (must not exist)\n"
                        "  --from STEP      start at this step\n"
                        "\nExample:\n  ntfs-ctl replay main --into main-replay --from 3\n",
                .flags = replay_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_replay,
        },
        {
                .name = "quota",
                .group = CLI_GROUP_STORE,
                .synopsis = "NAME --bytes B --inodes N",
                .summary = "set a session's quota",
                .help = "Sets the session's limits; writes beyond them fail with EDQUOT. B takes a\n"
                        "K, M, G or T suffix (powers of 1024). 0 means unlimited.\n"
                        "\nOptions:\n  --bytes B    bytes of file data\n"
                        "  --inodes N   number of files, directories and links\n"
                        "\nExample:\n  ntfs-ctl quota main --bytes 1G --inodes 100000\n",
                .flags = quota_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_quota,
        },
        {
                .name = "gc",
                .group = CLI_GROUP_STORE,
                .synopsis = "",
                .summary = "free unreachable objects",
                .help = "Frees the objects no session, tag, working state or journal entry reaches and\n"
                        "prints how many objects and bytes were freed.\n"
                        "\nExample:\n  ntfs-ctl gc\n",
                .flags = no_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_gc,
        },
        {
                .name = "compact",
                .group = CLI_GROUP_STORE,
                .synopsis = "[--remount] [-q]",
                .summary = "give the store's free space back to the file system",
                .help = "The store's LMDB file (data.mdb) never shrinks by itself: the pages gc and\n"
                        "ended sessions free are reused by later writes but stay in the file\n"
                        "('reclaimable' in status). compact writes a copy of the file without them,\n"
                        "puts it in place of the old one and reopens the store, inside the daemon.\n"
                        "It needs the space of the live data free on the same file system while it\n"
                        "runs, and the store to be idle: the daemon refuses it (409, code busy)\n"
                        "while any session is mounted (internal mounts of running commands\n"
                        "included). The offline procedure is then: ntfs-ctl mounts, ntfs-ctl umount\n"
                        "each, ntfs-ctl gc, ntfs-ctl compact, mount again; --remount has the daemon\n"
                        "do it: it unmounts the clients' mounts, compacts and mounts them again with\n"
                        "their options (files open in them are lost to their programs; a running\n"
                        "command still makes it refuse). API calls wait while it runs. Prints the\n"
                        "bytes on disk before and after. A progress bar on a terminal.\n"
                        "\nOptions:\n  --remount    unmount the mounts first and mount them again after\n"
                        "  -q, --quiet  no progress bar\n"
                        "\nExample:\n  ntfs-ctl gc && ntfs-ctl compact --remount\n",
                .flags = compact_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_compact,
        },
        {
                .name = "fsck",
                .group = CLI_GROUP_STORE,
                .synopsis = "",
                .summary = "verify the store",
                .help = "Checks every object's hash and every commit's reachability. Prints ok, or\n"
                        "CORRUPT with the problems found (exit 1, code corrupt_object).\n"
                        "\nExample:\n  ntfs-ctl fsck\n",
                .flags = no_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_fsck,
        },
        {
                .name = "export",
                .group = CLI_GROUP_ARCHIVES,
                .synopsis = "NAME[@COMMIT|TAG|SNAPSHOT] FILE [--format tar|tar.gz|tgz|tar.zst] [--at REF] "
                            "[--no-sync] [--keep-setid] [-q]",
                .summary = "write a checkpoint as a tar archive",
                .help = "Writes the tree of a commit of NAME (its head, or the commit, tag or snapshot\n"
                        "id after '@' or given with --at) to FILE as a pax tar archive, streamed: ntfsd\n"
                        "holds no whole file in memory and reads one consistent commit even while the\n"
                        "session is being written. Uncheckpointed changes are not included (checkpoint\n"
                        "first). The format comes from FILE's suffix (.tar .tar.gz .tgz .tar.zst) or\n"
                        "--format; FILE '-' writes to stdout (tar unless --format). The archive is\n"
                        "written next to FILE, fsync'd and renamed over it at the end, so a failed\n"
                        "export, or a system crash, leaves no partial file. Kept: files, directories,\n"
                        "symlinks, hard links, fifos, modes, uid/gid, mtimes with nanoseconds, xattrs,\n"
                        "ACLs; except that a file setuid root or setgid root loses that bit (a\n"
                        "workspace's files may come from an agent) unless --keep-setid is given.\n"
                        "\nOptions:\n  --format F    tar, tar.gz (tgz), tar.zst\n"
                        "  --at REF      the commit, tag or snapshot (instead of NAME@REF)\n"
                        "  --no-sync     do not fsync FILE before renaming it into place (as tar\n"
                        "                does): faster, but a system crash soon after may leave\n"
                        "                FILE empty or short; a failed export still leaves nothing\n"
                        "  --keep-setid  keep setuid and setgid bits of files owned by root\n"
                        "  -q, --quiet   no progress bar (it is drawn only when stderr is a terminal)\n"
                        "\nExamples:\n  ntfs-ctl export main main.tar.gz\n"
                        "  ntfs-ctl export main@v1 - | tar tvf -\n",
                .flags = export_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_export,
        },
        {
                .name = "import",
                .group = CLI_GROUP_ARCHIVES,
                .synopsis = "NAME FILE [-m MESSAGE] [--max-entries N] [--max-bytes B] [-q]",
                .summary = "create a session from an archive",
                .help = "Creates the session NAME whose first commit is the content of the archive\n"
                        "FILE ('-' for stdin): tar (ustar, pax, GNU), cpio or zip, plain or compressed\n"
                        "(gzip, bzip2, xz, zstd, lz4). ntfsd reads FILE itself, with your\n"
                        "credentials. Unsafe archives are refused and leave no session behind:\n"
                        "absolute paths or '..' (policy_denied), entries through a symlink\n"
                        "(policy_denied), device nodes (policy_denied), more entries or bytes than the\n"
                        "limits (payload_too_large), corrupt or truncated streams (bad_request).\n"
                        "\nOptions:\n  -m, --message M     the commit message (default: import FILE)\n"
                        "  --max-entries N     refuse more than N entries (can only lower ntfsd's limit)\n"
                        "  --max-bytes B       refuse more than B bytes of file data (K/M/G/T suffixes)\n"
                        "  -q, --quiet         no progress bar\n"
                        "\nExamples:\n  ntfs-ctl import proj proj.tar.gz\n"
                        "  git archive HEAD | ntfs-ctl import repo -\n",
                .flags = import_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_import,
        },
        {
                .name = "api",
                .group = CLI_GROUP_STORE,
                .synopsis = "METHOD PATH [BODY]",
                .summary = "send a raw request",
                .help = "Sends one request to the control socket and prints the JSON answer; PATH is\n"
                        "percent-encoded and may carry a query; BODY is JSON. For the endpoints that\n"
                        "have no command of their own (docs/protocol.md lists them all).\n"
                        "\nExamples:\n  ntfs-ctl api GET /health\n"
                        "  ntfs-ctl api POST /session/start '{}'\n",
                .flags = no_flags,
                .min_pos = 2,
                .max_pos = 3,
                .run = cmd_api,
        },
        {
                .name = "web",
                .group = CLI_GROUP_STORE,
                .synopsis = "[--port N]",
                .summary = "serve a web view of the store on 127.0.0.1",
                .help = "Serves a web interface for this store on 127.0.0.1 only and prints its URL,\n"
                        "http://127.0.0.1:PORT/?token=TOKEN, with a random 128-bit token: every\n"
                        "request without it (in the query, or the cookie the first page sets) gets\n"
                        "403, and only this user and root may connect at all. The pages show the\n"
                        "sessions and mounts, a session's history, a checkpoint's files, the diff\n"
                        "of two checkpoints and the effect journal, polled every 1.5 s; tag, fork\n"
                        "and rollback are buttons with a confirmation. Everything comes from ntfsd\n"
                        "over the control socket: /api/... is forwarded to a short list of /v1/...\n"
                        "routes (docs/web.md). Runs until SIGINT or SIGTERM. --json prints\n"
                        "{url, port, token} instead of the URL.\n"
                        "\nOptions:\n"
                        "  -p, --port N  listen on port N (default: a free port)\n"
                        "\nExample:\n  ntfs-ctl web --port 8765\n",
                .flags = web_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_web,
        },
        {
                .name = "trunk init",
                .group = CLI_GROUP_TRUNKS,
                .synopsis = "NAME --from SESSION",
                .summary = "start a trunk at a session's state",
                .help = "Checkpoints SESSION and makes its head version 1 of the trunk NAME: a named\n"
                        "line of canonical workspace versions that forks start from and commit to.\n"
                        "\nOptions:\n  --from SESSION   the session whose state the trunk starts with\n"
                        "\nExample:\n  ntfs-ctl trunk init main --from setup\n",
                .flags = from_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_trunk_init,
        },
        {
                .name = "trunk fork",
                .group = CLI_GROUP_TRUNKS,
                .synopsis = "TRUNK NEWSESSION [--version N]",
                .summary = "start a session on a trunk's head",
                .help = "Creates the session NEWSESSION from the trunk's head (or version N) and\n"
                        "records it as an active fork. When NEWSESSION is a conflicted fork of TRUNK\n"
                        "it is re-forked: rolled back to the head (its changes are dropped) and\n"
                        "active again, so the work can be redone on top of the other forks' commits.\n"
                        "\nOptions:\n  --version N   fork from version N instead of the head\n"
                        "\nExample:\n  ntfs-ctl trunk fork main task-a\n",
                .flags = trunk_version_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_trunk_fork,
        },
        {
                .name = "trunk commit",
                .group = CLI_GROUP_TRUNKS,
                .synopsis = "SESSION",
                .summary = "commit a fork to its trunk (fast-forward or merge)",
                .help = "Checkpoints the fork SESSION and makes it the trunk's next version: a\n"
                        "fast-forward when the trunk has not moved since the fork, else a three-way\n"
                        "merge of the fork's base, the trunk's head and the fork (a commit with two\n"
                        "parents). A text file both sides changed on different lines is merged\n"
                        "line by line (diff3; docs/trunk.md). When both sides changed the same\n"
                        "path in a way that cannot be merged (overlapping lines, a binary or large\n"
                        "file, types or modes changed differently) nothing is committed, the fork\n"
                        "becomes 'conflicted' and every conflicting path is listed with both\n"
                        "sides' versions (type, mode, size, sha256); exit code 1.\n"
                        "\nExample:\n  ntfs-ctl trunk commit task-a\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_trunk_commit,
        },
        {
                .name = "trunk abort",
                .group = CLI_GROUP_TRUNKS,
                .synopsis = "SESSION",
                .summary = "abandon a fork",
                .help = "Marks the fork SESSION aborted (the session itself stays until ended).\n"
                        "\nExample:\n  ntfs-ctl trunk abort task-b\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_trunk_abort,
        },
        {
                .name = "trunk status",
                .group = CLI_GROUP_TRUNKS,
                .synopsis = "TRUNK",
                .summary = "show a trunk's versions and forks",
                .help = "Shows the trunk's head version and commit, every version (with the fork\n"
                        "merged into it) and every fork with its status (active, committed,\n"
                        "conflicted, aborted) and base version.\n"
                        "\nExample:\n  ntfs-ctl trunk status main\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_trunk_status,
        },
        {
                .name = "remote add",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "NAME URL [--access-key K --secret-key S] [--region R]",
                .summary = "configure an S3 remote",
                .help = "Adds the remote NAME: an S3-compatible bucket (AWS S3, Ceph RGW, MinIO, R2)\n"
                        "given as URL http[s]://HOST[:PORT]/BUCKET[/PREFIX] (path-style). The keys stay\n"
                        "in the daemon (a 0600 file in the store); no response ever shows the secret.\n"
                        "The environment variables NTFS_S3_ACCESS_KEY / NTFS_S3_SECRET_KEY stand in for\n"
                        "the flags (keeping the secret out of the process list).\n"
                        "\nOptions:\n  --access-key K   the S3 access key id\n"
                        "  --secret-key S   the S3 secret key\n"
                        "  --region R       the SigV4 region (default us-east-1)\n"
                        "\nExample:\n"
                        "  ntfs-ctl remote add origin http://127.0.0.1:7480/ntfs --access-key AK --secret-key SK\n",
                .flags = remote_add_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_remote_add,
        },
        {
                .name = "remote ls",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "",
                .summary = "list remotes",
                .help = "Lists every remote: name, URL, region and whether it has credentials.\n"
                        "\nExample:\n  ntfs-ctl remote ls\n",
                .flags = no_flags,
                .min_pos = 0,
                .max_pos = 0,
                .run = cmd_remote_ls,
        },
        {
                .name = "remote rm",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "NAME",
                .summary = "forget a remote",
                .help = "Removes the remote NAME from the daemon (the bucket is not touched).\n"
                        "\nExample:\n  ntfs-ctl remote rm origin\n",
                .flags = no_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_remote_rm,
        },
        {
                .name = "remote tags",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "REMOTE SESSION",
                .summary = "list a remote's tags of a session",
                .help = "Lists the tags the remote REMOTE holds for SESSION (pushed with push --tags):\n"
                        "name, commit and scope (session or store). One LIST and one GET per tag.\n"
                        "\nExample:\n  ntfs-ctl remote tags origin main\n",
                .flags = no_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_remote_tags,
        },
        {
                .name = "remote prune",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "REMOTE [--grace SECONDS] [-n]",
                .summary = "delete packs no push finished with",
                .help = "Deletes the packs in REMOTE's bucket that no index names: those left by a push\n"
                        "that died before writing its index. Only packs older than --grace seconds\n"
                        "(default 3600) go: a younger one may belong to a push still uploading (its\n"
                        "index is written after its packs). Packs an index names are kept, even when\n"
                        "no head reaches them (later pushes rely on the objects the indexes list).\n"
                        "\nOptions:\n"
                        "  --grace S       keep unindexed packs younger than S seconds (default 3600)\n"
                        "  -n, --dry-run   count, delete nothing\n"
                        "\nExample:\n  ntfs-ctl remote prune origin --dry-run\n",
                .flags = prune_flags,
                .min_pos = 1,
                .max_pos = 1,
                .run = cmd_remote_prune,
        },
        {
                .name = "push",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "NAME [REMOTE] [--tags] [-q]",
                .summary = "upload a session to a remote",
                .help = "Checkpoints NAME, uploads the objects its commits reach that the remote lacks\n"
                        "(packed, several uploads at once) and moves the remote's head for NAME with a\n"
                        "compare-and-swap. When the remote has commits this session lacks (another\n"
                        "machine pushed first) nothing moves and the error says to pull. REMOTE may be\n"
                        "left out when exactly one is configured.\n"
                        "With --tags, also the tags of NAME's history: its session-scoped tags and the\n"
                        "store-scoped tags whose commit the head reaches (and the objects they reach).\n"
                        "Tags never move: a tag the remote holds on the same commit is fine; on another\n"
                        "commit it is an error naming it (tag_exists), and the head is not moved.\n"
                        "A progress bar is drawn on stderr when it is a terminal.\n"
                        "\nOptions:\n  --tags        push the tags too\n"
                        "  -q, --quiet   no progress bar\n"
                        "\nExamples:\n  ntfs-ctl push main origin\n  ntfs-ctl push main --tags\n",
                .flags = push_flags,
                .min_pos = 1,
                .max_pos = 2,
                .run = cmd_push,
        },
        {
                .name = "pull",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "NAME [REMOTE] [--merge] [-q]",
                .summary = "fetch a session's new commits from a remote",
                .help = "Checkpoints NAME, downloads what it lacks of the remote's head for NAME (each\n"
                        "object verified by its hash; a missing or corrupt object is an error naming it\n"
                        "and nothing changes), then fast-forwards NAME. When both sides have new\n"
                        "commits: an error, or with --merge a three-way merge (a commit with both heads\n"
                        "as parents; conflicting paths are an error and nothing changes).\n"
                        "The remote's tags of NAME come too; a local tag of the same name on another\n"
                        "commit is an error naming it (tag_exists) and nothing changes.\n"
                        "A progress bar is drawn on stderr when it is a terminal.\n"
                        "\nOptions:\n  --merge       merge diverged histories\n"
                        "  -q, --quiet   no progress bar\n"
                        "\nExample:\n  ntfs-ctl pull main origin --merge\n",
                .flags = pull_flags,
                .min_pos = 1,
                .max_pos = 2,
                .run = cmd_pull,
        },
        {
                .name = "clone",
                .group = CLI_GROUP_REMOTES,
                .synopsis = "REMOTE/SESSION NEWNAME [-q]",
                .summary = "make a local session from a remote one",
                .help = "Downloads the remote's head for SESSION (verified by hash) and creates the\n"
                        "local session NEWNAME at it, with the remote's tags of SESSION (a local tag of\n"
                        "the same name on another commit is an error naming it; nothing is created).\n"
                        "Push NEWNAME back under the name SESSION by cloning to the same name.\n"
                        "A progress bar is drawn on stderr when it is a terminal.\n"
                        "\nOptions:\n  -q, --quiet   no progress bar\n"
                        "\nExample:\n  ntfs-ctl clone origin/main main\n",
                .flags = clone_flags,
                .min_pos = 2,
                .max_pos = 2,
                .run = cmd_clone,
        },
};

const size_t cli_ncommands = ARRAY_SIZE(cli_commands);

static const struct {
        const char *name, *title;
} groups[CLI_GROUP_COUNT] = {
        [CLI_GROUP_STORE] = { "store", "The daemon and the store" },
        [CLI_GROUP_SESSIONS] = { "sessions", "Sessions and mounts" },
        [CLI_GROUP_HISTORY] = { "history", "History" },
        [CLI_GROUP_EFFECTS] = { "effects", "Effects" },
        [CLI_GROUP_ARCHIVES] = { "archives", "Archives" },
        [CLI_GROUP_TRUNKS] = { "trunks", "Trunks" },
        [CLI_GROUP_REMOTES] = { "remotes", "Remotes" },
};

const char *cli_group_name(enum cli_group g) {
        return (unsigned)g < CLI_GROUP_COUNT ? groups[g].name : "?";
}

const char *cli_group_title(enum cli_group g) {
        return (unsigned)g < CLI_GROUP_COUNT ? groups[g].title : "?";
}

/* ---- help ------------------------------------------------------------------------ */

static const char global_help[] =
        "usage: ntfs-ctl [--socket PATH] [--json] COMMAND [ARGS...]\n"
        "\n"
        "Drives ntfsd, the ntfs daemon, through its control socket.\n"
        "\n"
        "Global options (also accepted after the command):\n"
        "  --socket PATH   the control socket; default $NTFS_SOCKET, else\n"
        "                  $NTFS_STORE/ntfsd.sock, else ./.store/ntfsd.sock\n"
        "  --json          print the server's JSON answer (pretty) instead of text;\n"
        "                  on failure the error object {\"error\":{code,message}}\n"
        "  -h, --help      this help; 'ntfs-ctl help COMMAND' or 'COMMAND --help'\n"
        "                  for one command\n"
        "  --version       print the version\n"
        "\n"
        "Commands:\n";

static const char global_help_tail[] =
        "\n"
        "Exit status: 0 success; 1 the operation failed (the error is printed as\n"
        "'ntfs-ctl: MESSAGE (CODE)' on stderr, CODE being the server's stable code, or\n"
        "unreachable / timeout when ntfsd could not be reached); 2 usage error. exec\n"
        "exits with the command's own exit code.\n"
        "\n"
        "Examples:\n"
        "  ntfs-ctl session new main\n"
        "  ntfs-ctl mount main /tmp/ws --autocheckpoint 2\n"
        "  ntfs-ctl checkpoint main -m 'first version'\n"
        "  ntfs-ctl log main\n"
        "  ntfs-ctl --json session ls\n"
        "\nSee docs/cli.md and docs/protocol.md.\n";

void cli_print_overview(FILE *f) {
        fputs(global_help, f);
        for (size_t i = 0; i < cli_ncommands; i++) {
                char left[128];
                snprintf(left, sizeof left, "%s", cli_commands[i].name);
                fprintf(f, "  %-14s %s\n", left, cli_commands[i].summary);
        }
        fputs(global_help_tail, f);
}

void cli_print_command_help(FILE *f, const struct cmd *cmd) {
        print_usage_line(f, cmd);
        fprintf(f, "\n%s\n%s", cmd->summary, cmd->help);
        fputs("\nGlobal options: --socket PATH, --json (see 'ntfs-ctl --help').\n", f);
}

void cli_print_subcommands(FILE *f, const char *word) {
        fprintf(f, "usage: ntfs-ctl [--socket PATH] [--json] %s SUBCOMMAND ...\n\nSubcommands:\n", word);
        size_t gl = strlen(word);
        for (size_t i = 0; i < cli_ncommands; i++)
                if (strncmp(cli_commands[i].name, word, gl) == 0 && cli_commands[i].name[gl] == ' ')
                        fprintf(f, "  %s %s\n      %s\n", cli_commands[i].name, cli_commands[i].synopsis,
                                cli_commands[i].summary);
        fprintf(f, "\nTry 'ntfs-ctl %s SUBCOMMAND --help' for one of them.\n", word);
}

bool cli_has_subcommands(const char *word) {
        size_t n = strlen(word);
        for (size_t i = 0; i < cli_ncommands; i++)
                if (strncmp(cli_commands[i].name, word, n) == 0 && cli_commands[i].name[n] == ' ')
                        return true;
        return false;
}

/* ---- lookup ---------------------------------------------------------------------- */

const struct cmd *cli_lookup(int argc, char **argv, int *used) {
        if (argc < 1)
                return NULL;
        for (size_t i = 0; i < cli_ncommands; i++) {
                const char *n = cli_commands[i].name;
                const char *sp = strchr(n, ' ');
                if (!sp && strcmp(n, argv[0]) == 0) {
                        *used = 1;
                        return &cli_commands[i];
                }
                if (sp && argc >= 2 && strlen(argv[0]) == (size_t)(sp - n) &&
                    strncmp(n, argv[0], (size_t)(sp - n)) == 0 && strcmp(sp + 1, argv[1]) == 0) {
                        *used = 2;
                        return &cli_commands[i];
                }
        }
        return NULL;
}
