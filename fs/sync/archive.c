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
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <limits.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/acl.h"
#include "fs/sync/tarball.h"
#include "common/banned.h"

#define OUT_BUF (256u * 1024)         /* archive bytes handed to the sink per call */
#define DIRECT_MIN (32u * 1024)       /* a write this big goes to the sink as it is */
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

/* First path of each hard-link group (open addressing, linkid != 0). */
struct link_slot {
        uint64_t id;
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

static size_t link_hash(uint64_t id, size_t cap) {
        id ^= id >> 33;
        id *= 0xff51afd7ed558ccdULL;
        id ^= id >> 33;
        return (size_t)id & (cap - 1);
}

static const char *link_map_get(const struct link_map *m, uint64_t id) {
        if (!m->cap)
                return NULL;
        for (size_t i = link_hash(id, m->cap);; i = (i + 1) & (m->cap - 1)) {
                if (m->slots[i].id == id)
                        return m->slots[i].path;
                if (m->slots[i].id == 0)
                        return NULL;
        }
}

static int link_map_put(struct link_map *m, uint64_t id, const char *path) {
        if ((m->n + 1) * 2 > m->cap) {
                size_t ncap = m->cap ? m->cap * 2 : 64;
                struct link_slot *ns = calloc(ncap, sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                for (size_t i = 0; i < m->cap; i++) {
                        if (!m->slots[i].id)
                                continue;
                        size_t j = link_hash(m->slots[i].id, ncap);
                        while (ns[j].id)
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
        size_t i = link_hash(id, m->cap);
        while (m->slots[i].id)
                i = (i + 1) & (m->cap - 1);
        m->slots[i] = (struct link_slot){ id, p };
        m->n++;
        return 0;
}

struct xw {
        ntfs_store *st;
        uint64_t written; /* archive bytes taken from libarchive */
        unsigned record;  /* pad the stream to a multiple of this in w_close (0: no) */
        struct archive *a;
        struct archive_entry *e;
        ntfs_archive_sink sink;
        void *ud;
        int sink_err;
        uint8_t *obuf;
        size_t olen;
        struct link_map links;
        char *name; /* the entry's archive name: "./" + path */
        size_t name_cap;
        bool lib_failed; /* a libarchive call failed (why is set) */
        struct ntfs_archive_progress *prog;
        char *why;
        size_t whylen;
        bool keep_setid;  /* NTFS_ARCHIVE_KEEP_SETID */
        uint64_t setid_dropped; /* entries whose setuid/setgid root bit was left out */
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
        x->written += len;
        if (len >= DIRECT_MIN) {
                /* a file's chunk: straight to the receiver, no copy */
                if (flush_out(x) < 0 || (x->sink_err = x->sink(x->ud, buf, len)) < 0) {
                        archive_set_error(a, EIO, "the receiver stopped: %s", ntfs_strerror(x->sink_err));
                        return -1;
                }
                if (x->prog)
                        padd(&x->prog->stream_bytes, len);
                return (la_ssize_t)len;
        }
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
        static const uint8_t zeros[512];
        /* the record padding libarchive's own blocking would have written */
        while (x->record && x->written % x->record && x->sink_err >= 0) {
                size_t n = NTFS_MIN(sizeof zeros, x->record - x->written % x->record);
                if (w_write(a, ud, zeros, n) < 0)
                        return ARCHIVE_FATAL;
        }
        if (flush_out(x) < 0) {
                archive_set_error(a, EIO, "the receiver stopped: %s", ntfs_strerror(x->sink_err));
                return ARCHIVE_FATAL;
        }
        return ARCHIVE_OK;
}

static int w_fail(struct xw *x, const char *what) {
        x->lib_failed = true;
        if (x->sink_err < 0) {
                set_why(x->why, x->whylen, "%s: the receiver stopped: %s", what, ntfs_strerror(x->sink_err));
                return x->sink_err;
        }
        const char *m = archive_error_string(x->a);
        set_why(x->why, x->whylen, "%s: %s", what, m ? m : "libarchive failed");
        int e = archive_errno(x->a);
        return e > 0 ? -e : -EIO;
}

/* POSIX ACL tags and permissions, the kernel's and libarchive's */
static const struct {
        uint16_t ntfs;
        int la;
} acl_tags[] = {
        { NTFS_ACL_USER_OBJ, ARCHIVE_ENTRY_ACL_USER_OBJ }, { NTFS_ACL_USER, ARCHIVE_ENTRY_ACL_USER },
        { NTFS_ACL_GROUP_OBJ, ARCHIVE_ENTRY_ACL_GROUP_OBJ }, { NTFS_ACL_GROUP, ARCHIVE_ENTRY_ACL_GROUP },
        { NTFS_ACL_MASK, ARCHIVE_ENTRY_ACL_MASK }, { NTFS_ACL_OTHER, ARCHIVE_ENTRY_ACL_OTHER },
};

static int acl_perm_la(uint16_t perm) {
        return (perm & 4 ? ARCHIVE_ENTRY_ACL_READ : 0) | (perm & 2 ? ARCHIVE_ENTRY_ACL_WRITE : 0) |
               (perm & 1 ? ARCHIVE_ENTRY_ACL_EXECUTE : 0);
}

/* A POSIX ACL (system.posix_acl_access / _default) goes out as pax ACL
 * records (SCHILY.acl.access / SCHILY.acl.default: what GNU tar --acls,
 * star and bsdtar read), not as an xattr; ids numeric, as uid/gid. */
static int acl_to_entry(struct archive_entry *e, int kind, const void *value, size_t len) {
        int n = ntfs_acl_check(value, len);
        if (n <= 0)
                return n;
        int type = kind == 1 ? ARCHIVE_ENTRY_ACL_TYPE_ACCESS : ARCHIVE_ENTRY_ACL_TYPE_DEFAULT;
        for (int i = 0; i < n; i++) {
                uint16_t tag, perm;
                uint32_t id;
                ntfs_acl_get(value, (size_t)i, &tag, &perm, &id);
                int latag = 0;
                for (size_t t = 0; t < ARRAY_SIZE(acl_tags); t++)
                        if (acl_tags[t].ntfs == tag)
                                latag = acl_tags[t].la;
                int qual = tag == NTFS_ACL_USER || tag == NTFS_ACL_GROUP ? (int)id : -1;
                if (archive_entry_acl_add_entry(e, type, acl_perm_la(perm), latag, qual, NULL) != ARCHIVE_OK)
                        return -EINVAL;
        }
        return 0;
}

static int xattr_cb(const char *name, const void *value, size_t len, void *ud) {
        struct xw *x = ud;
        int kind = ntfs_acl_kind(name);
        if (kind) {
                int r = acl_to_entry(x->e, kind, value, len);
                if (r < 0)
                        set_why(x->why, x->whylen, "'%s' has an invalid %s", x->name, name);
                return r;
        }
        archive_entry_xattr_add_entry(x->e, name, value, len);
        return 0;
}

static int data_cb(const void *data, size_t len, uint64_t off, void *ud) {
        (void)off;
        struct xw *x = ud;
        la_ssize_t w = archive_write_data(x->a, data, len);
        if (w < 0)
                return w_fail(x, x->name);
        if (x->prog)
                padd(&x->prog->bytes, len);
        return 0;
}

/* Writes one entry of the walk (tree order: parents first, names in byte
 * order within a directory). */
static int write_entry(const struct ntfs_walk_entry *we, void *ud) {
        struct xw *x = ud;
        uint32_t type = we->mode & S_IFMT;
        size_t pl = strlen(we->path), need = 2 + pl + 1;
        if (need > x->name_cap) {
                size_t nc = x->name_cap ? x->name_cap : 256;
                while (nc < need)
                        nc *= 2;
                char *nn = realloc(x->name, nc);
                if (!nn)
                        return -ENOMEM;
                x->name = nn;
                x->name_cap = nc;
        }
        memcpy(x->name, "./", 2);
        memcpy(x->name + 2, we->path, pl + 1);
        if (type == S_IFSOCK) {
                log_debug("archive: skipping socket %s", x->name);
                return 0;
        }
        struct archive_entry *e = x->e;
        archive_entry_clear(e);
        archive_entry_set_pathname(e, x->name);
        uint32_t perm = we->mode & 07777;
        if (!x->keep_setid && type != S_IFDIR) {
                uint32_t drop = ((perm & S_ISUID) && we->uid == 0 ? S_ISUID : 0) |
                                ((perm & S_ISGID) && we->gid == 0 ? S_ISGID : 0);
                if (drop) {
                        perm &= ~drop;
                        x->setid_dropped++;
                }
        }
        archive_entry_set_mode(e, type | perm);
        archive_entry_set_uid(e, we->uid);
        archive_entry_set_gid(e, we->gid);
        int64_t sec = we->mtime_ns / 1000000000LL, nsec = we->mtime_ns % 1000000000LL;
        if (nsec < 0) {
                sec--;
                nsec += 1000000000LL;
        }
        archive_entry_set_mtime(e, (time_t)sec, (long)nsec);
        archive_entry_set_size(e, 0);
        int r;
        bool data = false;
        if (type != S_IFDIR && we->linkid) {
                const char *first = link_map_get(&x->links, we->linkid);
                if (first) {
                        archive_entry_set_hardlink(e, first);
                        goto header;
                }
                if ((r = link_map_put(&x->links, we->linkid, x->name)) < 0)
                        return r;
        }
        if (type == S_IFLNK)
                archive_entry_set_symlink(e, we->target);
        else if (type == S_IFREG) {
                archive_entry_set_size(e, (la_int64_t)we->size);
                data = we->size > 0;
        } else if (type == S_IFCHR || type == S_IFBLK)
                archive_entry_set_rdev(e, (dev_t)we->rdev);
        if ((r = ntfs_xattr_read(x->st, &we->xattr, xattr_cb, x)) < 0) {
                set_why(x->why, x->whylen, "cannot read the xattrs of '%s': %s", x->name, ntfs_strerror(r));
                return r;
        }
header:
        r = archive_write_header(x->a, e);
        if (r == ARCHIVE_FAILED) {
                /* This entry cannot be represented; libarchive wrote nothing. */
                log_debug("archive: skipping %s: %s", x->name, archive_error_string(x->a));
                return 0;
        }
        if (r < ARCHIVE_WARN)
                return w_fail(x, x->name);
        if (data && (r = ntfs_file_read_chunks(x->st, &we->content, data_cb, x)) < 0) {
                if (!x->lib_failed)
                        set_why(x->why, x->whylen, "cannot read '%s': %s", x->name, ntfs_strerror(r));
                return r;
        }
        if (archive_write_finish_entry(x->a) < ARCHIVE_WARN)
                return w_fail(x, x->name);
        if (x->prog)
                padd(&x->prog->entries, 1);
        return 0;
}

int ntfs_archive_export(ntfs_store *st, const ntfs_hash *commit, enum ntfs_archive_format fmt,
                        ntfs_archive_sink sink, void *ud, struct ntfs_archive_progress *prog, char *why,
                        size_t whylen) {
        return ntfs_archive_export_flags(st, commit, fmt, 0, sink, ud, prog, why, whylen);
}

int ntfs_archive_export_flags(ntfs_store *st, const ntfs_hash *commit, enum ntfs_archive_format fmt, unsigned flags,
                              ntfs_archive_sink sink, void *ud, struct ntfs_archive_progress *prog, char *why,
                              size_t whylen) {
        if (why && whylen)
                why[0] = 0;
        if (!st || !commit || !sink || (flags & ~NTFS_ARCHIVE_KEEP_SETID))
                return -EINVAL;
        struct xw x = { .st = st, .sink = sink, .ud = ud, .prog = prog, .why = why, .whylen = whylen,
                        .keep_setid = flags & NTFS_ARCHIVE_KEEP_SETID };
        /* the buffer is declared first so that it is freed last: freeing
         * the archive may still call w_write/w_close */
        _cleanup_free_ uint8_t *obuf = malloc(OUT_BUF);
        _cleanup_(ae_freep) struct archive_entry *e = archive_entry_new();
        _cleanup_(a_freep) struct archive *a = archive_write_new();
        if (!a || !e || !obuf) {
                set_why(why, whylen, "out of memory");
                return -ENOMEM;
        }
        x.a = a;
        x.e = e;
        x.obuf = obuf;
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
        else {
                /* ... but w_write takes libarchive's writes unblocked (a
                 * 64 KiB chunk of a file is passed on without a copy) and
                 * w_close pads the end to the record size instead. */
                x.record = (unsigned)archive_write_get_bytes_per_block(a);
                if (archive_write_set_bytes_per_block(a, 0) != ARCHIVE_OK)
                        x.record = 0;
        }
        struct locale_guard lg;
        locale_enter(&lg);
        if (archive_write_open2(a, &x, NULL, w_write, w_close, NULL) != ARCHIVE_OK) {
                r = w_fail(&x, "cannot start the archive");
                locale_leave(&lg);
                return r;
        }
        r = ntfs_tree_walk(st, commit, write_entry, &x);
        if (r < 0 && why && !why[0])
                set_why(why, whylen, "cannot read the commit: %s", ntfs_strerror(r));
        free(x.name);
        link_map_release(&x.links);
        if (r == 0 && archive_write_close(a) != ARCHIVE_OK)
                r = w_fail(&x, "cannot finish the archive");
        if (r < 0 && x.sink_err == 0)
                x.sink_err = -ECANCELED; /* a failed export never gets its end-of-archive blocks */
        locale_leave(&lg);
        if (r < 0 && x.sink_err < 0 && why && !why[0])
                set_why(why, whylen, "the receiver stopped: %s", ntfs_strerror(x.sink_err));
        if (r == 0 && x.setid_dropped)
                log_info("archive: setuid/setgid root left out of %" PRIu64 " entries (NTFS_ARCHIVE_KEEP_SETID keeps it)",
                         x.setid_dropped);
        return r;
}

/* ---- import ------------------------------------------------------------------------------ */

struct xr {
        ntfs_store *st;
        ntfs_builder *b;
        struct archive *a;
        uint64_t max_entries, max_bytes;
        uint64_t entries, declared, written;
        struct ntfs_archive_progress *prog;
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

/* Turns a builder error about entry path into the importer's code and
 * message (the builder names the path prefix it is about). */
static int build_fail(struct xr *x, int r, const char *path, const char *target) {
        const char *at = ntfs_builder_error_path(x->b);
        if (!at || !*at)
                at = path;
        switch (r) {
        case -NTFS_EDENIED:
                return FAIL(x, -NTFS_EDENIED, "unsafe archive: '%.200s' is a symlink, and an entry goes through it",
                            at);
        case -ENOTDIR:
                return FAIL(x, -NTFS_EBADREQ, "'%.200s' is not a directory, and an entry goes under it", at);
        case -ENOENT:
                if (target)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: hard link '%.200s' to '%.200s', which is not in it",
                                    path, target);
                break;
        case -EPERM:
                if (target)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: hard link '%.200s' to the directory '%.200s'",
                                    path, target);
                break;
        case -ENOTEMPTY:
                return FAIL(x, -NTFS_EBADREQ, "'%.200s' is a non-empty directory and a later entry replaces it", at);
        case -EINVAL:
        case -ENAMETOOLONG:
        case -E2BIG:
        case -EMLINK:
        case -ELOOP:
                return FAIL(x, -NTFS_EBADREQ, "'%.200s': %s", at, ntfs_strerror(r));
        default:
                break;
        }
        return FAIL(x, r, "'%.200s': %s", at, ntfs_strerror(r));
}

static int64_t entry_mtime(struct archive_entry *e) {
        if (!archive_entry_mtime_is_set(e))
                return ntfs_now_ns();
        return (int64_t)archive_entry_mtime(e) * 1000000000LL + archive_entry_mtime_nsec(e);
}

static int set_xattrs(struct xr *x, struct archive_entry *e, const char *path) {
        const char *name;
        const void *val;
        size_t size;
        archive_entry_xattr_reset(e);
        while (archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK) {
                if (!name || !*name || ntfs_acl_kind(name))
                        continue; /* ACLs come from the pax ACL records (acl_from_entry) */
                int r = ntfs_builder_set_xattr(x->b, path, name, val, size);
                if (r < 0)
                        return FAIL(x, r == -ENOSPC || r == -EIO || r == -ENOMEM ? r : -NTFS_EBADREQ,
                                    "cannot set xattr '%.100s' on '%s': %s", name, path[0] ? path : ".",
                                    ntfs_strerror(r));
        }
        return 0;
}

/* The id of a user or group an ACL entry names without a number (GNU tar
 * writes names in SCHILY.acl.*), from this host's databases, as tar does
 * when it extracts; -1 when unknown. */
static int acl_name_id(bool user, const char *name) {
        if (!name || !*name)
                return -1;
        char buf[4096];
        if (user) {
                struct passwd pw, *res = NULL;
                if (getpwnam_r(name, &pw, buf, sizeof buf, &res) != 0 || !res || pw.pw_uid > INT32_MAX)
                        return -1;
                return (int)pw.pw_uid;
        }
        struct group gr, *res = NULL;
        if (getgrnam_r(name, &gr, buf, sizeof buf, &res) != 0 || !res || gr.gr_gid > INT32_MAX)
                return -1;
        return (int)gr.gr_gid;
}

/* An entry's POSIX ACL of one type (ARCHIVE_ENTRY_ACL_TYPE_ACCESS or
 * _DEFAULT) in its xattr form (*ret, malloc'd; NULL when it has none or
 * an access ACL only repeats the mode); *perm's permission bits become the
 * access ACL's (a tar's mode has the mask as group bits), as
 * acl_set_file() on extraction leaves them. */
static int acl_from_entry(struct xr *x, struct archive_entry *e, const char *path, int type, uint32_t *perm,
                          uint8_t **ret, size_t *ret_len) {
        *ret = NULL;
        *ret_len = 0;
        int n = archive_entry_acl_reset(e, type);
        if (n <= 0)
                return 0;
        if (n > NTFS_ACL_MAX_ENTRIES)
                return FAIL(x, -NTFS_EBADREQ, "'%s': more than %d ACL entries", path, NTFS_ACL_MAX_ENTRIES);
        size_t len = NTFS_ACL_HDR + (size_t)n * NTFS_ACL_ENTRY;
        _cleanup_free_ uint8_t *v = malloc(len);
        if (!v)
                return FAIL(x, -ENOMEM, "out of memory");
        ntfs_acl_put_header(v);
        int i = 0, etype, permset, tag, qual;
        const char *name;
        while (i < n && archive_entry_acl_next(e, type, &etype, &permset, &tag, &qual, &name) == ARCHIVE_OK) {
                uint16_t t = 0;
                for (size_t k = 0; k < ARRAY_SIZE(acl_tags); k++)
                        if (acl_tags[k].la == tag)
                                t = acl_tags[k].ntfs;
                if (t == 0)
                        return FAIL(x, -NTFS_EBADREQ, "'%s': an ACL entry of a kind POSIX ACLs do not have", path);
                if ((t == NTFS_ACL_USER || t == NTFS_ACL_GROUP) && qual < 0 &&
                    (qual = acl_name_id(t == NTFS_ACL_USER, name)) < 0)
                        return FAIL(x, -NTFS_EBADREQ, "'%s': ACL entry for %s '%.100s', which this host does not know",
                                    path, t == NTFS_ACL_USER ? "user" : "group", name ? name : "?");
                uint16_t p = (uint16_t)((permset & ARCHIVE_ENTRY_ACL_READ ? 4 : 0) |
                                        (permset & ARCHIVE_ENTRY_ACL_WRITE ? 2 : 0) |
                                        (permset & ARCHIVE_ENTRY_ACL_EXECUTE ? 1 : 0));
                ntfs_acl_put(v, (size_t)i++, t, p,
                             t == NTFS_ACL_USER || t == NTFS_ACL_GROUP ? (uint32_t)qual : NTFS_ACL_UNDEFINED_ID);
        }
        len = NTFS_ACL_HDR + (size_t)i * NTFS_ACL_ENTRY;
        ntfs_acl_sort(v, len);
        if (ntfs_acl_check(v, len) <= 0)
                return FAIL(x, -NTFS_EBADREQ, "corrupt archive: '%s' has an invalid %s ACL", path,
                            type == ARCHIVE_ENTRY_ACL_TYPE_ACCESS ? "access" : "default");
        if (type == ARCHIVE_ENTRY_ACL_TYPE_ACCESS) {
                uint32_t bits;
                bool equiv;
                ntfs_acl_mode(v, len, &bits, &equiv);
                *perm = (*perm & ~(uint32_t)0777) | bits;
                if (equiv)
                        return 0;
        }
        *ret = TAKE_PTR(v);
        *ret_len = len;
        return 0;
}

static int set_acl_xattr(struct xr *x, const char *path, const char *name, const uint8_t *v, size_t len) {
        if (!v)
                return 0;
        int r = ntfs_builder_set_xattr(x->b, path, name, v, len);
        if (r < 0)
                return FAIL(x, r == -ENOSPC || r == -EIO || r == -ENOMEM ? r : -NTFS_EBADREQ,
                            "cannot set the ACL of '%s': %s", path[0] ? path : ".", ntfs_strerror(r));
        return 0;
}

static int archive_fail(struct xr *x, const char *what) {
        const char *m = archive_error_string(x->a);
        return FAIL(x, -NTFS_EBADREQ, "corrupt or truncated archive (%s): %s", what, m ? m : "read error");
}

/* Streams the entry's data blocks into the open builder file (sparse
 * entries keep their holes) and ends it. */
static int copy_data(struct xr *x, struct archive_entry *e, const char *path) {
        uint64_t declared = archive_entry_size_is_set(e) && archive_entry_size(e) > 0 ? (uint64_t)archive_entry_size(e)
                                                                                       : 0;
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
                if (off < 0 || (uint64_t)off < end)
                        return archive_fail(x, path);
                if (size == 0)
                        continue;
                x->written += size;
                if (x->written > x->max_bytes)
                        return FAIL(x, -NTFS_ETOOLARGE, "archive too large: more than %" PRIu64 " bytes of file data",
                                    x->max_bytes);
                if ((r = ntfs_builder_file_write(x->b, buf, size, (uint64_t)off)) < 0)
                        return FAIL(x, r == -EINVAL ? -NTFS_EBADREQ : r, "cannot write '%s': %s", path, ntfs_strerror(r));
                end = (uint64_t)off + size;
                if (x->prog) {
                        padd(&x->prog->bytes, size);
                        pset(&x->prog->stream_bytes, (uint64_t)archive_filter_bytes(x->a, -1));
                }
        }
        int r = ntfs_builder_file_end(x->b, declared > end ? declared : end);
        if (r < 0)
                return FAIL(x, r, "cannot store '%s': %s", path, ntfs_strerror(r));
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
        uint32_t perm = (uint32_t)archive_entry_perm(e) & 07777;
        int64_t mtime = entry_mtime(e);
        /* POSIX ACLs (pax SCHILY.acl.*): a symlink has none, a hard link
         * its target's; the access ACL's bits are the mode's */
        _cleanup_free_ uint8_t *acl_a = NULL, *acl_d = NULL;
        size_t acl_alen = 0, acl_dlen = 0;
        if (!hl && type != AE_IFLNK) {
                if ((r = acl_from_entry(x, e, path[0] ? path : ".", ARCHIVE_ENTRY_ACL_TYPE_ACCESS, &perm, &acl_a,
                                        &acl_alen)) < 0)
                        return r;
                if (type == AE_IFDIR && (r = acl_from_entry(x, e, path[0] ? path : ".", ARCHIVE_ENTRY_ACL_TYPE_DEFAULT,
                                                            &perm, &acl_d, &acl_dlen)) < 0)
                        return r;
        }

        if (path[0] == 0) { /* "." or "./": the root directory itself */
                if (type != AE_IFDIR || hl)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: '%.200s' names the root but is not a directory",
                                    raw);
                if ((r = ntfs_builder_add_dir(x->b, "", perm, uid, gid, mtime)) < 0)
                        return build_fail(x, r, "./", NULL);
                if ((r = set_xattrs(x, e, "")) < 0 || (r = set_acl_xattr(x, "", NTFS_ACL_ACCESS, acl_a, acl_alen)) < 0)
                        return r;
                return set_acl_xattr(x, "", NTFS_ACL_DEFAULT, acl_d, acl_dlen);
        }
        if (hl) {
                char tpath[MAX_PATH_BYTES + 1];
                if ((r = normalize(x, hl, tpath, sizeof tpath, "hard link target")) < 0)
                        return r;
                if (tpath[0] == 0)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: hard link '%s' to the root", path);
                if ((r = ntfs_builder_add_hardlink(x->b, path, tpath)) < 0)
                        return build_fail(x, r, path, tpath);
                if (size > 0) { /* a link that carries the data (pax, cpio) */
                        if ((r = ntfs_builder_file_begin(x->b, path, perm, uid, gid, mtime, NTFS_BUILD_REWRITE)) < 0)
                                return build_fail(x, r, path, NULL);
                        return copy_data(x, e, path);
                }
                return 0;
        }
        if (type == AE_IFDIR) {
                if ((r = ntfs_builder_add_dir(x->b, path, perm, uid, gid, mtime)) < 0)
                        return build_fail(x, r, path, NULL);
        } else if (type == AE_IFLNK) {
                const char *target = archive_entry_symlink(e);
                if (!target)
                        target = archive_entry_symlink_utf8(e);
                if (!target || !*target)
                        return FAIL(x, -NTFS_EBADREQ, "corrupt archive: symlink '%s' without a target", path);
                if (strlen(target) > MAX_LINK_BYTES)
                        return FAIL(x, -NTFS_EBADREQ, "symlink '%s': target longer than %u bytes", path,
                                    MAX_LINK_BYTES);
                if ((r = ntfs_builder_add_symlink(x->b, path, target, uid, gid, mtime)) < 0)
                        return build_fail(x, r, path, NULL);
        } else if (type == AE_IFIFO) {
                if ((r = ntfs_builder_add_node(x->b, path, S_IFIFO | perm, 0, uid, gid, mtime)) < 0)
                        return build_fail(x, r, path, NULL);
        } else {
                if ((r = ntfs_builder_file_begin(x->b, path, perm, uid, gid, mtime, 0)) < 0)
                        return build_fail(x, r, path, NULL);
                if ((r = copy_data(x, e, path)) < 0)
                        return r;
        }
        if ((r = set_xattrs(x, e, path)) < 0 || (r = set_acl_xattr(x, path, NTFS_ACL_ACCESS, acl_a, acl_alen)) < 0)
                return r;
        return set_acl_xattr(x, path, NTFS_ACL_DEFAULT, acl_d, acl_dlen);
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
        return 0;
}

static inline void builder_freep(ntfs_builder **b) {
        ntfs_builder_free(*b);
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
        _cleanup_(builder_freep) ntfs_builder *b = NULL;
        if (!x || !a || ntfs_builder_new(st, &b) < 0) {
                set_why(why, whylen, "out of memory");
                return -ENOMEM;
        }
        x->st = st;
        x->b = b;
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
        int64_t t0 = ntfs_mono_ns();
        r = import_all(x);
        locale_leave(&lg);
        int64_t t1 = ntfs_mono_ns();
        ntfs_hash head;
        if (r == 0) {
                /* the trees, one commit and the session: nothing before this is referenced */
                r = ntfs_builder_commit(b, name, message ? message : "import", &head);
                if (r == -NTFS_ESESSEXISTS)
                        set_why(why, whylen, "session '%s' exists", name);
                else if (r == -EAGAIN)
                        set_why(why, whylen, "objects of the import were collected while it ran (gc); import again");
                else if (r < 0)
                        set_why(why, whylen, "cannot commit the import: %s", ntfs_strerror(r));
        }
        log_debug("archive: import %s: entries %.3f s, commit %.3f s", name, (double)(t1 - t0) / 1e9,
                  (double)(ntfs_mono_ns() - t1) / 1e9);
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
