"""Options by name: the plugin's client options (TORCH_TPU_PJRT_OPTIONS) and
XLA's compile options (TpuBackend(**options), TORCH_TPU_XLA_OPTIONS)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import torch_tpu
from torch_tpu import TpuBackend
from torch_tpu.compile import xla_options_spec

from conftest import assert_same


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


def cpu_plugin() -> bool:
    return torch_tpu._C._runtime_info()["platform_name"] == "cpu"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# ---- TORCH_TPU_PJRT_OPTIONS --------------------------------------------------------


def test_pjrt_options_reach_the_plugin() -> None:
    if not cpu_plugin():
        pytest.skip("cpu_device_count is the CPU plugin's option")
    code = "import torch, torch_tpu; print(torch.tpu.device_count())"
    proc = run_python(code, TORCH_TPU_PJRT_OPTIONS="cpu_device_count=3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("preallocate", "TORCH_TPU_PJRT_OPTIONS: 'preallocate' is not name=value"),
        ("memory_fraction=", "TORCH_TPU_PJRT_OPTIONS: option 'memory_fraction' has no value"),
        ("a=1,a=2", "TORCH_TPU_PJRT_OPTIONS: option 'a' is given twice"),
        ("memory_fraction=0.5x", "'0.5x' is not a number (quote it to pass a string)"),
        ("n=99999999999999999999", "99999999999999999999 is out of range for an int64"),
    ],
)
def test_pjrt_options_bad_values(spec: str, message: str) -> None:
    code = """
import torch, torch_tpu
try:
    torch.ones(1, device="tpu")
except RuntimeError as e:
    print("ERROR", e)
"""
    proc = run_python(code, TORCH_TPU_PJRT_OPTIONS=spec)
    assert proc.returncode == 0, proc.stderr
    assert "ERROR" in proc.stdout and message in proc.stdout, proc.stdout


# ---- XLA compile options -----------------------------------------------------------


def test_xla_options_spec() -> None:
    spec = xla_options_spec({"xla_dump_to": "/tmp/d", "xla_cpu_enable_fast_math": True, "xla_x": 0.5})
    assert spec == "xla_cpu_enable_fast_math=True xla_dump_to=/tmp/d xla_x=0.5"
    with pytest.raises(ValueError, match="not an XLA option name"):
        TpuBackend(**{"bad name": 1})
    with pytest.raises(ValueError, match="without blanks"):
        TpuBackend(xla_dump_to="/tmp/with space")
    with pytest.raises(TypeError, match="must be a bool, int, float or str"):
        TpuBackend(xla_dump_to=["/tmp"])


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).to("tpu")


def test_backend_options_change_the_key_and_reach_xla(tmp_path) -> None:
    x = torch.randn(4, 16)
    expected = small_model().cpu()(x)
    model = small_model()
    plain = torch.compile(model, backend=TpuBackend(), dynamic=False)
    assert_same(plain(x.to("tpu")), expected, rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()

    torch_tpu.reset_metrics()
    dump = tmp_path / "dump"
    dumped = torch.compile(model, backend=TpuBackend(xla_dump_to=str(dump)), dynamic=False)
    assert_same(dumped(x.to("tpu")), expected, rtol=1e-4, atol=1e-4)
    # The same graph under other options is another program: compiled, not
    # served from the cache, and the plugin's XLA wrote its dump.
    assert torch_tpu.metrics()["compiles"] >= 1
    assert dump.is_dir() and any(dump.iterdir()), "xla_dump_to did not reach XLA"


def test_backend_unknown_option_is_xlas_error() -> None:
    model = small_model()
    compiled = torch.compile(model, backend=TpuBackend(xla_no_such_option=1), dynamic=False)
    with pytest.raises(Exception, match="xla_no_such_option") as info:
        compiled(torch.randn(4, 16, device="tpu"))
    assert "XLA compile options: xla_no_such_option=1" in str(info.value)
    # The thread is back to the process options: eager ops still compile.
    assert_same(torch.ones(3, device="tpu") * 2, torch.full((3,), 2.0))


def test_xla_options_env(tmp_path) -> None:
    dump = tmp_path / "envdump"
    code = """
import torch, torch_tpu
print((torch.ones(3, device="tpu") + 1).cpu().tolist())
"""
    proc = run_python(code, TORCH_TPU_XLA_OPTIONS=f"--xla_dump_to={dump}", TORCH_TPU_CACHE_DIR="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2.0, 2.0, 2.0]"
    assert dump.is_dir() and any(dump.iterdir())

    proc = run_python(code, TORCH_TPU_XLA_OPTIONS="xla_dump_to", TORCH_TPU_CACHE_DIR="0")
    assert proc.returncode != 0
    assert "TORCH_TPU_XLA_OPTIONS: 'xla_dump_to' is not name=value" in proc.stderr
