"""RequestReader's incremental reads against fresh reads, over sglang 0.5.23's real cache
classes on CPU tensors (cpu_cache.py) with requests moved by sglang's own calls (cache_driver.py),
under inference mode as in the scheduler (the requests' slot tensors then keep no version)."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

from types import SimpleNamespace  # noqa: E402
from typing import Any, TypeVar  # noqa: E402

import msgspec  # noqa: E402
import torch  # noqa: E402
from cache_driver import Driver  # noqa: E402

from mcinspect.schema import grown  # noqa: E402
from mcinspect_engine_hooks.growing_runs import encoder  # noqa: E402
from mcinspect_engine_hooks.pools_0523 import held_requests, session_kv  # noqa: E402
from mcinspect_engine_hooks.request_reader import Read, RequestReader  # noqa: E402

import cpu_cache  # noqa: E402  (tests/support: sglang's real cache classes on CPU tensors)

T = TypeVar("T")


class DeviceCopyReader(RequestReader):
    """The reader's path for tensors off the host (one batched copy), taken on the host."""

    def _host_ints(self, plans: Any) -> None:
        return None


def as_sent(message: T) -> T:
    """`message` as a client decodes it."""
    return msgspec.msgpack.decode(encoder().encode(message), type=type(message))


def read(reader: RequestReader, scheduler: SimpleNamespace) -> Read:
    return reader.read(held_requests(scheduler), session_kv(scheduler.tree_cache))


class Checked:
    """One reader kept across steps, and one kept on the device path; each read compared with
    the other's and with fresh readers' (host and device paths), its `moved` with the claim lists that really changed, and its `upserts` and `grown`
    with the records that differ from the last read's: applied to those as a client applies
    them (schema.apply_delta), they give this read's records."""

    def __init__(self, scheduler: SimpleNamespace) -> None:
        self.scheduler = scheduler
        self.reader = RequestReader(scheduler.req_to_token_pool)
        self.device_reader = DeviceCopyReader(scheduler.req_to_token_pool)
        self.claims: dict[int, list[Any]] = {}
        self.records: dict[Any, Any] = {}
        self.grown: list[Any] = []
        """The last read's growths."""

    def read(self) -> tuple[dict[Any, Any], set[int]]:
        records, claims, moved, upserts, self.grown = read(self.reader, self.scheduler)
        kept = read(self.device_reader, self.scheduler)  # its views kept from step to step
        assert (kept.records, kept.claims, kept.moved, kept.upserts, kept.grown) == (records, claims, moved, upserts, self.grown)
        for fresh_reader in (RequestReader, DeviceCopyReader):
            fresh_records, fresh_claims, *_ = read(fresh_reader(self.scheduler.req_to_token_pool), self.scheduler)
            assert records == fresh_records and list(records) == list(fresh_records)
            assert claims == fresh_claims
        before = self.claims
        assert moved == {slot for slot in before.keys() | claims.keys() if before.get(slot) != claims.get(slot)}
        changed = {rid for rid, record in records.items() if self.records.get(rid) != record}
        assert not {r.rid for r in upserts} & {g.rid for g in self.grown}
        assert {r.rid for r in upserts} | {g.rid for g in self.grown} == changed
        assert upserts == [record for rid, record in records.items() if rid in changed and rid in {r.rid for r in upserts}]
        # Applied as a client applies them, to what it decoded (the engine's runs are GrowingRuns).
        applied = {rid: as_sent(record) for rid, record in self.records.items()}
        for record in upserts:
            applied[record.rid] = as_sent(record)
        for growth in self.grown:
            applied[growth.rid] = grown(applied[growth.rid], as_sent(growth))
        assert {rid: applied[rid] for rid in records} == {rid: as_sent(record) for rid, record in records.items()}
        self.claims = {slot: list(listed) for slot, listed in claims.items()}
        self.records = dict(records)
        return records, moved


def test_incremental_reads_equal_fresh_reads() -> None:
    scheduler = cpu_cache.build_cache(mamba_slots=40)
    with torch.inference_mode():
        drive, checked = Driver(scheduler), Checked(scheduler)
        a = drive.admit(list(range(100, 140)))
        drive.prefill(a, 16)  # chunked: a ping-pong slot donated to the tree
        records, moved = checked.read()
        assert records[a.rid].state == "chunked" and moved
        drive.prefill(a, 40)
        b = drive.admit(list(range(100, 124)) + [9] * 8)  # a hit with copy-on-write
        records, moved = checked.read()
        assert records[b.rid].cow_source >= 0 and records[b.rid].cow_source in moved
        unchanged = records[a.rid]
        records, moved = checked.read()  # nothing moved: the same records, no slot
        assert records[a.rid] is unchanged and moved == set()
        for token in range(5):
            drive.decode(a, [token])
            drive.decode(b, [token])
            records, moved = checked.read()  # lengths and KV runs only: sent as growths
            assert records[a.rid].output_len == token + 1 and moved == set()
            assert [(g.rid, g.output_len) for g in checked.grown] == [(a.rid, token + 1), (b.rid, token + 1)]
            # the two rows take one token each in turn (page size 1): a's first continues its
            # prompt's run, each later one is a run of its own
            assert [len(g.added_runs) for g in checked.grown] == [1, 1] and len(records[a.rid].kv_runs) == 1 + token
        c = drive.admit(list(range(300, 330)))
        drive.decode(a, [5])  # a one-token tail and c's whole row in one read
        drive.prefill(c, 30)
        records, _ = checked.read()
        assert records[a.rid].allocated_len == 46 and records[c.rid].allocated_len == 30
        drive.prefill(b, 32)  # tracked: b's ping-pong entries move
        records, moved = checked.read()
        assert records[b.rid].last_track_seqlen == 32 and moved
        drive.finish(a)
        drive.retract(b)  # back to waiting, holding nothing
        records, moved = checked.read()
        assert a.rid not in records and records[b.rid].working_slot == -1 and moved


def test_a_slot_written_in_place_is_seen_without_a_field_moving() -> None:
    """sglang writes the ping-pong buffer in place (and a fault could write any slot tensor):
    the reader re-reads the tensors every step, whatever the Python fields say."""
    scheduler = cpu_cache.build_cache(mamba_slots=40)
    with torch.inference_mode():
        drive, checked = Driver(scheduler), Checked(scheduler)
        a = drive.admit(list(range(100, 140)))
        drive.prefill(a, 40)
        records, _ = checked.read()
        buffer = a.kv.mamba_ping_pong_track_buffer
        old = records[a.rid].ping_pong
        spare = int(scheduler.req_to_token_pool.mamba_allocator.alloc(1)[0])
        buffer[0] = spare  # in place, the same tensor object
        records, moved = checked.read()
        assert records[a.rid].ping_pong == [spare, old[1]]
        assert spare in moved and old[0] in moved


def test_a_waiting_request_is_read_every_step_and_rebuilt_only_when_it_moves() -> None:
    """A waiting request holds no row and no slot (under load, hundreds of them): its record is
    kept while nothing moves (it was rebuilt at every step, with new runs, and its garbage set
    off collections of the older GC generations), and a new match or its admission shows at the
    step they happen."""
    scheduler = cpu_cache.build_cache(mamba_slots=40)
    with torch.inference_mode():
        drive, checked = Driver(scheduler), Checked(scheduler)
        a = drive.admit(list(range(100, 140)))
        drive.prefill(a, 40)
        waiting = drive.queue(list(range(100, 140)) + [0, 1, 2] + [7] * 5)  # a's tokens, not in the tree yet
        records, _ = checked.read()
        kept = records[waiting.rid]
        assert (kept.state, kept.row, kept.prefix_len, kept.working_slot) == ("waiting", -1, 0, -1)
        for token in range(3):
            drive.decode(a, [token])
            records, moved = checked.read()
            assert records[waiting.rid] is kept and moved == set()
        drive.finish(a)  # a's prompt enters the tree
        waiting.init_next_round_input(drive.tree)  # the scheduler's policy matches it again
        records, _ = checked.read()
        assert records[waiting.rid].prefix_len > 0 and records[waiting.rid].last_node != kept.last_node
        drive.admit_waiting(waiting)
        records, moved = checked.read()
        admitted = records[waiting.rid]
        assert (admitted.state, admitted.row >= 0, admitted.allocated_len) == ("running", True, 43)
        assert set(admitted.ping_pong) <= moved
