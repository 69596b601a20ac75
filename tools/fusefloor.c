/* SPDX-License-Identifier: MIT
 * fusefloor — the FUSE floor: a minimal in-memory filesystem on the libfuse3
 * low-level API, tuned with the FUSE options that make FUSE fast. It keeps
 * everything in memory and does well under a microsecond of work per request,
 * so what it costs is what FUSE itself costs on this machine (issue 3). The
 * benchmark (tools/bench-fs.sh) holds the real mount against it.
 *
 *   fusefloor MOUNTPOINT [-f] [-d] [-s] [-o opts]
 *
 * Floor options (-o; the defaults are the fast choice, docs/bench-fs.md):
 *   writeback        turn the kernel's writeback cache on (default off)
 *   open, opendir    answer OPEN / OPENDIR instead of ENOSYS (no_open/no_opendir)
 *   timeout=SECS     entry and attr timeout (default 1.0)
 *   flush            answer FLUSH (default ENOSYS: the kernel stops sending it)
 *   nocreate         answer CREATE with ENOSYS (the kernel uses MKNOD instead)
 *   noxattr          answer the xattr requests with ENOSYS: the kernel then
 *                    stops asking, including the GETXATTR security.capability
 *                    it sends before every write(2) (default: xattrs work)
 *   nopatch          do not force FUSE_PARALLEL_DIROPS / FUSE_HANDLE_KILLPRIV
 *                    into the INIT reply (libfuse 3.14 drops them, see below)
 *   killpriv2        also FUSE_HANDLE_KILLPRIV_V2 (protocol 7.33, which libfuse
 *                    3.14 does not know), as the ntfs mount has: the kernel
 *                    stops asking for security.capability before writes, and
 *                    the floor drops setuid/setgid and that attribute itself
 *   noautoinval      no FUSE_AUTO_INVAL_DATA (libfuse asks for it by default):
 *                    the kernel then keeps a file's pages when a refreshed
 *                    mtime differs from its own, as the ntfs mount does
 *   growpool         libfuse's multithreaded loop (one worker at first, one
 *                    more whenever all are busy, up to max_threads) instead
 *                    of max_threads workers started at mount, as the ntfs
 *                    mount has (fs/fusepool.h); max_threads is libfuse's
 *                    option (-o max_threads=N, default 10, at most 256
 *                    without growpool); libfuse's clone_fd and
 *                    max_idle_threads apply only with growpool
 *   prealloc=MIB     fault in MIB of data blocks before mounting, so that
 *                    first-touch page clearing is not timed (default 0)
 *   stats=PATH       at exit, write one "OPCODE COUNT NS" line per request type
 *                    (NS: the handlers' total time, request read to reply)
 *   default_permissions  let the kernel check modes (default: the daemon does)
 * Any other -o option goes to libfuse (allow_other, fsname, ...).
 *
 * Model: inodes live in a table indexed by inode number (never reused; the
 * generation is always 0). A directory keeps its entries in an array whose
 * index+1 is the readdir offset (deleted slots become NULL, so offsets survive
 * concurrent changes; the array is reset when the directory empties); one
 * global hash of (parent, name) makes lookup O(1). File data lives in 64 KiB
 * blocks (NULL = hole), so sparse files cost nothing. One rwlock guards it
 * all: read, getattr, lookup, readdir and getxattr take it shared.
 *
 * An inode is freed when it has no links and the kernel has forgotten it.
 * Ownership: every node, dentry, block and xattr belongs to the one global
 * struct floor; floor_destroy() frees everything at exit.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <limits.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/fusefloor.h"
#include "fs/fusepool.h"
#include "common/banned.h"

static const char *const st_names[OPC__MAX] = {
        "LOOKUP", "FORGET", "GETATTR", "SETATTR", "READLINK", "MKNOD", "MKDIR",
        "UNLINK", "RMDIR", "SYMLINK", "RENAME", "LINK", "OPEN", "READ", "WRITE",
        "FLUSH", "RELEASE", "FSYNC", "OPENDIR", "READDIR", "READDIRPLUS", "RELEASEDIR",
        "STATFS", "SETXATTR", "GETXATTR", "LISTXATTR", "REMOVEXATTR", "ACCESS",
        "CREATE", "FALLOCATE",
};

struct floor F;

static const struct fuse_lowlevel_ops floor_ops = {
        .init = op_init,
        .lookup = op_lookup,
        .forget = op_forget,
        .forget_multi = op_forget_multi,
        .getattr = op_getattr,
        .setattr = op_setattr,
        .readlink = op_readlink,
        .mknod = op_mknod,
        .mkdir = op_mkdir,
        .unlink = op_unlink,
        .rmdir = op_rmdir,
        .symlink = op_symlink,
        .rename = op_rename,
        .link = op_link,
        .open = op_open,
        .read = op_read,
        .write = op_write,
        .flush = op_flush,
        .release = op_release,
        .fsync = op_fsync,
        .opendir = op_opendir,
        .readdir = op_readdir,
        .readdirplus = op_readdirplus,
        .releasedir = op_releasedir,
        .fsyncdir = op_fsync,
        .statfs = op_statfs,
        .setxattr = op_setxattr,
        .getxattr = op_getxattr,
        .listxattr = op_listxattr,
        .removexattr = op_removexattr,
        .access = op_access,
        .create = op_create,
        .fallocate = op_fallocate,
};

/* ---- setup ----------------------------------------------------------- */

static int floor_init(void) {
        if (pthread_rwlock_init(&F.lock, NULL) != 0)
                return -ENOMEM;
        F.hsize = 1024;
        F.hash = calloc(F.hsize, sizeof(*F.hash));
        F.next_ino = FUSE_ROOT_ID;
        if (!F.hash)
                return -ENOMEM;
        struct node *root = node_new(S_IFDIR | 0755, getuid(), getgid());
        if (!root)
                return -ENOMEM;
        root->parent = FUSE_ROOT_ID;
        return 0;
}

static void floor_destroy(void) {
        for (size_t i = 0; i < F.hsize; i++)
                for (struct dentry *d = F.hash ? F.hash[i] : NULL, *nd; d; d = nd) {
                        nd = d->hnext;
                        free(d);
                }
        free(F.hash);
        for (size_t i = 0; i < F.ninodes; i++) {
                struct node *n = F.inodes[i];
                if (!n)
                        continue;
                node_free_data(n, 0);
                free(n->blocks);
                free(n->target);
                free(n->ents);
                for (struct xattr *x = n->xattrs, *nx; x; x = nx) {
                        nx = x->next;
                        free(x->value);
                        free(x);
                }
                free(n);
                F.inodes[i] = NULL;
        }
        free(F.inodes);
        for (struct slab *sl = slabs, *ns; sl; sl = ns) {
                ns = sl->next;
                munmap(sl->mem, SLAB_SIZE);
                free(sl);
        }
        pthread_rwlock_destroy(&F.lock);
}

static void write_stats(void) {
        if (!F.stats)
                return;
        FILE *f = fopen(F.stats, "we");
        if (!f) {
                fprintf(stderr, "fusefloor: %s: %m\n", F.stats);
                return;
        }
        for (int i = 0; i < OPC__MAX; i++)
                fprintf(f, "%s %llu %llu\n", st_names[i], (unsigned long long)atomic_load(&F.counts[i]),
                        (unsigned long long)atomic_load(&F.ns[i]));
        if (fclose(f) != 0)
                fprintf(stderr, "fusefloor: %s: %m\n", F.stats);
}

#define FLOOR_OPT(t, p) {t, offsetof(struct floor, p), 1}
static const struct fuse_opt floor_opts[] = {
        FLOOR_OPT("writeback", writeback),
        FLOOR_OPT("open", open),
        FLOOR_OPT("opendir", opendir),
        FLOOR_OPT("nopatch", nopatch),
        FLOOR_OPT("flush", flush),
        FLOOR_OPT("nocreate", nocreate),
        FLOOR_OPT("noxattr", noxattr),
        FLOOR_OPT("killpriv2", killpriv2),
        FLOOR_OPT("noautoinval", noautoinval),
        FLOOR_OPT("growpool", growpool),
        {"timeout=%lf", offsetof(struct floor, timeout), 0},
        {"prealloc=%u", offsetof(struct floor, prealloc), 0},
        {"stats=%s", offsetof(struct floor, stats), 0},
        FUSE_OPT_END,
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs) {
        if (strcmp(arg, "default_permissions") == 0)
                F.default_permissions = 1;
        return 1; /* keep it for libfuse */
}

static void usage(const char *prog) {
        printf("usage: %s MOUNTPOINT [-f] [-d] [-s] [-o opts]\n"
               "floor options: writeback, open, opendir, flush, nocreate, noxattr, nopatch, killpriv2,\n"
               "               noautoinval, growpool,\n"
               "               timeout=SECS,\n"
               "               prealloc=MIB, stats=PATH,\n"
               "               default_permissions (else the daemon checks modes)\n",
               prog);
        fuse_lowlevel_help();
}

int main(int argc, char *argv[]) {
        struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
        struct fuse_cmdline_opts cmd = {0};
        struct fuse_session *se = NULL;
        struct fuse_loop_config *cfg = NULL;
        int ret = 1;

        F.timeout = 1.0;
        if (fuse_opt_parse(&args, &F, floor_opts, opt_proc) != 0 ||
            fuse_parse_cmdline(&args, &cmd) != 0)
                goto out_args;
        if (cmd.show_help || !cmd.mountpoint) {
                usage(argv[0]);
                ret = cmd.show_help ? 0 : 2;
                goto out_args;
        }
        if (cmd.show_version) {
                fuse_lowlevel_version();
                ret = 0;
                goto out_args;
        }
        if (!F.growpool && !cmd.singlethread && (cmd.max_threads < 1 || cmd.max_threads > FUSEPOOL_MAX)) {
                fprintf(stderr, "fusefloor: max_threads is 1..%d\n", FUSEPOOL_MAX);
                goto out_args;
        }
        if (!(F.timeout >= 0 && F.timeout <= 86400 * 365)) {
                fprintf(stderr, "fusefloor: bad timeout\n");
                goto out_args;
        }
        if (fuse_opt_add_arg(&args, "-ofsname=fusefloor,subtype=fusefloor") != 0)
                goto out_args;
        if (F.prealloc > 65536) {
                fprintf(stderr, "fusefloor: prealloc is at most 65536 MiB\n");
                goto out_args;
        }
        if (floor_init() < 0 || blk_prealloc(F.prealloc) < 0) {
                fprintf(stderr, "fusefloor: out of memory\n");
                goto out_floor;
        }
        se = fuse_session_new(&args, &floor_ops, sizeof(floor_ops), &F);
        if (!se)
                goto out_floor;
        if (fuse_set_signal_handlers(se) != 0)
                goto out_session;
        if (fuse_session_mount(se, cmd.mountpoint) != 0)
                goto out_signals;
        static const struct fuse_custom_io io = {.writev = io_writev, .read = io_read};
        if (fuse_session_custom_io(se, &io, fuse_session_fd(se)) != 0) {
                fprintf(stderr, "fusefloor: cannot install the INIT patch\n");
                goto out_unmount;
        }
        if (fuse_daemonize(cmd.foreground) != 0)
                goto out_unmount;
        if (cmd.singlethread) {
                ret = fuse_session_loop(se);
        } else if (!F.growpool) {
                /* every worker from the start, as the ntfs mount (fs/fusepool.h) */
                ret = fusepool_run(se, cmd.max_threads, "fusefloor-wk");
        } else {
                cfg = fuse_loop_cfg_create();
                if (!cfg)
                        goto out_unmount;
                fuse_loop_cfg_set_clone_fd(cfg, cmd.clone_fd);
                if (cmd.max_idle_threads != UINT_MAX) /* UINT_MAX: not given */
                        fuse_loop_cfg_set_idle_threads(cfg, cmd.max_idle_threads);
                fuse_loop_cfg_set_max_threads(cfg, cmd.max_threads ? cmd.max_threads : 10);
                ret = fuse_session_loop_mt(se, cfg);
        }
        ret = ret == 0 ? 0 : 1;
        write_stats();
out_unmount:
        fuse_session_unmount(se);
out_signals:
        fuse_remove_signal_handlers(se);
out_session:
        fuse_session_destroy(se);
out_floor:
        floor_destroy();
out_args:
        fuse_loop_cfg_destroy(cfg);
        free(cmd.mountpoint);
        free(F.stats);
        fuse_opt_free_args(&args);
        return ret;
}
