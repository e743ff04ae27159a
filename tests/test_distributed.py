"""torch.distributed on "tpu" (issue 21): the c10d backend "tpu" under torchrun.

One torchrun launch of tests/_dist_worker.py runs every check of a group (a
launch costs seconds); each test here reads one check's outcome from every
rank. Collectives are compared with the same collective on CPU tensors under
gloo, in the same process group ("cpu:gloo,tpu:tpu").
"""

from __future__ import annotations

import json
import os
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


@pytest.mark.parametrize("what", ["tp", "ulysses"])
def test_diffusers_enable_parallelism(diffusers_two, what: str) -> None:
    """Tiny FLUX transformer, TP 2 / Ulysses 2 == 1 process within 1e-4."""
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
