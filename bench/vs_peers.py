#!/usr/bin/env python3
"""The driver of bench/vs-peers.sh (run that: it builds the binary and installs nginx and wrk).

Every generator runs pinned to LOAD_CPU, the target to SERVER_CPU, one after the other against the
same target in the same run, REPS times (in reversed order every other repeat); the table gives
medians, the ratios of the medians to wrk, oha and h2load, and the ratios to wrk (h2load for h2)
within each repeat.

Generators: Stampede as `run --local` (controller and agent in one process, what users run on one
machine: the process's CPU and peak RSS from /usr/bin/time) and as a separate agent process
(`stampede agent` next to a `stampede controller` process: the agent's CPU from /proc over the
run and its peak RSS, VmHWM); wrk, oha, hey and vegeta when installed.

Cases:
  closed       50 keep-alive connections, as fast as possible: requests per generator CPU-second
  closed-fast  the same against the project's own target (`stampede target http`)
  constant     5,000 requests/s over 50 connections: generator CPU per request
  newconn      a new connection per request, 50 at a time: connections/s, p99, TIME_WAIT sides
  conns        10,000 concurrent keep-alive connections: peak RSS
  tls          50 keep-alive connections over TLS 1.3 (nginx, RSA-2048): requests per CPU-second
  tls-newconn  a new TLS connection per request, sessions resumed (Stampede's default, what
               clients do): connections per CPU-second
  tls-full     the same with a full handshake each (Stampede `tls: { resumption: false }`)
  h2           h2 over TLS, 10 connections x 10 streams each: requests per CPU-second
  h2c          the same in cleartext, by prior knowledge
  ws           WebSocket round trips against `stampede target http`'s /ws echo, 50 connections, a
               16-byte text message and its echo at a time: messages per CPU-second, beside the same
               target's HTTP/1.1 keep-alive GET as Stampede runs it (closed-fast's load), the cost of
               a message against a request's
  sse          server-sent events from `stampede target http`'s /sse, 50 connections, 100 events per
               reply sent at once: events per CPU-second, beside the same HTTP/1.1 reference
  sessions     a realistic session against `stampede target http`, 50 users back to back: a login
               (POST /echo with a data row, the token taken from its JSON answer, its status
               checked) and three GET /data?bytes=100 carrying the token, each body checked:
               sessions per CPU-second, beside Locust (FastHttpUser) and Artillery when installed

wrk (4.1, as Debian builds it) resumes the session of a connection's predecessor, as Stampede
does by default. No HTTP generator here can turn that off, so the TLS connection cases also run
`openssl s_time` (a connection, a `GET /` and its answer at a time): `-reuse` beside tls-newconn,
`-new` (every handshake full) beside tls-full.

Latency: "p99 ms" is each tool's own headline p99 (Stampede's response time, from the intended
send, the connect included; oha and hey include the connect too); "send p99" is Stampede's service
time, from the request's actual send, after any connect: what wrk times.

Which side was the limit: the core whose process used >= 90 % of it over the run (target or
generator); "neither" when both had room (latency-bound, or a rate was asked for).
"""
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORK = Path(os.environ["WORK"])
BIN = os.environ["BIN"]
NGINX_PORT = int(os.environ.get("NGINX_PORT", "18090"))
FAST_PORT = int(os.environ.get("FAST_PORT", "18091"))
# nginx over TLS (HTTP/1.1 and h2 by ALPN) on TLS_PORT, h2c on the next port (vs-peers.sh).
TLS_PORT = int(os.environ.get("TLS_PORT", "18092"))
H2C_PORT = TLS_PORT + 1
TLS_PIDS = [int(p) for p in os.environ.get("TLS_PIDS", "").split()]
TLS_CA = os.environ.get("TLS_CA", "")
CTL_PORT = int(os.environ.get("CTL_PORT", "17990"))
SERVER_CPU = os.environ.get("SERVER_CPU", "0")
LOAD_CPU = os.environ.get("LOAD_CPU", "1")
DUR = int(os.environ.get("DURATION", "10").rstrip("s"))
REPS = int(os.environ.get("REPS", "3"))
HZ = os.sysconf("SC_CLK_TCK")
NGINX_PIDS = [int(p) for p in os.environ.get("NGINX_PIDS", "").split()]
FAST_PID = int(os.environ.get("FAST_PID", "0") or 0)
HOME = Path.home()
# The least a generator can do (bench/mingen/mingen.c), compiled by vs-peers.sh; empty when no
# C compiler was found.
MINGEN = os.environ.get("MINGEN", "")


def which(name, *extra):
    for d in os.environ.get("PATH", "").split(":"):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    for e in extra:
        if os.access(e, os.X_OK):
            return str(e)
    return None


TOOLS = {
    "wrk": which("wrk"),
    "oha": which("oha", HOME / ".cargo/bin/oha"),
    "hey": which("hey"),
    "vegeta": which("vegeta", HOME / "go/bin/vegeta"),
    "h2load": which("h2load"),
    "locust": which("locust", os.environ.get("LOCUST", "")),
    "artillery": which("artillery"),
}

# What each case loads: the port, the connections, the rate (None: as fast as possible), a new
# connection per request, and the protocol ("http", "tls", "tls-full", "h2", "h2c").
CASES = {
    "closed": (None, 50, None, False, "http"),
    "closed-fast": (None, 50, None, False, "http"),
    "constant": (None, 50, 5000, False, "http"),
    "newconn": (None, 50, None, True, "http"),
    "conns": (None, 10000, None, False, "http"),
    "tls": (TLS_PORT, 50, None, False, "tls"),
    "tls-newconn": (TLS_PORT, 50, None, True, "tls"),
    "tls-full": (TLS_PORT, 50, None, True, "tls-full"),
    "h2": (TLS_PORT, 10, None, False, "h2"),
    "h2c": (H2C_PORT, 10, None, False, "h2c"),
    "sessions": (FAST_PORT, 50, None, False, "sessions"),
    "ws": (FAST_PORT, 50, None, False, "ws"),
    "sse": (FAST_PORT, 50, None, False, "sse"),
}
# A WebSocket session's round trips after its connect, and an SSE reply's events.
WS_ROUNDS = 1000
SSE_EVENTS = 100
# The sessions case's users: a data file of this many rows.
USERS = 10_000
# Streams in flight on each h2 connection.
H2_STREAMS = 10


def ticks(pids):
    total = 0
    for p in pids:
        try:
            s = Path(f"/proc/{p}/stat").read_text()
            f = s[s.rindex(")") + 2:].split()
            total += int(f[11]) + int(f[12])
        except (OSError, ValueError):
            pass
    return total


def hwm_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def timewait(port):
    def count(flt):
        r = subprocess.run(["ss", "-Htn", "state", "time-wait", flt], capture_output=True, text=True)
        return r.stdout.count("\n")
    return count(f"( dport = :{port} )"), count(f"( sport = :{port} )")


def dur_ms(s):
    unit = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}
    parts = re.findall(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m)", s)
    return sum(float(v) * unit[u] for v, u in parts) if parts else None


def timed(argv, tag):
    """Runs argv pinned under /usr/bin/time; returns (stdout, wall, cpu_s, rss_kb)."""
    tf = WORK / f"{tag}.time"
    full = ["taskset", "-c", LOAD_CPU, "/usr/bin/time", "-f", "%e %U %S %M", "-o", str(tf)] + argv
    out = subprocess.run(full, capture_output=True, text=True, timeout=DUR + 120).stdout
    e, u, s, m = tf.read_text().split()[-4:]
    return out, float(e), float(u) + float(s), int(m)


# ---------------------------------------------------------------- Stampede
def users_file():
    f = WORK / "users.csv"
    if not f.exists():
        f.write_text("id,name\n" + "".join(f"{i},user{i}\n" for i in range(USERS)))
    return f


SESSION = """data:
  users: {{ file: {users}, on_exhausted: wrap }}
session:
  - name: login
    http:
      method: POST
      path: '/echo?user=${{users.name}}'
      headers: {{ content-type: application/json }}
      body: '{{"token":"tok-${{users.id}}","status":"ok"}}'
    extract: {{ token: {{ json: /token }} }}
    check: {{ status: [200], json: {{ /status: ok }} }}
  - name: data
    http: {{ method: GET, path: '/data?bytes=100', headers: {{ authorization: 'Bearer ${{token}}' }} }}
    repeat: 3
    check: {{ status: [200], body_contains: abcdefghij }}
"""


def scenario(tag, port, load, new_connection=False, proto="http"):
    scheme = "https" if proto in ("tls", "tls-full", "h2") else "ws" if proto == "ws" else "http"
    extra = ""
    if scheme == "https":
        extra += f"tls: {{ ca_file: {TLS_CA}" + (", resumption: false" if proto == "tls-full" else "") + " }\n"
    if proto in ("h2", "h2c"):
        extra += 'http_version: "2"\n'
    if proto == "sessions":
        session = SESSION.format(users=users_file())
    elif proto == "ws":
        session = ("session:\n  - name: open\n    ws: { connect: { path: /ws } }\n"
                   "  - name: echo\n    ws: { send: { text: 0123456789abcdef }, receive: 1 }\n"
                   f"    repeat: {WS_ROUNDS}\n")
    elif proto == "sse":
        session = f"session:\n  - http: {{ method: GET, path: '/sse?events={SSE_EVENTS}&gap_ms=0', stream: sse }}\n"
    else:
        step = "  - http: { method: GET, path: / }" + ("\n    new_connection: true" if new_connection else "")
        session = f"session:\n{step}\n"
    y = WORK / f"{tag}.yaml"
    y.write_text(f"name: {tag}\ntarget: {scheme}://127.0.0.1:{port}\nagents: 1\nrequest_timeout: 10s\n"
                 f"{extra}load: {load}\n{session}")
    return y


def report_metrics(path):
    d = json.loads(Path(path).read_text())
    t, rt, st = d["totals"], d["latency"]["response_time"], d["latency"]["service_time"]
    # WebSocket messages are the echo step's round trips; SSE events are the streamed step's.
    messages = sum(s["completed"] for s in d.get("steps", []) if s["name"] == "echo")
    events = sum((s.get("stream") or {}).get("events", 0) for s in d.get("steps", []))
    return {"requests": t["completed"], "rps": t["throughput_rps"], "p99": rt["p99_us"] / 1000,
            "svc_p99": st["p99_us"] / 1000, "errors": sum(t["errors"].values()),
            "sessions": t["sessions"]["completed"], "messages": messages, "events": events}


def stampede_local(tag, port, load, new_connection=False, proto="http"):
    y, rep = scenario(tag, port, load, new_connection, proto), WORK / f"{tag}.json"
    _, wall, cpu, rss = timed([BIN, "run", str(y), "--local", "--agents", "1", "--quiet", "--report", str(rep)], tag)
    m = report_metrics(rep)
    m.update(wall=wall, cpu=cpu, rss_kb=rss)
    return m


def stampede_agent(tag, port, load, new_connection=False, proto="http"):
    y, rep = scenario(tag, port, load, new_connection, proto), WORK / f"{tag}.json"
    log = open(WORK / f"{tag}.agent.log", "w")
    agent = subprocess.Popen(["taskset", "-c", LOAD_CPU, BIN, "agent", "--controller",
                              f"http://127.0.0.1:{CTL_PORT}", "--id", "bench-agent"],
                             stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG="warn"))
    try:
        time.sleep(1.0)
        c0, t0 = ticks([agent.pid]), time.time()
        subprocess.run([BIN, "run", str(y), "--controller", f"http://127.0.0.1:{CTL_PORT}", "--quiet",
                        "--report", str(rep)], capture_output=True, timeout=DUR + 120)
        cpu, wall, rss = (ticks([agent.pid]) - c0) / HZ, time.time() - t0, hwm_kb(agent.pid)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    m = report_metrics(rep)
    m.update(wall=wall, cpu=cpu, rss_kb=rss)
    return m


# ---------------------------------------------------------------- peers
def floor(tag, port, conns, rate=None):
    """bench/mingen (built by vs-peers.sh): the same send and recv per request through one epoll
    set, and nothing else, so its row is the syscalls' share that no generator can shed."""
    out, wall, cpu, rss = timed([MINGEN, str(port), str(rate or 0), str(conns), str(DUR)], tag)
    n = int(re.search(r"answered (\d+)", out).group(1))
    return {"requests": n, "rps": n / DUR, "p99": None, "errors": 0, "wall": wall, "cpu": cpu, "rss_kb": rss}


def url(port):
    return f"{'https' if port == TLS_PORT else 'http'}://127.0.0.1:{port}/"


def wrk(tag, port, conns, close=False):
    argv = [TOOLS["wrk"], "-t1", f"-c{conns}", f"-d{DUR}s", "--latency", "--timeout", "10s"]
    out, wall, cpu, rss = timed(argv + (["-H", "Connection: close"] if close else []) + [url(port)], tag)
    n = re.search(r"(\d+) requests in", out)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    err = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    n = int(n.group(1)) if n else 0
    return {"requests": n, "rps": n / DUR, "p99": dur_ms(p99.group(1)) if p99 else None,
            "errors": sum(map(int, err.groups())) if err else 0, "wall": wall, "cpu": cpu, "rss_kb": rss}


def oha(tag, port, conns, rate=None, close=False, h2=False):
    argv = [TOOLS["oha"], "--no-tui", "--output-format", "json", "--worker-threads", "1", "-c", str(conns),
            "-z", f"{DUR}s"] + (["-q", str(rate)] if rate else []) + (["--disable-keepalive"] if close else [])
    argv += ["--insecure"] if port == TLS_PORT else []
    argv += ["--http2", "-p", str(H2_STREAMS)] if h2 else []
    out, wall, cpu, rss = timed(argv + [url(port)], tag)
    j = json.loads(out[out.index("{"):])
    n = sum(j.get("statusCodeDistribution", {}).values())
    p99 = (j.get("latencyPercentiles") or {}).get("p99")
    return {"requests": n, "rps": n / DUR, "p99": p99 * 1000 if p99 else None,
            "errors": sum((j.get("errorDistribution") or {}).values()), "wall": wall, "cpu": cpu, "rss_kb": rss}


def h2load(tag, port, conns):
    """nghttp2's h2load, one thread, H2_STREAMS streams per connection (h2 by ALPN over TLS, by
    prior knowledge in cleartext)."""
    argv = [TOOLS["h2load"], "-t1", f"-c{conns}", f"-m{H2_STREAMS}", "-D", str(DUR), url(port)]
    out, wall, cpu, rss = timed(argv, tag)
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    n = int(m.group(1)) if m else 0
    return {"requests": n, "rps": n / DUR, "p99": None,
            "errors": int(m.group(2)) + int(m.group(3)) if m else 0, "wall": wall, "cpu": cpu, "rss_kb": rss}


def s_time(tag, port, resume):
    """`openssl s_time`: one connection at a time, each a handshake (resumed with -reuse, full
    with -new), a `GET /` and the answer."""
    argv = ["openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-reuse" if resume else "-new",
            "-time", str(DUR), "-www", "/", "-CAfile", TLS_CA]
    out, wall, cpu, rss = timed(argv, tag)
    m = re.search(r"(\d+) connections in [\d.]+s;", out)
    n = int(m.group(1)) if m else 0
    return {"requests": n, "rps": n / DUR, "p99": None, "errors": 0, "wall": wall, "cpu": cpu, "rss_kb": rss}


LOCUSTFILE = """import csv, itertools, os
from locust import FastHttpUser, constant, task

ROWS = itertools.cycle(list(csv.DictReader(open(os.environ["USERS"]))))


class User(FastHttpUser):
    wait_time = constant(0)

    @task
    def session(self):
        row = next(ROWS)
        with self.client.post("/echo?user=" + row["name"], json={"token": "tok-" + row["id"], "status": "ok"},
                              name="login", catch_response=True) as r:
            body = r.json()
            if r.status_code != 200 or body.get("status") != "ok":
                r.failure("login")
                return
            token = body["token"]
        for _ in range(3):
            with self.client.get("/data?bytes=100", headers={"authorization": "Bearer " + token},
                                 name="data", catch_response=True) as r:
                if r.status_code != 200 or "abcdefghij" not in r.text:
                    r.failure("data")
                    return
"""


def locust(tag, port, users):
    """Locust, one process (gevent), FastHttpUser: a session per task, no wait. Its sessions are
    its checked data requests over three (from its stats CSV; at most one session per user is
    cut off by the end of the run)."""
    lf = WORK / "locustfile.py"
    lf.write_text(LOCUSTFILE)
    os.environ["USERS"] = str(users_file())
    argv = [TOOLS["locust"], "-f", str(lf), "--headless", "-u", str(users), "-r", str(users), "-t", f"{DUR}s",
            "--host", f"http://127.0.0.1:{port}", "--csv", str(WORK / tag), "--only-summary", "--loglevel", "ERROR"]
    _, wall, cpu, rss = timed(argv, tag)
    rows = {r["Name"]: r for r in csv.DictReader(open(WORK / f"{tag}_stats.csv"))}
    done = lambda n: int(rows[n]["Request Count"]) - int(rows[n]["Failure Count"]) if n in rows else 0  # noqa: E731
    reqs = sum(done(n) for n in ("login", "data"))
    return {"requests": reqs, "sessions": done("data") // 3, "rps": reqs / DUR, "p99": None,
            "errors": sum(int(r["Failure Count"]) for r in rows.values() if r["Name"] != "Aggregated"),
            "wall": wall, "cpu": cpu, "rss_kb": rss}


# Artillery's virtual users arrive at a rate (it has no closed loop): each runs one session on a
# connection of its own, so its CPU per session includes a connect that the closed tools share.
ARTILLERY_RATE = 200
ARTILLERY = """config:
  target: http://127.0.0.1:{port}
  phases: [ {{ duration: {dur}, arrivalRate: {rate} }} ]
  payload: {{ path: {users}, fields: [id, name], skipHeader: true }}
  plugins: {{ expect: {{ outputFormat: silent }} }}
scenarios:
  - flow:
      - post:
          url: "/echo?user={{{{ name }}}}"
          json: {{ token: "tok-{{{{ id }}}}", status: ok }}
          capture: [ {{ json: "$.token", as: token }}, {{ json: "$.status", as: status }} ]
          expect: [ {{ statusCode: 200 }}, {{ equals: [ "{{{{ status }}}}", ok ] }} ]
      - loop:
          - get:
              url: /data?bytes=100
              headers: {{ authorization: "Bearer {{{{ token }}}}" }}
              expect: [ {{ statusCode: 200 }}, {{ matchesRegexp: abcdefghij }} ]
        count: 3
"""


def artillery(tag, port):
    """Artillery (npm) with its expect plugin, ARTILLERY_RATE sessions per second: the sessions
    completed and the requests from its JSON report's counters."""
    y, out = WORK / f"{tag}.artillery.yaml", WORK / f"{tag}.artillery.json"
    y.write_text(ARTILLERY.format(port=port, dur=DUR, rate=ARTILLERY_RATE, users=users_file()))
    _, wall, cpu, rss = timed([TOOLS["artillery"], "run", "--quiet", "--output", str(out), str(y)], tag)
    c = json.loads(out.read_text())["aggregate"]["counters"]
    reqs = c.get("http.responses", 0)
    return {"requests": reqs, "sessions": c.get("vusers.completed", 0), "rps": reqs / DUR, "p99": None,
            "errors": c.get("vusers.failed", 0), "wall": wall, "cpu": cpu, "rss_kb": rss}


def hey(tag, port, conns, rate=None, close=False):
    argv = [TOOLS["hey"], "-cpus", "1", "-c", str(conns), "-z", f"{DUR}s"]
    argv += (["-q", str(rate // conns)] if rate else []) + (["-disable-keepalive"] if close else [])
    out, wall, cpu, rss = timed(argv + [url(port)], tag)
    codes = [int(n) for n in re.findall(r"\[\d{3}\]\s+(\d+) responses", out)]
    p99 = re.search(r"99% in ([\d.]+) secs", out)
    n = sum(codes)
    return {"requests": n, "rps": n / DUR, "p99": float(p99.group(1)) * 1000 if p99 else None,
            "errors": 0, "wall": wall, "cpu": cpu, "rss_kb": rss}


def vegeta(tag, port, conns, rate=None, close=False):
    targets, res = WORK / "vegeta-targets.txt", WORK / f"{tag}.bin"
    targets.write_text(f"GET {url(port)}\n")
    argv = [TOOLS["vegeta"], "-cpus", "1", "attack", "-targets", str(targets), "-output", str(res),
            f"-duration={DUR}s"]
    argv += [f"-rate={rate}/1s", f"-connections={conns}"] if rate else \
        ["-rate=0", f"-workers={conns}", f"-max-workers={conns}", f"-connections={conns}"]
    argv += ["-keepalive=false"] if close else []
    _, wall, cpu, rss = timed(argv, tag)
    j = json.loads(subprocess.run([TOOLS["vegeta"], "report", "-type=json", str(res)], capture_output=True,
                                  text=True).stdout)
    res.unlink(missing_ok=True)
    ok = (j.get("status_codes") or {}).get("200", 0)
    return {"requests": ok, "rps": ok / DUR, "p99": j["latencies"]["99th"] / 1e6,
            "errors": j.get("requests", 0) - ok, "wall": wall, "cpu": cpu, "rss_kb": rss}


# ---------------------------------------------------------------- cases
def load(model, conns, rate=None):
    r = f"rate: {rate}, " if rate else ""
    return f"{{ model: {model}, {r}connections: {conns}, duration: {DUR}s }}"


def runners(case):
    """(generator name, function of tag) for this case."""
    port, conns, rate, close, proto = CASES[case]
    port = port or (FAST_PORT if case == "closed-fast" else NGINX_PORT)
    lo = load("constant" if rate else "closed", conns, rate)
    if proto in ("h2", "h2c"):
        lo = lo[:-2] + f", streams_per_connection: {H2_STREAMS} }}"
    out = [("stampede-local", lambda t: stampede_local(t, port, lo, close, proto)),
           ("stampede-agent", lambda t: stampede_agent(t, port, lo, close, proto))]
    if proto in ("ws", "sse"):
        # No peer here loads WebSocket or SSE free of coordinated omission; the reference is the
        # same target's HTTP/1.1 keep-alive GET, run by Stampede in the same repeat.
        ref = load("closed", conns)
        out.append(("http1-reference", lambda t: stampede_local(t, port, ref, False, "http")))
        return out, port
    if proto == "sessions":
        if TOOLS["locust"]:
            out.append(("locust", lambda t: locust(t, port, conns)))
        if TOOLS["artillery"]:
            out.append(("artillery", lambda t: artillery(t, port)))
        return out, port
    if proto in ("h2", "h2c"):
        # wrk, hey and vegeta speak HTTP/1.1 only.
        if TOOLS["h2load"]:
            out.append(("h2load", lambda t: h2load(t, port, conns)))
        if TOOLS["oha"]:
            out.append(("oha", lambda t: oha(t, port, conns, h2=True)))
        return out, port
    if proto != "http":
        # hey and vegeta take no CA and verify certificates; wrk and oha (--insecure) do not.
        # Both resume sessions, so a full handshake per connection has only s_time beside it.
        if proto == "tls":
            out += [(n, lambda t, fn=fn: fn(t, port, conns, close=close))
                    for n, fn in (("wrk", wrk), ("oha", oha)) if TOOLS[n]]
        if close:
            out.append(("openssl-s_time", lambda t: s_time(t, port, proto == "tls")))
        return out, port
    for name, fn in (("wrk", wrk), ("oha", oha), ("hey", hey), ("vegeta", vegeta)):
        if not TOOLS[name] or (name == "wrk" and rate):
            continue
        if name == "wrk":
            out.append((name, lambda t, fn=fn: fn(t, port, conns, close=close)))
        else:
            out.append((name, lambda t, fn=fn: fn(t, port, conns, rate=rate, close=close)))
    # The floor runs the closed loop and the constant rate over kept connections only.
    if MINGEN and case in ("closed", "closed-fast", "constant"):
        out.append(("floor-mingen", lambda t: floor(t, port, conns, rate)))
    return out, port


def target_pids(port):
    if port in (TLS_PORT, H2C_PORT):
        return TLS_PIDS
    return [FAST_PID] if port == FAST_PORT else NGINX_PIDS


def run_case(case, results):
    gens, port = runners(case)
    for rep in range(1, REPS + 1):
        # The order reverses every repeat, so that a machine drifting over the series does not
        # favour whichever tool always runs first.
        for name, fn in (gens if rep % 2 else gens[::-1]):
            tag = f"{case}-{name}-r{rep}"
            tp = target_pids(port)
            t0, w0 = ticks(tp), time.time()
            try:
                m = fn(tag)
            except Exception as e:  # noqa: BLE001 - a tool that fails is reported, the rest go on
                print(f"  {tag}: failed: {e}", flush=True)
                continue
            m["target_cpu_pct"] = 100.0 * (ticks(tp) - t0) / HZ / max(time.time() - w0, 1e-9)
            m["gen_cpu_pct"] = 100.0 * m["cpu"] / max(m["wall"], 1e-9)
            if CASES[case][3]:
                m["tw_client"], m["tw_server"] = timewait(port)
            m.update(case=case, tool=name, rep=rep)
            results.append(m)
            print(f"  {tag}: {m['rps']:.0f} req/s, cpu {m['cpu']:.2f} s, rss {m['rss_kb'] / 1024:.1f} MiB, "
                  f"p99 {m['p99'] or 0:.2f} ms, target cpu {m['target_cpu_pct']:.0f} %, errors {m['errors']}",
                  flush=True)
            if CASES[case][3]:
                # TIME_WAIT left by one generator must not take the next one's ports.
                deadline = time.time() + 70
                while timewait(port)[0] > 5000 and time.time() < deadline:
                    time.sleep(2)


# ---------------------------------------------------------------- table
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ms(v):
    """A latency column: '-' where the generator gives none (the floor times nothing)."""
    return f"{v:8.2f}" if v is not None else f"{'-':>8}"


# The peers a row is compared with, in this order where they ran, and their column names.
PEERS = {"wrk": "wrk", "h2load": "h2load", "locust": "locust", "openssl-s_time": "s_time", "oha": "oha",
         "artillery": "artill.", "floor-mingen": "floor", "http1-reference": "http1"}


def table(results):
    lines = []
    heads = {
        "closed": ("req per CPU-s", lambda r: r["requests"] / r["cpu"] if r["cpu"] else None, True),
        "closed-fast": ("req per CPU-s", lambda r: r["requests"] / r["cpu"] if r["cpu"] else None, True),
        "constant": ("CPU µs per req", lambda r: r["cpu"] / r["requests"] * 1e6 if r["requests"] else None, False),
        "newconn": ("conn/s", lambda r: r["rps"], True),
        "conns": ("peak RSS MiB", lambda r: r["rss_kb"] / 1024, False),
    }
    per_cpu = lambda r: r["requests"] / r["cpu"] if r["cpu"] else None  # noqa: E731
    heads.update({c: ("req per CPU-s", per_cpu, True) for c in ("tls", "h2", "h2c")})
    heads.update({c: ("conn per CPU-s", per_cpu, True) for c in ("tls-newconn", "tls-full")})
    heads["sessions"] = ("sessions/CPU-s", lambda r: r["sessions"] / r["cpu"] if r["cpu"] else None, True)
    # A WebSocket round trip or an SSE event against an HTTP/1.1 request: the reference row has
    # neither, so its requests count.
    def per_cpu_of(key):
        return lambda r: (r[key] or r["requests"]) / r["cpu"] if r["cpu"] else None
    heads["ws"] = ("msg per CPU-s", per_cpu_of("messages"), True)
    heads["sse"] = ("events/CPU-s", per_cpu_of("events"), True)
    for case in dict.fromkeys(r["case"] for r in results):
        title, f, higher = heads[case]
        rs = [r for r in results if r["case"] == case]
        tools = list(dict.fromkeys(r["tool"] for r in rs))
        by = {t: med([f(r) for r in rs if r["tool"] == t]) for t in tools}
        one = {(r["tool"], r["rep"]): f(r) for r in rs}
        lines.append(f"\n{case}: {title} (median of {REPS}; ratio: > 1 is better for the row; "
                     f"paired: the ratio within each repeat, median [lowest-highest])")
        extra = "  TIME_WAIT gen/target" if CASES[case][3] else ""
        # A ratio column for each peer that ran this case; the paired ratio is to the first.
        peers = [p for p in PEERS if p in tools] or ["wrk"]
        pair_peer = peers[0]
        cols = "".join(f" {'/ ' + PEERS[p]:>9}" for p in peers if p in PEERS)
        lines.append(f"  {'generator':16} {title:>14}{cols} "
                     f"{'paired / ' + PEERS.get(pair_peer, pair_peer):>19} "
                     f"{'req/s':>9} {'p99 ms':>8} {'send p99':>8} {'gen CPU%':>8} {'tgt CPU%':>8}  limit{extra}")
        for t in tools:
            tr = [r for r in rs if r["tool"] == t]
            v = by[t]

            def ratio(peer):
                p = by.get(peer)
                if v is None or not p:
                    return "-"
                return f"{(v / p if higher else p / v):.2f}"
            def paired(peer):
                # Runs of one repeat are minutes apart at most: their ratio cancels the drift of
                # the machine that a ratio of medians over the whole series keeps.
                pairs = [(one.get((t, k)), one.get((peer, k))) for k in range(1, REPS + 1)]
                xs = sorted((a / b if higher else b / a) for a, b in pairs if a and b)
                if not xs or t == peer:
                    return "-"
                return f"{statistics.median(xs):.2f} [{xs[0]:.2f}-{xs[-1]:.2f}]"
            gen, tgt = med([r["gen_cpu_pct"] for r in tr]), med([r["target_cpu_pct"] for r in tr])
            limit = "generator" if gen >= 90 else "target" if tgt >= 90 else "neither"
            tw = ""
            if CASES[case][3]:
                tw = f"  {med([r['tw_client'] for r in tr]):.0f}/{med([r['tw_server'] for r in tr]):.0f}"
            ratios = "".join(f" {ratio(p):>9}" for p in peers if p in PEERS)
            lines.append(f"  {t:16} {v if v is not None else float('nan'):14.1f}{ratios} "
                         f"{paired(pair_peer):>19} {med([r['rps'] for r in tr]):9.0f} {ms(med([r['p99'] for r in tr]))} "
                         f"{ms(med([r.get('svc_p99') for r in tr]))} "
                         f"{gen:8.0f} {tgt:8.0f}  {limit}{tw}")
    return "\n".join(lines)


def main():
    cases = sys.argv[1:] or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        sys.exit(f"unknown case {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    print(f"target on cpu {SERVER_CPU}, generators on cpu {LOAD_CPU}, {DUR} s x {REPS}; peers: "
          + ", ".join(k for k, v in TOOLS.items() if v) + "; missing: "
          + (", ".join(k for k, v in TOOLS.items() if not v) or "none"), flush=True)
    results = []
    for case in cases:
        print(f"== {case}", flush=True)
        run_case(case, results)
    out = Path(os.environ.get("OUT", WORK / "results.jsonl"))
    out.write_text("".join(json.dumps(r) + "\n" for r in results))
    print(table(results))
    print(f"\nraw results: {out}")


if __name__ == "__main__":
    main()
