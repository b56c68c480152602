"""The CUDA architecture policy, without a GPU (src/cuda/arch.cu,
cmake/cuda_arch.cmake).

1. Configure-only runs of CMake in fresh folders show which architectures a
   build gets: with nvcc and no GPU, machine code for sm_80 and sm_90 (and the
   rest of the documented list) plus PTX; with a GPU visible (a stand-in
   nvidia-smi that reports compute capability 8.6), that GPU's own; an explicit
   -DCMAKE_CUDA_ARCHITECTURES as given; and a build folder configured before
   the policy existed (nvcc's default left in the cache by enable_language)
   gets the policy, not sm_75. Skipped without nvcc.
2. Every `#if __CUDA_ARCH__ >= N` in src/cuda has an #else that traps, or
   one that says why none is needed (`#else /* no trap: ...`), so that a body
   compiled out for older code fails loudly instead of returning zeros.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("TND_SRC", os.path.join(os.path.dirname(__file__), ".."))
checks = fails = 0


def check(ok, what):
    global checks, fails
    checks += 1
    if not ok:
        fails += 1
        print("FAIL", what)
    return ok


def guards():
    cuda = os.path.join(SRC, "src", "cuda")
    n = 0
    for name in sorted(os.listdir(cuda)):
        if not name.endswith((".cu", ".cuh")):
            continue
        lines = open(os.path.join(cuda, name), encoding="utf-8").read().split("\n")
        stack = []  # (line of the #if, is an arch guard, #else line or None)
        for i, line in enumerate(lines):
            s = line.strip()
            if s.startswith("#if"):
                stack.append([i, re.match(r"#if\s+__CUDA_ARCH__\s*>=", s) is not None, None])
            elif s.startswith("#else") or s.startswith("#elif"):
                stack[-1][2] = i
            elif s.startswith("#endif"):
                start, arch, els = stack.pop()
                if not arch:
                    continue
                n += 1
                where = "%s:%d" % (name, start + 1)
                if not check(els is not None, where + ": #if __CUDA_ARCH__ without #else"):
                    continue
                body = "\n".join(lines[els:i])
                check("__trap()" in body or lines[els].strip().startswith("#else /* no trap:"),
                      where + ": its #else neither traps nor says why not")
    check(n > 0, "found the arch guards in src/cuda")
    print("arch guards: %d checked" % n)


def cache_value(build, key):
    for line in open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8"):
        if line.startswith(key + ":"):
            return line.split("=", 1)[1].strip()
    return None


def configure(tmp, label, smi=None, args=(), init=None):
    """Configures a fresh folder; smi: None (no nvidia-smi), or what a
    stand-in prints. Returns (CMAKE_CUDA_ARCHITECTURES, TND_CUDA_ARCH_SOURCE)."""
    build = os.path.join(tmp, label)
    bindir = os.path.join(tmp, label + "-bin")
    os.makedirs(bindir)
    # the stand-in comes first on PATH; without one, a failing nvidia-smi
    # (as on a machine with the tools but no driver) hides any real one
    script = "#!/bin/sh\n" + ("printf '%s\\n'\n" % smi if smi else "exit 9\n")
    with open(os.path.join(bindir, "nvidia-smi"), "w") as f:
        f.write(script)
    os.chmod(os.path.join(bindir, "nvidia-smi"), 0o755)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("CUDAARCHS", None)
    cmd = ["cmake", "-S", SRC, "-B", build, "-DTND_CUDA=ON"] + list(args)
    if init:
        path = os.path.join(tmp, label + "-init.cmake")
        open(path, "w").write(init)
        cmd += ["-C", path]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, label + ": configure failed:\n" + r.stdout[-2000:] + r.stderr[-2000:]):
        return None, None
    return cache_value(build, "CMAKE_CUDA_ARCHITECTURES"), cache_value(build, "TND_CUDA_ARCH_SOURCE")


def policy():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        print("policy: skipped (no nvcc)")
        return False
    os.environ["PATH"] = os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        archs, src = configure(tmp, "nogpu")
        print("no GPU:", archs, src)
        if archs is not None:
            lst = archs.split(";")
            check(src == "default", "no GPU: the default list (got %s)" % src)
            for a in ("80-real", "86-real", "89-real", "90-real"):
                check(a in lst, "no GPU: %s in %s" % (a, archs))
            check(any(a.endswith("-virtual") for a in lst), "no GPU: PTX in %s" % archs)
        archs, src = configure(tmp, "gpu86", smi="8.6")
        print("GPU 8.6:", archs, src)
        check(archs == "86-real" and src == "gpu", "a visible sm_86 GPU: its own code (got %s, %s)" % (archs, src))
        archs, src = configure(tmp, "given", smi="8.6", args=["-DCMAKE_CUDA_ARCHITECTURES=89"])
        check(archs == "89" and src == "given", "-DCMAKE_CUDA_ARCHITECTURES=89 as given (got %s, %s)" % (archs, src))
        archs, src = configure(tmp, "stale", init='set(CMAKE_CUDA_ARCHITECTURES 75 CACHE STRING "CUDA architectures")\n')
        print("stale cache:", archs, src)
        check(archs is not None and "90-real" in archs.split(";") and src == "default",
              "a cache left with nvcc's default gets the policy (got %s, %s)" % (archs, src))
    return True


guards()
ran = policy()
print("%d passed, %d failed" % (checks - fails, fails))
sys.exit(1 if fails else 0)
