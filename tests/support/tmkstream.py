"""tmkstream.py — a decoder of the relay's live stream (GET /api/stream, binary messages) written
from docs/API.md ("Live stream") alone, not from relay/relay_stream.c or web/js: relay_test.py
stream_format decodes a subscription with it and compares what it finds with the JSON API, to
show that the document is enough to read the stream.

  decode(message) -> Message   one binary WebSocket message
  Session: folds a subscription's messages into absolute-time zones, events, sites, threads"""
import struct

KINDS = {0: "zone", 1: "marker", 2: "plot", 3: "message", 4: "frame"}  # PROTOCOL.md §5.1


class Bad(Exception):
    """A message that does not decode."""


class Reader:
    def __init__(self, b):
        self.b, self.i = b, 0

    def done(self):
        return self.i >= len(self.b)

    def u8(self):
        if self.i >= len(self.b):
            raise Bad("past the end")
        self.i += 1
        return self.b[self.i - 1]

    def var(self):  # PROTOCOL.md §3.1
        v = 0
        for k in range(10):
            x = self.u8()
            v |= (x & 0x7F) << (7 * k)
            if not x & 0x80:
                return v
        raise Bad("varint of more than 10 bytes")

    def svar(self):  # PROTOCOL.md §3.2
        z = self.var()
        return (z >> 1) ^ -(z & 1)

    def raw(self):  # a string's bytes: the agent's, as it sent them
        n = self.var()
        if self.i + n > len(self.b):
            raise Bad("string past the end")
        self.i += n
        return bytes(self.b[self.i - n:self.i])

    def str(self):  # a name: UTF-8, what is not UTF-8 replaced
        return self.raw().decode("utf-8", errors="replace")

    def f64(self):
        if self.i + 8 > len(self.b):
            raise Bad("f64 past the end")
        self.i += 8
        return struct.unpack("<d", self.b[self.i - 8:self.i])[0]


class Message:
    def __init__(self, mtype, session):
        self.type, self.session = mtype, session
        self.origin = None   # RESET: the origin, absolute ns
        self.base = None     # DATA: relative ns
        self.records = []    # DATA: (name, dict of fields); times relative to the origin


def decode(b):
    r = Reader(b)
    if r.u8() != 0x54 or r.u8() != 0x57:
        raise Bad("no TW magic")
    if r.u8() != 1:
        raise Bad("not stream version 1")
    mtype = r.u8()
    m = Message({1: "DATA", 2: "RESET"}.get(mtype, mtype), r.str())
    if m.type == "RESET":
        m.origin = r.svar()
        return m
    if m.type != "DATA":
        raise Bad(f"message type {mtype}")
    m.base = base = r.svar()
    while not r.done():
        tag = r.u8()
        if tag == 0x01:
            f = dict(id=r.var(), kind=r.var(), severity=r.var(), verbosity=r.var(), colour=r.var(),
                     line=r.var(), name=r.str(), file=r.str())
            m.records.append(("SITE", f))
        elif tag == 0x02:
            m.records.append(("THREAD", dict(thread=r.var(), name=r.str())))
        elif tag == 0x03:
            m.records.append(("TEAM", dict(bit=r.var(), name=r.str())))
        elif tag == 0x10:
            thread, count = r.var(), r.var()
            zs, prev = [], base
            for _ in range(count):
                site, depth = r.var(), r.var()
                prev += r.svar()
                zs.append(dict(thread=thread, site=site, depth=depth, start=prev, dur=r.var()))
            m.records.append(("ZONES", dict(thread=thread, zones=zs)))
        elif tag == 0x11:
            m.records.append(("ZONE_X", dict(thread=r.var(), site=r.var(), depth=r.var(),
                                             start=base + r.svar(), dur=r.var(), extra=r.str())))
        elif tag == 0x20:
            m.records.append(("FRAME", dict(site=r.var(), time=base + r.svar())))
        elif tag == 0x21:
            m.records.append(("PLOT", dict(site=r.var(), time=base + r.svar(), value=r.f64())))
        elif tag == 0x22:
            m.records.append(("MESSAGE", dict(thread=r.var(), site=r.var(), severity=r.var(),
                                              verbosity=r.var(), time=base + r.svar(),
                                              text=r.raw())))
        elif tag == 0x23:
            m.records.append(("MARKER", dict(thread=r.var(), site=r.var(), end=r.var(),
                                             time=base + r.svar(), payload=r.raw())))
        elif tag == 0x30:
            m.records.append(("STATS", dict(json=r.str())))
        elif tag == 0x31:
            m.records.append(("GAP", dict(start=base + r.svar(), end=base + r.svar(),
                                          skipped=r.var(), other=r.var())))
        elif tag == 0x32:
            m.records.append(("END", {}))
        elif tag == 0x33:
            m.records.append(("HISTORY_DONE", {}))
        else:
            raise Bad(f"unknown record tag 0x{tag:02x}")  # records carry no length
    return m


class Session:
    """A subscription's messages folded together: zones and events with absolute times (the
    RESET's origin added), the last descriptor of each site, thread and team names."""

    def __init__(self):
        self.origin = None
        self.zones, self.events = [], []
        self.sites, self.threads, self.teams = {}, {}, {}
        self.history_done = self.ended = False
        self.gaps = []

    def add(self, m):
        if m.type == "RESET":
            self.__init__()
            self.origin = m.origin
            return
        if self.origin is None:
            raise Bad("DATA before RESET")
        o = self.origin
        for name, f in m.records:
            if name == "SITE":
                self.sites[f["id"]] = f
            elif name == "THREAD":
                self.threads[f["thread"]] = f["name"]
            elif name == "TEAM":
                self.teams[f["bit"]] = f["name"]
            elif name == "ZONES":
                self.zones += [dict(z, start=z["start"] + o) for z in f["zones"]]
            elif name == "ZONE_X":
                self.zones.append(dict(f, start=f["start"] + o))
            elif name in ("FRAME", "PLOT", "MESSAGE", "MARKER"):
                self.events.append(dict(f, type=name, time=f["time"] + o))
            elif name == "GAP":
                self.gaps.append(f)
            elif name == "END":
                self.ended = True
            elif name == "HISTORY_DONE":
                self.history_done = True
