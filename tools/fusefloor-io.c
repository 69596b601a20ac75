/* SPDX-License-Identifier: MIT
 * fusefloor-io.c — fusefloor's side of the kernel connection: the custom
 * read and writev that libfuse calls for every request and reply (the
 * INIT reply patch, the per-request timing of stats=PATH) and INIT itself.
 */
#define FUSE_USE_VERSION 312

#include <linux/fuse.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tools/fusefloor.h"
#include "common/banned.h"

__thread struct timespec tls_start;
__thread int tls_op = -1;

ssize_t io_read(int fd, void *buf, size_t len, void *ud) {
        ssize_t r = read(fd, buf, len);
        const struct fuse_in_header *ih = buf;
        if (r >= (ssize_t)(sizeof(*ih) + 16) && ih->opcode == FUSE_INIT) {
                /* fuse_init_in: major, minor, max_readahead, flags (libfuse
                 * 3.14 has no capability bit for HANDLE_KILLPRIV_V2) */
                uint32_t in[4];
                memcpy(in, (const char *)buf + sizeof(*ih), sizeof in);
                F.kernel_minor = in[1];
                F.kernel_flags = in[3];
        }
        tls_op = -1;
        if (F.stats)
                clock_gettime(CLOCK_MONOTONIC, &tls_start);
        return r;
}

/* libfuse 3.14 computes the INIT reply flags from conn->want but has no line
 * for FUSE_CAP_PARALLEL_DIROPS or FUSE_CAP_HANDLE_KILLPRIV (fixed in later
 * libfuse), so the kernel never sees them. The INIT reply is the first message
 * the daemon writes; add the two kernel flags to it on the way out. */
ssize_t io_writev(int fd, struct iovec *iov, int count, void *ud) {
        if (!atomic_load(&F.init_seen) && count >= 2 &&
            iov[0].iov_len == sizeof(struct fuse_out_header) &&
            iov[1].iov_len >= offsetof(struct fuse_init_out, max_background)) {
                atomic_store(&F.init_seen, true);
                struct fuse_out_header *oh = iov[0].iov_base;
                struct fuse_init_out *io = iov[1].iov_base;
                if (oh->error == 0)
                        io->flags |= F.extra_flags;
        }
        if (F.stats && tls_op >= 0) {
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                int64_t ns = (now.tv_sec - tls_start.tv_sec) * 1000000000LL + (now.tv_nsec - tls_start.tv_nsec);
                atomic_fetch_add_explicit(&F.ns[tls_op], (uint_fast64_t)ns, memory_order_relaxed);
                tls_op = -1;
        }
        return writev(fd, iov, count);
}

void op_init(void *ud, struct fuse_conn_info *conn) {
        conn->max_write = MAX_WRITE;
        conn->max_readahead = MAX_WRITE;
        conn->want |= conn->capable & (FUSE_CAP_READDIRPLUS | FUSE_CAP_ASYNC_READ |
                                       FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_HANDLE_KILLPRIV);
        conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO; /* always plus */
        if (F.noautoinval)
                conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
        if (F.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
                conn->want |= FUSE_CAP_WRITEBACK_CACHE;
        else
                conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
        if (!F.nopatch) {
                if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
                        F.extra_flags |= FUSE_PARALLEL_DIROPS;
                if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV)
                        F.extra_flags |= FUSE_HANDLE_KILLPRIV;
        }
        if (F.killpriv2 && F.kernel_minor >= 33 && (F.kernel_flags & FUSE_HANDLE_KILLPRIV_V2)) {
                F.extra_flags |= FUSE_HANDLE_KILLPRIV_V2;
                F.killpriv2_on = true;
        }
        /* With no_open the kernel never sends the OPEN that would carry
         * O_TRUNC, so atomic_o_trunc must be off: the kernel then truncates
         * with a SETATTR (an open(O_TRUNC) that truncated nothing was the
         * bug this prevents). */
        if (!F.open)
                conn->want &= ~(unsigned)FUSE_CAP_ATOMIC_O_TRUNC;
        /* FUSE_CAP_NO_OPEN_SUPPORT / NO_OPENDIR_SUPPORT need no flag here: the
         * kernel stops sending OPEN once one OPEN is answered with ENOSYS. */
}
