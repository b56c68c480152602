"""`tandem serve` against the official `openai` Python client (PyPI): chat
streamed and not, completions, stop strings, seed + temperature
reproducible, max_tokens honoured, usage right (prompt_tokens against
`tandem tokenize`, greedy text against `tandem run`), a chat's next turn
reusing the slot that holds the conversation; then bad requests,
each with its status and OpenAI's error body; a full queue (503); and
SIGTERM with a stream running (the stream ends, exit 0)."""
import http.client
import json
import signal
import os
import socket
import subprocess
import sys
import threading
import time

import cli_env
import serve_env

src, tandem, model = cli_env.default_model_paths()
serve_env.has_server(tandem)
try:
    import openai
except ImportError:
    serve_env.missing("the openai package is missing (pip install openai; scripts/setup.sh does)")

check = serve_env.check


# -- the command line: bad values, a bad model, an address that cannot be had
def cli(args, rc, has):
    r = subprocess.run([tandem, "serve", *args], capture_output=True, text=True, timeout=120)
    check(f"serve {' '.join(args)}: exit {rc}", r.returncode == rc and has in r.stderr, (r.returncode, r.stderr[-300:]))


h = subprocess.run([tandem, "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
check("serve --help lists the options", all(o in h for o in (
    "--host", "--port", "--api-key", "--parallel", "--queue", "--max-body", "--name", "--shutdown-grace",
    "--no-prompt-cache",
    "--device", "--vram-budget", "--ctx-size", "--temp")), h)
cli(["--port", "70000"], 2, "--port")
cli(["--parallel", "0"], 2, "--parallel")
cli(["--frobnicate"], 2, "unknown option")
cli(["--stop", "x"], 2, "unknown option")
cli(["-m", model, "--host", "not-an-address", "--port", "0"], 1, "not an IPv4 or IPv6 address")
cli(["-m", "/nonexistent/model.gguf", "--port", "0"], 1, "/nonexistent/model.gguf")
busy = socket.socket()
busy.bind(("127.0.0.1", 0))
busy.listen(1)
cli(["-m", model, "--port", str(busy.getsockname()[1])], 1, "cannot listen")
busy.close()

# -- 503 while the model loads: asked the moment the socket is bound
# (--check-weights reads the whole file: the load lasts long enough to ask)
p = subprocess.Popen([tandem, "serve", "-m", model, "--port", "0", "--check-weights", "-t", "2"],
                     stderr=subprocess.PIPE, text=True)
line = p.stderr.readline()
port = int(line.split("127.0.0.1:")[1].split("/")[0]) if "127.0.0.1:" in line else 0
statuses = []
for path, body in (("/health", None), ("/v1/completions", {"prompt": "hi", "max_tokens": 1})):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST" if body else "GET", path, json.dumps(body) if body else None)
    r = c.getresponse()
    statuses.append((r.status, r.read()))
if statuses[0][0] == 503:
    for st, data in statuses:
        e = json.loads(data).get("error", {})
        check(f"while loading: 503 model_loading ({st})", st == 503 and e.get("code") == "model_loading", data)
else:
    print("skipped the loading check: the model loaded before the first request", statuses)
p.send_signal(signal.SIGTERM)
check("SIGTERM during or after the load: exit 0", p.wait(timeout=120) == 0)
p.stderr.close()

KEY = "sekrit-123"
srv = serve_env.Server(tandem, model, "--api-key", KEY, "--parallel", "2", "--queue", "1", "-c", "2048",
                       "--max-body", "64K", "-t", "2")
client = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=300)
MODEL = "SmolLM2-135M-Instruct.Q4_1"
try:
    ids = [m.id for m in client.models.list()]
    check("models.list names the model", ids == [MODEL], ids)

    # -- chat, not streamed and streamed (greedy: the same text)
    msgs = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name the capital of France."}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=24, temperature=0)
    text = r.choices[0].message.content
    u = r.usage
    check("chat: a reply", r.choices[0].message.role == "assistant" and "Paris" in text, text)
    check("chat: usage adds up", u.total_tokens == u.prompt_tokens + u.completion_tokens and
          0 < u.completion_tokens <= 24 and u.prompt_tokens > 10, u)
    parts, usage, finish = [], None, None
    for ch in client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=24, temperature=0, stream=True):
        if ch.choices:
            parts.append(ch.choices[0].delta.content or "")
            finish = ch.choices[0].finish_reason or finish
        usage = ch.usage or usage
    check("chat stream: the same text as not streamed", "".join(parts) == text, ("".join(parts), text))
    check("chat stream: more than one chunk", len([p for p in parts if p]) > 1, parts)
    check("chat stream: usage in the last chunk", usage is not None and usage.prompt_tokens == u.prompt_tokens and
          usage.completion_tokens == u.completion_tokens, usage)
    check("chat stream: finish_reason", finish == r.choices[0].finish_reason, (finish, r.choices[0].finish_reason))
    chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    check("chat stream: include_usage ends with a usage-only chunk",
          chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4,
          chunks[-1])

    # -- prompt caching: a chat's next turn re-sends the conversation; the slot
    # that holds it is reused (the metrics count the tokens not evaluated), and
    # the same request again gives the same greedy text
    m1 = srv.metrics()
    msgs2 = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": "And of Germany?"}]
    t2 = client.chat.completions.create(model=MODEL, messages=msgs2, max_tokens=12, temperature=0)
    m2 = srv.metrics()
    t3 = client.chat.completions.create(model=MODEL, messages=msgs2, max_tokens=12, temperature=0)
    m3 = srv.metrics()
    reused = [m["tandem_prompt_tokens_reused_total"] - m1["tandem_prompt_tokens_reused_total"] for m in (m2, m3)]
    check("next turn: the first turn's tokens reused, not evaluated again",
          reused[0] >= 16 and reused[1] > reused[0], (reused, t2.usage.prompt_tokens))
    check("next turn sent again: the same text", t2.choices[0].message.content == t3.choices[0].message.content,
          (t2.choices[0].message.content, t3.choices[0].message.content))

    # -- completions: greedy text equals `tandem run`'s, prompt_tokens equals `tandem tokenize --bos`
    P = "The capital of France is"
    c = client.completions.create(model=MODEL, prompt=P, max_tokens=8, temperature=0)
    ref = subprocess.run([tandem, "run", "-m", model, "-p", P, "-n", "8", "--temp", "0", "-t", "2"],
                         capture_output=True, text=True, timeout=300).stdout[:-1]  # run ends with a newline
    toks = subprocess.run([tandem, "tokenize", "-m", model, "-p", P, "--bos"], capture_output=True, text=True,
                          timeout=60).stdout.split()
    check("completions: greedy text equals tandem run's", c.choices[0].text == ref, (c.choices[0].text, ref))
    check("completions: prompt_tokens equals tandem tokenize's", c.usage.prompt_tokens == len(toks),
          (c.usage.prompt_tokens, len(toks)))
    check("completions: max_tokens honoured", c.usage.completion_tokens == 8 and c.choices[0].finish_reason == "length",
          (c.usage, c.choices[0].finish_reason))
    s = "".join(ch.choices[0].text for ch in
                client.completions.create(model=MODEL, prompt=P, max_tokens=8, temperature=0, stream=True) if ch.choices)
    check("completions stream: the same text", s == ref, (s, ref))
    for n in (1, 3):
        c = client.completions.create(model=MODEL, prompt=P, max_tokens=n, temperature=0)
        check(f"max_tokens={n} honoured", c.usage.completion_tokens == n and c.choices[0].finish_reason == "length",
              c.usage)

    # -- stop strings: cut before the stop, finish "stop", one spanning tokens, streamed the same.
    # Taken from the greedy continuation's own tokens (the streamed pieces): which words it
    # holds moves with any change of the kernels' summation order (tests/test_ref_logits.py)
    pieces = [ch.choices[0].text for ch in
              client.completions.create(model=MODEL, prompt=P, max_tokens=8, temperature=0, stream=True) if ch.choices]
    k = next((k for k in range(len(pieces) - 1, 1, -1)
              if len(pieces[k - 1].strip()) >= 2 and len(pieces[k].strip()) >= 2), 0)
    if k:
        word, span = pieces[k], pieces[k - 1][-2:] + pieces[k][:2]  # a token; the end of one and start of the next
        for stop in (word, ["zzz", span]):
            want = ref[:ref.find(stop if isinstance(stop, str) else stop[1])]
            c = client.completions.create(model=MODEL, prompt=P, max_tokens=8, temperature=0, stop=stop)
            check(f"stop={stop!r}: text cut", c.choices[0].text == want and c.choices[0].finish_reason == "stop",
                  (c.choices[0].text, want, c.choices[0].finish_reason))
            s = "".join(ch.choices[0].text for ch in client.completions.create(
                model=MODEL, prompt=P, max_tokens=8, temperature=0, stop=stop, stream=True) if ch.choices)
            check(f"stop={stop!r} streamed: the same text", s == want, (s, want))
    else:
        check("the continuation has two tokens of 2+ characters in a row (stop tests)", False, pieces)

    # -- seed + temperature: the same text twice
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Write a line about the sea."}], max_tokens=16,
              temperature=1.0, top_p=0.95, seed=1234)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    check("seed + temperature: the same text twice", a == b and a, (a, b))

    # -- bad requests: status and OpenAI's error body
    auth = {"Authorization": "Bearer " + KEY}

    def bad(name, status, method, path, body=None, headers=auth, code=None, param=None, has=None):
        st, _, data = srv.request(method, path, body, headers)
        try:
            e = json.loads(data)["error"]
            ok = (st == status and isinstance(e["message"], str) and e["type"] and "code" in e and "param" in e and
                  (code is None or e["code"] == code) and (param is None or e["param"] == param) and
                  (has is None or has in e["message"]))
        except (ValueError, KeyError, TypeError):
            ok = False
        check(f"{name}: {status}", ok, (st, data[:300]))

    CH = "/v1/chat/completions"
    good = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    bad("malformed JSON", 400, "POST", CH, b'{"model": "x", "messages": [')
    bad("not an object", 400, "POST", CH, b'[1, 2]')
    bad("max_tokens a string", 400, "POST", CH, {**good, "max_tokens": "ten"}, param="max_tokens")
    bad("max_tokens 0", 400, "POST", CH, {**good, "max_tokens": 0}, param="max_tokens")
    bad("temperature out of range", 400, "POST", CH, {**good, "temperature": 7}, param="temperature")
    bad("messages not a list", 400, "POST", CH, {**good, "messages": "hi"}, param="messages")
    bad("a message without a role", 400, "POST", CH, {**good, "messages": [{"content": "hi"}]}, param="messages")
    bad("stream not a boolean", 400, "POST", CH, {**good, "stream": "yes"}, param="stream")
    bad("stop a number", 400, "POST", CH, {**good, "stop": 5}, param="stop")
    bad("prompt missing", 400, "POST", "/v1/completions", {"model": MODEL}, param="prompt")
    bad("unknown model", 404, "POST", CH, {**good, "model": "gpt-9"}, code="model_not_found")
    bad("body over --max-body", 413, "POST", CH, {**good, "pad": "x" * 70000}, code="body_too_large")
    bad("wrong API key", 401, "POST", CH, good, headers={"Authorization": "Bearer nope"}, code="invalid_api_key")
    bad("missing API key", 401, "GET", "/v1/models", headers={}, code="invalid_api_key")
    bad("unknown route", 404, "GET", "/v1/nothing")
    bad("unknown route outside /v1", 404, "GET", "/nothing", headers={})
    bad("wrong method", 405, "GET", CH)
    bad("context too long", 400, "POST", "/v1/completions",
        {"model": MODEL, "prompt": "word " * 2500, "max_tokens": 1}, code="context_length_exceeded", has="2048")
    try:
        client.chat.completions.create(model="gpt-9", messages=msgs)
        check("openai client: unknown model raises NotFoundError", False, "no error")
    except openai.NotFoundError:
        check("openai client: unknown model raises NotFoundError", True)
    try:
        openai.OpenAI(base_url=srv.base + "/v1", api_key="nope", max_retries=0).models.list()
        check("openai client: wrong key raises AuthenticationError", False, "no error")
    except openai.AuthenticationError:
        check("openai client: wrong key raises AuthenticationError", True)
    st, _, data = srv.request("GET", "/health")
    check("/health: 200 once ready", st == 200 and json.loads(data)["status"] == "ok", (st, data))

    # -- a full queue: 2 slots busy streaming, 1 request queued, the next is refused with 503
    def open_stream(prompt):
        sk = socket.create_connection(("127.0.0.1", srv.port), timeout=300)
        body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 1900, "temperature": 0, "stream": True})
        sk.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        return sk

    COUNT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
    m0 = srv.metrics()
    # one at a time, each running before the next: with --queue 1, a second
    # request sent while the first still waits for the engine to admit it
    # would find the queue full
    streams = []
    for i in range(2):
        streams.append(open_stream(COUNT))
        t0 = time.time()
        while srv.metrics().get("tandem_requests_running", 0) < i + 1 and time.time() - t0 < 60:
            time.sleep(0.02)
    for sk in streams:
        sk.recv(4096)  # the headers: both run
    queued = threading.Thread(target=lambda: srv.request("POST", "/v1/completions",
                                                         {"prompt": "hi", "max_tokens": 1}, auth))
    queued.start()
    t0 = time.time()
    while srv.metrics().get("tandem_queue_depth", 0) < 1 and time.time() - t0 < 60:
        time.sleep(0.05)
    bad("queue full", 503, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1}, code="queue_full")
    for sk in streams:
        sk.close()  # dropped mid-stream: cancelled, the queued one runs
    queued.join(timeout=300)
    check("the queued request ran once the dropped ones left", not queued.is_alive())
    t0 = time.time()
    while time.time() - t0 < 60:
        m = srv.metrics()
        if m["tandem_requests_running"] == 0 and m["tandem_queue_depth"] == 0:
            break
        time.sleep(0.05)
    # A dropped stream is cancelled (or ended on its own, the model's end
    # token, greedy, before its client left): never run on to its 1900
    # tokens (a "length" finish), and its slot and KV rows are free again.
    def d(reason):
        k = 'tandem_finish_total{reason="%s"}' % reason
        return m.get(k, 0) - m0.get(k, 0)
    deltas = {r: d(r) for r in ("length", "cancel", "eog", "stop", "error")}
    check("the dropped streams were cancelled; slots and KV rows free again",
          d("cancel") >= 1 and d("cancel") + d("eog") + d("stop") >= 2 and d("error") == 0 and
          m["tandem_requests_running"] == 0 and m["tandem_kv_rows_used"] == 0,
          {**deltas, "running": m["tandem_requests_running"], "kv_rows_used": m["tandem_kv_rows_used"]})

    # -- SIGTERM with a stream running: the stream still ends with [DONE], exit 0
    got = []

    def consume():
        for ch in client.completions.create(model=MODEL, prompt=COUNT, max_tokens=40, temperature=0, stream=True):
            got.append(ch)

    th = threading.Thread(target=consume)
    th.start()
    t0 = time.time()
    while not got and th.is_alive() and time.time() - t0 < 120:
        time.sleep(0.02)
    rc = srv.stop()
    th.join(timeout=60)
    check("SIGTERM: exit 0", rc == 0, f"rc={rc}\n{srv.tail()}")
    check("SIGTERM: the running stream finished", len(got) > 1 and got[-1].choices[0].finish_reason is not None,
          len(got))
finally:
    rc = srv.stop()
print(srv.tail(3), end="")
sys.exit(1 if serve_env.fails else 0)
