"""pow with a Python-number exponent of 2, 3, 0.5, -0.5, -1 or -2 is spelled
as PyTorch's CPU kernel spells it (x*x, sqrt, 1/x...), not XLA's general
power (a powf call per element), and the cache key tells those exponents
apart from every other number without baking any other value in."""

from __future__ import annotations

import pytest
import torch


def dumped(path) -> str:
    return "\n".join(p.read_text() for p in sorted(path.glob("*.mlir")))


@pytest.mark.parametrize(("exponent", "rows"), [(2, 41), (3, 42), (-1, 44), (-2, 45), (2.0, 46)])
def test_integral_exponents_are_exact_and_use_no_power(no_fallback, tpu_env, tmp_path, exponent, rows):
    tpu_env("TORCH_TPU_DUMP_DIR", str(tmp_path))
    x = torch.randn(rows, 3) * 3  # a shape no other test compiles, so the module is dumped
    got = x.to("tpu").pow(exponent).cpu()
    assert torch.equal(got, x.pow(exponent))
    text = dumped(tmp_path)
    assert "stablehlo.multiply" in text or "stablehlo.divide" in text
    assert "stablehlo.power" not in text


@pytest.mark.parametrize(("exponent", "op"), [(0.5, "stablehlo.sqrt"), (-0.5, "stablehlo.rsqrt")])
def test_half_exponents_are_roots(no_fallback, tpu_env, tmp_path, exponent, op):
    tpu_env("TORCH_TPU_DUMP_DIR", str(tmp_path))
    x = torch.rand(43, 3) + 0.01
    torch.testing.assert_close(x.to("tpu").pow(exponent).cpu(), x.pow(exponent), rtol=1e-6, atol=0)
    text = dumped(tmp_path)
    assert op in text and "stablehlo.power" not in text


def test_other_exponents_share_one_general_program(no_fallback, tpu_env, tmp_path):
    import torch_tpu

    x = torch.rand(47, 3) + 0.5
    xt = x.to("tpu")
    xt.pow(1.7).cpu()  # warm: the general program for this shape
    torch_tpu.reset_metrics()
    for e in (1.3, 2.5, -3.7, 4.0):
        torch.testing.assert_close(xt.pow(e).cpu(), x.pow(e))
    assert torch_tpu.metrics()["compiles"] == 0  # a new exponent is a runtime value
    # and a special one is a program of its own, right after a general one
    assert torch.equal(xt.pow(2).cpu(), x.pow(2))


def test_a_zero_dim_tensor_exponent_stays_a_runtime_value(no_fallback):
    import torch_tpu

    x = torch.rand(53) + 0.5
    xt = x.to("tpu")
    xt.pow(torch.tensor(1.5)).cpu()
    torch_tpu.reset_metrics()
    for e in (2.0, 0.5, -1.0, 3.0):  # special values, but a tensor's: no new program
        torch.testing.assert_close(xt.pow(torch.tensor(e)).cpu(), x.pow(torch.tensor(e)))
    assert torch_tpu.metrics()["compiles"] == 0
