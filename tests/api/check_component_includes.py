#!/usr/bin/env python3
"""Checks the boundaries between components (docs/architecture.md, "Components").

A source under src/<component>/ may include its own files, the shared
components (src/common/; src/http/, the one HTTP stack, which the components
that speak HTTP link) and the public headers (dtrain/...), never a file under
src/<other component>/: where a component needs another's internals, the seam
gets a public header. And no
source switches a part of a header on with a #define before including it (the
way dtrain/compat.h once did): private parts live in private headers.

  check_component_includes.py SRC_DIR
Prints each offending line and exits 1, or prints a summary and exits 0.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')
SWITCH = re.compile(r'^\s*#\s*define\s+DTRAIN_\w+\s*(//.*)?$')  # a bare flag
SHARED = ("common", "http")  # infrastructure other components may include


def main(src_dir):
    components = {d for d in os.listdir(src_dir) if os.path.isdir(os.path.join(src_dir, d))}
    bad, files = [], 0
    for component in sorted(components):
        for root, _, names in os.walk(os.path.join(src_dir, component)):
            for name in sorted(names):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(root, name)
                rel = "src/" + os.path.relpath(path, src_dir)
                files += 1
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if (m and m.group(1) in components
                                and m.group(1) != component and m.group(1) not in SHARED):
                            bad.append(f"{rel}:{number}: includes {m.group(1)}/{m.group(2)}, "
                                       f"a private header of component {m.group(1)}")
                        if name.endswith(".cpp") and SWITCH.match(line):
                            bad.append(f"{rel}:{number}: defines a DTRAIN_ switch for a header: "
                                       "give the private part a private header instead")
    for line in bad:
        print(line)
    if bad:
        return 1
    print(f"{files} files under {src_dir}: no include of another component's private header")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
