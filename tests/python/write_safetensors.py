"""An independent safetensors writer (struct + json only) for tests/test_safetensors.cpp.

Usage: write_safetensors.py IN.json OUT.json, IN = {"path": where to write the file}.
Writes a file holding F32 (4-byte aligned and not), U8, F16 and BF16 tensors covering every
16-bit pattern, I64, U32, a scalar and an empty tensor, with non-ASCII names and metadata,
and writes OUT = {"tensors": {name: {"dtype", "shape", "data_offsets", "f32_bits" or
"u32" or nothing}}, "metadata": {...}, "header_len": N}.

Expected f32 values come from Python's own IEEE conversions (struct formats 'e' and 'f'),
not from forge's algorithm: for every non-NaN pattern, f32_bits is the bit pattern of the
float that Python decodes; NaN patterns are given as {"nan": sign} because Python does not
keep NaN payloads. When torch is importable, "torch_f32_bits" adds torch's conversion of the
same bytes, NaN payloads included.
"""
import json
import math
import struct
import sys


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def expect_from_float(v, sign):
    if math.isnan(v):
        return {"nan": sign}
    return f32_bits(v)


def main():
    with open(sys.argv[1]) as f:
        args = json.load(f)
    path = args["path"]

    all16 = list(range(65536))
    f16_bytes = struct.pack("<65536H", *all16)
    bf16_bytes = f16_bytes  # the same 65536 patterns, read as bfloat16

    f32_values = [0.5, -1.25, 3.0e-39, float("inf"), -0.0, 1.0e30]  # 3e-39: f32 subnormal
    f32_unaligned = [1.0, -2.5, float("-inf"), 6.103515625e-05]
    u32_values = [0, 1, 4294967295]

    # (name, dtype, shape, raw bytes, expected) in data order.
    tensors = [
        ("f32_aligned", "F32", [2, 3], struct.pack("<6f", *f32_values),
         {"f32_bits": [f32_bits(v) for v in f32_values]}),
        ("u8_pad", "U8", [3], bytes([1, 2, 3]), {}),
        ("f32_unaligned", "F32", [4], struct.pack("<4f", *f32_unaligned),
         {"f32_bits": [f32_bits(v) for v in f32_unaligned]}),
        ("f16_all", "F16", [256, 256], f16_bytes,
         {"f32_bits": [expect_from_float(struct.unpack("<e", struct.pack("<H", h))[0], h >> 15)
                       for h in all16]}),
        ("bf16_all", "BF16", [65536], bf16_bytes,
         {"f32_bits": [expect_from_float(struct.unpack("<f", struct.pack("<I", b << 16))[0],
                                         b >> 15) for b in all16]}),
        ("i64", "I64", [2], struct.pack("<2q", -1, 7), {}),
        ("u32", "U32", [3], struct.pack("<3I", *u32_values), {"u32": u32_values}),
        ("scalar", "F32", [], struct.pack("<f", 42.0), {"f32_bits": [f32_bits(42.0)]}),
        ("empty", "F32", [0, 5], b"", {"f32_bits": []}),
        ("caf\u00e9.\u2603.weight", "BF16", [2], struct.pack("<2H", 0x3F80, 0xC049),
         {"f32_bits": [f32_bits(1.0), f32_bits(-3.140625)]}),
    ]

    try:
        import torch
        torch_views = {"F16": torch.float16, "BF16": torch.bfloat16}
    except ImportError:
        torch = None

    header = {}
    out = {}
    pos = 0
    for name, dtype, shape, raw, expect in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        entry = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        entry.update(expect)
        if torch is not None and dtype in torch_views:
            t = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(torch_views[dtype])
            entry["torch_f32_bits"] = [v & 0xFFFFFFFF for v in
                                       t.float().view(torch.int32).tolist()]
        out[name] = entry
        pos += len(raw)
        if name == "u8_pad":  # metadata in the middle of the object: order must not matter
            header["__metadata__"] = {"format": "pt", "note": "h\u00e9llo \u2603"}

    # ensure_ascii (the default) writes non-ASCII names as \\u escapes, which readers decode.
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw, _ in tensors:
            f.write(raw)

    with open(sys.argv[2], "w") as f:
        json.dump({"tensors": out, "metadata": header["__metadata__"], "header_len": len(text),
                   "torch": torch is not None}, f)


if __name__ == "__main__":
    main()
