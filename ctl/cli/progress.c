/* SPDX-License-Identifier: MIT
 * ntfs-ctl's progress bar for export, import, push, pull and clone, drawn on
 * stderr from a polling thread.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/util.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

static void fmt_duration(double s, char *buf, size_t len) {
        if (s < 0 || s > 360000) {
                snprintf(buf, len, "--:--");
                return;
        }
        unsigned t = (unsigned)(s + 0.5);
        if (t >= 3600)
                snprintf(buf, len, "%u:%02u:%02u", t / 3600, t / 60 % 60, t % 60);
        else
                snprintf(buf, len, "%u:%02u", t / 60, t % 60);
}

static void progress_draw(struct progress_bar *pb, const json_t *p) {
        json_int_t entries = 0, bytes = 0, sbytes = 0, tentries = 0, tbytes = 0, tsbytes = 0;
        jint(p, "entries", &entries);
        jint(p, "bytes", &bytes);
        jint(p, "stream_bytes", &sbytes);
        jint(p, "total_entries", &tentries);
        jint(p, "total_bytes", &tbytes);
        jint(p, "total_stream_bytes", &tsbytes);
        json_t *ev = json_object_get(p, "elapsed");
        double elapsed = json_is_number(ev) ? json_number_value(ev) : 0;
        double done = (double)(pb->by_stream ? sbytes : bytes), total = (double)(pb->by_stream ? tsbytes : tbytes);
        double frac = total > 0 ? done / total : -1;
        if (frac > 1)
                frac = 1;
        char bar[32], hb[32], ht[32], rate[32], eta[32];
        int width = 24, fill = frac >= 0 ? (int)(frac * width) : 0;
        for (int i = 0; i < width; i++)
                bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        human_bytes((uint64_t)(pb->by_stream ? sbytes : bytes), hb, sizeof hb);
        human_bytes((uint64_t)(total > 0 ? total : 0), ht, sizeof ht);
        double r = elapsed > 0.2 ? done / elapsed : 0;
        human_bytes((uint64_t)r, rate, sizeof rate);
        fmt_duration(frac > 0 && r > 0 ? (total - done) / r : -1, eta, sizeof eta);
        char ents[72];
        if (!json_object_get(p, "entries"))
                ents[0] = 0; /* a compaction: bytes only */
        else if (tentries > 0)
                snprintf(ents, sizeof ents, "  %lld/%lld entries", (long long)entries, (long long)tentries);
        else
                snprintf(ents, sizeof ents, "  %lld entries", (long long)entries);
        if (frac >= 0)
                fprintf(stderr, "\r\033[K%s [%s] %3d%% %s/%s%s  %s/s  ETA %s", pb->verb, bar, (int)(frac * 100), hb,
                        ht, ents, rate, eta);
        else
                fprintf(stderr, "\r\033[K%s %s%s  %s/s", pb->verb, hb, ents, rate);
        fflush(stderr);
        pb->drawn = true;
}

/* push/pull/clone: bytes, objects and packs done of their totals. */
static void progress_draw_remote(struct progress_bar *pb, const json_t *p) {
        json_int_t bytes = 0, tbytes = 0, objs = 0, tobjs = 0, packs = 0, tpacks = 0;
        jint(p, "bytes", &bytes);
        jint(p, "total_bytes", &tbytes);
        jint(p, "objects", &objs);
        jint(p, "total_objects", &tobjs);
        jint(p, "packs", &packs);
        jint(p, "total_packs", &tpacks);
        bool final = json_is_true(json_object_get(p, "totals_final"));
        json_t *ev = json_object_get(p, "elapsed");
        double elapsed = json_is_number(ev) ? json_number_value(ev) : 0;
        char hb[32], ht[32], rate[32], eta[32], bar[32];
        human_bytes((uint64_t)bytes, hb, sizeof hb);
        double r = elapsed > 0.2 ? (double)bytes / elapsed : 0;
        human_bytes((uint64_t)r, rate, sizeof rate);
        if (!final) {
                fprintf(stderr, "\r\033[K%s %s  %lld objects  %lld packs  %s/s", pb->verb, hb, (long long)objs,
                        (long long)packs, rate);
        } else {
                double frac = tbytes > 0 ? (double)bytes / (double)tbytes : 1;
                if (frac > 1)
                        frac = 1;
                int width = 24, fill = (int)(frac * width);
                for (int i = 0; i < width; i++)
                        bar[i] = i < fill ? '#' : '.';
                bar[width] = 0;
                human_bytes((uint64_t)tbytes, ht, sizeof ht);
                fmt_duration(r > 0 ? ((double)tbytes - (double)bytes) / r : -1, eta, sizeof eta);
                fprintf(stderr, "\r\033[K%s [%s] %3d%% %s/%s  %lld/%lld objects  %lld/%lld packs  %s/s  ETA %s",
                        pb->verb, bar, (int)(frac * 100), hb, ht, (long long)objs, (long long)tobjs,
                        (long long)packs, (long long)tpacks, rate, eta);
        }
        fflush(stderr);
        pb->drawn = true;
}

static void *progress_main(void *arg) {
        struct progress_bar *pb = arg;
        ntfs_client *cl = NULL;
        if (ntfs_client_new(pb->socket, &cl) < 0)
                return NULL;
        ntfs_client_set_timeout(cl, 2000);
        char path[96];
        snprintf(path, sizeof path, "%s%s", pb->route, pb->id);
        while (!__atomic_load_n(&pb->stop, __ATOMIC_ACQUIRE)) {
                for (int i = 0; i < 5 && !__atomic_load_n(&pb->stop, __ATOMIC_ACQUIRE); i++) {
                        struct timespec ts = { 0, 50 * 1000000L };
                        nanosleep(&ts, NULL);
                }
                if (__atomic_load_n(&pb->stop, __ATOMIC_ACQUIRE))
                        break;
                json_t *p = NULL;
                if (ntfs_client_call(cl, "GET", path, NULL, &p, NULL, 0) == 0 && p) {
                        if (pb->remote)
                                progress_draw_remote(pb, p);
                        else
                                progress_draw(pb, p);
                }
                json_decref(p);
        }
        ntfs_client_free(cl);
        return NULL;
}

/* Starts the bar when stderr is a terminal; pb->id is then the id to send. */
void progress_start_at(struct progress_bar *pb, struct ctx *c, const char *verb, const char *route,
                              bool by_stream, bool remote, bool quiet) {
        *pb = (struct progress_bar){
                .socket = c->socket, .verb = verb, .route = route, .by_stream = by_stream, .remote = remote
        };
        if (quiet || !isatty(STDERR_FILENO))
                return;
        uint8_t rnd[8];
        uint64_t v = (uint64_t)ntfs_now_ns() ^ ((uint64_t)getpid() << 32);
        ntfs_put_be64(rnd, v);
        char hex[17];
        ntfs_hex(rnd, sizeof rnd, hex);
        snprintf(pb->id, sizeof pb->id, "ctl-%s", hex);
        pb->started = pthread_create(&pb->thread, NULL, progress_main, pb) == 0;
        if (!pb->started)
                pb->id[0] = 0;
}

void progress_start(struct progress_bar *pb, struct ctx *c, const char *verb, bool by_stream, bool quiet) {
        progress_start_at(pb, c, verb, "/v1/archive/progress/", by_stream, false, quiet);
}

void progress_stop(struct progress_bar *pb) {
        if (!pb->started)
                return;
        __atomic_store_n(&pb->stop, 1, __ATOMIC_RELEASE);
        pthread_join(pb->thread, NULL);
        pb->started = false;
        if (pb->drawn) {
                fputs("\r\033[K", stderr);
                fflush(stderr);
        }
}
