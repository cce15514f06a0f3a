"""The KV free list read at a step that changed it: edited runs (KvReader, kv_free_edits.py)
vs a whole read, side by side on the same steps, on sglang's real allocators over a fragmented
pool (a long run of production: freed prefixes scattered through the list).

Each size: the pool allocated whole, then `--chunks` chunks of 3 tokens (page 1) or 1 page
(paged; at most half the pages) freed in scattered order; then `--steps` steps, each a decode batch's alloc (32 tokens
or pages' worth), a finished request's chunk freed, and every 10th step a prefill chunk of 2048
tokens. Per step both reads are timed and their states compared (they must be equal). Then what
a step's delta carries for the free list on those steps: the whole state (as before schema 4:
hundreds of KB a step at 62k runs) or the reader's edit (`KvEdit`), in bytes, the engine's
encoding, and a client's decoding and applying (each applied edit is compared with the
reader's state).

    .venv/bin/python tests/bench/bench_kv_free_list.py [--steps 50] [--chunks 100000] [--pool 800000]

Then the demo's own small pool, where a step's change is a page or two and a read's fixed costs
are all there is (stop 33's edits had cost four times the whole read there).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import

import msgspec  # noqa: E402
import torch  # noqa: E402

from mcinspect.schema import KvEdit, KvState, edited_kv  # noqa: E402
from mcinspect_engine_hooks.pools_0523 import KvReader  # noqa: E402

DEMO_POOL = 3072
"""The embedded engine's KV pool (launcher.EngineConfig.max_total_tokens): 192 pages of 16."""


def allocator_of(page_size: int, pool: int, need_sort: bool) -> object:
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator

    if page_size == 1:
        return TokenToKVPoolAllocator(pool, torch.bfloat16, "cpu", None, need_sort)
    return PagedTokenToKVPoolAllocator(pool, page_size, torch.bfloat16, "cpu", None, need_sort)


def timed(work: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    value = work(*args)
    return value, time.perf_counter() - began


KV_DECODER = msgspec.msgpack.Decoder(KvState)
EDIT_DECODER = msgspec.msgpack.Decoder(KvEdit)


def apply_edit(kv: KvState, sent: bytes) -> KvState:
    """What a client does with a delta's encoded KvEdit."""
    return edited_kv(kv, EDIT_DECODER.decode(sent))


def both_reads(allocator: Any, change: Callable[[int], None], steps: int, scale: float) -> dict[str, float | int | bool]:
    """`steps` steps of `change(step)`, each followed by the reader's edited read and a fresh
    reader's whole read, timed (times `scale`: ms or us), compared; and what each step's delta
    carries both ways (the whole state, as before schema 4, or the reader's edit: bytes, the
    engine's encoding, a client's decoding and applying)."""
    reader = KvReader(allocator)
    state = client = reader.read()
    encoder = msgspec.msgpack.Encoder()
    times: dict[str, list[float]] = {name: [] for name in ("edited", "whole", "encode", "encode_edit", "apply", "apply_edit")}
    sizes: dict[str, list[int]] = {"whole": [], "edit": []}
    equal = True
    for step in range(steps):
        change(step)
        before = state
        state, took = timed(reader.read)
        times["edited"].append(took)
        fresh, took = timed(KvReader(allocator).read)
        times["whole"].append(took)
        equal &= state == fresh
        whole, took = timed(encoder.encode, state)
        times["encode"].append(took)
        sizes["whole"].append(len(whole))
        times["apply"].append(timed(KV_DECODER.decode, whole)[1])
        edit = reader.edit_since(before)
        if edit is None:  # read whole: the delta carries the state (the client takes it whole)
            client = KV_DECODER.decode(whole)
            continue
        sent, took = timed(encoder.encode, edit)
        times["encode_edit"].append(took)
        sizes["edit"].append(len(sent))
        client, took = timed(apply_edit, client, sent)
        times["apply_edit"].append(took)
        equal &= client == state
    out: dict[str, float | int | bool] = {"whole_reads": reader.whole_reads, "equal": equal}
    for name, series in times.items():
        out[f"{name}_median"] = scale * statistics.median(series) if series else float("nan")
        out[f"{name}_worst"] = scale * max(series) if series else float("nan")
    for name, series in sizes.items():
        out[f"{name}_bytes"] = statistics.median(series) if series else 0
    return out


def measure(page_size: int, need_sort: bool, pool: int, chunks: int, steps: int) -> dict[str, float | int | bool]:
    allocator = allocator_of(page_size, pool, need_sort)
    rng = random.Random(0)
    unit = 3 if page_size == 1 else page_size
    everything = allocator.alloc(pool // unit * unit)
    pieces = list(everything.reshape(-1, unit))
    rng.shuffle(pieces)
    chunks = min(chunks, len(pieces) // 2)  # a paged pool has fewer pieces: half of them freed
    for piece in pieces[:chunks]:
        allocator.free(piece)
    held = pieces[chunks:]
    runs = len(KvReader(allocator).read().free_runs)

    def change(step: int) -> None:
        assert allocator.alloc(32 * page_size) is not None
        if step % 10 == 0:
            allocator.alloc(2048)
        allocator.free(held.pop(rng.randrange(len(held))))

    return {"runs": runs, **both_reads(allocator, change, steps, 1e3)}


def measure_small(page_size: int, pool: int, steps: int) -> dict[str, float | int | bool]:
    """The demo's pool: each step allocs a request's page or few, or frees one (a decode
    step's change); us per read."""
    allocator = allocator_of(page_size, pool, False)
    rng = random.Random(1)
    held: list[torch.Tensor] = []

    def change(step: int) -> None:
        if rng.random() < 0.5 and allocator.available_size() > 4 * page_size:
            held.append(allocator.alloc(page_size * rng.choice((1, 1, 1, 2, 4))))
        elif held:
            allocator.free(held.pop(rng.randrange(len(held))))

    return both_reads(allocator, change, steps, 1e6)


def _name(page_size: int, need_sort: bool) -> str:
    return f"{'token' if page_size == 1 else 'paged'} (page {page_size}){', need_sort' if need_sort else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--pool", type=int, default=800_000, help="KV tokens")
    parser.add_argument("--small-steps", type=int, default=3000, help="steps on the demo's pool")
    args = parser.parse_args()
    print(f"pool {args.pool} tokens, {args.chunks} scattered chunks freed, {args.steps} steps; ms per read")
    print(
        f"{'allocator':<30} {'free runs':>9} {'whole: median':>13} {'worst':>7} {'edited: median':>14} {'worst':>7} {'ratio':>6}  whole reads  equal"
    )
    results = {}
    for page_size, need_sort in ((1, False), (1, True), (16, False), (16, True)):
        r = results[page_size, need_sort] = measure(page_size, need_sort, args.pool, args.chunks, args.steps)
        ratio = r["whole_median"] / r["edited_median"]
        print(
            f"{_name(page_size, need_sort):<30} {r['runs']:>9} {r['whole_median']:>13.2f} {r['whole_worst']:>7.2f} {r['edited_median']:>14.2f} "
            f"{r['edited_worst']:>7.2f} {ratio:>5.0f}x  {r['whole_reads']:>11}  {r['equal']}"
        )
    print("\nwhat a step's delta carries for it (medians; worst in brackets): the whole state, as before schema 4, against the")
    print("edit (of the steps the reader edited); the engine's encoding (publisher thread), a client's decoding and applying")
    print(f"{'allocator':<30} {'KB whole':>9} {'edit':>7} {'encode ms':>10} {'edit us':>8} {'client ms':>15} {'edit':>13}")
    for (page_size, need_sort), r in results.items():
        print(
            f"{_name(page_size, need_sort):<30} {r['whole_bytes'] / 1024:>9.1f} {r['edit_bytes']:>6.0f}B {r['encode_median']:>10.2f} "
            f"{1e3 * r['encode_edit_median']:>8.1f} {r['apply_median']:>6.2f} ({r['apply_worst']:>5.2f}) "
            f"{r['apply_edit_median']:>5.2f} ({r['apply_edit_worst']:>5.2f})"
        )
    print(f"\nthe demo's pool ({DEMO_POOL} tokens, page 16), {args.small_steps} steps of a small alloc or free; us per read")
    r = measure_small(16, DEMO_POOL, args.small_steps)
    print(
        f"whole: median {r['whole_median']:.1f}, worst {r['whole_worst']:.1f}; edited: median {r['edited_median']:.1f}, "
        f"worst {r['edited_worst']:.1f}; whole reads {r['whole_reads']}; equal {r['equal']}"
    )


if __name__ == "__main__":
    main()
