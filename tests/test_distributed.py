"""torch.distributed on "tpu" (issue 21): the c10d backend "tpu" under torchrun.

One torchrun launch of tests/_dist_worker.py runs every check of a group (a
launch costs seconds); each test here reads one check's outcome from every
rank. Collectives are compared with the same collective on CPU tensors under
gloo, in the same process group ("cpu:gloo,tpu:tpu").
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "_dist_worker.py"
DTYPES = ("f32", "bf16", "i64")


def torchrun(
    tmp: Path, nproc: int, groups: str, timeout: float = 240, extra: list[str] | None = None
) -> dict:
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="1", OMP_NUM_THREADS="1", TORCH_TPU_CACHE_DIR="0")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           *(extra or []), str(WORKER), str(tmp), groups]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    ranks = {}
    for r in range(nproc):
        path = tmp / f"rank{r}.json"
        if path.exists():
            ranks[r] = json.loads(path.read_text())
    assert len(ranks) == nproc, (
        f"torchrun exit {proc.returncode}; ranks {sorted(ranks)} wrote results\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return ranks


def expect(ranks: dict, name: str) -> None:
    for r, out in ranks.items():
        assert name in out["results"], f"rank {r} never ran {name}"
        assert out["results"][name] == "", f"rank {r}: {name}: {out['results'][name]}"


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> dict:
    ranks = torchrun(tmp_path_factory.mktemp("dist2"), 2, "default_init,collectives,libraries,reinit")
    print("numbers (rank 0):", json.dumps(ranks[0]["numbers"]))
    return ranks


def test_cpu_only_program_default_init(two) -> None:
    """init_process_group() with no backend: CPU tensors on gloo as without torch_tpu."""
    expect(two, "default_init_cpu_allreduce")


def test_default_init_gives_tpu_a_backend(two) -> None:
    expect(two, "default_init_tpu_allreduce")


def test_reinit_after_destroy(two) -> None:
    expect(two, "reinit_after_destroy")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "avg", "min", "max", "product"])
def test_all_reduce(two, op: str, dtype: str) -> None:
    expect(two, f"all_reduce_{op}_{dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "what",
    ["broadcast", "all_gather", "all_gather_into_tensor", "all_gather_coalesced", "reduce_scatter_tensor",
     "all_to_all_single_uneven", "gather_scatter", "send_recv"],
)  # fmt: skip
def test_collective(two, what: str, dtype: str) -> None:
    expect(two, f"{what}_{dtype}")


def test_barrier(two) -> None:
    expect(two, "barrier")


def test_async_work_future(two) -> None:
    expect(two, "async_work_future")


def test_functional_collectives(two) -> None:
    expect(two, "functional_collectives")


@pytest.mark.parametrize("what", ["ddp", "fsdp2", "dtensor", "checkpoint"])
def test_library(two, what: str) -> None:
    """DDP and FSDP2 (10 steps == 1 process, 1e-5), DTensor ops and redistributions, DCP."""
    expect(two, what)


def test_reinit_on_the_same_store(two) -> None:
    expect(two, "reinit_same_store")


def test_numbers(two) -> None:
    expect(two, "bench_all_reduce")


@pytest.fixture(scope="module")
def diffusers_two(tmp_path_factory) -> dict:
    pytest.importorskip("diffusers")
    ranks = torchrun(tmp_path_factory.mktemp("dist_diffusers"), 2, "diffusers")
    print("numbers (rank 0):", json.dumps(ranks[0]["numbers"]))
    return ranks


@pytest.mark.parametrize("what", ["tp", "ulysses", "ring"])
def test_diffusers_enable_parallelism(diffusers_two, what: str) -> None:
    """Tiny FLUX transformer, TP 2 / Ulysses 2 / ring 2 == 1 process within 1e-4."""
    expect(diffusers_two, f"diffusers_{what}")


def test_diffusers_pipeline_tp_compiled(diffusers_two) -> None:
    """The FLUX pipeline, transformer TP over 2 processes, enable_tpu_compile + tpu_warmup:
    the 1-process image within 1e-4; the compiled graph is split at its collectives."""
    expect(diffusers_two, "diffusers_pipeline_tp_compiled")


@pytest.mark.slow
def test_collectives_four_processes(tmp_path) -> None:
    ranks = torchrun(tmp_path, 4, "default_init,collectives,libraries,reinit", timeout=600)
    assert "dtensor_2d" in ranks[0]["results"]
    for name in ranks[0]["results"]:
        if not name.startswith("bench"):
            expect(ranks, name)


# ---- two "hosts" on this machine ---------------------------------------------


@pytest.mark.slow
def test_two_hosts_ddp(tmp_path) -> None:
    """torchrun --nnodes 2 --node-rank i on localhost, 2 processes each: DDP and the rest."""
    port = free_port()
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="1", OMP_NUM_THREADS="1", TORCH_TPU_CACHE_DIR="0")
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                f"--node-rank={i}",
                "--nproc-per-node=2",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}",
                str(WORKER),
                str(tmp_path),
                "libraries",
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    logs = [p.communicate(timeout=600)[0] for p in nodes]
    ranks = {
        r: json.loads((tmp_path / f"rank{r}.json").read_text())
        for r in range(4)
        if (tmp_path / f"rank{r}.json").exists()
    }
    assert len(ranks) == 4, "\n".join(log[-3000:] for log in logs)
    for name in ("ddp", "fsdp2", "dtensor", "dtensor_2d", "checkpoint"):
        expect(ranks, name)


# ---- failures: an error on every surviving rank, never a hang ----------------

FAIL = ROOT / "tests" / "_dist_fail.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_failing(mode: str, world: int = 2) -> list[tuple[int, str]]:
    port = free_port()
    procs = []
    for r in range(1 if mode == "missing" else world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), TORCH_TPU_NUM_DEVICES="1", OMP_NUM_THREADS="1")  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(FAIL), mode], env=env, cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=60)  # the process group's timeout is 10 s
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{mode}: a rank hung past 60 s")
        out.append((p.returncode, stdout + stderr[-2000:]))
    return out


def test_mismatched_shapes_raise_on_every_rank() -> None:
    results = launch_failing("mismatch")
    for rank, (code, text) in enumerate(results):
        assert code == 3, f"rank {rank} exit {code}: {text}"
        assert "all_reduce on tpu: the ranks' shapes or dtypes differ" in text and "Float[4]" in text, text
        assert "Float[5]" in text, text


def test_killed_rank_is_an_error_on_the_survivor() -> None:
    (code, text), (killed, _) = launch_failing("kill")
    assert killed == 9
    assert code == 3 and "ERROR" in text, text


def test_missing_rank_is_an_error_within_the_timeout() -> None:
    ((code, text),) = launch_failing("missing")
    assert code == 3 and "ERROR" in text and "1/2 clients joined" in text, text


@pytest.mark.slow
def test_readme_torchrun_example(tmp_path) -> None:
    """README's torchrun block (```python torchrun), as the README says to run it."""
    import re

    text = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"^```python torchrun\n(.*?)^```", text, flags=re.S | re.M)
    script = tmp_path / "tp.py"
    script.write_text(block)
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="1", OMP_NUM_THREADS="1", TORCH_TPU_CACHE_DIR="0")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.endswith("tpu:0")]
    assert sorted(line.split()[0] for line in lines) == ["0", "1"], proc.stdout
