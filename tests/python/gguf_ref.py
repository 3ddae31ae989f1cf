"""An independent GGUF v3 reader and writer (struct only) for tests/test_gguf.cpp.

Usage: gguf_ref.py IN.json OUT.json, where IN is one of
  {"mode": "read", "path": P}: parses the GGUF file P (checking magic, version 3, value
      types, alignment, offsets and data bounds) and writes OUT = its summary;
  {"mode": "write", "path": P, "alignment": A or null}: writes a GGUF file with known
      metadata (every value type, arrays of numbers, bools and strings, an empty array, an
      array of arrays) and tensors (F32, F16, BF16, Q8_0, Q4_0 and a Q4_K that forge cannot
      load), their data stored in reverse entry order with a spare gap; with A,
      "general.alignment" = A sits among the other keys. OUT = the summary of what it wrote,
      made from its own records rather than by reading the file back.

A summary is {"version", "alignment", "data_offset", "file_size",
  "metadata": [{"key", "type", "value"}] in file order,
  "tensors": [{"name", "ne", "type", "offset" (relative to the data section), "nbytes",
               "fnv1a" (64-bit FNV-1a of the data, 16 hex digits)}] in entry order}.
Values: integers as JSON integers, f32 and f64 as their bit patterns (integers), bools as
JSON booleans, strings as the hex of their bytes, arrays as {"elem": type, "items": [...]}.
"""
import json
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
          U64: "Q", I64: "q", F64: "d"}
# ggml type -> (elements per block, bytes per block), for the types these tests use.
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 30: (1, 2), 12: (256, 144)}


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f64_bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


# ---- reading ---------------------------------------------------------------------------


class Parser:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if n > len(self.data) - self.pos:
            raise ValueError("truncated at byte %d (need %d)" % (self.pos, n))
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]

    def string(self):
        return self.take(self.unpack("Q"))

    def value(self, t):
        """One value of type t, in summary form."""
        if t == STRING:
            return self.string().hex()
        if t == ARRAY:
            elem = self.unpack("I")
            count = self.unpack("Q")
            return {"elem": elem, "items": [self.value(elem) for _ in range(count)]}
        if t not in SCALAR:
            raise ValueError("unknown value type %d" % t)
        if t == F32:
            return self.unpack("I")
        if t == F64:
            return self.unpack("Q")
        v = self.unpack(SCALAR[t])
        if t == BOOL:
            if v > 1:
                raise ValueError("bad bool")
            return v == 1
        return v


def read_summary(path):
    with open(path, "rb") as f:
        data = f.read()
    p = Parser(data)
    if p.take(4) != b"GGUF":
        raise ValueError("bad magic")
    version = p.unpack("I")
    if version != 3:
        raise ValueError("version %d" % version)
    n_tensors = p.unpack("Q")
    n_kv = p.unpack("Q")
    metadata = []
    alignment = 32
    for _ in range(n_kv):
        key = p.string().decode("utf-8")
        t = p.unpack("I")
        v = p.value(t)
        if key == "general.alignment":
            if t != U32 or v == 0 or v & (v - 1):
                raise ValueError("bad alignment")
            alignment = v
        metadata.append({"key": key, "type": t, "value": v})
    tensors = []
    for _ in range(n_tensors):
        name = p.string().decode("utf-8")
        n_dims = p.unpack("I")
        ne = [p.unpack("Q") for _ in range(n_dims)]
        t = p.unpack("I")
        offset = p.unpack("Q")
        if offset % alignment:
            raise ValueError("unaligned offset")
        block, block_bytes = GGML[t]
        n = 1
        for d in ne:
            n *= d
        if ne[0] % block:
            raise ValueError("partial block")
        tensors.append({"name": name, "ne": ne, "type": t, "offset": offset,
                        "nbytes": n // block * block_bytes})
    data_offset = (p.pos + alignment - 1) // alignment * alignment
    for e in tensors:
        begin = data_offset + e["offset"]
        end = begin + e["nbytes"]
        if end > len(data):
            raise ValueError("tensor %s past the end" % e["name"])
        e["fnv1a"] = fnv1a(data[begin:end])
    return {"version": version, "alignment": alignment, "data_offset": data_offset,
            "file_size": len(data), "metadata": metadata, "tensors": tensors}


# ---- writing ---------------------------------------------------------------------------


def enc_string(b):
    return struct.pack("<Q", len(b)) + b


def enc_value(t, v):
    """(bytes, summary form) of a value; arrays are (elem, [items])."""
    if t == STRING:
        return enc_string(v), v.hex()
    if t == ARRAY:
        elem, items = v
        out = struct.pack("<IQ", elem, len(items))
        summary = []
        for item in items:
            b, s = enc_value(elem, item)
            out += b
            summary.append(s)
        return out, {"elem": elem, "items": summary}
    if t == F32:
        return struct.pack("<f", v), f32_bits(v)
    if t == F64:
        return struct.pack("<d", v), f64_bits(v)
    if t == BOOL:
        return struct.pack("<B", 1 if v else 0), bool(v)
    return struct.pack("<" + SCALAR[t], v), v


def f16(x):
    return struct.pack("<e", x)


def known_tensors():
    """(name, ne, ggml type, data) in entry order."""
    f32 = struct.pack("<6f", *[k * 0.25 - 1.0 for k in range(6)])
    f16_data = struct.pack("<4H", 0x3c00, 0xc000, 0x7c00, 0x0001)
    bf16 = struct.pack("<4H", 0x3f80, 0xc0a0, 0x7f80, 0x0001)
    q8 = b""
    for b in range(4):  # ne [64, 2]: 2 blocks a row
        q8 += f16(0.5 + b) + struct.pack("<32b", *[(j * 7 + b * 3) % 255 - 127 for j in range(32)])
    q4 = b""
    for b in range(3):  # ne [32, 3]: 1 block a row
        q4 += f16(-0.25 * (b + 1)) + bytes((j * 17 + b) % 256 for j in range(16))
    q4k = bytes((j * 13 + 5) % 256 for j in range(144))
    return [("tok.f32", [3, 2], 0, f32), ("tok.f16", [4], 1, f16_data),
            ("blk.0.bf16", [2, 2], 30, bf16), ("blk.0.q8_0", [64, 2], 8, q8),
            ("blk.1.q4_0", [32, 3], 2, q4), ("blk.1.q4_k", [256], 12, q4k)]


def known_metadata(alignment):
    kv = [
        ("general.architecture", STRING, "gpt2".encode()),
        ("general.name", STRING, "caf\u00e9 \u2603".encode("utf-8")),
        ("t.u8", U8, 200), ("t.i8", I8, -100), ("t.u16", U16, 65000), ("t.i16", I16, -30000),
        ("t.u32", U32, 4000000000), ("t.i32", I32, -2000000000), ("t.f32", F32, 0.1),
        ("t.bool", BOOL, True), ("t.u64", U64, 2**63 + 5), ("t.i64", I64, -2**62 - 3),
        ("t.f64", F64, -1.5e300),
        ("t.strings", ARRAY, (STRING, [b"a", b"", "\u00e9\u2603".encode("utf-8"), b"h e"])),
        ("t.i32s", ARRAY, (I32, [1, -2, 2147483647, -2147483648])),
        ("t.f32s", ARRAY, (F32, [0.5, -0.0, float("inf")])),
        ("t.bools", ARRAY, (BOOL, [True, False, True])),
        ("t.u64s", ARRAY, (U64, [0, 2**64 - 1])),
        ("t.empty", ARRAY, (U32, [])),
        ("t.nested", ARRAY, (ARRAY, [(I16, [1, -2]), (STRING, [b"x", b"yz"]), (U8, [])])),
    ]
    if alignment is not None:
        kv.insert(5, ("general.alignment", U32, alignment))
    return kv


def write_known(path, alignment):
    align = 32 if alignment is None else alignment
    kv = known_metadata(alignment)
    tensors = known_tensors()
    # Data in reverse entry order, one alignment unit of gap before the first.
    offsets = {}
    pos = align
    for name, _, _, data in reversed(tensors):
        offsets[name] = pos
        pos = (pos + len(data) + align - 1) // align * align
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    metadata = []
    for key, t, v in kv:
        b, s = enc_value(t, v)
        header += enc_string(key.encode()) + struct.pack("<I", t) + b
        metadata.append({"key": key, "type": t, "value": s})
    for name, ne, t, _ in tensors:
        header += enc_string(name.encode()) + struct.pack("<I", len(ne))
        header += struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", t, offsets[name])
    data_offset = (len(header) + align - 1) // align * align
    blob = bytearray(pos)
    for name, _, _, data in tensors:
        blob[offsets[name]:offsets[name] + len(data)] = data
    out = header + bytes(data_offset - len(header)) + bytes(blob)
    with open(path, "wb") as f:
        f.write(out)
    return {"version": 3, "alignment": align, "data_offset": data_offset,
            "file_size": len(out), "metadata": metadata,
            "tensors": [{"name": name, "ne": ne, "type": t, "offset": offsets[name],
                         "nbytes": len(data), "fnv1a": fnv1a(data)}
                        for name, ne, t, data in tensors]}


def main():
    with open(sys.argv[1]) as f:
        args = json.load(f)
    if args["mode"] == "read":
        out = read_summary(args["path"])
    elif args["mode"] == "write":
        out = write_known(args["path"], args.get("alignment"))
    else:
        raise ValueError("unknown mode")
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
