"""tmkrec.py — a reader of the relay's recordings (`.tmkr`) and of agent files, written from
docs/RECORDING.md and docs/PROTOCOL.md §2, §3.1 and §3.3 alone, not from relay/relay_recording.c:
the tests read the relay's files with it (relay_test.py record_format, agent_file) to show that
the documents are enough to read them, and that a reader following the documents' recovery
rules recovers what the relay does.

  read(data) -> Recording   data: the whole file's bytes
  header(packet) -> (type, session id, seq)   PROTOCOL.md §2
  chunk(type, payload) -> bytes                a chunk with its CRC, for tests that build files

Run as a program, it prints a summary of each file named on its command line."""
import struct
import sys

MAGIC = b"TMKREC01"
AGENT_MAGIC = b"TMKFILE1"
MAX_PAYLOAD = 16 * 1024 * 1024
MAX_PACKET = 65507
SESSION, PACKETS, STATS, END = 1, 2, 3, 4
STATS_FIELDS = ("lost", "duplicated", "reordered", "late", "spoofed", "malformed")
PACKET_TYPES = {1: "DATA", 2: "HELLO", 3: "WELCOME", 4: "REJECT", 5: "CONTROL", 6: "BYE"}


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data, crc=0):
    """CRC-32C (RECORDING.md §2): reflected 0x82F63B78, initial and final XOR 0xFFFFFFFF; crc is
    an earlier result to continue from."""
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def put_varint(v):
    """PROTOCOL.md §3.1, the writing side."""
    out = bytearray()
    while v > 0x7F:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def chunk(ctype, payload):
    """A chunk as a writer makes it (RECORDING.md §2), for tests that build files."""
    h = struct.pack("<IB3x", len(payload), ctype)
    return h + struct.pack("<I", crc32c(payload, crc32c(h))) + payload

class Bad(Exception):
    """Content that does not parse."""


def varint(b, i, end):
    """PROTOCOL.md §3.1: returns (value, next offset); Bad past end, at an eleventh byte or a tenth
    byte above 1."""
    v = 0
    for k in range(10):
        if i >= end:
            raise Bad("varint past the end")
        x = b[i]
        i += 1
        if k == 9 and x > 1:
            raise Bad("varint above 64 bits")
        v |= (x & 0x7F) << (7 * k)
        if not x & 0x80:
            return v, i
    raise Bad("varint of more than 10 bytes")


def string(b, i, end):
    """PROTOCOL.md §3.3: a varint length (at most 1024), then that many bytes."""
    n, i = varint(b, i, end)
    if n > 1024:
        raise Bad("string longer than 1024 bytes")
    if i + n > end:
        raise Bad("string past the end")
    return bytes(b[i:i + n]).decode("utf-8", errors="replace"), i + n


def header(p):
    """PROTOCOL.md §2: (type, session id, seq) of a packet."""
    if len(p) < 14 or p[0:3] != b"TMK" or p[3] != 1:
        raise Bad("not a version 1 telemark packet")
    flags = p[4]
    sid = struct.unpack(">Q" if flags & 2 else "<Q", p[6:14])[0]
    seq, _ = varint(p, 14, len(p))
    return p[5], sid, seq


class Recording:
    def __init__(self):
        self.session = None   # dict: id, created_unix_ns, transport, source, relay_version
        self.packets = []     # the packets' bytes, in delivery order
        self.stats = None     # the last STATS chunk, a dict of STATS_FIELDS
        self.end = None       # END's packet count (-1 if it does not parse), None without END
        self.chunks = 0       # chunks used
        self.unknown = 0      # chunks of unknown type skipped
        self.used = 8         # bytes used: the magic and the chunks before the stop
        self.stop = None      # why it stopped early: None (end of file), "torn", "corrupt: …"


def read(data):
    """Reads a recording the way RECORDING.md §4 says: chunks from offset 8, up to the first that
    is torn or corrupt (it and everything after it skipped), or up to END (§3.4: nothing follows
    it; bytes after it are reported as the stop, not read). An agent file (§5) is read too: its
    Recording has packets and `stop` only."""
    if data[:8] == AGENT_MAGIC:
        return _agent_file(data)
    if data[:8] != MAGIC:
        raise Bad("neither TMKREC01 nor TMKFILE1")
    rec = Recording()
    off, n = 8, len(data)
    while off < n:
        if rec.end is not None:
            rec.stop = "bytes after END"
            break
        if n - off < 12:
            rec.stop = "torn"
            break
        length, ctype = struct.unpack_from("<IB", data, off)
        reserved = data[off + 5:off + 8]
        crc = struct.unpack_from("<I", data, off + 8)[0]
        if length > MAX_PAYLOAD:
            rec.stop = "corrupt: length"
            break
        if off + 12 + length > n:
            rec.stop = "torn"
            break
        if reserved != b"\0\0\0":
            rec.stop = "corrupt: reserved"
            break
        payload = data[off + 12:off + 12 + length]
        if crc32c(payload, crc32c(data[off:off + 8])) != crc:
            rec.stop = "corrupt: crc"
            break
        try:
            _chunk(rec, ctype, payload)
        except Bad as e:
            rec.stop = f"corrupt: {e}"
            break
        rec.chunks += 1
        off += 12 + length
        rec.used = off
    return rec


def _agent_file(data):
    """RECORDING.md §5: TMKFILE1, then varint-length-framed packets; a frame that runs past the end
    of the file, or a length of 0 or above 65507, ends it (torn)."""
    rec = Recording()
    off = 8
    while off < len(data):
        try:
            n, i = varint(data, off, len(data))
        except Bad:
            rec.stop = "torn"
            break
        if n == 0 or n > MAX_PACKET or i + n > len(data):
            rec.stop = "torn"
            break
        rec.packets.append(bytes(data[i:i + n]))
        off = rec.used = i + n
    return rec


def _chunk(rec, ctype, b):
    end = len(b)
    if ctype == SESSION:  # written first; a reader keeps the last one it reads (§3.1)
        sid, i = varint(b, 0, end)
        created, i = varint(b, i, end)
        transport, i = string(b, i, end)
        source, i = string(b, i, end)
        version, i = string(b, i, end)
        rec.session = {"id": sid, "created_unix_ns": created, "transport": transport,
                       "source": source, "relay_version": version}
    elif ctype == PACKETS:
        got, i = [], 0  # an empty payload: no packets (§3.2)
        while i < end:
            length, i = varint(b, i, end)
            if length == 0 or length > MAX_PACKET:
                raise Bad(f"packet length {length}")
            if i + length > end:
                raise Bad("packet past the payload")
            got.append(bytes(b[i:i + length]))
            i += length
        rec.packets += got  # only once the whole chunk parsed
    elif ctype == STATS:
        vals, i = [], 0
        for _ in STATS_FIELDS:
            v, i = varint(b, i, end)
            vals.append(v)
        rec.stats = dict(zip(STATS_FIELDS, vals))
    elif ctype == END:  # its count is not checked (§3.4)
        try:
            rec.end = varint(b, 0, end)[0]
        except Bad:
            rec.end = -1
    else:
        rec.unknown += 1


def main(paths):
    for path in paths:
        with open(path, "rb") as f:
            rec = read(f.read())
        kinds = {}
        for p in rec.packets:
            t = PACKET_TYPES.get(header(p)[0], "?")
            kinds[t] = kinds.get(t, 0) + 1
        print(f"{path}: session {rec.session and '%016x' % rec.session['id']} "
              f"{rec.session}; {rec.chunks} chunks, packets {kinds}, stats {rec.stats}, "
              f"END {rec.end}, stopped: {rec.stop or 'no'}")


if __name__ == "__main__":
    main(sys.argv[1:])
