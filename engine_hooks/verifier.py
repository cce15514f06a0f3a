"""T2 in the engine: cached states, and running requests' working states, compared with their
prefixes recomputed alone (check T2-recompute and T2-working-state on the client).

Automatic verification (MCINSPECT_VERIFY=engine|transformers|both) runs on the scheduler thread
at step boundaries and idle turns, one reference at a time:
- cached states, oldest first, from the StateLog (every insert, with its prefix tokens), each
  once its producing forward has certainly finished (on the CPU at the first boundary after the
  insert, where every launched forward has run; on an accelerator one boundary later) and only
  while its node still holds the slot; states that leave the tree first are counted as gone;
- every 1/MCINSPECT_VERIFY_WORKING-th reference, a running request's working slot (requests
  that took a prefix from the cache first: copy-on-write and initial-state bugs live there),
  against its whole prefix (cached part + computed suffix) at the last forward that ran;
- only where no forward is in flight: on the CPU every boundary (forwards are synchronous); on
  an accelerator idle turns and boundaries with an empty result queue;
- within the budget (verify_budget.py) while requests run; one per idle turn otherwise;
- with tensor parallelism, rank 0 decides and the other ranks follow (one broadcast on the TP
  CPU group, only when something is due), so every rank runs the same reference forward, whose
  collectives then line up; each rank compares its own shard.

Results leave with the next capture: new `SlotContent` records carrying the distances, the
oracle, the node and the forward that wrote the state (`BatchOrigin`), and `WorkingStateEvent`s;
snapshots overlay the verified records. `mcinspect verify` asks for chosen nodes (tickets served
in the same turns, ahead of automatic work, outside the budget).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import torch

from mcinspect.checks.recompute import beyond
from mcinspect.schema import (
    SCHEMA_VERSION,
    NodeId,
    NodeVerdict,
    Rid,
    SlotContent,
    SlotId,
    Step,
    VerifyStats,
    VerifyStatus,
    WorkingStateEvent,
)

from . import extensions
from .config import HooksConfig
from .contents import slot_prints
from .cow_map import Frozen
from .event_sink import EventSink
from .reference import NoRoom, ReferenceRefused
from .req_kv import kv_of
from .state_log import CachedState, StateLog
from .verify_budget import VerifyBudget
from .verify_oracles import Distances, EngineOracle, TensorOracle

logger = logging.getLogger("mcinspect.engine_hooks")

MAX_QUEUE = 4096
"""Cached states waiting for a reference; past it the oldest are dropped (counted as gone)."""
MAX_TOKENS = 8_000_000
"""Prefix tokens kept for verified states (for `mcinspect verify`): 32 MB as int32."""
MAX_KNOWN = 65_536
"""Inserted states remembered by node (for `mcinspect verify`); past it the oldest are forgotten."""
MAX_EVENTS = 1024
MAX_TICKETS = 16
MAX_WORKING_CHECKS = 2
"""Checks of one request's working state: right after its prefill (where a wrong initial state is
freshest) and once later."""
MAX_SCAN = 32
"""Queued states looked at per turn for one that is ready and has room."""
MAX_PER_TURN = 8
"""References at one busy boundary, as the budget allows (its credit is capped at one second's
worth of the share, so a boundary stalls for at most that plus one reference)."""
ROOM_BACKOFF_S = 0.05
"""After a scan found every ready state waiting for KV room, the next scan waits this long (or
for a new state): the idle loop turns every few microseconds, and each scan reads the tree."""

Job = tuple[str, Any]
"""("cached", CachedState) or ("working", (request, slot, seqlen))."""
KINDS = ("", "cached", "working")
"""What TP rank 0 broadcasts: the kind's index (0: nothing)."""


class VerifyUnavailable(Exception):
    """A verification this engine cannot do (the message says why, for the client)."""


@dataclass
class _Ticket:
    ticket: int
    nodes: list[NodeId]
    everything: bool
    todo: list[CachedState] | None = None
    """Resolved on the scheduler thread at its first turn."""
    results: list[NodeVerdict] = field(default_factory=list)
    total: int = 0
    done: bool = False


class Verifier:
    """One per scheduler process (built by the Inspector when verification is on)."""

    def __init__(
        self,
        scheduler: Any,
        config: HooksConfig,
        log: StateLog,
        slot_of: Callable[[int], int | None],
        path_tokens: Callable[[int], list[int] | None],
        state_nodes: Callable[[], list[int]] = lambda: [],
        sink: EventSink | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.log = log
        self.sink = sink if sink is not None else EventSink()
        """The hooks' events, kept out of the step while a reference runs (its own allocations
        are not engine events)."""
        self.slot_of = slot_of
        """node id -> the mamba slot it holds now (None: gone or no state)."""
        self.path_tokens = path_tokens
        """node id -> its prefix tokens read from the tree (Python core), else None."""
        self.state_nodes = state_nodes
        """Every node holding a mamba state that the tree shows (the Rust core shows none)."""
        self.mode = config.verify
        self.budget = VerifyBudget(config.verify_share, config.verify_rate)
        self.working_share = config.verify_working
        self._oracles: list[Any] | None = None
        self._queue: deque[CachedState] = deque()
        self._scan_after = 0.0
        """perf_counter time before which _ready_state does not scan again (ROOM_BACKOFF_S)."""
        self._known: OrderedDict[NodeId, CachedState] = OrderedDict()
        """Every state seen inserted and not yet known gone, by node (tokens bounded)."""
        self._known_tokens = 0
        self._verified: dict[SlotId, SlotContent] = {}
        self._fresh: dict[SlotId, SlotContent] = {}
        self._client_has: set[SlotId] = set()
        """Slots whose verified record went out and was not removed since (clients hold it)."""
        self._events: list[WorkingStateEvent] = []
        self._working_seen: dict[str, int] = {}
        self._references = 0
        self._working_refs = 0
        self._working_this_turn = False
        self._stats = VerifyStats()
        self._lock = threading.Lock()
        self._tickets: OrderedDict[int, _Ticket] = OrderedDict()
        self._ticket_ids = itertools.count(1)
        self._cpu = str(getattr(scheduler, "device", "cpu")) == "cpu"
        self._tp_size = int(getattr(scheduler, "tp_size", 1) or 1)
        self._tp_rank = int(getattr(scheduler, "tp_rank", 0) or 0)
        self._failed_once = False

    @property
    def automatic(self) -> bool:
        return self.mode != "off"

    def oracles(self) -> list[Any]:
        """The configured oracles, built on first use (on the scheduler thread)."""
        if self._oracles is None:
            names = {"engine": ["engine"], "transformers": ["transformers"], "both": ["engine", "transformers"]}
            self._oracles = []
            for name in names.get(self.mode, ["engine"]):
                try:
                    self._oracles.append(self._build(name))
                except VerifyUnavailable as exc:  # this release lacks what the oracle needs: said once
                    logger.warning("mcinspect: T2 verification without the %s oracle: %s", name, exc)
        return self._oracles

    def _build(self, name: str) -> Any:
        if name == "engine":
            return EngineOracle(self.scheduler)
        factory = extensions.oracle_factory(name)
        if factory is None:
            raise VerifyUnavailable(f"the {name} oracle exists only in the embedded CPU engine")
        return TensorOracle(name, factory(self.scheduler), self.scheduler)

    # --- the scheduler's turns ---

    def on_turn(self, step: Step, *, idle: bool) -> None:
        """At a step boundary (`idle` False) or an idle turn: take in new states, then run the
        references that are due, if it is safe: one per idle turn, up to MAX_PER_TURN at a busy
        boundary within the budget."""
        states = self.log.drain(step)
        if states:
            self._take_in(states)
        if not self._tickets and not self.automatic:
            return  # the usual `--verify off` turn: nothing asked, nothing to run
        if not self._safe_point(idle):
            return
        observed, self.sink.observed = self.sink.observed, False
        try:
            self._run_due(step, idle)
        finally:
            self.sink.observed = observed

    def _run_due(self, step: Step, idle: bool) -> None:
        """A ticket's, else the automatic references due this turn."""
        ticket = self._next_ticket(step)
        if ticket is not None:
            self._serve_ticket(ticket, step)
            return
        if not self.automatic:
            return
        self._working_this_turn = False
        for _ in range(1 if idle else MAX_PER_TURN):
            job = self._due(step, idle)
            if self._tp_size > 1:
                job = self._agree(job, step)
            if job is None:
                return
            self._run(job, step, idle)

    def _safe_point(self, idle: bool) -> bool:
        """No forward in flight: CPU forwards are synchronous; elsewhere, idle or nothing queued."""
        if self._cpu or idle:
            return True
        return not getattr(self.scheduler, "result_queue", ())

    def _take_in(self, states: Iterable[CachedState]) -> None:
        for state in states:
            self._scan_after = 0.0  # a new state may fit where the waiting ones do not
            if len(self._queue) >= MAX_QUEUE:
                self._queue.popleft()
                self._count(gone=1)
            self._queue.append(state)
            self._remember(state)

    def _remember(self, state: CachedState) -> None:
        self._forget(state.node)
        self._known[state.node] = state
        if state.tokens is not None:
            self._known_tokens += len(state.tokens)
        while len(self._known) > MAX_KNOWN:
            self._forget(next(iter(self._known)))
        if self._known_tokens <= MAX_TOKENS:
            return
        queued = {id(s) for s in self._queue}
        for oldest in self._known.values():  # give up the oldest verified records' tokens first
            if self._known_tokens <= MAX_TOKENS:
                break
            if oldest.tokens is not None and id(oldest) not in queued:
                self._known_tokens -= len(oldest.tokens)
                oldest.tokens = None

    def _forget(self, node: NodeId) -> None:
        old = self._known.pop(node, None)
        if old is not None and old.tokens is not None:
            self._known_tokens -= len(old.tokens)

    def _due(self, step: Step, idle: bool) -> Job | None:
        """What to verify now, if anything: a running request's working state while their share
        of references is below MCINSPECT_VERIFY_WORKING (or nothing cached is ready), else the
        oldest cached state that is ready; either only if the budget allows it."""
        now = time.perf_counter()
        if not self.budget.ready(now):
            return None
        state = self._ready_state(step)
        behind = self._working_refs < self.working_share * (self._references + 1)
        if self.working_share > 0 and not idle and not self._working_this_turn and (state is None or behind):
            pick = self._working_candidate()
            if pick is not None and self.budget.allows(now, pick[2]):
                return ("working", pick)
        if state is None or state.tokens is None or not self.budget.allows(now, len(state.tokens)):
            return None
        return ("cached", state)

    def _ready_state(self, step: Step) -> CachedState | None:
        """The oldest queued state whose forward has finished, whose node still holds it, and
        for which the pools have room now (a long prefix waiting for room holds up no other)."""
        now = time.perf_counter()
        if now < self._scan_after:
            return None
        waiting = False
        for state in list(itertools.islice(self._queue, MAX_SCAN)):
            if state.step > step or (state.step == step and not self._cpu):
                break  # on an accelerator the forward that wrote it may still run: next boundary
            if state.tokens is None or self.slot_of(state.node) != state.slot:
                self._queue.remove(state)
                self._forget(state.node)
                self._count(gone=1)
                continue
            if all(oracle.room(len(state.tokens)) for oracle in self.oracles()):
                return state
            waiting = True
        if waiting:
            self._count(no_room=1)
            self._scan_after = now + ROOM_BACKOFF_S
        return None

    def _agree(self, job: Job | None, step: Step) -> Job | None:
        """TP ranks run a reference forward together or not at all: rank 0's choice wins. The
        other ranks pick the same item, since their queues and batches are the same."""
        import torch.distributed as dist

        group = self.scheduler.tp_cpu_group
        flag = torch.tensor([KINDS.index(job[0]) if job is not None else 0], dtype=torch.int64)
        dist.broadcast(flag, src=dist.get_global_rank(group, 0), group=group)
        kind = KINDS[int(flag[0])]
        if not kind or (job is not None and job[0] == kind):
            return job if kind else None
        payload = self._ready_state(step) if kind == "cached" else self._working_candidate()
        return (kind, payload) if payload is not None else None

    def _run(self, job: Job, step: Step, idle: bool) -> None:
        kind, payload = job
        if kind == "cached":
            self._verify_cached(payload, step, idle)
        else:
            self._verify_working(payload, step, idle)

    # --- verifying ---

    def _verify_cached(self, state: CachedState, step: Step, idle: bool) -> None:
        # Queued until its references have run: a stats reply meanwhile (the request thread) still
        # counts it. Taken out first, it was counted nowhere for the reference's ms: a demo that
        # read 0 queued then stopped waiting for the verifier, one state short of its inserts.
        self._references += 1
        try:
            for oracle in self.oracles():
                distances = self._measure(oracle, state.slot, state.tokens, idle)
                if distances is None:
                    return
                self._publish(state, oracle.name, distances, step)
        finally:
            if state in self._queue:
                self._queue.remove(state)

    def _measure(self, oracle: Any, slot: int, tokens: Any, idle: bool) -> Distances | None:
        try:
            distances = oracle.distances(slot, tokens)
        except ReferenceRefused:
            self._count(no_room=1)
            return None
        except Exception:
            self._count(failed=1)
            if not self._failed_once:
                self._failed_once = True
                logger.exception("mcinspect: a reference recompute failed; the engine is unaffected")
            return None
        self.budget.spent(distances.seconds, distances.tokens)
        self._count(seconds=distances.seconds, busy=0.0 if idle else distances.seconds, tokens=distances.tokens)
        return distances

    def _publish(self, state: CachedState, oracle: str, distances: Distances, step: Step) -> None:
        slot = state.slot
        cache = self.scheduler.req_to_token_pool.mamba_pool.mamba_cache
        printed = slot_prints(list(cache.conv), cache.temporal, [slot])
        content = SlotContent(
            slot=slot,
            fingerprint=printed.fingerprint[0],
            nonfinite=printed.nonfinite[0],
            zero=printed.all_zero[0],
            step=step,
            recompute_conv_rel_l2=distances.conv_rel_l2,
            recompute_temporal_rel_l2=distances.temporal_rel_l2,
            recompute_oracle=oracle,
            recompute_node=state.node,
            origin=state.origin,
        )
        self._verified[slot] = content
        self._fresh[slot] = content
        forward = state.origin.forward if state.origin is not None else ""
        self._count(verified=1, mismatches=int(_beyond(distances, oracle, forward)))

    def _working_candidate(self) -> tuple[Any, int, int, str] | None:
        """(request, working slot, tokens) of a running request whose last forward just ran,
        preferring requests that took a prefix from the cache and were checked least."""
        s = self.scheduler
        # the batch the scheduler launched last (the MambaRadixCache releases name it `cur_batch`)
        batch = s.cur_batch_for_debug if hasattr(s, "cur_batch_for_debug") else getattr(s, "cur_batch", None)
        if batch is None or getattr(batch, "forward_iter", None) != getattr(s, "forward_ct", None):
            return None
        mode = getattr(batch, "forward_mode", None)
        if mode is None or not (mode.is_extend() or mode.is_decode()) or getattr(mode, "is_mixed", lambda: False)():
            return None
        lens = getattr(batch, "seq_lens_cpu", None)
        if lens is None or not batch.spec_algorithm.is_none():
            return None
        best = None
        extend = 0 if mode.is_extend() else 1
        for req, seqlen in zip(batch.reqs, lens.tolist()):
            if req.finished() or not kv_of(req).holds_mamba or seqlen <= 0:
                continue
            if self._working_seen.get(req.rid, 0) >= MAX_WORKING_CHECKS:
                continue
            # the fewest checks first; then requests that took a prefix from the cache, best
            # right after their prefill (a wrong initial state is freshest there)
            rank = (self._working_seen.get(req.rid, 0), 0 if req.cached_tokens > 0 else 1, extend)
            if best is None or rank < best[0]:
                best = (rank, req, int(seqlen))
        if best is None:
            return None
        _, req, seqlen = best
        return req, int(kv_of(req).mamba_pool_idx), seqlen, "extend" if mode.is_extend() else "decode"

    def _verify_working(self, pick: tuple[Any, int, int, str], step: Step, idle: bool) -> None:
        req, slot, seqlen, forward = pick
        self._references += 1
        self._working_refs += 1
        self._working_this_turn = True
        self._working_seen[req.rid] = self._working_seen.get(req.rid, 0) + 1
        if len(self._working_seen) > 4 * MAX_EVENTS:
            self._working_seen.clear()
        tokens = array("i", (req.origin_input_ids + req.output_ids)[:seqlen])
        if len(tokens) != seqlen:  # the forward's tokens are not all known on the host yet
            return
        for oracle in self.oracles():
            if not oracle.room(len(tokens)):
                self._count(no_room=1)
                return
            distances = self._measure(oracle, slot, tokens, idle)
            if distances is None:
                return
            if len(self._events) < MAX_EVENTS:
                self._events.append(
                    WorkingStateEvent(
                        step=step,
                        rid=Rid(req.rid),
                        slot=SlotId(slot),
                        seqlen=len(tokens),
                        prefix_len=int(req.cached_tokens),
                        conv_rel_l2=distances.conv_rel_l2,
                        temporal_rel_l2=distances.temporal_rel_l2,
                        oracle=oracle.name,
                        forward=forward,  # type: ignore[arg-type]
                    )
                )
            self._count(working=1, mismatches=int(_beyond(distances, oracle.name, forward)))

    # --- tickets (mcinspect verify) ---

    def start(self, nodes: list[NodeId], everything: bool) -> VerifyStatus:
        """Request thread: queue a verification of `nodes` (or all) for the scheduler thread."""
        if self._tp_size > 1:
            raise VerifyUnavailable(
                "verifying on request needs every TP rank to run the reference together; with "
                f"tp_size {self._tp_size} only automatic verification (MCINSPECT_VERIFY) can"
            )
        with self._lock:
            if sum(not t.done for t in self._tickets.values()) >= MAX_TICKETS:
                raise VerifyUnavailable(f"{MAX_TICKETS} verifications are already waiting; try again later")
            ticket = _Ticket(next(self._ticket_ids), list(nodes), everything)
            self._tickets[ticket.ticket] = ticket
            while len(self._tickets) > 4 * MAX_TICKETS:
                self._tickets.popitem(last=False)
            return self._status(ticket)

    def status(self, ticket_id: int) -> VerifyStatus:
        with self._lock:
            ticket = self._tickets.get(ticket_id)
            if ticket is None:
                raise VerifyUnavailable(f"no verification with ticket {ticket_id} (finished long ago, or never asked)")
            return self._status(ticket)

    def _status(self, ticket: _Ticket) -> VerifyStatus:
        return VerifyStatus(
            schema_version=SCHEMA_VERSION, ticket=ticket.ticket, total=ticket.total, results=list(ticket.results), done=ticket.done
        )

    def _next_ticket(self, step: Step) -> _Ticket | None:
        if not self._tickets:  # read unlocked: a ticket added meanwhile is served next turn
            return None
        with self._lock:
            ticket = next((t for t in self._tickets.values() if not t.done), None)
        if ticket is not None and ticket.todo is None:
            todo, errors = self._resolve(ticket)
            with self._lock:
                ticket.todo = todo
                ticket.results.extend(errors)
                ticket.total = len(todo) + len(errors)
                ticket.done = not todo
        return ticket if ticket is not None and not ticket.done else None

    def _resolve(self, ticket: _Ticket) -> tuple[list[CachedState], list[NodeVerdict]]:
        """The states to verify for a ticket, and verdicts for nodes that cannot be verified."""
        wanted = [*self.state_nodes(), *self._known] if ticket.everything else ticket.nodes
        todo, errors = [], []
        for node in dict.fromkeys(wanted):
            slot = self.slot_of(node)
            if slot is None and ticket.everything:  # a node remembered from its insert, evicted since
                continue
            if slot is None:
                errors.append(_error(node, -1, "the node holds no mamba state (unknown, evicted or a split parent)"))
                continue
            known = self._known.get(node)
            tokens = known.tokens if known is not None and known.slot == slot else None
            if tokens is None:
                path = self.path_tokens(node)
                tokens = array("i", path) if path else None
            if tokens is None:
                errors.append(
                    _error(node, slot, "no prefix tokens: inserted before the hooks recorded them, and the Rust tree core hides keys")
                )
                continue
            origin = known.origin if known is not None and known.slot == slot else None
            todo.append(CachedState(SlotId(slot), node, tokens, Step(0), known.rid if known else Rid(""), origin))
        return todo, errors

    def _serve_ticket(self, ticket: _Ticket, step: Step) -> None:
        assert ticket.todo is not None
        state = ticket.todo.pop(0)
        verdicts = []
        if self.slot_of(state.node) != state.slot:
            verdicts.append(_error(state.node, state.slot, "the node lost its state before its turn", skipped=True))
        else:
            for oracle in self.oracles():
                try:
                    distances = oracle.distances(state.slot, state.tokens)
                except NoRoom as exc:
                    verdicts.append(_error(state.node, state.slot, f"{oracle.name} oracle: {exc} (the engine is loaded)", skipped=True))
                    continue
                except Exception as exc:  # noqa: BLE001  a request's answer, not the engine's problem
                    verdicts.append(_error(state.node, state.slot, f"{oracle.name} oracle: {exc}"))
                    continue
                self._count(seconds=distances.seconds, tokens=distances.tokens)
                self._publish(state, oracle.name, distances, step)
                forward = state.origin.forward if state.origin is not None else ""
                verdicts.append(
                    NodeVerdict(
                        state.node, state.slot, len(state.tokens), oracle.name, distances.conv_rel_l2,
                        distances.temporal_rel_l2, forward=forward,
                    )
                )  # fmt: skip
        with self._lock:
            ticket.results.extend(verdicts)
            ticket.done = not ticket.todo

    # --- what the captures carry ---

    def after_capture(
        self, fresh: dict[SlotId, SlotContent], dropped: list[SlotId], tree_slots: Mapping[int, int] | Iterable[int]
    ) -> tuple[dict[SlotId, SlotContent], list[SlotId]]:
        """(contents, removed contents) for the delta: `fresh` (new fingerprints) plus the
        records verified since the last capture; `dropped` plus the verified records that left
        the tree.

        A new fingerprint equal to a verified record clients already hold is not sent (they keep
        the record with its distances); after the record was removed (`dropped`: its owner
        changed, or sglang's Rust core hid the node) the fingerprint goes out as it is, so no
        verification is ever reported twice. Verified records of slots no longer in the tree
        are forgotten."""
        if not (self._verified or self._client_has or self._fresh):  # nothing verified: as they are
            return fresh, list(dropped)
        in_tree = tree_slots if isinstance(tree_slots, Mapping) else set(tree_slots)  # the owners map: no O(tree) copy
        self._verified = {slot: c for slot, c in self._verified.items() if slot in in_tree}
        removed = list(dropped)
        removed += [slot for slot in self._client_has if slot not in in_tree and slot not in set(dropped)]
        self._client_has.difference_update(removed)
        out = {}
        for slot, content in fresh.items():
            verified = self._verified.get(slot)
            held = slot in self._client_has and verified is not None and verified.fingerprint == content.fingerprint
            if not held:
                out[slot] = content
        for slot, content in self._fresh.items():
            if slot in in_tree:
                out[slot] = content
                self._client_has.add(slot)
        self._fresh = {}
        return out, removed

    def take_events(self) -> list[WorkingStateEvent]:
        events, self._events = self._events, []
        return events

    def overlay(self, contents: Frozen[SlotId, SlotContent]) -> dict[SlotId, SlotContent]:
        """The verified records the stream has carried, to lay over a snapshot's `contents` (so a
        snapshot and the stream up to its seq agree; newer results go out with the next capture).
        Reads `contents` only: the snapshot copies it outside the inspector's lock."""
        out = {}
        for slot in self._client_has:
            verified = self._verified[slot]
            current = contents.get(slot)
            if current is None or current.fingerprint == verified.fingerprint:
                out[slot] = verified
        return out

    def has_news(self) -> bool:
        """Results not yet carried by a capture."""
        return bool(self._fresh or self._events)

    def stats(self) -> VerifyStats:
        return msgspec.structs.replace(self._stats, queued=len(self._queue))

    def _count(self, **add: float) -> None:
        s = self._stats
        self._stats = msgspec.structs.replace(
            s,
            verified=s.verified + int(add.get("verified", 0)),
            working=s.working + int(add.get("working", 0)),
            mismatches=s.mismatches + int(add.get("mismatches", 0)),
            no_room=s.no_room + int(add.get("no_room", 0)),
            gone=s.gone + int(add.get("gone", 0)),
            failed=s.failed + int(add.get("failed", 0)),
            seconds=s.seconds + add.get("seconds", 0.0),
            busy_seconds=s.busy_seconds + add.get("busy", 0.0),
            tokens=s.tokens + int(add.get("tokens", 0)),
        )


def _error(node: NodeId, slot: int, reason: str, *, skipped: bool = False) -> NodeVerdict:
    return NodeVerdict(node, SlotId(slot), 0, "", -1.0, -1.0, error=reason, skipped=skipped)


def _beyond(distances: Distances, oracle: str, forward: str) -> bool:
    """Whether a comparison is a mismatch by the client checks' tolerance (NaN is)."""
    return beyond(oracle, forward, distances.conv_rel_l2, distances.temporal_rel_l2) is not None
