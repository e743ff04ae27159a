"""The random distributions on "tpu" (exponential_, cauchy_, log_normal_, geometric_) are checked
by their moments, support and dtype, never by values: the tpu generator is not PyTorch's CPU one.
Bounds are 6 standard errors of the statistic at n draws, so a correct sampler fails with
probability far below 1e-6; a wrong parameterisation (rate for scale, p for 1 - p) fails."""

from __future__ import annotations

import math

import pytest
import torch

import torch_tpu

N = 200_000


def draw(method, *args, dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    x = torch.empty(N, device="tpu", dtype=dtype)
    out = getattr(x, method)(*args, **kwargs)
    assert out is x, f"{method} must return self"
    assert x.device.type == "tpu" and x.dtype == dtype
    return x.cpu().double()


def near(value, expected, se, what):
    assert abs(value - expected) <= 6 * se, f"{what}: {value:.5f}, expected {expected:.5f} +- {6 * se:.5f}"


@pytest.mark.parametrize("lambd", [0.5, 3.0])
def test_exponential(lambd, no_fallback):
    x = draw("exponential_", lambd)
    assert bool((x >= 0).all())
    mean, std = 1 / lambd, 1 / lambd
    near(x.mean().item(), mean, std / math.sqrt(N), "mean")
    near(x.std().item(), std, std * math.sqrt(2.0 / N), "std")  # Exp's 4th central moment is 9 std^4


def test_cauchy(no_fallback):
    median, sigma = 1.5, 0.5
    x = draw("cauchy_", median, sigma)
    q = torch.quantile(x[:100_000].float(), torch.tensor([0.25, 0.5, 0.75])).double()
    # quantile q has standard error sqrt(q(1-q)/n) / density at q
    dens_mid, dens_q = 1 / (math.pi * sigma), 1 / (2 * math.pi * sigma)
    se_mid = math.sqrt(0.25 / 100_000) / dens_mid
    se_q = math.sqrt(0.1875 / 100_000) / dens_q
    near(q[1].item(), median, se_mid, "median")
    near(q[0].item(), median - sigma, se_q, "first quartile")
    near(q[2].item(), median + sigma, se_q, "third quartile")


def test_log_normal(no_fallback):
    mean, std = 0.5, 0.75
    x = draw("log_normal_", mean, std)
    assert bool((x > 0).all())
    logs = x.log()
    near(logs.mean().item(), mean, std / math.sqrt(N), "mean of log")
    near(logs.std().item(), std, std / math.sqrt(2 * N), "std of log")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_geometric(dtype, no_fallback):
    p = 0.3
    x = draw("geometric_", p, dtype=dtype)
    assert bool((x >= 1).all()) and bool((x == x.round()).all())
    mean, var = 1 / p, (1 - p) / p**2
    near(x.mean().item(), mean, math.sqrt(var / N), "mean")
    near((x == 1).double().mean().item(), p, math.sqrt(p * (1 - p) / N), "P(X = 1)")


@pytest.mark.parametrize("method,args", [("exponential_", (2.0,)), ("cauchy_", ()), ("log_normal_", ())])
def test_half_types_and_seeds(method, args, no_fallback):
    a = draw(method, *args, dtype=torch.bfloat16, seed=7)
    b = draw(method, *args, dtype=torch.bfloat16, seed=7)
    c = draw(method, *args, dtype=torch.bfloat16, seed=8)
    assert torch.equal(a, b), "the same seed must replay the same draws"
    assert not torch.equal(a, c), "another seed must give other draws"
    assert bool(torch.isfinite(a).all()) or method == "cauchy_"


def test_bad_parameters_are_clear_errors():
    x = torch.empty(4, device="tpu")
    with pytest.raises(RuntimeError, match="lambda > 0"):
        x.exponential_(-1.0)
    with pytest.raises(RuntimeError, match="p to be in"):
        x.geometric_(1.5)
    with torch_tpu.cpu_fallback_mode(False):
        x.cauchy_()  # runs on tpu: no fallback needed
