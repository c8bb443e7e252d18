"""relayproc.py — what the Python end-to-end tests and benches share: assertions that raise with
a message, polling with a deadline, and a telemark-relay process started on free loopback ports
(port 0 for both, read back from the line the relay logs) with its JSON API (docs/API.md).

Import it with the folder on sys.path:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
"""
import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+) \(udp\+tcp\), http://127\.0\.0\.1:(\d+)/")


def fail(msg):
    raise AssertionError(msg)


def check(cond, msg):
    if not cond:
        fail(msg)


def eq(a, b, what):
    if a != b:
        fail(f"{what}: expected {b!r}, got {a!r}")


def wait_for(pred, timeout=10.0, what="condition", interval=0.05):
    """Calls pred until it returns something true (returned) or timeout seconds pass (fails with
    the last value)."""
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    fail(f"timed out waiting for {what} (last: {last!r})")


class RelayProcess:
    """telemark-relay (or telemark-relay-asan) on 127.0.0.1 with free ports; its output goes to
    logpath. extra: further command-line arguments. .port is the UDP/TCP ingest port, .http the
    dashboard/API port."""

    def __init__(self, binary, logpath, data, *extra, preexec=None, start_timeout=10.0):
        self.logpath = logpath
        self.logf = open(logpath, "w")
        args = [binary, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir", data,
                *map(str, extra)]
        self.proc = subprocess.Popen(args, stdout=self.logf, stderr=subprocess.STDOUT,
                                     preexec_fn=preexec)
        m = wait_for(lambda: self.proc.poll() is None and LISTENING.search(self.log()),
                     start_timeout, f"relay start (log: {logpath})")
        self.port, self.http = int(m.group(1)), int(m.group(2))

    def log(self):
        with open(self.logpath) as f:
            return f.read()

    def api(self, method, path, body=None, raw=None, timeout=10):
        """(status, parsed JSON body); an error status with a body that is not JSON fails."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"} if method == "POST" else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                fail(f"{method} {path}: {e.code} with a body that is not JSON: {text!r}")

    def get(self, path, timeout=10):
        """The parsed answer of GET path, which must be 200."""
        st, js = self.api("GET", path, timeout=timeout)
        eq(st, 200, f"GET {path} status ({js})")
        return js

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Signals the relay and returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.logf.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.logf.close()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0
