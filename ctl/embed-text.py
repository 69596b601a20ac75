# SPDX-License-Identifier: MIT
"""embed-text.py NAME IN OUT: writes OUT, a C header defining
`static const char NAME[]` with IN's bytes (build step of ctl/meson.build,
for the run_python driver)."""
import sys

name, src, dst = sys.argv[1:4]
data = open(src, "rb").read()
if b"\0" in data:
    sys.exit(f"{src}: holds a NUL byte")
with open(dst, "w") as f:
    f.write(f"/* generated from {src.rsplit('/', 1)[-1]} by ctl/embed-text.py; do not edit */\n")
    f.write(f"static const char {name}[] =\n")
    for line in data.splitlines(True):
        esc = "".join(c if 32 <= ord(c) < 127 and c not in '"\\?' else "\\%03o" % ord(c)
                      for c in line.decode("latin-1"))
        f.write(f'        "{esc}"\n')
    f.write("        ;\n")
