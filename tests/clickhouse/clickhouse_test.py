#!/usr/bin/env python3
"""clickhouse_test.py — the history sink against the real Debian clickhouse-server, started by the
test in a temporary directory on free ports (chserver.py). Cases:
  counts     relay + demo targets (two builds): rows in ClickHouse equal the relay's own counts,
             and each zone row equals the relay's own zone field by field
  ch_kill    ClickHouse killed mid-stream, started again: exact counts, no duplicates
  relay_kill relay killed (SIGKILL) with spilled batches, started again: they are sent (by four
             senders, each claiming its own file), each once
  history    the relay's history queries (/api/history/*) on that data
  timers     zones of a 24 MHz timer (converted by the relay), of a session without HELLO (ticks
             as ns) and of a ns timer (expanded by ClickHouse from zone_runs12), and zones too
             long for the store's narrow record (sent as zones rows), all equal the relay's own
             zones field by field
  stall      ClickHouse stopped (SIGSTOP) while a batch is sent to it: the batch counts as
             pending (a script waiting for batches_pending == 0 must not go on), nothing counts
             as sent; once it runs again every zone is there exactly once
  upgrade    a database and a spill directory left by an earlier relay: its tables get the
             zone_runs and zone_runs12 views and keep working, a TMKCH001 spill file and a
             TMKCH002 one (16-byte zone_runs records) are sent, a file of an unknown format is
             renamed .bad with a logged error
  bad_answers (no clickhouse-server: the stand-in) a ClickHouse that answers 500, bytes that
             are not HTTP, closes at once, sends an 8 MiB error, a 200 cut short, or trickles
             its answer a byte at a time: each a counted error with a
             clear last_error, the sink down and its batches kept; once it answers properly,
             every zone is accepted exactly once
  slow_history (no clickhouse-server: the stand-in) a history query that ClickHouse answers
             after 12 s, within its max_execution_time of 30 s: the relay waits for it; six at
             once: four wait, two get 503 at once (counted, logged), the API answers meanwhile;
             an exception among the rows of a 200 gives a 502 that quotes it
  slow_reader (no clickhouse-server: the stand-in) a ClickHouse that reads a 6 MiB request at
             32 KiB/s, then one that reads none of it: the relay gives the request up at its
             deadline (10 s + 1 s per MiB), or after 10 s in which less than 64 KiB went; the
             batches are kept, and every zone is accepted exactly once afterwards
  ranks      (no clickhouse-server: a stand-in that keeps every request) sessions streaming at
             once, in an order other than their ids', and one more joining midway with an id
             between theirs: in every INSERT of zone_runs12 each session has one rank byte, and
             the ranks follow the session ids (the order k_zone_view's ORDER BY relies on);
             every zone the relay stored was sent once
Usage: clickhouse_test.py CASE --bin DIR --tmp DIR [--relay telemark-relay-asan]"""
import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chserver  # noqa: E402

BIN = TMP = None
RELAY_BIN = "telemark-relay"  # --relay: telemark-relay-asan for the sanitizer runs
RELAYS = []  # every relay started, killed at the end whatever happened
TABLES = ["sessions", "sites", "threads", "zones", "frames", "plots", "messages"]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from relayproc import RelayProcess, check, eq, fail, wait_for  # noqa: E402
from tmkrec import crc32c  # noqa: E402  (CRC-32C, as spill files use it)


class Relay(RelayProcess):
    def __init__(self, ch_url, data, *extra, name="relay"):
        super().__init__(os.path.join(BIN, RELAY_BIN),
                         os.path.join(TMP, f"{name}-{time.time_ns()}.log"), data,
                         "--clickhouse", ch_url, *extra)
        RELAYS.append(self.proc)

    def get(self, path, timeout=30):  # history queries can take a while on a loaded machine
        return super().get(path, timeout)

    def sink(self):
        return self.get("/api/relay")["clickhouse"]

    def stop(self):
        eq(super().stop(timeout=30), 0, "relay exit code")


def synth(relay, session, packets, *extra):
    return subprocess.Popen([os.path.join(BIN, "tmk-relay-synth"),
                             "--to", f"127.0.0.1:{relay.port}", "--tcp", "--packets", str(packets),
                             "--zones", "40", "--threads", "3", "--session", "%016x" % session,
                             "--linger", "500", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def demo(relay, seconds, build, label, transport="udp"):
    return subprocess.Popen([os.path.join(BIN, "telemark-demo"), "--seconds", str(seconds),
                             "--relay", f"127.0.0.1:{relay.port}", "--transport", transport,
                             "--build", build, "--label", label],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def relay_counts(relay):
    """{session id (int): zones} from the relay's own API, for sessions that said BYE."""
    out = {}
    for s in relay.get("/api/sessions"):
        out[int(s["session_id"], 16)] = s["stats"]["zones"]
    return out


def relay_frames(relay, sid):
    ev = relay.get(f"/api/sessions/{sid:016x}/events?type=frame&limit=1000000")
    return len(ev["events"]) if isinstance(ev, dict) else len(ev)


def ch_zones(ch, final=True):
    rows = ch.query("SELECT session, count() FROM zones %s GROUP BY session FORMAT TSV" %
                    ("FINAL" if final else ""))
    return {int(a): int(b) for a, b in (l.split("\t") for l in rows.split("\n") if l)}


def check_rows(ch, relay, sid):
    """Every zone row of session sid equals the relay's own zone field by field, and n numbers
    the session's zones 0..count-1 (the rows are made apart from the store: ClickHouse expands
    the store's raw records sent as zone_runs12, the relay converts other timers' ticks and
    wide records)."""
    z = relay.get(f"/api/sessions/{sid:016x}/zones?limit=1000000")
    eq(z["truncated"], False, "relay zones truncated")
    mine = sorted((r[0], r[1], r[2], r[3], r[4], r[5] & 1) for r in z["zones"])
    rows = ch.query("SELECT start_ns, dur_ns, thread, site, depth, marker FROM zones FINAL "
                    f"WHERE session = {sid} FORMAT TSV")
    got = sorted(tuple(int(x) for x in l.split("\t")) for l in rows.split("\n") if l)
    eq(len(got), len(mine), f"zone rows of {sid:016x}")
    diff = next((i for i, (a, b) in enumerate(zip(got, mine)) if a != b), None)
    if diff is not None:
        fail(f"zone rows of {sid:016x} differ from the relay's zones (start_ns, dur_ns, thread, "
             f"site, depth, marker): ClickHouse {got[diff]}, relay {mine[diff]}")
    nn = ch.query(f"SELECT min(n), max(n), uniqExact(n) FROM zones FINAL WHERE session = {sid} "
                  "FORMAT TSV").split()
    eq([int(x) for x in nn], [0, len(mine) - 1, len(mine)], f"n of {sid:016x}: min, max, distinct")


def check_events(ch, relay, sid):
    """Every frames, plots and messages row of session sid equals the relay's own event field
    by field (a message without text shows its site's name in the relay's API, PROTOCOL.md
    §5.7: its text is compared only when it has one)."""
    ev = relay.get(f"/api/sessions/{sid:016x}/events?type=frame,plot,message&limit=1000000")
    eq(ev["truncated"], False, "relay events truncated")
    by = {"frame": [], "plot": [], "message": []}
    for e in ev["events"]:
        by[e["type"]].append(e)
    def rows(sql):
        out = ch.query(sql + f" WHERE session = {sid} FORMAT TSV")
        return [l.split("\t") for l in out.split("\n") if l]
    got = sorted((int(a), int(b), int(c)) for a, b, c in
                 rows("SELECT thread, site, time_ns FROM frames FINAL"))
    eq(got, sorted((e["thread"], e["site"], e["time_ns"]) for e in by["frame"]),
       f"frames rows of {sid:016x}")
    got = sorted((int(a), int(b), int(c), float(d)) for a, b, c, d in
                 rows("SELECT thread, site, time_ns, value FROM plots FINAL"))
    mine = sorted((e["thread"], e["site"], e["time_ns"], float(e["value"])) for e in by["plot"])
    eq(len(got), len(mine), f"plots rows of {sid:016x}")
    for g, m in zip(got, mine):
        if g[:3] != m[:3] or abs(g[3] - m[3]) > 1e-9 * max(1.0, abs(m[3])):
            fail(f"plots row of {sid:016x}: ClickHouse {g}, relay {m}")
    got = sorted((int(a), int(b), int(c), int(d), int(e), t) for a, b, c, d, e, t in
                 rows("SELECT thread, site, time_ns, severity, verbosity, text FROM messages "
                      "FINAL"))
    mine = sorted((e["thread"], e["site"], e["time_ns"], e["severity"], e["verbosity"], e["text"])
                  for e in by["message"])
    eq(len(got), len(mine), f"messages rows of {sid:016x}")
    for g, m in zip(got, mine):
        if g[:5] != m[:5] or (g[5] and g[5] != m[5]):
            fail(f"messages row of {sid:016x}: ClickHouse {g}, relay {m}")
    return len(by["frame"]), len(by["plot"]), len(by["message"])


def settled_sink(relay, quiet, timeout):
    """The sink's counters once batches_pending has not changed for `quiet` seconds."""
    end = time.monotonic() + timeout
    s = relay.sink()
    since = time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.2)
        t = relay.sink()
        if t["batches_pending"] != s["batches_pending"]:
            since = time.monotonic()
        s = t
        if time.monotonic() - since >= quiet:
            return s
    fail(f"batches_pending still changing after {timeout} s (sink: {s})")


def drained(relay):
    s = relay.sink()
    return s if s["batches_pending"] == 0 and s["up"] else None


def session_zones(ch):
    """{session: zones} as the sessions table (FINAL) says: the sink's own count."""
    rows = ch.query("SELECT session, zones FROM sessions FINAL FORMAT TSV")
    return {int(a): int(b) for a, b in (l.split("\t") for l in rows.split("\n") if l)}


def in_clickhouse(ch, relay, sids, timeout, what, without_row=()):
    """Waits until the sink has nothing pending and ClickHouse holds, for each session in sids,
    as many zones as the relay has stored, with a sessions row that says so; returns those
    counts. A session's last rows come after its BYE (its final sessions row on the next second
    tick, the open batch sealed every 500 ms), and batches_pending does not count the batch
    being staged: a fixed wait before drained() can read an empty sink too early on a loaded
    machine. Sessions in without_row (no HELLO) have no sessions row."""
    seen = {}

    def done():
        if not drained(relay):
            seen["sink"] = relay.sink()
            return None
        have = relay_counts(relay)
        want = {k: have.get(k) for k in sids}
        z, sz = ch_zones(ch), session_zones(ch)
        seen.update(relay=want, zones=z, sessions=sz)
        return want if all(v and z.get(k) == v and (k in without_row or sz.get(k) == v)
                           for k, v in want.items()) else None
    try:
        return wait_for(done, timeout, what, interval=0.2)
    except BaseException:
        print(f"in_clickhouse: {what}: last seen {seen}", file=sys.stderr)
        raise


def check_exact(ch, relay_zones, what):
    got = ch_zones(ch)
    eq(got, relay_zones, f"{what}: zones per session in ClickHouse (FINAL) vs the relay")
    # The sessions table carries the sink's own count: equal again.
    eq(session_zones(ch), relay_zones, f"{what}: sessions.zones vs the relay")
    # Physically merged, the table holds every zone exactly once.
    ch.query("OPTIMIZE TABLE zones FINAL")
    eq(ch_zones(ch, final=False), relay_zones, f"{what}: zones after OPTIMIZE FINAL")
    n = ch.scalar("SELECT count() - uniqExact(session, n) FROM zones")
    eq(n, 0, f"{what}: duplicate (session, n) keys")


# ----------------------------------------------------------------------------------------------
def case_counts():
    ch = chserver.ClickHouse(os.path.join(TMP, "ch")).start()
    try:
        relay = Relay(ch.url(), os.path.join(TMP, "data"))
        d1 = demo(relay, 2, "4120", "nightly")
        d2 = demo(relay, 2, "4121", "dev-kit 7", transport="tcp")
        eq(d1.wait(30), 0, "demo 1 exit")
        eq(d2.wait(30), 0, "demo 2 exit")
        sessions = wait_for(lambda: [s for s in relay.get("/api/sessions") if not s["live"]]
                            if all(not s["live"] for s in relay.get("/api/sessions")) else None,
                            20, "both sessions ended")
        eq(sorted((s["build"], s["label"]) for s in sessions),
           [("4120", "nightly"), ("4121", "dev-kit 7")], "build/label in /api/sessions")
        want = relay_counts(relay)
        eq(len(want), 2, "sessions")
        in_clickhouse(ch, relay, want, 30, "both sessions in ClickHouse")
        s = relay.sink()
        eq(s["errors"], 0, "sink errors")
        eq(s["rows_dropped"], 0, "rows dropped")
        eq(ch_zones(ch, final=False), want, "zones without FINAL (nothing was retried)")
        for sid in want:
            eq(ch.scalar(f"SELECT count() FROM frames FINAL WHERE session = {sid}"),
               relay_frames(relay, sid), f"frames of {sid:016x}")
            check_rows(ch, relay, sid)
            nf, np_, nm = check_events(ch, relay, sid)
            if not (nf and np_ and nm):
                fail(f"session {sid:016x} sent {nf} frames, {np_} plots, {nm} messages: the "
                     "demo should send each")
        builds = ch.query("SELECT build, label, program FROM sessions FINAL ORDER BY build "
                          "FORMAT TSV")
        eq(builds, "4120\tnightly\ttelemark-demo\n4121\tdev-kit 7\ttelemark-demo\n",
           "sessions rows")
        n_sites = ch.scalar("SELECT count() FROM sites FINAL")
        if n_sites < 10:
            fail(f"only {n_sites} site rows")
        if s["rows_sent"] < sum(want.values()):
            fail(f"rows_sent {s['rows_sent']} < zones {sum(want.values())}")
        check_doc_tables(ch)
        relay.stop()
        check_exact(ch, want, "counts")
    finally:
        ch.stop()


def case_ch_kill():
    ch = chserver.ClickHouse(os.path.join(TMP, "ch")).start()
    try:
        relay = Relay(ch.url(), os.path.join(TMP, "data"))
        d = demo(relay, 5, "5000", "kill")
        # and a target with long runs, for 4 s
        t = synth(relay, 0x4c00000000000001, 4000, "--zones", "200", "--threads", "1",
                  "--rate", "1000")
        wait_for(lambda: relay.sink()["rows_sent"] > 0, 10, "first rows sent")
        time.sleep(0.7)
        ch.kill()  # mid-stream: requests in flight are cut
        s = wait_for(lambda: (lambda s: s if s["batches_spilled"] > 0 and not s["up"] else None)(
            relay.sink()), 20, "batches spilled while ClickHouse is down")
        if not s["last_error"]:
            fail("last_error is empty while ClickHouse is down")
        eq(d.wait(30), 0, "demo exit")
        eq(t.wait(30), 0, "synth exit")
        wait_for(lambda: all(not x["live"] for x in relay.get("/api/sessions")), 20, "BYE")
        want = relay_counts(relay)
        time.sleep(1.5)  # the final rows are staged and spilled
        spilled = relay.sink()["batches_spilled"]
        if spilled == 0:
            fail("nothing waits on disk while ClickHouse is down")
        ch.start()
        in_clickhouse(ch, relay, want, 30, "spilled batches sent after ClickHouse came back")
        s = relay.sink()
        if s["errors"] == 0:
            fail("errors counter stayed 0")
        eq(s["rows_dropped"], 0, "rows dropped")
        for sid in want:
            check_rows(ch, relay, sid)
        relay.stop()
        check_exact(ch, want, "ClickHouse killed mid-stream")
    finally:
        ch.stop()


def case_relay_kill():
    ch = chserver.ClickHouse(os.path.join(TMP, "ch"))  # not started: everything spills
    data = os.path.join(TMP, "data")
    try:
        relay = Relay(ch.url(), data)
        d = demo(relay, 2, "6000", "relay-kill")
        eq(d.wait(30), 0, "demo exit")
        wait_for(lambda: all(not x["live"] for x in relay.get("/api/sessions")), 20, "BYE")
        want = relay_counts(relay)
        wait_for(lambda: (lambda s: s if s["batches_pending"] == s["batches_spilled"] > 0
                          else None)(relay.sink()), 20, "every batch on disk")
        # and nothing more for 2 s: the last batch (the final sessions row on the next second
        # tick, sealed within 500 ms) is made and spilled, also on a loaded machine
        s = settled_sink(relay, 2.0, 30)
        if not s["batches_pending"] == s["batches_spilled"] > 0:
            fail(f"batches in memory while ClickHouse is down (sink: {s})")
        relay.kill()  # SIGKILL: only the spill directory survives
        files = os.listdir(os.path.join(data, "clickhouse-spill"))
        eq(len([f for f in files if f.endswith(".tmkch")]), s["batches_spilled"], "spill files")
        if s["batches_spilled"] < 2:
            fail(f"only {s['batches_spilled']} spill file(s): the senders need several to share")
        ch.start()
        # four senders claim the files one each, oldest first; none may be sent twice or lost
        relay2 = Relay(ch.url(), data, "--clickhouse-senders", "4", name="relay2")
        if "spilled batches from an earlier run" not in relay2.log():
            fail("the restarted relay did not announce the spilled batches")
        wait_for(lambda: drained(relay2), 30, "spilled batches sent by the restarted relay")
        eq([f for f in os.listdir(os.path.join(data, "clickhouse-spill")) if f.endswith(".tmkch")],
           [], "spill directory after sending")
        eq(relay2.sink()["errors"], 0, "errors sending the spilled batches")
        eq(relay2.sink()["batches_sent"], s["batches_spilled"], "batches sent by the restarted relay")
        relay2.stop()
        check_exact(ch, want, "relay killed with spilled batches")
    finally:
        ch.stop()


def case_keep():
    """Sent batches' staging memory is kept for the next ones, within --clickhouse-memory: after
    each of two bursts (each several batches of zones, more than the bound lets wait in memory, so
    some also spill) staging_kept_bytes is above 0 and at most the bound, and every zone is in
    ClickHouse exactly once, equal to the relay's field by field."""
    ch = chserver.ClickHouse(os.path.join(TMP, "ch")).start()
    try:
        relay = Relay(ch.url(), os.path.join(TMP, "data"), "--clickhouse-memory", "8M")
        want = {}
        for burst in range(2):
            sids = [0x4b0000 + burst * 16 + k for k in range(2)]
            # the second target sends long runs (200 zones of one thread a packet, as a busy
            # agent thread does), the first one runs of 40 zones of 3 threads
            ts = [synth(relay, sid, 4000, "--seed", str(sid & 0xff),
                        *(["--zones", "200", "--threads", "1"] if k else []))
                  for k, sid in enumerate(sids)]
            for t in ts:
                eq(t.wait(60), 0, "synth exit")
            wait_for(lambda: all(not s["live"] for s in relay.get("/api/sessions")) or None,
                     30, f"burst {burst}: sessions ended")
            want = relay_counts(relay)
            eq(len(want), 2 * (burst + 1), "sessions")
            if min(want.values()) < 400000:
                fail(f"burst {burst}: too few zones for several batches: {want}")
            in_clickhouse(ch, relay, want, 60, f"burst {burst}: rows in ClickHouse")
            s = relay.sink()
            eq(s["errors"], 0, "sink errors")
            eq(s["rows_dropped"], 0, "rows dropped")
            eq(s["staging_kept_max"], 8 << 20, "staging_kept_max (--clickhouse-memory 8M)")
            # The loop stages its next rows (a sessions row each second) in a kept batch, which
            # leaves the count until that batch is sent again: sample for a while, and check the
            # bound in every sample.
            def some_kept():
                k = relay.sink()["staging_kept_bytes"]
                if k > 8 << 20:
                    fail(f"burst {burst}: staging_kept_bytes {k} above the bound {8 << 20}")
                return k > 0 or None
            wait_for(some_kept, 10, f"burst {burst}: staging_kept_bytes above 0 (memory kept for reuse)")
            eq(ch_zones(ch), want, f"burst {burst}: zones per session (FINAL) vs the relay")
            # the rows equal the relay's zones field by field (the staging buffers are reused:
            # a run staged over an earlier batch's bytes must not keep any of them)
            for sid in sids:
                check_rows(ch, relay, sid)
        in_clickhouse(ch, relay, want, 30, "every session in ClickHouse")
        relay.stop()
        check_exact(ch, want, "keep")
    finally:
        ch.stop()


DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "CLICKHOUSE.md")


def doc_queries():
    """The SQL blocks of docs/CLICKHOUSE.md's section "Queries", as they are written there."""
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    sec = doc[doc.index("\n## Queries\n") + 1:]
    sec = sec[:sec.index("\n## ")]
    return re.findall(r"```sql\n(.*?)```", sec, re.S)


def by_hand(ch, sql, put):
    """Runs sql with each key of put replaced by its value (each must be in it); returns the rows
    as lists of strings."""
    for k, v in put.items():
        if k not in sql:
            fail(f"the documented query has no {k}: {sql[:200]}")
        sql = sql.replace(k, v)
    return [line.split("\t") for line in ch.query(sql).splitlines()]


def check_doc_tables(ch):
    """docs/CLICKHOUSE.md's table of tables against what the relay made: the same tables, each
    with the columns it lists in that order, its engine and its ORDER BY, and the two views."""
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    sec = doc[doc.index("\n## Tables\n"):]
    sec = sec[sec.index("| table | columns |"):]
    sec = sec[:sec.index("\n\n")]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|$", sec, re.M)
    check(len(rows) >= 9, f"the table of tables has {len(rows)} rows")
    for name, cols, engine in rows:
        got = [line.split("\t")[0] for line in ch.query(f"DESCRIBE TABLE {name}").splitlines()]
        eq(got, [c.strip() for c in cols.split(",")], f"columns of {name}, CLICKHOUSE.md's")
        want = re.findall(r"`([^`]+)`", engine)
        eng, key = ch.query("SELECT engine_full, sorting_key FROM system.tables WHERE database = "
                            f"'telemark' AND name = '{name}' FORMAT TSV").rstrip("\n").split("\t")
        if not (eng == want[0] or eng.startswith(want[0] + " ")):
            fail(f"{name}: engine {eng!r}, CLICKHOUSE.md says {want[0]!r}")
        order = [w for w in want[1:] if w.startswith("(")]  # (a Null table names its view)
        eq(key, order[0].strip("()") if order else "", f"ORDER BY of {name}")
    tables = ch.query("SELECT name, engine FROM system.tables WHERE database = 'telemark' "
                      "ORDER BY name FORMAT TSV").splitlines()
    eq(sorted(t for t in tables if not t.endswith("\tMaterializedView")),
       sorted(f"{n}\t{re.findall(r'`([^`(]+)', e)[0]}" for n, _, e in rows),
       "the tables there are, against CLICKHOUSE.md")
    eq(sorted(t for t in tables if t.endswith("\tMaterializedView")),
       sorted(["zones_from_runs12\tMaterializedView", "zones_from_runs\tMaterializedView"]),
       "the views")


def check_doc_queries(ch, relay):
    """The two queries docs/CLICKHOUSE.md gives for the issue's questions run as they are written
    there (with this test's program and builds, and a limit that takes every row) and answer what
    the relay's diff and trend do. A p50 or p95 is compared only where each side has at most 8192
    values: above that, ClickHouse's quantile samples, and two runs of one query may differ."""
    diff_sql, trend_sql = doc_queries()
    put = {"'game'": "'telemark-demo'", "'4120'": "'7001'", "'4121'": "'7002'"}
    api = relay.get("/api/history/diff?program=telemark-demo&a=7001&b=7002&limit=500")["rows"]
    rows = by_hand(ch, diff_sql, dict(put, **{"LIMIT 20": "LIMIT 500"}))
    def diff_key(name, a_p50, b_p50, a_n, b_n):
        exact = int(a_n) <= 8192 and int(b_n) <= 8192
        return (name, int(a_n), int(b_n)) + ((float(a_p50), float(b_p50)) if exact else ())
    eq(sorted(diff_key(*r[:5]) for r in rows),
       sorted(diff_key(d["name"], d["a_p50"], d["b_p50"], d["a_n"], d["b_n"]) for d in api),
       "the documented diff query against the relay's")
    if len(api) < 10:
        fail(f"diff has only {len(api)} sites")
    api = relay.get("/api/history/trend?program=telemark-demo&what=frame&by=build")["rows"]
    rows = by_hand(ch, trend_sql, {"'game'": "'telemark-demo'"})
    def trend_key(key, p50, p95, mx, n, sessions, first):
        exact = int(n) <= 8192
        return (key, int(mx), int(n), int(sessions), int(first)) + \
            ((float(p50), float(p95)) if exact else ())
    eq([trend_key(*r) for r in rows],
       [trend_key(*(t[k] for k in ("key", "p50", "p95", "max", "n", "sessions", "first_unix_ns")))
        for t in api], "the documented trend query against the relay's")
    eq(sorted(t["key"] for t in api), ["7001", "7002"], "frame trend keys")


def case_history():
    ch = chserver.ClickHouse(os.path.join(TMP, "ch")).start()
    try:
        relay = Relay(ch.url(), os.path.join(TMP, "data"))
        ds = [demo(relay, 1.5, "7001", "a"), demo(relay, 1.5, "7002", "b"),
              demo(relay, 1.5, "7002", "c", transport="tcp")]
        for d in ds:
            eq(d.wait(30), 0, "demo exit")
        wait_for(lambda: all(not x["live"] for x in relay.get("/api/sessions")), 20, "BYE")
        in_clickhouse(ch, relay, relay_counts(relay), 30, "the three sessions in ClickHouse")
        h = lambda q: relay.get("/api/history/" + q)
        progs = h("programs")["rows"]
        eq([(p["program"], p["sessions"], p["builds"]) for p in progs], [("telemark-demo", 3, 2)],
           "programs")
        builds = h("builds?program=telemark-demo")["rows"]
        # ordered by first session: the demos start together, so compare as a set
        eq(sorted((b["build"], b["sessions"]) for b in builds), [("7001", 1), ("7002", 2)], "builds")
        sites = h("sites?program=telemark-demo")["rows"]
        names = {(x["name"], x["what"]) for x in sites}
        for want in [("Render::frame", "zone"), ("Game::load_level", "zone")]:
            if want not in names:
                fail(f"{want} missing from sites: {sorted(names)[:10]}")
        trend = h("trend?program=telemark-demo&what=zone&site=Render%3A%3Aframe&by=build")["rows"]
        trend.sort(key=lambda t: t["key"])
        eq([t["key"] for t in trend], ["7001", "7002"], "trend keys by build")
        direct = ch.scalar("SELECT count() FROM zones FINAL WHERE (session, site) IN "
                           "(SELECT session, site FROM sites FINAL WHERE name = 'Render::frame')")
        eq(sum(t["n"] for t in trend), direct, "trend counts vs ClickHouse")
        for t in trend:
            if not (0 < t["p50"] <= t["p95"] <= t["max"]):
                fail(f"trend row out of order: {t}")
        eq(trend[1]["sessions"], 2, "sessions of build 7002")
        nights = h("trend?program=telemark-demo&what=frame&by=night")["rows"]
        eq(len(nights), 1, "one night")
        eq(nights[0]["key"], time.strftime("%Y-%m-%d", time.gmtime()), "night key")
        diff = h("diff?program=telemark-demo&a=7001&b=7002&limit=5")["rows"]
        if not 1 <= len(diff) <= 5 or any(d["a_n"] == 0 or d["b_n"] == 0 for d in diff):
            fail(f"diff rows: {diff}")
        check_doc_queries(ch, relay)
        # Parameters are values, never SQL.
        inj = h("trend?program=telemark-demo&what=zone&by=build&site=" +
                urllib.request.quote("x' OR 1=1 OR name = '"))["rows"]
        eq(inj, [], "quoted site name matches nothing")
        for bad, code in [("trend?program=telemark-demo&what=zone", 400),
                          ("trend?program=telemark-demo&what=sql&site=x", 400),
                          ("builds", 400), ("builds?program=x&days=0", 400),
                          ("builds?program=" + "x" * 300, 400),
                          ("drop_tables?program=x", 404)]:
            st, _ = relay.api("GET", "/api/history/" + bad, timeout=30)
            eq(st, code, f"status of {bad}")
        relay.stop()
        ch.kill()
        # Without ClickHouse the history answers 502 with the reason.
        relay = Relay(ch.url(), os.path.join(TMP, "data"), name="relay-noch")
        st, js = relay.api("GET", "/api/history/programs", timeout=30)
        eq(st, 502, "status without ClickHouse")
        if "connect" not in js["error"]:
            fail("the 502 does not say why")
        relay.stop()
    finally:
        ch.stop()


def case_timers():
    ch = chserver.ClickHouse(os.path.join(TMP, "ch")).start()
    try:
        relay = Relay(ch.url(), os.path.join(TMP, "data"))
        sids = [0x7100000000000001, 0x7100000000000002, 0x7100000000000003, 0x7100000000000004]
        ps = [synth(relay, sids[0], 300, "--timer-freq", "24000000", "--long-every", "7"),
              synth(relay, sids[1], 300, "--no-hello", "--no-bye"),
              synth(relay, sids[2], 300),
              synth(relay, sids[3], 300, "--long-every", "7")]
        for p in ps:
            eq(p.wait(60), 0, "synth exit")
        wait_for(lambda: (lambda c: c if len(c) == 4 and all(c.values()) else None)(
            relay_counts(relay)), 20, "four sessions with zones")
        want = in_clickhouse(ch, relay, sids, 30, "the four sessions in ClickHouse",
                             without_row=[sids[1]])
        eq(ch_zones(ch), want, "zones per session")
        for sid in sids:
            check_rows(ch, relay, sid)
        eq(ch.scalar(f"SELECT count() FROM zones FINAL WHERE session = {sids[3]} AND "
                     "dur_ns >= 4294967296"), 300 // 7, "zones of 2^32 ns or more")
        freqs = {s["session_id"]: s.get("timer_freq") for s in relay.get("/api/sessions")}
        eq(freqs.get("%016x" % sids[0]), 24000000, "timer_freq of the 24 MHz session")
        s = relay.sink()
        eq((s["errors"], s["rows_dropped"]), (0, 0), "sink errors, rows dropped")
        relay.stop()
    finally:
        ch.stop()


def case_stall():
    ch = chserver.ClickHouse(os.path.join(TMP, "ch")).start()
    try:
        relay = Relay(ch.url(), os.path.join(TMP, "data"))
        eq(synth(relay, 0x5a00000000000001, 100).wait(60), 0, "synth exit")
        wait_for(lambda: len(relay_counts(relay)) == 1, 20, "the first session's BYE")
        in_clickhouse(ch, relay, [0x5a00000000000001], 30, "first session in ClickHouse")
        before = relay.sink()
        os.killpg(ch.proc.pid, signal.SIGSTOP)  # it accepts connections but answers nothing
        try:
            eq(synth(relay, 0x5a00000000000002, 100).wait(60), 0, "synth exit")
            wait_for(lambda: len(relay_counts(relay)) == 2, 20, "the second session's BYE")
            # Every batch is sealed within ~1.5 s of the BYE (the final sessions row on the next
            # second tick, the open batch every 500 ms); a loaded machine may take longer, so the
            # count is read once it has held still for 2 s (a fixed 1.5 s could read it before
            # the last batch, which then would count as sent but not as pending).
            s = settled_sink(relay, 2.0, 30)
            eq(s["rows_sent"], before["rows_sent"], "rows counted as sent while ClickHouse "
               "answers nothing")
            if s["batches_pending"] < 1:
                fail(f"nothing pending while ClickHouse answers nothing (sink: {s})")
        finally:
            os.killpg(ch.proc.pid, signal.SIGCONT)
        want = relay_counts(relay)
        after = wait_for(lambda: drained(relay), 40, "sink drained after ClickHouse ran again")
        # Every batch pending then (queued, spilled, or the one waiting for its answer) was sent
        # once since, and no other batch was made: the counts agree only if the one in flight
        # was counted as pending.
        eq(after["batches_sent"] - before["batches_sent"], s["batches_pending"],
           "batches sent after the stall vs batches_pending during it")
        relay.stop()
        check_exact(ch, want, "ClickHouse stopped mid-request")
    finally:
        ch.stop()


def spill_file(magic, tables):
    """A spill file as docs/CLICKHOUSE.md describes it: magic, (u8 table, u32 rows, u32 bytes,
    RowBinary rows) per table, CRC-32C of all that."""
    body = magic
    for t, rows, data in tables:
        body += struct.pack("<BII", t, rows, len(data)) + data
    return body + struct.pack("<I", crc32c(body))


def case_upgrade():
    ch = chserver.ClickHouse(os.path.join(TMP, "ch")).start()
    data = os.path.join(TMP, "data")
    spill = os.path.join(data, "clickhouse-spill")
    try:
        # the first sink's zones table (depth UInt16), and no zone_runs or view
        ch.query("CREATE DATABASE telemark", database="default")
        ch.query("CREATE TABLE zones (day Date, session UInt64, n UInt64, thread UInt32, "
                 "site UInt32, start_ns UInt64, dur_ns UInt64, depth UInt16, marker UInt8) "
                 "ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY (session, site, n)")
        # a TMKCH001 file with three zones rows (table 3) of session 0x72..01, as it wrote them
        old_sid = 0x7200000000000001
        rows = b"".join(struct.pack("<HQQIIQQBB", 20000, old_sid, n, 5, 9, 1000 + n * 10, 7,
                                    n, n & 1) for n in range(3))
        os.makedirs(spill)
        with open(os.path.join(spill, "00000000000000000001-000001.tmkch"), "wb") as f:
            f.write(spill_file(b"TMKCH001", [(3, 3, rows)]))
        # a TMKCH002 file with a zone_runs row (table 7) of two 16-byte records of 0x72..03
        v2_sid = 0x7200000000000003
        recs = b"".join(struct.pack("<iIIHBB", 10 * n, 5 + n, 9, 1, n, n & 1) for n in range(2))
        run = struct.pack("<HQBIQQB", 20000, v2_sid, 0, 6, 0, 2000, 2) + recs
        with open(os.path.join(spill, "00000000000000000001-000003.tmkch"), "wb") as f:
            f.write(spill_file(b"TMKCH002", [(7, 2, run)]))
        with open(os.path.join(spill, "00000000000000000002-000002.tmkch"), "wb") as f:
            f.write(spill_file(b"TMKCH999", [(3, 3, rows)]))
        relay = Relay(ch.url(), data)
        sid = 0x7200000000000002
        eq(synth(relay, sid, 200).wait(60), 0, "synth exit")
        wait_for(lambda: (lambda c: c if c.get(sid) else None)(relay_counts(relay)), 20,
                 "the session's zones")
        want = in_clickhouse(ch, relay, [sid], 30, "the session in ClickHouse")
        eq(ch.scalar("SELECT count() FROM system.tables WHERE database = 'telemark' AND "
                     "name IN ('zone_runs', 'zones_from_runs', 'zone_runs12', "
                     "'zones_from_runs12')"), 4, "zone_runs, zone_runs12 and their views")
        eq(ch.query("SELECT type FROM system.columns WHERE database = 'telemark' AND "
                    "table = 'zones' AND name = 'depth' FORMAT TSV").strip(), "UInt8",
           "zones.depth narrowed")
        eq(ch.query(f"SELECT n, thread, site, start_ns, dur_ns, depth, marker FROM zones FINAL "
                    f"WHERE session = {old_sid} ORDER BY n FORMAT TSV"),
           "".join(f"{n}\t5\t9\t{1000 + n * 10}\t7\t{n}\t{n & 1}\n" for n in range(3)),
           "rows of the TMKCH001 spill file")
        eq(ch.query(f"SELECT n, thread, site, start_ns, dur_ns, depth, marker FROM zones FINAL "
                    f"WHERE session = {v2_sid} ORDER BY n FORMAT TSV"),
           "".join(f"{n}\t6\t9\t{2000 + 10 * n}\t{5 + n + (1 << 32)}\t{n}\t{n & 1}\n"
                   for n in range(2)), "rows of the TMKCH002 spill file")
        eq(ch_zones(ch).get(sid), want[sid], "zones of the new session")
        check_rows(ch, relay, sid)
        eq(sorted(os.listdir(spill)), ["00000000000000000002-000002.tmkch.bad"],
           "spill directory: the sent file is gone, the unknown one renamed")
        s = relay.sink()
        eq(s["rows_dropped"], 0, "rows dropped")
        if "is not a spill file of a format this relay reads" not in s["last_error"]:
            fail(f"last_error does not name the unknown spill format: {s['last_error']!r}")
        if "is not a spill file of a format this relay reads" not in relay.log():
            fail("the unknown spill format is not logged")
        relay.stop()
    finally:
        ch.stop()


class FakeClickHouse(socketserver.ThreadingTCPServer):
    """A stand-in for ClickHouse: reads each request (headers, then Content-Length bytes) and
    answers by `mode`: "ok" 200 with an empty body (so: no tables to alter), keeping the body of
    each INSERT INTO zone_runs12 or zone_runs; "error" 500 with a ClickHouse-like exception; "garbage" bytes
    that are not HTTP; "close" closes at once, before reading the body; "huge" a 500 whose body
    is 8 MiB (the relay reads a bounded part of an answer); "cut" a 200 whose headers do not
    end before the connection does; "trickle" the start of a 200, a byte
    every 0.2 s for 35 s (the relay gives up 10 s after its request); "slow_query" as "ok", but
    a history query (FORMAT JSONEachRow) is answered after 12 s; "bad_rows" answers a history
    query 200 with a row, then an exception as ClickHouse writes it into an answer it has begun;
    "slow_read" as "ok", but the
    body is read 16 KiB every 0.5 s; "stuck" as "ok", but of a request with a body over 1 MiB
    it reads the headers, then nothing for 30 s. rcvbuf: the listening socket's SO_RCVBUF, if
    given (a small one makes a slow reader hold the relay's sends back sooner)."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, rcvbuf=None):
        self.runs = []
        self.requests = {}  # mode -> requests answered in it
        self.mode = "ok"
        self.lock = threading.Lock()
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(h):
                sock = h.request
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                head, _, body = head.partition(b"\r\n\r\n")
                with fake.lock:
                    mode = fake.mode
                    fake.requests[mode] = fake.requests.get(mode, 0) + 1
                if mode == "close":
                    sock.close()
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                if mode == "stuck" and length > 1 << 20:
                    time.sleep(30)
                    return
                while len(body) < length:
                    try:
                        chunk = sock.recv(16384 if mode == "slow_read" else 1 << 20)
                    except OSError:
                        return
                    if not chunk:
                        return
                    body += chunk
                    if mode == "slow_read":
                        time.sleep(0.5)
                path = head.split(b"\r\n")[0].decode(errors="replace")
                if mode == "slow_query" and "JSONEachRow" in path:  # a history query: 12 s
                    time.sleep(12)
                    row = b'{"program":"slow","sessions":1,"builds":1,"last_unix_ns":1}\n'
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" %
                                 (len(row), row))
                elif mode == "bad_rows" and "JSONEachRow" in path:  # stopped part-way
                    rows = (b'{"program":"cut","sessions":1,"builds":1,"last_unix_ns":1}\n'
                            b"Code: 159. DB::Exception: Timeout exceeded: elapsed 30.001 "
                            b"seconds, maximum: 30\n")
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" %
                                 (len(rows), rows))
                elif mode in ("ok", "slow_query", "slow_read", "stuck"):
                    table = re.search(r"INSERT(?:%20|\+)INTO(?:%20|\+)(zone_runs\w*)", path)
                    if table:  # (record bytes, body)
                        with fake.lock:
                            fake.runs.append((12 if table.group(1) == "zone_runs12" else 16,
                                              body))
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                elif mode == "error":
                    msg = b"Code: 241. DB::Exception: Memory limit (total) exceeded\n"
                    sock.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n"
                                 b"\r\n%s" % (len(msg), msg))
                elif mode == "garbage":
                    sock.sendall(b"\x00\x01\x02 not HTTP at all \xff" * 100)
                elif mode == "cut":  # a 200 whose headers never end
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n")
                elif mode == "trickle":  # a byte every 0.2 s, never the end of the headers
                    try:
                        for c in (b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 150):
                            sock.sendall(bytes([c]))
                            time.sleep(0.2)
                    except OSError:
                        pass  # the relay gave up: what the case expects
                elif mode == "huge":
                    big = b"x" * (8 << 20)
                    try:
                        sock.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d"
                                     b"\r\n\r\n" % len(big) + big)
                    except OSError:
                        pass  # the relay stops reading once it has enough

        super().__init__(("127.0.0.1", 0), Handler, bind_and_activate=False)
        if rcvbuf:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.server_bind()
        self.server_activate()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def set_mode(self, mode):
        with self.lock:
            self.mode = mode

    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/?database=telemark"


@contextlib.contextmanager
def stand_in(mode, rcvbuf=None):
    """A FakeClickHouse answering in `mode`, shut down however the case ends."""
    fake = FakeClickHouse(rcvbuf)
    fake.set_mode(mode)
    try:
        yield fake
    finally:
        fake.shutdown()
        fake.server_close()


def zone_runs_rows(rec, body, with_n0=False):
    """(session, rank, zones[, n0]) of each zone_runs (rec 16) or zone_runs12 (rec 12) row of a
    RowBinary body (docs/CLICKHOUSE.md)."""
    out, i = [], 0
    while i < len(body):
        _day, sid, rank, _thread, n0, _base = struct.unpack_from("<HQBIQQ", body, i)
        i += 31
        count, shift = 0, 0
        while True:
            b = body[i]
            i += 1
            count |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        i += count * rec
        out.append((sid, rank, count, n0) if with_n0 else (sid, rank, count))
    if i != len(body):
        fail(f"a zone_runs body of {len(body)} bytes does not end on a row ({i})")
    return out


def case_ranks():
    with stand_in("ok") as fake:
        relay = Relay(fake.url(), os.path.join(TMP, "data"))
        # three sessions at once, started in an order other than their ids', then a fourth with
        # an id between theirs; paced, so that batches are sealed by time with all of them in
        first = [synth(relay, sid, 300, "--rate", "150") for sid in (0x7000, 0x3000, 0x9000)]
        time.sleep(0.8)
        late = synth(relay, 0x5000, 150, "--rate", "150")
        for p in first + [late]:
            eq(p.wait(30), 0, "synth exit")
        want = wait_for(lambda: (lambda c: c if len(c) == 4 and all(
            not s["live"] for s in relay.get("/api/sessions")) else None)(relay_counts(relay)),
            20, "four sessions ended")
        wait_for(lambda: drained(relay), 20, "sink drained")
        with fake.lock:
            bodies = list(fake.runs)
        sent, mixed = {}, 0
        for rec, body in bodies:
            eq(rec, 12, "record bytes of an INSERT of zone runs (none is long)")
            rows = zone_runs_rows(rec, body)
            rank_of = {}
            for sid, rank, count in rows:
                if rank_of.setdefault(sid, rank) != rank:
                    fail(f"session {sid:#x} has ranks {rank_of[sid]} and {rank} in one INSERT")
                sent[sid] = sent.get(sid, 0) + count
            by_id = [rank_of[sid] for sid in sorted(rank_of)]
            if by_id != sorted(set(by_id)):
                fail(f"ranks do not follow the session ids in one INSERT: "
                     f"{ {f'{k:#x}': v for k, v in sorted(rank_of.items())} }")
            mixed += len(rank_of) > 1
        eq(sent, want, "zones sent per session vs the relay's own")
        if mixed < 2:
            fail(f"only {mixed} INSERTs held more than one session: the case did not test ranks")
        print(f"ranks: {len(bodies)} INSERTs of zone_runs12, {mixed} with several sessions")
        relay.stop()


def case_bad_answers():
    with stand_in("error") as fake:
        relay = Relay(fake.url(), os.path.join(TMP, "data"))
        targets = [synth(relay, sid, 200, "--rate", "100") for sid in (0x4100, 0x4200)]
        # each way of answering badly: a counted error with a clear last_error, the sink down,
        # its batches kept; then ClickHouse answers properly and every zone is sent once
        for mode, text in (("error", "ClickHouse answered 500: Code: 241. DB::Exception: Memory"),
                           ("garbage", "without an HTTP answer"),
                           ("close", ("closed the connection without an HTTP answer",
                                      "sending to ClickHouse")),
                           ("huge", "ClickHouse answered 500: xxxxxxxx"),
                           ("cut", "ClickHouse's answer was cut short"),
                           ("trickle", "ClickHouse's answer did not end within 10000 ms")):
            fake.set_mode(mode)
            with fake.lock:
                r0 = fake.requests.get(mode, 0)
            e0 = relay.sink()["errors"]

            def failed():
                with fake.lock:
                    answered = fake.requests.get(mode, 0) > r0
                st = relay.sink()
                texts = text if isinstance(text, tuple) else (text,)
                return st if answered and st["errors"] > e0 and any(
                    t in st["last_error"] for t in texts) else None
            st = wait_for(failed, 30, f"an error for a ClickHouse that answers '{mode}'")
            print(f"bad_answers: {mode}: {st['last_error']!r}")
            eq(st["up"], False, f"sink up while ClickHouse answers '{mode}'")
            if len(st["last_error"]) > 300:
                fail(f"last_error is {len(st['last_error'])} characters long")
            eq(st["rows_dropped"], 0, f"rows dropped while ClickHouse answers '{mode}'")
        for p in targets:
            eq(p.wait(30), 0, "synth exit")
        want = wait_for(lambda: (lambda c: c if len(c) == 2 and all(
            not s["live"] for s in relay.get("/api/sessions")) else None)(relay_counts(relay)),
            20, "both sessions ended")
        if relay.sink()["batches_pending"] == 0:
            fail("no batch was pending while ClickHouse answered badly")
        accepted_once(relay, fake, want)
        relay.stop()


def accepted_once(relay, fake, want):
    """Lets the stand-in answer 200, waits until the sink has sent everything, and checks that
    every zone was accepted exactly once: no (session, n0) twice, per-session counts `want`."""
    fake.set_mode("ok")
    st = wait_for(lambda: drained(relay), 30, "sink drained once ClickHouse answers")
    eq(st["rows_dropped"], 0, "rows dropped")
    with fake.lock:
        bodies = list(fake.runs)
    sent, keys = {}, set()
    for rec, body in bodies:
        for sid, _rank, count, n0 in zone_runs_rows(rec, body, with_n0=True):
            if (sid, n0) in keys:
                fail(f"zones of session {sid:#x} from n = {n0} were accepted twice")
            keys.add((sid, n0))
            sent[sid] = sent.get(sid, 0) + count
    eq(sent, want, "zones accepted per session vs the relay's own")


def case_slow_reader():
    # A server that reads the request body at 32 KiB/s: each send makes a little progress, so
    # only a deadline for the whole request (10 s + 1 s per MiB) frees the sender. Then, with
    # another relay, one that reads nothing of the body: given up once it has taken less than
    # 64 KiB in 10 s. Either way the batches are kept and sent once the server reads at speed.
    # (a small receive buffer on the stand-in's side, so that the relay's sends wait sooner)
    for mode, text, least, most in (
            ("slow_read", "did not take the request within", 10, 30),
            ("stuck", "took less than 64 KiB of the request in 10000 ms", 10, 25)):
        with stand_in(mode, rcvbuf=8192) as fake:
            relay = Relay(fake.url(), os.path.join(TMP, f"data-{mode}"))
            t0 = time.time()
            target = synth(relay, 0x4300, 10000)  # 1.2 M zones flat out: batches of ~6 MiB
            eq(target.wait(30), 0, "synth exit")
            st = wait_for(lambda: (lambda s: s if text in s["last_error"] else None)(
                relay.sink()), 45, f"a request given up by a relay whose ClickHouse is '{mode}'")
            took = time.time() - t0
            print(f"slow_reader: {mode}: after {took:.1f} s: {st['last_error']!r}")
            if not least <= took <= most:
                fail(f"'{mode}': a request was given up after {took:.1f} s, not within "
                     f"{least}-{most} s of the first")
            eq(st["up"], False, f"sink up while ClickHouse is '{mode}'")
            eq(st["rows_dropped"], 0, f"rows dropped while ClickHouse is '{mode}'")
            want = wait_for(lambda: (lambda c: c if len(c) == 1 and all(
                not s["live"] for s in relay.get("/api/sessions")) else None)(
                relay_counts(relay)), 20, "the session ended")
            accepted_once(relay, fake, want)
            relay.stop()


def case_slow_history():
    # A history query that ClickHouse answers after 12 s: the relay waits for it. Six at once:
    # four wait for their answers, the other two get 503 at once (each holds an HTTP worker
    # thread meanwhile), and the relay's other requests are answered all the while.
    with stand_in("slow_query") as fake:
        relay = Relay(fake.url(), os.path.join(TMP, "data"))
        results = []

        def query():
            t = time.time()
            st, js = relay.api("GET", "/api/history/programs", timeout=60)
            with fake.lock:
                results.append((st, js, time.time() - t))
        threads = [threading.Thread(target=query) for _ in range(6)]
        t0 = time.time()
        for t in threads:
            t.start()
        busy = wait_for(lambda: (lambda s: s if s["history_running"] == 4 and
                                 s["history_refused"] == 2 else None)(relay.sink()), 8,
                        "four history queries running, two refused")
        if time.time() - t0 > 8:
            fail("the relay's own API did not answer while history queries waited")
        # the relay counts a refusal before its 503 has reached the client: wait for both
        # answers (the four others wait 12 s for the stand-in)

        def answered():
            with fake.lock:
                return list(results) if len(results) >= 2 else None
        early = wait_for(answered, 8, "the two refused history queries answered")
        eq(sorted(st for st, _, _ in early), [503, 503], "answers before ClickHouse's")
        for st, js, took in early:
            if "too many history queries at once" not in js.get("message", str(js)):
                fail(f"a refused history query says {js}")
        for t in threads:
            t.join(60)
        eq(sorted(st for st, _, _ in results), [200] * 4 + [503] * 2, "history answers")
        for st, js, took in results:
            if st == 200:
                eq([r["program"] for r in js["rows"]], ["slow"], "rows of a query answered after 12 s")
                if took < 11:
                    fail(f"the answer came after {took:.1f} s: the stand-in did not delay it")
        eq(relay.sink()["history_running"], 0, "history queries running once all answered")
        if "history: a query refused (503)" not in relay.log():
            fail("refused history queries are not logged")
        print(f"slow_history: {busy['history_refused']} refused while 4 waited")
        # an exception in the middle of a 200: a clear 502, not rows that are not JSON
        fake.set_mode("bad_rows")
        st, js = relay.api("GET", "/api/history/programs", timeout=30)
        eq(st, 502, f"status of an answer with an exception among its rows ({js})")
        if "holds a row that is not JSON: Code: 159. DB::Exception" not in str(js):
            fail(f"the 502 does not say which row was not JSON: {js}")
        relay.stop()


CASES = {"counts": case_counts, "ranks": case_ranks, "bad_answers": case_bad_answers,
         "slow_history": case_slow_history, "slow_reader": case_slow_reader, "keep": case_keep, "ch_kill": case_ch_kill,
         "relay_kill": case_relay_kill,
         "history": case_history, "timers": case_timers, "stall": case_stall,
         "upgrade": case_upgrade}


def main():
    global BIN, TMP, RELAY_BIN
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--relay", default="telemark-relay")
    a = ap.parse_args()
    BIN = a.bin
    RELAY_BIN = a.relay
    TMP = os.path.abspath(a.tmp)
    if a.case not in ("ranks", "bad_answers", "slow_history", "slow_reader") and \
            not os.path.exists(chserver.SERVER):
        print("SKIP: clickhouse-server is not installed (scripts/deps.sh)")
        return 77
    if os.path.isdir(TMP):
        shutil.rmtree(TMP)
    os.makedirs(TMP)
    try:
        CASES[a.case]()
    finally:
        for p in RELAYS:
            if p.poll() is None:
                p.kill()
                p.wait()
    print(f"{a.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
