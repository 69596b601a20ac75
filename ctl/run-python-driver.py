# SPDX-License-Identifier: MIT
# run-python-driver.py — the program ntfsd runs in the jail for the
# run_python tool (docs/python.md). It is embedded in ntfsd at build time
# (ctl/meson.build) and handed to /usr/bin/python3 in the environment
# variable NTFS_PY_DRIVER (python3 -I -S: see _site); argv: ROOT BUDGET CODE_BASE64.
#
# It runs the code with `cache` (a dict kept as one pickle per key under
# ROOT/.ntfs/python/cache, so checkpoints, forks and rollbacks carry it) and
# `ui` (values to show: rendered to ROOT/ui/NAME.KIND.EXT when they are not
# plain data) in its globals, captures fd 1 and 2 (print, os.write and child
# processes alike) in memfds, and writes ONE JSON object to the original
# stdout: stdout, stderr, *_truncated, exit_code, error (null or {type,
# message, traceback}), namespace, omitted, artifacts, ui_problems,
# cache_problems. ntfsd merges it into the tool's result (ctl/run-python.c).
import os
import sys

_driver = os.environ.pop("NTFS_PY_DRIVER", None)
del _driver


def _site():
    """What site.main() gives the code, without its .pth files and
    sitecustomize (python3 runs with -S: processing the host's .pth files
    cost ~15 ms a call): the site-packages directories on sys.path, and
    the exit, quit, help, copyright builtins."""
    import site
    for d in site.getsitepackages():
        if d not in sys.path and os.path.isdir(d):
            sys.path.append(d)
    site.setquit()
    site.setcopyright()
    site.sethelper()


_site()


def _main():
    # Imports are the interpreter's start-up cost on every call: only
    # binascii and io here; pickle when there is a cache, traceback on an
    # exception; JSON is written by _j (json imports re, ~10 ms).
    import binascii
    import io

    root, budget, code_b64 = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    code = binascii.a2b_base64(code_b64).decode("utf-8", "surrogateescape")
    sys.argv = ["<run_python>"]
    state = os.path.join(root, ".ntfs", "python")
    cache_dir = os.path.join(state, "cache")
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("MPLCONFIGDIR", os.path.join(state, "matplotlib"))
    # Debian's matplotlib reads /etc/matplotlibrc, which the jail's /etc
    # lacks; the same file is in /usr.
    if not os.path.exists("/etc/matplotlibrc") and os.path.exists("/usr/share/matplotlib/mpl-data/matplotlibrc"):
        os.environ.setdefault("MATPLOTLIBRC", "/usr/share/matplotlib/mpl-data/matplotlibrc")

    # -- results go to the original stdout; fd 1 and 2 go to memfds ------
    res_fd = os.dup(1)
    cap = {}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        m = os.memfd_create("ntfs-" + name, os.MFD_CLOEXEC)
        os.dup2(m, fd)  # the duplicate is inheritable: child processes write there too
        os.close(m)
        cap[name] = fd
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)

    out = {"exit_code": 0, "error": None, "namespace": {}, "omitted": [], "artifacts": [],
           "ui_problems": [], "cache_problems": []}

    # -- cache: one pickle per key, (key, value); big values load on use --
    loaded = {}  # file name -> entry [key, bytes as read or None, value as loaded or _UNSET, _Lazy or None]
    cache = _Cache()
    try:
        names = sorted(os.listdir(cache_dir))
    except FileNotFoundError:
        names = []
    # File names are SEQ-KEYNAME.pkl: SEQ (12 digits) orders the keys as
    # they were first saved, KEYNAME names the key (_file_name). Two forks
    # that add keys make different files, so their merge has no conflict.
    by_key = {}  # KEYNAME -> file name
    dups = []  # one key saved twice (a merge of two forks that both added it): the later wins
    seq = 0
    for n in names:
        head, _, kn = n.partition("-")
        if n.endswith(".pkl") and head.isdigit() and kn:
            if kn in by_key:
                dups.append(by_key[kn])
            by_key[kn] = n
            seq = max(seq, int(head))
    pickle = None
    for n in names:
        head, _, kn = n.partition("-")
        if not n.endswith(".pkl") or not head.isdigit() or by_key.get(kn) != n:
            continue
        p = os.path.join(cache_dir, n)
        try:
            if kn[0] in "sk" and os.stat(p).st_size >= _LAZY_BYTES:
                k = _key_of(kn)
                entry = loaded[n] = [k, None, _UNSET, None]
                entry[3] = _Lazy(p, entry)
                dict.__setitem__(cache, k, entry[3])
                continue
            with open(p, "rb") as f:
                raw = f.read()
            if pickle is None:
                pickle = _pickle()
            k, v = pickle.loads(raw)
        except Exception as e:
            k = _UNSET
            if kn[0] in "sk" and isinstance(e, (AttributeError, ImportError)):
                try:  # a value of a class the code defines: loaded when used, once the code has defined it
                    k = _key_of(kn)
                except Exception:
                    pass
            if k is _UNSET:  # a damaged entry is reported and left on disk
                out["cache_problems"].append({"key": n, "reason": "cannot load: %s: %s" % (type(e).__name__,
                                                                                          _safe_str(e))})
                continue
            entry = loaded[n] = [k, None, _UNSET, None]
            entry[3] = _Lazy(p, entry)
            dict.__setitem__(cache, k, entry[3])
            continue
        loaded[n] = [k, raw, v, None]
        dict.__setitem__(cache, k, v)

    ui = {}
    # The code's globals are the module __main__, so its functions and
    # classes pickle by reference (and load again once the code defines them).
    import types
    main = types.ModuleType("__main__")
    g = main.__dict__
    g.update({"__builtins__": __builtins__, "cache": cache, "ui": ui})
    sys.modules["__main__"] = main
    sys.path.insert(0, "")  # the working directory, as for python3 -c (after the driver's own imports)
    try:
        exec(compile(code, "<run_python>", "exec"), g)
    except SystemExit as e:
        c = e.code
        out["exit_code"] = c if isinstance(c, int) and 0 <= c < 256 else (0 if c is None else 1)
        if c is not None and not isinstance(c, int):
            print(c, file=sys.stderr)
    except BaseException as e:
        import linecache
        import traceback
        linecache.cache["<run_python>"] = (len(code), None, code.splitlines(True), "<run_python>")
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != "<run_python>":
            tb = tb.tb_next  # drop the driver's own frames
        text = _text("".join(traceback.format_exception(type(e), e, tb)))
        out["exit_code"] = 1
        out["error"] = {"type": type(e).__name__, "message": _safe_str(e), "traceback": text}
        sys.stderr.write(text)

    cache = g.get("cache", cache)
    ui = g.get("ui", ui)

    # -- save the cache: write only the keys whose pickle changed ---------
    for n in dups if isinstance(cache, dict) else ():
        out["cache_problems"].append({"key": n, "reason": "a second value of one key (both sides of a merge "
                                      "added it); the later file was kept, this one removed"})
        try:
            os.unlink(os.path.join(cache_dir, n))
        except OSError:
            pass
    if isinstance(cache, dict) and (cache or loaded):
        keep = set()
        for k, v in list(dict.items(cache)):
            try:
                kn = _file_name(k)
                n = by_key.get(kn)
                if n is None:
                    seq += 1
                    n = by_key[kn] = "%012d-%s" % (seq, kn)
                if type(v) is _Lazy:
                    if v.entry[0] is k or loaded.get(n) is v.entry:  # never used: unchanged
                        keep.add(n)
                        continue
                    v = v.load()
                e = loaded.get(n)
                if e is not None and e[2] is v and _immutable(v, 0):  # the very object loaded
                    keep.add(n)
                    continue
                if pickle is None:
                    pickle = _pickle()
                raw = pickle.dumps((k, v), protocol=4)
            except Exception as ex:
                out["cache_problems"].append({"key": _safe_repr(k),
                                              "reason": "not picklable: %s: %s" % (type(ex).__name__, _safe_str(ex))})
                # the key's last saved value, if any, is kept
                for ln, le in loaded.items():
                    if _same_key(le[0], k):
                        keep.add(ln)
                continue
            keep.add(n)
            if e is not None and len(raw) == (os.path.getsize(e[3].path) if e[1] is None else len(e[1])) and \
                    raw == (e[3].raw() if e[1] is None else e[1]):
                continue
            try:
                _write_atomic(cache_dir, n, raw)
            except OSError as ex:
                out["cache_problems"].append({"key": _safe_repr(k), "reason": "not saved: %s" % ex})
        for n in loaded:
            if n not in keep:
                try:
                    os.unlink(os.path.join(cache_dir, n))
                except OSError:
                    pass
    elif not isinstance(cache, dict):
        out["cache_problems"].append({"key": "", "reason": "'cache' was rebound to a %s; not saved"
                                      % type(cache).__name__})

    # -- ui: plain data stays, live objects become artifacts ---------------
    ui_out = {}
    if isinstance(ui, dict):
        for k, v in ui.items():
            if type(k) is not str or not _safe_text(k):
                out["ui_problems"].append({"name": _safe_repr(k), "reason": "ui names are strings"})
                continue
            if _plain(v, 0):
                ui_out[k] = v
                continue
            if not _valid_name(k):
                out["ui_problems"].append({"name": k, "reason": "the name of a value written to a file is 1..128 "
                                           "of letters, digits, '_', '-' and '.' (not first)"})
                continue
            try:
                art = _render(root, k, v)
            except Exception as e:
                out["ui_problems"].append({"name": k, "reason": "%s: %s" % (type(e).__name__, e)})
                continue
            if art is None:
                out["ui_problems"].append({"name": k, "reason": "cannot render a %s.%s: not plain data, "
                                           "and not a table, figure or image" % (type(v).__module__,
                                                                                 type(v).__qualname__)})
                continue
            path, kind = art
            ui_out[k] = path
            out["artifacts"].append({"name": k, "path": path, "kind": kind})
    else:
        out["ui_problems"].append({"name": "", "reason": "'ui' is a %s, not a dict" % type(ui).__name__})

    # -- the namespace: bindings that cross as JSON ------------------------
    ns = {"ui": ui_out}
    used = len(_j(ui_out))
    for k, v in g.items():
        if k in ("__builtins__", "cache", "ui") or k.startswith("__") or not _safe_text(k):
            continue
        if not _plain(v, 0):
            if not (callable(v) or type(v).__name__ == "module"):
                out["omitted"].append({"name": k, "type": type(v).__name__})
            continue
        s = len(_j(v))
        if used + s > budget:
            out["omitted"].append({"name": k, "type": type(v).__name__, "reason": "too large"})
            continue
        used += s
        ns[k] = v
    out["namespace"] = ns

    # -- captured output ---------------------------------------------------
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    for name, fd in cap.items():
        size = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, 0, os.SEEK_SET)
        data = _read_all(fd, min(size, budget))
        out[name] = data.decode("utf-8", "replace")
        out[name + "_truncated"] = size > budget
        out[name + "_bytes"] = size
    doc = _j(out).encode("utf-8", "replace")
    view = memoryview(doc)
    while view:
        view = view[os.write(res_fd, view):]
    return out["exit_code"]


_LAZY_BYTES = 64 * 1024  # a cache file at least this big is read when its value is first used
_UNSET = object()


def _pickle():
    """The C pickler alone: pickle.py also imports re and more (~10 ms)."""
    try:
        import _pickle as p
    except ImportError:
        import pickle as p
    return p


class _Lazy:
    """A cache value not read yet (its file is big): _Cache reads it on use."""

    __slots__ = ("path", "entry")

    def __init__(self, path, entry):
        self.path, self.entry = path, entry

    def load(self):
        if self.entry[2] is _UNSET:
            pickle = _pickle()
            with open(self.path, "rb") as f:
                try:  # unpickled from the page cache: one copy of the bytes, not two
                    import mmap
                    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                        self.entry[2] = pickle.loads(m)[1]
                except (OSError, ValueError):
                    raw = f.read()
                    self.entry[1], self.entry[2] = raw, pickle.loads(raw)[1]
        return self.entry[2]

    def raw(self):
        """The file's bytes as loaded (read again when it was mapped)."""
        if self.entry[1] is None:
            with open(self.path, "rb") as f:
                self.entry[1] = f.read()
        return self.entry[1]

    def __repr__(self):
        return "<cache value not loaded>"


class _Cache(dict):
    """The `cache` dict: a dict whose big values are read from the
    workspace when first used (by key, get, items, values, copies, repr,
    comparisons); everything else is dict's own."""

    __slots__ = ()
    __hash__ = None

    def _all(self):
        for k, v in list(dict.items(self)):
            if type(v) is _Lazy:
                dict.__setitem__(self, k, v.load())

    def __getitem__(self, k):
        v = dict.__getitem__(self, k)
        if type(v) is _Lazy:
            v = v.load()
            dict.__setitem__(self, k, v)
        return v

    def __iter__(self):  # also makes dict(cache) and {**cache} go through __getitem__
        return dict.__iter__(self)

    def get(self, k, default=None):
        return self[k] if dict.__contains__(self, k) else default

    def pop(self, k, *default):
        if dict.__contains__(self, k):
            v = self[k]
            dict.__delitem__(self, k)
            return v
        return dict.pop(self, k, *default)

    def popitem(self):
        k, v = dict.popitem(self)
        return k, (v.load() if type(v) is _Lazy else v)

    def setdefault(self, k, default=None):
        if dict.__contains__(self, k):
            return self[k]
        dict.__setitem__(self, k, default)
        return default

    def items(self):
        self._all()
        return dict.items(self)

    def values(self):
        self._all()
        return dict.values(self)

    def copy(self):
        self._all()
        return dict(dict.items(self))

    def __repr__(self):
        self._all()
        return dict.__repr__(self)

    def __eq__(self, other):
        self._all()
        return dict.__eq__(self, other)

    def __ne__(self, other):
        self._all()
        return dict.__ne__(self, other)

    def __or__(self, other):
        self._all()
        return dict.__or__(self, other)

    def __ror__(self, other):
        self._all()
        return dict.__ror__(self, other)

    def __reduce_ex__(self, protocol):  # pickling or copying the cache gives a plain dict
        return (dict, (self.copy(),))


def _immutable(v, depth):
    if type(v) in (bytes, str, int, float, complex, bool, type(None)):
        return True
    if type(v) in (tuple, frozenset) and depth < 8:
        return all(_immutable(x, depth + 1) for x in v)
    return False


_ESC = {i: "\\u%04x" % i for i in range(32)}
_ESC.update({ord('"'): '\\"', ord("\\"): "\\\\", 0x7f: "\\u007f"})


def _j(v):
    """JSON text of plain data (what _plain accepts; str already valid UTF-8)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is int:
        return str(v)
    if type(v) is float:
        return repr(v)
    if type(v) is str:
        return '"' + v.translate(_ESC) + '"'
    if type(v) in (list, tuple):
        return "[" + ",".join(_j(x) for x in v) + "]"
    if type(v) is dict:
        return "{" + ",".join(_j(str(k)) + ":" + _j(x) for k, x in v.items()) + "}"
    return _j(_text(repr(v)))


def _text(s):
    """s with anything that is not UTF-8 (lone surrogates) replaced."""
    return s.encode("utf-8", "replace").decode("utf-8")


def _file_name(k):
    """KEYNAME of a key: "s" and the hex of a short string's UTF-8 (no
    pickler needed to name or read it back), else "k" and the hex of the
    key's pickle, or "h" and its SHA-256 when that is long."""
    import binascii  # built in
    if type(k) is str and _safe_text(k) and len(k.encode()) <= 100:  # the file name stays <= 218 bytes
        return "s" + binascii.hexlify(k.encode()).decode() + ".pkl"
    kb = _pickle().dumps(k, protocol=4)
    if len(kb) > 80:
        import hashlib
        return "h" + hashlib.sha256(kb).hexdigest() + ".pkl"
    return "k" + binascii.hexlify(kb).decode() + ".pkl"


def _key_of(kn):
    """The key a KEYNAME ("s" or "k") names."""
    import binascii
    b = binascii.unhexlify(kn[1:-4])
    return b.decode() if kn[0] == "s" else _pickle().loads(b)


def _read_all(fd, n):
    parts = []
    while n > 0:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _write_atomic(d, name, data):
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, ".tmp-" + name)
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(d, name))


def _same_key(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _safe_text(s):
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _safe_str(e):
    try:
        s = str(e)
    except Exception:
        return "<unprintable>"
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _safe_repr(v):
    try:
        s = repr(v)
    except Exception:
        s = "<unrepresentable %s>" % type(v).__name__
    return s[:200].encode("utf-8", "backslashreplace").decode("utf-8")


def _plain(v, depth):
    """True when v crosses as JSON unchanged (what jansson accepts too)."""
    if depth > 32:
        return False
    if v is None or type(v) is bool:
        return True
    if type(v) is int:
        return -(1 << 63) <= v < (1 << 63)
    if type(v) is float:
        import math
        return math.isfinite(v)
    if type(v) is str:
        return _safe_text(v)
    if type(v) in (list, tuple):
        return all(_plain(x, depth + 1) for x in v)
    if type(v) is dict:
        return all(type(k) is str and _safe_text(k) and _plain(x, depth + 1) for k, x in v.items())
    return False


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")


def _valid_name(k):
    return 0 < len(k) <= 128 and k[0] != "." and all(c in _NAME_CHARS for c in k)


def _render(root, name, v):
    """Writes v to ROOT/ui/NAME.KIND.EXT; (path, kind), or None when v is
    of no kind we render. Kinds: table (.table.json), image (.image.png,
    .image.svg), plotly (.plotly.json)."""
    mod = type(v).__module__ or ""
    cls = type(v).__name__
    data = None
    if mod.startswith("pandas") and cls in ("DataFrame", "Series"):
        df = v.to_frame() if cls == "Series" else v
        data = df.to_json(orient="table", date_format="iso").encode()
        kind, ext = "table", "json"
    elif mod.startswith("matplotlib") and hasattr(v, "savefig"):
        import io
        b = io.BytesIO()
        v.savefig(b, format="png")
        data, kind, ext = b.getvalue(), "image", "png"
    elif mod.startswith("PIL") and hasattr(v, "save") and hasattr(v, "mode"):
        import io
        b = io.BytesIO()
        v.save(b, format="PNG")
        data, kind, ext = b.getvalue(), "image", "png"
    elif mod.startswith("plotly") and hasattr(v, "to_json"):
        data, kind, ext = v.to_json().encode(), "plotly", "json"
    elif hasattr(v, "_repr_png_") and not isinstance(v, type):
        data = v._repr_png_()
        kind, ext = "image", "png"
    elif hasattr(v, "_repr_svg_") and not isinstance(v, type):
        s = v._repr_svg_()
        data = s.encode() if isinstance(s, str) else s
        kind, ext = "image", "svg"
    if data is None:
        return None
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError("rendering gave a %s, not bytes" % type(data).__name__)
    d = os.path.join(root, "ui")
    fname = "%s.%s.%s" % (name, kind, ext)
    _write_atomic(d, fname, bytes(data))
    return os.path.join(d, fname), kind


_err_fd = os.dup(2)
try:
    _code = _main()
except BaseException:  # a fault of the driver itself: told on the jail's own stderr
    import traceback
    os.write(_err_fd, ("run_python driver: " + traceback.format_exc()).encode("utf-8", "replace"))
    _code = 125
sys.exit(_code)
