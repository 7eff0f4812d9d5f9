"""harness.py - start a real `tessera serve` and talk HTTP to it.

Shared by the black-box tests (test_serve.py) and the shell tests that drive
third-party clients (openai_compat.sh, prometheus.sh). Standard library only,
for Debian's /usr/bin/python3.

What it gives:
  - Env: the paths ctest passes (TS_TESSERA, TS_TMPDIR, TS_SRC) and a scratch
    folder per test script;
  - make_model / keygen: the tiny synthetic model and API keys, made with the
    tessera binary itself;
  - Server: writes a YAML config, starts `tessera serve --listen 127.0.0.1:0`,
    reads the port from its banner, and always stops it (stop(), a context
    manager, and an atexit hook that kills whatever is still running);
  - request / stream / sse_events: HTTP with a timeout on every call;
  - parse_metrics / metric_value: the Prometheus text format.

Everything talks to 127.0.0.1 only and every wait has a deadline, so a hung
server fails a test instead of hanging the suite.
"""

import argparse
import atexit
import ctypes
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

# ---- environment --------------------------------------------------------------


class Env:
    """The paths ctest hands to every script test."""

    def __init__(self, name):
        missing = [v for v in ("TS_TESSERA", "TS_TMPDIR") if not os.environ.get(v)]
        if missing:
            raise SystemExit("harness: set %s (ctest does)" % ", ".join(missing))
        self.tessera = os.environ["TS_TESSERA"]
        self.src = os.environ.get("TS_SRC", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
        self.work = os.path.join(os.environ["TS_TMPDIR"], name)
        os.makedirs(self.work, exist_ok=True)


def run_tool(env, *args, timeout=60):
    """Run a tessera subcommand; its stdout, or an exception naming what failed."""
    p = subprocess.run([env.tessera, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("tessera %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    return p.stdout


def make_model(env, name="it.gguf", preset="tiny", vocab=2000, ctx=1024, extra=()):
    """A synthetic GGUF in the scratch folder (made once per run)."""
    path = os.path.join(env.work, name)
    run_tool(env, "mkmodel", path, "--preset", preset, "--vocab", str(vocab), "--ctx", str(ctx), *extra)
    return path


def keygen(env):
    """(key, key_sha256) from `tessera keygen`."""
    out = run_tool(env, "keygen")
    key = re.search(r"^key:\s+(\S+)", out, re.M)
    digest = re.search(r"^key_sha256:\s+([0-9a-f]{64})\s*$", out, re.M)
    if not key or not digest:
        raise RuntimeError("keygen printed something unexpected: %r" % out)
    return key.group(1), digest.group(1)


# ---- the server -----------------------------------------------------------------

_LIVE = []          # every Server started and not yet stopped, for atexit


def _kill_all():
    for s in list(_LIVE):
        s.kill()


atexit.register(_kill_all)


def _on_term(signum, frame):
    # ctest's timeout (or a user's kill) sends SIGTERM: leave through
    # SystemExit so atexit stops the servers.
    raise SystemExit(128 + signum)


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_term)

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent():
    # Runs in the child before exec: if this Python process dies without
    # cleaning up (SIGKILL), the kernel kills the server too (PR_SET_PDEATHSIG).
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)


class Tenant:
    def __init__(self, env, name, tier, **limits):
        self.name = name
        self.tier = tier
        self.limits = limits            # requests_per_minute=2, max_kv_fraction=..., ...
        self.key, self.hash = keygen(env)


class Model:
    def __init__(self, name, path, **opts):
        self.name = name
        self.path = path
        self.opts = opts                # kv_cache_bytes, threads, max_seqs, ...


class Server:
    """One `tessera serve` process with its own config file.

    models: [Model]; tenants: [Tenant]; admin: make an admin key; metrics:
    make a metrics key (metrics_key; get_metrics needs it or the admin key);
    limits: the config's limits: mapping (max_body_bytes, shutdown_grace_s...);
    tiers: the config's tiers, as YAML flow mappings ("{name: gold, band: 0}");
    top: more top-level config keys, {key: YAML value}.
    """

    def __init__(self, env, name, models, tenants, admin=True, limits=None, policy="fair", tiers=None,
                 metrics=True, top=None):
        self.env = env
        self.top = top or {}
        self.name = name
        self.models = models
        self.tenants = {t.name: t for t in tenants}
        self.admin_key, admin_hash = keygen(env) if admin else (None, None)
        self.metrics_key, self._metrics_hash = keygen(env) if metrics else (None, None)
        self.tiers = tiers
        self.limits = limits or {}
        self.config = os.path.join(env.work, name + ".yaml")
        self.log_path = os.path.join(env.work, name + ".log")
        self.proc = None
        self.port = None
        self.lines = []                 # stdout lines seen so far
        self._port_seen = threading.Event()
        self._write_config(policy, admin_hash)

    def _write_config(self, policy, admin_hash):
        # The port here is a placeholder: --listen 127.0.0.1:0 overrides it,
        # so parallel test scripts never fight over a port.
        y = ["listen: 127.0.0.1:8080", "policy: %s" % policy, "limits:"]
        lim = {"max_body_bytes": 65536, "shutdown_grace_s": 3, "header_timeout_s": 10, "idle_timeout_s": 30}
        lim.update(self.limits)
        y += ["  %s: %s" % (k, v) for k, v in lim.items()]
        y.append("models:")
        for m in self.models:
            y.append("  - name: %s" % m.name)
            y.append("    path: %s" % m.path)
            opts = {"kv_cache_bytes": "32MiB", "swap_bytes": "8MiB", "threads": 2}
            opts.update(m.opts)
            y += ["    %s: %s" % (k, v) for k, v in opts.items()]
        if self.tiers:
            y.append("tiers:")
            y += ["  - %s" % t for t in self.tiers]
        y.append("tenants:")
        for t in self.tenants.values():
            y.append("  - name: %s" % t.name)
            y.append("    tier: %s" % t.tier)
            y.append("    key_sha256: %s" % t.hash)
            y += ["    %s: %s" % (k, v) for k, v in t.limits.items()]
        if admin_hash:
            y.append("admin_key_sha256: %s" % admin_hash)
        if self._metrics_hash:
            y.append("metrics_key_sha256: %s" % self._metrics_hash)
        y += ["%s: %s" % (k, v) for k, v in self.top.items()]
        with open(self.config, "w") as f:
            f.write("\n".join(y) + "\n")

    def key(self, tenant):
        return self.tenants[tenant].key

    def start(self, timeout=30):
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [self.env.tessera, "serve", "--config", self.config, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, bufsize=1,
            preexec_fn=_die_with_parent,
            env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2")))
        log.close()
        _LIVE.append(self)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if not self._port_seen.wait(timeout) or self.port is None:
            err = self.stderr()
            self.kill()
            raise RuntimeError("server %s did not print its port within %ss; stdout=%r stderr=%r"
                               % (self.name, timeout, self.lines, err))
        return self

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            m = re.match(r"tessera: listening on http://127\.0\.0\.1:(\d+)\b", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._port_seen.set()
        self.proc.stdout.close()
        self._port_seen.set()           # EOF: the process is gone

    def stderr(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """Exit status, or None if it is still running after timeout seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=15):
        """SIGTERM and wait; SIGKILL past timeout. The exit status (None if killed)."""
        if not self.proc or self.proc.poll() is not None:
            self._forget()
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
        self._forget()
        return rc

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self._forget()

    def _forget(self):
        if self in _LIVE:
            _LIVE.remove(self)

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.stop()
        return False


# ---- HTTP ---------------------------------------------------------------------


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers          # lower-case names
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "Resp(%d, %r)" % (self.status, self.body[:400])


def _headers(key, body, extra):
    h = {}
    if key is not None:
        h["Authorization"] = "Bearer " + key
    if body is not None:
        h["Content-Type"] = "application/json"
    h.update(extra or {})
    return h


def _encode(body):
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def request(port, method, path, body=None, key=None, headers=None, timeout=20, conn=None):
    """One HTTP exchange, the whole body read. conn: reuse a keep-alive
    http.client.HTTPConnection (left open), else a fresh one (closed)."""
    own = conn is None
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=_encode(body), headers=_headers(key, body, headers))
        r = c.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        if own:
            c.close()


def sse_events(body):
    """The data payloads of an SSE body, checking the framing: every event
    is exactly one 'data: ...' line followed by a blank line."""
    text = body.decode("utf-8")
    if not text.endswith("\n\n"):
        raise AssertionError("SSE body does not end with a blank line: %r" % text[-200:])
    out = []
    for ev in text[:-2].split("\n\n"):
        if not ev.startswith("data: ") or "\n" in ev:
            raise AssertionError("malformed SSE event %r" % ev[:200])
        out.append(ev[len("data: "):])
    return out


def stream(port, path, body, key, timeout=30):
    """POST a streaming request and read it to the end: (Resp, [payload])."""
    r = request(port, "POST", path, body, key=key, timeout=timeout)
    events = sse_events(r.body) if r.status == 200 else []
    return r, events


class RawStream:
    """A streaming request over a plain socket, read event by event, so a
    test can stop reading (or hang up) in the middle."""

    def __init__(self, port, path, body, key, timeout=20):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        data = _encode(body)
        head = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (path, port, key, len(data)))
        self.sock.sendall(head.encode() + data)
        self.buf = b""
        self.status = None
        self.headers = {}
        self._chunked = False
        self._raw = b""                 # undecoded bytes after the head
        self.done = False

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("the server closed the connection")
        self._raw += d

    def _read_head(self):
        while b"\r\n\r\n" not in self._raw:
            self._fill()
        head, self._raw = self._raw.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for ln in lines[1:]:
            k, v = ln.split(":", 1)
            self.headers[k.strip().lower()] = v.strip()
        self._chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        # The bytes that came with the head may hold the whole stream (a
        # short answer, a client that was slow to read): without this,
        # next_event would wait for bytes that never come.
        self._decode()

    def _decode(self):
        """Move complete chunks from _raw into buf."""
        if not self._chunked:
            self.buf += self._raw
            self._raw = b""
            return
        while b"\r\n" in self._raw:
            size_line, rest = self._raw.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                return
            if size == 0:
                self.done = True
            self.buf += rest[:size]
            self._raw = rest[size + 2:]

    def next_event(self):
        """The next SSE payload (str), or None at the end of the stream."""
        if self.status is None:
            self._read_head()
        while b"\n\n" not in self.buf:
            if self.done:
                return None
            self._fill()
            self._decode()
        ev, self.buf = self.buf.split(b"\n\n", 1)
        ev = ev.decode("utf-8")
        if not ev.startswith("data: "):
            raise AssertionError("malformed SSE event %r" % ev[:200])
        return ev[len("data: "):]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---- Prometheus text ------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_metrics(text):
    """[(name, {label: value}, float)] of every sample; raises on a line
    that is neither a comment nor a well-formed sample."""
    out = []
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = _SAMPLE.match(ln)
        if not m:
            raise AssertionError("bad metrics line %r" % ln)
        labels = {}
        if m.group(3):
            pos = 0
            s = m.group(3)
            while pos < len(s):
                lm = _LABEL.match(s, pos)
                if not lm:
                    raise AssertionError("bad labels in %r" % ln)
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
        out.append((m.group(1), labels, float(m.group(4))))
    return out


def metric_value(samples, name, **labels):
    """The value of the one sample of name whose labels include labels, or None."""
    hits = [v for n, l, v in samples if n == name and all(l.get(k) == str(x) for k, x in labels.items())]
    if len(hits) > 1:
        raise AssertionError("%d samples of %s%r" % (len(hits), name, labels))
    return hits[0] if hits else None


def get_metrics(port, key, timeout=10):
    """The parsed /metrics of the server on port, read with key (its
    metrics key or its admin key)."""
    r = request(port, "GET", "/metrics", key=key, timeout=timeout)
    if r.status != 200:
        raise AssertionError("GET /metrics: %r" % r)
    return parse_metrics(r.body.decode())


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Poll pred() until it returns a true value; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def free_port():
    """A port nothing listens on right now (for helpers such as prometheus)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- command line: run a program against a live server ----------------------------


def _tenant_arg(env, spec):
    """NAME:TIER[:key=value...] -> Tenant."""
    parts = spec.split(":")
    if len(parts) < 2:
        raise SystemExit("harness: --tenant wants NAME:TIER[:limit=value...], got %r" % spec)
    limits = dict(p.split("=", 1) for p in parts[2:])
    return Tenant(env, parts[0], parts[1], **limits)


def main(argv=None):
    """serve-and-run: start a server, run a command with its address and keys
    in the environment (TS_BASE_URL, TS_PORT, TS_MODEL, TS_KEY_<TENANT>,
    TS_ADMIN_KEY, TS_METRICS_KEY), stop the server, and fail unless both the command and the
    server's shutdown succeeded."""
    ap = argparse.ArgumentParser(prog="harness.py serve-and-run")
    ap.add_argument("what", choices=["serve-and-run"])
    ap.add_argument("--name", required=True, help="scratch folder name under TS_TMPDIR")
    ap.add_argument("--tenant", action="append", default=[], help="NAME:TIER[:limit=value...]")
    ap.add_argument("--timeout", type=float, default=120, help="seconds the command may run")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        ap.error("the command to run goes after --")
    cut = argv.index("--")
    a = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    env = Env(a.name)
    model = make_model(env)
    tenants = [_tenant_arg(env, t) for t in a.tenant] or [Tenant(env, "default", "gold")]
    srv = Server(env, a.name, [Model("tiny", model)], tenants).start()
    child_env = dict(os.environ, TS_PORT=str(srv.port), TS_BASE_URL="http://127.0.0.1:%d" % srv.port,
                     TS_MODEL="tiny", TS_ADMIN_KEY=srv.admin_key, TS_METRICS_KEY=srv.metrics_key)
    for t in tenants:
        child_env["TS_KEY_" + re.sub(r"[^A-Z0-9]", "_", t.name.upper())] = t.key
    try:
        rc = subprocess.run(cmd, env=child_env, timeout=a.timeout).returncode
    except subprocess.TimeoutExpired:
        log("harness: %s ran past %ss" % (cmd[0], a.timeout))
        rc = 124
    src = srv.stop()
    if src != 0:
        log("harness: the server exited with %r after SIGTERM; stderr:\n%s" % (src, srv.stderr()[-3000:]))
        rc = rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
