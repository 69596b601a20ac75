/* SPDX-License-Identifier: MIT
 * merge.h — a three-way merge of store commits, path by path, through the
 * public store API (fs/store.h). Used by the trunk routes (routes-trunk.c).
 *
 *   struct ntfs_merge_result res;
 *   r = ntfs_merge3(st, &base, &head, &fork, "scratch-name", "merge fork x", &res);
 *   if (r == 0 && res.nconflicts == 0)  -> res.commit is the merge commit
 *   if (r == 0 && res.nconflicts > 0)   -> nothing was committed; see res.conflicts
 *   ntfs_merge_result_release(&res);    (always, after r == 0)
 *
 * The result starts from head ("theirs", the trunk) and receives the changes
 * base..fork ("ours"). Cost: two diffs (base..fork, base..head), which grow
 * with what differs, plus the bytes of the files that must be copied or
 * compared — never with the size of the workspace.
 *
 * Conflicts (same path changed on both sides differently): content, mode,
 * type, delete against modify (also: a directory removed on one side while
 * the other changed something inside it), both added with different content
 * (this includes two renames into the same name). Changes of different
 * attributes (one side the content, the other the mode) merge. Regular text
 * files changed on both sides are merged line by line when the changes
 * touch different lines (diff3); overlapping changes are a conflict.
 *
 * The merge commit is built in a scratch session (created from head, ended
 * before returning) and committed with ntfs_checkpoint_merge(): its parents
 * are head and fork. The scratch session's name must be free; callers use
 * NTFS_MERGE_SCRATCH_PREFIX so that leftovers of a crash can be removed.
 *
 * Not thread-safe for one scratch name; distinct names may merge at once.
 */
#ifndef NTFS_FS_SYNC_MERGE_H
#define NTFS_FS_SYNC_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/store.h"

#define NTFS_MERGE_SCRATCH_PREFIX "trunk-merge-scratch-"
/* Largest file merged line by line (each of the three versions). */
#define NTFS_MERGE_TEXT_MAX (4u << 20)

/* One side's version of a path. */
struct ntfs_merge_side {
        bool present;
        uint32_t mode;       /* type + permissions; 0 when absent */
        uint64_t size;
        char sha256[65];     /* regular files: SHA-256 of the content, else "" */
        char target[256];    /* symlinks: the target (truncated), else "" */
};

struct ntfs_merge_conflict {
        char *path;
        const char *reason;  /* "content", "mode", "type", "delete/modify", "add/add" */
        struct ntfs_merge_side fork, trunk;
};

struct ntfs_merge_result {
        ntfs_hash commit;             /* the merge commit (when nconflicts == 0) */
        size_t fork_changes;          /* paths changed base..fork */
        size_t trunk_changes;         /* paths changed base..head */
        size_t applied;               /* fork changes written onto head */
        size_t line_merged;           /* files merged line by line */
        struct ntfs_merge_conflict *conflicts;
        size_t nconflicts;
};

/* Merges as described above. Returns 0 (see res.nconflicts) or a negative
 * error (nothing committed; res untouched). message may be NULL. */
int ntfs_merge3(ntfs_store *st, const ntfs_hash *base, const ntfs_hash *head, const ntfs_hash *fork,
                const char *scratch_session, const char *message, struct ntfs_merge_result *res);
void ntfs_merge_result_release(struct ntfs_merge_result *res);

/* Line-level three-way merge of texts (diff3). On success *ret (malloc'd,
 * *ret_len bytes) is the merged text; returns 0 when clean, 1 when there
 * were overlapping changes (then *ret holds the text with standard conflict
 * markers "<<<<<<< ours", "||||||| base", "=======", ">>>>>>> theirs").
 * Negative on error. Inputs over NTFS_MERGE_TEXT_MAX: -EFBIG. */
int ntfs_merge_text(const char *base, size_t base_len, const char *ours, size_t ours_len, const char *theirs,
                    size_t theirs_len, char **ret, size_t *ret_len);

#endif
