"""PyTorch's float32 matmul precision reaches XLA: f32 dots and convolutions
carry a precision_config from torch.get_float32_matmul_precision(), read when
the op is recorded and part of every cache key; half types carry none."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import torch_tpu


@pytest.fixture
def precision():
    old = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(old)


def dumped(path) -> list[str]:
    return [p.read_text() for p in sorted(path.glob("*.mlir"))]


def precisions(modules: list[str], op: str) -> set[str]:
    found = set()
    for m in modules:
        for line in m.splitlines():
            if f'"stablehlo.{op}"' in line:
                hit = re.search(r"precision_config = \[#stablehlo<precision (\w+)>", line)
                found.add(hit.group(1) if hit else "none")
    return found


@pytest.mark.parametrize(
    ("setting", "expected"), [("highest", "HIGHEST"), ("high", "HIGH"), ("medium", "DEFAULT")]
)
def test_strict_eager_dots_and_convolutions_carry_the_precision(
    no_fallback, precision, tpu_env, tmp_path, setting, expected
):
    tpu_env("TORCH_TPU_DUMP_DIR", str(tmp_path))
    precision(setting)
    a = torch.randn(5, 7, device="tpu")
    w = torch.randn(3, 2, 3, 3, device="tpu")
    x = torch.randn(1, 2, 6, 6, device="tpu")
    (a @ a.t()).cpu()
    F.conv2d(x, w).cpu()
    modules = dumped(tmp_path)
    assert precisions(modules, "dot_general") == {expected}
    assert precisions(modules, "convolution") == {expected}


def test_half_types_carry_no_precision(no_fallback, tpu_env, tmp_path):
    tpu_env("TORCH_TPU_DUMP_DIR", str(tmp_path))
    a = torch.randn(6, 3, device="tpu", dtype=torch.bfloat16)
    (a @ a.t()).cpu()
    assert precisions(dumped(tmp_path), "dot_general") == {"none"}


def test_compiled_programs_follow_the_precision_and_key_on_it(no_fallback, precision, tpu_env, tmp_path):
    tpu_env("TORCH_TPU_DUMP_DIR", str(tmp_path))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("tpu")
    x = torch.randn(3, 8)
    compiled = torch.compile(model, backend=torch_tpu.TpuBackend(), dynamic=False)
    results = {}
    for setting in ("highest", "medium"):
        precision(setting)
        torch._dynamo.reset()  # dynamo guards do not watch the precision; the trace must be redone
        compiled = torch.compile(model, backend=torch_tpu.TpuBackend(), dynamic=False)
        before = torch_tpu.metrics()["compiles"]
        with torch.no_grad():
            results[setting] = compiled(x.to("tpu")).cpu()
        assert torch_tpu.metrics()["compiles"] > before  # a second cache entry, not a hit
        modules = dumped(tmp_path)
        assert any("HIGHEST" in m for m in modules)
    assert precisions(dumped(tmp_path), "dot_general") == {"HIGHEST", "DEFAULT"}
    # the CPU plugin computes f32 dots in f32 whatever the precision
    with torch.no_grad():
        torch.testing.assert_close(results["medium"], results["highest"], rtol=0, atol=0)
        torch.testing.assert_close(results["highest"], model.cpu()(x), rtol=1e-5, atol=1e-6)
