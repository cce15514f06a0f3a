"""The workload generator: deterministic from the seed, and shaped to exercise the cache."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine.workload import FIRST_TOKEN, KINDS, RequestSpec, Workload, WorkloadShape


def _fake_output(spec: RequestSpec) -> list[int]:
    """Deterministic stand-in for model output: the generator only needs *some* tokens to
    build the next turns from (the engine tests drive it with the real engine)."""
    return [(sum(spec.input_ids) + i) % 500 + FIRST_TOKEN for i in range(spec.max_new_tokens)]


def _run_with_history(seed: int, total: int) -> tuple[list[list[RequestSpec]], list[tuple[int, list[int]]]]:
    """Waves, and each recorded conversation with the index of the wave that recorded it."""
    workload = Workload(seed=seed, total_requests=total)
    waves: list[list[RequestSpec]] = []
    history: list[tuple[int, list[int]]] = []
    for wave in workload.waves():
        outputs = [_fake_output(spec) for spec in wave]
        workload.record(wave, outputs)
        history += [(len(waves), spec.input_ids + out) for spec, out in zip(wave, outputs)]
        waves.append(wave)
    return waves, history


def _run(seed: int, total: int) -> list[list[RequestSpec]]:
    return _run_with_history(seed, total)[0]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_same_seed_same_requests() -> None:
    assert _run(7, 40) == _run(7, 40)
    assert _run(7, 40) != _run(8, 40)


def test_issues_exactly_the_requested_count_in_bounded_waves() -> None:
    waves = _run(0, 23)
    assert sum(len(w) for w in waves) == 23
    assert max(len(w) for w in waves) <= WorkloadShape().wave_size


def test_every_kind_appears_and_tokens_stay_in_vocab() -> None:
    specs = [spec for wave in _run(0, 40) for spec in wave]
    assert {spec.kind for spec in specs} == set(KINDS)
    shape = WorkloadShape()
    for spec in specs:
        assert all(FIRST_TOKEN <= t < shape.vocab_size for t in spec.input_ids)
        assert len(spec.input_ids) + spec.max_new_tokens <= shape.max_context


def test_prefixes_are_shared_and_turns_extend_history() -> None:
    waves = _run(3, 40)
    specs = [spec for wave in waves for spec in wave]
    shape = WorkloadShape()
    system_prefixes = {tuple(s.input_ids[: shape.system_prompt_len]) for s in specs if s.kind == "shared-prefix"}
    assert len(system_prefixes) <= shape.system_prompts  # many requests, few distinct prefixes
    chunked = [s for s in specs if s.kind == "chunked"]
    assert chunked and all(tuple(s.input_ids[: shape.system_prompt_len]) in system_prefixes for s in chunked)


def test_turns_extend_and_branches_cut_earlier_conversations() -> None:
    waves, history = _run_with_history(3, 60)
    kinds_checked = set()
    for index, wave in enumerate(waves):
        earlier = [conv for recorded_in, conv in history if recorded_in < index]
        for spec in wave:
            if spec.kind == "multi-turn":  # a whole earlier conversation (prompt + output), then more
                assert any(spec.input_ids[: len(c)] == c and len(spec.input_ids) > len(c) for c in earlier)
            elif spec.kind == "branch":  # leaves an earlier conversation somewhere past its first third
                assert any(len(c) // 3 <= _common_prefix(spec.input_ids, c) < len(c) for c in earlier)
            kinds_checked.add(spec.kind)
    assert {"multi-turn", "branch"} <= kinds_checked


def test_branches_cut_at_unaligned_positions() -> None:
    specs = [spec for wave in _run(0, 80) for spec in wave if spec.kind in ("branch", "shared-prefix", "pressure")]
    assert any(len(spec.input_ids) % 16 for spec in specs)
    assert any(len(spec.input_ids) % 64 for spec in specs)
