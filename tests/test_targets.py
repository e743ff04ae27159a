"""Compile-only targets and shadow compilation (torch_tpu/targets.py, csrc/pjrt/target.c,
csrc/cache/shadow.c). The libtpu tests compile for real TPU chips with no TPU attached; where
libtpu cannot load they skip with the reason. The fake-plugin tests need only `make ctest`'s
build/tests/fake_pjrt_plugin.so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import torch_tpu
from tests.conftest import devices_env
from torch_tpu import _discovery, targets

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "build" / "tests" / "fake_pjrt_plugin.so"


def _libtpu_reason() -> str | None:
    path = _discovery.libtpu_path()
    if not path:
        return "libtpu is not installed (pip install libtpu)"
    try:
        targets.Target("v6e:1x1")
    except RuntimeError as e:
        return f"libtpu cannot make a v6e:1x1 topology here: {str(e).splitlines()[0][:160]}"
    return None


_REASON = _libtpu_reason()
needs_libtpu = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
needs_fake = pytest.mark.skipif(not FAKE.exists(), reason=f"{FAKE} is built by `make ctest`")

_T = "tensor<1024x1024xbf16>"
MATMUL = (
    "module @mm {\n"
    f"  func.func public @main(%a: {_T}, %b: {_T}) -> ({_T}) {{\n"
    '    %c = "stablehlo.dot_general"(%a, %b) {dot_dimension_numbers = #stablehlo.dot<'
    "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} "
    f": ({_T}, {_T}) -> {_T}\n"
    f'    "func.return"(%c) : ({_T}) -> ()\n'
    "  }\n"
    "}\n"
)


@pytest.fixture
def no_target():
    yield
    torch_tpu.set_target(None)


@needs_libtpu
def test_v6e_compile_reads_estimate_and_memory():
    t = targets.Target("v6e:1x1")
    assert t.info["platform_name"] == "tpu" and t.info["device_kind"] == "TPU v6 lite"
    assert t.info["num_devices"] == 1 and t.chip is not None and t.chip.name == "v6e"
    r = t.compile(MATMUL)
    assert r["flops"] == pytest.approx(2 * 1024**3, rel=1e-3)  # the compiler counts 2 MNK
    assert r["estimated_seconds"] is not None and 0 < r["estimated_seconds"] < 1e-3
    assert r["memory"]["argument_bytes"] == 2 * 1024 * 1024 * 2  # two bf16 1024x1024 arguments
    assert r["memory"]["output_bytes"] == 1024 * 1024 * 2
    assert r["bytes_accessed"] >= 3 * 1024 * 1024 * 2
    assert len(r["fingerprint"]) > 16 and r["serialized_bytes"] > 0
    # the same program on a slower chip: a longer estimate from the same flops
    v5e = targets.Target("v5e:1x1").compile(MATMUL)
    assert v5e["flops"] == r["flops"] and v5e["estimated_seconds"] > r["estimated_seconds"]


@needs_libtpu
def test_unknown_topology_is_the_plugins_error():
    with pytest.raises(RuntimeError, match="v7x:2x2x1"):
        targets.Target("v7x:2x2x1")


@needs_libtpu
def test_shadow_strict_eager_records_every_program(no_target):
    torch_tpu.set_target("v6e:1x1")
    assert torch_tpu._C._lowering_platform() == "tpu"  # lowering asks the target
    x = torch.randn(128, 256, device="tpu", dtype=torch.bfloat16)
    w = torch.randn(256, 64, device="tpu", dtype=torch.bfloat16)
    for _ in range(3):
        y = torch.nn.functional.gelu(x @ w)
    torch.tpu.synchronize()
    assert y.shape == (128, 64)
    report = torch_tpu.target_report()
    by_label = {p["label"]: p for p in report.programs}
    assert "aten::mm" in by_label and "aten::gelu" in by_label, list(by_label)
    mm = by_label["aten::mm"]
    assert mm["error"] is None and mm["runs"] == 3
    assert mm["flops"] == pytest.approx(2 * 128 * 256 * 64, rel=1e-2)  # plus a convert
    assert mm["estimated_seconds"] and mm["memory"]["argument_bytes"] >= (128 * 256 + 256 * 64) * 2
    assert not report.failed
    assert report.estimated_device_seconds >= 3 * mm["estimated_seconds"]
    text = str(report)
    assert "v6e:1x1" in text and "estimate" in text and "of 32 GiB HBM" in text


@needs_fake
def test_shadow_refusal_names_the_op_and_estimates_are_not_summed(no_target):
    """The fake target refuses FFT and gives no estimate for while loops (as libtpu does)."""
    torch_tpu.set_target("fake:1x1", plugin=str(FAKE))
    assert torch_tpu.get_target()["device_kind"] == "Fake TPU"
    x = torch.randn(64, device="tpu")
    y = torch.fft.rfft(x)  # runs on this process's plugin; the target refuses it
    z = x + 1
    torch.tpu.synchronize()
    assert y.shape == (33,) and torch.allclose(z.cpu(), x.cpu() + 1)
    report = torch_tpu.target_report()
    failed = {p["label"]: p["error"] for p in report.failed}
    assert "aten::_fft_r2c" in failed and "FFT is not supported" in failed["aten::_fft_r2c"]
    assert "compiling for target fake:1x1 (Fake TPU)" in failed["aten::_fft_r2c"]
    reasons = report.failures_by_reason()
    assert any("FFT is not supported" in r for r in reasons), reasons
    add = next(p for p in report.compiled if p["label"].startswith("aten::add"))
    assert add["runs"] == 1 and add["estimated_seconds"] and add["memory"]["argument_bytes"] == 4096
    # a record with no estimate adds nothing to the sum
    fake = [{**add, "estimated_seconds": None, "runs": 5}]
    assert targets.TargetReport(report.target, fake).estimated_device_seconds == 0
    assert targets.TargetReport(report.target, fake).runs_without_estimate == 5


@pytest.mark.slow  # keeps make test under 25 minutes; `pytest -m slow` runs it
@needs_fake
def test_shadow_records_persist_with_the_target_in_the_key(tmp_path):
    """A second process finds the target's figures in the persistent cache; another target
    (another key) compiles afresh."""
    script = (
        "import torch, torch_tpu\n"
        "x = torch.arange(8.0, device='tpu')\n"
        "(x * 3).sum().item()\n"
        "r = torch_tpu.target_report()\n"
        "print('CACHED', sum(p['from_cache'] for p in r.programs), len(r.programs))\n"
    )
    env = {
        **os.environ,
        "TORCH_TPU_CACHE_DIR": str(tmp_path),
        "TORCH_TPU_TARGET_PLUGIN": str(FAKE),
    }

    def run(topology: str) -> tuple[int, int]:
        out = subprocess.run(
            [sys.executable, "-c", script],
            env={**env, "TORCH_TPU_TARGET": topology},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith("CACHED"))
        cached, total = map(int, line.split()[1:])
        return cached, total

    first = run("fake:1x1")
    assert first[0] == 0 and first[1] >= 2
    assert list(tmp_path.glob("*.tpuest"))
    assert run("fake:1x1") == (first[1], first[1])
    assert run("fake:2x2")[0] == 0


@needs_libtpu
def test_info_with_libtpu_and_no_tpu_is_one_line_within_10s():
    if _discovery.has_tpu_chips():
        pytest.skip("a TPU is attached: info runs on it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_")}
    env["TORCH_TPU_PJRT_PLUGIN"] = _discovery.libtpu_path() or ""
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "torch_tpu", "info"], env=env, capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - start
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "no TPU is attached" in lines[0] and "v6e:1x1" in lines[0], out.stdout
    assert took < 10, f"took {took:.1f} s"
    # running there fails with one line that names what is missing
    run = subprocess.run(
        [sys.executable, "-c", "import torch, torch_tpu; torch.ones(2, device='tpu')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0 and "no TPU chip is attached" in run.stderr.strip().splitlines()[-1]


@needs_fake
def test_refuse_stops_what_the_target_cannot_compile():
    """TORCH_TPU_TARGET_REFUSE=1: the refused program never runs; the error names the op, its
    dtype, the target and the compiler's words. What the target compiles still runs."""
    script = (
        "import torch, torch_tpu\n"
        "x = torch.randn(64, device='tpu')\n"
        "assert torch.allclose((x + 1).cpu(), x.cpu() + 1)\n"
        "try:\n"
        "    torch.fft.rfft(x).cpu()\n"
        "except RuntimeError as e:\n"
        "    print('REFUSED', str(e).splitlines()[0])\n"
    )
    env = {
        **os.environ,
        "TORCH_TPU_TARGET": "fake:1x1",
        "TORCH_TPU_TARGET_PLUGIN": str(FAKE),
        "TORCH_TPU_TARGET_REFUSE": "1",
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("REFUSED"))
    assert "_fft_r2c" in line and "refused before it runs" in line, line
    assert "at dtype Float" in line, line  # the op, the dtype and the chip: all named
    assert "fake:1x1 (Fake TPU)" in line and "FFT is not supported" in line, line


def _tp_figures(tmp_path: Path, *flags: str) -> dict:
    env = {**os.environ, **devices_env(4), "PYTHONPATH": str(ROOT), "TORCH_TPU_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "targets_flux_tp.py"), "--json", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # keeps make test under 25 minutes; `pytest -m slow` runs it
@needs_libtpu
def test_tiny_flux_tp_over_v5e_2x2_per_chip_arguments_within_the_share(tmp_path):
    """TP over 4 v5e chips, at tile-aligned widths: the compiler's per-chip argument bytes stay
    within 1/4 of the sharded parameters + the replicated ones + the inputs (1% slack: a few 1-d
    tensors still pad to TPU tiles)."""
    r = _tp_figures(tmp_path, "--aligned")
    assert r["target"] == "v5e:2x2" and r["num_partitions"] == [4] and r["errors"] == [None]
    assert r["sharded"] > r["replicated"]  # the split carries most of the weight
    (arg,) = r["argument_bytes"]
    # a replicated program would hold the whole sharded share on each chip
    assert arg <= 1.01 * r["dense"] < r["sharded"] + r["replicated"]
    assert arg <= r["tiled"]


@needs_libtpu
def test_tiny_flux_tp_from_shapes_alone_over_v5e_2x2(tmp_path):
    """The same TP model on the meta device under TpuBackend(target_only=True): parallelize_module
    records each split on the meta parameters, the trace declares them, and the target compiles
    one program of 4 partitions whose per-chip arguments stay within the share, with nothing
    compiled for this host's plugin."""
    r = _tp_figures(tmp_path, "--aligned", "--meta")
    assert r["num_partitions"] == [4] and r["errors"] == [None]
    assert r["plugin_graph_compiles"] == 0
    (arg,) = r["argument_bytes"]
    assert arg <= 1.01 * r["dense"] < r["sharded"] + r["replicated"]


@needs_libtpu
@pytest.mark.slow
def test_tiny_flux_tp_at_tiny_widths_is_within_the_tile_padded_share(tmp_path):
    """At the tiny model's widths (16-wide heads) tile padding, not the split, sets the per-chip
    bytes (above the dense share); they stay within each chip's pieces padded to TPU tiles."""
    r = _tp_figures(tmp_path)
    assert r["num_partitions"] == [4] and r["errors"] == [None]
    (arg,) = r["argument_bytes"]
    assert r["dense"] < arg <= r["tiled"]


def test_tiled_bytes_pads_to_tpu_tiles():
    assert targets.tiled_bytes([3, 5], 4) == 8 * 128 * 4
    assert targets.tiled_bytes([2, 16, 256], 2) == 2 * 16 * 256 * 2  # already whole tiles
    assert targets.tiled_bytes([1100], 4) == 2048 * 4
    assert targets.tiled_bytes([], 4) == 1024 * 4
