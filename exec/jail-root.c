/* SPDX-License-Identifier: MIT
 * jail-root.c — the jail's root filesystem, built by P1 in its private mount
 * namespace: the system directories bound read-only, a generated /etc, the
 * workspace, tmpfs for /tmp and /run, a covered /proc and a minimal /dev,
 * then pivot_root into it (docs/jail.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "exec/jail-helper.h"
#include "common/banned.h"

static void set_mount_attr(const char *path, uint64_t attrs, bool recursive) {
        struct mount_attr a = { .attr_set = attrs };
        if (mount_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &a, sizeof a) == 0)
                return;
        if (errno != ENOSYS)
                die_child("mount_setattr %s", path);
        /* Kernels before 5.12: remount the top mount only. */
        unsigned long fl = MS_BIND | MS_REMOUNT;
        if (attrs & MOUNT_ATTR_RDONLY)
                fl |= MS_RDONLY;
        if (attrs & MOUNT_ATTR_NOSUID)
                fl |= MS_NOSUID;
        if (attrs & MOUNT_ATTR_NODEV)
                fl |= MS_NODEV;
        if (attrs & MOUNT_ATTR_NOEXEC)
                fl |= MS_NOEXEC;
        CHECK(mount(NULL, path, NULL, fl, NULL), "remount %s", path);
}

static void bind_ro(const char *src, const char *dst) {
        CHECK(mount(src, dst, NULL, MS_BIND | MS_REC, NULL), "bind %s", src);
        set_mount_attr(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, true);
}

static void make_file(const char *path, const char *content, mode_t mode) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                die_child("create %s", path);
        write_all(fd, content, strlen(content));
}

/* Mirrors a host top-level entry: symlink stays a symlink, a directory is
 * bound read-only, anything else (or nothing) is skipped. */
static void mirror_host(const char *host, const char *dst) {
        struct stat st;
        if (lstat(host, &st) < 0)
                return;
        if (S_ISLNK(st.st_mode)) {
                char target[PATH_MAX];
                ssize_t n = readlink(host, target, sizeof target - 1);
                if (n < 0)
                        die_child("readlink %s", host);
                target[n] = 0;
                CHECK(symlink(target, dst), "symlink %s", dst);
        } else if (S_ISDIR(st.st_mode)) {
                CHECK(mkdir(dst, 0755), "mkdir %s", dst);
                bind_ro(host, dst);
        } else if (S_ISREG(st.st_mode)) {
                make_file(dst, "", 0644);
                bind_ro(host, dst);
        }
}

static const char etc_passwd[] = "root:x:0:0:root:/workspace:/bin/bash\n"
                                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char etc_group[] = "root:x:0:\nnogroup:x:65534:\n";
static const char etc_hosts[] = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                                "127.0.1.1\tntfs-jail\n";
static const char etc_nsswitch[] = "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"
                                   "networks: files\nprotocols: files\nservices: files\n";

/* The host path of the workspace, made as directories below the new root
 * (the current directory) without following a symlink, for the one-path
 * mount: 1 when it is there to mount on, 0 when it cannot be (not absolute
 * and normal, under a directory the jail fills itself or mounts read-only,
 * through a symlink), and the workspace is then only at /workspace. */
static int make_host_path(const char *path) {
        static const char *const reserved[] = { "proc", "dev", "sys", "run", "usr", "bin", "sbin", "lib",
                                                "lib32", "lib64", "libx32", "etc", "workspace" };
        if (path[0] != '/' || strnlen(path, PATH_MAX) >= PATH_MAX)
                return 0;
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", path + 1);
        _cleanup_close_ int dir = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0)
                return 0;
        int depth = 0;
        for (char *save = NULL, *comp = strtok_r(buf, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
                if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0)
                        return 0;
                for (size_t i = 0; depth == 0 && i < ARRAY_SIZE(reserved); i++)
                        if (strcmp(comp, reserved[i]) == 0)
                                return 0;
                if (mkdirat(dir, comp, 0755) < 0 && errno != EEXIST)
                        return 0;
                int next = openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0)
                        return 0;
                close(dir);
                dir = next;
                depth++;
        }
        return depth > 0;
}

/* Builds the new root on a tmpfs mounted over /tmp of our private mount
 * namespace (as bubblewrap does), then pivots into it. ws_fd is an O_PATH
 * fd of the workspace, opened before /tmp was covered. */
void build_root(const struct opts *o, int ws_fd) {
        CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private");
        CHECK(mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"),
              "mount root tmpfs");
        CHECK(chdir("/tmp"), "chdir new root");

        CHECK(mkdir("usr", 0755), "mkdir usr");
        bind_ro("/usr", "usr");
        static const char *const tops[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
        for (size_t i = 0; i < ARRAY_SIZE(tops); i++) {
                char host[32];
                snprintf(host, sizeof host, "/%s", tops[i]);
                mirror_host(host, tops[i]);
        }

        trace("p1 root: system dirs");
        CHECK(mkdir("etc", 0755), "mkdir etc");
        make_file("etc/passwd", etc_passwd, 0644);
        make_file("etc/group", etc_group, 0644);
        make_file("etc/hosts", etc_hosts, 0644);
        make_file("etc/hostname", "ntfs-jail\n", 0644);
        make_file("etc/resolv.conf", "", 0644);
        make_file("etc/nsswitch.conf", etc_nsswitch, 0644);
        /* What the system directories need to work: the loader cache and
         * Debian's alternatives symlinks (awk, cc, editor...). */
        static const char *const etc_keep[] = { "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
                                                "localtime" };
        for (size_t i = 0; i < ARRAY_SIZE(etc_keep); i++) {
                char host[64], dst[64];
                snprintf(host, sizeof host, "/etc/%s", etc_keep[i]);
                snprintf(dst, sizeof dst, "etc/%s", etc_keep[i]);
                mirror_host(host, dst);
        }

        CHECK(mkdir("tmp", 01777), "mkdir tmp");
        char data[96];
        snprintf(data, sizeof data, "mode=1777,size=%llu,nr_inodes=65536", (unsigned long long)o->tmp_bytes);
        CHECK(mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, data), "mount /tmp");

        CHECK(mkdir("run", 0755), "mkdir run");
        CHECK(mount("tmpfs", "run", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=2m,nr_inodes=64"),
              "mount /run");
        CHECK(mkdir("var", 0755), "mkdir var");
        CHECK(symlink("/tmp", "var/tmp"), "symlink /var/tmp");
        CHECK(mkdir("home", 0755), "mkdir home");

        /* The workspace: nosuid, nodev, and read-only when asked. One path
         * on both sides (docs/jail.md): it is mounted at its host path, and
         * /workspace is a symlink to that, so the absolute paths a program
         * writes on either side (a venv's shebangs, a build directory's)
         * name the same files on the other. Where the host path cannot be
         * made here (make_host_path), it is mounted at /workspace itself.
         * Made after /tmp and /run, which would cover a host path below. */
        char src[64];
        snprintf(src, sizeof src, "/proc/self/fd/%d", ws_fd);
        const char *at = "workspace";
        if (make_host_path(o->workspace)) {
                at = o->workspace + 1;
                CHECK(symlink(o->workspace, "workspace"), "symlink /workspace");
        } else {
                CHECK(mkdir("workspace", 0755), "mkdir workspace");
        }
        CHECK(mount(src, at, NULL, MS_BIND | MS_REC, NULL), "bind workspace");
        set_mount_attr(at, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (o->ro ? MOUNT_ATTR_RDONLY : 0), true);

        /* /proc of the new pid namespace, dangerous files covered by an
         * empty regular file on the (soon read-only) root: reads see
         * nothing, writes fail with EROFS (a /dev/null cover would take
         * writes silently). */
        trace("p1 root: etc ws tmp run");
        make_file(".masked", "", 0444);
        CHECK(mkdir("proc", 0555), "mkdir proc");
        CHECK(mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /proc");
        static const char *const proc_null[] = { "kcore", "kmsg", "kallsyms", "sysrq-trigger", "timer_list",
                                                 "sched_debug", "keys", "key-users", "latency_stats",
                                                 "config.gz", "kpagecount", "kpageflags", "kpagecgroup",
                                                 "vmallocinfo", "iomem", "ioports", "modules", "slabinfo" };
        for (size_t i = 0; i < ARRAY_SIZE(proc_null); i++) {
                char p[64];
                snprintf(p, sizeof p, "proc/%s", proc_null[i]);
                struct stat st;
                if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode))
                        continue;
                CHECK(mount(".masked", p, NULL, MS_BIND, NULL), "cover %s", p);
                set_mount_attr(p, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
        }
        static const char *const proc_empty[] = { "acpi", "scsi", "asound", "driver", "tty", "pressure" };
        for (size_t i = 0; i < ARRAY_SIZE(proc_empty); i++) {
                char p[64];
                snprintf(p, sizeof p, "proc/%s", proc_empty[i]);
                struct stat st;
                if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode))
                        continue;
                CHECK(mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555"),
                      "cover %s", p);
        }
        static const char *const proc_ro[] = { "sys", "irq", "bus", "fs" };
        for (size_t i = 0; i < ARRAY_SIZE(proc_ro); i++) {
                char p[64];
                snprintf(p, sizeof p, "proc/%s", proc_ro[i]);
                struct stat st;
                if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode))
                        continue;
                CHECK(mount(p, p, NULL, MS_BIND | MS_REC, NULL), "bind %s", p);
                set_mount_attr(p, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                               true);
        }

        trace("p1 root: proc");
        /* A minimal /dev: bound host nodes, a private devpts, read-only. */
        CHECK(mkdir("dev", 0755), "mkdir dev");
        CHECK(mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"),
              "mount /dev");
        static const char *const devs[] = { "null", "zero", "full", "random", "urandom", "tty" };
        for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
                char host[32], dst[32];
                snprintf(host, sizeof host, "/dev/%s", devs[i]);
                snprintf(dst, sizeof dst, "dev/%s", devs[i]);
                make_file(dst, "", 0666);
                CHECK(mount(host, dst, NULL, MS_BIND, NULL), "bind %s", host);
                set_mount_attr(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
        }
        CHECK(mkdir("dev/pts", 0755), "mkdir dev/pts");
        CHECK(mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"),
              "mount devpts");
        CHECK(symlink("pts/ptmx", "dev/ptmx"), "symlink ptmx");
        CHECK(symlink("/proc/self/fd", "dev/fd"), "symlink fd");
        CHECK(symlink("/proc/self/fd/0", "dev/stdin"), "symlink stdin");
        CHECK(symlink("/proc/self/fd/1", "dev/stdout"), "symlink stdout");
        CHECK(symlink("/proc/self/fd/2", "dev/stderr"), "symlink stderr");
        CHECK(symlink("/tmp", "dev/shm"), "symlink shm");
        set_mount_attr("dev", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);

        trace("p1 root: dev");
        /* Into the new root; the old one is detached, not just hidden. */
        CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root");
        CHECK(umount2(".", MNT_DETACH), "detach old root");
        CHECK(chdir("/"), "chdir /");
        set_mount_attr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false);
}
