#!/usr/bin/env python3
"""Makes a real capture small enough to seed the fuzzers: copies it chunk
by chunk (checksums untouched), leaving out the symbol tables of objects
other than those named by KEEP (substrings of the object path) and the
kernel symbols. Usage: shrink-capture.py IN OUT [KEEP...]"""
import json
import struct
import sys

src, dst, keep = sys.argv[1], sys.argv[2], sys.argv[3:]
data = open(src, "rb").read()
out = bytearray(data[:16])
at = 16
while at + 24 <= len(data):
    magic, kind, _seq, length, _crc, _res = struct.unpack_from("<4sIIIII", data, at)
    chunk = data[at:at + 24 + length]
    at += 24 + length
    if kind == 2:
        meta = json.loads(chunk[24:])
        if meta["type"] == "kernel_symbols":
            continue
        if meta["type"] == "object" and not any(k in meta["path"] for k in keep):
            continue
    out += chunk
open(dst, "wb").write(out)
