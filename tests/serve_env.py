"""What the `tandem serve` tests share: a server on a free port of
loopback (started, waited for, stopped with SIGTERM and its exit status
checked), plain HTTP requests, and /metrics read into a dict."""
import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

SANITIZED = os.environ.get("TND_SANITIZED") == "1"


fails = 0  # checks failed so far (check)


def check(name, ok, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    fails += not ok


def missing(what):
    """Exits for a missing prerequisite: 77 (skipped), or 1 in CI (.ci/run
    sets TND_CI), whose setup installs every one."""
    print(("FAIL" if os.environ.get("TND_CI") else "skipped") + ": " + what)
    sys.exit(1 if os.environ.get("TND_CI") else 77)


def has_server(tandem):
    """Exits (missing) when this build has no server (no libmicrohttpd or
    jansson at configure time)."""
    r = subprocess.run([tandem, "serve", "--help"], capture_output=True, text=True, timeout=60)
    if "This build has no server" in r.stdout:
        missing("this build has no server (libmicrohttpd / jansson missing at configure time)")


class Server:
    def __init__(self, tandem, model, *args, timeout=300):
        self.p = subprocess.Popen([tandem, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", *args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        end = time.time() + timeout
        while True:
            left = end - time.time()
            if left <= 0 or self.p.poll() is not None:
                self.p.kill()
                raise RuntimeError("the server did not start:\n" + "".join(self.log) + self.p.stderr.read())
            r, _, _ = select.select([self.p.stderr], [], [], left)
            if not r:
                continue
            line = self.p.stderr.readline()
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
            if "tandem serve: ready" in line:
                break
        # keep draining stderr so the server never blocks on a full pipe
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=300):
        """(status, headers dict, body bytes); body: bytes, str or a JSON-able object."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        assert st == 200, st
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, timeout=120):
        """SIGTERM; the exit status (0 expected: a clean shutdown, and
        under ASan no leaks)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = "hung after SIGTERM"
        self.drain.join(timeout=10)
        return rc

    def tail(self, n=20):
        return "".join(self.log[-n:])
