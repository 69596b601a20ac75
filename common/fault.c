/* SPDX-License-Identifier: MIT */
#include "common/fault.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "common/banned.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int armed = -1; /* -1: env not read yet, 0: off, 1: on */
static char point_name[128];
static unsigned target, hits;
static bool every; /* "N+": fires at the Nth hit and at each one after */
static enum ntfs_fault_action act;
static unsigned sleep_ms = 1000;

static void read_env_locked(void) {
        const char *e = getenv("NTFS_FAULT");
        atomic_store(&armed, 0);
        if (!e || !*e)
                return;
        char buf[128];
        snprintf(buf, sizeof buf, "%s", e);
        char *c1 = strchr(buf, ':');
        if (!c1)
                return;
        *c1 = 0;
        char *c2 = strchr(c1 + 1, ':');
        if (c2)
                *c2 = 0;
        uint64_t n;
        size_t nl = strlen(c1 + 1);
        every = nl > 1 && c1[nl] == '+';
        if (every)
                c1[nl] = 0;
        if (ntfs_parse_u64(c1 + 1, 1u << 30, &n) < 0 || n == 0)
                return;
        snprintf(point_name, sizeof point_name, "%s", buf);
        target = (unsigned)n;
        hits = 0;
        act = NTFS_FAULT_CRASH;
        if (c2 && strcmp(c2 + 1, "error") == 0)
                act = NTFS_FAULT_ERROR;
        else if (c2 && strncmp(c2 + 1, "sleep", 5) == 0 && ntfs_parse_u64(c2 + 6, 600000, &n) == 0) {
                act = NTFS_FAULT_SLEEP;
                sleep_ms = (unsigned)n;
        }
        atomic_store(&armed, 1);
}

void ntfs_fault_arm(const char *point, unsigned n, enum ntfs_fault_action action) {
        pthread_mutex_lock(&lock);
        snprintf(point_name, sizeof point_name, "%s", point);
        target = n;
        every = false;
        hits = 0;
        act = action;
        sleep_ms = 1000;
        atomic_store(&armed, 1);
        pthread_mutex_unlock(&lock);
}

void ntfs_fault_disarm(void) {
        pthread_mutex_lock(&lock);
        atomic_store(&armed, 0);
        point_name[0] = 0;
        hits = 0;
        pthread_mutex_unlock(&lock);
}

unsigned ntfs_fault_hits(const char *point) {
        pthread_mutex_lock(&lock);
        unsigned h = strcmp(point, point_name) == 0 ? hits : 0;
        pthread_mutex_unlock(&lock);
        return h;
}

int ntfs_fault(const char *point) {
        int a = atomic_load_explicit(&armed, memory_order_relaxed);
        if (a == 0)
                return 0;
        int r = 0;
        unsigned pause_ms = 0;
        pthread_mutex_lock(&lock);
        if (atomic_load(&armed) < 0)
                read_env_locked();
        if (atomic_load(&armed) == 1 && strcmp(point, point_name) == 0) {
                hits++;
                if (hits == target || (every && hits > target)) {
                        if (act == NTFS_FAULT_CRASH) {
                                fprintf(stderr, "ntfs: fault %s: crashing\n", point);
                                raise(SIGKILL);
                                _exit(137);
                        }
                        if (act == NTFS_FAULT_SLEEP) {
                                if (hits == target)
                                        fprintf(stderr, "ntfs: fault %s: sleeping %u ms%s\n", point, sleep_ms,
                                                every ? " (and at every hit after)" : "");
                                pause_ms = sleep_ms;
                        } else
                                r = -EIO;
                }
        }
        pthread_mutex_unlock(&lock);
        if (pause_ms) {
                struct timespec ts = { .tv_sec = pause_ms / 1000, .tv_nsec = (long)(pause_ms % 1000) * 1000000L };
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        return r;
}
