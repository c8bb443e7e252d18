#!/usr/bin/env python3
"""compile_check.py — compiles the agent, the protocol and a console port against that console
SDK's real headers with Debian's cross compiler (no console toolchain is a Debian package, and
no library or emulator is at hand: nothing here links or runs). Fails on any error, and on any
warning in telemark's own files (the SDK's headers warn under glibc; see ../shared/sdk/README.md).

  compile_check.py wii|psp --cc CC --sdk INCLUDE_DIR --src PROJECT_ROOT --out DIR"""
import argparse
import os
import re
import subprocess
import sys

SOURCES = ["agent/tmk_agent.c", "agent/tmk_flush.c", "agent/tmk_transport.c", "agent/tmk_log.c",
           "protocol/tmk_proto_primitives.c", "protocol/tmk_proto_writer.c",
           "protocol/tmk_proto_reader.c", "protocol/tmk_proto_zones.c", "protocol/tmk_proto_format.c",
           "protocol/tmk_proto_siphash.c", "protocol/tmk_error.c"]
FLAGS = {"wii": ["-DGEKKO", "-DHW_RVL", "-mcpu=750", "-meabi", "-mhard-float"],
         "psp": ["-march=allegrex", "-G0", "-D_PSP_FW_VERSION=600"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", choices=sorted(FLAGS))
    ap.add_argument("--cc", required=True)
    ap.add_argument("--sdk", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    flags = [f for f in FLAGS[a.port] if subprocess.run(
        [a.cc, f, "-x", "c", "-fsyntax-only", "-"], input=b"", capture_output=True).returncode == 0]
    # gnu99: the SDKs' headers use POSIX types (struct timespec) that strict C99 hides in glibc.
    base = [a.cc, "-std=gnu99", "-O2", "-Wall", "-Wextra", "-Wshadow", "-Wstrict-prototypes",
            "-Wmissing-prototypes"] + flags + ["-I" + a.sdk] + [
            "-I" + os.path.join(a.src, d) for d in ("agent", "protocol", "platforms",
                                                   "platforms/" + a.port)]
    bad = 0
    for src in SOURCES + ["platforms/%s/tmk_port_%s.c" % (a.port, a.port)]:
        obj = os.path.join(a.out, os.path.basename(src) + ".o")
        p = subprocess.run(base + ["-c", os.path.join(a.src, src), "-o", obj],
                           capture_output=True, text=True)
        ours = [ln for ln in p.stderr.splitlines()
                if re.search(r"(error|warning):", ln) and a.src in ln.split(":")[0]]
        if p.returncode != 0 or ours:
            bad = 1
            print("FAIL %s\n%s" % (src, p.stderr))
        else:
            print("ok   %s" % src)
    return bad


if __name__ == "__main__":
    sys.exit(main())
