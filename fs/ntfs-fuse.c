/* SPDX-License-Identifier: MIT
 * ntfs-fuse — mounts one session (or a read-only view) of a store: the test
 * vehicle of the mount library until ntfsd serves mounts itself.
 *
 *   ntfs-fuse --store DIR [--create] [--session NAME | --at REF] [--ro]
 *             [-f] [--checkpoint-on-signal] [--threads N] [--timeout SECS]
 *             [--relatime] [--debug] MOUNTPOINT
 *
 * Serves until SIGTERM/SIGINT or until the mount goes away (unmounted from
 * outside), then unmounts, flushes the store durably and exits 0.
 * With --checkpoint-on-signal: SIGUSR1 checkpoints the session and prints
 * the commit id (64 hex digits) on a line of stdout; SIGUSR2 rolls back —
 * to the head when the working state is dirty (discarding it), else one
 * step back — and prints the new head. Errors go to stderr as
 * "ntfs-fuse: ..." lines. Without -f it detaches once mounted.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "fs/mount.h"
#include "fs/store.h"
#include "common/banned.h"

static void usage(FILE *f) {
        fprintf(f, "usage: ntfs-fuse --store DIR [--create] [--session NAME | --at REF] [--ro] [-f]\n"
                   "                 [--checkpoint-on-signal] [--threads N] [--timeout SECS] [--relatime]\n"
                   "                 [--debug] MOUNTPOINT\n");
}

static void on_mount_exit(ntfs_mount *m, void *ud) {
        /* The mount went away from outside: wake the main thread. */
        kill(getpid(), SIGHUP);
}

static void print_id(const ntfs_hash *h) {
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(h, hex);
        printf("%s\n", hex);
        fflush(stdout);
}

static void do_checkpoint(ntfs_store *st, ntfs_mount *m, const char *session) {
        int r = ntfs_mount_flush_kernel(m);
        if (r < 0) {
                fprintf(stderr, "ntfs-fuse: flushing the kernel's pages: %s\n", ntfs_strerror(r));
                return;
        }
        ntfs_hash h;
        bool changed;
        r = ntfs_checkpoint(st, session, "checkpoint (SIGUSR1)", NULL, &h, &changed);
        if (r < 0) {
                fprintf(stderr, "ntfs-fuse: checkpoint: %s\n", ntfs_strerror(r));
                return;
        }
        print_id(&h);
}

static void do_rollback(ntfs_store *st, ntfs_mount *m, const char *session) {
        struct ntfs_session_info si;
        int r = ntfs_session_get(st, session, &si);
        if (r < 0) {
                fprintf(stderr, "ntfs-fuse: rollback: %s\n", ntfs_strerror(r));
                return;
        }
        ntfs_hash h;
        r = ntfs_rollback(st, session, NULL, si.dirty ? 0 : 1, &h);
        if (r < 0) {
                fprintf(stderr, "ntfs-fuse: rollback: %s\n", ntfs_strerror(r));
                return;
        }
        /* The store may have run the invalidation on another thread; make
         * sure the kernel's caches are dropped before saying it is done. */
        ntfs_mount_invalidate_all(m);
        print_id(&h);
}

int main(int argc, char **argv) {
        const char *store_dir = NULL, *session = NULL, *at = NULL;
        bool create = false, ro = false, foreground = false, ckpt_signals = false, debug = false,
             relatime = false;
        uint64_t threads = 0;
        double timeout = -1; /* the mount library's default */
        enum { OPT_STORE = 256, OPT_CREATE, OPT_SESSION, OPT_AT, OPT_RO, OPT_CKPT, OPT_THREADS, OPT_TIMEOUT, OPT_DEBUG,
               OPT_RELATIME };
        static const struct option longopts[] = {
                {"store", required_argument, NULL, OPT_STORE},
                {"create", no_argument, NULL, OPT_CREATE},
                {"session", required_argument, NULL, OPT_SESSION},
                {"at", required_argument, NULL, OPT_AT},
                {"ro", no_argument, NULL, OPT_RO},
                {"foreground", no_argument, NULL, 'f'},
                {"checkpoint-on-signal", no_argument, NULL, OPT_CKPT},
                {"threads", required_argument, NULL, OPT_THREADS},
                {"timeout", required_argument, NULL, OPT_TIMEOUT},
                {"debug", no_argument, NULL, OPT_DEBUG},
                {"relatime", no_argument, NULL, OPT_RELATIME},
                {"help", no_argument, NULL, 'h'},
                {NULL, 0, NULL, 0},
        };
        int c;
        while ((c = getopt_long(argc, argv, "fh", longopts, NULL)) != -1) {
                switch (c) {
                case OPT_STORE: store_dir = optarg; break;
                case OPT_CREATE: create = true; break;
                case OPT_SESSION: session = optarg; break;
                case OPT_AT: at = optarg; break;
                case OPT_RO: ro = true; break;
                case 'f': foreground = true; break;
                case OPT_CKPT: ckpt_signals = true; break;
                case OPT_DEBUG: debug = true; break;
                case OPT_RELATIME: relatime = true; break;
                case OPT_THREADS:
                        if (ntfs_parse_u64(optarg, 256, &threads) < 0 || threads == 0) {
                                fprintf(stderr, "ntfs-fuse: --threads: 1..256\n");
                                return 2;
                        }
                        break;
                case OPT_TIMEOUT: {
                        char *end = NULL;
                        errno = 0;
                        timeout = strtod(optarg, &end);
                        if (errno || !end || *end || !(timeout >= 0 && timeout <= 86400)) {
                                fprintf(stderr, "ntfs-fuse: --timeout: 0..86400 seconds\n");
                                return 2;
                        }
                        break;
                }
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (!store_dir || optind != argc - 1 || (session && at) || (at && create)) {
                usage(stderr);
                return 2;
        }
        const char *mountpoint = argv[optind];
        if (!at && !session)
                session = "main";
        if (ckpt_signals && !session) {
                fprintf(stderr, "ntfs-fuse: --checkpoint-on-signal needs a session\n");
                return 2;
        }

        /* Without -f: detach once mounted (the parent waits for the child's
         * word through a pipe and exits with its status). */
        int ready_fd = -1;
        if (!foreground) {
                int p[2];
                if (pipe2(p, O_CLOEXEC) < 0) {
                        perror("ntfs-fuse: pipe");
                        return 1;
                }
                pid_t pid = fork();
                if (pid < 0) {
                        perror("ntfs-fuse: fork");
                        return 1;
                }
                if (pid > 0) {
                        close(p[1]);
                        char b = 1;
                        ssize_t n;
                        do
                                n = read(p[0], &b, 1);
                        while (n < 0 && errno == EINTR);
                        close(p[0]);
                        return n == 1 ? b : 1;
                }
                close(p[0]);
                ready_fd = p[1];
                if (setsid() < 0)
                        perror("ntfs-fuse: setsid");
        }

        /* Every thread created from here on (store flusher, FUSE loop)
         * inherits this mask; the main thread takes the signals. */
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGINT);
        sigaddset(&sigs, SIGHUP);
        sigaddset(&sigs, SIGUSR1);
        sigaddset(&sigs, SIGUSR2);
        sigaddset(&sigs, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);

        (void)ntfs_malloc_tune(); /* false only under a sanitizer's allocator */
        int ret = 1;
        ntfs_store *st = NULL;
        ntfs_ws *ws = NULL;
        ntfs_mount *m = NULL;
        int r = ntfs_store_open(store_dir, NULL, &st);
        if (r < 0) {
                fprintf(stderr, "ntfs-fuse: opening store %s: %s\n", store_dir, ntfs_strerror(r));
                goto out;
        }
        if (create) {
                r = ntfs_session_create(st, session, NULL, NULL);
                if (r < 0 && r != -NTFS_ESESSEXISTS) {
                        fprintf(stderr, "ntfs-fuse: creating session %s: %s\n", session, ntfs_strerror(r));
                        goto out;
                }
        }
        if (at || ro)
                r = ntfs_ws_open_view(st, at ? at : session, &ws);
        else
                r = ntfs_ws_open(st, session, &ws);
        if (r < 0) {
                fprintf(stderr, "ntfs-fuse: opening %s: %s\n", at ? at : session, ntfs_strerror(r));
                goto out;
        }

        struct ntfs_mount_opts mo;
        ntfs_mount_opts_init(&mo);
        mo.mountpoint = mountpoint;
        mo.read_only = ro || at;
        mo.debug = debug;
        mo.relatime = relatime;
        if (timeout >= 0)
                mo.entry_timeout = mo.attr_timeout = timeout;
        if (threads)
                mo.max_threads = (uint32_t)threads;
        mo.on_exit = on_mount_exit;
        r = ntfs_mount_start(ws, &mo, &m);
        if (r < 0) {
                fprintf(stderr, "ntfs-fuse: mounting at %s: %s\n", mountpoint, ntfs_strerror(r));
                goto out;
        }
        if (ready_fd >= 0) {
                char ok = 0;
                ssize_t w;
                do
                        w = write(ready_fd, &ok, 1);
                while (w < 0 && errno == EINTR);
                close(ready_fd);
                ready_fd = -1;
        }

        for (;;) {
                siginfo_t si;
                int s = sigwaitinfo(&sigs, &si);
                if (s < 0) {
                        if (errno == EINTR)
                                continue;
                        perror("ntfs-fuse: sigwaitinfo");
                        break;
                }
                if (s == SIGTERM || s == SIGINT || s == SIGHUP)
                        break;
                if (s == SIGUSR1 && ckpt_signals && !at && !ro)
                        do_checkpoint(st, m, session);
                else if (s == SIGUSR2 && ckpt_signals && !at && !ro)
                        do_rollback(st, m, session);
        }
        ret = 0;
out:
        r = ntfs_mount_stop(m);
        if (r < 0)
                fprintf(stderr, "ntfs-fuse: unmounting %s: %s\n", mountpoint, ntfs_strerror(r));
        if (ws)
                ntfs_ws_close(ws);
        if (st) {
                r = ntfs_store_flush(st, true);
                if (r < 0) {
                        fprintf(stderr, "ntfs-fuse: flushing the store: %s\n", ntfs_strerror(r));
                        ret = 1;
                }
                ntfs_store_close(st);
        }
        if (ready_fd >= 0) {
                char fail = 1;
                ssize_t w;
                do
                        w = write(ready_fd, &fail, 1);
                while (w < 0 && errno == EINTR);
                close(ready_fd);
        }
        return ret;
}
