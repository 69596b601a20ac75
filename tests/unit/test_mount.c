/* SPDX-License-Identifier: MIT
 * test_mount.c — the mount library in-process: mount a session, use it with
 * plain syscalls, roll back under it, stop. Needs root and /dev/fuse (skips
 * otherwise). The full POSIX list is in tests/integration/test_mount.py.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "fs/mount.h"
#include "fs/store.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

static char base[] = "/tmp/ntfs-test-mount-XXXXXX";
static char store_path[256], mnt_path[256];

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(p);
}

static void write_file(const char *path, const char *s) {
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0)
                FAIL("open %s: %s", path, strerror(errno));
        ASSERT_EQ(write(fd, s, strlen(s)), (long)strlen(s));
        ASSERT_EQ(close(fd), 0);
}

static void read_file(const char *path, char *buf, size_t size) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                FAIL("open %s: %s", path, strerror(errno));
        ssize_t n = read(fd, buf, size - 1);
        close(fd);
        ASSERT(n >= 0);
        buf[n] = 0;
}

static size_t count_entries(const char *dir) {
        DIR *d = opendir(dir);
        ASSERT(d);
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        n++;
        closedir(d);
        return n;
}

TEST(mount_use_rollback_stop) {
        ntfs_store *st = NULL;
        ntfs_ws *ws = NULL;
        ntfs_mount *m = NULL;
        char p[512], buf[128];

        ASSERT_OK(ntfs_store_open(store_path, NULL, &st));
        ASSERT_OK(ntfs_session_create(st, "s", NULL, NULL));
        ASSERT_OK(ntfs_ws_open(st, "s", &ws));
        struct ntfs_mount_opts o;
        ntfs_mount_opts_init(&o);
        o.mountpoint = mnt_path;
        ASSERT_OK(ntfs_mount_start(ws, &o, &m));
        ASSERT(ntfs_mount_alive(m));
        ASSERT_STREQ(ntfs_mount_point(m), mnt_path);

        snprintf(p, sizeof(p), "%s/a", mnt_path);
        write_file(p, "one");
        snprintf(p, sizeof(p), "%s/d", mnt_path);
        ASSERT_EQ(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/d/x", mnt_path);
        write_file(p, "x");
        struct ntfs_mount_stats s;
        ntfs_mount_get_stats(m, &s);
        ASSERT(s.known_inodes >= 3);
        ASSERT(s.known_entries >= 3);

        ASSERT_OK(ntfs_mount_flush_kernel(m));
        ntfs_hash h;
        bool changed;
        ASSERT_OK(ntfs_checkpoint(st, "s", "t", NULL, &h, &changed));
        ASSERT(changed);

        snprintf(p, sizeof(p), "%s/a", mnt_path);
        write_file(p, "two, longer");
        snprintf(p, sizeof(p), "%s/d/x", mnt_path);
        ASSERT_EQ(unlink(p), 0);
        snprintf(p, sizeof(p), "%s/d", mnt_path);
        ASSERT_EQ(count_entries(p), 0);

        ASSERT_OK(ntfs_rollback(st, "s", NULL, 0, &h));
        ntfs_mount_invalidate_all(m);
        snprintf(p, sizeof(p), "%s/a", mnt_path);
        read_file(p, buf, sizeof(buf));
        ASSERT_STREQ(buf, "one");
        struct stat sb;
        ASSERT_EQ(stat(p, &sb), 0);
        ASSERT_EQ(sb.st_size, 3);
        snprintf(p, sizeof(p), "%s/d", mnt_path);
        ASSERT_EQ(count_entries(p), 1);
        ntfs_mount_get_stats(m, &s);
        ASSERT(s.invalidations >= 1);

        ASSERT_OK(ntfs_mount_stop(m));
        ASSERT(stat(mnt_path, &sb) == 0 && sb.st_dev != 0);
        ntfs_ws_close(ws);
        ntfs_store_close(st);
}

TEST(stop_when_busy_is_lazy) {
        ntfs_store *st = NULL;
        ntfs_ws *ws = NULL;
        ntfs_mount *m = NULL;
        char p[512];
        ASSERT_OK(ntfs_store_open(store_path, NULL, &st));
        ASSERT_OK(ntfs_ws_open(st, "s", &ws));
        struct ntfs_mount_opts o;
        ntfs_mount_opts_init(&o);
        o.mountpoint = mnt_path;
        ASSERT_OK(ntfs_mount_start(ws, &o, &m));
        snprintf(p, sizeof(p), "%s/a", mnt_path);
        int fd = open(p, O_RDONLY | O_CLOEXEC); /* keeps the mount busy */
        ASSERT(fd >= 0);
        ASSERT_OK(ntfs_mount_stop(m));
        close(fd);
        /* nothing mounted there any more */
        struct stat a, b;
        ASSERT_EQ(stat(mnt_path, &a), 0);
        ASSERT_EQ(stat(base, &b), 0);
        ASSERT_EQ(a.st_dev, b.st_dev);
        ntfs_ws_close(ws);
        ntfs_store_close(st);
}

TEST(bad_mountpoint) {
        ntfs_store *st = NULL;
        ntfs_ws *ws = NULL;
        ntfs_mount *m = NULL;
        ASSERT_OK(ntfs_store_open(store_path, NULL, &st));
        ASSERT_OK(ntfs_ws_open(st, "s", &ws));
        struct ntfs_mount_opts o;
        ntfs_mount_opts_init(&o);
        o.mountpoint = "/nonexistent/ntfs-mnt";
        ASSERT_ERR(ntfs_mount_start(ws, &o, &m), -ENOENT);
        ASSERT(m == NULL);
        ASSERT_OK(ntfs_mount_stop(NULL));
        ntfs_ws_close(ws);
        ntfs_store_close(st);
}

int main(void) {
        if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
                printf("1..0 # SKIP needs root and /dev/fuse\n");
                return 77;
        }
        if (!mkdtemp(base))
                return 1;
        chmod(base, 0755);
        snprintf(store_path, sizeof(store_path), "%s/store", base);
        snprintf(mnt_path, sizeof(mnt_path), "%s/mnt", base);
        if (mkdir(store_path, 0700) < 0 || mkdir(mnt_path, 0755) < 0)
                return 1;
        RUN(mount_use_rollback_stop);
        RUN(stop_when_busy_is_lazy);
        RUN(bad_mountpoint);
        umount2(mnt_path, MNT_DETACH); /* after a failed test */
        nftw(base, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
        return tap_done();
}
