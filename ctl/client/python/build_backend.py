# SPDX-License-Identifier: MIT
"""A PEP 517 backend with the standard library only: builds the wheel
(and sdist) of the `ntfs` package, so that `pip install ctl/client/python`
works offline. Metadata is the [project] table of pyproject.toml."""
import base64
import hashlib
import io
import os
import tarfile
import zipfile

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = "ntfs"


def _project():
    if tomllib is not None:
        with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
            return tomllib.load(f)["project"]
    p, section = {}, None  # the few keys we use, read by hand on 3.10
    for line in open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8"):
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[project]" and "=" in line and line.split("=", 1)[1].strip().startswith('"'):
            k, v = line.split("=", 1)
            p[k.strip()] = v.strip().strip('"')
    return p


def _metadata():
    p = _project()
    readme = open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    return (f"Metadata-Version: 2.1\nName: {p['name']}\nVersion: {p['version']}\n"
            f"Summary: {p['description']}\nRequires-Python: {p['requires-python']}\nLicense: MIT\n"
            f"Description-Content-Type: text/markdown\n\n{readme}"), p


def _files():
    root = os.path.join(HERE, PKG)
    for n in sorted(os.listdir(root)):
        if n.endswith(".py") or n == "py.typed":
            yield f"{PKG}/{n}", os.path.join(root, n)


def _record_line(name, data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={h},{len(data)}\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _wheel(wheel_directory, editable):
    meta, p = _metadata()
    dist = f"{p['name']}-{p['version']}"
    name = f"{dist}-py3-none-any.whl"
    record = ""
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        def put(arc, data):
            nonlocal record
            z.writestr(arc, data)
            record += _record_line(arc, data)
        if editable:
            put(f"{PKG}-editable.pth", (HERE + "\n").encode())
        else:
            for arc, path in _files():
                put(arc, open(path, "rb").read())
        put(f"{dist}.dist-info/METADATA", meta.encode())
        put(f"{dist}.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: ntfs build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        record += f"{dist}.dist-info/RECORD,,\n"
        z.writestr(f"{dist}.dist-info/RECORD", record)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, True)


def build_sdist(sdist_directory, config_settings=None):
    meta, p = _metadata()
    dist = f"{p['name']}-{p['version']}"
    name = f"{dist}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for arc in ("pyproject.toml", "build_backend.py", "README.md"):
            t.add(os.path.join(HERE, arc), f"{dist}/{arc}")
        for arc, path in _files():
            t.add(path, f"{dist}/{arc}")
        info = tarfile.TarInfo(f"{dist}/PKG-INFO")
        data = meta.encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
