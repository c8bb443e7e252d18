"""chserver.py — starts Debian's clickhouse-server as the test's own process: a temporary
directory, a generated config.xml/users.xml, free loopback ports; never a system service.
Used by tests/clickhouse/clickhouse_test.py and bench/clickhouse/."""
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

SERVER = shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server"


def free_port():
    """A free loopback port below the kernel's ephemeral range (net.ipv4.ip_local_port_range), at
    random. The server is stopped and started again on the same ports: a port the kernel hands
    out for bind(0) could meanwhile go to another test's relay or server (which then gets this
    test's traffic), one below the range cannot."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        low, high = 32768, 60999
    lo, hi = (10000, low - 1) if low > 12000 else (high + 1, 65535)
    if hi - lo < 2000:
        raise RuntimeError(f"the ephemeral port range {low}..{high} leaves no room for test ports")
    for _ in range(1000):
        port = random.randint(lo, hi)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {lo}..{hi}")


CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/log/server.log</log><errorlog>{d}/log/err.log</errorlog>
    <size>10M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <max_connections>256</max_connections>
  <keep_alive_timeout>10</keep_alive_timeout>
  <max_concurrent_queries>64</max_concurrent_queries>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <mark_cache_size>67108864</mark_cache_size>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mlock_executable>false</mlock_executable>
  <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
  <max_session_timeout>3600</max_session_timeout>
  <default_session_timeout>60</default_session_timeout>
</yandex>
"""

USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage>
    <load_balancing>random</load_balancing></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
"""


class ClickHouse:
    """One server in `workdir`. start() / stop() / kill() can be repeated (same ports, same
    data), which is how the tests take it away mid-stream and bring it back."""

    def __init__(self, workdir, http_port=0):
        self.dir = os.path.abspath(workdir)
        self.http = http_port or free_port()
        self.tcp = free_port()
        while self.tcp == self.http:  # not yet bound: the same port could come twice
            self.tcp = free_port()
        self.proc = None
        for sub in ("log", "data", "tmp", "user_files", "format_schemas"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        with open(os.path.join(self.dir, "config.xml"), "w") as f:
            f.write(CONFIG.format(d=self.dir, http=self.http, tcp=self.tcp))
        with open(os.path.join(self.dir, "users.xml"), "w") as f:
            f.write(USERS)

    def url(self, database="telemark"):
        return "http://127.0.0.1:%d/?database=%s" % (self.http, database)

    def start(self, timeout=30):
        self.out = open(os.path.join(self.dir, "log", "stdout.log"), "ab")
        self.proc = subprocess.Popen(
            [SERVER, "--config-file=" + os.path.join(self.dir, "config.xml")],
            cwd=self.dir, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("clickhouse-server exited with %s; see %s/log" %
                                   (self.proc.returncode, self.dir))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/ping" % self.http, timeout=1) as r:
                    if r.read().strip() == b"Ok.":
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("clickhouse-server did not answer /ping within %ds" % timeout)

    def query(self, sql, database="telemark", timeout=30):
        """Runs one statement over HTTP; returns the body as text (TSV for SELECTs)."""
        q = urllib.parse.urlencode({"database": database, "query": sql})
        req = urllib.request.Request("http://127.0.0.1:%d/?%s" % (self.http, q), data=b"")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError("ClickHouse: %s\n%s" % (e, e.read().decode(errors="replace")))

    def scalar(self, sql, **kw):
        return int(self.query(sql, **kw).strip() or 0)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def kill(self):
        """SIGKILL: the server vanishes mid-request, as in a crash."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


def main():
    """chserver.py DIR: starts a server in DIR, prints "http PORT", stops it when stdin closes
    (so a test runner in another language cannot leave it behind)."""
    import sys
    ch = ClickHouse(sys.argv[1]).start()
    print("http %d" % ch.http, flush=True)
    try:
        sys.stdin.read()
    finally:
        ch.stop()


if __name__ == "__main__":
    main()
