#!/usr/bin/python3
"""Checks that tools/setup.sh installs every Debian package the configure step used.

After a configure, reads the build folder's CMakeCache.txt and takes every file CMake found for its find_package /
pkg_check_modules calls (PATH and FILEPATH entries such as dnnl_DIR, OpenCL_LIBRARY, OpenCL_INCLUDE_DIR,
pkgcfg_lib_*; the .pc file of each pkg_check_modules module; the compilers, the generator and cmake itself), asks
`dpkg -S` which package owns each, and fails unless that package is in setup.sh's package list or a hard
dependency (Depends / Pre-Depends, recursively; not Recommends or Suggests) of one listed there.

Why: libdnnl-dev only *recommends* ocl-icd-opencl-dev, setup.sh installs with --no-install-recommends, and the
developer machine happened to have it: CI was green while a fresh machine failed to configure. This check fails on
any machine where that can happen, whether or not the package is installed there.

Usage: check_setup_packages.py BUILD_DIR [--setup FILE]   (FILE: a setup.sh to read the list from; default the
repository's tools/setup.sh). Prints every entry it checked. Exit 0 ok, 1 a package is missing from the list
(or another error: no CMakeCache.txt, no dpkg). Standard library only.
       check_setup_packages.py BUILD_DIR --self-test   checks that the check fails, naming the package, on a copy of
setup.sh without ocl-icd-opencl-dev (the package whose absence broke a fresh machine).
"""
import argparse
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def setup_packages(setup_sh):
    """The words of the packages=( ... ) array in setup.sh (comments stripped)."""
    text = open(setup_sh, encoding="utf-8").read()
    m = re.search(r"^packages=\((.*?)^\)", text, re.S | re.M)
    if not m:
        sys.exit(f"check_setup_packages: {setup_sh}: no 'packages=( ... )' list found")
    words = []
    for line in m.group(1).splitlines():
        words += line.split("#", 1)[0].split()
    return words


def cache_entries(build_dir):
    """(name, path) for every entry of CMakeCache.txt that names a file or folder under /usr found by a search."""
    path = os.path.join(build_dir, "CMakeCache.txt")
    if not os.path.isfile(path):
        sys.exit(f"check_setup_packages: {path} not found: configure first")
    entries, modules = [], []
    keep_cmake = {"CMAKE_CXX_COMPILER", "CMAKE_C_COMPILER", "CMAKE_MAKE_PROGRAM", "CMAKE_COMMAND"}
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"^([A-Za-z0-9_.+-]+):([A-Z]+)=(.*)$", line.rstrip("\n"))
        if not m:
            continue
        name, kind, value = m.groups()
        if name.endswith("_MODULE_NAME") and kind == "INTERNAL" and value:
            modules.append((name[: -len("_MODULE_NAME")], value))
            continue
        searched = kind in ("PATH", "FILEPATH") or re.search(r"_(INCLUDE_DIRS?|LIBRARIES|LIBRARY|DIR)$", name)
        if name.startswith("CMAKE_") and name not in keep_cmake:
            continue
        if not searched and name not in keep_cmake:
            continue
        for v in value.split(";"):
            if v.startswith("/usr/") and os.path.exists(v):
                entries.append((name, v))
    for prefix, module in modules:  # pkg_check_modules: the .pc file that answered
        try:
            pcdir = subprocess.run(["pkg-config", "--variable=pcfiledir", module], capture_output=True, text=True,
                                   check=True).stdout.strip()
            entries.append((f"{prefix} (pkg-config {module})", os.path.join(pcdir, module + ".pc")))
        except (OSError, subprocess.CalledProcessError):
            entries.append((f"{prefix} (pkg-config {module})", f"<pkg-config cannot find {module}>"))
    return entries


def candidate_paths(path):
    """The path, its real path, and their /usr-merged twins (dpkg may know a file under either name)."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.append(p[len("/usr"):])
        elif p.startswith(("/lib", "/bin", "/sbin")):
            candidates.append("/usr" + p)
    return list(dict.fromkeys(candidates))


def dpkg_owner_table(paths):
    """path -> owning packages, from one `dpkg -S` call over every candidate path (unowned paths are absent)."""
    if not paths:
        return {}
    r = subprocess.run(["dpkg", "-S"] + sorted(set(paths)), capture_output=True, text=True)
    table = {}
    for line in r.stdout.splitlines():
        if line.startswith("diversion by"):
            continue
        pkgs, _, owned = line.rpartition(": ")
        table.setdefault(owned, []).extend(x.strip().split(":")[0] for x in pkgs.split(","))
    return table


def dpkg_owners(path, table):
    """Packages that own `path` under any of its candidate names, or []."""
    for p in candidate_paths(path):
        if table.get(p):
            return table[p]
    return []


# The header a Find module looked for, for include folders shared by many packages (/usr/include): checking the
# folder itself proves nothing, the header does. Add a line when a new Find module's include folder shows "skip".
HEADER_FOUND_BY = {
    "OpenCL_INCLUDE_DIR": "CL/cl.h",  # FindOpenCL (called by dnnl-config.cmake)
}


def what_to_check(path, name=""):
    """A folder found by find_package (X_DIR) is checked through its config file; an include folder through the header
    its Find module looked for (HEADER_FOUND_BY); other folders as they are."""
    header = HEADER_FOUND_BY.get(name)
    if header and os.path.isfile(os.path.join(path, header)):
        return os.path.join(path, header)
    if os.path.isdir(path):
        configs = sorted(glob.glob(os.path.join(path, "*onfig.cmake")) + glob.glob(os.path.join(path, "*-config.cmake")))
        if configs:
            return configs[0]
    return path


def installed_packages():
    """name -> (hard dependency groups, provides) for every installed package (one dpkg-query call)."""
    fmt = "${Package}\t${db:Status-Abbrev}\t${Depends}\t${Pre-Depends}\t${Provides}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True, check=True).stdout
    pkgs, providers = {}, {}
    for line in out.splitlines():
        name, status, depends, predepends, provides = (line.split("\t") + [""] * 5)[:5]
        if not status.startswith("ii"):
            continue
        groups = []
        for field in (depends, predepends):
            for group in filter(None, (g.strip() for g in field.split(","))):
                groups.append([re.split(r"[\s(:]", alt.strip(), maxsplit=1)[0] for alt in group.split("|")])
        pkgs[name] = groups
        for p in filter(None, (x.strip() for x in provides.split(","))):
            providers.setdefault(re.split(r"[\s(:]", p, maxsplit=1)[0], []).append(name)
    return pkgs, providers


def hard_closure(listed, pkgs, providers):
    """package -> the listed package that brings it in through Depends/Pre-Depends (itself if listed)."""
    via = {}
    stack = [(p, p) for p in listed]
    while stack:
        pkg, root = stack.pop()
        if pkg in via:
            continue
        via[pkg] = root
        for group in pkgs.get(pkg, []):
            # The first alternative that is installed (or provided by an installed package) is the one that counts.
            for alt in group:
                if alt in pkgs:
                    stack.append((alt, root))
                    break
                installed = [p for p in providers.get(alt, []) if p in pkgs]
                if installed:
                    stack.extend((p, root) for p in installed)
                    break
    return via


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("--setup", default=os.path.join(HERE, "setup.sh"), help="the setup.sh to read the list from")
    ap.add_argument("--self-test", action="store_true", help="expect failure without ocl-icd-opencl-dev")
    args = ap.parse_args()
    if args.self_test:
        return self_test(args.build_dir, args.setup)
    try:
        subprocess.run(["dpkg-query", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        sys.exit("check_setup_packages: dpkg-query not found: this check needs a Debian system")

    listed = setup_packages(args.setup)
    pkgs, providers = installed_packages()
    via = hard_closure(listed, pkgs, providers)
    entries = cache_entries(args.build_dir)
    print(f"check_setup_packages: {len(entries)} entries of {os.path.join(args.build_dir, 'CMakeCache.txt')} against "
          f"the {len(listed)} packages of {args.setup} and their {len(via) - len(listed)} hard dependencies")
    targets = [what_to_check(path, name) for name, path in entries]
    table = dpkg_owner_table([c for t in targets if os.path.exists(t) for c in candidate_paths(t)])
    problems = []
    for (name, path), target in zip(entries, targets):
        owners = dpkg_owners(target, table) if os.path.exists(target) else []
        shown = f"{name} = {target}"
        if not owners:
            problems.append(f"{shown}: not owned by any Debian package (built or copied by hand?): a fresh machine "
                            f"set up by {args.setup} would not have it")
            print(f"  MISSING  {shown}: no package owns it")
            continue
        if os.path.isdir(target) and len(owners) > 1:
            print(f"  skip     {shown}: a folder shared by {len(owners)} packages (the files in it are checked "
                  f"through other entries)")
            continue
        ok = [o for o in owners if o in via]
        if ok:
            o = ok[0]
            how = "listed" if via[o] == o else f"hard dependency of {via[o]}"
            print(f"  ok       {shown}  <- {o} ({how})")
        else:
            print(f"  MISSING  {shown}  <- {', '.join(owners)}: not listed, not a hard dependency of a listed package")
            problems.append(f"{shown} comes from {' or '.join(owners)}, which {args.setup} neither lists nor gets as a "
                            f"hard dependency (Depends/Pre-Depends) of a listed package (a Recommends does not count: "
                            f"setup.sh installs with --no-install-recommends): a fresh machine would fail to "
                            f"configure. Add {owners[0]} to the packages list in {args.setup}")
    if problems:
        for p in problems:
            print(f"check_setup_packages: error: {p}", file=sys.stderr)
        return 1
    print(f"check_setup_packages: ok: every package the configure step used is installed by {args.setup}")
    return 0


def self_test(build_dir, setup_sh):
    import tempfile
    package = "ocl-icd-opencl-dev"
    text = open(setup_sh, encoding="utf-8").read()
    if package not in setup_packages(setup_sh):
        print(f"check_setup_packages: self-test: {setup_sh} does not list {package}", file=sys.stderr)
        return 1
    if not any(name == "OpenCL_LIBRARY" for name, _ in cache_entries(build_dir)):
        print(f"check_setup_packages: self-test skipped: this configure did not use OpenCL (no OpenCL_LIBRARY)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "setup.sh")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(re.sub(r"^(\s*)" + re.escape(package) + r"\b", r"\1", text, flags=re.M))
        r = subprocess.run([sys.executable, os.path.abspath(__file__), build_dir, "--setup", copy],
                           capture_output=True, text=True)
    expected = f"comes from {package}"
    if r.returncode == 1 and expected in r.stderr:
        line = next(x for x in r.stderr.splitlines() if expected in x)
        print(f"check_setup_packages: self-test ok: without {package} in the list the check fails:\n  {line}")
        return 0
    print(f"check_setup_packages: self-test FAILED: without {package} the check exited {r.returncode}:\n"
          f"{r.stdout}{r.stderr}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
