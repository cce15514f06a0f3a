"""Faults across model families: the two Mamba2 mechanisms (#37836, #29368) in sglang's real
Mamba2 code path, their GDN re-creations, and the family field the launcher refuses by.

Faults are applied through sglang's HookRegistry (fault_support.applied) and undone after
each test; the states come from the torch CPU kernels the embedded engine runs.
"""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import json  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from fault_support import both  # noqa: E402  (tests/support)

from mcinspect_engine_hooks.cpu_engine.faults import FAULTS, Fault, initial_state  # noqa: E402
from mcinspect_engine_hooks.cpu_engine.faults.base import LOG_ENV  # noqa: E402
from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig, EngineStartError, validate  # noqa: E402
from mcinspect_engine_hooks.families import FAMILIES  # noqa: E402
from mcinspect_kernels.cpu_ops.selective_scan import mamba_chunk_scan_combined_cpu  # noqa: E402

CHUNK = 64
HEADS, HEAD_DIM, D_STATE = 2, 4, 8


def test_every_fault_names_families_it_exists_in() -> None:
    for name, fault in FAULTS.items():
        assert fault.families and set(fault.families) <= set(FAMILIES), name
    assert FAULTS["wrong-chunk-state"].applies_to("extra_buffer", 16, "nemotron-h")
    assert FAULTS["zero-initial-state"].applies_to("extra_buffer_lazy", 16, "qwen3.5")
    assert not FAULTS["zero-initial-state"].applies_to("no_buffer", 1, "nemotron-h")  # no track mask to gate by


def test_launcher_refuses_a_fault_on_a_family_it_does_not_exist_in(monkeypatch: pytest.MonkeyPatch) -> None:
    only_mamba2 = Fault("only-mamba2", "test", "test", ("T2-recompute",), ("extra_buffer",), (), families=("nemotron-h",))
    monkeypatch.setitem(FAULTS, only_mamba2.name, only_mamba2)
    validate(EmbeddedEngineConfig(model="nemotron-h", fault=only_mamba2.name))
    with pytest.raises(EngineStartError, match=r"^fault only-mamba2 exists in nemotron-h, not qwen3-next; adjust --model$"):
        validate(EmbeddedEngineConfig(model="qwen3-next", fault=only_mamba2.name))


def test_launcher_refuses_a_fault_on_a_release_that_has_the_bug_for_real(monkeypatch: pytest.MonkeyPatch) -> None:
    import sglang

    real_here = Fault("real-here", "test", "test", ("T2-recompute",), ("extra_buffer",), (), real_on=((sglang.__version__, "it is real"),))
    monkeypatch.setitem(FAULTS, real_here.name, real_here)
    with pytest.raises(EngineStartError, match=r"^fault real-here proves nothing here: it is real; run the demo without --fault"):
        validate(EmbeddedEngineConfig(fault=real_here.name))
    validate(EmbeddedEngineConfig(fault="wrong-chunk-state", model="nemotron-h"))  # real on 0.5.19 only


# ---------------------------------------------------------------- #37836 on Mamba2's flat grid


def _mamba2_batch(lens: list[int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The flat chunk grid `h` of the Mamba2 CPU scan over requests of `lens` prefilled together,
    and each request's true state after its first 64 tokens (run alone)."""
    gen = torch.Generator().manual_seed(0)
    total = sum(lens)
    x, dt = torch.randn(1, total, HEADS, HEAD_DIM, generator=gen), torch.randn(1, total, HEADS, generator=gen)
    A = -torch.rand(HEADS, generator=gen) * 0.2
    B, C = torch.randn(1, total, 1, D_STATE, generator=gen), torch.randn(1, total, 1, D_STATE, generator=gen)

    def scan(start: int, bounds: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        end = start + bounds[-1]
        states, varlen, _ = mamba_chunk_scan_combined_cpu(
            x[:, start:end], dt[:, start:end], A, B[:, start:end], C[:, start:end], chunk_size=CHUNK,
            cu_seqlens=torch.tensor(bounds), return_varlen_states=True, return_track_states=True, dt_softplus=True,
            out=torch.empty_like(x[:, start:end]), state_dtype=torch.float32,
        )  # fmt: skip
        return states[0], varlen

    bounds = [0]
    for n in lens:
        bounds.append(bounds[-1] + n)
    h, _ = scan(0, bounds)
    truths = [scan(start, [0, CHUNK])[1][0] for start in bounds[:-1]]
    return h, truths


def test_wrong_chunk_state_on_mamba2_reads_the_pre_37836_rows() -> None:
    """Three 100-token requests: request 0's checkpoint (flat 64) is on the grid; request 1's
    (flat 164) and 2's (flat 264) are not, so sglang recomputes them. The pre-#37836 index
    floor-sums the earlier lengths, reading grid rows 2 and 3: states of earlier positions."""
    from sglang.srt.layers.attention.mamba import prefill_track_metadata as plans

    lens = [100, 100, 100]
    h, truths = _mamba2_batch(lens)

    def run() -> object:
        return plans.build_prefill_track_plan([True] * 3, lens, lens, [0] * 3, CHUNK, mamba2=True)

    clean, faulty = both("wrong-chunk-state", run)
    assert (clean.h_rows, clean.h_src, clean.recompute_rows, clean.recompute_end_locs) == ([0], [1], [1, 2], [164, 264])
    assert torch.allclose(h[clean.h_src[0]], truths[0], atol=1e-5), "the clean grid row is request 0's state"
    assert (faulty.h_rows, faulty.h_src, faulty.recompute_rows) == ([0, 1, 2], [1, 2, 3], [])
    assert torch.equal(h[faulty.h_src[0]], h[clean.h_src[0]]), "the first request is unaffected"
    for row in (1, 2):
        wrong = h[faulty.h_src[row]]
        assert (wrong - truths[row]).norm() / truths[row].norm() > 0.1, row


# ---------------------------------------------------------------- #29368: a short suffix runs blank


def _mixed_metadata(prefix: list[int], mask: list[bool]) -> object:
    """sglang's own `Mamba2Metadata.prepare_mixed` for an extend batch of len(prefix) requests."""
    from sglang.srt.layers.attention.mamba.mamba2_metadata import ForwardMetadata, Mamba2Metadata

    n = len(prefix)
    lens = [70] * n
    starts = torch.tensor([0] + [sum(lens[: i + 1]) for i in range(n)], dtype=torch.int32)
    mode = SimpleNamespace(is_decode=lambda: False, is_target_verify=lambda: False)
    batch = SimpleNamespace(
        extend_num_tokens=sum(lens), logical_forward_mode=mode, forward_mode=mode, extend_seq_lens_cpu=lens,
        seq_lens=torch.tensor([p + 70 for p in prefix]), extend_prefix_lens=torch.tensor(prefix), spec_info=None,
        mamba_track_mask=torch.tensor(mask), mamba_track_indices=torch.arange(n) + 10, rids=[f"r{i}" for i in range(n)],
    )  # fmt: skip
    meta = ForwardMetadata(query_start_loc=starts, mamba_cache_indices=torch.arange(n) + 1, has_mamba_track_mask=any(mask))
    return Mamba2Metadata.prepare_mixed(meta, CHUNK, batch)


def test_zero_initial_state_gates_mamba2s_initial_states_by_the_track_mask() -> None:
    """Rows: a hit tracking a checkpoint, a hit with a short suffix (mask False), a fresh prompt."""

    def run() -> tuple[list[bool], bool, set[str]]:
        mixed = _mixed_metadata([64, 128, 0], [True, False, True]).mixed_metadata
        return mixed.has_initial_states.tolist(), mixed.prep_initial_states, set(initial_state._blank_started)

    clean, faulty = both("zero-initial-state", run)
    assert clean == ([True, True, False], True, set())
    assert faulty == ([True, False, False], True, {"r1"})
    only_short = both("zero-initial-state", lambda: _mixed_metadata([128], [False]).mixed_metadata)[1]
    assert not only_short.has_initial_states.any() and not only_short.prep_initial_states
    assert only_short.chunk_indices is None and only_short.chunk_offsets is None  # mamba.py passes no initial states


def test_zero_initial_state_blanks_short_suffix_slots_in_the_gdn_backend() -> None:
    """The GDN re-creation: the same rows' slots blanked in the layer's pools before the kernels."""
    conv, temporal = torch.ones(6, 5, 3), torch.ones(6, 2, 4, 4)
    backend = SimpleNamespace(
        forward_metadata=SimpleNamespace(mamba_cache_indices=torch.tensor([3, 4, 5])),
        req_to_token_pool=SimpleNamespace(mamba2_layer_cache=lambda layer_id: SimpleNamespace(conv=[conv], temporal=temporal)),
    )
    batch = SimpleNamespace(
        mamba_track_mask=torch.tensor([True, False, False]), extend_prefix_lens=torch.tensor([64, 128, 0]),
        forward_mode=SimpleNamespace(is_target_verify=lambda: False), rids=["a", "b", "c"],
    )  # fmt: skip
    try:
        initial_state.start_short_suffixes_blank(backend, SimpleNamespace(layer_id=0), batch)
        assert initial_state._blank_started == {"b"}
    finally:
        initial_state._blank_started.clear()
    untouched = [0, 1, 2, 3, 5]
    assert conv[4].eq(0).all() and temporal[4].eq(0).all()
    assert conv[untouched].eq(1).all() and temporal[untouched].eq(1).all()


def test_zero_initial_state_logs_when_a_blank_run_caches_a_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "faults.jsonl"
    monkeypatch.setenv(LOG_ENV, str(log))
    inserted = SimpleNamespace(mamba_exist=False)
    params = SimpleNamespace(mamba_value=torch.tensor([7]))
    try:
        initial_state._blank_started.add("blank")
        initial_state.log_blank_descendant_cached(None, SimpleNamespace(rid="other"), True, inserted, params)
        initial_state.log_blank_descendant_cached(None, SimpleNamespace(rid="blank"), False, SimpleNamespace(mamba_exist=True), params)
        initial_state.log_blank_descendant_cached(None, SimpleNamespace(rid="blank"), True, inserted, params)
        assert "blank" not in initial_state._blank_started  # finished: forgotten
    finally:
        initial_state._blank_started.clear()
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert (entry["fault"], entry["slot"], entry["rid"]) == ("zero-initial-state", 7, "blank")


def test_unwritten_slot_drops_mamba2s_track_copies() -> None:
    from sglang.srt.layers.attention import hybrid_linear_attn_backend as backend

    def run() -> tuple[float, float]:
        conv, ssm = torch.zeros(6, 3, 2), torch.zeros(6, 2, 4, 4)
        ssm[1], conv[1] = 2.0, 1.0
        meta = SimpleNamespace(
            has_mamba_track_mask=True, track_ssm_h_src=torch.tensor([1]), track_ssm_h_dst=torch.tensor([4]),
            track_ssm_recompute_dst=None, track_ssm_final_src=torch.tensor([1]), track_ssm_final_dst=torch.tensor([5]),
        )  # fmt: skip
        backend.Mamba2AttnBackend._track_mamba_state_extend(None, None, torch.ones(1, 3, 2, 4, 4), ssm, meta)
        backend.track_mamba_states_if_needed(conv, ssm, torch.tensor([1]), torch.tensor([True]), torch.tensor([3]), 1)
        return float(ssm[4].sum() + ssm[5].sum()), float(ssm[3].sum() + conv[3].sum())

    clean, faulty = both("unwritten-slot", run)
    assert clean == (32.0 + 64.0, 64.0 + 6.0)
    assert faulty == (0.0, 0.0)
