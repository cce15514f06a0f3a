"""Invariant 9: KV pages. A live request's protected row prefix is its tree path's KV, no KV
token is both in the tree (or a request's own tail) and free, and node boundaries and KV
indices sit on page boundaries.

Runs are (start, length) intervals (schema.Runs); every test here works on them with sorting
and bisection, never on expanded token lists. Per step it looks at changed nodes and changed
requests against the whole free list, and at the whole tree only against tokens freed since
the previous boundary.
"""

from __future__ import annotations

from bisect import bisect_right

from ..run_edits import as_runs, intervals, outside, run_start, subtract
from ..schema import CacheState, NodeId, NodeRecord, RequestRecord, Runs
from .history import StepView
from .violation import Violation

KV = "kv-pages"


def first_overlap(runs: Runs, within: Runs) -> int | None:
    """The first token of `runs` that lies in `within` (sorted, disjoint runs), or None: a
    bisection a run, whatever the length of `within`."""
    for start, length in runs:
        if length <= 0:
            continue
        i = bisect_right(within, start, key=run_start) - 1
        if i >= 0 and within[i][0] + within[i][1] > start:
            return start
        if i + 1 < len(within) and within[i + 1][0] < start + length:
            return within[i + 1][0]
    return None


def truncate(runs: Runs, tokens: int) -> Runs:
    """The first `tokens` tokens of `runs`, with adjacent runs merged."""
    out: Runs = []
    left = tokens
    for start, length in runs:
        if left <= 0:
            break
        if length <= 0:
            continue
        take = min(length, left)
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + take)
        else:
            out.append((start, take))
        left -= take
    return out


def check_kv(view: StepView) -> list[Violation]:
    """Row prefixes of changed live requests, free-list overlaps, and page alignment."""
    state, step = view.state, view.step
    free = view.free_runs
    out: list[Violation] = []
    page = state.kv.page_size
    root = view.root
    for node in view.changed_nodes:
        if node is root:
            continue
        if page > 1:
            out += _misaligned(node, page, step)
        token = first_overlap(node.kv_runs, free)
        if token is not None:
            out.append(Violation(check=KV, step=step, nodes=(node.id,), reason=f"KV token {token} of node {node.id} is on the free list"))
    out += _newly_freed(view, free)
    for request in view.changed_requests:
        if request.rid in view.live:
            out += _request_row(view, request, free)
    return out


def _misaligned(node: NodeRecord, page: int, step: int) -> list[Violation]:
    """Node boundaries on page boundaries, and each KV run starting where its position's page
    offset says (a paged allocator hands out whole pages)."""
    if node.depth % page or node.key_len % page:
        return [
            Violation(
                check=KV,
                step=step,
                nodes=(node.id,),
                reason=f"node {node.id} spans depth {node.depth}..{node.depth + node.key_len}, off the {page}-token pages",
            )
        ]
    position = node.depth
    for start, length in node.kv_runs:
        if (start - position) % page:
            return [
                Violation(
                    check=KV,
                    step=step,
                    nodes=(node.id,),
                    reason=f"node {node.id} puts position {position} at KV index {start}, a different offset within its {page}-token page",
                )
            ]
        position += length
    return []


def _newly_freed(view: StepView, free: Runs) -> list[Violation]:
    """Unchanged nodes against the tokens that joined the free list in this step (changed nodes
    were checked against all of it). On the first view every node is 'changed'."""
    previous = view.previous
    if previous is None or previous.kv is view.state.kv:
        return []
    delta = view.delta
    if delta is not None and delta.kv is None and delta.kv_edit is not None:  # O(the edit), not O(the free list)
        spans = outside(intervals(delta.kv_edit.added), previous.kv.free_runs)
    else:
        spans = subtract(intervals(free), intervals(previous.kv.free_runs))
    fresh = as_runs(spans)
    if not fresh:
        return []
    changed = {node.id for node in view.changed_nodes}
    nodes = view.state.nodes
    out = []
    for node_id in view.kv_holders.candidates(fresh):
        node = nodes.get(node_id)
        if node is None or node_id in changed:
            continue
        token = first_overlap(node.kv_runs, fresh)
        if token is not None:
            out.append(
                Violation(
                    check=KV,
                    step=view.step,
                    nodes=(node.id,),
                    reason=f"KV token {token} of node {node.id} was freed while the node still holds it",
                )
            )
    return out


def _request_row(view: StepView, request: RequestRecord, free: Runs) -> list[Violation]:
    """`req_to_token[row, :cache_protected_len]` is the KV of the path to `last_node`, and no
    token of the row is free."""
    step, rid = view.step, request.rid
    token = first_overlap(request.kv_runs, free)
    if token is not None:
        return [Violation(check=KV, step=step, rids=(rid,), reason=f"KV token {token} in request {rid}'s row is on the free list")]
    protected = request.cache_protected_len
    if protected <= 0 or request.last_node not in view.state.nodes:
        return []  # nothing protected, or an anchor the (Rust core's) records do not show
    path = _path(view.state, request.last_node)
    if path is None:
        return []  # the parent chain leaves the records; tree-shape reports it
    evicted = [node.id for node in path if node.kv_evicted and node is not view.root]
    if evicted:
        return [
            Violation(
                check=KV,
                step=step,
                rids=(rid,),
                nodes=tuple(evicted),
                reason=f"request {rid}'s protected prefix runs through node(s) {', '.join(map(str, evicted))} whose KV was evicted",
            )
        ]
    tree_runs = truncate([run for node in path for run in node.kv_runs], protected)
    covered = sum(length for _, length in tree_runs)
    if covered < protected:
        return [
            Violation(
                check=KV,
                step=step,
                rids=(rid,),
                nodes=(request.last_node,),
                reason=f"request {rid} protects {protected} tokens but its path to node {request.last_node} holds {covered}",
            )
        ]
    row = truncate(request.kv_runs, protected)
    if row != tree_runs:
        position = _first_difference(row, tree_runs)
        return [
            Violation(
                check=KV,
                step=step,
                rids=(rid,),
                nodes=(request.last_node,),
                reason=f"request {rid}'s row differs from its tree path (to node {request.last_node}) at position {position} of its {protected} protected tokens",
            )
        ]
    return []


def _path(state: CacheState, node_id: NodeId) -> list[NodeRecord] | None:
    """Root-first nodes from the root to `node_id`; None if the chain breaks or loops."""
    nodes = state.nodes
    path: list[NodeRecord] = []
    current = nodes.get(node_id)
    while current is not None:
        path.append(current)
        if current.parent < 0:
            path.reverse()
            return path
        if len(path) > len(nodes):
            return None
        current = nodes.get(current.parent)
    return None


def _first_difference(a: Runs, b: Runs) -> int:
    """First token position where two run lists disagree (both merged)."""
    position = 0
    for (a_start, a_len), (b_start, b_len) in zip(a, b):
        if a_start != b_start:
            return position
        if a_len != b_len:
            return position + min(a_len, b_len)
        position += a_len
    return position
