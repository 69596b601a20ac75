/* SPDX-License-Identifier: MIT
 * archive.c — export a workspace to a tar stream and import one as a new
 * session (tarball.h has the contract, docs/archive.md the design).
 *
 * libarchive is used at this one boundary: its ARCHIVE_* results become a
 * negative error plus a message here, and nothing else in ntfs sees it.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/tarball.h"
#include "common/banned.h"

#define DATA_BUF (256u * 1024)        /* file data read from the store per call */
#define OUT_BUF (256u * 1024)         /* archive bytes handed to the sink per call */
#define READ_BLOCK (1024u * 1024)     /* bytes read from an import's fd per call */
#define MAX_PATH_BYTES 4096u          /* a path inside an imported archive */
#define MAX_LINK_BYTES 4095u          /* a symlink target */
#define HEADER_ALLOWANCE (1024u * 1024) /* archive metadata allowed per entry (pax, long names) */

static inline void a_freep(struct archive **a) {
        if (*a)
                archive_free(*a);
}
static inline void ae_freep(struct archive_entry **e) {
        if (*e)
                archive_entry_free(*e);
}
static inline void ws_closep(ntfs_ws **ws) {
        if (*ws)
                ntfs_ws_close(*ws);
}

static void set_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_why(char *why, size_t whylen, const char *fmt, ...) {
        if (!why || whylen == 0)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
}

static void padd(uint64_t *f, uint64_t n) {
        __atomic_add_fetch(f, n, __ATOMIC_RELAXED);
}
static void pset(uint64_t *f, uint64_t v) {
        __atomic_store_n(f, v, __ATOMIC_RELAXED);
}
static uint64_t pget(const uint64_t *f) {
        return __atomic_load_n(f, __ATOMIC_RELAXED);
}

void ntfs_archive_progress_get(const struct ntfs_archive_progress *p, struct ntfs_archive_progress *ret) {
        ret->entries = pget(&p->entries);
        ret->bytes = pget(&p->bytes);
        ret->stream_bytes = pget(&p->stream_bytes);
        ret->total_entries = pget(&p->total_entries);
        ret->total_bytes = pget(&p->total_bytes);
        ret->total_stream_bytes = pget(&p->total_stream_bytes);
}

/* Names go through libarchive's charset conversion: run it in C.UTF-8 on
 * this thread (names that are not UTF-8 are kept as raw bytes, pax
 * hdrcharset=BINARY), whatever the process locale is. */
struct locale_guard {
        locale_t loc, old;
};
static void locale_enter(struct locale_guard *g) {
        g->loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
        g->old = g->loc ? uselocale(g->loc) : (locale_t)0;
}
static void locale_leave(struct locale_guard *g) {
        if (g->loc) {
                uselocale(g->old);
                freelocale(g->loc);
                g->loc = (locale_t)0;
        }
}

/* ---- formats ---------------------------------------------------------------------------- */

int ntfs_archive_format_parse(const char *s, enum ntfs_archive_format *ret) {
        if (!s)
                return -EINVAL;
        if (strcmp(s, "tar") == 0)
                *ret = NTFS_ARCHIVE_TAR;
        else if (strcmp(s, "tar.gz") == 0 || strcmp(s, "tgz") == 0 || strcmp(s, "gz") == 0)
                *ret = NTFS_ARCHIVE_TAR_GZ;
        else if (strcmp(s, "tar.zst") == 0 || strcmp(s, "zst") == 0 || strcmp(s, "tzst") == 0)
                *ret = NTFS_ARCHIVE_TAR_ZST;
        else
                return -EINVAL;
        return 0;
}

static bool ends_with(const char *s, const char *suf) {
        size_t n = strlen(s), m = strlen(suf);
        return n > m && strcmp(s + n - m, suf) == 0;
}

int ntfs_archive_format_from_name(const char *path, enum ntfs_archive_format *ret) {
        if (!path)
                return -EINVAL;
        if (ends_with(path, ".tar"))
                *ret = NTFS_ARCHIVE_TAR;
        else if (ends_with(path, ".tar.gz") || ends_with(path, ".tgz"))
                *ret = NTFS_ARCHIVE_TAR_GZ;
        else if (ends_with(path, ".tar.zst") || ends_with(path, ".tzst"))
                *ret = NTFS_ARCHIVE_TAR_ZST;
        else
                return -EINVAL;
        return 0;
}

const char *ntfs_archive_format_name(enum ntfs_archive_format f) {
        switch (f) {
        case NTFS_ARCHIVE_TAR_GZ:
                return "tar.gz";
        case NTFS_ARCHIVE_TAR_ZST:
                return "tar.zst";
        default:
                return "tar";
        }
}

const char *ntfs_archive_content_type(enum ntfs_archive_format f) {
        switch (f) {
        case NTFS_ARCHIVE_TAR_GZ:
                return "application/gzip";
        case NTFS_ARCHIVE_TAR_ZST:
                return "application/zstd";
        default:
                return "application/x-tar";
        }
}

/* ---- export ------------------------------------------------------------------------------ */

/* First path of each multiply-linked inode (open addressing, ino != 0). */
struct link_slot {
        uint64_t ino;
        char *path;
};
struct link_map {
        struct link_slot *slots;
        size_t cap, n;
};

static void link_map_release(struct link_map *m) {
        for (size_t i = 0; i < m->cap; i++)
                free(m->slots[i].path);
        free(m->slots);
        *m = (struct link_map){ 0 };
}

static size_t link_hash(uint64_t ino, size_t cap) {
        ino ^= ino >> 33;
        ino *= 0xff51afd7ed558ccdULL;
        ino ^= ino >> 33;
        return (size_t)ino & (cap - 1);
}

static const char *link_map_get(const struct link_map *m, uint64_t ino) {
        if (!m->cap)
                return NULL;
        for (size_t i = link_hash(ino, m->cap);; i = (i + 1) & (m->cap - 1)) {
                if (m->slots[i].ino == ino)
                        return m->slots[i].path;
                if (m->slots[i].ino == 0)
                        return NULL;
        }
}

static int link_map_put(struct link_map *m, uint64_t ino, const char *path) {
        if ((m->n + 1) * 2 > m->cap) {
                size_t ncap = m->cap ? m->cap * 2 : 64;
                struct link_slot *ns = calloc(ncap, sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                for (size_t i = 0; i < m->cap; i++) {
                        if (!m->slots[i].ino)
                                continue;
                        size_t j = link_hash(m->slots[i].ino, ncap);
                        while (ns[j].ino)
                                j = (j + 1) & (ncap - 1);
                        ns[j] = m->slots[i];
                }
                free(m->slots);
                m->slots = ns;
                m->cap = ncap;
        }
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        size_t i = link_hash(ino, m->cap);
        while (m->slots[i].ino)
                i = (i + 1) & (m->cap - 1);
        m->slots[i] = (struct link_slot){ ino, p };
        m->n++;
        return 0;
}

struct child {
        char *name;
        struct ntfs_attr attr;
};

struct dir_frame {
        struct child *kids;
        size_t n, cap, next;
        size_t path_len; /* length of this directory's path ("." for the root) */
        int err;         /* a failed allocation in the listing callback */
};

struct xw {
        ntfs_ws *ws;
        struct archive *a;
        struct archive_entry *e;
        ntfs_archive_sink sink;
        void *ud;
        int sink_err;
        uint8_t *obuf;
        size_t olen;
        uint8_t *dbuf;
        char *xnames, *xval;
        struct link_map links;
        struct dir_frame *stack;
        size_t depth, stack_cap;
        char *path;
        size_t path_cap;
        struct ntfs_archive_progress *prog;
        char *why;
        size_t whylen;
};

static int flush_out(struct xw *x) {
        if (x->olen == 0 || x->sink_err < 0)
                return x->sink_err;
        int r = x->sink(x->ud, x->obuf, x->olen);
        if (r < 0)
                x->sink_err = r;
        else if (x->prog)
                padd(&x->prog->stream_bytes, x->olen);
        x->olen = 0;
        return x->sink_err;
}

static la_ssize_t w_write(struct archive *a, void *ud, const void *buf, size_t len) {
        struct xw *x = ud;
        if (x->sink_err < 0) {
                archive_set_error(a, EIO, "the receiver stopped: %s", ntfs_strerror(x->sink_err));
                return -1;
        }
        const uint8_t *p = buf;
        size_t left = len;
        while (left > 0) {
                size_t n = NTFS_MIN(left, OUT_BUF - x->olen);
                memcpy(x->obuf + x->olen, p, n);
                x->olen += n;
                p += n;
                left -= n;
                if (x->olen == OUT_BUF && flush_out(x) < 0) {
                        archive_set_error(a, EIO, "the receiver stopped: %s", ntfs_strerror(x->sink_err));
                        return -1;
                }
        }
        return (la_ssize_t)len;
}

static int w_close(struct archive *a, void *ud) {
        struct xw *x = ud;
        if (flush_out(x) < 0) {
                archive_set_error(a, EIO, "the receiver stopped: %s", ntfs_strerror(x->sink_err));
                return ARCHIVE_FATAL;
        }
        return ARCHIVE_OK;
}

static int w_fail(struct xw *x, const char *what) {
        if (x->sink_err < 0) {
                set_why(x->why, x->whylen, "%s: the receiver stopped: %s", what, ntfs_strerror(x->sink_err));
                return x->sink_err;
        }
        const char *m = archive_error_string(x->a);
        set_why(x->why, x->whylen, "%s: %s", what, m ? m : "libarchive failed");
        int e = archive_errno(x->a);
        return e > 0 ? -e : -EIO;
}

static int path_reserve(struct xw *x, size_t need) {
        if (need <= x->path_cap)
                return 0;
        size_t ncap = x->path_cap ? x->path_cap : 256;
        while (ncap < need)
                ncap *= 2;
        char *np = realloc(x->path, ncap);
        if (!np)
                return -ENOMEM;
        x->path = np;
        x->path_cap = ncap;
        return 0;
}

static int collect_cb(const char *name, const struct ntfs_attr *attr, uint64_t next_cookie, void *ud) {
        struct dir_frame *f = ud;
        if (f->n == f->cap) {
                size_t ncap = f->cap ? f->cap * 2 : 16;
                struct child *nk = realloc(f->kids, ncap * sizeof *nk);
                if (!nk)
                        return (f->err = -ENOMEM);
                f->kids = nk;
                f->cap = ncap;
        }
        char *nm = strdup(name);
        if (!nm)
                return (f->err = -ENOMEM);
        f->kids[f->n++] = (struct child){ nm, *attr };
        return 0;
}

static int child_cmp(const void *a, const void *b) {
        return strcmp(((const struct child *)a)->name, ((const struct child *)b)->name);
}

static void frame_release(struct dir_frame *f) {
        for (size_t i = 0; i < f->n; i++)
                free(f->kids[i].name);
        free(f->kids);
        *f = (struct dir_frame){ 0 };
}

static int push_dir(struct xw *x, uint64_t ino, size_t path_len) {
        if (x->depth == x->stack_cap) {
                size_t ncap = x->stack_cap ? x->stack_cap * 2 : 16;
                struct dir_frame *ns = realloc(x->stack, ncap * sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                x->stack = ns;
                x->stack_cap = ncap;
        }
        struct dir_frame *f = &x->stack[x->depth];
        *f = (struct dir_frame){ .path_len = path_len };
        /* readdir calls back without the store lock; a callback returning
         * non-zero only stops it, so its error is kept in the frame. */
        int r = ntfs_ws_readdir(x->ws, ino, 0, true, collect_cb, f);
        if (r == 0 && f->err < 0)
                r = f->err;
        if (r < 0) {
                frame_release(f);
                x->path[path_len] = 0;
                set_why(x->why, x->whylen, "cannot list '%s': %s", x->path, ntfs_strerror(r));
                return r;
        }
        if (f->n > 1)
                qsort(f->kids, f->n, sizeof *f->kids, child_cmp);
        x->depth++;
        return 0;
}

static int add_xattrs(struct xw *x, uint64_t ino) {
        ssize_t n = ntfs_ws_listxattr(x->ws, ino, x->xnames, 64 * 1024);
        if (n == -EOPNOTSUPP || n == -ENODATA)
                return 0;
        if (n < 0) {
                set_why(x->why, x->whylen, "cannot list the xattrs of '%s': %s", x->path, ntfs_strerror((int)n));
                return (int)n;
        }
        for (ssize_t off = 0; off < n;) {
                const char *name = x->xnames + off;
                size_t nl = strnlen(name, (size_t)(n - off));
                off += (ssize_t)nl + 1;
                if (nl == 0)
                        continue;
                ssize_t vl = ntfs_ws_getxattr(x->ws, ino, name, x->xval, 64 * 1024);
                if (vl == -ENODATA)
                        continue;
                if (vl < 0) {
                        set_why(x->why, x->whylen, "cannot read xattr %s of '%s': %s", name, x->path,
                                ntfs_strerror((int)vl));
                        return (int)vl;
                }
                archive_entry_xattr_add_entry(x->e, name, x->xval, (size_t)vl);
        }
        return 0;
}

/* Writes one entry; x->path holds its archive name. */
static int write_entry(struct xw *x, const struct ntfs_attr *at) {
        uint32_t type = at->mode & S_IFMT;
        if (type == S_IFSOCK) {
                log_debug("archive: skipping socket %s", x->path);
                return 0;
        }
        struct archive_entry *e = x->e;
        archive_entry_clear(e);
        archive_entry_set_pathname(e, x->path);
        archive_entry_set_mode(e, type | (at->mode & 07777));
        archive_entry_set_uid(e, at->uid);
        archive_entry_set_gid(e, at->gid);
        archive_entry_set_mtime(e, at->mtime.tv_sec, at->mtime.tv_nsec);
        archive_entry_set_size(e, 0);
        int r;
        bool data = false;
        if (type != S_IFDIR && at->nlink > 1) {
                const char *first = link_map_get(&x->links, at->ino);
                if (first) {
                        archive_entry_set_hardlink(e, first);
                        goto header;
                }
                if ((r = link_map_put(&x->links, at->ino, x->path)) < 0)
                        return r;
        }
        if (type == S_IFLNK) {
                char target[PATH_MAX + 1];
                ssize_t n = ntfs_ws_readlink(x->ws, at->ino, target, PATH_MAX);
                if (n < 0) {
                        set_why(x->why, x->whylen, "cannot read the symlink '%s': %s", x->path,
                                ntfs_strerror((int)n));
                        return (int)n;
                }
                target[n] = 0;
                archive_entry_set_symlink(e, target);
        } else if (type == S_IFREG) {
                archive_entry_set_size(e, (la_int64_t)at->size);
                data = at->size > 0;
        } else if (type == S_IFCHR || type == S_IFBLK)
                archive_entry_set_rdev(e, (dev_t)at->rdev);
        if ((r = add_xattrs(x, at->ino)) < 0)
                return r;
header:
        r = archive_write_header(x->a, e);
        if (r == ARCHIVE_FAILED) {
                /* This entry cannot be represented; libarchive wrote nothing. */
                log_debug("archive: skipping %s: %s", x->path, archive_error_string(x->a));
                return 0;
        }
        if (r < ARCHIVE_WARN)
                return w_fail(x, x->path);
        for (uint64_t off = 0; data && off < at->size;) {
                size_t want = (size_t)NTFS_MIN((uint64_t)DATA_BUF, at->size - off);
                ssize_t n = ntfs_ws_read(x->ws, at->ino, x->dbuf, want, off);
                if (n < 0) {
                        set_why(x->why, x->whylen, "cannot read '%s': %s", x->path, ntfs_strerror((int)n));
                        return (int)n;
                }
                if (n == 0)
                        break; /* shrank under a live handle: libarchive pads with zeros */
                la_ssize_t w = archive_write_data(x->a, x->dbuf, (size_t)n);
                if (w < 0)
                        return w_fail(x, x->path);
                off += (uint64_t)n;
                if (x->prog)
                        padd(&x->prog->bytes, (uint64_t)n);
        }
        if (archive_write_finish_entry(x->a) < ARCHIVE_WARN)
                return w_fail(x, x->path);
        if (x->prog)
                padd(&x->prog->entries, 1);
        return 0;
}

static int export_tree(struct xw *x) {
        struct ntfs_attr root;
        int r = ntfs_ws_getattr(x->ws, NTFS_ROOT_INO, &root);
        if (r < 0) {
                set_why(x->why, x->whylen, "cannot read the root: %s", ntfs_strerror(r));
                return r;
        }
        if ((r = path_reserve(x, 4)) < 0)
                return r;
        memcpy(x->path, "./", 3);
        if ((r = write_entry(x, &root)) < 0)
                return r;
        if ((r = push_dir(x, NTFS_ROOT_INO, 1)) < 0) /* path "." */
                return r;
        while (x->depth > 0) {
                struct dir_frame *f = &x->stack[x->depth - 1];
                if (f->next == f->n) {
                        frame_release(f);
                        x->depth--;
                        continue;
                }
                struct child *k = &f->kids[f->next++];
                size_t nl = strlen(k->name), plen = f->path_len;
                if ((r = path_reserve(x, plen + 1 + nl + 1)) < 0)
                        return r;
                x->path[plen] = '/';
                memcpy(x->path + plen + 1, k->name, nl + 1);
                struct ntfs_attr at = k->attr;
                if ((r = write_entry(x, &at)) < 0)
                        return r;
                if (S_ISDIR(at.mode) && (r = push_dir(x, at.ino, plen + 1 + nl)) < 0)
                        return r;
        }
        return 0;
}

int ntfs_archive_export(ntfs_ws *ws, enum ntfs_archive_format fmt, ntfs_archive_sink sink, void *ud,
                        struct ntfs_archive_progress *prog, char *why, size_t whylen) {
        if (why && whylen)
                why[0] = 0;
        if (!ws || !sink)
                return -EINVAL;
        struct xw x = { .ws = ws, .sink = sink, .ud = ud, .prog = prog, .why = why, .whylen = whylen };
        /* the buffers are declared first so that they are freed last: freeing
         * the archive may still call w_write/w_close */
        _cleanup_free_ uint8_t *obuf = malloc(OUT_BUF);
        _cleanup_free_ uint8_t *dbuf = malloc(DATA_BUF);
        _cleanup_free_ char *xnames = malloc(64 * 1024);
        _cleanup_free_ char *xval = malloc(64 * 1024);
        _cleanup_(ae_freep) struct archive_entry *e = archive_entry_new();
        _cleanup_(a_freep) struct archive *a = archive_write_new();
        if (!a || !e || !obuf || !dbuf || !xnames || !xval) {
                set_why(why, whylen, "out of memory");
                return -ENOMEM;
        }
        x.a = a;
        x.e = e;
        x.obuf = obuf;
        x.dbuf = dbuf;
        x.xnames = xnames;
        x.xval = xval;
        int r = archive_write_set_format_pax(a);
        /* xattrs as SCHILY.xattr only (GNU tar and star read it; the
         * LIBARCHIVE.xattr copy makes GNU tar warn) */
        if (r == ARCHIVE_OK)
                (void)archive_write_set_format_option(a, "pax", "xattrheader", "SCHILY");
        if (r == ARCHIVE_OK) {
                if (fmt == NTFS_ARCHIVE_TAR_GZ) {
                        r = archive_write_add_filter_gzip(a);
                        /* no time stamp in the gzip header: same commit, same bytes */
                        if (r == ARCHIVE_OK)
                                (void)archive_write_set_filter_option(a, "gzip", "timestamp", NULL);
                } else if (fmt == NTFS_ARCHIVE_TAR_ZST)
                        r = archive_write_add_filter_zstd(a);
                else
                        r = archive_write_add_filter_none(a);
        }
        /* ARCHIVE_WARN here means "through an external program": refused. */
        if (r != ARCHIVE_OK) {
                set_why(why, whylen, "format %s is not available: %s", ntfs_archive_format_name(fmt),
                        archive_error_string(a) ? archive_error_string(a) : "libarchive lacks it");
                return -EOPNOTSUPP;
        }
        /* A plain tar keeps libarchive's 10 KiB records (what GNU tar writes);
         * a compressed stream must end where the compressor ended: zeros
         * after a zstd frame are an error, after gzip a warning. */
        if (fmt != NTFS_ARCHIVE_TAR)
                archive_write_set_bytes_in_last_block(a, 1);
        struct locale_guard lg;
        locale_enter(&lg);
        if (archive_write_open2(a, &x, NULL, w_write, w_close, NULL) != ARCHIVE_OK) {
                r = w_fail(&x, "cannot start the archive");
                locale_leave(&lg);
                return r;
        }
        r = export_tree(&x);
        while (x.depth > 0)
                frame_release(&x.stack[--x.depth]);
        free(x.stack);
        free(x.path);
        link_map_release(&x.links);
        if (r == 0 && archive_write_close(a) != ARCHIVE_OK)
                r = w_fail(&x, "cannot finish the archive");
        if (r < 0 && x.sink_err == 0)
                x.sink_err = -ECANCELED; /* a failed export never gets its end-of-archive blocks */
        locale_leave(&lg);
        if (r < 0 && x.sink_err < 0 && why && !why[0])
                set_why(why, whylen, "the receiver stopped: %s", ntfs_strerror(x.sink_err));
        return r;
}

/* ---- import ------------------------------------------------------------------------------ */

struct dir_attr {
        uint64_t ino;
        uint32_t mode, uid, gid;
        struct timespec mtime;
};

struct xr {
        ntfs_store *st;
        ntfs_ws *ws;
        struct archive *a;
        uint64_t max_entries, max_bytes;
        uint64_t entries, declared, written;
        struct ntfs_archive_progress *prog;
        /* the last parent directory resolved: path and inode */
        char cache[MAX_PATH_BYTES + 1];
        size_t cache_len;
        uint64_t cache_ino;
        bool cache_ok;
        struct dir_attr *dirs;
        size_t ndirs, dirs_cap;
        char *why;
        size_t whylen;
};

#define FAIL(x, err, ...)                                        \
        ({                                                       \
                set_why((x)->why, (x)->whylen, __VA_ARGS__);     \
                (err);                                           \
        })

/* Normalizes an archive path into out: components joined by '/', without
 * "." components, empty components or a leading "./"; "" is the root.
 * Refuses absolute paths and "..". */
static int normalize(struct xr *x, const char *in, char *out, size_t outlen, const char *what) {
        size_t inlen = strlen(in);
        if (inlen == 0)
                return FAIL(x, -NTFS_EBADREQ, "%s: empty path", what);
        if (inlen > MAX_PATH_BYTES)
                return FAIL(x, -NTFS_EBADREQ, "%s: path longer than %u bytes", what, MAX_PATH_BYTES);
        if (in[0] == '/')
                return FAIL(x, -NTFS_EDENIED, "unsafe archive: absolute path '%.200s'", in);
        size_t o = 0;
        for (const char *p = in; *p;) {
                const char *s = strchr(p, '/');
                size_t n = s ? (size_t)(s - p) : strlen(p);
                if (n == 2 && p[0] == '.' && p[1] == '.')
                        return FAIL(x, -NTFS_EDENIED, "unsafe archive: path '%.200s' contains '..'", in);
                if (n > NTFS_NAME_MAX)
                        return FAIL(x, -NTFS_EBADREQ, "%s: a name in '%.200s' is longer than %d bytes", what, in,
                                    NTFS_NAME_MAX);
                if (n > 0 && !(n == 1 && p[0] == '.')) {
                        if (o + (o ? 1 : 0) + n + 1 > outlen)
                                return FAIL(x, -NTFS_EBADREQ, "%s: path too long", what);
                        if (o)
                                out[o++] = '/';
                        memcpy(out + o, p, n);
                        o += n;
                }
                p += n;
                if (*p == '/')
                        p++;
        }
        out[o] = 0;
        return 0;
}

/* Resolves the directory path[0..len) (normalized) to an inode; with
 * create, makes missing directories (0755, uid/gid). Never goes through a
 * symlink. */
static int resolve_dir(struct xr *x, const char *path, size_t len, bool create, uint32_t uid, uint32_t gid,
                       uint64_t *ret) {
        if (len == 0) {
                *ret = NTFS_ROOT_INO;
                return 0;
        }
        if (x->cache_ok && x->cache_len == len && memcmp(x->cache, path, len) == 0) {
                *ret = x->cache_ino;
                return 0;
        }
        uint64_t cur = NTFS_ROOT_INO;
        char name[NTFS_NAME_MAX + 1];
        for (size_t i = 0; i < len;) {
                size_t j = i;
                while (j < len && path[j] != '/')
                        j++;
                memcpy(name, path + i, j - i);
                name[j - i] = 0;
                struct ntfs_attr at;
                int r = ntfs_ws_lookup(x->ws, cur, name, &at);
                if (r == -ENOENT && create) {
                        r = ntfs_ws_mkdir(x->ws, cur, name, 0755, uid, gid, &at);
                }
                if (r == -ENOENT)
                        return FAIL(x, -NTFS_EBADREQ, "'%.*s' does not exist", (int)j, path);
                if (r < 0)
                        return FAIL(x, r, "'%.*s': %s", (int)j, path, ntfs_strerror(r));
                if (S_ISLNK(at.mode))
                        return FAIL(x, -NTFS_EDENIED, "unsafe archive: '%.*s' is a symlink, and an entry goes through it",
                                    (int)j, path);
                if (!S_ISDIR(at.mode))
                        return FAIL(x, -NTFS_EBADREQ, "'%.*s' is not a directory, and an entry goes under it", (int)j,
                                    path);
                cur = at.ino;
                i = j + 1;
        }
        memcpy(x->cache, path, len);
        x->cache_len = len;
        x->cache_ino = cur;
        x->cache_ok = true;
        *ret = cur;
        return 0;
}

static int defer_dir(struct xr *x, uint64_t ino, struct archive_entry *e) {
        if (x->ndirs == x->dirs_cap) {
                size_t ncap = x->dirs_cap ? x->dirs_cap * 2 : 64;
                struct dir_attr *nd = realloc(x->dirs, ncap * sizeof *nd);
                if (!nd)
                        return FAIL(x, -ENOMEM, "out of memory");
                x->dirs = nd;
                x->dirs_cap = ncap;
        }
        struct dir_attr *d = &x->dirs[x->ndirs++];
        d->ino = ino;
        d->mode = archive_entry_perm(e) & 07777;
        d->uid = (uint32_t)archive_entry_uid(e);
        d->gid = (uint32_t)archive_entry_gid(e);
        if (archive_entry_mtime_is_set(e)) {
                d->mtime.tv_sec = archive_entry_mtime(e);
                d->mtime.tv_nsec = archive_entry_mtime_nsec(e);
        } else {
                int64_t now = ntfs_now_ns();
                d->mtime.tv_sec = now / 1000000000;
                d->mtime.tv_nsec = now % 1000000000;
        }
        return 0;
}

static int set_attrs(struct xr *x, uint64_t ino, struct archive_entry *e, const char *path, bool mode) {
        struct ntfs_attr in = { 0 }, out;
        unsigned set = NTFS_SET_UID | NTFS_SET_GID | NTFS_SET_MTIME;
        if (mode) {
                in.mode = archive_entry_perm(e) & 07777;
                set |= NTFS_SET_MODE;
        }
        in.uid = (uint32_t)archive_entry_uid(e);
        in.gid = (uint32_t)archive_entry_gid(e);
        if (archive_entry_mtime_is_set(e)) {
                in.mtime.tv_sec = archive_entry_mtime(e);
                in.mtime.tv_nsec = archive_entry_mtime_nsec(e);
        } else {
                set &= ~(unsigned)NTFS_SET_MTIME;
                set |= NTFS_SET_MTIME_NOW;
        }
        int r = ntfs_ws_setattr(x->ws, ino, &in, set, &out);
        if (r < 0)
                return FAIL(x, r, "cannot set the attributes of '%s': %s", path, ntfs_strerror(r));
        return 0;
}

static int set_xattrs(struct xr *x, uint64_t ino, struct archive_entry *e, const char *path) {
        const char *name;
        const void *val;
        size_t size;
        archive_entry_xattr_reset(e);
        while (archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK) {
                if (!name || !*name)
                        continue;
                int r = ntfs_ws_setxattr(x->ws, ino, name, val, size, 0);
                if (r < 0)
                        return FAIL(x, r == -ENOSPC || r == -EIO ? r : -NTFS_EBADREQ,
                                    "cannot set xattr '%.100s' on '%s': %s", name, path, ntfs_strerror(r));
        }
        return 0;
}

static int archive_fail(struct xr *x, const char *what) {
        const char *m = archive_error_string(x->a);
        return FAIL(x, -NTFS_EBADREQ, "corrupt or truncated archive (%s): %s", what, m ? m : "read error");
}

/* Writes the entry's data blocks into ino (sparse files keep their holes). */
static int copy_data(struct xr *x, uint64_t ino, struct archive_entry *e, const char *path) {
        uint64_t declared = archive_entry_size_is_set(e) ? (uint64_t)archive_entry_size(e) : 0;
        uint64_t end = 0;
        for (;;) {
                const void *buf;
                size_t size;
                la_int64_t off;
                int r = archive_read_data_block(x->a, &buf, &size, &off);
                if (r == ARCHIVE_EOF)
                        break;
                if (r < ARCHIVE_WARN)
                        return archive_fail(x, path);
                if (off < 0)
                        return archive_fail(x, path);
                if (size == 0)
                        continue;
                x->written += size;
                if (x->written > x->max_bytes)
                        return FAIL(x, -NTFS_ETOOLARGE, "archive too large: more than %" PRIu64 " bytes of file data",
                                    x->max_bytes);
                const uint8_t *p = buf;
                uint64_t o = (uint64_t)off;
                for (size_t left = size; left > 0;) {
                        ssize_t w = ntfs_ws_write(x->ws, ino, p, left, o, false);
                        if (w < 0)
                                return FAIL(x, (int)w, "cannot write '%s': %s", path, ntfs_strerror((int)w));
                        if (w == 0)
                                return FAIL(x, -EIO, "cannot write '%s': no progress", path);
                        p += w;
                        o += (uint64_t)w;
                        left -= (size_t)w;
                }
                if (o > end)
                        end = o;
                if (x->prog) {
                        padd(&x->prog->bytes, size);
                        pset(&x->prog->stream_bytes, (uint64_t)archive_filter_bytes(x->a, -1));
                }
        }
        if (declared > end) { /* a trailing hole */
                struct ntfs_attr in = { .size = declared }, out;
                int r = ntfs_ws_setattr(x->ws, ino, &in, NTFS_SET_SIZE, &out);
                if (r < 0)
                        return FAIL(x, r, "cannot size '%s': %s", path, ntfs_strerror(r));
        }
        return 0;
}

/* Removes what is at parent/leaf so that a new entry can take its place
 * (a later entry of an archive replaces an earlier one, as tar does). */
static int make_room(struct xr *x, uint64_t parent, const char *leaf, const struct ntfs_attr *old, const char *path) {
        int r = S_ISDIR(old->mode) ? ntfs_ws_rmdir(x->ws, parent, leaf) : ntfs_ws_unlink(x->ws, parent, leaf);
        x->cache_ok = false;
        if (r == -ENOTEMPTY)
                return FAIL(x, -NTFS_EBADREQ, "'%s' is a non-empty directory and a later entry replaces it", path);
        if (r < 0)
                return FAIL(x, r, "cannot replace '%s': %s", path, ntfs_strerror(r));
        return 0;
}

static int import_entry(struct xr *x, struct archive_entry *e) {
        const char *raw = archive_entry_pathname(e);
        if (!raw)
                raw = archive_entry_pathname_utf8(e);
        if (!raw)
                return FAIL(x, -NTFS_EBADREQ, "corrupt archive: an entry without a usable name");
        if (++x->entries > x->max_entries)
                return FAIL(x, -NTFS_ETOOLARGE, "archive too large: more than %" PRIu64 " entries", x->max_entries);
        uint64_t size = archive_entry_size_is_set(e) && archive_entry_size(e) > 0 ? (uint64_t)archive_entry_size(e) : 0;
        if (size > x->max_bytes || x->declared + size > x->max_bytes)
                return FAIL(x, -NTFS_ETOOLARGE, "archive too large: more than %" PRIu64 " bytes of file data",
                            x->max_bytes);
        x->declared += size;
        uint64_t consumed = (uint64_t)archive_filter_bytes(x->a, 0);
        if (consumed > x->max_bytes + x->entries * (uint64_t)HEADER_ALLOWANCE)
                return FAIL(x, -NTFS_ETOOLARGE, "archive too large: %" PRIu64 " bytes of headers and data for %" PRIu64
                            " entries", consumed, x->entries);

        char path[MAX_PATH_BYTES + 1];
        int r = normalize(x, raw, path, sizeof path, "entry");
        if (r < 0)
                return r;
        const char *hl = archive_entry_hardlink(e);
        if (!hl)
                hl = archive_entry_hardlink_utf8(e);
        unsigned type = archive_entry_filetype(e);
        if (hl)
                type = AE_IFREG; /* a link: the target's type */
        switch (type) {
        case AE_IFREG:
        case AE_IFDIR:
        case AE_IFLNK:
        case AE_IFIFO:
                break;
        case AE_IFCHR:
        case AE_IFBLK:
                return FAIL(x, -NTFS_EDENIED, "unsafe archive: '%.200s' is a device node", raw);
        case AE_IFSOCK:
                return FAIL(x, -NTFS_EDENIED, "unsafe archive: '%.200s' is a socket", raw);
        default:
                return FAIL(x, -NTFS_EBADREQ, "corrupt archive: '%.200s' has an unknown type", raw);
        }
        uint32_t uid = (uint32_t)archive_entry_uid(e), gid = (uint32_t)archive_entry_gid(e);

        if (path[0] == 0) { /* "." or "./": the root directory itself */
                if (type != AE_IFDIR || hl)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: '%.200s' names the root but is not a directory",
                                    raw);
                if ((r = defer_dir(x, NTFS_ROOT_INO, e)) < 0)
                        return r;
                return set_xattrs(x, NTFS_ROOT_INO, e, "./");
        }
        char *slash = strrchr(path, '/');
        size_t plen = slash ? (size_t)(slash - path) : 0;
        const char *leaf = slash ? slash + 1 : path;
        uint64_t parent;
        if ((r = resolve_dir(x, path, plen, true, uid, gid, &parent)) < 0)
                return r;
        struct ntfs_attr old, at;
        r = ntfs_ws_lookup(x->ws, parent, leaf, &old);
        if (r < 0 && r != -ENOENT)
                return FAIL(x, r, "'%s': %s", path, ntfs_strerror(r));
        bool exists = r == 0;

        if (hl) {
                char tpath[MAX_PATH_BYTES + 1];
                if ((r = normalize(x, hl, tpath, sizeof tpath, "hard link target")) < 0)
                        return r;
                if (tpath[0] == 0)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: hard link '%s' to the root", path);
                char *ts = strrchr(tpath, '/');
                size_t tplen = ts ? (size_t)(ts - tpath) : 0;
                const char *tleaf = ts ? ts + 1 : tpath;
                uint64_t tparent;
                if ((r = resolve_dir(x, tpath, tplen, false, 0, 0, &tparent)) < 0)
                        return r;
                struct ntfs_attr target;
                r = ntfs_ws_lookup(x->ws, tparent, tleaf, &target);
                if (r == -ENOENT)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: hard link '%s' to '%s', which is not in it",
                                    path, tpath);
                if (r < 0)
                        return FAIL(x, r, "'%s': %s", tpath, ntfs_strerror(r));
                if (S_ISDIR(target.mode))
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: hard link '%s' to the directory '%s'", path,
                                    tpath);
                if (exists && old.ino == target.ino)
                        goto linked; /* already that file */
                if (exists && (r = make_room(x, parent, leaf, &old, path)) < 0)
                        return r;
                /* resolving the target may have replaced the cached parent */
                if ((r = resolve_dir(x, path, plen, true, uid, gid, &parent)) < 0)
                        return r;
                r = ntfs_ws_link(x->ws, target.ino, parent, leaf, &at);
                if (r < 0)
                        return FAIL(x, r, "cannot link '%s' to '%s': %s", path, tpath, ntfs_strerror(r));
        linked:
                if (size > 0 && S_ISREG(target.mode)) { /* a link that carries the data (pax, cpio) */
                        struct ntfs_attr in = { .size = 0 }, out;
                        if ((r = ntfs_ws_setattr(x->ws, target.ino, &in, NTFS_SET_SIZE, &out)) < 0)
                                return FAIL(x, r, "cannot truncate '%s': %s", path, ntfs_strerror(r));
                        if ((r = copy_data(x, target.ino, e, path)) < 0)
                                return r;
                        if ((r = set_attrs(x, target.ino, e, path, true)) < 0)
                                return r;
                }
                return 0;
        }

        if (type == AE_IFDIR) {
                uint64_t ino;
                if (exists && S_ISDIR(old.mode))
                        ino = old.ino;
                else {
                        if (exists && (r = make_room(x, parent, leaf, &old, path)) < 0)
                                return r;
                        r = ntfs_ws_mkdir(x->ws, parent, leaf, archive_entry_perm(e) & 07777, uid, gid, &at);
                        if (r < 0)
                                return FAIL(x, r, "cannot create '%s': %s", path, ntfs_strerror(r));
                        ino = at.ino;
                }
                if ((r = set_xattrs(x, ino, e, path)) < 0)
                        return r;
                return defer_dir(x, ino, e);
        }
        if (exists && (r = make_room(x, parent, leaf, &old, path)) < 0)
                return r;
        if (type == AE_IFLNK) {
                const char *target = archive_entry_symlink(e);
                if (!target)
                        target = archive_entry_symlink_utf8(e);
                if (!target || !*target)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: symlink '%s' without a target", path);
                if (strlen(target) > MAX_LINK_BYTES)
                        return FAIL(x, -NTFS_EBADREQ, "symlink '%s': target longer than %u bytes", path,
                                    MAX_LINK_BYTES);
                r = ntfs_ws_symlink(x->ws, parent, leaf, target, uid, gid, &at);
                if (r < 0)
                        return FAIL(x, r, "cannot create the symlink '%s': %s", path, ntfs_strerror(r));
                if ((r = set_xattrs(x, at.ino, e, path)) < 0)
                        return r;
                return set_attrs(x, at.ino, e, path, false);
        }
        uint32_t mode = (type == AE_IFIFO ? S_IFIFO : S_IFREG) | (archive_entry_perm(e) & 07777);
        r = ntfs_ws_mknod(x->ws, parent, leaf, mode, 0, uid, gid, &at);
        if (r < 0)
                return FAIL(x, r, "cannot create '%s': %s", path, ntfs_strerror(r));
        if (type == AE_IFREG && (r = copy_data(x, at.ino, e, path)) < 0)
                return r;
        if ((r = set_xattrs(x, at.ino, e, path)) < 0)
                return r;
        /* last: writes clear setuid/setgid and move mtime */
        return set_attrs(x, at.ino, e, path, true);
}

static int apply_dirs(struct xr *x) {
        /* deepest last-created first does not matter: setattr on a
         * directory never changes another directory's mtime */
        for (size_t i = x->ndirs; i-- > 0;) {
                struct dir_attr *d = &x->dirs[i];
                struct ntfs_attr in = { .mode = d->mode, .uid = d->uid, .gid = d->gid, .mtime = d->mtime }, out;
                int r = ntfs_ws_setattr(x->ws, d->ino, &in,
                                        NTFS_SET_MODE | NTFS_SET_UID | NTFS_SET_GID | NTFS_SET_MTIME, &out);
                if (r == -ESTALE || r == -ENOENT)
                        continue; /* replaced by a later entry */
                if (r < 0)
                        return FAIL(x, r, "cannot set a directory's attributes: %s", ntfs_strerror(r));
        }
        return 0;
}

/* A filter is registered only when libarchive decodes it itself (a probe
 * answering ARCHIVE_WARN would mean "through an external program"). */
static void add_filter(struct archive *a, int (*fn)(struct archive *)) {
        struct archive *probe = archive_read_new();
        if (!probe)
                return;
        int r = fn(probe);
        archive_read_free(probe);
        if (r == ARCHIVE_OK)
                (void)fn(a);
}

static int import_all(struct xr *x) {
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header(x->a, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r == ARCHIVE_WARN)
                        log_debug("archive: %s", archive_error_string(x->a));
                else if (r != ARCHIVE_OK)
                        return x->entries == 0 && archive_format(x->a) == 0
                                       ? FAIL(x, -NTFS_EBADREQ, "not an archive libarchive can read: %s",
                                              archive_error_string(x->a) ? archive_error_string(x->a) : "unknown format")
                                       : archive_fail(x, "header");
                if ((r = import_entry(x, e)) < 0)
                        return r;
                if (x->prog) {
                        padd(&x->prog->entries, 1);
                        pset(&x->prog->stream_bytes, (uint64_t)archive_filter_bytes(x->a, -1));
                }
        }
        return apply_dirs(x);
}

static void tmp_name(char *buf, size_t len) {
        uint8_t rnd[8];
        static uint64_t counter;
        if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
                uint64_t v = (uint64_t)ntfs_now_ns() ^ (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) << 48) ^
                             ((uint64_t)getpid() << 20);
                ntfs_put_be64(rnd, v);
        }
        char hex[17];
        ntfs_hex(rnd, sizeof rnd, hex);
        snprintf(buf, len, "%s%s", NTFS_ARCHIVE_TMP_PREFIX, hex);
}

int ntfs_archive_import(ntfs_store *st, const char *name, const struct ntfs_archive_source *src,
                        const struct ntfs_archive_limits *lim, const char *message,
                        struct ntfs_archive_progress *prog, ntfs_hash *ret_head, char *why, size_t whylen) {
        if (why && whylen)
                why[0] = 0;
        if (!st || !name || !src || (src->fd < 0 && !src->mem && src->len))
                return -EINVAL;
        if (!ntfs_name_valid(name) || strncmp(name, NTFS_ARCHIVE_TMP_PREFIX, strlen(NTFS_ARCHIVE_TMP_PREFIX)) == 0) {
                set_why(why, whylen, "invalid session name '%.100s'", name);
                return -NTFS_EINVALNAME;
        }
        struct ntfs_session_info si;
        int r = ntfs_session_get(st, name, &si);
        if (r == 0) {
                set_why(why, whylen, "session '%s' exists", name);
                return -NTFS_ESESSEXISTS;
        }
        if (r != -NTFS_ENOSESSION) {
                set_why(why, whylen, "session '%s': %s", name, ntfs_strerror(r));
                return r;
        }
        _cleanup_free_ struct xr *x = calloc(1, sizeof *x);
        _cleanup_(a_freep) struct archive *a = archive_read_new();
        if (!x || !a) {
                set_why(why, whylen, "out of memory");
                return -ENOMEM;
        }
        x->st = st;
        x->a = a;
        x->prog = prog;
        x->why = why;
        x->whylen = whylen;
        x->max_entries = lim && lim->max_entries ? lim->max_entries : NTFS_ARCHIVE_DEFAULT_MAX_ENTRIES;
        x->max_bytes = lim && lim->max_bytes ? lim->max_bytes : NTFS_ARCHIVE_DEFAULT_MAX_BYTES;

        /* Formats that read only the stream (no mtree: it names host files). */
        archive_read_support_format_tar(a);
        archive_read_support_format_cpio(a);
        archive_read_support_format_zip(a);
        add_filter(a, archive_read_support_filter_gzip);
        add_filter(a, archive_read_support_filter_bzip2);
        add_filter(a, archive_read_support_filter_xz);
        add_filter(a, archive_read_support_filter_lzma);
        add_filter(a, archive_read_support_filter_zstd);
        add_filter(a, archive_read_support_filter_lz4);
        add_filter(a, archive_read_support_filter_compress);
        if (prog && src->fd >= 0) {
                struct stat sb;
                if (fstat(src->fd, &sb) == 0 && S_ISREG(sb.st_mode) && !pget(&prog->total_stream_bytes))
                        pset(&prog->total_stream_bytes, (uint64_t)sb.st_size);
        } else if (prog && src->fd < 0)
                pset(&prog->total_stream_bytes, src->len);

        struct locale_guard lg;
        locale_enter(&lg);
        r = src->fd >= 0 ? archive_read_open_fd(a, src->fd, READ_BLOCK)
                         : archive_read_open_memory(a, src->mem, src->len);
        if (r != ARCHIVE_OK) {
                r = FAIL(x, -NTFS_EBADREQ, "cannot read the archive: %s",
                         archive_error_string(a) ? archive_error_string(a) : "unknown error");
                locale_leave(&lg);
                return r;
        }

        char tmp[64];
        tmp_name(tmp, sizeof tmp);
        r = ntfs_session_create(st, tmp, NULL, NULL);
        if (r < 0) {
                locale_leave(&lg);
                set_why(why, whylen, "cannot create a session: %s", ntfs_strerror(r));
                return r;
        }
        int64_t t0 = ntfs_mono_ns();
        r = ntfs_ws_open(st, tmp, &x->ws);
        if (r < 0)
                set_why(why, whylen, "cannot open the new session: %s", ntfs_strerror(r));
        else
                r = import_all(x);
        locale_leave(&lg);
        free(x->dirs);
        x->dirs = NULL;
        if (x->ws) {
                ntfs_ws_close(x->ws);
                x->ws = NULL;
        }
        ntfs_hash head;
        bool changed;
        int64_t t1 = ntfs_mono_ns();
        if (r == 0 && (r = ntfs_checkpoint(st, tmp, message ? message : "import", NULL, &head, &changed)) < 0)
                set_why(why, whylen, "cannot checkpoint the import: %s", ntfs_strerror(r));
        log_debug("archive: import %s: entries %.3f s, checkpoint %.3f s", name, (double)(t1 - t0) / 1e9,
                  (double)(ntfs_mono_ns() - t1) / 1e9);
        if (r == 0 && (r = ntfs_fork(st, tmp, name, &head)) < 0)
                set_why(why, whylen, "cannot create session '%s': %s", name, ntfs_strerror(r));
        int er = ntfs_session_end(st, tmp);
        if (er < 0)
                log_warn("archive: cannot end the temporary session %s: %s", tmp, ntfs_strerror(er));
        if (r < 0)
                return r;
        if (ret_head)
                *ret_head = head;
        return 0;
}

static int cleanup_cb(const struct ntfs_session_info *si, void *ud) {
        if (strncmp(si->name, NTFS_ARCHIVE_TMP_PREFIX, strlen(NTFS_ARCHIVE_TMP_PREFIX)) != 0)
                return 0;
        char (*names)[NTFS_NAME_MAX + 1] = ud;
        for (size_t i = 0; i < 64; i++)
                if (!names[i][0]) {
                        snprintf(names[i], NTFS_NAME_MAX + 1, "%s", si->name);
                        return 0;
                }
        return 1; /* full: the next call ends the rest */
}

int ntfs_archive_cleanup(ntfs_store *st) {
        int ended = 0;
        for (int round = 0; round < 1000; round++) {
                char names[64][NTFS_NAME_MAX + 1] = { { 0 } };
                int r = ntfs_session_list(st, cleanup_cb, names);
                if (r < 0)
                        return r;
                int n = 0;
                for (size_t i = 0; i < 64 && names[i][0]; i++, n++) {
                        r = ntfs_session_end(st, names[i]);
                        if (r < 0)
                                return r;
                        ended++;
                }
                if (n < 64)
                        break;
        }
        return ended;
}
