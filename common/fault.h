/* SPDX-License-Identifier: MIT
 * fault.h — test-only fault injection at named write steps (SQLite/curl style).
 *
 * Code calls NTFS_FAULT("store.commit") at each step where a crash or an
 * I/O error must be survivable. It returns 0 normally. A test arms a point,
 * either with the environment (read once, at first use):
 *
 *     NTFS_FAULT=store.commit:3:crash    the 3rd hit raises SIGKILL
 *     NTFS_FAULT=journal.begin:1:error   the 1st hit returns -EIO
 *     NTFS_FAULT=exec.admitted:1:sleep1500   the 1st hit sleeps 1.5 s (a race
 *                                        window held open; logged first)
 *     NTFS_FAULT=mount.writepage:1+:sleep40  every hit from the 1st on
 *                                        sleeps 40 ms (a slow step)
 *
 * or programmatically with ntfs_fault_arm(). Unarmed, the cost is one
 * relaxed atomic load. Point names are documented with their modules
 * (docs/store.md, docs/recovery.md, docs/trunk.md).
 */
#ifndef NTFS_COMMON_FAULT_H
#define NTFS_COMMON_FAULT_H

enum ntfs_fault_action { NTFS_FAULT_CRASH = 1, NTFS_FAULT_ERROR = 2, NTFS_FAULT_SLEEP = 3 };

/* Arms point to fire at its nth hit (n >= 1) from now (SLEEP: for 1 s). */
void ntfs_fault_arm(const char *point, unsigned n, enum ntfs_fault_action action);
void ntfs_fault_disarm(void);
/* Number of times point was hit since it was armed (or since start). */
unsigned ntfs_fault_hits(const char *point);
/* Returns 0, or -EIO when an armed ERROR fires; never returns when CRASH
 * fires; SLEEP returns 0 after its pause (other threads' points are not
 * held up by it). */
int ntfs_fault(const char *point);

#define NTFS_FAULT(point) ntfs_fault(point)

#endif
