/* SPDX-License-Identifier: MIT
 * jail-seccomp.c — the jail's seccomp filter: built with libseccomp and
 * exported as a BPF program by P0, sent to P1 with its go, and loaded by P1
 * (P3, P2 and the command inherit it), whose listener P0 serves
 * (docs/jail.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "exec/jail-internal.h"
#include "exec/jail-helper.h"
#include "common/banned.h"

static void rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *c) {
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR) {
                errno = 0;
                die_child("seccomp: unknown syscall %s", name);
        }
        int r = seccomp_rule_add_array(ctx, action, nr, n, c);
        if (r < 0) {
                errno = -r;
                die_child("seccomp: rule for %s", name);
        }
}

/* A rule for a syscall libseccomp may not know by name (newer than it):
 * by name when it does, else by its number on this arch. */
static void rule_nr(scmp_filter_ctx ctx, uint32_t action, const char *name, int fallback_nr, unsigned n,
                    const struct scmp_arg_cmp *c) {
        int nr = seccomp_syscall_resolve_name(name);
        if (nr == __NR_SCMP_ERROR)
                nr = fallback_nr;
        int r = seccomp_rule_add_array(ctx, action, nr, n, c);
        if (r < 0) {
                errno = -r;
                die_child("seccomp: rule for %s", name);
        }
}

/* Setuid and setgid bits are never set from the jail (docs/jail.md,
 * "Setuid and setgid"): every call that gives a file a mode with S_ISUID
 * or S_ISGID is EPERM — chmod, fchmod, fchmodat, fchmodat2, and creating a
 * file (open/openat with O_CREAT or O_TMPFILE, creat, mknod, mknodat).
 * mkdir ignores both bits. openat2 hides its mode in a struct the filter
 * cannot read: ENOSYS, and programs fall back to openat. */
static void no_setid_bits(scmp_filter_ctx ctx) {
        static const uint64_t bits[] = { S_ISUID, S_ISGID };
        static const struct {
                const char *name;
                int fallback_nr;
                unsigned mode_arg;
        } direct[] = { { "chmod", -1, 1 }, { "fchmod", -1, 1 }, { "fchmodat", -1, 2 }, { "fchmodat2", 452, 2 },
                       { "creat", -1, 1 },  { "mknod", -1, 1 },  { "mknodat", -1, 2 } };
        for (size_t i = 0; i < ARRAY_SIZE(direct); i++)
                for (size_t b = 0; b < ARRAY_SIZE(bits); b++) {
                        struct scmp_arg_cmp c = { .arg = direct[i].mode_arg, .op = SCMP_CMP_MASKED_EQ,
                                                  .datum_a = bits[b], .datum_b = bits[b] };
                        if (direct[i].fallback_nr >= 0)
                                rule_nr(ctx, SCMP_ACT_ERRNO(EPERM), direct[i].name, direct[i].fallback_nr, 1, &c);
                        else
                                rule(ctx, SCMP_ACT_ERRNO(EPERM), direct[i].name, 1, &c);
                }
        /* open(path, flags, mode), openat(dfd, path, flags, mode): only when
         * the flags create (O_CREAT; O_TMPFILE's own bit). */
        static const uint64_t creating[] = { O_CREAT, __O_TMPFILE };
        static const struct {
                const char *name;
                unsigned flags_arg;
        } opens[] = { { "open", 1 }, { "openat", 2 } };
        for (size_t i = 0; i < ARRAY_SIZE(opens); i++)
                for (size_t f = 0; f < ARRAY_SIZE(creating); f++)
                        for (size_t b = 0; b < ARRAY_SIZE(bits); b++) {
                                struct scmp_arg_cmp c[2] = {
                                        { .arg = opens[i].flags_arg, .op = SCMP_CMP_MASKED_EQ,
                                          .datum_a = creating[f], .datum_b = creating[f] },
                                        { .arg = opens[i].flags_arg + 1, .op = SCMP_CMP_MASKED_EQ,
                                          .datum_a = bits[b], .datum_b = bits[b] },
                                };
                                rule(ctx, SCMP_ACT_ERRNO(EPERM), opens[i].name, 2, c);
                        }
        rule_nr(ctx, SCMP_ACT_ERRNO(ENOSYS), "openat2", 437, 0, NULL);
}

static scmp_filter_ctx build_filter(void) {
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx) {
                errno = ENOMEM;
                die_child("seccomp_init");
        }
        /* Foreign ABIs (i386 via int 0x80, x32 syscall numbers) end the
         * process: only the native arch is in the filter. The action is a
         * user notification, not a plain kill, so that P0 (the listener)
         * learns which syscall it was, kills the process and reports it; the
         * syscall itself never runs (without a listener it fails with
         * ENOSYS). */
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_NOTIFY);
        if (r >= 0)
                r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); /* set, and checked, by us */
        if (r < 0) {
                errno = -r;
                die_child("seccomp attributes");
        }
        static const char *const eperm[] = {
                /* namespaces and mounts */
                "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount",
                "fsconfig", "fspick", "move_mount", "open_tree", "mount_setattr",
                /* other processes' memory */
                "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
                /* kernel attack surface a tool never needs */
                "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "init_module",
                "finit_module", "delete_module", "kexec_load", "kexec_file_load", "acct", "swapon",
                "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
                "syslog", "quotactl", "lookup_dcookie", "open_by_handle_at", "name_to_handle_at",
                "vhangup", "iopl", "ioperm", "uselib", "fanotify_init", "nfsservctl",
                /* the local descriptor table: 16-bit segments, old exploits' ground */
                "modify_ldt",
        };
        for (size_t i = 0; i < ARRAY_SIZE(eperm); i++)
                rule(ctx, SCMP_ACT_ERRNO(EPERM), eperm[i], 0, NULL);
        /* ENOSYS so runtimes (glibc, Go, tokio) fall back to older paths. */
        static const char *const enosys[] = { "clone3", "io_uring_setup", "io_uring_enter", "io_uring_register" };
        for (size_t i = 0; i < ARRAY_SIZE(enosys); i++)
                rule(ctx, SCMP_ACT_ERRNO(ENOSYS), enosys[i], 0, NULL);
        /* clone() with any namespace flag (flags are arg 0 on x86-64). */
        static const uint64_t ns_flags[] = { CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
                                             CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP };
        for (size_t i = 0; i < ARRAY_SIZE(ns_flags); i++) {
                struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
                rule(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &c);
        }
        /* personality: only the default persona (0) and the query
         * (0xffffffff). The kernel reads the argument as 32 bits, and one
         * rule compares one argument once, so "neither all zeros nor all
         * ones" is written as "two neighbouring bits differ": for each pair
         * of bits 31 rules of "01" and "10" under a two-bit mask. PER_BSD,
         * PER_LINUX32, ADDR_NO_RANDOMIZE (ASLR off for the children) and the
         * rest are EPERM. */
        for (unsigned b = 0; b < 31; b++) {
                struct scmp_arg_cmp lo = SCMP_A0(SCMP_CMP_MASKED_EQ, 3ULL << b, 1ULL << b);
                struct scmp_arg_cmp hi = SCMP_A0(SCMP_CMP_MASKED_EQ, 3ULL << b, 2ULL << b);
                rule(ctx, SCMP_ACT_ERRNO(EPERM), "personality", 1, &lo);
                rule(ctx, SCMP_ACT_ERRNO(EPERM), "personality", 1, &hi);
        }
        /* Terminal injection; the kernel reads cmd as 32 bits, so compare
         * only those (a high-bit variant is the same ioctl). */
        static const uint64_t ioctls[] = { TIOCSTI, TIOCLINUX };
        for (size_t i = 0; i < ARRAY_SIZE(ioctls); i++) {
                struct scmp_arg_cmp c = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, ioctls[i]);
                rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &c);
        }
        no_setid_bits(ctx);
        /* Socket families: only AF_UNIX (1), AF_INET (2), AF_INET6 (10).
         * Anything above 10 (and any value with high bits) is one GT rule,
         * the few below are listed. */
        static const char *const sock[] = { "socket", "socketpair" };
        for (size_t s = 0; s < ARRAY_SIZE(sock); s++) {
                struct scmp_arg_cmp gt = SCMP_A0(SCMP_CMP_GT, AF_INET6);
                rule(ctx, SCMP_ACT_ERRNO(EPERM), sock[s], 1, &gt);
                for (uint64_t fam = 0; fam < AF_INET6; fam++) {
                        if (fam == AF_UNIX || fam == AF_INET)
                                continue;
                        struct scmp_arg_cmp eq = SCMP_A0(SCMP_CMP_EQ, fam);
                        rule(ctx, SCMP_ACT_ERRNO(EPERM), sock[s], 1, &eq);
                }
        }
        return ctx;
}

void export_filter(struct jbuf *ret) {
        scmp_filter_ctx ctx = build_filter();
        int mfd = memfd_create("ntfs-jail-bpf", MFD_CLOEXEC);
        if (mfd < 0) {
                seccomp_release(ctx);
                die_child("memfd_create");
        }
        int r = seccomp_export_bpf(ctx, mfd);
        seccomp_release(ctx);
        off_t n = r < 0 ? -1 : lseek(mfd, 0, SEEK_END);
        if (r < 0 || n <= 0 || n > FILTER_MAX || n % (off_t)sizeof(struct sock_filter)) {
                close(mfd);
                errno = r < 0 ? -r : EPROTO;
                die_child("seccomp_export_bpf");
        }
        uint32_t len = (uint32_t)n;
        char buf[FILTER_MAX];
        size_t got = 0;
        while (got < len) {
                ssize_t k = pread(mfd, buf + got, len - got, (off_t)got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        close(mfd);
                        die_child("read back the filter");
                }
                got += (size_t)k;
        }
        close(mfd);
        if (jbuf_put(ret, "G", 1) < 0 || jbuf_put(ret, &len, sizeof len) < 0 || jbuf_put(ret, buf, len) < 0) {
                errno = ENOMEM;
                die_child("filter");
        }
}

static int read_full(int fd, void *p, size_t n) {
        char *c = p;
        while (n > 0) {
                ssize_t k = read(fd, c, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return -1;
                c += k;
                n -= (size_t)k;
        }
        return 0;
}

/* P1: waits for P0's go (the run's cgroup holds P1 now) and the filter. */
void receive_filter(int fd, struct filter *f) {
        char tag;
        uint32_t len;
        errno = 0;
        if (read_full(fd, &tag, 1) < 0 || tag != 'G' || read_full(fd, &len, sizeof len) < 0 || len == 0 ||
            len > FILTER_MAX || len % sizeof(struct sock_filter) || read_full(fd, f->insns, len) < 0)
                die_child("no filter from the helper");
        f->len = (unsigned short)(len / sizeof(struct sock_filter));
}

int load_filter(const struct filter *f, int *ret_listener) {
        struct sock_fprog prog = { .len = f->len, .filter = (struct sock_filter *)f->insns };
        int r = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
        if (r < 0 && errno == EINVAL) /* a kernel before 5.0: no listener, the foreign ABIs get ENOSYS */
                r = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
        else if (r >= 0) {
                *ret_listener = r;
                return 0;
        }
        *ret_listener = -1;
        return r < 0 ? -1 : 0;
}

static const char *seccomp_arch_name(uint32_t audit_arch, const uint32_t *nr, uint32_t *scmp_arch) {
        /* x32 numbers are the x86-64 ABI's with bit 30 set */
        if (audit_arch == SCMP_ARCH_X86_64 && (*nr & 0x40000000U)) {
                *scmp_arch = SCMP_ARCH_X32;
                return "x32";
        }
        *scmp_arch = audit_arch;
        switch (audit_arch) {
        case SCMP_ARCH_X86_64:
                return "x86_64";
        case SCMP_ARCH_X86:
                return "i386";
        case SCMP_ARCH_AARCH64:
                return "aarch64";
        case SCMP_ARCH_ARM:
                return "arm";
        default:
                return "unknown";
        }
}

int seccomp_syscall_name(uint32_t audit_arch, uint32_t nr, char *buf, size_t len) {
        uint32_t scmp_arch;
        const char *arch = seccomp_arch_name(audit_arch, &nr, &scmp_arch);
        char *name = seccomp_syscall_resolve_num_arch(scmp_arch, (int)nr);
        if (!name && scmp_arch == SCMP_ARCH_X32)
                name = seccomp_syscall_resolve_num_arch(scmp_arch, (int)(nr & ~0x40000000U));
        int n = name ? snprintf(buf, len, "%s %s", arch, name) : snprintf(buf, len, "%s syscall %u", arch, nr);
        free(name);
        return n < 0 ? -EINVAL : 0;
}
