#!/usr/bin/env python3
"""baremetal_e2e.py — telemark-relay's --serial path, end to end through a pty.

  serial      writes golden packets (tests/vectors) to a pty with the TCP framing, starting in
              the middle of a packet and with noise between packets: the relay must resynchronise,
              keep every packet and count each run of noise once as garbage.
  cortex-m4   runs examples/baremetal's game on qemu-system-arm (mps2-an386, CMSDK UART) and
  rv32        qemu-system-riscv32 (virt, 16550 UART) with the UART on a pty read by the relay;
              checks through the JSON API the zone names, nesting, emulated durations, the frames
              and the plot.
Usage: baremetal_e2e.py CASE --bin DIR --tmp DIR [--vectors DIR] [--image ELF] [--qemu QEMU]"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import tty


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from relayproc import RelayProcess, eq, fail, wait_for  # noqa: E402


def Relay(binary, tmp, serial):
    return RelayProcess(binary, os.path.join(tmp, "relay.log"), os.path.join(tmp, "data"),
                        "--serial", serial)


def frame(packet):
    """The TCP/serial framing: the packet length as a varint, then the packet (PROTOCOL.md §1)."""
    n, out = len(packet), bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out) + packet


def session(relay, pred, what):
    def find():
        for s in relay.get("/api/sessions"):
            if pred(s):
                return s
        return None
    s = wait_for(find, 20, what)
    time.sleep(0.3)
    return relay.get(f"/api/sessions/{s['id']}")


def zones(relay, sid):
    sites = {s["id"]: s["name"] for s in relay.get(f"/api/sessions/{sid}/sites")["sites"]}
    js = relay.get(f"/api/sessions/{sid}/zones?limit=1000000")
    eq(js["truncated"], False, "zones truncated")
    out = {}
    for row in js["zones"]:
        z = dict(zip(js["columns"], row))
        out.setdefault(sites.get(z["site"], "?"), []).append(z)
    return out, sites


def case_serial(args):
    vec = lambda n: open(os.path.join(args.vectors, n + ".bin"), "rb").read()
    hello, deep, bye = vec("hello"), vec("deep"), vec("bye")
    nzones = open(os.path.join(args.vectors, "deep.txt")).read().count("\nzone ")
    master, slave = os.openpty()
    tty.setraw(master)
    relay = Relay(os.path.join(args.bin, "telemark-relay"), args.tmp, os.ttyname(slave))
    try:
        wait_for(lambda: "reading" in relay.log(), 10, "the relay to open the pty")
        # Joined mid-packet (the second half of a DATA frame), then noise that looks like a
        # frame prefix, then a good stream with noise between two packets.
        half = frame(deep)[len(deep) // 2:]
        stream = (half + b"\x05TMKx\x00\xff" + frame(hello) + b"\x02\x00garbage\xff\x7f" +
                  frame(deep) + frame(bye))
        for i in range(0, len(stream), 7):  # a UART delivers bytes, not packets
            os.write(master, stream[i:i + 7])
            time.sleep(0.001)
        s = session(relay, lambda s: s["stats"]["zones"] >= nzones, f"{nzones} zones")
        eq(s["id"], "0123456789abcdef", "session id")
        eq(s["transport"], "serial", "transport")
        eq(s["source"], "serial:" + os.ttyname(slave), "source")
        eq(s["program"], "spacegame", "program (HELLO after the noise)")
        eq(s["stats"]["zones"], nzones, "zones")
        eq(s["stats"]["malformed"], 0, "malformed packets in the session")
        eq(relay.get("/api/relay")["garbage"], 2, "runs of noise counted as garbage")
        if "resynchronising" not in relay.log():
            fail("the relay did not log the noise")
    finally:
        relay.stop()
        os.close(master)
        os.close(slave)


def case_qemu(args):
    board = args.case
    if board == "cortex-m4":
        cmd = [args.qemu, "-M", "mps2-an386", "-semihosting"]
    else:
        cmd = [args.qemu, "-M", "virt", "-bios", "none"]
    # -S: the CPU waits for "cont" until the relay reads the pty, so no byte is lost.
    # -icount shift=3: virtual time is 8 ns per instruction (a 125 MHz core), not the (loaded) host's clock, so
    # the emulated durations do not depend on the machine running the test.
    qemu = subprocess.Popen(cmd + ["-icount", "shift=3", "-display", "none", "-kernel", args.image, "-serial", "pty",
                                   "-monitor", "stdio", "-S"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    relay = None
    try:
        pts = None
        out = ""
        end = time.time() + 10
        while not pts and time.time() < end:
            line = qemu.stdout.readline()
            out += line
            m = re.search(r"char device redirected to (/dev/pts/\d+)", line)
            pts = m and m.group(1)
        if not pts:
            fail(f"qemu gave no pty:\n{out}")
        relay = Relay(os.path.join(args.bin, "telemark-relay"), args.tmp, pts)
        wait_for(lambda: "reading" in relay.log(), 10, "the relay to open the pty")
        qemu.stdin.write("cont\n")
        qemu.stdin.flush()
        frames = 20
        s = session(relay, lambda s: s["program"] == "baremetal-game" and
                    s["stats"]["zones"] >= 4 * frames and not s["live"],
                    "the game's zones and its BYE")
        # Only now may the board stop (it waits for one byte back on its UART): qemu closing the
        # pty earlier would make the host's tty layer discard what the relay had not read.
        fd = os.open(pts, os.O_WRONLY | os.O_NOCTTY)
        try:
            os.write(fd, b"\n")
        finally:
            os.close(fd)
        rc = qemu.wait(20)
        eq(rc, 0, "qemu exit code (the game's board_exit)")
        eq(s["platform"], "baremetal", "platform")
        eq(s["arch"], "arm" if board == "cortex-m4" else "riscv32", "arch")
        eq(s["transport"], "serial", "transport")
        eq(s["pointer_size"], 4, "pointer size")
        eq(s["timer_freq"], 25000000 if board == "cortex-m4" else 10000000, "timer_freq")
        eq(s["stats"]["malformed"], 0, "malformed")
        eq(s["stats"]["lost"], 0, "lost packets")
        for reason, n in s["dropped_by_reason"].items():
            eq(n, 0, f"agent drops ({reason})")
        eq(relay.get("/api/relay")["garbage"], 0, "garbage")
        z, sites = zones(relay, s["id"])
        eq(sorted(z), ["frame", "physics", "render", "update"], "zone names")
        for name, depth in (("frame", 0), ("update", 1), ("physics", 2), ("render", 1)):
            eq(len(z[name]), frames, f"{name} zones")
            eq({x["depth"] for x in z[name]}, {depth}, f"{name} depth")
        # Emulated time: the game spins 2 ms in physics and 1 ms in render on the board's clock;
        # a parent lasts its children plus the agent's own few hundred instructions.
        for name, ms in (("physics", 2), ("render", 1), ("update", 2), ("frame", 3)):
            for x in z[name]:
                if not ms * 1e6 <= x["dur_ns"] < ms * 1e6 + 0.2e6:
                    fail(f"{name} lasted {x['dur_ns']} ns, expected {ms} ms (+ < 0.2 ms)")

        def inside(c, p):
            return p["start_ns"] <= c["start_ns"] and \
                c["start_ns"] + c["dur_ns"] <= p["start_ns"] + p["dur_ns"]
        for child, parent in (("update", "frame"), ("render", "frame"), ("physics", "update")):
            for c in z[child]:
                if not any(inside(c, p) for p in z[parent]):
                    fail(f"{child} zone {c} is not inside a {parent} zone")
        ev = relay.get(f"/api/sessions/{s['id']}/events?limit=100000")
        rows = ev["events"]
        fr = [e for e in rows if e["type"] == "frame"]
        pl = [e for e in rows if e["type"] == "plot"]
        eq(len(fr), frames, "frame marks")
        eq([e["value"] for e in pl], list(range(frames)), "plot 'entities' values")
        eq({sites.get(e["site"]) for e in pl}, {"entities"}, "plot name")
    finally:
        if qemu.poll() is None:
            qemu.kill()
        qemu.wait()
        if relay:
            relay.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["serial", "cortex-m4", "rv32"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--vectors")
    ap.add_argument("--image")
    ap.add_argument("--qemu")
    args = ap.parse_args()
    shutil.rmtree(args.tmp, ignore_errors=True)
    os.makedirs(args.tmp)
    if args.case == "serial":
        case_serial(args)
    else:
        case_qemu(args)
    print(f"{args.case}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
