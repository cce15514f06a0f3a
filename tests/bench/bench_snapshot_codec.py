"""Encode/decode time of a full snapshot with 1M nodes (goal: < 1 s each way).

Nodes are schema records shaped like a page-16 tree of 64-token nodes (32 tokens inline, as INLINE_TOKENS); the timing is of the
wire codec (msgpack) and the dump format (JSON), not of the engine.
"""

from __future__ import annotations

import random
import sys
import time

import msgspec

from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    Counters,
    KvState,
    NodeRecord,
    SlotClaim,
    Snapshot,
    decode_reply,
    encoder,
    pack_tokens,
)


def build(n_nodes: int, seed: int = 0) -> Snapshot:
    rng = random.Random(seed)
    nodes = {}
    for i in range(1, n_nodes + 1):
        tokens = pack_tokens([rng.randrange(3, 512) for _ in range(32)])
        nodes[i] = NodeRecord(
            id=i,
            parent=(i - 1) // 4,
            depth=64 * (i.bit_length()),
            key_len=64,
            tokens=tokens,
            key_hash=rng.getrandbits(64),
            kv_runs=[(64 * i, 64)],
            kv_evicted=False,
            mamba_slot=i % 4096 if i % 8 == 0 else -1,
            full_lock=0,
            mamba_lock=0,
            in_full_lru=True,
            in_mamba_lru=i % 8 == 0,
            evictable=i > n_nodes // 4,
            last_access=float(i),
            hit_count=i % 5,
            tombstone=False,
        )
    slots = {s: [SlotClaim(slot=s, kind="tree" if s % 2 else "free", node=s)] for s in range(1, 4097)}
    state = CacheState(step=1, nodes=nodes, slots=slots, requests={}, kv=KvState(page_size=16, size=64 * n_nodes, free_runs=[]))
    return Snapshot(schema_version=SCHEMA_VERSION, seq=0, state=state, counters=Counters())


def timed(label: str, fn, *args):
    began = time.perf_counter()
    result = fn(*args)
    print(f"{label:<28} {time.perf_counter() - began:7.3f} s")
    return result


def main(n_nodes: int) -> None:
    snapshot = timed(f"build {n_nodes:,} nodes", build, n_nodes)
    wire = timed("msgpack encode", encoder.encode, snapshot)
    print(f"{'msgpack size':<28} {len(wire) / 1e6:7.1f} MB")
    decoded = timed("msgpack decode", decode_reply, wire)
    assert decoded == snapshot
    text = timed("json encode", msgspec.json.encode, snapshot)
    print(f"{'json size':<28} {len(text) / 1e6:7.1f} MB")
    timed("json decode", msgspec.json.Decoder(Snapshot).decode, text)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
