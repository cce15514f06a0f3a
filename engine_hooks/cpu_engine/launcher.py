"""Start the real sglang.Engine on the CPU with a tiny model of one family (the embedded engine)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcinspect.errors import McinspectError

from ..config import PORT_ENV, PORTS_PER_PROCESS, VERIFY_ENV, VERIFY_MODES, VERIFY_RATE_ENV, VERIFY_SHARE_ENV, ConfigError, HooksConfig
from ..families import DEFAULT_FAMILY, FAMILIES
from ..generations import installed_release
from . import patches
from .tiny_model import ensure_tiny_model

STRATEGIES = ("no_buffer", "extra_buffer", "extra_buffer_lazy")
"""`--mamba-radix-cache-strategy` values the embedded engine accepts."""
DEMO_VERIFY_SHARE = 0.5
DEMO_VERIFY_RATE = 100.0
"""The demo verifies (nearly) every state it caches, to show the faults caught: it may spend
half the scheduler's busy time on references, 100 a second (production engines default to 5%
and 20 a second)."""
TREE_CORES = ("python", "rust")
"""sglang's tree core backends; the Python one shows every node, the Rust one hides them."""


class EngineStartError(McinspectError):
    """The embedded engine could not start; the message says why in one line."""


class EngineDied(McinspectError):
    """An engine process failed; sglang's log above holds its traceback."""


@dataclass(frozen=True)
class EmbeddedEngineConfig:
    """What the embedded engine runs with. Overlap scheduling stays on, as on GPU servers."""

    strategy: str = "extra_buffer"
    page_size: int = 16
    model: str = DEFAULT_FAMILY
    """The model family whose tiny model the engine serves (`families.FAMILIES`)."""
    seed: int = 0
    max_running_requests: int = 8
    max_total_tokens: int = 3072
    mamba_slots: int = 32  # small on purpose: the workload must force evictions
    chunked_prefill_size: int = 128
    track_interval: int = 64
    """sglang's mamba_track_interval: decode checkpoints every this many tokens. Its default
    (256) lies beyond most of the workload's answers, so decode tracking would barely run."""
    overlap: bool = True
    """Overlap scheduling where the strategy allows it (sglang refuses it with no_buffer)."""
    radix_cache: bool = True
    """False: every request computes its whole prompt (the truth of a differential run)."""
    log_level: str = "error"
    inspector_port: int | None = None
    tree_core: str = "python"
    self_check: bool = False
    """Engine-side self-check of every captured step (slow; for tests and debugging)."""
    fault: str | None = None
    """A fault of the fault library to reproduce (see `mcinspect faults`)."""
    verify: str = "engine"
    """T2 oracles (MCINSPECT_VERIFY): engine (the engine's own forward pass), transformers (an
    independent implementation of the tiny model), both, or off."""
    verify_share: float = DEMO_VERIFY_SHARE
    """Share of the scheduler's busy time reference prefills may take (MCINSPECT_VERIFY_SHARE)."""
    mixed_chunk: bool = False
    """--enable-mixed-chunk: a prefill chunk and the running decodes share one forward."""
    verify_rate: float = DEMO_VERIFY_RATE
    """References a second at most (MCINSPECT_VERIFY_RATE)."""
    tp_size: int = 1
    """Tensor-parallel ranks: one scheduler process each, with its own tree, pools and inspector
    ports (PORT + 2 * rank); each rank's threads on its own CPU cores (SGLANG_CPU_OMP_THREADS_BIND)."""
    attn_dp_size: int = 1
    """sglang's --attn-dp-size: the TP ranks form this many attention groups, each scheduling its
    own requests with its own tree (the FFN stays tensor parallel)."""

    @property
    def effective_overlap(self) -> bool:
        return self.overlap and self.strategy != "no_buffer"


def validate(config: EmbeddedEngineConfig) -> None:
    """Reject what would fail only after seconds of start-up, with the fix in the message."""
    if config.model not in FAMILIES:
        raise EngineStartError(f"unknown model family {config.model!r}; choose one of {', '.join(FAMILIES)}")
    if config.strategy not in STRATEGIES:
        raise EngineStartError(f"unknown strategy {config.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if config.tree_core not in TREE_CORES:
        raise EngineStartError(f"unknown tree core {config.tree_core!r}; choose one of {', '.join(TREE_CORES)}")
    if config.page_size < 1:
        raise EngineStartError(f"page size must be >= 1, got {config.page_size}")
    cores = len(os.sched_getaffinity(0))
    if not 1 <= config.tp_size <= cores:
        raise EngineStartError(f"--tp {config.tp_size}: the CPU engine gives each rank at least one core, and this process may use {cores}")
    if config.attn_dp_size < 1 or config.tp_size % config.attn_dp_size:
        raise EngineStartError(
            f"--attn-dp {config.attn_dp_size} must divide --tp {config.tp_size} (each attention group is tp / attn-dp ranks)"
        )
    if config.attn_dp_size > 1 and config.verify != "off":
        raise EngineStartError(
            "T2 verification runs one reference forward on every rank together, which attention DP's groups (each with its "
            "own requests) cannot; add --verify off"
        )
    if config.strategy == "extra_buffer_lazy" and not config.overlap:
        raise EngineStartError("extra_buffer_lazy needs overlap scheduling (sglang refuses it otherwise); drop --no-overlap")
    if config.fault is not None:
        from .faults import FaultError, get_fault

        try:
            fault = get_fault(config.fault)
        except FaultError as exc:
            raise EngineStartError(str(exc)) from None
        if "mixed-chunk" in fault.requires and not config.mixed_chunk:
            raise EngineStartError(f"fault {fault.name} lives in mixed prefill/decode batches; add --mixed-chunk")
        if "tp" in fault.requires and config.tp_size < 2:
            raise EngineStartError(f"fault {fault.name} desynchronises one tensor-parallel rank from the others; add --tp 2")
        if config.model not in fault.families:
            raise EngineStartError(f"fault {fault.name} exists in {', '.join(fault.families)}, not {config.model}; adjust --model")
        if config.strategy not in fault.strategies or (fault.page_sizes and config.page_size not in fault.page_sizes):
            sizes = f" with page size {', '.join(map(str, fault.page_sizes))}" if fault.page_sizes else ""
            raise EngineStartError(f"fault {fault.name} exists under {', '.join(fault.strategies)}{sizes}; adjust --strategy / --page-size")
        if why := fault.real_in(installed_release()):  # the unpatched engine has it already: nothing to inject
            raise EngineStartError(f"fault {fault.name} proves nothing here: {why}; run the demo without --fault to see it")
    if config.self_check and config.inspector_port is None:
        raise EngineStartError("--self-check verifies the hooks' capture; it needs the hooks (drop --no-hooks)")
    if config.verify not in VERIFY_MODES:
        raise EngineStartError(f"unknown --verify {config.verify!r}; choose one of {', '.join(VERIFY_MODES)}")
    if config.inspector_port is not None:
        try:  # what the plugin will read in the engine's processes: refuse now, not in their log
            HooksConfig.from_env(os.environ | {PORT_ENV: str(config.inspector_port)})
        except ConfigError as exc:
            raise EngineStartError(str(exc)) from None
        for rank in range(config.tp_size):  # each rank's request and stream ports
            ensure_port_free(config.inspector_port + PORTS_PER_PROCESS * rank)
            ensure_port_free(config.inspector_port + PORTS_PER_PROCESS * rank + 1)


def cpu_binding(ranks: int) -> str:
    """SGLANG_CPU_OMP_THREADS_BIND for `ranks` ranks: this process's cores split evenly, e.g.
    "0|1" for two ranks on two cores, "0-3|4-7" on eight."""
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // ranks
    groups = [cores[i * share : (i + 1) * share] for i in range(ranks)]
    return "|".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)


def ensure_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Raise EngineStartError if `host:port` cannot be bound right now."""
    if not 1 <= port <= 65535:
        raise EngineStartError(f"port {port} is out of range 1-65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise EngineStartError(f"port {port} on {host} is in use ({exc.strerror}); pick another with --port") from None


def _strategy_argument() -> str:
    from sglang.srt.server_args import ServerArgs

    from ..generations import strategy_field  # imports torch: not when the CLI starts

    return strategy_field(ServerArgs)


def engine_kwargs(config: EmbeddedEngineConfig, model_path: str) -> dict[str, Any]:
    """sglang.Engine keyword arguments for `config`."""
    return dict(
        model_path=model_path,
        device="cpu",
        skip_tokenizer_init=True,  # token ids in and out: the tiny model has no tokenizer
        load_format="safetensors",
        random_seed=config.seed,
        max_total_tokens=config.max_total_tokens,
        max_mamba_cache_size=config.mamba_slots,
        max_running_requests=config.max_running_requests,
        chunked_prefill_size=config.chunked_prefill_size,
        mamba_track_interval=config.track_interval,
        **{_strategy_argument(): config.strategy},
        page_size=config.page_size,
        disable_overlap_schedule=not config.effective_overlap,
        disable_radix_cache=not config.radix_cache,
        disable_cuda_graph=True,
        enable_mixed_chunk=config.mixed_chunk,
        tp_size=config.tp_size,
        **({"attn_dp_size": config.attn_dp_size} if config.attn_dp_size > 1 else {}),  # 0.5.22 lacks the argument
        log_level=config.log_level,
        # sglang's default handler SIGKILLs this whole process tree when a child fails;
        # raising instead lets the caller clean up and report in one line.
        custom_sigquit_handler=_raise_engine_died,
    )


_ENGINE_DIED = "an sglang engine process failed; its traceback is in the log above"
_died = threading.Event()


def _raise_engine_died(signum: int, frame: Any) -> None:
    """Raise EngineDied in the main thread. Waiting for the engine's output, the main thread
    runs the tokenizer manager's event loop, which would log and swallow an exception raised in
    one of its callbacks: the loop is stopped instead, and `generate` raises EngineDied."""
    _died.set()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise EngineDied(_ENGINE_DIED) from None
    loop.stop()


def _generate_raising_engine_died(engine: Any) -> None:
    generate = engine.generate

    def generate_or_died(*args: Any, **kwargs: Any) -> Any:
        try:
            return generate(*args, **kwargs)
        except RuntimeError:  # the loop stopped by _raise_engine_died
            if _died.is_set():
                raise EngineDied(_ENGINE_DIED) from None
            raise

    engine.generate = generate_or_died


def prepare_engine_environment(config: EmbeddedEngineConfig) -> Path:
    """Validate `config`, set the environment the engine's processes read (the CPU patches,
    the hooks' port, fault and verifier settings) and return the tiny model's directory."""
    validate(config)
    os.environ[patches.ENV_FLAG] = "1"  # reaches the scheduler processes sglang spawns
    os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = config.tree_core
    # Set or cleared: a process that starts engines one after another (differential runs)
    # must not hand the previous engine's port or fault to the next one's processes.
    _set_env(PORT_ENV, str(config.inspector_port) if config.inspector_port is not None else None)
    _set_env("MCINSPECT_SELF_CHECK", "1" if config.self_check else None)
    _set_env("MCINSPECT_FAULT", config.fault)
    if config.tp_size > 1:  # sglang's CPU backend asks for each rank's cores when ranks outnumber NUMA nodes
        os.environ.setdefault("SGLANG_CPU_OMP_THREADS_BIND", cpu_binding(config.tp_size))
    os.environ[VERIFY_ENV] = config.verify
    os.environ.setdefault(VERIFY_SHARE_ENV, str(config.verify_share))
    os.environ.setdefault(VERIFY_RATE_ENV, str(config.verify_rate))
    patches.install()  # before the first sglang import in this process
    return ensure_tiny_model(config.model)


def start_engine(config: EmbeddedEngineConfig) -> Any:
    """Start and return a sglang.Engine; raise EngineStartError with sglang's reason."""
    model_path = prepare_engine_environment(config)
    if config.inspector_port is not None:
        from ..generations import plugin_refusal

        if refusal := plugin_refusal():  # before 0.5.11 without the stand-in: no engine log, no port would say so
            raise EngineStartError(refusal)
    import sglang
    from sglang.srt.utils import kill_process_tree

    logging.getLogger("sglang.srt.entrypoints.engine").addFilter(_DropSigquitNotice())
    ours = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    os.environ[patches.LAUNCHER_PID_ENV] = str(os.getpid())  # its children leave stop signals to it
    try:
        engine = sglang.Engine(**engine_kwargs(config, str(model_path)))
        _keep_signals(engine, ours)
        _generate_raising_engine_died(engine)
        return engine
    except BaseException as exc:
        kill_process_tree(os.getpid(), include_parent=False)  # no half-started engine left behind
        if isinstance(exc, (AssertionError, ValueError)):
            raise EngineStartError(f"sglang refused the configuration: {_first_line(exc)}") from exc
        if isinstance(exc, RuntimeError):
            raise EngineStartError(f"the engine failed to start: {_first_line(exc)}") from exc
        raise


def _keep_signals(engine: Any, ours: dict[int, Any]) -> None:
    """sglang's tokenizer manager takes SIGTERM and SIGQUIT over in its event loop when it makes
    the loop, at the first request from the main thread (drain and exit; SIGKILL its own process
    tree). The caller's handlers stay in charge instead: the CLI stops with one line and shuts
    the engine down itself, and a failed child still raises EngineDied."""
    manager = engine.tokenizer_manager
    make_loop = manager.auto_create_handle_loop

    def make_loop_keeping_signals() -> None:
        taken = manager.event_loop is None and threading.current_thread() is threading.main_thread()
        make_loop()
        if taken:
            loop = manager.event_loop
            for signum in (signal.SIGTERM, signal.SIGQUIT):
                loop.remove_signal_handler(signum)
            for signum, handler in ours.items():
                signal.signal(signum, handler)
            signal.signal(signal.SIGQUIT, _raise_engine_died)
            _wake_on_signals(loop)

    manager.auto_create_handle_loop = make_loop_keeping_signals


_wakeup: list[socket.socket] = []
"""The socket pair of `_wake_on_signals` (kept open for the process)."""


def _wake_on_signals(loop: Any) -> None:
    """A Python signal handler runs when the main thread runs Python again: blocked in the
    loop's select (waiting for the engine's next output) it would wait for ever if the engine
    died. A signal writes to this socket, which wakes the loop, and the handler runs."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    loop.add_reader(reader.fileno(), lambda: reader.recv(4096))
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    _wakeup[:] = [reader, writer]


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _DropSigquitNotice(logging.Filter):
    """sglang logs its use of our SIGQUIT handler at error level; it is not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Using custom SIGQUIT handler")
