/* SPDX-License-Identifier: MIT
 * cgroup.c — per-run cgroups for the jail, v2 or v1 (see jail-internal.h).
 *
 * A run gets its own directory under the helper's own cgroup in each
 * hierarchy it uses: v2 when the unified hierarchy offers memory and pids,
 * otherwise the v1 memory, pids and cpu hierarchies, each where mounted.
 */
#include "exec/jail-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "common/banned.h"

static int write_str(const char *dir, const char *file, const char *val) {
        char path[PATH_MAX];
        int n = snprintf(path, sizeof path, "%s/%s", dir, file);
        if (n < 0 || (size_t)n >= sizeof path)
                return -ENAMETOOLONG;
        return ntfs_write_attr(path, val);
}

static int read_small(const char *dir, const char *file, char **ret) {
        char path[PATH_MAX];
        int n = snprintf(path, sizeof path, "%s/%s", dir, file);
        if (n < 0 || (size_t)n >= sizeof path)
                return -ENAMETOOLONG;
        return ntfs_read_file(path, 1024 * 1024, ret, NULL);
}

static bool has_token(const char *list, const char *tok, const char *seps) {
        size_t tl = strlen(tok);
        const char *p = list;
        while (*p) {
                size_t l = strcspn(p, seps);
                if (l == tl && memcmp(p, tok, tl) == 0)
                        return true;
                p += l;
                if (*p)
                        p++;
        }
        return false;
}

/* Finds the directory of this process's cgroup in the hierarchy that is
 * mounted with fstype and (for v1) carries controller. */
static int own_cgroup_dir(const char *fstype, const char *controller, char **ret) {
        _cleanup_free_ char *mi = NULL, *pc = NULL;
        int r = ntfs_read_file("/proc/self/mountinfo", 4 * 1024 * 1024, &mi, NULL);
        if (r < 0)
                return r;
        r = ntfs_read_file("/proc/self/cgroup", 1024 * 1024, &pc, NULL);
        if (r < 0)
                return r;
        char mnt[PATH_MAX] = "", root[PATH_MAX] = "";
        for (char *save = NULL, *line = strtok_r(mi, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *f[16];
                int nf = 0;
                for (char *s2 = NULL, *t = strtok_r(line, " ", &s2); t && nf < 16; t = strtok_r(NULL, " ", &s2))
                        f[nf++] = t;
                int dash = -1;
                for (int i = 6; i < nf; i++)
                        if (strcmp(f[i], "-") == 0) {
                                dash = i;
                                break;
                        }
                if (dash < 0 || dash + 3 >= nf || strcmp(f[dash + 1], fstype) != 0)
                        continue;
                if (controller && !has_token(f[dash + 3], controller, ","))
                        continue;
                snprintf(mnt, sizeof mnt, "%s", f[4]);
                snprintf(root, sizeof root, "%s", f[3]);
                break;
        }
        if (!mnt[0])
                return -ENOENT;
        const char *path = NULL;
        for (char *save = NULL, *line = strtok_r(pc, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *c1 = strchr(line, ':');
                char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = 0;
                bool match = controller ? has_token(c1 + 1, controller, ",") : (strcmp(line, "0:") == 0 || c1[1] == 0);
                if (match) {
                        path = c2 + 1;
                        break;
                }
        }
        if (!path)
                return -ENOENT;
        /* The mount may show a sub-tree (containers): strip its root. */
        size_t rl = strlen(root);
        if (strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0 && (path[rl] == '/' || path[rl] == 0))
                path += rl;
        char dir[PATH_MAX];
        int n = snprintf(dir, sizeof dir, "%s%s", mnt, strcmp(path, "/") == 0 ? "" : path);
        if (n < 0 || (size_t)n >= sizeof dir)
                return -ENAMETOOLONG;
        struct stat st;
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return -ENOENT;
        *ret = strdup(dir);
        return *ret ? 0 : -ENOMEM;
}

static int make_dir(const char *base, const char *name, char **ret) {
        char dir[PATH_MAX];
        int n = snprintf(dir, sizeof dir, "%s/%s", base, name);
        if (n < 0 || (size_t)n >= sizeof dir)
                return -ENAMETOOLONG;
        if (mkdir(dir, 0755) < 0)
                return -errno;
        *ret = strdup(dir);
        if (!*ret) {
                rmdir(dir);
                return -ENOMEM;
        }
        return 0;
}

static void remove_dir(char **dir) {
        if (!*dir)
                return;
        /* A dying task can keep a v1 memory cgroup busy for a moment. */
        for (int i = 0; i < 200; i++) {
                if (rmdir(*dir) == 0 || errno == ENOENT)
                        break;
                if (errno != EBUSY)
                        break;
                struct timespec ts = { 0, 5 * 1000 * 1000 };
                nanosleep(&ts, NULL);
        }
        free(*dir);
        *dir = NULL;
}

/* The group's directory under base, made when missing (a run of the same
 * group may have made it, or be about to remove it: see make_run_dir). */
static int group_dir(const char *base, const struct jail_cgroup_group *g, char **ret) {
        char dir[PATH_MAX];
        int n = snprintf(dir, sizeof dir, "%s/%s", base, g->name);
        if (n < 0 || (size_t)n >= sizeof dir)
                return -ENAMETOOLONG;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        *ret = strdup(dir);
        return *ret ? 0 : -ENOMEM;
}

/* The run's directory: base/name, or base/GROUP/name with the group made
 * first. The last run of a group removes the group's directory when it
 * ends (jail_cgroup_destroy); one starting meanwhile finds it gone between
 * the two mkdirs (ENOENT) and makes it again. v2: the group hands its
 * controllers down. */
static int make_run_dir(const char *base, const struct jail_cgroup_group *g, const char *name, bool v2,
                        char **ret_group, char **ret_run) {
        if (!g)
                return make_dir(base, name, ret_run);
        for (int i = 0; i < 16; i++) {
                free(*ret_group);
                *ret_group = NULL;
                int r = group_dir(base, g, ret_group);
                if (r < 0)
                        return r;
                if (v2) {
                        (void)write_str(*ret_group, "cgroup.subtree_control", "+memory");
                        (void)write_str(*ret_group, "cgroup.subtree_control", "+pids");
                        (void)write_str(*ret_group, "cgroup.subtree_control", "+cpu");
                }
                r = make_dir(*ret_group, name, ret_run);
                if (r != -ENOENT)
                        return r;
        }
        return -ENOENT;
}

static bool write_u64(const char *dir, const char *file, uint64_t v) {
        char s[32];
        snprintf(s, sizeof s, "%llu", (unsigned long long)v);
        return write_str(dir, file, s) >= 0;
}

static int try_v2(struct jail_cgroup *cg, const char *name, uint64_t memory, uint64_t pids, unsigned cpu,
                  const struct jail_cgroup_group *g) {
        _cleanup_free_ char *base = NULL, *ctrls = NULL;
        if (own_cgroup_dir("cgroup2", NULL, &base) < 0)
                return -ENOENT;
        if (read_small(base, "cgroup.controllers", &ctrls) < 0)
                return -ENOENT;
        if (!has_token(ctrls, "memory", " \n") || !has_token(ctrls, "pids", " \n"))
                return -ENOENT;
        /* Delegation: enabling controllers fails where the base holds
         * processes (the "no internal processes" rule); then v2 is unusable. */
        (void)write_str(base, "cgroup.subtree_control", "+memory");
        (void)write_str(base, "cgroup.subtree_control", "+pids");
        if (has_token(ctrls, "cpu", " \n"))
                (void)write_str(base, "cgroup.subtree_control", "+cpu");
        int r = make_run_dir(base, g, name, true, &cg->g_v2, &cg->v2);
        if (r < 0) {
                remove_dir(&cg->g_v2);
                return r;
        }
        _cleanup_free_ char *mine = NULL;
        if (read_small(cg->v2, "cgroup.controllers", &mine) < 0 || !has_token(mine, "memory", " \n")) {
                remove_dir(&cg->v2);
                remove_dir(&cg->g_v2);
                return -ENOENT;
        }
        cg->version = 2;
        char v[64];
        if (memory) {
                cg->memory = write_u64(cg->v2, "memory.max", memory);
                (void)write_str(cg->v2, "memory.swap.max", "0");
        }
        if (pids && has_token(mine, "pids", " \n"))
                cg->pids = write_u64(cg->v2, "pids.max", pids);
        if (cpu && has_token(mine, "cpu", " \n")) {
                snprintf(v, sizeof v, "%u 100000", cpu * 1000);
                cg->cpu = write_str(cg->v2, "cpu.max", v) >= 0;
        }
        if (cg->g_v2) {
                if (g->memory) {
                        cg->g_memory = write_u64(cg->g_v2, "memory.max", g->memory);
                        (void)write_str(cg->g_v2, "memory.swap.max", "0");
                }
                if (g->pids && has_token(mine, "pids", " \n"))
                        cg->g_pids = write_u64(cg->g_v2, "pids.max", g->pids);
                if (g->cpu && has_token(mine, "cpu", " \n")) {
                        snprintf(v, sizeof v, "%u 100000", g->cpu * 1000);
                        cg->g_cpu = write_str(cg->g_v2, "cpu.max", v) >= 0;
                }
        }
        return 0;
}

/* One v1 hierarchy: the run's directory (and the group's) under this
 * process's cgroup in the hierarchy carrying controller. */
static bool v1_dirs(const char *controller, const char *name, const struct jail_cgroup_group *g, char **ret_group,
                    char **ret_run) {
        _cleanup_free_ char *base = NULL;
        if (own_cgroup_dir("cgroup", controller, &base) < 0)
                return false;
        if (make_run_dir(base, g, name, false, ret_group, ret_run) < 0) {
                remove_dir(ret_group);
                return false;
        }
        return true;
}

static void try_v1(struct jail_cgroup *cg, const char *name, uint64_t memory, uint64_t pids, unsigned cpu,
                   const struct jail_cgroup_group *g) {
        char v[64];
        if (v1_dirs("memory", name, g, &cg->g_v1_memory, &cg->v1_memory)) {
                if (memory) {
                        cg->memory = write_u64(cg->v1_memory, "memory.limit_in_bytes", memory);
                        /* Swap counts too where accounted (memsw >= limit). */
                        (void)write_u64(cg->v1_memory, "memory.memsw.limit_in_bytes", memory);
                }
                if (cg->g_v1_memory && g->memory) {
                        /* memsw may not go below the limit: raise, set, lower */
                        cg->g_memory = write_u64(cg->g_v1_memory, "memory.limit_in_bytes", g->memory);
                        (void)write_u64(cg->g_v1_memory, "memory.memsw.limit_in_bytes", g->memory);
                        if (!cg->g_memory)
                                cg->g_memory = write_u64(cg->g_v1_memory, "memory.limit_in_bytes", g->memory);
                }
        }
        if (v1_dirs("pids", name, g, &cg->g_v1_pids, &cg->v1_pids)) {
                if (pids)
                        cg->pids = write_u64(cg->v1_pids, "pids.max", pids);
                if (cg->g_v1_pids && g->pids)
                        cg->g_pids = write_u64(cg->g_v1_pids, "pids.max", g->pids);
        }
        if ((cpu || (g && g->cpu)) && v1_dirs("cpu", name, g, &cg->g_v1_cpu, &cg->v1_cpu)) {
                if (cpu) {
                        snprintf(v, sizeof v, "%u", cpu * 1000);
                        cg->cpu = write_str(cg->v1_cpu, "cpu.cfs_period_us", "100000") >= 0 &&
                                  write_str(cg->v1_cpu, "cpu.cfs_quota_us", v) >= 0;
                }
                if (cg->g_v1_cpu && g->cpu) {
                        snprintf(v, sizeof v, "%u", g->cpu * 1000);
                        cg->g_cpu = write_str(cg->g_v1_cpu, "cpu.cfs_period_us", "100000") >= 0 &&
                                    write_str(cg->g_v1_cpu, "cpu.cfs_quota_us", v) >= 0;
                }
        }
        /* CPU used, for the report: only for grouped runs (ntfsd's), which
         * can afford one more mkdir. */
        if (g)
                (void)v1_dirs("cpuacct", name, g, &cg->g_v1_cpuacct, &cg->v1_cpuacct);
        if (cg->v1_memory || cg->v1_pids || cg->v1_cpu)
                cg->version = 1;
}

int jail_cgroup_create(struct jail_cgroup *cg, const char *name, uint64_t memory, uint64_t pids,
                       unsigned cpu_percent, const struct jail_cgroup_group *group) {
        *cg = (struct jail_cgroup){ 0 };
        if (try_v2(cg, name, memory, pids, cpu_percent, group) < 0)
                try_v1(cg, name, memory, pids, cpu_percent, group);
        return 0;
}

int64_t jail_cgroup_cpu_ns(const struct jail_cgroup *cg) {
        _cleanup_free_ char *s = NULL;
        if (cg->v2) {
                if (read_small(cg->v2, "cpu.stat", &s) < 0)
                        return -1;
                for (char *save = NULL, *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                        uint64_t us;
                        if (strncmp(l, "usage_usec ", 11) == 0 && ntfs_parse_u64(l + 11, INT64_MAX / 1000, &us) == 0)
                                return (int64_t)us * 1000;
                }
                return -1;
        }
        if (!cg->v1_cpuacct || read_small(cg->v1_cpuacct, "cpuacct.usage", &s) < 0)
                return -1;
        s[strcspn(s, "\n")] = 0;
        uint64_t ns;
        return ntfs_parse_u64(s, INT64_MAX, &ns) == 0 ? (int64_t)ns : -1;
}

int jail_cgroup_attach(const struct jail_cgroup *cg, pid_t pid) {
        char v[32];
        snprintf(v, sizeof v, "%d", (int)pid);
        const char *dirs[] = { cg->v2, cg->v1_memory, cg->v1_pids, cg->v1_cpu, cg->v1_cpuacct };
        for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
                if (!dirs[i])
                        continue;
                int r = write_str(dirs[i], "cgroup.procs", v);
                if (r < 0)
                        return r;
        }
        return 0;
}

int jail_cgroup_enter(const struct jail_cgroup *cg) { return jail_cgroup_attach(cg, 0); }

int jail_cgroup_open_tasks(const struct jail_cgroup *cg, int fds[JAIL_CGROUP_DIRS]) {
        if (cg->v2)
                return 0;
        const char *dirs[] = { cg->v1_memory, cg->v1_pids, cg->v1_cpu, cg->v1_cpuacct };
        _Static_assert(ARRAY_SIZE(dirs) <= JAIL_CGROUP_DIRS, "fds[] too small");
        int n = 0;
        for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
                if (!dirs[i])
                        continue;
                char path[PATH_MAX];
                int k = snprintf(path, sizeof path, "%s/tasks", dirs[i]);
                int fd = k < 0 || (size_t)k >= sizeof path ? -ENAMETOOLONG
                                                           : open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0) {
                        int e = k < 0 || (size_t)k >= sizeof path ? ENAMETOOLONG : errno;
                        while (n > 0)
                                close(fds[--n]);
                        return -e;
                }
                fds[n++] = fd;
        }
        return n;
}

int jail_cgroup_send_fds(int sock, const int *fds, int n) {
        if (n < 0 || n > JAIL_CGROUP_DIRS)
                return -EINVAL;
        char byte = 'C';
        struct iovec iov = { &byte, 1 };
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int) * JAIL_CGROUP_DIRS)];
        } cb;
        memset(&cb, 0, sizeof cb);
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (n > 0) {
                m.msg_control = cb.b;
                m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
                struct cmsghdr *c = CMSG_FIRSTHDR(&m);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
        }
        ssize_t w;
        while ((w = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
                ;
        return w == 1 ? 0 : w < 0 ? -errno : -EIO;
}

int jail_cgroup_recv_fds(int sock, int fds[JAIL_CGROUP_DIRS]) {
        char byte = 0;
        struct iovec iov = { &byte, 1 };
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int) * JAIL_CGROUP_DIRS)];
        } cb;
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b, .msg_controllen = sizeof cb.b };
        ssize_t r;
        while ((r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
                ;
        if (r < 0)
                return -errno;
        int n = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                        if (n < JAIL_CGROUP_DIRS)
                                fds[n++] = fd;
                        else
                                close(fd);
                }
        }
        if (r != 1 || byte != 'C' || (m.msg_flags & MSG_CTRUNC)) {
                while (n > 0)
                        close(fds[--n]);
                return -EPROTO;
        }
        return n;
}

int jail_cgroup_join_self(int *fds, int n) {
        int r = 0;
        for (int i = 0; i < n; i++) {
                ssize_t w;
                while ((w = write(fds[i], "0", 1)) < 0 && errno == EINTR)
                        ;
                if (w != 1 && r == 0)
                        r = w < 0 ? -errno : -EIO;
                close(fds[i]);
        }
        return r;
}

static void kill_listed(const char *dir) {
        _cleanup_free_ char *procs = NULL;
        if (read_small(dir, "cgroup.procs", &procs) < 0)
                return;
        for (char *save = NULL, *l = strtok_r(procs, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                uint64_t pid;
                if (ntfs_parse_u64(l, INT_MAX, &pid) == 0 && pid > 1)
                        kill((pid_t)pid, SIGKILL);
        }
}

void jail_cgroup_kill(const struct jail_cgroup *cg) {
        if (cg->v2) {
                if (write_str(cg->v2, "cgroup.kill", "1") < 0)
                        kill_listed(cg->v2);
        }
        if (cg->v1_pids)
                kill_listed(cg->v1_pids);
        if (cg->v1_memory)
                kill_listed(cg->v1_memory);
        if (cg->v1_cpu)
                kill_listed(cg->v1_cpu);
        if (cg->v1_cpuacct)
                kill_listed(cg->v1_cpuacct);
}

static bool counter_positive(const char *dir, const char *file, const char *key) {
        _cleanup_free_ char *s = NULL;
        if (!dir || read_small(dir, file, &s) < 0)
                return false;
        size_t kl = strlen(key);
        for (char *save = NULL, *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
                if (strncmp(l, key, kl) == 0 && l[kl] == ' ')
                        return strtoull(l + kl + 1, NULL, 10) > 0;
        return false;
}

bool jail_cgroup_oom(const struct jail_cgroup *cg) {
        if (cg->v2)
                return counter_positive(cg->v2, "memory.events", "oom_kill");
        return counter_positive(cg->v1_memory, "memory.oom_control", "oom_kill");
}

void jail_cgroup_destroy(struct jail_cgroup *cg) {
        if (!cg)
                return;
        jail_cgroup_kill(cg);
        remove_dir(&cg->v2);
        remove_dir(&cg->v1_memory);
        remove_dir(&cg->v1_pids);
        remove_dir(&cg->v1_cpu);
        remove_dir(&cg->v1_cpuacct);
        /* The group's directories go with the group's last run: busy
         * (another run of the group is in it) is left alone. */
        char **gd[] = { &cg->g_v2, &cg->g_v1_memory, &cg->g_v1_pids, &cg->g_v1_cpu, &cg->g_v1_cpuacct };
        for (size_t i = 0; i < ARRAY_SIZE(gd); i++) {
                if (*gd[i])
                        (void)rmdir(*gd[i]);
                free(*gd[i]);
                *gd[i] = NULL;
        }
        *cg = (struct jail_cgroup){ 0 };
}

int jail_cgroup_probe(struct ntfs_jail_caps *caps) {
        char name[64];
        static const char tag[] = "ntfs-jail-probe";
        snprintf(name, sizeof name, "%s-%d-%lld", tag, (int)getpid(), (long long)ntfs_mono_ns());
        struct jail_cgroup cg;
        int r = jail_cgroup_create(&cg, name, 1ULL << 30, 64, 100, NULL);
        if (r < 0)
                return r;
        caps->cgroup_version = cg.version;
        caps->cgroup_memory = cg.memory;
        caps->cgroup_pids = cg.pids;
        caps->cgroup_cpu = cg.cpu;
        jail_cgroup_destroy(&cg);
        return 0;
}
