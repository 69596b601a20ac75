/* SPDX-License-Identifier: MIT
 * tarball.h — workspaces to and from tar archives, through libarchive.
 *
 * Export reads one commit straight from its objects (ntfs_tree_walk():
 * no view, no working state, nothing written to the store, so the archive
 * is that commit whatever else writes to the session meanwhile) and
 * streams a pax archive to a sink in bounded memory: file data goes
 * through one 64 KiB chunk at a time (ntfs_file_read_chunks()), never a
 * whole file; the archive's bytes leave in blocks of at most 256 KiB. What
 * is kept is the trees on the current path and, per hard-link group, the
 * first path (hard links are written as links).
 *
 * Import reads any tar (ustar, pax, GNU, v7), cpio or zip archive, plain or
 * compressed with gzip, bzip2, xz, lzma, zstd, lz4 or compress (libarchive's
 * own decoders: no external program is ever started; mtree and "raw" are
 * not enabled because they can name host files), and builds a NEW session
 * whose first commit is the archive's content, with the store's tree
 * builder (ntfs_builder_*: chunks hashed and stored once as they stream
 * in, the directory structure in memory, one commit at the end). Nothing
 * refers to what it stored until the commit, which creates the session in
 * the same durable step: on any failure there is no session (the objects
 * stored so far are left to gc). Refused, with the
 * error and the message below:
 *   -NTFS_EDENIED    an absolute path, a ".." component, an entry whose path
 *                    (or a hard link's target) goes through a symlink, a
 *                    device node or socket
 *   -NTFS_ETOOLARGE  more entries, or more bytes (file sizes as declared and
 *                    as read, plus headers), than the limits: a decompression
 *                    bomb stops at the limit, not at the end of the stream
 *   -NTFS_EBADREQ    a corrupt or truncated stream, an unknown format, a
 *                    path or link target too long, a path under a file,
 *                    a hard link to nothing, an xattr the store refuses
 *   -NTFS_ESESSEXISTS / -NTFS_EINVALNAME for the session name
 *   -EAGAIN          a gc ran during the import and took objects it had
 *                    stored (nothing is left; import again)
 *   store errors (-ENOSPC, -EIO ...) as they come.
 *
 * Preserved both ways: regular files, directories (empty ones too),
 * symlinks, hard links (as links), fifos, permission bits (with setuid,
 * setgid and sticky), uid/gid (numeric), mtime with nanoseconds (pax), and
 * extended attributes (pax SCHILY.xattr / LIBARCHIVE.xattr). Not kept:
 * atime, ctime, ACLs, file flags, user/group names.
 *
 * Threading: the functions are reentrant; several exports and imports may
 * run at once on one store. Progress counters are written with atomic
 * stores and may be read from another thread with ntfs_archive_progress_get().
 *
 * Errors: 0 or a negative errno / -NTFS_E*; on failure a human message is
 * written to why (NUL-terminated, never NULL when whylen > 0). Nothing here
 * prints or exits.
 */
#ifndef NTFS_FS_SYNC_TARBALL_H
#define NTFS_FS_SYNC_TARBALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/store.h"

#define NTFS_ARCHIVE_DEFAULT_MAX_ENTRIES 1000000ull
#define NTFS_ARCHIVE_DEFAULT_MAX_BYTES (64ull << 30)
/* Session names starting with this are reserved: imports before the tree
 * builder made their session under such a name first; ntfsd ends the ones
 * a crash left behind (ntfs_archive_cleanup). */
#define NTFS_ARCHIVE_TMP_PREFIX ".import-"

enum ntfs_archive_format {
        NTFS_ARCHIVE_TAR = 0, /* pax interchange format, uncompressed */
        NTFS_ARCHIVE_TAR_GZ,
        NTFS_ARCHIVE_TAR_ZST,
};

/* "tar", "tar.gz" / "tgz", "tar.zst" (also "gz", "zst"). -EINVAL otherwise. */
int ntfs_archive_format_parse(const char *s, enum ntfs_archive_format *ret);
/* From a file name's suffix (.tar .tar.gz .tgz .tar.zst). -EINVAL otherwise. */
int ntfs_archive_format_from_name(const char *path, enum ntfs_archive_format *ret);
const char *ntfs_archive_format_name(enum ntfs_archive_format f);   /* "tar", "tar.gz", "tar.zst" */
const char *ntfs_archive_content_type(enum ntfs_archive_format f);  /* "application/x-tar", ... */

/* Progress of one export or import. The owner zeroes it and may set the
 * totals it knows; the library fills the rest as it goes (atomically). */
struct ntfs_archive_progress {
        uint64_t entries;      /* entries done */
        uint64_t bytes;        /* file content bytes done */
        uint64_t stream_bytes; /* archive bytes written (export) or read (import) */
        uint64_t total_entries, total_bytes, total_stream_bytes; /* 0: unknown */
};
/* A consistent-enough copy (each field read atomically). */
void ntfs_archive_progress_get(const struct ntfs_archive_progress *p, struct ntfs_archive_progress *ret);

/* Receives the archive's bytes in order; returns 0 or a negative error,
 * which stops the export and is returned by it. */
typedef int (*ntfs_archive_sink)(void *ud, const void *buf, size_t len);

/* Writes the tree of commit (in st) as an archive of format fmt to sink. Entry names are "./", "./a",
 * "./a/b" (the root directory first, its attributes included), in
 * byte order of the names within each directory, so the same commit
 * gives the same archive bytes (uncompressed and zstd; gzip adds no time
 * either). Sockets are skipped (tar cannot hold them). prog may be NULL. */
int ntfs_archive_export(ntfs_store *st, const ntfs_hash *commit, enum ntfs_archive_format fmt,
                        ntfs_archive_sink sink, void *ud, struct ntfs_archive_progress *prog, char *why,
                        size_t whylen);
/* Flags of ntfs_archive_export_flags. By default an export never makes a
 * file setuid root or setgid root where it is extracted: S_ISUID of a
 * non-directory owned by uid 0 and S_ISGID of one owned by gid 0 are left
 * out of the archive (a workspace's files may come from an agent; docs/
 * archive.md). NTFS_ARCHIVE_KEEP_SETID keeps them. */
#define NTFS_ARCHIVE_KEEP_SETID 1u
int ntfs_archive_export_flags(ntfs_store *st, const ntfs_hash *commit, enum ntfs_archive_format fmt, unsigned flags,
                              ntfs_archive_sink sink, void *ud, struct ntfs_archive_progress *prog, char *why,
                              size_t whylen);

struct ntfs_archive_limits {
        uint64_t max_entries; /* 0: NTFS_ARCHIVE_DEFAULT_MAX_ENTRIES */
        uint64_t max_bytes;   /* 0: NTFS_ARCHIVE_DEFAULT_MAX_BYTES */
};

/* Where an import reads from: fd >= 0 (borrowed, read sequentially to its
 * end), else the memory mem[0..len) (borrowed for the call). */
struct ntfs_archive_source {
        int fd;
        const void *mem;
        size_t len;
};

/* Creates session name from the archive (see above). message: the commit's
 * message (NULL: "import"). lim and prog may be NULL. On success *ret_head
 * (may be NULL) is the new session's head, whose tree is the archive's. */
int ntfs_archive_import(ntfs_store *st, const char *name, const struct ntfs_archive_source *src,
                        const struct ntfs_archive_limits *lim, const char *message,
                        struct ntfs_archive_progress *prog, ntfs_hash *ret_head, char *why, size_t whylen);

/* Ends temporary ".import-*" sessions that a crash of an older ntfsd left
 * (imports no longer make them). Call once at startup. Returns how many
 * were ended. */
int ntfs_archive_cleanup(ntfs_store *st);

#endif
