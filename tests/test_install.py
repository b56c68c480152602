"""The library as an embedder gets it: `cmake --install` of the tested build
into a temporary prefix, then examples/generate.c compiled against the
installed header and library through the installed pkg-config file, run on
the default model: its greedy continuation must equal `tandem run`'s. Then
the same with a shared libtandem (-DTND_SHARED=ON, a CPU-only build of the
library alone), whose installed tandem must run too. Skipped in sanitizer
builds: their library needs the sanitizer runtimes on an embedder's link.
"""
import os
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("TND_SRC", os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ["TND_BUILD"]
BIN = os.environ["TND_BIN"]
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT, N = "The three primary colors are", "12"
checks = fails = 0


def check(ok, what):
    global checks, fails
    checks += 1
    if not ok:
        fails += 1
        print("FAIL", what)
    return ok


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


def example_against(prefix, label, want):
    """Builds examples/generate.c with the pkg-config file under prefix and
    checks its output."""
    pc = [os.path.join(prefix, d, "pkgconfig") for d in ("lib", "lib64") if os.path.isdir(os.path.join(prefix, d))]
    env = dict(os.environ, PKG_CONFIG_PATH=os.pathsep.join(pc))
    flags = run(["pkg-config", "--cflags", "--libs", "tandem"], env=env)
    if not check(flags.returncode == 0, label + ": pkg-config: " + flags.stderr):
        return
    exe = os.path.join(prefix, "generate")
    cc = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", os.path.join(SRC, "examples", "generate.c"), "-o", exe]
             + flags.stdout.split()
             + ["-Wl,-rpath," + f[2:] for f in flags.stdout.split() if f.startswith("-L")])
    if not check(cc.returncode == 0, label + ": compiling the example: " + cc.stderr[-2000:]):
        return
    r = run([exe, MODEL, PROMPT, N])
    check(r.returncode == 0, label + ": the example failed: " + r.stderr[-1000:])
    print("%s: %r" % (label, r.stdout))
    check(r.stdout == PROMPT + want, label + ": %r against tandem run's %r" % (r.stdout, PROMPT + want))
    check(("%s generated" % N) in r.stderr, label + ": " + r.stderr.strip())


def main():
    if not os.path.exists(MODEL):
        print("skipped: no default model")
        return 77
    if os.environ.get("TND_SANITIZED"):
        # a sanitized libtandem needs the sanitizer runtimes on the embedder's
        # link line: that is not what users install (the release pass runs this)
        print("skipped: a sanitizer build")
        return 77
    if not shutil.which("pkg-config") or not shutil.which("cc"):
        print("skipped: no pkg-config or cc (scripts/setup.sh installs them)")
        return 77
    ref = run([BIN, "run", "-m", MODEL, "-p", PROMPT, "-n", N, "--temp", "0", "-t", "2"])
    if not check(ref.returncode == 0, "tandem run: " + ref.stderr[-500:]):
        return 1
    want = ref.stdout
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "static")
        r = run(["cmake", "--install", BUILD, "--prefix", prefix])
        if check(r.returncode == 0, "cmake --install: " + r.stdout[-1000:] + r.stderr[-1000:]):
            check(os.path.exists(os.path.join(prefix, "include", "tandem.h")), "the header is installed")
            example_against(prefix, "static", want)
        b = os.path.join(tmp, "build-shared")
        prefix = os.path.join(tmp, "shared")
        r = run(["cmake", "-S", SRC, "-B", b, "-DCMAKE_BUILD_TYPE=Release", "-DTND_SHARED=ON", "-DTND_CUDA=OFF"])
        if check(r.returncode == 0, "configure shared: " + r.stderr[-1000:]):
            r = run(["cmake", "--build", b, "-j", str(os.cpu_count() or 2), "--target", "tandem", "tandem_cli"])
            if check(r.returncode == 0, "build shared: " + r.stdout[-2000:]):
                r = run(["cmake", "--install", b, "--prefix", prefix])
                check(r.returncode == 0, "install shared: " + r.stderr[-500:])
                libs = [f for d in ("lib", "lib64") if os.path.isdir(os.path.join(prefix, d))
                        for f in os.listdir(os.path.join(prefix, d))]
                check(any(f.startswith("libtandem.so") for f in libs), "libtandem.so installed: %s" % libs)
                # the installed tool finds the installed library by itself
                v = run([os.path.join(prefix, "bin", "tandem"), "--version"])
                check(v.returncode == 0 and v.stdout.startswith("tandem "),
                      "the installed tandem runs: " + v.stdout + v.stderr)
                example_against(prefix, "shared", want)
    print("%d passed, %d failed" % (checks - fails, fails))
    return 1 if fails else 0


sys.exit(main())
