#!/usr/bin/env python3
"""bench_clickhouse.py — tmk-bench-clickhouse: the relay's history sink into one local
clickhouse-server (Debian's, started here in a temporary directory on free ports).
  RESULT sink_zones_per_s    zones/s from the first packet until every zone is in ClickHouse
                             (one relay, TCP targets sending flat out; median of the fresh pairs)
  RESULT relay_cpu_overhead  relay CPU seconds (all threads) with the sink / without it, same load,
                             each relay's first burst (fresh relays: cold); the median of --cold N
                             pairs of fresh relays (default 3), the relay with the sink going
                             first in the first pair, second in the next, and so on
  RESULT relay_cpu_overhead_warm  the same ratio for these relays' later bursts (new sessions of
                             the same size, each after the one before was fully stored and, with
                             the sink, in ClickHouse; --warm N of them, default 5, the two relays
                             running side by side and taking turns): the median of the N pairs'
                             ratios, what a long-running relay pays
  RESULT relay_cpu_overhead_excl_page_population, relay_cpu_overhead_warm_excl_page_population
                             the same two ratios without the CPU time each relay spent faulting in
                             fresh memory ahead of use (GET /api/relay "populated"): on a VM whose
                             host takes back free memory, that time depends on what ran before
  The load: each target sends packets of 40 zones from each of 4 threads (runs of 40 zones).
  RESULT ..._long_runs       the five figures above again, on two fresh relays, for targets
                             whose packets carry 200 zones of one thread: a busy agent thread's
                             packets look like this (~400 zones in a 1200-byte UDP packet), and
                             the relay spends less on such a zone without the sink (fewer packets
                             and runs), so the sink's part is larger
  RESULT fanin_zones_per_s   8 relays, one target each, into the same ClickHouse
  RESULT clickhouse_cpu_ns_per_zone  ClickHouse's CPU (all threads) per zone in the one-relay run,
                             from the first packet until every zone is in (its INSERT work, what
                             the sink hands over to it; on these 2 cores it limits the rate)
Relay CPU is the sum over its threads of /proc/PID/task/*/schedstat (ns), read once ClickHouse
holds every zone. Figures are measured in this one run on this machine; docs/SCALE.md says what
they mean.
Usage: tmk-bench-clickhouse [--packets-per-target N] [--targets N] [--senders N] [--warm N]
                            [--cold N] [--keep DIR]"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "clickhouse"))
import chserver  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "support"))
from relayproc import RelayProcess  # noqa: E402

BIN = os.path.join(os.environ.get("TMK_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "bin")
# The load's shape: zones per thread per packet and threads per target. The first is what the
# figures without a suffix measure; "long runs" (RESULT ..._long_runs) is one busy thread whose
# packets carry 200 of its zones each, as an agent's do (a 1200-byte UDP packet holds ~400).
SHAPES = [("", 40, 4), ("_long_runs", 200, 1)]
PROCS = []  # relays started, killed at the end whatever happened
SENDERS = []  # --senders N: the relays' --clickhouse-senders (default: the relay's own)


def minor_faults(pid):
    """Minor page faults of the whole process so far (/proc/PID/stat minflt: it also counts the
    pages the kernel populates ahead with MADV_POPULATE_WRITE, which perf's page-faults does not)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def cpu_seconds(pid):
    """CPU time of every thread of pid: the sum of /proc/PID/task/*/schedstat (ns; the relay's
    threads live as long as it does), else utime + stime (whole clock ticks, 10 ms)."""
    try:
        ns = 0
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                ns += int(f.read().split()[0])
        return ns / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Relay(RelayProcess):
    def __init__(self, tmp, name, ch_url=None):
        super().__init__(os.path.join(BIN, "telemark-relay"), os.path.join(tmp, name + ".log"),
                         os.path.join(tmp, name), "--session-memory", "1G",
                         *(["--clickhouse", ch_url] + SENDERS if ch_url else []))
        PROCS.append(self.proc)

    def zones(self):
        return sum(s["stats"]["zones"] for s in self.get("/api/sessions", timeout=30))

    def populated(self):
        """CPU seconds the relay spent faulting in fresh memory ahead of use so far, and MB."""
        js = self.get("/api/relay", timeout=30)["populated"]
        return js["cpu_ns"] / 1e9, js["bytes"] / 1e6

    def stop(self):
        super().stop(timeout=60)


def synth(relay, packets, seed, shape):
    return subprocess.Popen([os.path.join(BIN, "tmk-relay-synth"), "--to", f"127.0.0.1:{relay.port}",
                             "--tcp", "--packets", str(packets), "--zones", str(shape[1]),
                             "--threads", str(shape[2]), "--seed", str(seed),
                             "--session", "%016x" % (0xbe0c000000000000 + seed),
                             # read what the relay sent before closing: a close with unread
                             # bytes is a RST, which discards what the relay has not read yet
                             "--linger", "1000"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def run(relays, per_target_packets, targets_per_relay, ch=None, base=0, first_seed=1, timeout=600,
        again=False, shape=SHAPES[0]):
    """Feeds every relay flat out over TCP. Returns (zones the relays stored this run, seconds
    from the start until they had them and, with ch, until ClickHouse holds base + that many more
    zone rows, relay CPU seconds, minor page faults and CPU seconds spent populating fresh memory
    per relay: since it started, or with again (a relay that already took a run) since this run
    started)."""
    before = [r.zones() for r in relays] if again else [0] * len(relays)
    cpu0 = [cpu_seconds(r.proc.pid) for r in relays] if again else [0] * len(relays)
    flt0 = [minor_faults(r.proc.pid) for r in relays] if again else [0] * len(relays)
    pop0 = [r.populated() for r in relays] if again else [(0, 0)] * len(relays)
    t0 = time.time()
    # distinct session ids per phase: equal ids would collapse in ReplacingMergeTree (by design)
    procs = [synth(r, per_target_packets, first_seed + i * 16 + k, shape)
             for i, r in enumerate(relays) for k in range(targets_per_relay)]
    for p in procs:
        out = p.communicate(timeout=timeout)[0].decode(errors="replace")
        if p.returncode != 0:
            print("a target failed (its zones so far count): " + out.strip()[-200:])
    def rows():
        if not ch.scalar("SELECT count() FROM system.parts WHERE database = 'telemark' AND "
                         "table = 'zones'"):
            return 0
        return ch.scalar("SELECT count() FROM zones")
    # ClickHouse's row count is sampled every 20 ms from here on, also while the relays' counts
    # settle, so that the time is when ClickHouse had every zone, not when this script looked.
    samples = []
    stored, prev = -1, -2
    while stored != prev:  # the last TCP bytes are read and decoded: the count settles
        prev = stored
        until = time.time() + 0.3
        while time.time() < until:
            if ch is not None:
                samples.append((time.time(), rows()))
            time.sleep(0.02)
        stored = sum(r.zones() for r in relays) - sum(before)
    end = t0 + timeout
    done = time.time()
    if ch is not None:
        done = next((t for t, n in samples if n >= base + stored), None)
        while done is None and time.time() < end:
            if rows() >= base + stored:
                done = time.time()
            else:
                time.sleep(0.02)
        done = done or time.time()
    secs = done - t0
    return (stored, secs, [cpu_seconds(r.proc.pid) - c for r, c in zip(relays, cpu0)],
            [minor_faults(r.proc.pid) - f for r, f in zip(relays, flt0)],
            [tuple(x - y for x, y in zip(r.populated(), p)) for r, p in zip(relays, pop0)])


def ratio(c, p, n, c0, p0, n0):
    """Relay CPU per stored zone with the sink / without, each less p (p0) seconds populating."""
    return ((c - p) / n) / ((c0 - p0) / n0) if c0 > p0 and n and n0 else float("nan")


def median(xs):
    xs = sorted(x for x in xs if x == x)  # (x == x: not nan)
    if not xs:
        return float("nan")
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def pair_ratios(what, pairs):
    """Prints each pair's ratio (pairs of (cpu, populating, zones) with the sink, then without),
    as it is and without page population; returns the medians of both."""
    plain = [ratio(c, 0, n, c0, 0, n0) for c, p, n, c0, p0, n0 in pairs]
    excl = [ratio(*x) for x in pairs]
    print(f"{what} pairs, relay CPU with / without: " + ", ".join(f"{x:.2f}" for x in plain) +
          "; without page population: " + ", ".join(f"{x:.2f}" for x in excl))
    return median(plain), median(excl)


def overhead(ch, tmp, a, shape, seed0):
    """Relays with the sink and without it, side by side. First a.cold pairs of fresh relays, a
    burst each (cold), the one with the sink first in the first pair, second in the next, and so
    on: a fresh relay's pages cost what the machine's free memory makes them cost, which changes
    as the relays take it (docs/AGENT.md "Which pages"), and one pair's ratio swings with that.
    Then the last pair's relays take a.warm more bursts each (new session ids), alternating with
    and without: each relay's CPU for a burst is a tenth of a second or two, so one pair swings
    with what else the machine did in it. The figures are medians over the pairs. Prints the
    RESULT lines, names ending in shape[0]."""
    tag = shape[0]
    # the same number of zones in each shape
    packets = a.packets_per_target * SHAPES[0][1] * SHAPES[0][2] // (shape[1] * shape[2])
    cold = []  # (cpu, populating, zones) with the sink, then the same without, per pair
    rates = []
    ch_cpu, ch_rows = 0.0, 0
    for c in range(a.cold):
        r = Relay(tmp, f"with{tag}-{c}", ch.url())
        r0 = Relay(tmp, f"without{tag}-{c}")
        seed = seed0 + 100 * c

        def with_sink():
            nonlocal ch_cpu, ch_rows
            # (before the first rows the table does not exist yet)
            base = ch.scalar("SELECT count() FROM zones") if (tag or c) else 0
            c0 = cpu_seconds(ch.proc.pid)
            total, secs, cpu, flt, pop = run([r], packets, a.targets, ch, base, first_seed=seed,
                                             shape=shape)
            in_ch = ch.scalar("SELECT count() FROM zones") - base
            ch_cpu += cpu_seconds(ch.proc.pid) - c0
            ch_rows += in_ch
            rates.append(in_ch / secs)
            sink = r.get("/api/relay", timeout=30)["clickhouse"]
            print(f"  with sink: {total} zones, {in_ch} rows in ClickHouse after {secs:.2f} s, "
                  f"relay CPU {cpu[0]:.3f} s ({pop[0][0]:.3f} s populating {pop[0][1]:.0f} MB), "
                  f"{flt[0]} minor faults, sink errors {sink['errors']}, "
                  f"dropped {sink['rows_dropped']}, spilled {sink['spilled_total']}, "
                  f"staging kept {sink.get('staging_kept_bytes', '?')}")
            return cpu[0], pop[0][0], total

        def without_sink():
            total0, _, cpu0, flt0, pop0 = run([r0], packets, a.targets, first_seed=seed,
                                              shape=shape)
            print(f"  without sink: {total0} zones stored, relay CPU {cpu0[0]:.3f} s "
                  f"({pop0[0][0]:.3f} s populating {pop0[0][1]:.0f} MB), {flt0[0]} minor faults")
            return cpu0[0], pop0[0][0], total0

        print(f"{shape[1]} zones of {shape[2]} thread(s) a packet, fresh pair {c + 1}, the relay "
              f"{'with' if c % 2 == 0 else 'without'} the sink first:")
        if c % 2 == 0:
            w = with_sink()
            w0 = without_sink()
        else:
            w0 = without_sink()
            w = with_sink()
        cold.append(w + w0)
        if c + 1 < a.cold:
            r.stop()
            r0.stop()
    pairs = []
    for k in range(a.warm):
        base = ch.scalar("SELECT count() FROM zones")
        wt, wsecs, wc, wf, wp = run([r], packets, a.targets, ch, base,
                                    first_seed=seed0 + 2000 + 100 * k, again=True, shape=shape)
        wt0, _, wc0, wf0, wp0 = run([r0], packets, a.targets,
                                    first_seed=seed0 + 2000 + 100 * k, again=True, shape=shape)
        sink = r.get("/api/relay", timeout=30)["clickhouse"]
        print(f"warm pair {k + 1}: with sink {wt} zones in ClickHouse after {wsecs:.2f} s, "
              f"relay CPU {wc[0]:.3f} s ({wp[0][0]:.3f} s populating {wp[0][1]:.0f} MB), "
              f"{wf[0]} minor faults, sink errors {sink['errors']}, dropped "
              f"{sink['rows_dropped']}, staging kept {sink.get('staging_kept_bytes', '?')}; "
              f"without: {wt0} zones, relay CPU "
              f"{wc0[0]:.3f} s ({wp0[0][0]:.3f} s populating {wp0[0][1]:.0f} MB), {wf0[0]} "
              f"minor faults")
        pairs.append((wc[0], wp[0][0], wt, wc0[0], wp0[0][0], wt0))
    r.stop()
    r0.stop()
    print(f"RESULT sink_zones_per_s{tag}={median(rates):.0f}")
    # CPU per stored zone, with the sink / without (the two runs may store different counts
    # when a target fails); also without the CPU time spent populating fresh memory: on a VM
    # whose host takes back free memory that time depends on what ran just before (SCALE.md)
    cold_r, cold_x = pair_ratios("fresh", cold)
    warm_r, warm_x = pair_ratios("warm", pairs)
    print(f"RESULT relay_cpu_overhead{tag}={cold_r:.2f}")
    print(f"RESULT relay_cpu_overhead_warm{tag}={warm_r:.2f}")
    print(f"RESULT relay_cpu_overhead_excl_page_population{tag}={cold_x:.2f}")
    print(f"RESULT relay_cpu_overhead_warm_excl_page_population{tag}={warm_x:.2f}")
    if not tag:
        print(f"RESULT clickhouse_cpu_ns_per_zone={ch_cpu * 1e9 / max(ch_rows, 1):.0f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--packets-per-target", type=int, default=5000)
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--keep", help="keep the temporary directory here")
    ap.add_argument("--senders", type=int, help="the relays' --clickhouse-senders")
    ap.add_argument("--cold", type=int, default=3, help="pairs of fresh relays (default 3)")
    ap.add_argument("--warm", type=int, default=5, help="warm bursts per relay (default 5)")
    a = ap.parse_args()
    if a.senders is not None:
        SENDERS[:] = ["--clickhouse-senders", str(a.senders)]
    if not os.path.exists(chserver.SERVER):
        print("tmk-bench-clickhouse: clickhouse-server is not installed (scripts/deps.sh)")
        return 1
    tmp = a.keep or tempfile.mkdtemp(prefix="tmk-bench-ch-")
    os.makedirs(tmp, exist_ok=True)
    ch = chserver.ClickHouse(os.path.join(tmp, "ch")).start()
    ch.query("CREATE DATABASE IF NOT EXISTS telemark", database="default")
    try:
        # 1. the sink's cost for each shape of load (distinct session ids throughout: equal ones
        # would collapse in ReplacingMergeTree, by design)
        for k, shape in enumerate(SHAPES):
            overhead(ch, tmp, a, shape, 1 + 10000 * k)
        # 2. fan-in: 8 relays, one target each, one ClickHouse
        before = ch.scalar("SELECT count() FROM zones")
        relays = [Relay(tmp, f"fan{i}", ch.url()) for i in range(8)]
        ftotal, fsecs, fcpu, _, _ = run(relays, a.packets_per_target, 1, ch, before, first_seed=1000)
        for x in relays:
            x.stop()
        fin = ch.scalar("SELECT count() FROM zones") - before
        print(f"fan-in: 8 relays, {ftotal} zones, {fin} rows in ClickHouse after {fsecs:.2f} s, "
              f"relay CPU {sum(fcpu):.2f} s in all")
        print(f"RESULT fanin_zones_per_s={fin / fsecs:.0f}")
        try:
            ch.query("OPTIMIZE TABLE zones FINAL")
            b = ch.query("SELECT sum(bytes_on_disk) / sum(rows) FROM system.parts WHERE "
                         "database = 'telemark' AND table = 'zones' AND active").strip()
            print(f"RESULT zone_bytes_on_disk={float(b):.2f}")
        except RuntimeError as e:
            print("(no bytes_on_disk: %s)" % str(e).splitlines()[0])
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
        ch.stop()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
