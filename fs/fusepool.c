/* SPDX-License-Identifier: MIT
 * fusepool.c — a fixed pool of threads serving one FUSE session (fusepool.h).
 */
#include "fs/fusepool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

struct pool {
        struct fuse_session *se;
        const char *name;
        pthread_mutex_t mu;
        pthread_t *th;
        unsigned n;  /* started */
        bool ending; /* a thread has ended: the others are cancelled */
};

/* The first thread to end cancels the others (they may be waiting in
 * read(2) for a request that never comes). */
static void pool_end(struct pool *p) {
        pthread_t self = pthread_self();
        pthread_mutex_lock(&p->mu);
        if (!p->ending) {
                p->ending = true;
                for (unsigned i = 0; i < p->n; i++)
                        if (!pthread_equal(p->th[i], self))
                                pthread_cancel(p->th[i]);
        }
        pthread_mutex_unlock(&p->mu);
}

static void free_buf(void *mem) { free(*(void **)mem); }

static void *worker_main(void *arg) {
        struct pool *p = arg;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
        if (p->name)
                pthread_setname_np(pthread_self(), p->name);
        struct fuse_buf buf = {.mem = NULL}; /* libfuse allocates it at the first read */
        pthread_cleanup_push(free_buf, &buf.mem);
        while (!fuse_session_exited(p->se)) {
                /* cancellable only while it waits for a request */
                pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
                int r = fuse_session_receive_buf(p->se, &buf);
                pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
                if (r == -EINTR || r == -EAGAIN)
                        continue;
                if (r <= 0) { /* -ENODEV: unmounted or aborted */
                        fuse_session_exit(p->se);
                        break;
                }
                fuse_session_process_buf(p->se, &buf);
        }
        pthread_cleanup_pop(1);
        pool_end(p);
        return NULL;
}

int fusepool_run(struct fuse_session *se, unsigned nthreads, const char *name) {
        if (!se || nthreads == 0 || nthreads > FUSEPOOL_MAX)
                return -EINVAL;
        struct pool p = {.se = se, .name = name, .mu = PTHREAD_MUTEX_INITIALIZER};
        if (!(p.th = calloc(nthreads, sizeof(*p.th))))
                return -ENOMEM;
        sigset_t set, old;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        sigaddset(&set, SIGQUIT);
        pthread_sigmask(SIG_BLOCK, &set, &old);
        int r = 0;
        pthread_mutex_lock(&p.mu); /* a thread that ends at once sees every one started */
        while (p.n < nthreads && (r = pthread_create(&p.th[p.n], NULL, worker_main, &p)) == 0)
                p.n++;
        pthread_mutex_unlock(&p.mu);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        for (unsigned i = 0; i < p.n; i++)
                pthread_join(p.th[i], NULL);
        unsigned started = p.n;
        free(p.th);
        pthread_mutex_destroy(&p.mu);
        return started ? 0 : -r;
}
