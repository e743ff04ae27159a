"""The executable cache across processes: tier 2 (disk) serves a second
process without a single compile; corrupt entries and unsafe directories are
never trusted, only warned about, and the results stay right.

Each test runs the same small workload (a few ops and a small MLP forward) in
fresh interpreters (``sys.executable -c``) that share a cache directory, and
reads their metrics as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch_tpu
from torch_tpu.metrics import cache_info

WORKLOAD = r"""
import json, time
t0 = time.perf_counter()
import torch
import torch_tpu
torch.ones(1).to("tpu")  # runtime up, nothing compiled yet
t1 = time.perf_counter()
torch.manual_seed(0)
x, w = torch.randn(8, 16), torch.randn(16, 16)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
xt, wt = x.to("tpu"), w.to("tpu")
with torch.no_grad():
    got = {
        "affine": (xt * 2 + 1).cpu(),
        "matmul": (xt @ wt).relu().sum(dim=1).cpu(),
        "softmax": torch.softmax(xt, dim=-1).cpu(),
        "mlp": model.to("tpu")(xt).cpu(),
    }
    want = {
        "affine": x * 2 + 1,
        "matmul": (x @ w).relu().sum(dim=1),
        "softmax": torch.softmax(x, dim=-1),
        "mlp": model.cpu()(x),
    }
t2 = time.perf_counter()
bad = [k for k in want if not torch.allclose(got[k], want[k], rtol=1e-4, atol=1e-4)]
m = torch_tpu.metrics()
print(json.dumps({
    "bad": bad,
    "metrics": m,
    "info": torch_tpu._C._cache_info(),
    "startup_s": t1 - t0,
    "workload_s": t2 - t1,
}))
"""


def run_workload(cache_dir: Path | str, **extra_env: str) -> tuple[dict, str]:
    """Runs WORKLOAD in a fresh interpreter with |cache_dir|; its JSON and stderr."""
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir))
    env.pop("TORCH_TPU_CACHE_MEMORY_BYTES", None)
    env.pop("TORCH_TPU_DUMP_DIR", None)
    env.update(extra_env)
    proc = subprocess.run(
        [sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"the workload failed:\n{proc.stderr}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["bad"] == [], f"wrong results: {result['bad']}"
    assert result["metrics"]["cpu_fallbacks"] == {}
    return result, proc.stderr


def entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.tpuexe"))


def test_second_process_compiles_nothing(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cold, _ = run_workload(cache_dir)
    n = cold["metrics"]["compiles"]
    assert n > 0
    assert cold["metrics"]["cache_hits_disk"] == 0
    assert cold["metrics"]["cache_disk_writes"] == n
    assert len(entries(cache_dir)) == n
    assert cache_dir.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in entries(cache_dir))
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp")]
    assert cold["info"]["enabled"] and cold["info"]["dir"] == str(cache_dir)
    assert cold["info"]["refused"] is None and cold["info"]["entries"] == n

    warm, _ = run_workload(cache_dir)
    m = warm["metrics"]
    assert m["compiles"] == 0
    assert m["compile_seconds"] == 0
    assert m["cache_hits_disk"] == n
    assert m["cache_hits_memory"] == 0
    assert m["cache_disk_writes"] == 0 and m["cache_disk_rejects"] == 0
    assert m["cache_entries"] == n and m["cache_bytes_memory"] > 0
    print(
        f"\ncold process: startup {cold['startup_s']:.2f} s, workload {cold['workload_s']:.3f} s "
        f"({n} compiles, {cold['metrics']['compile_seconds']:.3f} s compiling); "
        f"warm process: startup {warm['startup_s']:.2f} s, workload {warm['workload_s']:.3f} s "
        f"({n} disk hits)"
    )


def test_corrupt_entries_are_recompiled(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cold, _ = run_workload(cache_dir)
    n = cold["metrics"]["compiles"]
    files = entries(cache_dir)
    assert len(files) == n >= 2
    truncated, flipped = files[0], files[1]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    data = bytearray(flipped.read_bytes())
    for i in range(len(data) - 16, len(data)):
        data[i] ^= 0xA5
    flipped.write_bytes(bytes(data))

    warm, stderr = run_workload(cache_dir)
    m = warm["metrics"]
    assert m["compiles"] == 2
    assert m["cache_disk_rejects"] == 2
    assert m["cache_hits_disk"] == n - 2
    assert m["cache_disk_writes"] == 2
    assert stderr.count("ignoring the executable cache entry") == 2, stderr
    assert truncated.name in stderr and flipped.name in stderr
    assert "truncated" in stderr and "its MAC does not check" in stderr

    # both rewritten: the next process hits everything again
    again, stderr = run_workload(cache_dir)
    assert again["metrics"]["compiles"] == 0
    assert again["metrics"]["cache_hits_disk"] == n
    assert "ignoring" not in stderr


def test_world_writable_directory_is_refused(tmp_path: Path) -> None:
    cache_dir = tmp_path / "shared"
    cache_dir.mkdir()
    cache_dir.chmod(0o777)
    first, stderr = run_workload(cache_dir)
    assert "code that will be executed" in stderr
    assert stderr.count("is not used") == 1
    assert "writable by group and others" in stderr
    assert first["info"]["enabled"] is False
    assert "writable" in first["info"]["refused"]
    assert first["metrics"]["cache_hits_disk"] == 0 and first["metrics"]["cache_disk_writes"] == 0
    assert first["metrics"]["compiles"] > 0
    assert list(cache_dir.iterdir()) == []  # nothing written: nothing for the next process to trust


def test_disabled_with_zero_and_module_dumps(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    result, stderr = run_workload("0", TORCH_TPU_DUMP_DIR=str(dump))
    assert result["info"]["enabled"] is False
    assert result["info"]["dir"] is None
    assert "TORCH_TPU_CACHE_DIR=0" in result["info"]["refused"]
    assert result["metrics"]["cache_disk_writes"] == 0
    assert "is not used" not in stderr
    # every compiled module, as <key hash>.mlir
    dumps = sorted(dump.glob("*.mlir"))
    assert len(dumps) == result["metrics"]["compiles"] > 0
    assert all(p.read_text().startswith("module") for p in dumps)


def test_metrics_and_info_in_process() -> None:
    m = torch_tpu.metrics()
    for key in (
        "cache_hits_memory",
        "cache_hits_disk",
        "cache_bytes_memory",
        "cache_entries",
        "cache_disk_writes",
        "cache_disk_rejects",
        "compile_seconds",
    ):
        assert key in m, key
    report = torch_tpu.metrics_report()
    assert "cache hits on disk" in report and "cache hits in memory" in report
    info = cache_info()
    assert set(info) >= {"dir", "enabled", "refused", "entries", "bytes", "memory_entries", "memory_bytes"}
    assert info["memory_limit_bytes"] > 0
