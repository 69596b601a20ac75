/* SPDX-License-Identifier: MIT
 * probe — small syscalls the jail must refuse, for tests/integration/test_jail.py.
 * Compiled on the host at test time and copied into the jail's workspace.
 *
 *   probe NAME...   prints "NAME=OK" or "NAME=<ERRNO NAME>" for each case;
 *                   cases that the filter kills (x32, int80) never print.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static void report(const char *name, long r) {
        if (r < 0)
                printf("%s=%s\n", name, strerrorname_np(errno));
        else
                printf("%s=OK\n", name);
        fflush(stdout);
}

static pid_t sleeper(void) {
        pid_t p = fork();
        if (p == 0) {
                pause();
                _exit(0);
        }
        return p;
}

static void reap(pid_t p) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
}

static long tiocsti(unsigned long cmd) {
        /* A pty that is our controlling terminal, so only the filter (not
         * the kernel's own "not your tty" check) can refuse. */
        int m = posix_openpt(O_RDWR | O_NOCTTY);
        if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
                return -1;
        const char *sn = ptsname(m);
        pid_t p = fork();
        if (p == 0) {
                setsid();
                int s = open(sn, O_RDWR); /* becomes the controlling tty */
                if (s < 0)
                        _exit(100);
                char c = 'x';
                errno = 0;
                long r = syscall(SYS_ioctl, s, cmd, &c);
                _exit(r < 0 ? errno : 0);
        }
        int st;
        waitpid(p, &st, 0);
        close(m);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
        errno = WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
        return -1;
}

static long run(const char *n) {
        if (!strcmp(n, "unshare_user"))
                return unshare(CLONE_NEWUSER);
        if (!strcmp(n, "unshare_mnt"))
                return unshare(CLONE_NEWNS);
        if (!strcmp(n, "unshare_net"))
                return unshare(CLONE_NEWNET);
        if (!strcmp(n, "clone_newuser") || !strcmp(n, "clone_newnet") || !strcmp(n, "clone_newpid") ||
            !strcmp(n, "clone_plain")) {
                unsigned long fl = SIGCHLD;
                if (!strcmp(n, "clone_newuser"))
                        fl |= CLONE_NEWUSER;
                if (!strcmp(n, "clone_newnet"))
                        fl |= CLONE_NEWNET;
                if (!strcmp(n, "clone_newpid"))
                        fl |= CLONE_NEWPID;
                long r = syscall(SYS_clone, fl, 0, 0, 0, 0);
                if (r == 0)
                        _exit(0);
                if (r > 0)
                        waitpid((pid_t)r, NULL, 0);
                return r;
        }
        if (!strcmp(n, "clone3")) {
                struct clone_args a = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };
                long r = syscall(SYS_clone3, &a, sizeof a);
                if (r == 0)
                        _exit(0);
                return r;
        }
        if (!strcmp(n, "setns"))
                return setns(-1, 0); /* EBADF from the kernel, EPERM from the filter */
        if (!strcmp(n, "mount"))
                return mount("tmpfs", "/tmp", "tmpfs", 0, NULL);
        if (!strcmp(n, "umount"))
                return umount2("/workspace", MNT_DETACH);
        if (!strcmp(n, "pivot_root"))
                return syscall(SYS_pivot_root, "/tmp", "/tmp");
        if (!strcmp(n, "chroot"))
                return chroot("/tmp");
        if (!strcmp(n, "fsopen"))
                return syscall(SYS_fsopen, "tmpfs", 0);
        if (!strcmp(n, "fspick"))
                return syscall(SYS_fspick, AT_FDCWD, "/", 0);
        if (!strcmp(n, "fsmount"))
                return syscall(SYS_fsmount, -1, 0, 0);
        if (!strcmp(n, "fsconfig"))
                return syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0);
        if (!strcmp(n, "open_tree"))
                return syscall(SYS_open_tree, AT_FDCWD, "/workspace", 1 /* OPEN_TREE_CLONE */);
        if (!strcmp(n, "move_mount"))
                return syscall(SYS_move_mount, AT_FDCWD, "/tmp", AT_FDCWD, "/workspace", 0);
        if (!strcmp(n, "mount_setattr"))
                return syscall(SYS_mount_setattr, AT_FDCWD, "/usr", 0, NULL, 0);
        if (!strcmp(n, "ptrace_attach")) {
                pid_t p = sleeper();
                long r = ptrace(PTRACE_ATTACH, p, 0, 0);
                int e = errno;
                reap(p);
                errno = e;
                return r;
        }
        if (!strcmp(n, "ptrace_traceme"))
                return ptrace(PTRACE_TRACEME, 0, 0, 0);
        if (!strcmp(n, "process_vm_readv")) {
                pid_t p = sleeper();
                char buf[8];
                static char src[8];
                struct iovec l = { buf, 8 }, rr = { src, 8 };
                long r = process_vm_readv(p, &l, 1, &rr, 1, 0);
                int e = errno;
                reap(p);
                errno = e;
                return r;
        }
        if (!strcmp(n, "tiocsti"))
                return tiocsti(TIOCSTI);
        if (!strcmp(n, "tiocsti_highbits"))
                return tiocsti(0xdead000000000000UL | TIOCSTI);
        if (!strcmp(n, "tioclinux"))
                return tiocsti(TIOCLINUX);
        if (!strcmp(n, "x32")) {
                /* getpid through the x32 ABI: the filter must kill us. */
                return syscall(0x40000000 | SYS_getpid);
        }
        if (!strcmp(n, "int80")) {
                long r;
                __asm__ volatile("int $0x80" : "=a"(r) : "a"(20) : "memory"); /* i386 getpid */
                return r;
        }
        /* personality: the default persona and the query only. */
        if (!strcmp(n, "personality_query"))
                return syscall(SYS_personality, 0xffffffffUL);
        if (!strcmp(n, "personality_query64"))
                return syscall(SYS_personality, ~0UL);
        if (!strcmp(n, "personality_default"))
                return syscall(SYS_personality, 0UL);
        if (!strcmp(n, "personality_bsd"))
                return syscall(SYS_personality, 0x0006UL /* PER_BSD */);
        if (!strcmp(n, "personality_linux32"))
                return syscall(SYS_personality, 0x0008UL /* PER_LINUX32 */);
        if (!strcmp(n, "personality_no_aslr"))
                return syscall(SYS_personality, 0x0040000UL /* ADDR_NO_RANDOMIZE */);
        if (!strcmp(n, "personality_high_bit"))
                return syscall(SYS_personality, 0x80000000UL);
        if (!strcmp(n, "personality_almost_query"))
                return syscall(SYS_personality, 0xfffffffeUL);
        if (!strcmp(n, "modify_ldt_read")) {
                char buf[16];
                return syscall(SYS_modify_ldt, 0, buf, sizeof buf);
        }
        if (!strcmp(n, "modify_ldt_write")) {
                /* struct user_desc, zeroed: an empty entry 0 */
                uint32_t desc[4] = { 0 };
                return syscall(SYS_modify_ldt, 1, desc, sizeof desc);
        }
        if (!strcmp(n, "io_uring_setup")) {
                char params[120] = { 0 };
                return syscall(SYS_io_uring_setup, 4, params);
        }
        if (!strcmp(n, "io_uring_enter"))
                return syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0);
        if (!strcmp(n, "bpf")) {
                char attr[128] = { 0 };
                return syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, attr, sizeof attr);
        }
        if (!strcmp(n, "perf_event_open")) {
                char attr[128] = { 0 };
                return syscall(SYS_perf_event_open, attr, 0, -1, -1, 0);
        }
        if (!strcmp(n, "userfaultfd"))
                return syscall(SYS_userfaultfd, 0);
        if (!strcmp(n, "keyctl"))
                return syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3, 0);
        if (!strcmp(n, "add_key"))
                return syscall(SYS_add_key, "user", "k", "v", 1, -3);
        if (!strcmp(n, "request_key"))
                return syscall(SYS_request_key, "user", "k", NULL, -3);
        if (!strcmp(n, "kexec_load"))
                return syscall(SYS_kexec_load, 0, 0, NULL, 0);
        if (!strcmp(n, "kexec_file_load"))
                return syscall(SYS_kexec_file_load, -1, -1, 0, "", 0);
        if (!strcmp(n, "init_module"))
                return syscall(SYS_init_module, NULL, 0, "");
        if (!strcmp(n, "finit_module"))
                return syscall(SYS_finit_module, -1, "", 0);
        if (!strcmp(n, "delete_module"))
                return syscall(SYS_delete_module, "ext4", 0);
        if (!strcmp(n, "reboot"))
                return syscall(SYS_reboot, 0xfee1dead, 672274793, 0x1234567, NULL);
        if (!strcmp(n, "settimeofday")) {
                struct timeval tv = { 0, 0 };
                return settimeofday(&tv, NULL);
        }
        if (!strcmp(n, "clock_settime")) {
                struct timespec ts = { 0, 0 };
                return clock_settime(CLOCK_REALTIME, &ts);
        }
        if (!strcmp(n, "swapon"))
                return syscall(SYS_swapon, "/tmp/swap", 0);
        if (!strcmp(n, "acct"))
                return syscall(SYS_acct, "/tmp/acct");
        if (!strcmp(n, "open_by_handle_at"))
                return syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0);
        if (!strcmp(n, "sock_unix"))
                return socket(AF_UNIX, SOCK_STREAM, 0);
        if (!strcmp(n, "sock_inet"))
                return socket(AF_INET, SOCK_STREAM, 0);
        if (!strcmp(n, "sock_inet6"))
                return socket(AF_INET6, SOCK_DGRAM, 0);
        if (!strcmp(n, "sock_netlink"))
                return socket(AF_NETLINK, SOCK_RAW, 0);
        if (!strcmp(n, "sock_packet"))
                return socket(AF_PACKET, SOCK_RAW, 0);
        if (!strcmp(n, "sock_key"))
                return socket(AF_KEY, SOCK_RAW, 2);
        if (!strcmp(n, "sock_appletalk"))
                return socket(AF_APPLETALK, SOCK_DGRAM, 0);
        if (!strcmp(n, "sock_vsock"))
                return socket(AF_VSOCK, SOCK_STREAM, 0);
        if (!strcmp(n, "sock_highbits_netlink"))
                return syscall(SYS_socket, 0x100000000UL | AF_NETLINK, SOCK_RAW, 0);
        if (!strcmp(n, "socketpair_netlink")) {
                int sv[2];
                return socketpair(AF_NETLINK, SOCK_RAW, 0, sv);
        }
        if (!strcmp(n, "mknod_block"))
                return mknod("/workspace/sda", S_IFBLK | 0600, makedev(8, 0));
        if (!strcmp(n, "mknod_char_tmp"))
                return mknod("/tmp/mem", S_IFCHR | 0600, makedev(1, 1));
        if (!strcmp(n, "mknod_fifo"))
                return mknod("/tmp/fifo", S_IFIFO | 0600, 0);
        if (!strcmp(n, "open_exe_write"))
                return open("/proc/self/exe", O_WRONLY);
        errno = EINVAL;
        return -1;
}

int main(int argc, char **argv) {
        for (int i = 1; i < argc; i++)
                report(argv[i], run(argv[i]));
        return 0;
}
