#!/usr/bin/env python3
"""win32_e2e.py — the Windows port end to end: runs tmk-win-agent.exe (MinGW-w64, platforms/win32)
under wine against a Linux telemark-relay on 127.0.0.1 (ports 0, read back from its log) and
checks through the relay's JSON API (docs/API.md) that zones arrive with the right names,
nesting and durations, that the session says platform "windows", and that 10 threads run one
after another on 4 agent slots lose nothing.
Usage: win32_e2e.py prefix --wine WINE
       win32_e2e.py udp|tcp --wine WINE --exe EXE --bin DIR --tmp DIR"""
import argparse
import os
import shutil
import subprocess
import sys
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from relayproc import RelayProcess, eq, fail, wait_for  # noqa: E402


def Relay(binary, tmp):
    return RelayProcess(binary, os.path.join(tmp, "relay.log"), os.path.join(tmp, "data"))


def run_wine(wine, args, timeout=180):
    p = subprocess.run([wine, *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return p


def session_of(relay, program, nzones):
    def ok():
        for s in relay.get("/api/sessions"):
            if s["program"] == program and s["stats"]["zones"] >= nzones:
                return s
        return None
    s = wait_for(ok, 30, f"{nzones} zones from {program}")
    time.sleep(0.3)  # anything beyond nzones would show up now
    return relay.get(f"/api/sessions/{s['id']}")


def zones_by_name(relay, sid):
    sites = {s["id"]: s["name"] for s in relay.get(f"/api/sessions/{sid}/sites")["sites"]}
    js = relay.get(f"/api/sessions/{sid}/zones?limit=1000000")
    eq(js["truncated"], False, "zones truncated")
    cols = js["columns"]
    out = {}
    for row in js["zones"]:
        z = dict(zip(cols, row))
        out.setdefault(sites.get(z["site"], "?"), []).append(z)
    return out


def check_session_facts(s, transport):
    eq(s["platform"], "windows", "platform")
    eq(s["arch"], "x86_64", "arch")
    eq(s["transport"], transport, "transport")
    eq(s["has_hello"], True, "has_hello")
    eq(s["stats"]["malformed"], 0, "malformed packets")
    for reason, n in s["dropped_by_reason"].items():
        eq(n, 0, f"agent drops ({reason})")


def parent_of(z, parents):
    for p in parents:
        if p["thread"] == z["thread"] and p["start_ns"] <= z["start_ns"] and \
                z["start_ns"] + z["dur_ns"] <= p["start_ns"] + p["dur_ns"]:
            return p
    return None


def case_exact(relay, args, transport):
    p = run_wine(args.wine, [args.exe, "127.0.0.1", str(relay.port), transport, "exact"])
    if p.returncode != 0:
        fail(f"exact: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    s = session_of(relay, "win-exact", 400)
    check_session_facts(s, transport)
    eq(s["stats"]["zones"], 400, "zones")
    eq(s["timer_freq"], 1000000, "timer_freq (desc.clock)")
    z = zones_by_name(relay, s["id"])
    eq(sorted(z), ["inner", "outer"], "zone names")
    eq(len(z["outer"]), 200, "outer zones")
    eq(len(z["inner"]), 200, "inner zones")
    # The program's clock moves 1 ms per read: outer = begin, inner begin, inner end, end.
    eq({o["dur_ns"] for o in z["outer"]}, {3000000}, "outer durations")
    eq({i["dur_ns"] for i in z["inner"]}, {1000000}, "inner durations")
    eq({o["depth"] for o in z["outer"]}, {0}, "outer depth")
    eq({i["depth"] for i in z["inner"]}, {1}, "inner depth")
    starts = {o["start_ns"] for o in z["outer"]}
    for i in z["inner"]:
        if i["start_ns"] - 1000000 not in starts:
            fail(f"inner zone at {i['start_ns']} is not 1 ms into an outer zone")


def case_threads(relay, args, transport):
    p = run_wine(args.wine, [args.exe, "127.0.0.1", str(relay.port), transport, "threads"])
    if p.returncode != 0:
        fail(f"threads: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    s = session_of(relay, "win-threads", 1000)
    check_session_facts(s, transport)
    eq(s["stats"]["zones"], 1000, "zones (10 threads x 50 x 2 on 4 slots: none lost)")
    z = zones_by_name(relay, s["id"])
    eq(sorted(z), ["job", "work"], "zone names")
    eq(len(z["job"]), 500, "job zones")
    eq(len(z["work"]), 500, "work zones")
    eq({j["depth"] for j in z["job"]}, {0}, "job depth")
    eq({w["depth"] for w in z["work"]}, {1}, "work depth")
    # 1000 zones from 10 threads on 4 slots means the slots were reused; each thread still has
    # a thread id of its own (a reused slot is not the earlier thread renamed).
    eq(len({j["thread"] for j in z["job"]}), 10, "thread ids (one per thread)")
    jobs_by_thread = {}
    for j in z["job"]:
        jobs_by_thread.setdefault(j["thread"], []).append(j)
    for w in z["work"]:
        if not parent_of(w, jobs_by_thread.get(w["thread"], [])):
            fail(f"work zone {w} is not inside a job zone of its thread")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["prefix", "udp", "tcp"])
    ap.add_argument("--wine", required=True)
    ap.add_argument("--exe")
    ap.add_argument("--bin")
    ap.add_argument("--tmp")
    args = ap.parse_args()
    if args.case == "prefix":
        p = run_wine(args.wine, ["wineboot", "-i"], timeout=280)
        print(f"wineboot: exit {p.returncode}")
        return 0 if p.returncode == 0 else 1
    if not os.path.exists(args.exe):
        fail(f"{args.exe} missing: the win32 sub-build did not build it")
    shutil.rmtree(args.tmp, ignore_errors=True)
    os.makedirs(args.tmp)
    relay = Relay(os.path.join(args.bin, "telemark-relay"), args.tmp)
    try:
        case_exact(relay, args, args.case)
        case_threads(relay, args, args.case)
    finally:
        relay.stop()
    print(f"win32 {args.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
