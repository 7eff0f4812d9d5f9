"""slowloris.py - `tessera serve` against a slow-header flood and per-address
connection limits (serve/gate.h). Run by tests/slowloris.sh.

Phase 1, the flood. A server with header_timeout_s: 2 and max_connections:
1000 (reserved_connections defaults to 125, so at most 875 anonymous
connections). 2,000 connections from 20 source addresses (127.0.1.1 to
127.0.1.20; the loopback takes any 127.x.y.z) each send a request line and
then one header byte every 0.5 s, never finishing their headers: more than
the server's whole connection limit, the attack that used to lock every
tenant out. While the flood is open, a tenant on 127.0.0.1 sends three
authenticated completions, 0.1, 0.8 and 1.5 s after the last flood
connection opened: each must be answered 200 within TENANT_MAX_S. Every
flood connection must be closed by the server within DEADLINE_S + SLACK_S
of its connect (either at its read deadline, or earlier, when it gives way
to newer anonymous connections at the cap).

Phase 2, per address and per request. A server with max_connections_per_ip:
8 and header_timeout_s: 3: eight kept-alive connections from 127.0.0.2 are
served, the ninth from 127.0.0.2 is closed without an answer, 127.0.0.3 is
still served at the same moment, and once one of the eight closes,
127.0.0.2 can connect again. Then the deadline's other two sides: a kept-
alive connection left idle after an answer is closed header_timeout_s after
that answer (not before), and a tenant whose headers are in but whose body
drips is closed at its deadline too (a valid key buys no time), counted as
rejected_read_timeout.

Phase 3, a stall. The server is stopped (SIGSTOP) for 4 s with
header_timeout_s: 2 while 24 connections it had accepted send whole
requests: after SIGCONT every one is answered 200 (the requests were in
time; the server was not reading), and a connection that sent nothing is
still closed at its deadline.

Everything talks to 127.0.0.x only; every wait has a deadline, and the
script stops by itself. It prints the measured numbers.
"""

import http.client
import os
import re
import resource
import select
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Env, Model, Server, Tenant, log, make_model, request  # noqa: E402

N_FLOOD = 2000
FLOOD_ADDRS = ["127.0.1.%d" % i for i in range(1, 21)]
DEADLINE_S = 2          # header_timeout_s
SLACK_S = 1.0           # the reaper's 50 ms period, the server's close, this loop's poll
DRIP_S = 0.5
TENANT_MAX_S = 1.0
TENANT_AT = (0.1, 0.8, 1.5)   # s after the flood is open
DRIP = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        log("slowloris: FAIL: " + what)


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Flood:
    """N sockets that open, send a request line and drip one header byte
    every DRIP_S; records when each was opened and when the server closed it."""

    def __init__(self, port, n, addrs):
        self.port = port
        self.socks = {}             # fd -> socket, still open
        self.opened = {}            # fd -> monotonic time of connect
        self.closed = {}            # fd -> monotonic time the server's close was seen
        self.sent = {}              # fd -> bytes of DRIP sent
        self.refused = 0            # connects that failed outright
        self.ep = select.epoll()
        for i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((addrs[i % len(addrs)], 0))
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                self.refused += 1
                s.close()
                continue
            s.setblocking(False)
            fd = s.fileno()
            self.socks[fd] = s
            self.opened[fd] = time.monotonic()
            self.sent[fd] = 0
            self.ep.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
            self._drip(fd)
        self.open_at = time.monotonic()

    def _gone(self, fd, now, by_server=True):
        s = self.socks.pop(fd, None)
        if s is None:
            return
        if by_server:
            self.closed[fd] = now
        try:
            self.ep.unregister(fd)
        except OSError:
            pass
        s.close()

    def _drip(self, fd):
        i = self.sent[fd]
        b = DRIP[i:i + 1] if i < len(DRIP) else b"a"
        try:
            self.socks[fd].send(b)
            self.sent[fd] = i + 1
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._gone(fd, time.monotonic())

    def run(self, until, stop_when_empty=True):
        """Drip and watch for closes until the monotonic time until."""
        next_drip = time.monotonic() + DRIP_S
        while time.monotonic() < until and (self.socks or not stop_when_empty):
            wait = max(0.0, min(next_drip, until) - time.monotonic())
            for fd, ev in self.ep.poll(min(wait, 0.05)):
                now = time.monotonic()
                try:
                    data = self.socks[fd].recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._gone(fd, now)
            if time.monotonic() >= next_drip:
                for fd in list(self.socks):
                    self._drip(fd)
                next_drip += DRIP_S

    def close_all(self):
        """Close what the server left open (not counted as its closes)."""
        for fd in list(self.socks):
            self._gone(fd, time.monotonic(), by_server=False)
        self.ep.close()


def tenant_requests(srv, flood_open_at, out):
    """The tenant's completions at TENANT_AT after the flood opened:
    [(status or exception, seconds)]."""
    body = {"model": "tiny", "prompt": "still here?", "max_tokens": 4}
    for at in TENANT_AT:
        delay = flood_open_at + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t0 = time.monotonic()
        try:
            r = request(srv.port, "POST", "/v1/completions", body, key=srv.key("tenant"), timeout=5)
            out.append((r.status, time.monotonic() - t0))
        except (OSError, http.client.HTTPException) as e:
            out.append((repr(e), time.monotonic() - t0))


def phase_flood(env, model):
    tenant = Tenant(env, "tenant", "gold")
    # Only keys the server had before this defence, so the same test runs
    # against an older binary (it then fails: that is the point).
    srv = Server(env, "flood", [Model("tiny", model)], [tenant], metrics=False,
                 limits={"header_timeout_s": DEADLINE_S, "idle_timeout_s": 30, "max_connections": 1000,
                         "shutdown_grace_s": 1}).start()
    # A first request, so the tenant's timings below are not a cold start.
    r = request(srv.port, "POST", "/v1/completions", {"model": "tiny", "prompt": "warm", "max_tokens": 2},
                key=srv.key("tenant"))
    check(r.status == 200, "warm-up request answered %r" % r)
    t0 = time.monotonic()
    flood = Flood(srv.port, N_FLOOD, FLOOD_ADDRS)
    opened_in = flood.open_at - t0
    still_open = len(flood.socks)
    results = []
    th = threading.Thread(target=tenant_requests, args=(srv, flood.open_at, results), daemon=True)
    th.start()
    # Drip until every flood connection is closed, or well past the point
    # where each should have been.
    flood.run(flood.open_at + DEADLINE_S + SLACK_S + 2)
    th.join(10)
    open_left = len(flood.socks)
    flood.close_all()
    srv_rc = srv.stop()

    log("slowloris: %d flood connections opened in %.2f s (%d refused at connect), %d still open then"
        % (len(flood.opened), opened_in, flood.refused, still_open))
    for (st, took), at in zip(results, TENANT_AT):
        log("slowloris: tenant request at +%.1f s: %s in %.3f s" % (at, st, took))
    check(len(results) == len(TENANT_AT), "the tenant's requests did not all finish: %r" % results)
    for st, took in results:
        check(st == 200 and took <= TENANT_MAX_S,
              "tenant request answered %s in %.3f s (want 200 within %.1f s)" % (st, took, TENANT_MAX_S))

    lifetimes = sorted(flood.closed[fd] - flood.opened[fd] for fd in flood.closed)
    if lifetimes:
        early = sum(1 for x in lifetimes if x < DEADLINE_S - 0.25)
        at_deadline = len(lifetimes) - early
        pct = lambda q: lifetimes[min(len(lifetimes) - 1, int(q * len(lifetimes)))]  # noqa: E731
        log("slowloris: flood connections closed: %d of %d; %d gave way early (before %.2f s), %d at the "
            "deadline; lifetime min %.3f s, median %.3f s, p99 %.3f s, max %.3f s"
            % (len(lifetimes), len(flood.opened), early, DEADLINE_S - 0.25, at_deadline, lifetimes[0],
               pct(0.5), pct(0.99), lifetimes[-1]))
        deadline_closed = [x for x in lifetimes if x >= DEADLINE_S - 0.25]
        if deadline_closed:
            log("slowloris: of those at the deadline: first %.3f s, last %.3f s after connect (deadline %d s)"
                % (deadline_closed[0], deadline_closed[-1], DEADLINE_S))
    check(open_left == 0, "%d flood connections still open %.1f s after the flood" %
          (open_left, DEADLINE_S + SLACK_S + 2))
    late = [x for x in lifetimes if x > DEADLINE_S + SLACK_S]
    check(not late, "%d flood connections lived past %.1f s (deadline + slack); longest %.3f s"
          % (len(late), DEADLINE_S + SLACK_S, max(late) if late else 0))
    check(srv_rc == 0, "the flood server exited with %r; stderr: %s" % (srv_rc, srv.stderr()[-2000:]))


def raw_health(src, port, timeout=3):
    """A kept-alive connection from address src that got one /health answer;
    the socket, or None when the server closed it without an answer."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            d = s.recv(4096)
            if not d:
                break
            data += d
    except (ConnectionResetError, BrokenPipeError):
        data = b""
    if not data.startswith(b"HTTP/1.1 200"):
        s.close()
        return None
    return s


def wait_closed(s, limit):
    """Seconds until the server closes s (reading and dropping what comes),
    or None past limit seconds."""
    t0 = time.monotonic()
    s.settimeout(0.1)
    while time.monotonic() - t0 < limit:
        try:
            if not s.recv(4096):
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def check_idle_keepalive(srv, timeout_s):
    s = raw_health("127.0.0.4", srv.port)
    check(s is not None, "127.0.0.4 was not served")
    if not s:
        return
    took = wait_closed(s, timeout_s + SLACK_S + 2)
    s.close()
    check(took is not None and timeout_s - 0.1 <= took <= timeout_s + SLACK_S,
          "an idle kept-alive connection was closed %s s after its answer (want %d s, slack %.1f s)"
          % (took, timeout_s, SLACK_S))
    log("slowloris: idle kept-alive connection closed %.3f s after its answer (header_timeout_s %d)"
        % (took or -1, timeout_s))


def check_body_drip(srv, timeout_s):
    before = tenant_outcome(srv, "rejected_read_timeout")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.5", 0))
    s.connect(("127.0.0.1", srv.port))
    t0 = time.monotonic()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
              srv.key("tenant").encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{")
    s.settimeout(DRIP_S)
    took = None
    while time.monotonic() - t0 < timeout_s + SLACK_S + 2:
        try:
            if not s.recv(4096):
                took = time.monotonic() - t0
                break
        except socket.timeout:
            try:
                s.send(b" ")
            except OSError:
                took = time.monotonic() - t0
                break
        except OSError:
            took = time.monotonic() - t0
            break
    s.close()
    check(took is not None and took <= timeout_s + SLACK_S,
          "a tenant dripping its body was closed after %s s (want within %d s + %.1f s)" % (took, timeout_s, SLACK_S))
    log("slowloris: a tenant dripping its body closed %.3f s after connect (header_timeout_s %d)"
        % (took or -1, timeout_s))
    deadline = time.monotonic() + 3
    while tenant_outcome(srv, "rejected_read_timeout") != before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    check(tenant_outcome(srv, "rejected_read_timeout") == before + 1,
          "the dripping tenant's request was not counted as rejected_read_timeout")


def tenant_outcome(srv, outcome):
    r = request(srv.port, "GET", "/metrics", key=srv.metrics_key)
    m = re.search(r'^tessera_requests_total\{tenant="tenant",outcome="%s"\} (\S+)$' % outcome,
                  r.body.decode(), re.M)
    return float(m.group(1)) if m else None


def phase_limits(env, model):
    tenant = Tenant(env, "tenant", "gold")
    per_ip, timeout_s = 8, 3
    srv = Server(env, "per_ip", [Model("tiny", model)], [tenant],
                 limits={"header_timeout_s": timeout_s, "max_connections_per_ip": per_ip, "shutdown_grace_s": 1})
    try:
        srv.start()
    except RuntimeError as e:
        check(False, "the per-IP server did not start: %s" % e)
        return
    held = []
    try:
        for i in range(per_ip):
            s = raw_health("127.0.0.2", srv.port)
            check(s is not None, "connection %d of %d from 127.0.0.2 was not served" % (i + 1, per_ip))
            if s:
                held.append(s)
        t0 = time.monotonic()
        extra = raw_health("127.0.0.2", srv.port)
        check(extra is None, "connection %d from 127.0.0.2 was served past max_connections_per_ip %d"
              % (per_ip + 1, per_ip))
        refused_in = time.monotonic() - t0
        if extra:
            extra.close()
        other = raw_health("127.0.0.3", srv.port)
        check(other is not None, "127.0.0.3 was refused while 127.0.0.2 was at its limit")
        if other:
            other.close()
        r = request(srv.port, "POST", "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2},
                    key=srv.key("tenant"))
        check(r.status == 200, "the tenant (127.0.0.1) was not served: %r" % r)
        # The limit counts open connections: one closed, one more may come.
        held.pop().close()
        deadline = time.monotonic() + 3
        again = None
        while again is None and time.monotonic() < deadline:
            again = raw_health("127.0.0.2", srv.port)
            if again is None:
                time.sleep(0.05)
        check(again is not None, "127.0.0.2 could not connect again after closing one of its connections")
        if again:
            held.append(again)
        log("slowloris: per-IP limit %d: connection %d from 127.0.0.2 refused in %.3f s; 127.0.0.3 served; "
            "127.0.0.2 served again after a close" % (per_ip, per_ip + 1, refused_in))
        for s in held:
            s.close()
        held = []
        check_idle_keepalive(srv, timeout_s)
        check_body_drip(srv, timeout_s)
    finally:
        for s in held:
            s.close()
        rc = srv.stop()
        check(rc == 0, "the per-IP server exited with %r; stderr: %s" % (rc, srv.stderr()[-2000:]))


def phase_stall(env, model):
    """The server stops (SIGSTOP: a paused VM, a starved process) while
    requests sit in its sockets, for longer than header_timeout_s. Those
    requests arrived in time; reading them late is the server's delay, so
    every one must be answered 200 after SIGCONT, none cut at its deadline.
    A connection that never sends a request is still closed at its
    deadline after the stall (watched from before SIGCONT)."""
    tenant = Tenant(env, "tenant", "gold")
    timeout_s, n, stop_s = 2, 24, 4.0
    srv = Server(env, "stall", [Model("tiny", model)], [tenant],
                 limits={"header_timeout_s": timeout_s, "shutdown_grace_s": 1})
    try:
        srv.start()
    except RuntimeError as e:
        check(False, "the stall server did not start: %s" % e)
        return
    body = b'{"model":"tiny","prompt":"hi","max_tokens":2}'
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + srv.key("tenant").encode() +
           b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    socks, silent, closed = [], None, {}
    try:
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=10))
        silent = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        time.sleep(0.1)                 # accepted: their deadlines run
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            for s in socks:
                s.sendall(req)
            watcher = threading.Thread(target=lambda: closed.update(at=wait_closed(silent, stop_s + timeout_s + 5)))
            watcher.start()
            t_stop = time.monotonic()
            time.sleep(stop_s)
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        answered = 0
        for s in socks:
            data = b""
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    data += d
            except OSError:
                pass
            answered += data.startswith(b"HTTP/1.1 200")
        check(answered == n, "after a %.1f s stall, %d of %d requests that arrived during it were answered 200"
              % (stop_s, answered, n))
        watcher.join()
        took = t_stop + closed["at"] - resumed if closed.get("at") is not None else None
        check(took is not None and 0 <= took <= timeout_s + SLACK_S,
              "a connection that sent nothing was closed %s s after the stall (want within %d s + %.1f s)"
              % (took, timeout_s, SLACK_S))
        log("slowloris: after a %.1f s SIGSTOP (header_timeout_s %d): %d of %d requests sent during it answered; "
            "a silent connection closed %.3f s after SIGCONT" % (stop_s, timeout_s, answered, n,
                                                                 -1 if took is None else took))
    finally:
        for s in socks + ([silent] if silent else []):
            s.close()
        rc = srv.stop()
        check(rc == 0, "the stall server exited with %r; stderr: %s" % (rc, srv.stderr()[-2000:]))


def main():
    env = Env("slowloris")
    fds = raise_fd_limit()
    if fds < N_FLOOD + 200:
        log("slowloris: FAIL: only %d file descriptors (RLIMIT_NOFILE hard limit); %d needed"
            % (fds, N_FLOOD + 200))
        return 1
    model = make_model(env)
    phase_flood(env, model)
    if os.environ.get("TS_SLOWLORIS_ONLY_FLOOD") != "1":
        phase_limits(env, model)
        phase_stall(env, model)
    print("slowloris: %s" % ("all checks passed" if not failures else "%d FAILED" % len(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
