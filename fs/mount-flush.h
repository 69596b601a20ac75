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
 * other under the inode's lock: at most max_write (1 MiB) each, and one
 * that starts inside a page cache folio ends at that folio's end (Linux
 * 6.18 fuse_fill_write_pages). So any write(2) crossing a page boundary
 * from an unaligned offset arrives in two or more pieces, and a checkpoint
 * taken between two pieces would hold half of it. Every piece but the last
 * ends on a page boundary; the last may too, and nothing in the request
 * says which is the last. The mount keeps, per inode, the time of its last
 * WRITE when that one ended on a page boundary ("open": more may follow),
 * and mount_wseq_hold waits until no inode has been open for less than
 * MOUNT_WSEQ_QUIET_NS -- the next piece follows its predecessor's reply
 * after a copy of at most 1 MiB from the writer's memory, far sooner --
 * and then keeps WRITEs from being applied until mount_wseq_release. The
 * wait is bounded (MOUNT_WSEQ_MAX_NS): a program writing page-aligned
 * blocks back to back keeps its file open; its one-request write(2)s
 * cannot be told from first pieces. */
#define MOUNT_WSEQ_QUIET_NS (50 * 1000000LL)
#define MOUNT_WSEQ_MAX_NS (250 * 1000000LL)

struct mount_wseq;

/* NULL on ENOMEM. _free accepts NULL. */
struct mount_wseq *mount_wseq_new(void);
void mount_wseq_free(struct mount_wseq *s);
/* Around applying one WRITE (not a page write-back's): _enter waits while
 * a hold is in place; _leave records where the write ended. */
void mount_wseq_enter(struct mount_wseq *s);
void mount_wseq_leave(struct mount_wseq *s, uint64_t ino, uint64_t end, bool applied);
/* Waits as said above, then holds WRITEs off; returns how long it waited
 * for open inodes (ns). Every hold is followed by one release. */
int64_t mount_wseq_hold(struct mount_wseq *s);
void mount_wseq_release(struct mount_wseq *s);

#endif
