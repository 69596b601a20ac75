/* SPDX-License-Identifier: MIT
 * mount-flush.h — waiting for the write-back of a FUSE mount's shared
 * mappings (mount-flush.c), for the helper process of mount.c.
 */
#ifndef NTFS_FS_MOUNT_FLUSH_H
#define NTFS_FS_MOUNT_FLUSH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes back the dirty pages of every file of the mount whose st_dev is
 * dev that some process maps MAP_SHARED, and waits until the daemon has
 * answered every WRITE of them (sync_file_range with both waits on each,
 * through /proc/PID/map_files). Called after syncfs(2), which on FUSE
 * starts that write-back but does not wait for it (docs/mount.md, "What a
 * checkpoint of a live mount holds").
 *
 * For a child of a threaded process: system calls only, no allocation.
 * Needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) to open map_files; a
 * mapping it cannot open is skipped. Returns the number of files synced,
 * or a negative errno when /proc cannot be read. */
int mount_flush_mapped(dev_t dev);

/* ---- write(2)s the kernel split into several WRITE requests ----------------
 *
 * The kernel sends one write(2) as several WRITE requests, one after the
 * other, all under the inode's lock: at most max_write (1 MiB) each, and
 * (6.18's fuse_fill_write_pages) the first ends after its first folio
 * when that one is written in part and not up to date (a write from an
 * unaligned offset into a page not in the page cache). A checkpoint taken
 * between two pieces held half of the write(2). Every piece but the last
 * ends on a page boundary; the last may too, and nothing in a request
 * says which is the last. So the mount notes the inodes whose last WRITE
 * ended on a page boundary ("open": more may follow), and a hold
 * (ntfs_mount_hold_writes, mount.c) keeps WRITEs from being applied, then
 * has the helper probe each open inode with mount_probe_inodes: a write(2)
 * of nothing takes the inode's lock, so it returns only once no write(2)
 * holds it, and with the pieces kept out, a write(2) halfway in would hold
 * it for good. Answered in time, every open inode is whole and the
 * checkpoint can be taken; if not, the hold lets WRITEs in until the
 * probe returns and starts over. Probing is cheap: no request reaches the
 * daemon (the mount has no OPEN and answers FLUSH with ENOSYS). */
#define MOUNT_PROBE_MAX 64
#define MOUNT_PROBE_WAIT_MS 20
/* Past this, a hold stops probing and takes the checkpoint; an inode whose
 * last piece is older than MOUNT_WSEQ_QUIET_NS then counts as whole. */
#define MOUNT_WSEQ_MAX_NS (1000 * 1000000LL)
#define MOUNT_WSEQ_QUIET_NS (50 * 1000000LL)

/* For the helper child (system calls only): opens each inode of the mount
 * whose root directory is mntfd by its FUSE file handle (ino, gen) and
 * writes nothing to it. Sets bit i of *ret_stale for an inode it could not
 * open or write (not in the kernel's cache: nobody writes it). The files
 * stay open in fds[MOUNT_PROBE_MAX] (-1: none), for the caller to close
 * after it answered: closing writes the file's dirty pages back and waits
 * (fuse_flush), and those WRITEs wait for the hold to end. */
int mount_probe_inodes(int mntfd, const uint64_t *ino, unsigned n, uint32_t gen, uint64_t *ret_stale, int *fds);

struct mount_wseq;

/* NULL on ENOMEM. _free accepts NULL. */
struct mount_wseq *mount_wseq_new(void);
void mount_wseq_free(struct mount_wseq *s);
/* Around applying one WRITE: _enter waits while a hold is in place;
 * _leave records where it ended. A page write-back's WRITE leaves its
 * inode open too: a write(2) copies its bytes into the page cache before
 * it sends them, so a page dirtied through a mapping and written back
 * while a write(2) into it is on its way carries part of that write(2);
 * the probe then waits for the write(2) to be whole. */
void mount_wseq_enter(struct mount_wseq *s);
void mount_wseq_leave(struct mount_wseq *s, uint64_t ino, uint64_t end, bool applied, bool writeback);
/* The hold's side: _lock keeps WRITEs out until _unlock; _open lists the
 * open inodes (at most max, with when their last piece came); _close
 * marks one whole. */
void mount_wseq_lock(struct mount_wseq *s);
void mount_wseq_unlock(struct mount_wseq *s);
unsigned mount_wseq_open(struct mount_wseq *s, uint64_t *ino, int64_t *at, unsigned max);
void mount_wseq_close(struct mount_wseq *s, uint64_t ino);
/* A page write-back's WRITE, from its arrival (before anything that may
 * keep it waiting) to its end. A hold that finds one lets it in and starts
 * over: a mapping unmapped while a checkpoint is being taken is gone from
 * /proc when the flush looks, and its pages' write-back, made by the
 * unmapping process, would otherwise be held out of the checkpoint. */
void mount_wseq_wb_begin(struct mount_wseq *s);
void mount_wseq_wb_end(struct mount_wseq *s);
unsigned mount_wseq_wb_pending(struct mount_wseq *s);
/* Whether the helper holds files a probe of this mount left open (set and
 * read by the thread that holds). */
void mount_wseq_set_kept(struct mount_wseq *s, bool kept);
bool mount_wseq_kept(const struct mount_wseq *s);

#endif
