#!/usr/bin/env python3
"""Checks that includes run one way: tools -> engine -> models -> ops (docs/ARCHITECTURE.md).

    /usr/bin/python3 tools/check_layering.py [ROOT]      # ROOT: the project root (default: this script's ../)
    /usr/bin/python3 tools/check_layering.py --self-test  # shows the check fails on an upward include

Scans every source file (.h .hpp .c .cpp) under ops/, models/, engine/, tools/ and perf/ (the git-tracked ones plus
untracked ones not ignored, or every file when ROOT is not a git checkout) for `#include "..."` and
`#include <sqrtdk/...>`, and prints one line per include that points upward:

    models/runtime/executor.h:7: #include <sqrtdk/session.h> (engine): models may use only ops and models ...

then exits 1; exits 0 when there is none. The rules, lowest layer first:
  ops/base    ISA, threads, buffers, vec_exp, roofs: may use only ops/base (the lowest layer)
  ops         kernels: may use ops (other ops too)
  models      families and the block executor: may use ops and models
  engine      public API, format, import, runtime, C API, profiler: may use ops, models and engine
  tools       CLI, server, explainers: may use anything but tests/
  perf        benchmarks: may use ops, models and engine (and the serve harness, see PERF_TOOLS_ALLOWED)
  tests/      may use anything (not scanned)
A quoted include names a path from the project root ("ops/gemm/gemm.h"), or one relative to the including file;
a quoted include that is neither (a third-party header) is not checked. <sqrtdk/X> belongs to the layer whose
public include folder holds X: ops/base/include (isa.h, error.h), models/include (config.h), engine/include
(model.h, session.h, format.h, ...); version.h is generated from engine/include/sqrtdk/version.h.in.
Standard library only: CI runs it with /usr/bin/python3.
"""
import os
import re
import subprocess
import sys
import tempfile

SOURCE_SUFFIXES = (".h", ".hpp", ".c", ".cpp")
SCANNED_TOP = ("ops", "models", "engine", "tools", "perf")

# Rank of each layer: a file may include a layer of lower or equal rank. perf and tools sit beside each other
# above engine; tests above everything. ops/base is its own layer under the other op folders.
RANK = {"base": 0, "ops": 1, "models": 2, "engine": 3, "perf": 4, "tools": 4, "tests": 5}
MAY_USE = {
    "base": "ops/base only (it is the lowest layer)",
    "ops": "ops only (ops/base and other ops)",
    "models": "ops and models only (of the public headers, those in ops/base/include and models/include)",
    "engine": "ops, models and engine only",
    "perf": "ops, models and engine only",
    "tools": "ops, models, engine and tools only",
}
PUBLIC_INCLUDE_DIRS = (("base", "ops/base/include"), ("models", "models/include"), ("engine", "engine/include"))
GENERATED_PUBLIC = {"sqrtdk/version.h": "engine"}  # configured from engine/include/sqrtdk/version.h.in
# perf -> tools exceptions, each with its reason: bench-serve load-tests sqrtdk-serve with the same child-process
# harness as tests/serve, so the two cannot drift apart.
PERF_TOOLS_ALLOWED = {"tools/serve/child_server.h"}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(path):
    """The layer of a project-relative path, or None outside the layered folders."""
    parts = path.split("/")
    if parts[0] == "ops":
        return "base" if len(parts) > 1 and parts[1] == "base" else "ops"
    return parts[0] if parts[0] in RANK else None


def source_files(root):
    """Project-relative paths of the files to scan, sorted."""
    names = None
    if os.path.isdir(os.path.join(root, ".git")) or os.path.isfile(os.path.join(root, ".git")):
        try:
            out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "-z",
                                  "--", *SCANNED_TOP], check=True, capture_output=True).stdout
            names = [n for n in out.decode().split("\0") if n and os.path.isfile(os.path.join(root, n))]
        except (OSError, subprocess.CalledProcessError):
            names = None  # no git: walk the folders instead
    if names is None:
        names = []
        for top in SCANNED_TOP:
            for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                names += [os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/") for f in filenames]
    return sorted(n for n in names if n.endswith(SOURCE_SUFFIXES))


def public_header_layer(root, name):
    """The layer whose public include folder holds `name` ("sqrtdk/model.h"), or None if none does."""
    for layer, folder in PUBLIC_INCLUDE_DIRS:
        if os.path.isfile(os.path.join(root, folder, name)):
            return layer
    return GENERATED_PUBLIC.get(name)


def resolve(root, src, delim, name):
    """(target layer, how the include was read) for one include, or None when it is not ours to check."""
    if name.startswith("sqrtdk/"):  # <sqrtdk/X> or "sqrtdk/X": a public header
        layer = public_header_layer(root, name)
        return (layer, "public header") if layer else ("?", "no such public header")
    if delim != '"':
        return None
    here = os.path.dirname(src)
    relative = os.path.normpath(os.path.join(here, name)).replace(os.sep, "/")
    if here and os.path.isfile(os.path.join(root, relative)) and not relative.startswith("../"):
        target = relative
    else:
        target = os.path.normpath(name).replace(os.sep, "/")
    layer = layer_of(target)
    return (layer, target) if layer else None


def check(root):
    """Returns (number of files scanned, list of violation lines)."""
    files = source_files(root)
    violations = []
    for src in files:
        src_layer = layer_of(src)
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        for number, line in enumerate(lines, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            delim, name = m.groups()
            shown = f"#include {delim}{name}{'>' if delim == '<' else delim}"
            got = resolve(root, src, delim, name)
            if got is None:
                continue
            dst_layer, what = got
            if dst_layer == "?":
                violations.append(f"{src}:{number}: {shown}: no such public header under "
                                  + ", ".join(d for _, d in PUBLIC_INCLUDE_DIRS))
                continue
            upward = RANK[dst_layer] > RANK[src_layer] or (dst_layer != src_layer and RANK[dst_layer] == RANK[src_layer])
            if src_layer == "perf" and dst_layer == "tools" and what in PERF_TOOLS_ALLOWED:
                upward = False
            if upward:
                where = "ops/base" if dst_layer == "base" else dst_layer
                violations.append(f"{src}:{number}: {shown} ({where}): {src_layer_name(src_layer)} may use "
                                  f"{MAY_USE[src_layer]}")
    return len(files), violations


def src_layer_name(layer):
    return "ops/base" if layer == "base" else layer


def main_check(root):
    n_files, violations = check(root)
    for v in violations:
        print(v)
    if violations:
        print(f"check_layering: {len(violations)} upward include(s) in {n_files} files under {root} "
              "(layers: tools -> engine -> models -> ops -> ops/base; see docs/ARCHITECTURE.md)", file=sys.stderr)
        return 1
    print(f"check_layering: {n_files} files, no upward include")
    return 0


# ---- --self-test: a tiny tree, clean then with one deliberate upward include per rule ----

CLEAN_TREE = {
    "ops/base/include/sqrtdk/isa.h": "",
    "ops/base/include/sqrtdk/error.h": "",
    "ops/base/threading.h": "#include <sqrtdk/error.h>\n#include <vector>\n",
    "ops/gemm/gemm.h": "#include <sqrtdk/isa.h>\n",
    "ops/gemm/gemm.cpp": '#include "ops/gemm/gemm.h"\n#include "ops/base/threading.h"\n#include <xsimd/xsimd.hpp>\n',
    "ops/attention/attention.cpp": '#include "ops/gemm/gemm.h"\n#include "attention.h"\n',
    "ops/attention/attention.h": "",
    "models/include/sqrtdk/config.h": "#include <sqrtdk/error.h>\n",
    "models/runtime/executor.h": '#include <sqrtdk/config.h>\n#include "ops/gemm/gemm.h"\n',
    "models/llama/llama.cpp": '#include "models/runtime/executor.h"\n#include "../family.h"\n',
    "models/family.h": "",
    "engine/include/sqrtdk/version.h.in": "",
    "engine/include/sqrtdk/session.h": "#include <sqrtdk/config.h>\n",
    "engine/include/sqrtdk/sqrtdk.h": '#include "sqrtdk/version.h"\n',
    "engine/src/runtime/session.cpp": '#include <sqrtdk/session.h>\n#include "models/runtime/executor.h"\n',
    "tools/cli/cmd_run.cpp": '#include <sqrtdk/session.h>\n#include "ops/gemm/gemm.h"\n#include <CLI/CLI.hpp>\n',
    "tools/serve/child_server.h": "",
    "perf/bench_gemm.cpp": '#include "ops/gemm/gemm.h"\n#include "tools/serve/child_server.h"\n',
    "tests/ops/test_gemm.cpp": '#include "tools/cli/cmd_run.cpp"\n',  # tests may use anything
}
# (file, content, the text its violation line must hold), one per rule.
UPWARD_INCLUDES = [
    ("ops/gemm/gemm_avx2.cpp", '#include "ops/gemm/gemm.h"\n#include "models/runtime/executor.h"\n',
     "ops/gemm/gemm_avx2.cpp:2: #include \"models/runtime/executor.h\" (models): ops may use"),
    ("ops/norm/norm.cpp", "#include <sqrtdk/session.h>\n", "ops/norm/norm.cpp:1: #include <sqrtdk/session.h> (engine)"),
    ("ops/norm/norm.h", "#include <sqrtdk/config.h>\n", "ops/norm/norm.h:1: #include <sqrtdk/config.h> (models)"),
    ("ops/base/aligned_buffer.h", '#include "ops/gemm/gemm.h"\n',
     "ops/base/aligned_buffer.h:1: #include \"ops/gemm/gemm.h\" (ops): ops/base may use"),
    ("models/gpt2/gpt2.cpp", '#include "engine/src/runtime/model_impl.h"\n',
     "models/gpt2/gpt2.cpp:1: #include \"engine/src/runtime/model_impl.h\" (engine): models may use"),
    ("models/gpt2/gpt2.h", "  #  include <sqrtdk/session.h>\n", "models/gpt2/gpt2.h:1: #include <sqrtdk/session.h>"),
    ("models/tensor_names.h", '#include "sqrtdk/version.h"\n', "models/tensor_names.h:1: #include \"sqrtdk/version.h\""),
    ("engine/src/format/format.cpp", '#include "tools/cli/cmd_run.cpp"\n',
     "engine/src/format/format.cpp:1: #include \"tools/cli/cmd_run.cpp\" (tools): engine may use"),
    ("engine/src/capi/c_api.c", '#include "tests/common/npy.h"\n', "engine/src/capi/c_api.c:1: #include \"tests/common/npy.h\" (tests)"),
    ("perf/bench_norm.cpp", '#include "tools/cli/cli_util.h"\n', "perf/bench_norm.cpp:1: #include \"tools/cli/cli_util.h\" (tools)"),
    ("tools/cli/main.cpp", '#include "tests/common/temp_dir.h"\n', "tools/cli/main.cpp:1: #include \"tests/common/temp_dir.h\" (tests)"),
    ("ops/rope/rope.cpp", "#include <sqrtdk/nonexistent.h>\n", "ops/rope/rope.cpp:1: #include <sqrtdk/nonexistent.h>: no such"),
]


def write_tree(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def run_script(root):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def self_test():
    failures = []
    with tempfile.TemporaryDirectory(prefix="sqrtdk-layering-") as tmp:
        clean = os.path.join(tmp, "clean")
        write_tree(clean, CLEAN_TREE)
        rc, out = run_script(clean)
        if rc != 0:
            failures.append(f"the clean tree failed (exit {rc}):\n{out}")
        for i, (name, text, expected) in enumerate(UPWARD_INCLUDES):
            bad = os.path.join(tmp, f"bad{i}")
            write_tree(bad, {**CLEAN_TREE, name: text})
            rc, out = run_script(bad)
            n_lines = sum(1 for line in out.splitlines() if not line.startswith("check_layering:"))
            if rc != 1 or expected not in out or n_lines != 1:
                failures.append(f"{name}: expected exit 1 and one line holding {expected!r}; got exit {rc}:\n{out}")
            else:
                print(f"ok: {out.splitlines()[0]}")
    for f in failures:
        print(f"check_layering --self-test: FAILED: {f}", file=sys.stderr)
    if failures:
        return 1
    print(f"check_layering --self-test: the clean tree passes; each of {len(UPWARD_INCLUDES)} upward includes fails")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), ".."))
    return main_check(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
