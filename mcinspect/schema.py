"""The wire contract between engine_hooks (inside sglang) and the mcinspect client.

msgspec Structs, msgpack on the wire, JSON in files. Every message is a tagged struct so a
decoder rejects anything it does not know; the schema version travels in the handshake and
in every reply, and a mismatch is an error, not a guess. Nothing here imports sglang or torch.
"""

from __future__ import annotations

from typing import NewType

import msgspec

SCHEMA_VERSION = 1
"""Bumped on any incompatible change of the structs below."""

MAX_REQUEST_BYTES = 64 * 1024
"""Requests larger than this are rejected unread: no client request needs more."""

Step = NewType("Step", int)
"""Scheduler step: number of `process_batch_result` calls since the engine started."""
SlotId = NewType("SlotId", int)
"""Index into the mamba pool (1..size; 0 is sglang's dummy slot)."""
Rid = NewType("Rid", str)
"""sglang request id."""


class _Message(msgspec.Struct, tag=True, forbid_unknown_fields=True, frozen=True):
    pass


# --- requests (client -> engine) ----------------------------------------------------------


class Hello(_Message):
    """First request of a session: the client's schema version and, off loopback, a token."""

    schema_version: int
    token: str = ""


class GetStats(_Message):
    """Ask for the running counters of one scheduler process."""

    schema_version: int
    token: str = ""


Request = Hello | GetStats


# --- replies (engine -> client) -----------------------------------------------------------


class EngineInfo(_Message):
    """Who answered: the engine's configuration as this scheduler process sees it."""

    schema_version: int
    sglang_version: str
    model_path: str
    strategy: str
    page_size: int
    overlap: bool
    tree_core: str
    mamba_pool_size: int
    kv_pool_tokens: int
    tp_rank: int
    dp_rank: int
    pid: int
    request_port: int


class SlotLayout(msgspec.Struct, frozen=True):
    """The mamba slots one running request holds: a working slot and its ping-pong slots."""

    rid: Rid
    working: SlotId
    ping_pong: list[SlotId]


class Stats(_Message):
    """Running counters of one scheduler process, as of `step`."""

    schema_version: int
    step: Step
    mamba_pool_size: int
    mamba_slots_in_use: int
    mamba_slots_peak: int
    evicted_mamba_slots: int
    evicted_tokens: int
    hook_errors: int
    slots_per_request: dict[int, int]
    """Histogram: slots held by one running request (working + ping-pong) -> observations."""
    example_layouts: list[SlotLayout]
    """One observed layout per distinct slot count, for the record."""


class ErrorReply(_Message):
    """The request was refused; `reason` is one line meant for a person."""

    schema_version: int
    reason: str


Reply = EngineInfo | Stats | ErrorReply

request_decoder = msgspec.msgpack.Decoder(Request)
reply_decoder = msgspec.msgpack.Decoder(Reply)
encoder = msgspec.msgpack.Encoder()
