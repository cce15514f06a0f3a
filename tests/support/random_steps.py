"""A random chain of steps for the delta paths' tests: nodes changed, added and removed, their KV
tokens allocated and freed, requests and slots moved, fingerprints taken, and some steps freeing
a token that an unchanged node still holds (the bug kv-pages reports)."""

from __future__ import annotations

import random

import msgspec

from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    KvEdit,
    KvState,
    NodeId,
    NodeRecord,
    RequestGrowth,
    Rid,
    Seq,
    SlotClaim,
    SlotContent,
    SlotId,
    Step,
    apply_delta,
)

import factory
from factory import runs_of, tokens_of
from record_states import make_request

SIZE = 60_000


class World:
    """Nodes with KV tokens drawn from one pool, and the free list that follows."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.free = set(range(SIZE))
        self.next_id = 1
        self.state = CacheState(
            step=Step(0), nodes={}, slots=factory.free_slots(*range(1, 41)), requests={},
            kv=KvState(page_size=1, size=SIZE, free_runs=[]),
        )  # fmt: skip
        for _ in range(150):
            node = self.new_node()
            self.state.nodes[node.id] = node
        self.state.kv = KvState(page_size=1, size=SIZE, free_runs=runs_of(self.free))

    def take(self, count: int) -> set[int]:
        """`count` free tokens, scattered (as a fragmented pool hands them out)."""
        taken = set(self.rng.sample(sorted(self.free), count))
        self.free -= taken
        return taken

    def new_node(self) -> NodeRecord:
        node_id, self.next_id = self.next_id, self.next_id + 1
        tokens = self.take(self.rng.randint(1, 40))
        parent = self.rng.choice(sorted(self.state.nodes)) if node_id > 1 else -1
        return factory.node(node_id, parent, kv_runs=runs_of(tokens), key_len=len(tokens))

    def step(self, seq: int) -> tuple[Delta, set[int]]:
        """A random delta, and the tokens it put on the free list."""
        rng, nodes = self.rng, self.state.nodes
        free_before = set(self.free)
        ids = [i for i in nodes if i != 1]
        upserts: list[NodeRecord] = []
        removed: list[NodeId] = []
        for node_id in rng.sample(ids, 6):
            node = nodes[node_id]
            kind = rng.random()
            if kind < 0.3:  # evicted: its tokens go back
                removed.append(node_id)
                self.free |= tokens_of(node.kv_runs)
            elif kind < 0.6:  # its KV moved: new tokens, the old ones freed
                fresh = self.take(rng.randint(1, 30))
                self.free |= tokens_of(node.kv_runs)
                upserts.append(msgspec.structs.replace(node, kv_runs=runs_of(fresh), key_len=len(fresh)))
            elif kind < 0.7:  # another field only
                upserts.append(msgspec.structs.replace(node, hit_count=node.hit_count + 1))
            elif kind < 0.8:  # moved under another node (a split puts a new parent above it)
                upserts.append(msgspec.structs.replace(node, parent=rng.choice([i for i in ids if i < node_id] or [NodeId(1)])))
            else:  # sent again unchanged (an equal record is no change)
                upserts.append(msgspec.structs.replace(node))
        upserts += [self.new_node() for _ in range(rng.randint(0, 4))]
        touched = {n.id for n in upserts} | set(removed)
        if rng.random() < 0.4:  # the bug: a token of a node left alone goes on the free list
            victim = nodes[rng.choice([i for i in ids if i not in touched])]
            held = sorted(tokens_of(victim.kv_runs) - self.free)
            if held:
                self.free.add(rng.choice(held))
        slot = SlotId(rng.randint(1, 40))
        claims = {slot: [SlotClaim(slot=slot, kind=rng.choice(["free", "tree"]), node=NodeId(rng.choice(ids)))]}
        # Fingerprints taken at this boundary, and now and then one sent again as it was (an
        # equal record is no change) or re-stamped earlier (the verifier's overlay).
        contents = {}
        for _ in range(rng.randint(0, 3)):
            at = SlotId(rng.randint(1, 40))
            known = self.state.contents.get(at)
            kind = rng.random()
            if known is not None and kind < 0.2:
                contents[at] = msgspec.structs.replace(known)
            else:
                stamp = Step(seq if kind < 0.8 else max(seq - 3, 0))
                contents[at] = SlotContent(slot=at, fingerprint=rng.getrandbits(63), nonfinite=0, zero=False, step=stamp)
        requests = self.state.requests
        rid = Rid(f"r{rng.randrange(6)}")
        upsert_requests = [] if rid in requests and rng.random() < 0.5 else [make_request(rid, 1, rng.randint(1, 40), (-1, -1))]
        grown = [
            RequestGrowth(r.rid, r.output_len + 1, r.committed_len + 1, r.allocated_len + 1, [])
            for r in requests.values()
            if r.rid != rid and rng.random() < 0.5
        ]
        delta = Delta(
            schema_version=SCHEMA_VERSION, seq=Seq(seq), step=Step(seq), upsert_nodes=upserts, removed_nodes=removed, slots=claims,
            upsert_requests=upsert_requests, removed_requests=[], grown_requests=grown, kv=None, events=[], counters=Counters(published=seq),
            contents=contents,
            kv_edit=KvEdit(removed=runs_of(free_before - self.free), added=runs_of(self.free - free_before)),
        )  # fmt: skip
        apply_delta(self.state, delta)
        assert self.state.kv.free_runs == runs_of(self.free)
        return delta, self.free - free_before
