"""The chat page at `/` of `tandem serve`, in headless Chromium (Debian's
`chromium`), driven over the DevTools protocol on a pipe (no extra
package): type a message, send it, watch the reply stream into the DOM
(seen part-way, then whole, in more than one update), compare it with the
API's reply to the same request, and save a screenshot
($TND_BUILD/serve_page.png). Skips (77) without chromium."""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import cli_env
import serve_env

src, tandem, model = cli_env.default_model_paths()
serve_env.has_server(tandem)
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if not browser:
    serve_env.missing("no chromium (apt-get install chromium; scripts/setup.sh does)")

check = serve_env.check


class Cdp:
    """The DevTools protocol over --remote-debugging-pipe: Chromium reads
    commands from fd 3 and writes replies and events to fd 4, each a JSON
    text ended by a NUL byte."""

    def __init__(self, exe):
        self.to_r, self.to_w = os.pipe()
        self.from_r, self.from_w = os.pipe()
        self.dir = tempfile.mkdtemp()
        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", f"--user-data-dir={self.dir}", "--window-size=900,700",
                "--no-first-run", "about:blank"]

        def fds():  # the child's fd 3 and 4 (through fresh numbers: either may be one of the four)
            a, b = os.dup(self.to_r), os.dup(self.from_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        # preexec_fn runs before close_fds, which then keeps 3 and 4 (pass_fds)
        self.p = subprocess.Popen(args, pass_fds=(3, 4), preexec_fn=fds,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(self.to_r)
        os.close(self.from_w)
        self.buf = b""
        self.n = 0

    def call(self, method, params=None, session=None, timeout=60):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        end = time.time() + timeout
        while time.time() < end:
            while b"\0" not in self.buf:
                d = os.read(self.from_r, 1 << 20)
                if not d:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += d
            raw, self.buf = self.buf.split(b"\0", 1)
            r = json.loads(raw)
            if r.get("id") == self.n:
                if "error" in r:
                    raise RuntimeError(f"{method}: {r['error']}")
                return r.get("result", {})
        raise RuntimeError(f"{method}: no reply in {timeout} s")

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, OSError):
            pass
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


MSG = "Name the capital of France."
srv = serve_env.Server(tandem, model, "-c", "512", "-t", "2")
cdp = None
try:
    st, _, data = srv.request("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": MSG}], "max_tokens": 24, "temperature": 0})
    want = json.loads(data)["choices"][0]["message"]["content"]
    cdp = Cdp(browser)
    tid = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = cdp.call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]

    def js(expr):
        r = cdp.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, sid)
        return r.get("result", {}).get("value")

    cdp.call("Page.enable", session=sid)
    cdp.call("Page.navigate", {"url": srv.base + "/?temperature=0&max_tokens=24"}, sid)
    t0 = time.time()
    while js("document.readyState") != "complete" and time.time() - t0 < 30:
        time.sleep(0.05)
    check("the page loads", js("document.title") == "tandem chat", js("document.title"))
    # type the message as a user would, then press Send
    js("document.getElementById('input').focus()")
    cdp.call("Input.insertText", {"text": MSG}, sid)
    js("document.getElementById('send').click()")
    seen, final = set(), None
    t0 = time.time()
    while time.time() - t0 < 120:
        state = js("JSON.stringify([document.getElementById('status').textContent,"
                   " (document.querySelector('.assistant') || {}).textContent || '',"
                   " (document.querySelector('.assistant') || {dataset: {}}).dataset.chunks || '0'])")
        status, text, chunks = json.loads(state)
        if status != "done" and text:
            seen.add(text)
        if status in ("done", "error"):
            final = (status, text, int(chunks))
            break
        time.sleep(0.01)
    check("the reply completes", final is not None and final[0] == "done", final)
    if final:
        check("the reply in the DOM equals the API's", final[1] == want, (final[1], want))
        check(f"it streamed: {final[2]} DOM updates, {len(seen)} partial texts seen",
              final[2] > 1 and any(s != final[1] for s in seen), (final, seen))
    check("the user's message is in the DOM", js("document.querySelector('.user').textContent") == MSG)
    shot = cdp.call("Page.captureScreenshot", {"format": "png"}, sid)["data"]
    png = base64.b64decode(shot)
    out = os.path.join(os.environ.get("TND_BUILD", tempfile.gettempdir()), "serve_page.png")
    with open(out, "wb") as f:
        f.write(png)
    check(f"a screenshot ({len(png)} bytes, {out})", png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, len(png))
finally:
    if cdp:
        cdp.close()
    rc = srv.stop()
check("SIGTERM: exit 0", rc == 0, f"rc={rc}\n{srv.tail()}")
sys.exit(1 if serve_env.fails else 0)
