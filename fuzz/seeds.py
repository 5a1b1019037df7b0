#!/usr/bin/env python3
"""Writes the hand-made seeds into fuzz/corpus/<target>/ (file name = SHA-1 of the content).

Run from the repository root: python3 fuzz/seeds.py. Safe to rerun; `cargo fuzz cmin` may
drop seeds that add no coverage, so rerun this after minimising.

Input formats (see fuzz/src/lib.rs):
- retry_count_header: one header per line, "name:value".
- ack_reply: first byte 0 = the rest is the subject as is; odd = "$JS.ACK." is prepended.
- ack_payload: seconds (u64 little-endian) + nanoseconds (u32 little-endian).
- planner: structured by `arbitrary`; seeds are byte patterns, grown by fuzzing.
"""
import hashlib
import os
import struct

BASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, data):
    os.makedirs(os.path.join(BASE, target), exist_ok=True)
    with open(os.path.join(BASE, target, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


H = b"x-ruststream-retry-count"
# The hostile values of core/src/header.rs's unit tests, and overflow digits.
for v in [b"", b" ", b"0", b"1", b"007", b" 3\t", b"+1", b"-1", b"1 2", b"1.0", b"0x10",
          b"\xff\xfe", b"\xd9\xa3", b"1e3", b"\x001", b"18446744073709551615",
          b"18446744073709551616", b"99999999999999999999999999999"]:
    put("retry_count_header", H + b":" + v)
# Mixed-case and near-miss names.
for name in [b"X-RustStream-Retry-Count", b"X-RUSTSTREAM-RETRY-COUNT", b"x-ruststream-retry-coun",
             b"x-ruststream-retry-count ", b"\xff-ruststream-retry-count"]:
    put("retry_count_header", name + b":5")
put("retry_count_header", b"X-RustStream-Retry-Count:2\nx-ruststream-retry-count:junk\n"
    b"X-RUSTSTREAM-RETRY-COUNT:5\nx-ruststream-retry-count:4")
put("retry_count_header", b"Content-Type:application/json\nTrace-Id:abc\nx-ruststream-retry-count:2\n"
    b"Nats-Msg-Id:m-1\nNats-Expected-Stream:S")
put("retry_count_header", b"")

# Real reply subjects, captured from nats-server 2.9.10 (a -NAK between each, so delivered
# grows). That server sends only the 9-token form; the long forms follow NATS ADR-15.
real = [b"$JS.ACK.ORDERS.worker.1.1.1.1796010151338621930.2",
        b"$JS.ACK.ORDERS.worker.2.1.2.1796010151338621930.2",
        b"$JS.ACK.ORDERS.worker.3.1.3.1796010151338621930.2"]
long = [b"$JS.ACK.hub.ACCHASH.ORDERS.worker.3.1042.17.1700000000123456789.5.R4nd0m",
        b"$JS.ACK._.H.S.C.1.2.3.4.0", b"$JS.ACK._.H.S.C.1.2.3.4.0.tok.future"]
hostile = [b"", b"$JS.ACK", b"$js.ack.S.C.1.2.3.4.5", b"_INBOX.abc", b"$JS.ACK.",
           b"$JS.ACK.S.C.1.2.3.4", b"$JS.ACK.D.S.C.1.2.3.4.5", b"$JS.ACK..C.1.2.3.4.5",
           b"$JS.ACK.D.H.S.C.1.2.3.4.5.", b"$JS.ACK.S.C.+1.2.3.4.5", b"$JS.ACK.S.C.-1.2.3.4.5",
           b"$JS.ACK.S.C. 1.2.3.4.5", b"$JS.ACK.S.C.18446744073709551616.2.3.4.5",
           b"$JS.ACK.S.C.18446744073709551615.2.3.4.5", b"$JS.ACK.S.C.0.2.3.4.5",
           b"$JS.ACK.S\xff.C.1.2.3.4.5", b"$JS.ACK.S.C.01.002.3.4.5"]
for s in real + long + hostile:
    put("ack_reply", b"\x00" + s)
put("ack_reply", b"\x01ORDERS.worker.1.1.1.1796010151338621930.2")

for secs, nanos in [(0, 0), (0, 1), (0, 250_000_000), (1, 0), (9223372036, 854775807),
                    (9223372036, 854775808), (2**64 - 1, 999_999_999), (2**63, 0)]:
    put("ack_payload", struct.pack("<QI", secs, nanos))

for i in range(24):
    put("planner", bytes((i * 37 + j * 11) % 256 for j in range(40)))
put("planner", b"\x00" * 40)
put("planner", b"\xff" * 40)
