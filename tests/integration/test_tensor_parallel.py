"""Several ranks of the real engine on this CPU.

- `mcinspect demo --tp 2`: each rank's hooks on their own ports, `mcinspect info` lists both, the
  demo's recording holds both ranks and `mcinspect check` reads it clean (ranks compared: check
  tp-agree); `check PORT` live follows both, `snapshot --rank 1` and `render --rank 1` pick rank 1.
- Multi-node TP: two `python -m sglang.launch_server` processes of one engine (`--nnodes 2`), one
  rank each, their hooks bound on two addresses with a token: 127.0.0.1 and 127.0.0.2 (two hosts
  to ZMQ and to mcinspect), and off loopback 10.231.0.1 and 10.231.0.2, rank 1's node in a network
  namespace of its own joined by a veth pair, with a /dev/shm of its own (needs root and `ip`). `info`, `record` and `check`
  reach both by listing both HOST:PORTs, and one address alone names the missing rank.
- Attention DP (`demo --tp 2 --attn-dp 2`): both ranks discovered at PORT and PORT + 2 and
  checked; each schedules its own requests, so tp-agree compares none.

The fault that desynchronises one rank (tp-desync) is in test_faults_caught, in CI: its run shows
the ranks agreeing before the fault acts, both ranks listed and recorded, and tp-agree catching
the drift. These run with MCINSPECT_TP_TESTS=1 (CI's time budget)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from mcinspect.recording import RecordingReader
from mcinspect.schema import Delta, Snapshot
from mcinspect_engine_hooks.cpu_engine.tiny_model import ensure_tiny_model
from mcinspect_engine_hooks.cpu_engine.workload import Workload

from engine_runs import MCINSPECT, free_port_pair, free_ports_for_ranks, opt_in, tagged_env, tagged_processes

pytestmark = [
    pytest.mark.slow,
    opt_in("MCINSPECT_TP_TESTS"),
]

SECOND_HOST = "127.0.0.2"
"""Another address of this machine: rank 1's node in the multi-node run."""
TOKEN = "two-nodes"
NETNS = "mcinspect-nodes"
VETH = ("mci-root", "mci-node")
OFF_LOOPBACK = ("10.231.0.1", "10.231.0.2")
"""The veth pair's addresses: this namespace's end, and the node namespace's."""


@dataclass(frozen=True)
class Hosts:
    """Where the two nodes of the multi-node run live."""

    addresses: tuple[str, str]
    node1_prefix: tuple[str, ...] = ()
    """Runs node 1's command (in its network namespace)."""
    gloo_ifnames: tuple[str, str] | None = None
    """GLOO_SOCKET_IFNAME per node: the host name resolves to loopback, which the namespaces do not share."""


@contextlib.contextmanager
def _node_namespace() -> Iterator[Hosts]:
    """A network namespace for node 1, joined to this one by a veth pair (10.231.0.1 <-> .2)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a network namespace needs root and iproute2's `ip`")
    run = functools.partial(subprocess.run, check=True, capture_output=True)
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)  # a previous run's, if any
    run(["ip", "netns", "add", NETNS])
    try:
        run(["ip", "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1]])
        run(["ip", "link", "set", VETH[1], "netns", NETNS])
        run(["ip", "addr", "add", f"{OFF_LOOPBACK[0]}/24", "dev", VETH[0]])
        run(["ip", "link", "set", VETH[0], "up"])
        inside = ["ip", "netns", "exec", NETNS]
        run([*inside, "ip", "addr", "add", f"{OFF_LOOPBACK[1]}/24", "dev", VETH[1]])
        run([*inside, "ip", "link", "set", VETH[1], "up"])
        run([*inside, "ip", "link", "set", "lo", "up"])
        # A /dev/shm of its own too: sglang takes ranks that share one for a node's (shared-memory
        # broadcast on 127.0.0.1), which a host of its own does not.
        private_shm = ("sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$0" "$@"')
        yield Hosts(OFF_LOOPBACK, (*inside, *private_shm), VETH)
    finally:
        subprocess.run(["ip", "link", "del", VETH[0]], capture_output=True)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)


def frame_step(frame: Snapshot | Delta) -> int:
    return frame.state.step if isinstance(frame, Snapshot) else frame.step


def mcinspect(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MCINSPECT, *args], capture_output=True, text=True, timeout=timeout)


def common_steps(recording: Path) -> set[int]:
    rank1 = recording.with_name(f"{recording.stem}.rank1{recording.suffix}")
    steps = [{frame_step(f) for f in RecordingReader(path)} for path in (recording, rank1)]
    return steps[0] & steps[1]


def test_two_ranks_are_listed_recorded_checked_and_picked(tmp_path: Path) -> None:
    port, http_port, recording = free_ports_for_ranks(2), free_port_pair(), tmp_path / "tp.mcrec"
    env, tag = tagged_env()
    demo = subprocess.Popen(
        [MCINSPECT, "demo", "--tp", "2", "--json", "--serve", "--requests", "24", "--port", str(port), "--record", str(recording),
         "--http-port", str(http_port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        summary = json.loads(demo.stdout.readline())  # --serve prints the summary, then serves
        assert summary["tp_size"] == 2 and summary["stats"]["hook_errors"] == 0 and summary["rank_ports"] == [port, port + 2]
        info = mcinspect("info", str(port), "--json")
        assert info.returncode == 0, info.stderr
        ranks = [json.loads(line) for line in info.stdout.splitlines()]
        assert [(r["rank"], r["info"]["tp_rank"], r["info"]["request_port"], r["info"]["world_size"]) for r in ranks] == [
            (0, 0, port, 2),
            (1, 1, port + 2, 2),
        ]
        assert ranks[0]["info"]["mamba_pool_size"] == ranks[1]["info"]["mamba_pool_size"] > 0
        live = subprocess.Popen(
            [MCINSPECT, "check", str(port), "--steps", "10", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(3)  # both ranks subscribed
        assert _send_workload(f"http://127.0.0.1:{http_port}", 8) > 0
        out, err = live.communicate(timeout=120)
        assert live.returncode == 0 and out.strip() == "", out[-3000:] + err[-3000:]  # both ranks, 10 steps, tp-agree: clean
        snapshots = [json.loads(mcinspect("snapshot", str(port), "--rank", str(r)).stdout)["state"] for r in (0, 1)]
        assert snapshots[0]["slots"] == snapshots[1]["slots"] and snapshots[0]["requests"] == snapshots[1]["requests"]
        assert {k: v for k, v in snapshots[1]["contents"].items()} != {k: v for k, v in snapshots[0]["contents"].items()}  # shards
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=120)
    assert tagged_processes(tag) == []
    assert recording.exists() and recording.with_name("tp.rank1.mcrec").exists()
    check = mcinspect("check", str(recording), "--json", "--ungrouped", timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert len(common_steps(recording)) > 20  # tp-agree compared the ranks at every common step
    drawn = mcinspect("render", str(recording), "--rank", "1", "--format", "dot", "-o", str(tmp_path / "rank1.dot"))
    assert drawn.returncode == 0 and "tp.rank1.mcrec" in drawn.stderr, drawn.stderr


def _node(node: int, hosts: Hosts, port: int, dist_port: int, http_port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    """One node of a two-node TP engine: sglang's server with its one rank (node 0 serves HTTP)."""
    host = hosts.addresses[node]
    command = [
        *(hosts.node1_prefix if node == 1 else ()), sys.executable, "-m", "sglang.launch_server", "--model-path", str(ensure_tiny_model("qwen3-next")), "--device", "cpu",
        "--skip-tokenizer-init", "--load-format", "safetensors", "--max-total-tokens", "4096", "--max-mamba-cache-size", "32",
        "--mamba-radix-cache-strategy", "extra_buffer", "--page-size", "16", "--tp", "2", "--nnodes", "2", "--node-rank", str(node),
        "--dist-init-addr", f"{hosts.addresses[0]}:{dist_port}", "--host", host, "--port", str(http_port),
    ]  # fmt: skip
    node_env = env | {
        "MCINSPECT_CPU_ENGINE": "1",
        "MCINSPECT_PORT": str(port),
        "MCINSPECT_HOST": host,
        "MCINSPECT_TOKEN": TOKEN,
        "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "python",
        "SGLANG_CPU_OMP_THREADS_BIND": str(node),  # each node's one rank on a core of its own
        "SGLANG_HOST_IP": host,  # the address its TP broadcast queue gives the other node (else the default route's)
    }
    if hosts.gloo_ifnames is not None:
        node_env["GLOO_SOCKET_IFNAME"] = hosts.gloo_ifnames[node]
    return subprocess.Popen(command, env=node_env, text=True, start_new_session=True)


@pytest.fixture(params=["two-addresses", "off-loopback"])
def hosts(request: pytest.FixtureRequest) -> Iterator[Hosts]:
    if request.param == "two-addresses":
        yield Hosts(("127.0.0.1", SECOND_HOST))
        return
    with _node_namespace() as hosts:
        yield hosts


@pytest.fixture
def two_nodes(hosts: Hosts) -> Iterator[tuple[int, str, Hosts]]:
    """A TP 2 engine over two hosts; yields the hooks' base port, node 0's URL and the hosts."""
    port, dist_port, http_port = free_ports_for_ranks(2), free_port_pair(), free_port_pair()
    env, tag = tagged_env()
    nodes = [_node(node, hosts, port, dist_port, http_port, env) for node in (0, 1)]
    url = f"http://{hosts.addresses[0]}:{http_port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert all(node.poll() is None for node in nodes), "a node exited during start-up (its log is in the output)"
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "node 0 did not become healthy"
            time.sleep(1)
        yield port, url, hosts
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
        for pid in tagged_processes(tag):
            os.kill(int(pid.split()[0]), signal.SIGKILL)


def _send_workload(url: str, requests_total: int) -> int:
    workload, cached = Workload(seed=0, total_requests=requests_total), 0
    for wave in workload.waves():
        body = {
            "input_ids": [spec.input_ids for spec in wave],
            "sampling_params": [{"max_new_tokens": spec.max_new_tokens, "temperature": 0.0, "ignore_eos": True} for spec in wave],
        }
        outputs = requests.post(f"{url}/generate", json=body, timeout=300).json()
        workload.record(wave, [out["output_ids"] for out in outputs])
        cached += sum(int(out["meta_info"]["cached_tokens"]) for out in outputs)
    return cached


def test_ranks_on_two_hosts_are_reached_by_listing_both(two_nodes: tuple[int, str, Hosts], tmp_path: Path) -> None:
    port, url, hosts = two_nodes
    first, second = hosts.addresses
    both = f"{first}:{port},{second}:{port}"
    info = mcinspect("info", both, "--token", TOKEN, "--json")
    assert info.returncode == 0, info.stderr
    ranks = [json.loads(line) for line in info.stdout.splitlines()]
    assert [(r["rank"], r["address"]["host"], r["address"]["port"]) for r in ranks] == [(0, first, port), (1, second, port + 2)]
    alone = mcinspect("info", f"{first}:{port}", "--token", TOKEN, "--timeout", "2")
    assert alone.returncode == 2 and f"rank 1 of 2 (tp1) answers at none of {first}:{port + 2}" in alone.stderr
    assert "list each node's HOST:PORT" in alone.stderr and len(alone.stderr.strip().splitlines()) == 1
    keyless = mcinspect("info", both, "--timeout", "2")
    assert keyless.returncode == 2 and len(keyless.stderr.strip().splitlines()) == 1  # the token keys both sockets

    recording = tmp_path / "nodes.mcrec"
    recorder = subprocess.Popen([MCINSPECT, "record", both, "--token", TOKEN, "-o", str(recording)], stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # both ranks subscribed
        assert _send_workload(url, 16) > 0
        time.sleep(1)
    finally:
        recorder.send_signal(signal.SIGINT)
        _, err = recorder.communicate(timeout=60)
    assert recording.exists() and recording.with_name("nodes.rank1.mcrec").exists(), err
    assert [RecordingReader(path).info.request_port for path in (recording, recording.with_name("nodes.rank1.mcrec"))] == [port, port + 2]
    check = mcinspect("check", str(recording), "--json", "--ungrouped", timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert len(common_steps(recording)) > 20


def test_attention_dp_groups_are_discovered_and_checked(tmp_path: Path) -> None:
    port, recording = free_ports_for_ranks(2), tmp_path / "dp.mcrec"
    env, tag = tagged_env()
    done = subprocess.run(
        [MCINSPECT, "demo", "--tp", "2", "--attn-dp", "2", "--json", "--requests", "24", "--port", str(port), "--record", str(recording)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["rank_ports"] == [port, port + 2] and summary["stats"]["hook_errors"] == 0 and summary["requests_with_hits"] > 0
    assert tagged_processes(tag) == []
    infos = [RecordingReader(path).info for path in (recording, recording.with_name("dp.rank1.mcrec"))]
    assert [(i.rank, i.tp_rank, i.dp_rank, i.attn_dp_size) for i in infos] == [(0, 0, 0, 2), (1, 1, 1, 2)]
    check = mcinspect("check", str(recording), "--json", "--ungrouped", timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
