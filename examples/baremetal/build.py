#!/usr/bin/env python3
"""build.py — builds the bare-metal example game for each board with Debian's cross toolchains
(arm-none-eabi + newlib-nano, riscv64-unknown-elf + picolibc) and measures what the agent costs:
.text (+.rodata) and .bss/.data of the agent, protocol and port objects in the linked image
(--gc-sections), the deepest stack frame of any of their functions (-fstack-usage), and which
libgcc/libc helpers the image pulls in. Used by tmk-bench-size and tests/baremetal.

  build.py OUTDIR [--check] [cortex-m4|rv32 ...]
      prints RESULT lines and writes OUTDIR/<board>.elf (built with TMK_NO_KEY=1: no packet
      authentication, the image the budgets are for) and OUTDIR/<board>-keyed.elf (with it,
      RESULT text_bytes_<board>_keyed); with --check exits 1 when an image
      has 64-bit division or malloc, or a 64-bit shift helper on the zone hot path. (The .text
      budgets of docs/PORTING.md are printed as comments, not checked: both are met, rv32 by a
      few bytes, and the figures move with the toolchain's version.)
"""
import os, re, shutil, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
AGENT = ["agent/tmk_agent.c", "agent/tmk_flush.c", "agent/tmk_transport.c", "agent/tmk_log.c",
         "protocol/tmk_proto_primitives.c", "protocol/tmk_proto_writer.c",
         "protocol/tmk_proto_reader.c", "protocol/tmk_proto_zones.c", "protocol/tmk_proto_format.c",
         "protocol/tmk_proto_siphash.c", "protocol/tmk_error.c",
         "platforms/baremetal/tmk_port_baremetal.c"]

BOARDS = {
    "cortex-m4": dict(
        cc="arm-none-eabi-gcc", size="arm-none-eabi-size", nm="arm-none-eabi-nm",
        flags=["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=soft", "--specs=nano.specs"],
        board="board_mps2_an386.c", ld="mps2_an386.ld",
        defs=["-DBOARD_CLOCK_HZ=25000000u", "-DBOARD_CLOCK_BITS=24", "-DBOARD_CLOCK_MASK=0xFFFFFFu"]),
    "rv32": dict(
        cc="riscv64-unknown-elf-gcc", size="riscv64-unknown-elf-size", nm="riscv64-unknown-elf-nm",
        flags=["-march=rv32imac", "-mabi=ilp32", "--specs=picolibc.specs", "-mcmodel=medany",
               "-Wl,--no-warn-rwx-segments"],
        board="board_virt_rv32.c", ld="virt_rv32.ld",
        defs=["-DBOARD_CLOCK_HZ=10000000u", "-DBOARD_CLOCK_BITS=32", "-DBOARD_CLOCK_MASK=0xFFFFFFFFu"]),
}
# .text + .rodata budgets of issue 12 (docs/PORTING.md, "Size"): printed, not checked.
TEXT_BUDGET = {"cortex-m4": 8192, "rv32": 9216}
# Helpers that must not be in the image: 64-bit division (libgcc) and malloc (pulled by printf).
FORBIDDEN = ["__aeabi_uldivmod", "__aeabi_ldivmod", "__udivdi3", "__umoddi3", "__divdi3",
             "__moddi3", "_malloc_r", "malloc", "_sbrk_r", "_sbrk"]
SHIFTS = ["__ashldi3", "__lshrdi3", "__ashrdi3", "__aeabi_llsl", "__aeabi_llsr", "__aeabi_lasr"]
# The zone hot path and what it may call (-Os leaves some of these out of line).
HOT = ["tmk__zone_begin", "tmk__zone_end", "tmk__frame", "tmk__plot_i", "tmk__plot_d",
       "tmk__now_ticks", "tmk__extend_clock", "tmk__shr64", "ring_reserve", "push_event",
       "cur_thread", "own_thread", "ring_put", "ring_commit", "entry_header"]


def build(board, out, keyed=False):
    """Builds the image; keyed=False leaves packet authentication out (TMK_NO_KEY=1), as the
    size budgets are measured; keyed=True is the image with desc.key support (SipHash-2-4)."""
    b = BOARDS[board]
    name = board + ("-keyed" if keyed else "")
    odir = os.path.join(out, name)
    shutil.rmtree(odir, ignore_errors=True)
    os.makedirs(odir)
    common = b["flags"] + ["-std=c99", "-Os", "-g", "-ffunction-sections", "-fdata-sections",
                           "-Wall", "-Wextra", "-Werror=implicit-function-declaration"] + b["defs"]
    if not keyed:
        common.append("-DTMK_NO_KEY=1")
    inc = ["-I" + os.path.join(ROOT, d) for d in ("agent", "protocol", "platforms",
                                                 "platforms/baremetal")] + ["-I" + HERE]
    objs = []
    for src in AGENT + ["examples/baremetal/game.c", "examples/baremetal/" + b["board"]]:
        obj = os.path.join(odir, os.path.basename(src)[:-2] + ".o")
        extra = ["-fstack-usage"] if src in AGENT else []
        subprocess.run([b["cc"]] + common + extra + inc + ["-c", os.path.join(ROOT, src),
                                                            "-o", obj], check=True)
        objs.append(obj)
    elf = os.path.join(out, name + ".elf")
    mapf = os.path.join(odir, "image.map")
    subprocess.run([b["cc"]] + common + ["-nostartfiles", "-T", os.path.join(HERE, b["ld"]),
                    "-Wl,--gc-sections", "-Wl,-Map," + mapf, "-o", elf] + objs,
                   check=True)
    return elf, mapf, odir


def measure(board, elf, mapf, odir):
    agent_objs = {os.path.basename(s)[:-2] + ".o" for s in AGENT}
    text = bss = 0
    lib = {}  # libc / libgcc members in the image: "archive(member)" -> .text + .rodata bytes
    # Input sections in the map: " .text.fn  0xADDR  0xSIZE path/obj.o" (name may wrap a line);
    # an archive member reads "path/libc.a(member.o)".
    lines = open(mapf).read().split("\n")
    pending = None
    for ln in lines:
        m = re.match(r"^ (\.\S+)\s*$", ln)
        if m:
            pending = m.group(1)
            continue
        m = re.match(r"^ (\.\S+)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S+\.o\)?)\s*$", ln)
        if not m:
            pending = None
            continue
        sec = m.group(1) or pending
        pending = None
        if not sec or int(m.group(2), 16) == 0:
            continue
        size = int(m.group(3), 16)
        is_text = re.match(r"\.(text|rodata|srodata)", sec)
        if m.group(4).endswith(")"):
            if is_text:
                member = os.path.basename(m.group(4))
                lib[member] = lib.get(member, 0) + size
            continue
        if os.path.basename(m.group(4)) not in agent_objs:
            continue
        if is_text:
            text += size
        elif re.match(r"\.(bss|sbss|data|sdata)", sec):
            bss += size
    stack, deepest = 0, ""
    for f in os.listdir(odir):
        if f.endswith(".su"):
            for ln in open(os.path.join(odir, f)):
                parts = ln.rstrip("\n").split("\t")
                if len(parts) >= 2 and int(parts[1]) > stack:
                    stack, deepest = int(parts[1]), parts[0].split(":")[-1]
    nm = subprocess.run([BOARDS[board]["nm"], elf], capture_output=True, text=True,
                        check=True).stdout
    syms = {ln.split()[-1] for ln in nm.splitlines() if ln.strip()}
    forbidden = sorted(s for s in FORBIDDEN if s in syms)
    shifts = sorted(s for s in SHIFTS if s in syms)
    objd = BOARDS[board]["cc"].replace("gcc", "objdump")
    dis = subprocess.run([objd, "-d", elf], capture_output=True, text=True, check=True).stdout
    hot_shift = []
    for fn in dis.split("\n\n"):
        m = re.match(r"[0-9a-f]+ <(\w+)>:", fn.strip())
        if m and m.group(1) in HOT:
            hot_shift += [m.group(1) + "->" + s for s in SHIFTS if "<" + s + ">" in fn]
    return dict(text=text, bss=bss, stack=stack, deepest=deepest, forbidden=forbidden,
                shifts=shifts, hot_shift=hot_shift, lib=lib)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = os.path.abspath(sys.argv[1])
    check = "--check" in sys.argv[2:]
    boards = [a for a in sys.argv[2:] if a != "--check"] or list(BOARDS)
    bad = []
    os.makedirs(out, exist_ok=True)
    stack = 0
    for board in boards:
        r = measure(board, *build(board, out))
        key = board.replace("-", "_")
        print("RESULT text_bytes_%s=%d" % (key, r["text"]))
        print("RESULT bss_bytes_%s=%d" % (key, r["bss"]))
        print("RESULT max_stack_bytes_%s=%d" % (key, r["stack"]))
        print("# %s: deepest frame %s; 64-bit division/malloc: %s; 64-bit shift helpers: %s; "
              "on the zone hot path: %s" % (board, r["deepest"], r["forbidden"] or "none",
                                            r["shifts"] or "none", r["hot_shift"] or "none"))
        over = r["text"] - TEXT_BUDGET[board]
        verdict = "%d B over (not met)" % over if over > 0 else "met, %d B under" % -over
        print("# %s: .text + .rodata %d B, budget %d B: %s" % (board, r["text"],
                                                               TEXT_BUDGET[board], verdict))
        print("RESULT lib_bytes_%s=%d" % (key, sum(r["lib"].values())))
        print("# %s: libc/libgcc .text + .rodata in the image (used by the agent, the game and the "
              "board's start-up alike; not in text_bytes): %s" % (
                  board, ", ".join("%s %d" % kv for kv in sorted(r["lib"].items(),
                                                                  key=lambda kv: -kv[1]))))
        keyed = measure(board, *build(board, out, keyed=True))
        print("RESULT text_bytes_%s_keyed=%d" % (key, keyed["text"]))
        print("# %s: with desc.key support (SipHash-2-4, built without TMK_NO_KEY) .text + .rodata "
              "is %d B (+%d B)" % (board, keyed["text"], keyed["text"] - r["text"]))
        stack = max(stack, r["stack"], keyed["stack"])
        bad += ["%s: %s" % (board, x) for x in r["forbidden"] + r["hot_shift"]]
    print("RESULT max_stack_bytes=%d" % stack)
    if check and bad:
        sys.exit("build.py: helpers the agent must not pull in: %s" % ", ".join(bad))


if __name__ == "__main__":
    main()
