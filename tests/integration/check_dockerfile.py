#!/usr/bin/env python3
"""check_dockerfile.py - the Dockerfile's runtime stage against the binary,
without docker (tests/dockerfile.sh runs it).

    check_dockerfile.py DOCKERFILE BINARY [MANIFEST...]

On this Debian 12 machine, every shared library the binary loads is mapped
to the Debian package that ships it (dpkg -S), and the runtime stage (the
last FROM, which `docker build` builds by default) must
  - install, by name, the package of every library the binary links itself
    (readelf -d NEEDED), except those of the base image (priority required);
  - reach, through those packages' Depends, the package of every library
    those libraries load in turn (ldd of each);
  - install nothing else (each package it names provides a NEEDED library);
  - run as a user that is not root, by a numeric uid the stage creates, and
    the same uid the manifests' runAsUser names.
Sanitizer runtimes (an ASan build's libasan, libubsan) are not part of the
image's Release build and are left out. Prints each problem and exits 1 when
there is one, 0 otherwise.
"""
import os
import re
import subprocess
import sys

SANITIZERS = re.compile(r"^lib(asan|ubsan|lsan|tsan)\.so")
# The CUDA toolkit's runtime, which a host build links where nvcc is found;
# an image whose build stage sets TESSERA_CUDA=OFF has none of it.
CUDA_LIBS = re.compile(r"^lib(cudart|cublas|cublasLt)\.so")


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def needed(path):
    out = run("readelf", "-d", path).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def ldd(path):
    """name -> resolved path of everything path loads."""
    libs = {}
    for line in run("ldd", path).stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m:
            libs[m.group(1)] = m.group(2)
    return libs


def candidates(path):
    """The names dpkg may know path by: merged /usr makes /lib and /usr/lib one."""
    cands = [path, os.path.realpath(path)]
    for c in list(cands):
        if c.startswith("/usr/lib/"):
            cands.append(c[4:])
        elif c.startswith("/lib/"):
            cands.append("/usr" + c)
    return cands


def owners(paths):
    """path -> the package that ships it (None when none does), with one dpkg -S."""
    cands = sorted({c for p in paths for c in candidates(p)})
    found = {}
    for line in run("dpkg", "-S", *cands).stdout.splitlines():
        pkgs, _, file = line.partition(": ")
        found.setdefault(file.strip(), pkgs.split(",")[0].split(":")[0].strip())
    return {p: next((found[c] for c in candidates(p) if c in found), None) for p in paths}


def installed():
    """package -> (depends (first alternatives), priority, essential)."""
    fmt = "${Package}\t${Priority}\t${Essential}\t${Pre-Depends}, ${Depends}\n"
    out = run("dpkg-query", "-W", "-f=" + fmt).stdout
    db = {}
    for line in out.splitlines():
        name, prio, ess, deps = (line.split("\t") + ["", "", ""])[:4]
        firsts = []
        for d in deps.split(","):
            d = d.split("|")[0].strip()
            d = re.sub(r"\s*\(.*\)", "", d).split(":")[0].strip()
            if d:
                firsts.append(d)
        db[name] = (firsts, prio, ess == "yes")
    return db


def closure(pkgs, db):
    seen, pending = set(), list(pkgs)
    while pending:
        p = pending.pop()
        if p in seen:
            continue
        seen.add(p)
        pending.extend(db.get(p, ([], "", False))[0])
    return seen


def runtime_stage(text):
    """Instructions of the last stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", text)
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
    froms = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
    if not froms:
        return None
    return lines[froms[-1]:]


def build_stage(text):
    """Instructions of the first stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", text)
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
    froms = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
    return lines[froms[0]:froms[1]] if len(froms) > 1 else []


def build_libs(deps_sh):
    """The library -dev packages scripts/deps.sh installs to build tessera:
    the image's build stage needs each, or it links what the host's build
    does not and the runtime check above reads the wrong binary."""
    with open(deps_sh) as f:
        m = re.search(r"^BUILD=\((.*?)\)", re.sub(r"#[^\n]*", "", f.read()), re.S | re.M)
    words = m.group(1).split() if m else []
    return [w for w in words if w.startswith("lib") and w.endswith("-dev")]


def apt_packages(stage):
    pkgs = []
    for l in stage:
        if not l.upper().startswith("RUN "):
            continue
        for cmd in re.split(r"&&|;", l[4:]):
            words = cmd.split()
            if "apt-get" in words and "install" in words:
                for w in words[words.index("install") + 1:]:
                    if not w.startswith("-"):
                        pkgs.append(w.split("=")[0])
    return pkgs


def user_problems(stage, manifests):
    problems = []
    users = [l.split(None, 1)[1].strip() for l in stage if l.upper().startswith("USER ")]
    if not users:
        return ["the runtime stage sets no USER: the container would run as root"]
    user = users[-1].split(":")[0]
    if not user.isdigit():
        return ["USER %s: give the numeric uid, so that runAsNonRoot can verify it" % user]
    if int(user) == 0:
        return ["USER %s is root" % users[-1]]
    made = any(re.search(r"useradd\b.*--uid\s+%s\b" % user, l) for l in stage)
    if not made:
        problems.append("USER %s: the runtime stage creates no user with that uid (useradd --uid %s)" % (user, user))
    for m in manifests:
        with open(m) as f:
            uids = set(re.findall(r"runAsUser: (\d+)", f.read()))
        if uids and uids != {user}:
            problems.append("%s: runAsUser %s, the image's user is %s" % (m, ", ".join(sorted(uids)), user))
    return problems


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    dockerfile, binary, manifests = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(dockerfile) as f:
        stage = runtime_stage(f.read())
    if not stage:
        print("%s: no FROM" % dockerfile)
        return 1
    problems = user_problems(stage, manifests)
    with open(dockerfile) as f:
        first = build_stage(f.read())
    built = apt_packages(first)
    cpu_image = any("-DTESSERA_CUDA=OFF" in l for l in first)
    deps_sh = os.path.join(os.path.dirname(os.path.abspath(dockerfile)), "scripts", "deps.sh")
    for p in build_libs(deps_sh):
        if p not in built:
            problems.append("%s: scripts/deps.sh builds with it, the build stage does not install it" % p)
    listed = apt_packages(stage)
    db = installed()
    # The slim base image holds the required and essential packages and
    # what they depend on (libc6 among them).
    base = closure([p for p, (_, prio, ess) in db.items() if prio == "required" or ess], db)
    reach = closure(listed, db) | base
    libs = ldd(binary)
    direct, loads = {}, {}
    for name in needed(binary):
        if SANITIZERS.match(name) or (cpu_image and CUDA_LIBS.match(name)):
            continue
        if name not in libs:
            problems.append("%s: ldd does not resolve %s" % (binary, name))
            continue
        loads[name] = ldd(libs[name])
    pkg_of = owners([libs[n] for n in loads] + [p for l in loads.values() for p in l.values()])
    for name, deps in loads.items():
        pkg = pkg_of[libs[name]]
        if not pkg:
            problems.append("%s (%s): no Debian package ships it" % (name, libs[name]))
            continue
        direct[name] = pkg
        if pkg not in listed and pkg not in base:
            problems.append("%s: its package %s is not installed by the runtime stage" % (name, pkg))
        for dep, path in deps.items():
            if pkg_of[path] and pkg_of[path] not in reach:
                problems.append("%s (loaded by %s): its package %s is not reached from the runtime packages"
                                % (dep, name, pkg_of[path]))
    for p in listed:
        if p not in direct.values():
            problems.append("%s: installed by the runtime stage, but the binary links no library of it" % p)
    for p in problems:
        print(p)
    print("checked %d linked libraries, %d runtime packages: %s"
          % (len(direct), len(listed), "%d problem(s)" % len(problems) if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
