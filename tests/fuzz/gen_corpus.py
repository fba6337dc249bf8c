#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
#
# gen_corpus.py - write the seed corpora in corpus/<target>/ (a few small
# valid and edge-case inputs per target; libFuzzer mutates from them).
# Run from anywhere: python3 tests/fuzz/gen_corpus.py. Deterministic, so a
# rerun changes nothing. conf/dedupd.conf is the config target's first seed.
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def fld(num, val):
    """A protobuf field: bytes/str are length-delimited, ints varints."""
    if isinstance(val, int):
        return varint(num << 3) + varint(val)
    if isinstance(val, str):
        val = val.encode()
    return varint(num << 3 | 2) + varint(len(val)) + val


def filter_request(user, ids, scene="", days=0, mode=0, explain=0):
    b = fld(1, user) + b"".join(fld(2, i) for i in ids)
    if scene:
        b += fld(3, scene)
    for num, v in ((4, days), (5, mode), (6, explain)):
        if v:
            b += fld(num, v)
    return b


def u64be(*hs):
    return b"".join(struct.pack(">Q", h) for h in hs)


def write(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


ids = ["video-%d" % i for i in range(12)]
write("wire", "ids", filter_request("user-42", ids, "feed", 30, 1, 1))
write("wire", "indexes", filter_request("u", ids[:3] + ["", ids[0]], "", 0, 0, 1))
write("wire", "empty", b"")
write("wire", "unknown_fields", filter_request("u", ids[:2]) + fld(9, 5) + fld(1000, "x"))
write("wire", "nul_id", filter_request("u", ["a\0b", "\xff\x80"]))

plays = b"".join(fld(2, fld(1, i) + fld(2, 1728043200000 + n)) for n, i in enumerate(ids[:4]))
write("requests", "delivery", b"\x00" + fld(1, "user-1") + b"".join(fld(2, i) for i in ids[:4])
      + fld(3, "feed") + fld(4, 1728043200000))
write("requests", "plays", b"\x01" + fld(1, "user-1") + plays + fld(3, "feed"))
write("requests", "plays_now", b"\x01" + fld(1, "user-2") + fld(2, fld(1, "x")))
write("requests", "forget", b"\x02" + fld(1, "user-1") + fld(2, "feed"))

# playevent: byte 0 = format (bit 0: protobuf) | key length << 1
write("playevent", "json", b"\x00" + b'{"user_id":"u1","item_id":"v1","played_at_ms":1700000000000,"scene":"feed"}')
write("playevent", "json_key", b"\x04" + b"u1" + b'{"userId":"u1","itemId":123,"playedAtMs":"1700000000000"}')
write("playevent", "json_nested", b"\x00" + b'{"x":[{"a":[1,2,{"b":null}]}],"user_id":"u","item_id":"i"}')
write("playevent", "protobuf", b"\x01" + fld(1, "u1") + fld(2, "v1") + fld(3, 1700000000000) + fld(4, "feed"))
write("playevent", "protobuf_key", b"\x05" + b"u1" + fld(2, "v1"))

# fold: mode (seg | reading << 2 | raw << 3 | damaged base << 4), nops, existing kind, groups
hs = [0x0123456789ABCDEF * (i + 1) & (2**64 - 1) for i in range(40)]
write("fold", "open_fps", bytes([0, 2, 0]) + bytes([3]) + u64be(*hs[:3]) + bytes([2]) + u64be(*hs[3:5]))
write("fold", "closed_filter", bytes([1, 1, 1]) + bytes([40]) + u64be(*hs) + bytes([20]) + u64be(*hs[:20]))
write("fold", "open_split", bytes([4, 3, 2]) + bytes([33]) + u64be(*hs[:33]) + bytes([1]) + u64be(hs[0])
      + bytes([0]) + bytes([10]) + u64be(*hs[30:]))
write("fold", "dead", bytes([2, 1, 0, 5]) + u64be(*hs[:5]))
write("fold", "raw", bytes([8]) + b"\xf5" + b"\x00" * 12)
# damaged base (mode bit 16): the existing value, then the byte and bit to flip in it
write("fold", "damaged_open", bytes([16, 1, 1]) + bytes([3]) + u64be(*hs[:3]) + bytes([2])
      + u64be(*hs[3:5]) + bytes([20]) + u64be(*hs[10:30]) + bytes([9, 3]))
write("fold", "damaged_closed_split", bytes([17, 0, 2]) + bytes([5]) + u64be(*hs[:5]) + bytes([33])
      + u64be(*hs[:33]) + bytes([200, 0]))
write("fold", "damaged_dead", bytes([18, 0, 1]) + bytes([2]) + u64be(*hs[:2]) + bytes([4])
      + u64be(*hs[4:8]) + bytes([1, 7]))

# bloom: range byte (odd: full range), count, hashes, damage pairs, length byte
write("bloom", "full_intact", bytes([1, 8]) + u64be(*hs[:8]) + bytes([0, 0]))
write("bloom", "small_flip", bytes([0x40, 20]) + u64be(*hs[:20]) + bytes([2, 14, 0x10, 20, 0x01, 0]))
write("bloom", "full_count", bytes([3, 4]) + u64be(*hs[:4]) + bytes([1, 4, 0x02, 0]))
write("bloom", "truncated", bytes([5, 30]) + u64be(*hs[:30]) + bytes([0, 0x85]) + u64be(*hs[30:]))

with open(os.path.join(root, "conf", "dedupd.conf"), "rb") as f:
    write("config", "dedupd.conf", f.read())
write("config", "small", b"[history]\npath = /tmp/x\nsegment_days = 7\n[rpc]\nlisten = \"[::1]:50051\" ; c\n"
      b"[kafka]\nbrokers = a:1,b:2\n[rocksdb]\nmax_open_files = 100\n")
write("config", "quoted", b'[recent]\npassword = "a \\" #b\\\\"\nredis = 127.0.0.1:6379\n')

write("redis_reply", "array", b"*3\r\n$7\r\nvideo-1\r\n$0\r\n\r\n$2\r\nab\r\n")
write("redis_reply", "nested", b"*2\r\n*1\r\n$1\r\nx\r\n:5\r\n")
write("redis_reply", "error", b"-WRONGTYPE Operation against a key\r\n")
write("redis_reply", "nil_status", b"*3\r\n$-1\r\n+OK\r\n*-1\r\n")
write("redis_reply", "partial", b"*2\r\n$5\r\nhel")

write("sentinel", "master", b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n")
write("sentinel", "master_v6", b"*2\r\n$3\r\n::1\r\n$5\r\n26379\r\n")
write("sentinel", "unknown", b"*-1\r\n")
write("sentinel", "error", b"-IDONTKNOW No such master\r\n")
write("sentinel", "subscribed", b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n")
write("sentinel", "switch", b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n"
      b"$36\r\nmymaster 10.0.0.1 6379 10.0.0.2 6380\r\n")
write("sentinel", "partial", b"*2\r\n$9\r\n127.0")

write("admin_http", "metrics", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
write("admin_http", "readyz_head", b"HEAD /readyz HTTP/1.0\r\n\r\n")
write("admin_http", "post", b"POST /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
write("admin_http", "pipelined", b"GET / HTTP/1.1\r\n\r\nGET /nope?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n")
write("admin_http", "chunked", b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
