#!/usr/bin/env python3
"""Write the seed corpus of the rendezvous parser's fuzz target
(tests/fuzz/corpus/rdv): byte 0 the phase, bytes 1..8 the expected length,
then messages. The AUTH seeds carry a MAC made with the harness's fixed key
and challenge (fuzz_rdv.c), so the fuzzer starts inside the verified path."""
import hashlib, hmac, os, struct, sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "rdv")
key = bytes([1, 2, 3, 4, 5, 6, 7, 8, 9]) + bytes(23)
snonce = bytes([42, 43, 44]) + bytes(29)
MAGIC = 0x4E535232
AT_CHALLENGE, AT_AUTH, AT_WELCOME, AT_PART, AT_RESULT = range(5)
CHALLENGE, AUTH, WELCOME, DATA, CLOSE, RESULT, ERROR = range(1, 8)

def hdr(t, n):
    return struct.pack(">IIQ", MAGIC, t, n)

def head(phase, expect):
    return bytes([phase]) + struct.pack(">Q", expect)

def auth(nranks, rank, timeout_ms=10000, flags=0):
    body = bytes(range(32)) + struct.pack(">IIII", nranks, rank, timeout_ms, flags)
    label = b"nspcomm rdv2 rank".ljust(20, b"\0")
    mac = hmac.new(key, label + snonce + body, hashlib.sha256).digest()
    return body + mac

def err(code, text):
    return struct.pack(">i", code) + text

seeds = {
    "auth-valid": head(AT_AUTH, 0) + hdr(AUTH, 80) + auth(4, 1),
    "auth-badmac": head(AT_AUTH, 0) + hdr(AUTH, 80) + auth(4, 1)[:-1] + b"\0",
    "auth-huge-len": head(AT_AUTH, 0) + hdr(AUTH, 1 << 40),
    "challenge": head(AT_CHALLENGE, 0) + hdr(CHALLENGE, 32) + snonce,
    "welcome-error": head(AT_WELCOME, 0) + hdr(ERROR, 9) + err(-1, b"twice"),
    "part-data-close": head(AT_PART, 0xFFFFFFFFFFFFFFFF) + hdr(DATA, 4) + b"abcd" + hdr(CLOSE, 0),
    "part-fixed": head(AT_PART, 8) + hdr(DATA, 8) + b"01234567",
    "result": head(AT_RESULT, 16) + hdr(RESULT, 16) + bytes(16),
    "result-error": head(AT_RESULT, 16) + hdr(ERROR, 4 + 11) + err(-8, b"rank(s) 3 m"),
    "old-magic": head(AT_AUTH, 0) + struct.pack(">IIQ", 0x4E53504D, 1, 24) + bytes(24),
}
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
