#!/usr/bin/env python3
"""relay_test.py — integration tests of telemark-relay: each case starts the real binary on free
loopback ports (port 0, read back from its log), drives it with tmk-relay-synth (and the chaos
proxy), and checks what the HTTP API reports. Usage: relay_test.py CASE --bin DIR --tmp DIR"""
import argparse
import base64
import collections
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

BIN = TMP = QEMU = PPC_SYNTH = DEMO = SENDTEST = BIG_ENDIAN = None
RELAY = "telemark-relay"  # or telemark-relay-asan (ASan + UBSan build)
FLAGS = ["--listen", "--http", "--data-dir", "--record", "--max-sessions", "--session-memory",
         "--reorder-window", "--log-level", "--clickhouse-spill", "--clickhouse-memory",
         "--clickhouse-senders", "--udp-queue", "--ingest-nice"]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from relayproc import RelayProcess, check, eq, fail, wait_for  # noqa: E402
import tmkrec  # noqa: E402
import tmkstream  # noqa: E402


class Relay(RelayProcess):
    def __init__(self, *extra, data=None, name="relay", preexec=None):
        self.data = data or os.path.join(TMP, "data")
        super().__init__(os.path.join(BIN, RELAY), os.path.join(TMP, f"{name}-{time.time_ns()}.log"),
                         self.data, *extra, preexec=preexec, start_timeout=5)

    def sessions(self):
        return self.get("/api/sessions")

    def session(self, sid):
        return self.get(f"/api/sessions/{sid}")

    def wait_zones(self, sid, n, timeout=10):
        def ok():
            st, js = self.api("GET", f"/api/sessions/{sid}")
            return st == 200 and js["stats"]["zones"] >= n and js
        js = wait_for(ok, timeout, f"{n} zones in session {sid}")
        time.sleep(0.2)  # anything beyond n would show up now
        js = self.session(sid)
        eq(js["stats"]["zones"], n, f"zones of {sid}")
        return js


class WS:
    """A minimal WebSocket client for /api/stream: handshake, masked text frames out, and a
    reader thread that counts (and discards) whatever the relay sends."""

    def __init__(self, port, path="/api/stream", headers=None, host=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        hdrs = {"Host": host or f"127.0.0.1:{port}", "Upgrade": "websocket",
                "Connection": "Upgrade", "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}
        hdrs.update(headers or {})
        req = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
        self.sock.sendall((req + "\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = self.sock.recv(4096)
            if not b:
                break
            head += b
        self.head, _, self.rest = head.partition(b"\r\n\r\n")
        line = self.head.split(b"\r\n")[0].split()
        self.status = int(line[1]) if len(line) > 1 else 0
        m = re.search(rb"(?i)content-length: *(\d+)", self.head)
        while self.status != 101 and m and len(self.rest) < int(m.group(1)):
            b = self.sock.recv(4096)  # an error's body may come in a segment of its own
            if not b:
                break
            self.rest += b
        self.received = len(self.rest)
        self.closed = False

    def send_text(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big"))
        self.sock.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _take(self, n):
        while len(self.rest) < n:
            b = self.sock.recv(65536)
            if not b:
                raise EOFError("the relay closed the stream")
            self.rest += b
        out = bytes(self.rest[:n])
        self.rest = self.rest[n:]
        return out

    def message(self, timeout=10):
        """The next whole message from the relay, fragments joined: (opcode, payload); a close
        frame is returned as opcode 8, pings and pongs are skipped."""
        self.sock.settimeout(timeout)
        op, data = None, b""
        while True:
            h = self._take(2)
            n = h[1] & 0x7F
            if n >= 126:
                n = int.from_bytes(self._take(2 if n == 126 else 8), "big")
            mask = self._take(4) if h[1] & 0x80 else None
            p = self._take(n)
            if mask:
                p = bytes(b ^ mask[i % 4] for i, b in enumerate(p))
            if h[0] & 0x0F in (9, 10):
                continue
            if h[0] & 0x0F == 8:
                return 8, p
            op = op or h[0] & 0x0F
            data += p
            if h[0] & 0x80:
                return op, data

    def follow(self):
        def run():
            self.sock.settimeout(None)
            try:
                while True:
                    b = self.sock.recv(65536)
                    if not b:
                        break
                    self.received += len(b)
            except OSError:
                pass
            self.closed = True
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def synth(*args, timeout=40):
    p = subprocess.run([os.path.join(BIN, "tmk-relay-synth"), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"tmk-relay-synth {args} failed ({p.returncode}): {p.stderr}")
    return p.stdout


def synth_bg(*args):
    return subprocess.Popen([os.path.join(BIN, "tmk-relay-synth"), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def sent(out):
    m = re.search(r"SYNTH session=(\w+) packets=(\d+) zones=(\d+) frames=(\d+) plots=(\d+) "
                  r"messages=(\d+)", out)
    check(m, f"synth summary missing in {out!r}")
    return {"session": m.group(1), "packets": int(m.group(2)), "zones": int(m.group(3)),
            "frames": int(m.group(4)), "plots": int(m.group(5)), "messages": int(m.group(6))}


def zones_of(r, sid, extra=""):
    return r.get(f"/api/sessions/{sid}/zones?limit=1000000{extra}")


def events_of(r, sid, types, extra=""):
    return r.get(f"/api/sessions/{sid}/events?type={types}&limit=1000000{extra}")["events"]


def frame_time(seq):  # what tmk_synth.c puts in packet `seq` (1 tick = 1 ns at 1 GHz)
    return 1000000 + seq * 100000 + 95000


# ---------------------------------------------------------------------------------------------
def case_cli():
    exe = os.path.join(BIN, "telemark-relay")
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    eq(p.returncode, 0, "--help exit code")
    for f in FLAGS:
        check(f in p.stdout, f"--help does not document {f}")
    for bad, why in ([["--bogus"], "unknown option"], [["--max-sessions", "0"], "--max-sessions"],
                     [["--listen", "nothost"], "--listen"], [["--session-memory", "12x"], "--session-memory"],
                     [["--reorder-window", "5parsecs"], "--reorder-window"], [["--log-level", "loud"], "--log-level"],
                     [["--clickhouse-spill", "12"], "--clickhouse-spill"],
                     [["--clickhouse-memory", "lots"], "--clickhouse-memory"],
                     [["--clickhouse-senders", "0"], "--clickhouse-senders"],
                     [["--clickhouse-senders", "9"], "--clickhouse-senders"],
                     [["--clickhouse-senders", "2x"], "--clickhouse-senders"],
                     [["--udp-queue", "512K"], "--udp-queue"], [["--udp-queue", "big"], "--udp-queue"],
                     [["--ingest-nice", "20"], "--ingest-nice"], [["--ingest-nice", "-1"], "--ingest-nice"],
                     [["--listen"], "needs a value"]):
        p = subprocess.run([exe, *bad], capture_output=True, text=True, timeout=10)
        eq(p.returncode, 2, f"exit code for {bad}")
        check(why in p.stderr, f"message for {bad} does not mention {why!r}: {p.stderr!r}")
    # A port in use: exit 3 with a message that says what to do.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    busy = s.getsockname()[1]
    os.makedirs(TMP, exist_ok=True)
    for flag in ("--listen", "--http"):
        args = [exe, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir",
                os.path.join(TMP, "d"), flag, f"127.0.0.1:{busy}"]
        p = subprocess.run(args, capture_output=True, text=True, timeout=10)
        eq(p.returncode, 3, f"exit code with {flag} on a busy port ({p.stderr})")
        check("another" in p.stderr, f"busy-port message for {flag}: {p.stderr!r}")
    s.close()
    # Unusable data directory: exit 4.
    afile = os.path.join(TMP, "a-file")
    open(afile, "w").close()
    for d in (afile, os.path.join(afile, "sub")):
        p = subprocess.run([exe, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir", d],
                           capture_output=True, text=True, timeout=10)
        eq(p.returncode, 4, f"exit code for data dir {d} ({p.stderr})")
        check("--data-dir" in p.stderr, f"data dir message: {p.stderr!r}")
    # The receive queue and the loop's priority as set, in GET /api/relay.
    r = Relay("--udp-queue", "3M", "--ingest-nice", "12")
    js = r.get("/api/relay")
    eq(js["udp_queue"]["capacity"], 3 << 20, "udp_queue.capacity")
    eq(js["udp_queue"]["drops"], 0, "udp_queue.drops")
    # its first block (capacity / 8) is mapped and faulted in at start, which "populated" counts
    eq(js["udp_queue"]["memory"], 384 << 10, "udp_queue.memory")
    check(js["populated"]["bytes"] >= 384 << 10, f"populated: {js['populated']}")
    check(js["populated"]["cpu_ns"] >= 0, f"populated: {js['populated']}")
    # nothing freed yet, so nothing kept for reuse (a 3 MiB queue's blocks are 384 KiB: never pooled)
    eq(js["populated"]["kept_bytes"], 0, "populated.kept_bytes")
    eq(js["populated"]["reused_bytes"], 0, "populated.reused_bytes")
    # no 2 MiB region yet, so neither kind of page has been tried
    for k in ("huge_bytes", "small_ns_per_mib", "huge_ns_per_mib"):
        eq(js["populated"][k], 0, f"populated.{k}")
    eq(js["ingest_nice"], 12, "ingest_nice")
    if sys.platform.startswith("linux"):  # the relay names the threads it starts (top -H, perf)
        task = f"/proc/{r.proc.pid}/task"
        names = set()
        for t in os.listdir(task):
            with open(os.path.join(task, t, "comm")) as f:
                names.add(f.read().strip())
        check("tmk-relay-rx" in names, f"thread names: {sorted(names)}")
    r.stop()
    # SIGINT: clean exit 0. Before that: the default 64 MiB queue's first block is the process's
    # first fresh 2 MiB region, and the first one goes on huge pages, to measure them.
    r = Relay()
    pop = r.get("/api/relay")["populated"]
    if pop["bytes"] >= 2 << 20:  # (Linux 5.14+ populates in one call, and only then is it timed)
        eq(pop["huge_bytes"], 2 << 20, "populated.huge_bytes")
        check(pop["huge_ns_per_mib"] > 0 and pop["small_ns_per_mib"] == 0, f"populated: {pop}")
    eq(r.stop(signal.SIGINT), 0, "exit code after SIGINT")
    check("stopped" in r.log(), "no 'stopped' line after SIGINT")


def basic(transport_args, transport):
    r = Relay()
    try:
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--packets", 200, "--zones", 20,
                         "--threads", 2, "--session", "00000000000abc01", *transport_args))
        sid = out["session"]
        eq(out["zones"], 8000, "synth zones")
        js = r.wait_zones(sid, 8000)
        for k in ("id", "program", "live", "stats"):
            check(k in js, f"session has no {k}")
        eq(js["program"], "tmk-relay-synth", "program")
        eq(js["transport"], transport, "transport")
        eq(js["byte_order"], "little", "byte order")
        st = js["stats"]
        for k in ("records", "lost", "duplicated", "malformed", "dropped_by_agent"):
            check(k in st, f"stats has no {k}")
        eq(st["lost"], 0, "lost")
        eq(st["duplicated"], 0, "duplicated")
        eq(st["malformed"], 0, "malformed")
        eq(st["packets"], 200, "packets")
        eq(st["unresolved_sites"], 0, "unresolved sites")
        wait_for(lambda: not r.session(sid)["live"], 5, "session ends after BYE")
        lst = r.sessions()
        eq([s["id"] for s in lst], [sid], "session list")
        # zones on thread 0, and one exact zone: packet 0's parent
        z = zones_of(r, sid, "&thread=0")
        eq(z["count"], 4000, "zones on thread 0")
        check([1000000, 90000, 0, 1, 0, 0] in z["zones"], "parent zone of packet 0 missing")
        check([1000010, 301, 0, 3, 1, 0] in z["zones"], "first leaf of packet 0 missing")
        # time range query: packets 10..19 on thread 1 → 10 parents + their leaves
        t0, t1 = 1000000 + 10 * 100000, 1000000 + 19 * 100000 + 95000
        zr = zones_of(r, sid, f"&thread=1&t0={t0}&t1={t1}")
        eq(zr["count"], 10 * 20, "zones in a time range")
        frames = events_of(r, sid, "frame")
        eq([f["time_ns"] for f in frames], [frame_time(s) for s in range(200)], "frame times")
        plots = events_of(r, sid, "plot")
        eq([p["value"] for p in plots], list(range(200)), "plot values")
        msgs = events_of(r, sid, "message")
        eq(len(msgs), 20, "messages")
        eq(msgs[0]["text"], "packet 0", "message text")
        sites = r.get(f"/api/sessions/{sid}/sites")
        names = {s["id"]: s["name"] for s in sites["sites"]}
        eq(names.get(4), "Render", "site 4 name")
        eq(sorted(t["name"] for t in sites["threads"]), ["thread-0", "thread-1"], "thread names")
        eq([t["name"] for t in sites["teams"]], ["render"], "team names")
        eq(js["clock"], {"ns": 1000000, "unix_ns": 1700000000000000000}, "clock sync")
        check("WELCOME" in r.log(), "WELCOME not logged")
        eq(r.log().count("WELCOME"), 1, "WELCOME log lines")
    finally:
        eq(r.stop(), 0, "exit code")


def case_udp():
    basic([], "udp")


def case_tcp():
    basic(["--tcp"], "tcp")


def case_udp_to_tcp():
    r = Relay()
    try:
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--packets", 200, "--switch-tcp-at", 100,
                         "--linger", 100))
        js = r.wait_zones(out["session"], out["zones"])
        eq(len(r.sessions()), 1, "one session for UDP then TCP")
        eq(js["transport"], "tcp", "transport after the switch")
        eq(js["stats"]["lost"], 0, "lost")
        eq(js["stats"]["spoofed"], 0, "spoofed")
        frames = events_of(r, out["session"], "frame")
        eq([f["time_ns"] for f in frames], [frame_time(s) for s in range(200)], "frames in order")
    finally:
        eq(r.stop(), 0, "exit code")


def case_late_sites():
    r = Relay()
    try:
        sid = "00000000000abc02"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 10, "--sites-late",
              "--no-bye")
        js = r.wait_zones(sid, 10 * 2 * 20)
        eq(js["stats"]["unresolved_sites"], 9, "sites referenced but not described yet")
        sites = r.get(f"/api/sessions/{sid}/sites")["sites"]
        check(all(not s["known"] for s in sites), "sites known before their descriptors")
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 1, "--seq-start", 10,
              "--sites-late", "--no-hello")
        js = r.wait_zones(sid, 11 * 2 * 20)
        eq(js["stats"]["unresolved_sites"], 0, "unresolved after the descriptors arrived")
        names = {s["id"]: (s["known"], s["name"]) for s in r.get(f"/api/sessions/{sid}/sites")["sites"]}
        eq(names[2], (True, "Update"), "site 2 resolved")
        z = zones_of(r, sid, "&thread=0&t1=1001000")
        check([1000010, 301, 0, 3, 1, 0] in z["zones"], "early zone kept and resolvable")
    finally:
        eq(r.stop(), 0, "exit code")


def case_big_endian():
    r = Relay()
    try:
        sid = "0123456789abcdef"
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--big-endian",
                         "--packets", 50))
        js = r.wait_zones(sid, out["zones"])
        eq(js["id"], sid, "session id from a big-endian header")
        eq(js["byte_order"], "big", "byte order fact")
        plots = events_of(r, sid, "plot")
        eq([p["value"] for p in plots], [s + 0.5 for s in range(50)], "double plots normalised")
    finally:
        eq(r.stop(), 0, "exit code")


def case_chaos():
    r = Relay()
    try:
        n = 3000
        chaos = subprocess.Popen([os.path.join(BIN, "tmk-relay-chaos"), "--to", f"127.0.0.1:{r.port}",
                                  "--seed", "7", "--drop", "0.05", "--dup", "0.03", "--reorder",
                                  "0.05", "--protect-from", str(n - 1), "--idle-ms", "1000"],
                                 stdout=subprocess.PIPE, text=True)
        m = re.match(r"CHAOS port=(\d+)", chaos.stdout.readline())
        check(m, "chaos proxy did not start")
        # paced so that a stalled relay (loaded CI machine) cannot overflow its socket buffer:
        # every loss must be one the proxy made
        out = sent(synth("--to", f"127.0.0.1:{m.group(1)}", "--packets", n, "--zones", 10,
                         "--threads", 1, "--session", "00000000000c4a05", "--rate", 10000))
        res, _ = chaos.communicate(timeout=20)
        c = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", res))
        check(c["dropped"] > 50 and c["duplicated"] > 30 and c["reordered"] > 50,
              f"chaos did too little: {c}")
        sid = out["session"]
        js = r.wait_zones(sid, (n - c["dropped"]) * 10)
        st = js["stats"]
        eq(st["lost"], c["dropped"], "relay loss count vs packets the proxy dropped")
        eq(st["duplicated"], c["duplicated"], "relay duplicate count vs proxy duplicates")
        check(st["reordered"] > 0, "no reordering seen")
        eq(st["late"], 0, "late packets")
        eq(st["malformed"], 0, "malformed")
        times = [f["time_ns"] for f in events_of(r, sid, "frame")]
        eq(times, sorted(times), "order restored")
        eq(len(times), n - c["dropped"], "frames")
    finally:
        eq(r.stop(), 0, "exit code")


def case_orphans():
    """Trees continued in the next packet (PROTOCOL.md §5.3: tmk-relay-synth --split puts each
    tree's last children into the next packet, as the agent does when a tree does not fit) over
    a proxy that drops packets: the children whose parent was in a dropped packet are dropped
    and counted (stats.orphans, §5.3.1), and no stored zone lacks its parent."""
    r = Relay()
    try:
        n, zones, split, threads = 400, 10, 4, 2
        chaos = subprocess.Popen([os.path.join(BIN, "tmk-relay-chaos"), "--to", f"127.0.0.1:{r.port}",
                                  "--seed", "11", "--drop", "0.08", "--dup", "0", "--reorder", "0",
                                  "--protect-from", str(n - 1), "--idle-ms", "1000", "--list", "1"],
                                 stdout=subprocess.PIPE, text=True)
        m = re.match(r"CHAOS port=(\d+)", chaos.stdout.readline())
        check(m, "chaos proxy did not start")
        out = sent(synth("--to", f"127.0.0.1:{m.group(1)}", "--packets", n, "--zones", zones,
                         "--split", split, "--threads", threads, "--session", "00000000000c4a06",
                         "--rate", 10000))
        res, _ = chaos.communicate(timeout=20)
        dropped = {int(x) for x in re.findall(r"CHAOS drop seq=(\d+)", res)}
        check(len(dropped) > 10, f"chaos dropped too little: {res}")
        # packet s holds the tail of tree s - 1 (split children a thread) and its own tree less
        # its tail; a packet after a dropped one starts with an orphaned tail
        in_packet = lambda s: threads * (zones - split + (split if s > 0 else 0))
        orphans = sum(split * threads for s in range(1, n) if s - 1 in dropped and s not in dropped)
        check(orphans > 0, "no dropped packet was followed by a delivered one")
        want = out["zones"] - sum(in_packet(s) for s in dropped) - orphans
        sid = out["session"]
        js = r.wait_zones(sid, want)
        st = js["stats"]
        eq(st["lost"], len(dropped), "relay loss count vs packets the proxy dropped")
        eq(st["orphans"], orphans, "children of the dropped trees")
        eq(r.get("/api/relay")["orphans"], orphans, "relay-wide orphans")
        zs = zones_of(r, sid)["zones"]
        eq(len(zs), want, "zones listed")
        parents = {}
        for start, dur, thread, _site, depth, _flags in zs:
            if depth == 0:
                parents.setdefault(thread, []).append((start, start + dur))
        for start, dur, thread, _site, depth, _flags in zs:
            if depth == 1:
                check(any(a <= start and start + dur <= b for a, b in parents.get(thread, [])),
                      f"zone at {start} on thread {thread} stored without its parent")
    finally:
        eq(r.stop(), 0, "exit code")


def case_malformed():
    r = Relay()
    try:
        sid = "0000000000bad001"
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 100,
                         "--corrupt-every", 10, "--no-bye"))
        eq(out["zones"], 90 * 40, "zones in the good packets")
        js = r.wait_zones(sid, 90 * 40)
        st = js["stats"]
        eq(st["malformed"], 10, "malformed packets")
        eq(st["lost"], 0, "a malformed packet is not a lost one")
        eq(st["packets"], 100, "DATA packets delivered")
        frames = [f["time_ns"] for f in events_of(r, sid, "frame")]
        eq(frames, [frame_time(s) for s in range(100) if s % 10 != 9],
           "nothing stored from malformed packets")
        # the same flood over TCP: the connection survives bad bodies (framing is intact)
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--tcp", "--session", "0000000000bad002",
                         "--packets", 50, "--corrupt-every", 5))
        js = r.wait_zones("0000000000bad002", 40 * 40)
        eq(js["stats"]["malformed"], 10, "malformed over TCP")
        eq(len(r.sessions()), 2, "sessions")
    finally:
        eq(r.stop(), 0, "exit code")


def case_spoofed():
    r = Relay()
    try:
        sid = "00000000005b00f0"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 20, "--no-bye")
        r.wait_zones(sid, 20 * 40)
        # another host (127.0.0.2) sends DATA and a HELLO under the same session id
        synth("--to", f"127.0.0.1:{r.port}", "--bind", "127.0.0.2", "--session", sid,
              "--packets", 30, "--seq-start", 20, "--no-bye")
        synth("--to", f"127.0.0.1:{r.port}", "--bind", "127.0.0.2", "--tcp", "--session", sid,
              "--packets", 5, "--seq-start", 50, "--no-bye")
        js = wait_for(lambda: (lambda j: j["stats"]["spoofed"] >= 37 and j)(r.session(sid)), 5,
                      "spoofed packets counted")
        eq(js["stats"]["spoofed"], 30 + 1 + 5 + 1, "spoofed DATA + HELLO over UDP and TCP")
        eq(js["stats"]["zones"], 20 * 40, "zones after spoofing")
        eq(js["source"].split(":")[0], "127.0.0.1", "session still bound to its host")
        eq(len(r.sessions()), 1, "no session for the spoofer")
        # the real target carries on unharmed
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 10, "--seq-start", 20,
              "--no-hello")
        js = r.wait_zones(sid, 30 * 40)
        eq(js["stats"]["lost"], 0, "lost after spoofing")
    finally:
        eq(r.stop(), 0, "exit code")


def case_record_roundtrip():
    data = os.path.join(TMP, "data")
    r = Relay("--record", data=data)
    try:
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--packets", 300, "--zones", 20))
        sid = out["session"]
        r.wait_zones(sid, out["zones"])
        live = r.session(sid)
        check(live["recording"], "session not recording with --record")
        zl = zones_of(r, sid)
        el = events_of(r, sid, "frame,plot,message")
    finally:
        eq(r.stop(), 0, "exit code")
    check("recording" in r.log() and "closed" in r.log(), "recording close not logged")
    r2 = Relay(data=data, name="reader")
    try:
        recs = r2.get("/api/recordings")
        eq(len(recs), 1, "recordings listed")
        eq(recs[0]["kind"], "recording", "recording kind")
        st, js = r2.api("POST", "/api/recordings/open", {"name": recs[0]["name"]})
        eq(st, 200, f"open status {js}")
        rid = js["id"]
        eq(js["live"], False, "opened recording live")
        eq(js["recorded"], True, "opened recording flagged")
        eq(js["program"], "tmk-relay-synth", "program from the recorded HELLO")
        eq(js["session_id"], sid, "session id")
        eq(js["stats"]["zones"], out["zones"], "zones replayed")
        eq(zones_of(r2, rid), zl, "zones identical to the live session")
        eq(events_of(r2, rid, "frame,plot,message"), el, "events identical to the live session")
        ids = [s["id"] for s in r2.sessions()]
        check(rid in ids, "opened recording not in /api/sessions")
        st, js2 = r2.api("POST", "/api/recordings/open", {"name": recs[0]["name"]})
        eq((st, js2["id"]), (200, rid), "opening twice gives the same session")
    finally:
        eq(r2.stop(), 0, "exit code")


def case_record_format():
    """A recording read by tests/support/tmkrec.py, a reader written from docs/RECORDING.md and
    PROTOCOL.md alone (not from the relay's code): every field it finds agrees with the relay's
    API, and on files cut, corrupted or extended it recovers exactly the DATA packets the relay
    replays from them (RECORDING.md §4)."""
    data = os.path.join(TMP, "data")
    r = Relay("--record", data=data)
    try:
        # ~100 KB of packets: more than one PACKETS chunk (one per 64 KiB)
        sid = sent(synth("--to", f"127.0.0.1:{r.port}", "--packets", 600, "--zones", 100,
                         "--no-bye"))["session"]
        # packets 590..609: ten duplicates and ten new ones; then 630..639: 610..629 are lost
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 20, "--zones", 100,
              "--seq-start", 590, "--no-hello", "--no-bye")
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 10, "--zones", 100,
              "--seq-start", 630, "--no-hello")
        live = wait_for(lambda: (lambda js: js if not js["live"] and js["stats"]["lost"] == 20
                                 else None)(r.session(sid)), 10, "the BYE and 20 packets lost")
        version = r.get("/api/relay")["version"]
    finally:
        eq(r.stop(), 0, "exit code")
    files = [f for f in os.listdir(data) if f.endswith(".tmkr")]
    eq(len(files), 1, "one recording")
    eq(live["recording_path"].endswith(files[0]), True, f"recording_path {live['recording_path']}")
    raw = open(os.path.join(data, files[0]), "rb").read()
    rec = tmkrec.read(raw)
    eq(rec.stop, None, "a cleanly closed recording reads to its end")
    eq(rec.unknown, 0, "chunks of unknown type")
    eq(rec.session, {"id": int(sid, 16), "created_unix_ns": live["created_unix_ns"],
                     "transport": live["transport"], "source": live["source"],
                     "relay_version": version}, "SESSION")
    heads = [tmkrec.header(p) for p in rec.packets]
    eq({h[1] for h in heads}, {int(sid, 16)}, "the session id of every packet")
    eq(tmkrec.PACKET_TYPES[heads[0][0]], "HELLO", "the first packet")
    eq(tmkrec.PACKET_TYPES[heads[-1][0]], "BYE", "the last packet")
    seqs = [h[2] for h in heads if h[0] == 1]
    eq(seqs, list(range(610)) + list(range(630, 640)), "DATA in delivery order, once each")
    eq(len(seqs), live["stats"]["packets"], "DATA packets against stats.packets")
    eq(rec.end, len(rec.packets), "END's count")
    eq(rec.stats, {k: live["stats"][k] for k in tmkrec.STATS_FIELDS}, "the last STATS")
    eq((rec.stats["lost"], rec.stats["duplicated"]), (20, 10), "lost and duplicated")

    # Damaged and unusual files: what the reader recovers is what the relay replays. The cuts
    # fall inside and at the edges of chunks; the others corrupt one field each, or add chunks a
    # writer does not write (RECORDING.md §3-4 say what a reader does with each).
    bounds = [8]
    while bounds[-1] < len(raw):
        bounds.append(bounds[-1] + 12 + struct.unpack_from("<I", raw, bounds[-1])[0])
    eq(bounds[-1], len(raw), "the chunks fill the file")
    kinds = [raw[b + 4] for b in bounds[:-1]]
    check(kinds.count(tmkrec.PACKETS) >= 2, f"chunks {kinds}: one PACKETS chunk only")
    mid = bounds[len(kinds) - 1 - kinds[::-1].index(tmkrec.PACKETS)]  # the last PACKETS chunk
    def patched(at, byte):
        b = bytearray(raw)
        b[at] ^= byte
        return bytes(b)
    def inserted(at, *chunks):
        return raw[:at] + b"".join(tmkrec.chunk(*c) for c in chunks) + raw[at:]
    # a DATA packet no other chunk holds: the last one, its seq 639 made 700 (2 varint bytes)
    last = rec.packets[-2]
    eq(tmkrec.header(last)[2], 639, "the last DATA packet's seq")
    new = last[:14] + tmkrec.put_varint(700) + last[14 + len(tmkrec.put_varint(639)):]
    entry = tmkrec.put_varint(len(new)) + new
    s = rec.session
    def session(created, transport):
        return (tmkrec.SESSION, tmkrec.put_varint(s["id"]) + tmkrec.put_varint(created) +
                tmkrec.put_varint(len(transport)) + transport + b"\x00\x00")
    variants = {
        "cut-header": raw[:mid + 5], "cut-payload": raw[:mid + 20],        # torn
        "cut-at-chunk": raw[:mid], "cut-before-end": raw[:bounds[-2]],     # valid, no END
        "crc": patched(mid + 8, 0x01), "reserved": patched(mid + 6, 0x80),  # corrupt
        "payload": patched(mid + 12, 0x40),
        "length": raw[:mid] + struct.pack("<IB3xI", 16 * 1024 * 1024 + 1, 2, 0),
        "unknown-type": inserted(mid, (9, b"what the future adds")),      # skipped
        "after-end": raw + tmkrec.chunk(tmkrec.PACKETS, entry),            # not read
        # a PACKETS chunk whose second entry is bad: skipped whole, its good first entry too
        "bad-entry": inserted(bounds[-2], (tmkrec.PACKETS, entry + b"\x00")),
        "empty-packets": inserted(mid, (tmkrec.PACKETS, b"")),             # no packets
        "no-session": raw[:8] + raw[bounds[1]:],
        "two-sessions": inserted(mid, session(s["created_unix_ns"] + 1, b"udp")),
        "long-string": inserted(mid, session(1, b"u" * 1025)),
        # after the last STATS, one with three counters of six: corrupt, none of them used
        "short-stats": inserted(bounds[-2], (tmkrec.STATS, tmkrec.put_varint(999) * 3)),
    }
    want = {"unknown-type": None, "after-end": "bytes after END", "empty-packets": None,
            "cut-header": "torn", "cut-payload": "torn", "cut-at-chunk": None,
            "cut-before-end": None, "no-session": None, "two-sessions": None}
    shape = {}
    for name, b in variants.items():
        with open(os.path.join(data, name + ".tmkr"), "wb") as f:
            f.write(b)
        got = tmkrec.read(b)
        shape[name] = (sum(1 for p in got.packets if p[5] == 1), got.stop, got.session)
        why = got.stop or ""
        if name in want:
            eq(got.stop, want[name], f"what the reader makes of {name}")
        elif not why.startswith("corrupt"):
            fail(f"the reader takes {name} for {why or 'a valid file'}")
    eq(shape["unknown-type"][0], len(seqs), "DATA packets around a chunk of unknown type")
    eq(shape["bad-entry"][0], len(seqs), "DATA packets of a file with a bad PACKETS entry")
    eq(shape["two-sessions"][2]["created_unix_ns"], s["created_unix_ns"] + 1, "the last SESSION")
    r2 = Relay(data=data, name="reader")
    try:
        for name, (n, why, sess) in shape.items():
            st, js = r2.api("POST", "/api/recordings/open", {"name": name + ".tmkr"})
            eq(st, 200, f"open {name}: {js}")
            eq(js["stats"]["packets"], n, f"DATA packets replayed from {name} ({why})")
            eq(js["session_id"], sid, f"session id of {name}")
            if sess and sess is not rec.session:
                eq(js["created_unix_ns"], sess["created_unix_ns"], f"creation time of {name}")
        eq(shape["short-stats"][:2], (len(seqs), "corrupt: varint past the end"), "short STATS")
        eq(r2.session("short-stats")["stats"]["lost"], 20, "lost after a STATS chunk cut short")
        log = r2.log()
        for name in ("cut-header", "crc", "bad-entry", "long-string"):
            check(f"{name}.tmkr: torn or corrupt tail" in log, f"{name}: nothing logged")
        check("after-end.tmkr: %d bytes after the END chunk ignored" %
              (len(raw) + 12 + len(entry) - len(raw)) in log, "bytes after END: nothing logged")
    finally:
        eq(r2.stop(), 0, "exit code")

def stream_follow(r, sid, live, **filters):
    """Subscribes to sid over /api/stream with all of its history (and the given filters: level,
    mask, threads) and decodes what comes with tests/support/tmkstream.py until HISTORY_DONE, or
    with live until the END record. Returns the tmkstream.Session and how many binary messages
    it took."""
    ws = WS(r.http)
    eq(ws.status, 101, "upgrade")
    try:
        ws.send_text(json.dumps(dict({"op": "subscribe", "session": sid, "history_s": 3600,
                                      "seq": 7}, **filters)))
        s, subscribed, messages = tmkstream.Session(), False, 0
        while not (s.ended if live else s.history_done):
            # (without its BYE, a session stops being live after 10 s without packets)
            op, data = ws.message(timeout=30)
            if op == 1:
                js = json.loads(data)
                eq((js.get("type"), js.get("seq")), ("subscribed", 7), f"text frame {js}")
                subscribed = True
            elif op == 2:
                check(subscribed, "binary data before the subscribed reply")
                m = tmkstream.decode(data)
                eq(m.session, sid, "the session of a message")
                s.add(m)
                messages += 1
            else:
                fail(f"opcode {op} before the end: {data[:100]!r}")
        return s, messages
    finally:
        ws.close()


def same(got, want, what):
    """Two multisets (collections.Counter) are equal, else a failure that shows the difference."""
    if got != want:
        extra, missing = got - want, want - got
        fail(f"{what}, stream against API: {sum(extra.values())} more in the stream "
             f"({sorted(extra)[:5]}), {sum(missing.values())} missing from it "
             f"({sorted(missing)[:5]}) of {sum(want.values())}")


def stream_matches_api(r, sid, s, level=5, mask=0xFFFFFFFF, threads=None):
    """What a subscription brought (a tmkstream.Session) against the JSON API: the same zones,
    frames, plots, messages and markers at the same absolute times, the same call sites, thread
    and team names. With filters, what API.md says passes them: zones, plots and markers whose
    call site has a severity <= level and a verbosity with a bit of mask, messages whose own
    severity and verbosity do, on the listed threads; frames all."""
    eq(s.gaps, [], "GAP records")
    st = {k: v for k, v in r.session(sid)["stats"].items() if v and k not in ("bytes", "mem_bytes")}
    sites = r.get(f"/api/sessions/{sid}/sites")
    by_id = {x["id"]: x for x in sites["sites"] if x["known"]}
    def passes(site, thread, sev=None, verb=None):
        if threads is not None and thread not in threads:
            return False
        if sev is None:  # by the call site; a site not described yet passes
            x = by_id.get(site)
            if site == 0 or x is None:
                return True
            sev, verb = x["severity"], x["verbosity"]
        return sev <= level and (verb & mask) != 0
    api = zones_of(r, sid)
    rows = [dict(zip(api["columns"], z)) for z in api["zones"]]
    all_rows = rows
    rows = [z for z in rows if passes(z["site"], z["thread"])]
    same(collections.Counter((z["start"], z["dur"], z["thread"], z["site"], z["depth"])
                             for z in s.zones),
         collections.Counter((z["start_ns"], z["dur_ns"], z["thread"], z["site"], z["depth"])
                             for z in rows), f"zones (start, duration, thread, site, depth; {st})")
    all_ev = events_of(r, sid, "frame,plot,message,marker_begin,marker_end")
    ev = [e for e in all_ev if e["type"] == "frame" or (
        passes(e["site"], e["thread"], e["severity"], e["verbosity"]) if e["type"] == "message"
        else passes(e["site"], e["thread"]))]
    names = {x["id"]: x["name"] for x in sites["sites"]}
    def text(site, b):  # an empty text with a site: the site's name (API.md)
        return b if b or not site else names.get(site, "").encode()
    def stream_key(e):
        return (e["type"], e["time"], e["site"], e.get("thread"), e.get("severity"),
                e.get("verbosity"), e.get("value"), e.get("end"))
    got = collections.Counter()
    for e in s.events:
        b = e.get("text", e.get("payload"))
        got[stream_key(e) + (None if b is None else text(e["site"], b),)] += 1
    want = collections.Counter()
    for e in ev:
        kind = {"frame": "FRAME", "plot": "PLOT", "message": "MESSAGE"}.get(e["type"], "MARKER")
        b = None
        if kind == "MESSAGE":
            b = text(e["site"], e["text"].encode())
        elif kind == "MARKER":
            b = bytes.fromhex(e["payload_hex"])
            if not b:
                continue  # MARKER records come only for markers that carry extra data (API.md)
        end = ["marker_begin", "marker_end"].index(e["type"]) if kind == "MARKER" else None
        want[(kind, e["time_ns"], e["site"],
              e["thread"] if kind in ("MESSAGE", "MARKER") else None, e.get("severity"),
              e.get("verbosity"), e.get("value"), end, b)] += 1
    # every event once, with its whole text, in the history and live alike
    same(got, want, "FRAME, PLOT, MESSAGE and MARKER records")
    eq(s.origin, min([z["start_ns"] for z in all_rows] + [e["time_ns"] for e in all_ev]),
       "the origin: the session's first stored time")
    eq({i: dict(f, kind=tmkstream.KINDS[f["kind"]]) for i, f in s.sites.items()},
       {x["id"]: {"id": x["id"], "kind": x["kind"], "severity": x["severity"],
                  "verbosity": x["verbosity"], "colour": x["color"], "line": x["line"],
                  "name": x["name"], "file": x["file"]} for x in sites["sites"] if x["known"]},
       "sites: stream against API")
    eq(s.threads, {t["index"]: t["name"] for t in sites["threads"]}, "thread names")
    eq(s.teams, {t["index"]: t["name"] for t in sites["teams"]}, "team names")
    return rows, ev


def case_stream_format():
    """The live stream decoded by tests/support/tmkstream.py, a decoder written from docs/API.md
    ("Live stream") alone, against the JSON API: the history of an ended synthetic session, and a
    live subscription to the demo game (teams, markers with extra data, messages of every
    severity) followed until its END record."""
    r = Relay()
    try:
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--packets", 200, "--zones", 20,
                         "--threads", 3))
        sid = out["session"]
        r.wait_zones(sid, out["zones"])
        wait_for(lambda: not r.session(sid)["live"], 10, "the BYE")
        s, n = stream_follow(r, sid, live=False)
        rows, ev = stream_matches_api(r, sid, s)
        eq(len(rows), out["zones"], "zones in the API")
        eq(len([e for e in ev if e["type"] == "frame"]), out["frames"], "frames in the API")
        check(out["plots"] and out["messages"] and len(s.threads) == 3,
              f"synth sent no plots or messages, or not 3 threads: {out}, {s.threads}")
        print(f"stream_format: history of {n} messages, {len(s.zones)} zones, "
              f"{len(s.events)} events")

        for attempt in range(3):
            demo = subprocess.Popen([os.path.join(BIN, "telemark-demo"), "--seconds", "2",
                                     "--relay", f"127.0.0.1:{r.port}"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            try:
                d = wait_for(lambda: [x for x in r.sessions() if x["live"] and x["has_hello"]],
                             10, "the demo's session")[0]["id"]
                s, n = stream_follow(r, d, live=True)
                eq(demo.wait(30), 0, "demo exit")
            finally:
                demo.kill()
            if not s.gaps:
                break
            # a reader that falls behind gets GAPs (API.md "Slow browsers"): nothing to compare
            print(f"stream_format: the reader fell behind ({s.gaps}); again with a new session")
        check(not r.session(d)["live"], "END came while the session was live")
        rows, ev = stream_matches_api(r, d, s)
        # The same session again, filtered: what passes is what API.md's rules let through.
        # (The demo: five threads, call sites of five teams at severity 3, messages of several.)
        # The thread list leaves out one whose frames must come all the same.
        framed = min(e["thread"] for e in ev if e["type"] == "frame")
        f = {"level": 3, "mask": 0b10110, "threads": [t for t in range(5) if t != framed]}
        fs, _ = stream_follow(r, d, live=False, **f)
        frows, fev = stream_matches_api(r, d, fs, **f)
        kept = collections.Counter(e["type"] for e in fev)
        check(kept["frame"] and 0 < len(frows) < len(rows) and
              any(e["type"] == "frame" and e["thread"] not in f["threads"] for e in fev),
              f"the filters left {len(frows)} of {len(rows)} zones, events {kept}")
        print(f"stream_format: filtered {f}: {len(frows)} of {len(rows)} zones, events "
              f"{dict(kept)} of {dict(collections.Counter(e['type'] for e in ev))}")
        kinds = {e["type"] for e in s.events}
        check({"FRAME", "PLOT", "MESSAGE", "MARKER"} <= kinds and s.teams and len(rows) > 1000,
              f"the demo's stream lacks something: {kinds}, teams {s.teams}, {len(rows)} zones")
        print(f"stream_format: live, {n} messages up to END, {len(s.zones)} zones, "
              f"{len(s.events)} events, {len(s.teams)} team names")

        # Live messages longer than a live item holds (47 bytes) come whole, multi-byte
        # characters included: a target sending one every 10 packets for 1.5 s while followed.
        long_text = "niveau chargé: " + "é" * 60 + " fin"
        sy = synth_bg("--to", f"127.0.0.1:{r.port}", "--session", "10c0000000000001", "--packets",
                      150, "--rate", 100, "--message-text", long_text)
        try:
            wait_for(lambda: any(x["id"] == "10c0000000000001" and x["live"]
                                 for x in r.sessions()), 10, "the long-text session")
            s, n = stream_follow(r, "10c0000000000001", live=True)
            eq(sy.wait(30), 0, "synth exit")
        finally:
            sy.kill()
        rows, ev = stream_matches_api(r, "10c0000000000001", s)
        texts = [e["text"] for e in s.events if e["type"] == "MESSAGE"]
        check(len(texts) >= 10 and set(texts) == {long_text.encode()},
              f"live messages: {len(texts)}, {set(texts)}")
        print(f"stream_format: {len(texts)} live messages of {len(long_text.encode())} bytes whole")
    finally:
        eq(r.stop(), 0, "exit code")

def frames_prefix(r, rid):
    times = [f["time_ns"] for f in events_of(r, rid, "frame")]
    eq(times, [frame_time(s) for s in range(len(times))], "recovered frames are a clean prefix")
    return len(times)


def case_kill9():
    data = os.path.join(TMP, "data")
    r = Relay("--record", data=data)
    sy = synth_bg("--to", f"127.0.0.1:{r.port}", "--packets", 3000, "--rate", 500, "--zones", 20)
    try:
        wait_for(lambda: r.sessions() and r.sessions()[0]["stats"]["packets"] > 600, 10,
                 "600 packets received")
        time.sleep(1.3)  # at least one periodic flush after that
        # (on a loaded machine the flush may come later: wait until 300 packets' worth is on
        # disk, ~110 bytes each, and a moment more for the write under way to end)
        def on_disk():
            fs = [f for f in os.listdir(data) if f.endswith(".tmkr")]
            return fs and os.path.getsize(os.path.join(data, fs[0])) >= 300 * 110
        wait_for(on_disk, 10, "300 packets' worth in the recording")
        time.sleep(0.2)
        os.kill(r.proc.pid, signal.SIGKILL)
        r.proc.wait(5)
    finally:
        sy.kill()
        sy.wait()
        r.kill()
    files = [f for f in os.listdir(data) if f.endswith(".tmkr")]
    eq(len(files), 1, "one recording after kill -9")
    path = os.path.join(data, files[0])
    raw = open(path, "rb").read()
    # variants: as left by kill -9, torn in the middle of the last chunk, garbage appended
    with open(os.path.join(data, "torn.tmkr"), "wb") as f:
        f.write(raw[:len(raw) - 7])
    with open(os.path.join(data, "junk.tmkr"), "wb") as f:
        f.write(raw + b"\x40\x00\x00\x00\x02\x00\x00\x00junkjunkjunk")
    r2 = Relay(data=data, name="reader")
    try:
        counts = {}
        for name in (files[0], "torn.tmkr", "junk.tmkr"):
            st, js = r2.api("POST", "/api/recordings/open", {"name": name})
            eq(st, 200, f"open {name}: {js}")
            eq(js["stats"]["malformed"], 0, f"malformed records in {name}")
            counts[name] = frames_prefix(r2, js["id"])
            eq(js["stats"]["zones"], counts[name] * 40, f"zones of {name} are whole packets")
        # 600+ packets had arrived, then 1.3 s passed: either the 1 s timed flush or the first
        # 64 KiB chunk (about 590 of these ~110-byte packets) has been written.
        check(counts[files[0]] >= 300, f"only {counts[files[0]]} packets recovered")
        eq(counts["junk.tmkr"], counts[files[0]], "garbage tail skipped")
        check(counts["torn.tmkr"] < counts[files[0]], "torn chunk was read")
        check("torn or corrupt tail" in r2.log(), "torn tail not reported")
    finally:
        eq(r2.stop(), 0, "exit code")


def case_disk_full():
    """A recording that cannot grow (file size limit: writes fail with EFBIG, as on a full
    disk): the relay stops recording with an error, keeps the file readable, keeps ingesting."""
    import resource
    data = os.path.join(TMP, "data")
    limit = 64 * 1024 + 4096  # the first 64 KiB chunk fits, the second does not
    r = Relay("--record", data=data,
              preexec=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    try:
        sid = "00000000000d15c0"
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 3000,
                         "--zones", 20, "--no-bye"))
        js = r.wait_zones(sid, out["zones"])
        wait_for(lambda: "recording stopped" in r.log(), 5, "the write error")
        js = r.session(sid)
        eq(js["recording"], False, "recording flag after the error")
        eq(js["stats"]["malformed"], 0, "ingest unaffected")
    finally:
        eq(r.stop(), 0, "exit code")
    files = [f for f in os.listdir(data) if f.endswith(".tmkr")]
    eq(len(files), 1, "recording file")
    check(os.path.getsize(os.path.join(data, files[0])) <= limit, "file over the limit")
    r2 = Relay(data=data, name="reader")
    try:
        st, js = r2.api("POST", "/api/recordings/open", {"name": files[0]})
        eq(st, 200, f"open the cut recording: {js}")
        n = frames_prefix(r2, js["id"])
        check(n > 100, f"only {n} packets kept before the disk filled")
        eq(js["stats"]["malformed"], 0, "malformed in the kept part")
    finally:
        eq(r2.stop(), 0, "exit code")


def case_agent_file():
    data = os.path.join(TMP, "data")
    os.makedirs(data, exist_ok=True)
    out = sent(synth("--file", os.path.join(data, "game.tmkf"), "--packets", 50))
    raw = open(os.path.join(data, "game.tmkf"), "rb").read()
    with open(os.path.join(data, "cut.tmkf"), "wb") as f:
        f.write(raw[:len(raw) // 2])
    r = Relay(data=data)
    try:
        recs = sorted(r.get("/api/recordings"), key=lambda x: x["name"])
        eq([(x["name"], x["kind"]) for x in recs], [("cut.tmkf", "agent_file"),
                                                   ("game.tmkf", "agent_file")], "agent files")
        st, js = r.api("POST", "/api/recordings/open", {"name": "game.tmkf"})
        eq(st, 200, f"open agent file: {js}")
        eq(js["id"], "game", "id of an opened file")
        eq(js["transport"], "file", "transport")
        eq(js["program"], "tmk-relay-synth", "program")
        eq(js["stats"]["zones"], out["zones"], "zones from the agent file")
        # the reader written from RECORDING.md §5 (tests/support/tmkrec.py) agrees
        whole = tmkrec.read(raw)
        eq((len([p for p in whole.packets if p[5] == 1]), whole.stop), (50, None), "tmkrec")
        eq(js["stats"]["packets"], 50, "DATA packets replayed")
        st, js = r.api("POST", "/api/recordings/open", {"name": "cut.tmkf"})
        eq(st, 200, f"open cut agent file: {js}")
        n = frames_prefix(r, "cut")
        check(0 < n < 50, f"cut file gave {n} packets")
        cut = tmkrec.read(raw[:len(raw) // 2])
        eq((len([p for p in cut.packets if p[5] == 1]), cut.stop), (js["stats"]["packets"], "torn"),
           "DATA packets of the cut file: tmkrec against the relay")
    finally:
        eq(r.stop(), 0, "exit code")


def case_version_reject():
    r = Relay()
    try:
        out = synth("--to", f"127.0.0.1:{r.port}", "--hello-version", 2, "--hello-count", 5,
                    "--linger", 500)
        check("REPLY REJECT reason=1" in out, f"no REJECT reason 1: {out!r}")
        check("protocol 1" in out and "agent speaks 2" in out, f"reject text: {out!r}")
        time.sleep(1.1)  # REJECTs are rate-limited to one per host per second
        out = synth("--to", f"127.0.0.1:{r.port}", "--hello-version", 2, "--hello-count", 3,
                    "--linger", 300)
        check("REPLY REJECT reason=1" in out, f"no REJECT for a repeated HELLO: {out!r}")
        out = synth("--to", f"127.0.0.1:{r.port}", "--tcp", "--session", "7e7e7e7e7e7e7e7e",
                    "--hello-version", 7, "--linger", 500)
        check("REPLY REJECT reason=1" in out, f"no REJECT over TCP: {out!r}")
        log = r.log()
        eq(len(re.findall(r"REJECT session 5e55100000000001.*agent speaks 2", log)), 1,
           "REJECT logged once per session (8 HELLOs from two runs, each answered)")
        eq(len(re.findall(r"REJECT session 7e7e7e7e7e7e7e7e.*agent speaks 7", log)), 1,
           "REJECT over TCP logged")
        eq(r.sessions(), [], "a rejected agent creates no session")
        out = synth("--to", f"127.0.0.1:{r.port}", "--packets", 1, "--linger", 300)
        check("REPLY WELCOME version=1" in out, f"no WELCOME: {out!r}")
    finally:
        eq(r.stop(), 0, "exit code")


def case_garbage_flood():
    # Stated bound: with --max-sessions 8, --session-memory 1M and --udp-queue 2M the relay
    # stays under 24 MiB resident whatever arrives: stores 8 x 1 MiB, reorder buffers <= 8 x
    # 1 MiB, the UDP receive queue 2 MiB and its recvmmsg buffers 2 MiB, TCP connection buffers,
    # code and libc arenas.
    r = Relay("--max-sessions", 8, "--session-memory", "1M", "--udp-queue", "2M")
    try:
        sid = "00000000000f10d0"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 50, "--no-bye")
        r.wait_zones(sid, 50 * 40)
        # a big legit session that must be cut by its memory budget, not grow
        big = "00000000000f10d1"
        synth("--to", f"127.0.0.1:{r.port}", "--session", big, "--packets", 6000, "--zones", 40,
              "--threads", 1, "--no-bye")
        base = r.rss_kb()
        synth("--to", f"127.0.0.1:{r.port}", "--garbage", 30000, "--seed", 3)
        synth("--to", f"127.0.0.1:{r.port}", "--tcp", "--garbage", 3000, "--seed", 4)
        synth("--to", f"127.0.0.1:{r.port}", "--flood-sessions", 5000, "--seed", 5)
        info = r.get("/api/relay")
        check(info["garbage"] > 1000, f"garbage not counted: {info}")
        check(info["rejected_sessions"] > 0, "flooded session ids not refused")
        lst = r.sessions()
        check(len(lst) <= 8, f"{len(lst)} sessions > --max-sessions 8")
        b = r.session(big)
        check(b["stats"]["evicted"] > 0, "memory budget never evicted")
        check(b["stats"]["mem_bytes"] <= 1 << 20, f"session holds {b['stats']['mem_bytes']} bytes")
        rss = r.rss_kb()
        print(f"relay RSS {rss} KiB (before the flood {base} KiB)")
        if not sanitized():  # ASan's quarantine and shadow memory make RSS meaningless
            check(rss < 24 * 1024, f"relay RSS {rss} KiB over the 24 MiB bound (base {base})")
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 50, "--seq-start", 50,
              "--no-hello")
        r.wait_zones(sid, 100 * 40)
        eq(r.session(sid)["stats"]["lost"], 0, "legit session lost packets")
        lines = [l for l in r.log().splitlines() if "dropped" in l and "packet" in l]
        check(len(lines) < 10, f"{len(lines)} bad-packet log lines: not rate-limited")
        check("suppressed" in r.log() or len(lines) <= 2, "no suppression count")
    finally:
        eq(r.stop(), 0, "exit code")


def case_api_errors():
    data = os.path.join(TMP, "data")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "bad.tmkr"), "wb") as f:
        f.write(b"this is not a recording at all")
    r = Relay(data=data)
    try:
        sid = "00000000000a9100"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 5, "--no-bye")
        r.wait_zones(sid, 5 * 40)
        cases = [
            ("GET", "/api/sessions/nope", None, 404),
            ("GET", "/api/sessions/nope/zones", None, 404),
            ("GET", f"/api/sessions/{sid}/zones?t0=abc", None, 400),
            ("GET", f"/api/sessions/{sid}/zones?t0=10&t1=5", None, 400),
            ("GET", f"/api/sessions/{sid}/zones?limit=0", None, 400),
            ("GET", f"/api/sessions/{sid}/zones?thread=-1", None, 400),
            ("GET", f"/api/sessions/{sid}/events?type=bogus", None, 400),
            ("POST", f"/api/sessions/{sid}/zones", b"", 405),
            ("GET", f"/api/sessions/{sid}/control", None, 405),
            ("POST", "/api/sessions", b"", 405),
            ("GET", "/api/nothing", None, 404),
            ("POST", f"/api/sessions/{sid}/control", b"not json", 400),
            ("POST", f"/api/sessions/{sid}/control", b'{"level": 9, "mask": 1}', 400),
            ("POST", f"/api/sessions/{sid}/control", b'{"level": 2}', 400),
            ("POST", f"/api/sessions/{sid}/control", b'{"level": 2, "mask": 99999999999}', 400),
            ("POST", f"/api/sessions/{sid}/control", b"x" * 5000, 413),
            ("POST", "/api/sessions/nope/control", b'{"level": 2, "mask": 1}', 404),
            ("POST", "/api/sessions/nope/record/start", b"", 404),
            ("POST", f"/api/sessions/{sid}/record/stop", b"", 409),
            ("POST", "/api/recordings/open", b'{"name": "../etc/passwd"}', 400),
            ("POST", "/api/recordings/open", b'{"name": "missing.tmkr"}', 404),
            ("POST", "/api/recordings/open", b'{"name": "bad.tmkr"}', 422),
            ("POST", "/api/recordings/open", b'{}', 400),
        ]
        for method, path, body, want in cases:
            st, js = r.api(method, path, raw=body)
            eq(st, want, f"{method} {path} {body!r:.40} status")
            check(isinstance(js, dict) and js.get("error"), f"{method} {path}: no JSON error {js}")
        # good requests on the same session still work, the relay is unharmed
        st, js = r.api("POST", f"/api/sessions/{sid}/record/start", raw=b"")
        eq(st, 200, f"record start {js}")
        check(js["path"].endswith(".tmkr"), "record path")
        st, js = r.api("POST", f"/api/sessions/{sid}/record/start", raw=b"")
        eq(st, 409, "record start twice")
        st, js = r.api("POST", f"/api/sessions/{sid}/record/stop", raw=b"")
        eq(st, 200, f"record stop {js}")
        recs = [x for x in r.get("/api/recordings") if x["kind"] == "recording"]
        check(any(x["name"].startswith(sid) for x in recs), "recording not listed")
    finally:
        eq(r.stop(), 0, "exit code")


def case_control():
    r = Relay()
    try:
        for transport in ([], ["--tcp"]):
            sid = "00000000000c0170" if not transport else "00000000000c0171"
            sy = synth_bg("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 150,
                          "--rate", 100, *transport)
            wait_for(lambda: any(s["id"] == sid for s in r.sessions()), 5, "session appears")
            st, js = r.api("POST", f"/api/sessions/{sid}/control", {"level": 2, "mask": 5})
            eq(st, 200, f"control {js}")
            st, js = r.api("POST", f"/api/sessions/{sid}/control", {"level": 4, "mask": "0xff"})
            eq(st, 200, f"control {js}")
            out, err = sy.communicate(timeout=20)
            eq(sy.returncode, 0, f"synth failed: {err}")
            check("REPLY CONTROL seq=1 level=2 mask=5" in out, f"first CONTROL not received: {out}")
            check("REPLY CONTROL seq=2 level=4 mask=255" in out, f"second CONTROL: {out}")
            eq(r.session(sid)["control"], {"level": 4, "mask": 255}, "control state")
        wait_for(lambda: not r.session("00000000000c0171")["live"], 5, "tcp session ends")
        st, js = r.api("POST", "/api/sessions/00000000000c0171/control", {"level": 1, "mask": 1})
        eq(st, 409, f"control on an ended session: {js}")
    finally:
        eq(r.stop(), 0, "exit code")


def attack(mode, r, *args, timeout=30):
    p = subprocess.run([os.path.join(BIN, "tmk-relay-attack"), mode, "--to", f"127.0.0.1:{r.port}",
                        *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"tmk-relay-attack {mode} {args} failed ({p.returncode}): {p.stderr}")
    return p.stdout


def sanitized():
    return RELAY.endswith("-asan")


def alive(r):
    check(r.proc.poll() is None, f"the relay died (exit {r.proc.returncode})")
    return r.get("/api/relay")


def case_evict_threads():
    """Issue 15 item 1: a new thread after eviction has begun must not make eviction write
    through a stale pointer into the moved thread table (release build: segfault)."""
    r = Relay("--session-memory", "1M")
    try:
        sid = "0a77ac4000000001"
        attack("threads", r, "--session", sid, "--count", 14, "--zones", 8000)
        js = wait_for(lambda: (lambda j: j["stats"]["packets"] >= 14 and j)(r.session(sid)), 10,
                      "14 packets stored")
        alive(r)
        check(js["stats"]["evicted"] > 0, f"no eviction: {js['stats']}")
        check(js["stats"]["mem_bytes"] <= 1 << 20, f"over budget: {js['stats']}")
        eq(js["threads"], 14, "threads")
        total = 0
        for t in range(14):
            z = zones_of(r, sid, f"&thread={t}")["zones"]
            eq(sorted({x[2] for x in z} - {t}), [], f"zones of other threads in thread {t}")
            total += len(z)
        eq(total + js["stats"]["evicted"], js["stats"]["zones"], "kept + evicted = stored")
    finally:
        eq(r.stop(), 0, "exit code")


def case_tcp_takeover():
    """Issue 15 item 2: a second TCP connection from the same host takes the session over; the
    first connection, closed after the session was evicted, must not touch the freed session
    (heap use-after-free: telemark-relay-asan aborts)."""
    r = Relay("--max-sessions", 4)  # two connections per host
    try:
        sid = "00000000007a4e01"
        first = synth_bg("--to", f"127.0.0.1:{r.port}", "--tcp", "--session", sid, "--packets", 5,
                         "--no-bye", "--linger", 4500)
        r.wait_zones(sid, 5 * 40)
        time.sleep(2.3)  # the first connection has been quiet long enough to be replaced
        synth("--to", f"127.0.0.1:{r.port}", "--tcp", "--session", sid, "--packets", 5,
              "--seq-start", 5, "--no-bye")
        js = r.wait_zones(sid, 10 * 40)
        eq(js["transport"], "tcp", "transport")
        wait_for(lambda: not r.session(sid)["live"], 5, "the second connection's close")
        attack("churn", r, "--count", 4)  # evicts the ended session
        wait_for(lambda: all(s["id"] != sid for s in r.sessions()), 5, "the session evicted")
        out, err = first.communicate(timeout=20)  # the first connection closes now
        eq(first.returncode, 0, f"first synth: {err}")
        time.sleep(0.3)
        alive(r)
    finally:
        eq(r.stop(), 0, "exit code")


def case_spoof_session():
    """Issue 15 item 3: one spoofed packet from the target's own address (127.0.0.1, another
    port) must not freeze a session (seq = next + 2^40), rewrite its facts or redirect its
    CONTROL (a later HELLO), and a TCP HELLO must not hijack a live TCP link."""
    r = Relay()
    try:
        sid = "00000000005b0f01"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 20, "--no-bye")
        r.wait_zones(sid, 20 * 40)
        attack("seq", r, "--session", sid, "--seq", (1 << 40) + 20)
        attack("hello", r, "--session", sid, "--program", "evil", "--freq", 1)
        attack("hello", r, "--session", sid, "--program", "evil", "--tcp")
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 30, "--seq-start", 20,
              "--no-hello", "--no-bye")
        js = r.wait_zones(sid, 50 * 40)
        eq(js["stats"]["lost"], 0, "lost after a spoofed seq jump")
        eq((js["program"], js["timer_freq"]), ("tmk-relay-synth", 1000000000), "facts")
        eq(js["stats"]["spoofed"], 3, "refused: the jump and two HELLOs")
        eq(zones_of(r, sid, "&t0=1000000&t1=1099999")["count"], 2 * 20, "times still in ns")
        # the same facts from another port (what an attacker who knows them sends): answered,
        # but CONTROL keeps going to the target
        sid2 = "00000000005b0f02"
        sy = synth_bg("--to", f"127.0.0.1:{r.port}", "--session", sid2, "--packets", 120,
                      "--rate", 100)
        wait_for(lambda: any(s["id"] == sid2 for s in r.sessions()), 5, "session appears")
        attack("hello", r, "--session", sid2, "--program", "tmk-relay-synth")
        st, js = r.api("POST", f"/api/sessions/{sid2}/control", {"level": 2, "mask": 5})
        eq(st, 200, f"control {js}")
        out, err = sy.communicate(timeout=20)
        check("REPLY CONTROL seq=1 level=2 mask=5" in out, f"CONTROL redirected away: {out}")
        # a live TCP link is not taken over by a second connection's HELLO
        sid3 = "00000000005b0f03"
        sy = synth_bg("--to", f"127.0.0.1:{r.port}", "--tcp", "--session", sid3, "--packets", 100,
                      "--rate", 100)
        wait_for(lambda: any(s["id"] == sid3 for s in r.sessions()), 5, "tcp session appears")
        src = r.session(sid3)["source"]
        attack("hello", r, "--session", sid3, "--program", "tmk-relay-synth", "--tcp")
        out, err = sy.communicate(timeout=20)
        eq(sy.returncode, 0, f"tcp synth: {err}")
        js = r.wait_zones(sid3, 100 * 40)
        eq(js["source"], src, "TCP link kept")
        eq((js["stats"]["lost"], js["stats"]["spoofed"]), (0, 1), "lost, spoofed over TCP")
    finally:
        eq(r.stop(), 0, "exit code")


def case_budget_tables():
    """Issue 15 item 4: the per-session budget covers the site and thread tables and their
    strings (65,536 sites x 2 KiB each made one session hold 138 MB), and zones far apart in
    time no longer take a 16 KiB chunk each (894 bytes of traffic filled 256 MiB)."""
    r = Relay("--max-sessions", 8, "--session-memory", "1M")
    try:
        base = r.rss_kb()
        sids = ["0a77ac4000000b01", "0a77ac4000000b02"]
        for sid in sids:
            attack("sites", r, "--session", sid, "--count", 400)
        for sid in sids:
            js = wait_for(lambda: (lambda j: j["stats"]["packets"] >= 400 and j)(r.session(sid)),
                          10, f"site packets of {sid}")
            check(js["stats"]["mem_bytes"] <= 1 << 20, f"{sid} holds {js['stats']['mem_bytes']}")
            check(js["stats"]["malformed"] > 0, f"sites beyond the budget not counted: {js}")
        rss = r.rss_kb()
        print(f"relay RSS {rss} KiB after 2 x 12,000 sites of 2 KiB (base {base} KiB)")
        if not sanitized():
            check(rss - base < 16 * 1024, f"relay RSS grew by {rss - base} KiB")
        # 2000 zones 2^33 ticks apart: 272 bytes each (a chunk each), they fit the 1 MiB budget
        sparse = "0a77ac4000000b03"
        attack("sparse", r, "--session", sparse, "--count", 1, "--zones", 2000)
        js = r.wait_zones(sparse, 2000)
        eq(js["stats"]["evicted"], 0, "zones evicted by sparse zones")
        check(js["stats"]["mem_bytes"] <= 1 << 20, f"sparse session holds {js['stats']['mem_bytes']}")
    finally:
        eq(r.stop(), 0, "exit code")


def case_evict_churn():
    """Issue 15 item 8: ended sessions count toward their host's half of --max-sessions, so 70
    DATA+BYE pairs from one host evict that host's own sessions, not another host's (here an
    ended one the user still wants to look at)."""
    r = Relay("--max-sessions", 8)
    try:
        sid = "00000000000e7c01"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 20)
        r.wait_zones(sid, 20 * 40)
        wait_for(lambda: not r.session(sid)["live"], 5, "session ended")
        attack("churn", r, "--bind", "127.0.0.2", "--count", 70)
        time.sleep(0.3)
        ids = [s["id"] for s in r.sessions()]
        check(sid in ids, f"the other host's session was evicted: {ids}")
        eq(r.session(sid)["stats"]["zones"], 20 * 40, "its zones")
        check(len(ids) <= 1 + 4, f"{len(ids)} sessions: the churning host holds more than half")
    finally:
        eq(r.stop(), 0, "exit code")


def case_tcp_exhaust():
    """Issue 15 item 9: 256 idle TCP connections (32 from each of 8 hosts) no longer lock TCP
    agents out, and a connection that names no session is closed after 3 s."""
    r = Relay()
    socks = []
    try:
        for h in range(2, 10):
            for _ in range(32):
                s = socket.socket()
                s.bind((f"127.0.0.{h}", 0))
                s.connect(("127.0.0.1", r.port))
                socks.append(s)
        time.sleep(0.3)
        t0 = time.time()
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--tcp", "--session", "00000000000e0901",
                         "--packets", 20))
        r.wait_zones(out["session"], out["zones"])
        # the idle ones are closed by the relay (EOF or reset) within about 3 s
        s = socks[-1]
        s.settimeout(max(0.5, 5 - (time.time() - t0)))
        try:
            got = s.recv(1)
        except ConnectionResetError:
            got = b""
        except socket.timeout:
            fail("an idle connection without HELLO was not closed")
        eq(got, b"", "idle connection closed")
        alive(r)
    finally:
        for s in socks:
            s.close()
        eq(r.stop(), 0, "exit code")


def case_reject_flood():
    """Issue 15 item 11: a 14-byte HELLO of another version earns a 136-byte REJECT; 2000 of
    them (as a forged source would send to reflect them at a victim) get one per second."""
    r = Relay()
    try:
        out = attack("old-hello", r, "--count", 2000)
        m = re.search(r"sent=(\d+) rejects=(\d+)", out)
        check(m, f"attack output {out!r}")
        check(1 <= int(m.group(2)) <= 2, f"{m.group(2)} REJECTs for 2000 HELLOs from one host")
        alive(r)
    finally:
        eq(r.stop(), 0, "exit code")


def case_query_load():
    """Issue 15 item 7: 16 concurrent zones?limit=1000000 queries on a session while it ingests
    at 3000 packets/s: the loop must keep up (queries held the session lock while building
    JSON, and the loop waited for it). A load check: at this size (chosen to run in seconds)
    the relay before the fix kept up too; the stall needed 64 queries of a million zones."""
    r = Relay()
    try:
        sid = "00000000000a7001"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 1000, "--zones", 40,
              "--no-bye")
        r.wait_zones(sid, 1000 * 80, timeout=20)
        stop = time.time() + 1.5
        done = [0]

        def hammer():
            while time.time() < stop:
                st, _ = r.api("GET", f"/api/sessions/{sid}/zones?limit=1000000")
                eq(st, 200, "heavy query")
                done[0] += 1
        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(16)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        out = sent(synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 3000,
                         "--zones", 40, "--seq-start", 1000, "--no-hello", "--no-bye",
                         "--rate", 3000))
        for t in threads:
            t.join(30)
        js = r.wait_zones(sid, (1000 + out["packets"]) * 80, timeout=20)
        print(f"{done[0]} heavy queries answered while 3000 packets arrived; lost "
              f"{js['stats']['lost']}")
        eq(js["stats"]["lost"], 0, "packets lost while the API was busy")
    finally:
        eq(r.stop(), 0, "exit code")


def case_stream_sites():
    """Issue 15 item 5: one SITE with id 4,194,304 made every dashboard client allocate 64 MB
    (a table indexed by site id); six subscribers must not cost the relay hundreds of MB."""
    r = Relay()
    ws = []
    try:
        sid = "0a77ac4000000501"
        attack("site", r, "--session", sid, "--site-id", 4194304)
        wait_for(lambda: any(s["id"] == sid and s["stats"]["zones"] == 10 for s in r.sessions()),
                 5, "the session")
        base = r.rss_kb()
        for _ in range(6):
            w = WS(r.http)
            eq(w.status, 101, "websocket upgrade")
            w.send_text(json.dumps({"op": "subscribe", "session": sid}))
            w.follow()
            ws.append(w)
        wait_for(lambda: all(w.received > 40 for w in ws), 10, "every subscriber's history")
        print("stream bytes", [w.received for w in ws])
        time.sleep(0.3)
        grew = r.rss_kb() - base
        print(f"relay RSS grew by {grew} KiB for 6 subscribers")
        if not sanitized():
            check(grew < 48 * 1024, f"six subscribers cost {grew} KiB")
        alive(r)
    finally:
        for w in ws:
            w.close()
        eq(r.stop(), 0, "exit code")


def case_ws_cap():
    """Issue 15 item 6: 64 idle WebSockets held all of civetweb's 64 threads and the API stopped
    answering. Streams are capped at 32 (429 with a clear message beyond), the API answers."""
    r = Relay()
    ws = []
    try:
        codes = []
        for _ in range(64):
            w = WS(r.http)
            codes.append(w.status)
            ws.append(w)
        eq(codes.count(101), 32, f"streams admitted ({codes})")
        eq(codes.count(429), 32, "streams refused with 429")
        refused = next(w for w in ws if w.status == 429)
        check(b"too many live streams" in refused.head + refused.rest, f"429 body: {refused.rest!r}")
        st, js = r.api("GET", "/api/relay")
        eq(st, 200, "the API answers with 32 streams open")
        for w in ws:
            w.close()
        ws = []
        time.sleep(0.5)
        # closed streams give their places back (on a loaded machine the relay may still be
        # closing them: try again, closing each refused one)
        w = wait_for(lambda: (lambda w: w if w.status == 101 else w.close())(WS(r.http)), 10,
                     "a stream after the others closed")
        ws.append(w)
        eq(w.status, 101, "a stream after the others closed")
    finally:
        for w in ws:
            w.close()
        eq(r.stop(), 0, "exit code")


def case_ws_idle():
    """32 idle WebSockets (open, sending nothing) locked every other dashboard out with 429 for
    good. A stream that sends nothing for --ws-idle seconds is closed; one that sends the page's
    keep-alive ({"op":"ping"}) or acks stays, however idle its session."""
    r = Relay("--ws-idle", 2)
    ws = []
    try:
        sid = "0000000000005e01"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 5)
        r.wait_zones(sid, 5 * 40)
        keep = WS(r.http)  # a page following an ended session: nothing to ack after its history
        eq(keep.status, 101, "keep-alive stream")
        keep.follow()
        keep.send_text(json.dumps({"op": "subscribe", "session": sid}))
        for _ in range(31):
            w = WS(r.http)
            eq(w.status, 101, "idle stream admitted")
            w.follow()
            ws.append(w)
        eq(WS(r.http).status, 429, "the 33rd stream while all are open")
        end = time.time() + 4.5
        while time.time() < end:  # the keep-alive the page sends every 10 s, faster here
            keep.send_text(json.dumps({"op": "ping"}))
            time.sleep(0.5)
        wait_for(lambda: all(w.closed for w in ws), 5, "the idle streams closed by the relay")
        check(not keep.closed, "the stream that sent keep-alives was closed")
        w = WS(r.http)
        eq(w.status, 101, "a new stream after the idle ones were closed")
        ws.append(w)
        st, js = r.api("GET", "/api/relay")
        eq(st, 200, "the API answers")
        keep.close()
    finally:
        for w in ws:
            w.close()
        eq(r.stop(), 0, "exit code")


def raw_http(port, method, path, headers, body=b""):
    """One request with exactly these headers (Host included); returns (status, headers, body)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for k, v in headers.items():
        c.putheader(k, v)
    if body or method == "POST":
        c.putheader("Content-Length", str(len(body)))
    c.endheaders(body)
    resp = c.getresponse()
    out = (resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    c.close()
    return out


def case_browser_checks():
    """Issue 15 item 10, loopback mode without a token: a DNS-rebinding page (Host = Origin =
    evil.example) must not read the API or the stream, CORS preflights get no permissive
    answer, and a cross-site text/plain POST is not executed."""
    r = Relay()
    try:
        sid = "00000000000b4010"
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 5, "--no-bye")
        r.wait_zones(sid, 5 * 40)
        evil = {"Host": f"evil.example:{r.http}", "Origin": f"http://evil.example:{r.http}"}
        st, _, body = raw_http(r.http, "GET", "/api/sessions", evil)
        eq(st, 403, f"rebinding page reading the API ({body[:80]!r})")
        check(b"Host" in body, f"403 says why: {body!r}")
        for host in (f"127.0.0.1:{r.http}", f"localhost:{r.http}", "localhost"):
            st, _, _ = raw_http(r.http, "GET", "/api/sessions", {"Host": host})
            eq(st, 200, f"Host {host}")
        w = WS(r.http, host=evil["Host"], headers={"Origin": evil["Origin"]})
        check(w.status in (401, 403), f"rebinding page opening the stream: {w.status}")
        w.close()
        st, hdrs, _ = raw_http(r.http, "OPTIONS", f"/api/sessions/{sid}/control",
                               {"Host": f"127.0.0.1:{r.http}", "Origin": "http://evil.example",
                                "Access-Control-Request-Method": "POST",
                                "Access-Control-Request-Headers": "content-type"})
        check("access-control-allow-origin" not in hdrs, f"CORS preflight granted: {st} {hdrs}")
        local = {"Host": f"127.0.0.1:{r.http}"}
        for asset in ("/", "/js/lod_worker.js"):  # the page and its worker are cross-origin isolated
            st, hdrs, _ = raw_http(r.http, "GET", asset, local)
            eq(st, 200, f"GET {asset}")
            eq(hdrs.get("cross-origin-opener-policy"), "same-origin", f"{asset} COOP")
            eq(hdrs.get("cross-origin-embedder-policy"), "require-corp", f"{asset} COEP")
            eq(hdrs.get("cross-origin-resource-policy"), "same-origin", f"{asset} CORP")
        path = f"/api/sessions/{sid}/record/start"
        st, _, _ = raw_http(r.http, "POST", path, {**local, "Content-Type": "text/plain",
                                                   "Origin": "http://evil.example"}, b"{}")
        eq(st, 415, "cross-site text/plain POST")
        st, _, _ = raw_http(r.http, "POST", path, {**local, "Content-Type": "application/json",
                                                   "Origin": "http://evil.example"}, b"{}")
        eq(st, 403, "POST from another origin")
        eq(r.session(sid)["recording"], False, "recording started by a foreign page")
        st, _, body = raw_http(r.http, "POST", path, {**local, "Content-Type": "application/json",
                                                      "Origin": f"http://127.0.0.1:{r.http}"}, b"{}")
        eq(st, 200, f"the dashboard's own POST ({body!r})")
    finally:
        eq(r.stop(), 0, "exit code")


def case_fuzz():
    """Structured UDP fuzzer (tmk-relay-attack fuzz): valid headers built by the encoder, mutated
    records, seq jumps, replays, HELLO/BYE, 24 sessions x 12 threads, for a bounded time, while
    the API is queried; meant for telemark-relay-asan, where any finding aborts the relay."""
    r = Relay("--max-sessions", 16, "--session-memory", "2M")
    secs = float(os.environ.get("TMK_RELAY_FUZZ_SECONDS", "10"))
    try:
        fz = subprocess.Popen([os.path.join(BIN, "tmk-relay-attack"), "fuzz", "--to",
                               f"127.0.0.1:{r.port}", "--seconds", str(secs), "--count", "24",
                               "--seed", str(int(os.environ.get("TMK_RELAY_FUZZ_SEED", "1")))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fz2 = subprocess.Popen([os.path.join(BIN, "tmk-relay-attack"), "fuzz", "--to",
                                f"127.0.0.1:{r.port}", "--bind", "127.0.0.2", "--seconds",
                                str(secs), "--count", "8", "--seed", "99"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        queried = 0
        followers = []
        end = time.time() + secs
        while time.time() < end and fz.poll() is None:
            alive(r)
            lst = r.sessions()
            if len(followers) < 4 and lst:  # dashboards following fuzzed sessions
                w = WS(r.http)
                eq(w.status, 101, "websocket upgrade")
                w.send_text(json.dumps({"op": "subscribe", "session": lst[len(followers) % len(lst)]["id"]}))
                w.follow()
                followers.append(w)
            for s in lst:
                for q in ("", "/zones?limit=500", "/events?limit=500", "/sites"):
                    st, _ = r.api("GET", f"/api/sessions/{s['id']}{q}")
                    check(st in (200, 404), f"GET session {s['id']}{q}: {st}")  # 404: evicted
                    queried += 1
            time.sleep(0.2)
        out, err = fz.communicate(timeout=secs + 30)
        eq(fz.returncode, 0, f"fuzzer failed: {err}")
        out2, err = fz2.communicate(timeout=secs + 30)
        eq(fz2.returncode, 0, f"second fuzzer failed: {err}")
        print(out.strip(), "|", out2.strip(), f"queries={queried}",
              f"stream bytes={sum(w.received for w in followers)}")
        for w in followers:
            w.close()
        info = alive(r)
        check(info["garbage"] >= 0, "relay info")
        check(len(r.sessions()) > 0, "no session survived the fuzzer")
    finally:
        eq(r.stop(), 0, "exit code")
    check("runtime error" not in r.log() and "Sanitizer" not in r.log(), "sanitizer report")


def case_demo():
    """The real agent: telemark-demo over UDP, TCP and its file transport."""
    data = os.path.join(TMP, "data")
    os.makedirs(data, exist_ok=True)
    r = Relay(data=data)
    try:
        for transport in ("udp", "tcp"):
            before = {s["id"] for s in r.sessions()}
            p = subprocess.run([DEMO, "--seconds", "2", "--relay", f"127.0.0.1:{r.port}",
                                "--transport", transport], capture_output=True, text=True, timeout=30)
            eq(p.returncode, 0, f"demo over {transport}: {p.stderr}")
            m = re.search(r"(\d+) packets", p.stdout)
            check(m and int(m.group(1)) > 0, f"demo sent nothing: {p.stdout}")
            new = wait_for(lambda: [s for s in r.sessions() if s["id"] not in before], 5,
                           f"a {transport} demo session")
            sid = new[0]["id"]
            js = wait_for(lambda: (lambda j: not j["live"] and j)(r.session(sid)), 15,
                          f"the {transport} demo session to end")
            st = js["stats"]
            eq(js["transport"], transport, "transport")
            check(js["has_hello"] and js["program"], f"target facts missing: {js}")
            check(st["zones"] > 1000, f"only {st['zones']} zones from the demo")
            eq(st["malformed"], 0, "malformed packets from the demo")
            eq(st["unresolved_sites"], 0, "sites without descriptors")
            # every packet the agent reports sent is accounted for: decoded, or (UDP only) counted
            # lost (the demo reads its counters before the agent's final flush, so the relay may
            # see a few more)
            sent_packets = int(m.group(1))
            if transport == "tcp":
                eq(st["lost"], 0, "lost over TCP")
            check(st["packets"] + st["lost"] >= sent_packets,
                  f"relay saw {st['packets']} + {st['lost']} lost of {sent_packets} demo packets")
            drops = re.search(r"dropped: ring full (\d+), no thread slot (\d+)", p.stdout)
            check(drops, f"demo drop summary missing: {p.stdout}")
            eq((js["dropped_by_reason"]["ring_full"], js["dropped_by_reason"]["no_thread"]),
               (int(drops.group(1)), int(drops.group(2))), "agent drops reported in-band")
            z = r.get(f"/api/sessions/{sid}/zones?limit=100")
            check(z["count"] == 100 and z["truncated"], "zones query on the demo session")
            check(len(r.get(f"/api/sessions/{sid}/sites")["threads"]) >= 2, "demo threads")
        p = subprocess.run([DEMO, "--seconds", "1", "--transport", "file", "--file",
                            os.path.join(data, "demo.tmkf")], capture_output=True, text=True,
                           timeout=30)
        eq(p.returncode, 0, f"demo to a file: {p.stderr}")
        st, js = r.api("POST", "/api/recordings/open", {"name": "demo.tmkf"})
        eq(st, 200, f"open the demo's file: {js}")
        check(js["stats"]["zones"] > 1000 and js["stats"]["malformed"] == 0,
              f"demo file replay: {js['stats']}")
    finally:
        eq(r.stop(), 0, "exit code")


def case_agent_cross():
    """The real agent built for another CPU (tests/agent/agent_sendtest.c under qemu-user): a
    known workload, checked value by value after the relay normalised its byte order. Keyed
    (PROTOCOL.md §2.1): the MAC's byte order is the same on every target. Without --qemu, the
    host's own agent (case keyed_agent)."""
    check(os.path.exists(SENDTEST), f"{SENDTEST} missing: the cross sub-build did not build it")
    r = Relay("--key", key_file(f"sendtest {KEY}\n"))
    try:
        for transport in ("udp", "tcp"):
            before = {s["id"] for s in r.sessions()}
            p = subprocess.run([*QEMU.split(), SENDTEST, "127.0.0.1", str(r.port), transport, KEY],
                               capture_output=True, text=True, timeout=90)
            eq(p.returncode, 0, f"sendtest over {transport}: {p.stderr}")
            check("welcomed 1, keyed 1" in p.stdout, f"the agent was not welcomed: {p.stdout}")
            new = wait_for(lambda: [s for s in r.sessions() if s["id"] not in before], 10,
                           f"the {transport} session")
            sid = new[0]["id"]
            js = wait_for(lambda: (lambda j: not j["live"] and j)(r.session(sid)), 20,
                          "the session to end")
            st = js["stats"]
            eq(js["byte_order"], "big" if BIG_ENDIAN else "little", "byte order fact")
            eq(js["program"], "sendtest", "program")
            eq(js["transport"], transport, "transport")
            eq((st["lost"], st["malformed"], st["unresolved_sites"]), (0, 0, 0),
               "lost, malformed, unresolved")
            eq(st["dropped_by_agent"], 0, "agent drops")
            sites = r.get(f"/api/sessions/{sid}/sites")
            names = {x["id"]: x["name"] for x in sites["sites"]}
            zones = zones_of(r, sid)["zones"]
            per_name = {}
            for z in zones:
                per_name[names[z[3]]] = per_name.get(names[z[3]], 0) + 1
            for n in ("frame", "update", "leaf", "render"):
                eq(per_name.get(n), 2000, f"{n} zones")
            eq(per_name.get("marker"), 1, "marker zone (paired BEGIN/END)")
            eq(sorted(t["name"] for t in sites["threads"] if t["name"].startswith("worker")),
               ["worker-a", "worker-b"], "thread names")
            check(any(t["name"] == "render" for t in sites["teams"]), "team name")
            ev = events_of(r, sid, "plot,message,marker_begin")
            plots = sorted(e["value"] for e in ev if e["type"] == "plot")
            eq(plots, [-16.5e300, -1234567890123], "plot values normalised")
            msgs = [e["text"] for e in ev if e["type"] == "message"]
            eq(msgs, ["dynamic \u00e9t\u00e9"], "message text")
            pays = [(e["payload"], e["payload_hex"]) for e in ev if e["type"] == "marker_begin"]
            eq(pays, [("payload-\u0001\u0002\ufffd", b"payload-\x01\x02\xff".hex())],
               "marker payload (text with U+FFFD for the invalid byte, exact hex)")
        rel = r.get("/api/relay")
        eq((rel["unauthenticated"], rel["bad_mac"]), (0, 0), "packets refused")
    finally:
        eq(r.stop(), 0, "exit code")


def case_keyed_agent():
    global SENDTEST, QEMU, BIG_ENDIAN
    SENDTEST, QEMU, BIG_ENDIAN = os.path.join(BIN, "tmk-agent-sendtest"), "", 0
    case_agent_cross()


# ---------------------------------------------------------------------------------------------
# Authenticated ingest (PROTOCOL.md §2.1, SECURITY.md)
KEY = "000102030405060708090a0b0c0d0e0f"
KEY2 = "f0e1d2c3b4a5968778695a4b3c2d1e0f"


def key_file(text, mode=0o600):
    os.makedirs(TMP, exist_ok=True)
    path = os.path.join(TMP, f"keys-{time.time_ns()}.txt")
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def case_key_file():
    """--key FILE: a bad file stops the relay at start-up with a message naming the line."""
    exe = os.path.join(BIN, RELAY)
    many = "".join(f"p{i} {KEY}\n" for i in range(33))
    for text, why in ((f"tmk-relay-synth 0011\n", ":1: the key of 'tmk-relay-synth' is not 32 hex"),
                      (f"# comment\n\nfoo {KEY} extra\n", ":3: expected 'PROGRAM KEY'"),
                      (f"foo\n", ":1: expected 'PROGRAM KEY'"),
                      (f"foo {KEY}\n  # x\nfoo {KEY2}\n", ":3: 'foo' has a key already"),
                      (f"foo {'zz' * 16}\n", ":1: the key of 'foo' is not 32 hex"),
                      (f"{'p' * 130} {KEY}\n", ":1: program name longer than 127"),
                      ("# nothing but comments\n", ": no keys in it"),
                      (many, ":33: more than 32 keys")):
        path = key_file(text)
        p = subprocess.run([exe, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir",
                            os.path.join(TMP, "d"), "--key", path], capture_output=True, text=True,
                           timeout=10)
        eq(p.returncode, 2, f"exit code for key file {text[:40]!r}")
        check(path + why in p.stderr, f"message for {text[:40]!r}: {p.stderr!r}")
    p = subprocess.run([exe, "--key", os.path.join(TMP, "missing.keys")], capture_output=True,
                       text=True, timeout=10)
    eq(p.returncode, 2, "exit code for a missing key file")
    check("cannot read key file" in p.stderr, f"missing file message: {p.stderr!r}")
    # a good file others can read: the relay runs, and says so; two files add up
    r = Relay("--key", key_file(f"a {KEY}\r\n* {KEY2}  # studio\n", 0o644),
              "--key", key_file(f"b {KEY}\n"))
    try:
        check("can be read by every user" in r.log(), "no warning for a world-readable key file")
        check("keys for 3 program(s): a, *, b" in r.log(), "keys not logged")
        eq(r.get("/api/relay")["keys"], 3, "keys in /api/relay")
    finally:
        eq(r.stop(), 0, "exit code")


def case_keyed():
    """Keyed ingest end to end (UDP, TCP): everything arrives, the relay's WELCOME and CONTROL
    carry a valid MAC; for a keyed session, packets without a MAC, with another key or replayed
    are dropped and counted, and the session keeps its facts and data."""
    r = Relay("--key", key_file(f"# studio\ntmk-relay-synth {KEY}\nother {KEY2}\n"))
    to = f"127.0.0.1:{r.port}"
    try:
        for transport, sid in (([], "00000000000e0001"), (["--tcp"], "00000000000e0002")):
            sy = synth_bg("--to", to, "--session", sid, "--packets", 150, "--rate", 100,
                          "--key", KEY, *transport)
            wait_for(lambda: any(s["id"] == sid for s in r.sessions()), 5, "session appears")
            st, js = r.api("POST", f"/api/sessions/{sid}/control", {"level": 2, "mask": 5})
            eq(st, 200, f"control {js}")
            out, err = sy.communicate(timeout=20)
            eq(sy.returncode, 0, f"synth failed: {err}")
            check("REPLY WELCOME version=1 mac=ok" in out, f"WELCOME not keyed: {out}")
            check("REPLY CONTROL seq=1 level=2 mask=5 mac=ok" in out, f"CONTROL not keyed: {out}")
            js = r.wait_zones(sid, 150 * 40)
            eq((js["stats"]["lost"], js["stats"]["duplicated"]), (0, 0), "lost, duplicated")
        rel = r.get("/api/relay")
        eq((rel["keys"], rel["unauthenticated"], rel["bad_mac"]), (2, 0, 0), "keys, refused")

        sid = "00000000000e0003"
        synth("--to", to, "--session", sid, "--packets", 20, "--no-bye", "--key", KEY)
        r.wait_zones(sid, 20 * 40)
        # spoofed, no MAC: DATA further on, a HELLO renaming it, a BYE
        synth("--to", to, "--session", sid, "--packets", 10, "--seq-start", 20, "--no-hello",
              "--no-bye")
        attack("hello", r, "--session", sid, "--program", "evil", "--freq", 1)
        synth("--to", to, "--session", sid, "--packets", 0, "--no-hello")
        wait_for(lambda: r.get("/api/relay")["unauthenticated"] == 12, 5, "12 unauthenticated")
        # another key
        synth("--to", to, "--session", sid, "--packets", 5, "--seq-start", 30, "--no-hello",
              "--no-bye", "--key", KEY2)
        wait_for(lambda: r.get("/api/relay")["bad_mac"] == 5, 5, "5 with a bad MAC")
        # replayed: the very packets it sent, MAC and all
        synth("--to", to, "--session", sid, "--packets", 20, "--no-bye", "--key", KEY)
        js = wait_for(lambda: (lambda j: j["stats"]["duplicated"] == 20 and j)(r.session(sid)), 5,
                      "20 replays counted as duplicates")
        eq(js["stats"]["zones"], 20 * 40, "zones after the attacks")
        eq((js["program"], js["timer_freq"], js["live"]), ("tmk-relay-synth", 1000000000, True),
           "facts and liveness kept")
        # the real target goes on
        synth("--to", to, "--session", sid, "--packets", 10, "--seq-start", 20, "--no-hello",
              "--key", KEY)
        js = r.wait_zones(sid, 30 * 40)
        eq(js["stats"]["lost"], 0, "lost")

        # an unkeyed HELLO for a keyed program is refused, and told why
        sid = "00000000000e0004"
        out = synth("--to", to, "--session", sid, "--packets", 0, "--no-bye", "--linger", 300)
        check("REPLY REJECT reason=4 text=telemark-relay requires a key for program "
              "'tmk-relay-synth'" in out, f"no REJECT: {out}")
        check(all(s["id"] != sid for s in r.sessions()), "session created by an unkeyed HELLO")
        # a program no key names stays unkeyed
        sid = "00000000000e0005"
        synth("--to", to, "--session", sid, "--packets", 10, "--program", "free")
        eq(r.wait_zones(sid, 400)["program"], "free", "an unkeyed program")
        rel = r.get("/api/relay")
        eq((rel["unauthenticated"], rel["bad_mac"]), (13, 5), "refused in all")
        check("with no MAC for a keyed session; dropped (--key)" in r.log(), "refusals not logged")
    finally:
        eq(r.stop(), 0, "exit code")

    # "*": every program is keyed, unkeyed DATA of an unknown session too
    r = Relay("--key", key_file(f"* {KEY}\n"))
    try:
        synth("--to", f"127.0.0.1:{r.port}", "--session", "00000000000e0006", "--packets", 10,
              "--no-hello", "--no-bye")
        wait_for(lambda: r.get("/api/relay")["unauthenticated"] == 10, 5, "10 unauthenticated")
        eq(r.sessions(), [], "sessions from unkeyed DATA")
        sid = "00000000000e0007"  # keyed DATA before any HELLO (a relay restarted): accepted
        synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 10, "--no-hello",
              "--key", KEY)
        r.wait_zones(sid, 400)
    finally:
        eq(r.stop(), 0, "exit code")


def case_qemu_ppc():
    check(os.path.exists(PPC_SYNTH), f"{PPC_SYNTH} missing: the cross-ppc sub-build did not build it")
    r = Relay()
    try:
        sid = "00000000c0ffee01"
        for transport in ([], ["--tcp"]):
            args = ["--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 40, "--zones", 10,
                    "--threads", 2, "--big-endian", "--seq-start", 0 if not transport else 40]
            p = subprocess.run([*QEMU.split(), PPC_SYNTH, *map(str, args), *transport],
                               capture_output=True, text=True, timeout=60)
            eq(p.returncode, 0, f"ppc synth: {p.stderr}")
            check("REPLY WELCOME" in p.stdout, f"no WELCOME to the ppc target: {p.stdout}")
        js = r.wait_zones(sid, 80 * 2 * 10)
        eq((js["arch"], js["byte_order"], js["transport"]), ("ppc", "big", "tcp"), "ppc facts")
        eq(js["stats"]["lost"], 0, "lost")
        eq([p["value"] for p in events_of(r, sid, "plot")], [s + 0.5 for s in range(80)],
           "doubles from a big-endian target")
        eq([f["time_ns"] for f in events_of(r, sid, "frame")], [frame_time(s) for s in range(80)],
           "frames from a big-endian target")
    finally:
        eq(r.stop(), 0, "exit code")


def case_analysis():
    """GET …/stats and …/occurrences (docs/API.md "Analysis"): exact against …/zones, also when
    one thread holds more zones than one locked slice (65,536); hostile parameters; many at once."""
    r = Relay()
    try:
        sid = "00000000000a7a10"
        out = synth("--to", f"127.0.0.1:{r.port}", "--session", sid, "--packets", 1800,
                    "--zones", 40, "--threads", 1, "--rate", 0)
        n = sent(out)["zones"]
        r.wait_zones(sid, n, timeout=30)
        zones = zones_of(r, sid)["zones"]
        ref = {}
        for start, dur, thread, site, depth, flags in zones:
            a = ref.setdefault(site, [0, 0, 0])
            a[0] += 1
            a[1] += dur
            a[2] = max(a[2], dur)
        st = r.get(f"/api/sessions/{sid}/stats?limit=10000")
        eq(st["zones"], len(zones), "stats covers every zone once (sliced reads)")
        check(len(zones) > 65536, f"more zones than one slice ({len(zones)})")
        eq(st["complete"], True, "complete")
        eq({s["site"]: [s["count"], s["total_ns"], s["max_ns"]] for s in st["sites"]}, ref,
           "per-site count/total/max")
        for s in st["sites"]:
            check(0 <= s["self_ns"] <= s["total_ns"], f"self within total: {s}")
            check(s["min_ns"] <= s["median_ns"] <= s["p95_ns"] <= s["max_ns"], f"order: {s}")
        parent = [s for s in st["sites"] if s["site"] == 1][0]
        kids = sum(s["total_ns"] for s in st["sites"] if s["site"] != 1)
        eq(parent["self_ns"], parent["total_ns"] - kids, "self = total - children")
        oc = r.get(f"/api/sessions/{sid}/occurrences?site=2&limit=5&bins=10")
        eq(oc["total"], ref[2][0], "occurrences total")
        eq(sum(oc["histogram"]["counts"]), ref[2][0], "histogram holds all")
        eq(oc["occurrences"][0][1], ref[2][2], "slowest first")
        big = "9" * 400
        cases = [
            f"stats?t0={big}", "stats?t0=1&t1=0x", "stats?level=-1", "stats?level=6",
            "stats?mask=4294967296", "stats?threads=", "stats?threads=1,,2,x",
            "stats?threads=" + ",".join(["4294967296"]), "stats?name=" + "a" * 129,
            "stats?limit=10001", "stats?limit=abc", "occurrences?site=4294967296",
            "occurrences?site=1&bins=0", "occurrences?site=1&limit=100001",
            "occurrences?site=1&sort=" + "x" * 100, "stats?t0=" + "%00" * 50,
        ]
        for q in cases:
            code, js = r.api("GET", f"/api/sessions/{sid}/{q}")
            eq(code, 400, f"{q[:60]} status ({str(js)[:200]})")
            check(js.get("error") and js.get("code"), f"{q[:60]}: error body {js}")
        code, js = r.api("GET", "/api/sessions/ffffffffffffffff/stats")
        eq(code, 404, "unknown session")
        code, js = r.api("GET", "/api/sessions/ffffffffffffffff/occurrences?site=1")
        eq(code, 404, "unknown session")
        # many at once: each answered correctly or told to retry (503), the relay unharmed
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            res = list(ex.map(lambda _: r.api("GET", f"/api/sessions/{sid}/stats?limit=3"),
                              range(32)))
        for code, js in res:
            check(code in (200, 503), f"concurrent stats: {code} {js}")
            if code == 200:
                eq(js["zones"], len(zones), "concurrent answer")
        check(any(c == 200 for c, _ in res), "some concurrent request answered")
        eq(r.session(sid)["stats"]["zones"], n, "store unchanged")
    finally:
        eq(r.stop(), 0, "exit code")


def main():
    global BIN, TMP, QEMU, PPC_SYNTH, DEMO, SENDTEST, BIG_ENDIAN, RELAY
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--qemu", default="")
    ap.add_argument("--ppc-synth", default="")
    ap.add_argument("--demo", default="")
    ap.add_argument("--sendtest", default="")
    ap.add_argument("--big-endian", type=int, default=0)
    ap.add_argument("--relay", default="telemark-relay")
    a = ap.parse_args()
    RELAY = a.relay
    BIN, TMP, QEMU, PPC_SYNTH, DEMO = a.bin, a.tmp, a.qemu, a.ppc_synth, a.demo
    SENDTEST, BIG_ENDIAN = a.sendtest, a.big_endian
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    fn = globals().get("case_" + a.case)
    if not fn:
        print(f"unknown case {a.case}", file=sys.stderr)
        return 2
    try:
        fn()
    except AssertionError as e:
        print(f"FAIL relay_{a.case}: {e}", file=sys.stderr)
        for name in sorted(os.listdir(TMP)):
            if name.endswith(".log"):
                print(f"--- {name}", file=sys.stderr)
                print(open(os.path.join(TMP, name)).read()[-3000:], file=sys.stderr)
        return 1
    print(f"ok relay_{a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
