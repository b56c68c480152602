"""dev_stress, the load injector of scripts/device-load.sh: a schedule of
phases runs in order and each start is printed (clock, seconds since the
start, phase, load) then an end line; a CPU phase really spins (the
process's CPU time); SIGTERM stops it cleanly (exit 0, end line); bad
schedules are usage errors; GPU loads either run or, without CUDA or a GPU,
are refused before anything starts."""
import os
import select
import signal
import subprocess
import sys
import time

build = os.environ.get("TND_BUILD", os.path.join(os.environ.get("TND_SRC", "."), "build"))
stress = os.path.join(build, "dev_stress")
if not os.path.exists(stress):
    print(f"FAIL {stress} is missing (build the dev_stress target)")
    sys.exit(1)

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


def rows(out):
    """The data lines after the TSV header, split."""
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    if not lines or lines[0] != "clock_s\tt_s\tphase\tload":
        return None
    return [ln.split("\t") for ln in lines[1:]]


p = subprocess.Popen([stress, "--phase", "0.2:none", "--phase", "0.8:cpu=1", "--phase", "0.2:none"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
out, err = p.communicate(timeout=30)
r = rows(out)
check(p.returncode == 0 and r is not None, f"schedule runs: rc={p.returncode} {err.strip()[:200]}")
r = r or []
check([x[2:] for x in r] == [["1", "none"], ["2", "cpu=1"], ["3", "none"], ["end", "-"]],
      f"phases in order: {[x[2:] for x in r]}")
ts = [float(x[1]) for x in r if len(x) == 4]
# never early (deadlines); late only by a wake-up on a busy machine
check(len(ts) == 4 and ts == sorted(ts) and 0.2 <= ts[1] < 2 and 1.0 <= ts[2] < 3 and 1.2 <= ts[3] < 4,
      f"phases start at the scheduled times: {ts}")
offs = [float(x[0]) - float(x[1]) for x in r if len(x) == 4]
check(len(offs) == 4 and max(offs) - min(offs) < 1e-3, "clock_s - t_s is constant")

# CPU time: a spinner phase uses many times the CPU time of an idle phase
# of the same length (a ratio, since on a busy test machine the spinner
# may get only a small share of a core)
def cpu_of(*args):
    p = subprocess.Popen([stress, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    p.stdout.close()
    p.stderr.close()
    return os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime


rc_idle, idle = cpu_of("--phase", "0.8:none")
rc_spin, spin = cpu_of("--cpu", "1", "--for", "0.8")
check(rc_idle == 0 and rc_spin == 0 and spin >= 0.05 and spin >= 5 * idle,
      f"--cpu 1 --for 0.8 spins: exit {rc_spin}, CPU {spin:.3f} s against {idle:.3f} s idle")

# SIGTERM in the middle of a long phase
p = subprocess.Popen([stress, "--phase", "60:cpu=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
# raw reads of the pipe (a buffered readline could hold the phase line
# where select no longer sees it)
seen = b""
deadline = time.monotonic() + 20
while b"\t1\tcpu=1" not in seen and time.monotonic() < deadline:
    if select.select([p.stdout], [], [], 1)[0]:
        chunk = os.read(p.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
p.send_signal(signal.SIGTERM)
try:
    rest, err = p.communicate(timeout=10)
except subprocess.TimeoutExpired:
    p.kill()
    rest, err = p.communicate()
rest = rest.decode()
r = rows(seen.decode() + rest)
check(p.returncode == 0 and r and r[-1][2:] == ["end", "-"] and "stopped by signal 15" in rest
      and float(r[-1][1]) < 30, f"SIGTERM stops it: rc={p.returncode} {rest.strip()[-120:]}")

for args, what in ((["--phase", "1:cpu=0"], "cpu=0"), (["--phase", "1:gpu=1.5"], "gpu past 1"),
                   (["--phase", "0:none"], "0 s"), (["--phase", "1:disk=3"], "unknown load"),
                   (["--phase", "5"], "no load"), (["--cpu", "2"], "no --for"),
                   (["--phase", "1:none", "--for", "1"], "both forms"), ([], "no schedule"),
                   (["--bogus"], "unknown option")):
    p = subprocess.run([stress, *args], capture_output=True, text=True, timeout=20)
    check(p.returncode == 2 and "dev_stress" in p.stderr and "clock_s" not in p.stdout,
          f"{what} refused: rc={p.returncode} {p.stderr.strip()[:120]}")

# with a GPU this runs; without CUDA or a GPU it is refused before starting
p = subprocess.run([stress, "--phase", "0.2:gpu=0.5,pcie=16"], capture_output=True, text=True, timeout=60)
r = rows(p.stdout)
check((p.returncode == 0 and r and r[0][2:] == ["1", "gpu=0.5,pcie=16"]) or
      (p.returncode == 2 and "gpu and pcie loads" in p.stderr and p.stdout == ""),
      f"GPU load: rc={p.returncode} {(p.stderr or p.stdout).strip()[:160]}")

print(f"{fails} failures")
sys.exit(1 if fails else 0)
