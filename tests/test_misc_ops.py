"""Assorted rules (csrc/lower/scan.c, sort.c, factory.c, reduction.c,
activation.c, elementwise.c) against PyTorch CPU, with no CPU fallback:
scans, sort/argsort/topk, repeat_interleave with output_size, linspace,
logsumexp, small activations and the remaining unary math."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

from conftest import assert_same, to_tpu

FLOAT = [torch.float32, torch.bfloat16]


def make(shape, dtype=torch.float32, seed=0, low=-3.0, high=3.0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) * (high - low) + low).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    return torch.randint(int(low), int(high) + 1, shape, generator=g).to(dtype)


def run_both(fn, *inputs, **tol):
    expected = fn(*inputs)
    actual = fn(*to_tpu(inputs))
    assert_same(actual, expected, **tol)


SHAPES = [(5,), (3, 7), (2, 3, 4), (), (0, 3)]


# --- scans ---


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cumsum(no_fallback, shape, dtype):
    x = make(shape, dtype)
    for dim in range(-max(len(shape), 1), max(len(shape), 1)):
        run_both(lambda t, d=dim: torch.cumsum(t, d), x, rtol=2e-2 if dtype == torch.bfloat16 else 1e-5)


def test_cumsum_dtype_and_out(no_fallback):
    x = make((4, 9), torch.int32)
    run_both(lambda t: torch.cumsum(t, 1, dtype=torch.float32), x)
    run_both(lambda t: torch.cumsum(t, 0, dtype=torch.int32), x)
    run_both(lambda t: torch.cumsum(t, 1, out=torch.empty(0, dtype=torch.int64, device=t.device)), x)
    y = make((3, 5))
    yt = y.to("tpu")
    y.cumsum_(1)
    yt.cumsum_(1)
    assert_same(yt, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_cumprod(no_fallback, dtype):
    x = make((3, 6), dtype, low=-2, high=2)
    run_both(lambda t: torch.cumprod(t, 1), x)
    run_both(lambda t: torch.cumprod(t, 0), x)
    run_both(lambda t: torch.cumprod(t, 0), make((), dtype))


# --- sorting ---


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(no_fallback, dtype, descending):
    x = make((4, 9), dtype, low=-4, high=4)  # ties: the stable order decides the indices
    for dim in (0, 1, -1):
        run_both(lambda t, d=dim: torch.sort(t, dim=d, descending=descending), x)
        run_both(lambda t, d=dim: torch.sort(t, dim=d, descending=descending, stable=True), x)
        run_both(lambda t, d=dim: torch.argsort(t, dim=d, descending=descending), x)


def test_sort_nan_and_edge_shapes(no_fallback):
    x = torch.tensor([[3.0, float("nan"), -1.0, float("inf"), -float("inf"), 0.0, float("nan")]])
    run_both(lambda t: torch.sort(t), x)
    run_both(lambda t: torch.sort(t, descending=True), x)
    run_both(lambda t: torch.sort(t), torch.tensor(2.5))
    run_both(lambda t: torch.sort(t, dim=0), make((1, 4)))
    run_both(lambda t: torch.sort(t, dim=1), make((0, 4)))


def test_sort_out(no_fallback):
    x = make((3, 5))
    v, i = torch.empty(0), torch.empty(0, dtype=torch.int64)
    vt, it = v.to("tpu"), i.to("tpu")
    torch.sort(x, dim=1, out=(v, i))
    torch.sort(x.to("tpu"), dim=1, out=(vt, it))
    assert_same(vt, v)
    assert_same(it, i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_topk(no_fallback, dtype):
    x = torch.randperm(40, generator=torch.Generator().manual_seed(0)).reshape(5, 8).to(dtype)  # no ties
    for k, dim, largest in [(3, 1, True), (2, 0, False), (8, -1, True), (0, 1, True), (1, 0, True)]:
        run_both(lambda t, k=k, d=dim, lg=largest: torch.topk(t, k, dim=d, largest=lg), x)


def test_topk_errors(no_fallback):
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(torch.zeros(2, 3, device="tpu"), 4)


# --- repeat_interleave, linspace, logsumexp ---


def test_repeat_interleave(no_fallback):
    x = make((3, 4))
    run_both(lambda t: torch.repeat_interleave(t, 2, dim=1, output_size=8), x)
    run_both(lambda t: t.repeat_interleave(3, dim=0), x)
    r = torch.tensor([1, 0, 3, 2])
    run_both(lambda t: torch.repeat_interleave(t, output_size=6), r)
    run_both(lambda t, rr: torch.repeat_interleave(t, rr, dim=1, output_size=6), x, r)


def test_repeat_interleave_without_size_falls_back():
    # the size is data-dependent: the CPU computes it (and nothing else changes)
    r = torch.tensor([2, 1, 0])
    assert_same(torch.repeat_interleave(r.to("tpu")), torch.repeat_interleave(r))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64])
def test_linspace(no_fallback, dtype):
    for start, end, steps in [(0, 1, 7), (-2.5, 3.0, 10), (5, -5, 11), (1, 2, 1), (1, 2, 0), (0, 100, 8)]:
        expected = torch.linspace(start, end, steps, dtype=dtype)
        assert_same(torch.linspace(start, end, steps, dtype=dtype, device="tpu"), expected)


@pytest.mark.parametrize("dtype", FLOAT + [torch.int64])
def test_logsumexp(no_fallback, dtype):
    x = make((3, 4, 5), dtype)
    for dim, keep in [(1, False), ((0, 2), True), (-1, True), ((0, 1, 2), False)]:
        run_both(lambda t, d=dim, k=keep: torch.logsumexp(t, d, keepdim=k), x)
    inf = torch.tensor([[-float("inf"), -float("inf")], [float("inf"), 1.0]])
    run_both(lambda t: torch.logsumexp(t, 1), inf)


# --- activations ---

ACTIVATIONS = {
    "mish": F.mish,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "leaky_relu": F.leaky_relu,
    "leaky_relu_0.2": lambda t: F.leaky_relu(t, 0.2),
    "elu": F.elu,
    "elu_alpha": lambda t: F.elu(t, alpha=0.5),
    "selu": F.selu,
    "celu": lambda t: F.celu(t, alpha=2.0),
    "softplus": F.softplus,
    "softplus_beta": lambda t: F.softplus(t, beta=2.0, threshold=4.0),
}


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(no_fallback, name, dtype):
    x = make((4, 33), dtype, low=-25, high=25)
    run_both(ACTIVATIONS[name], x)
    run_both(ACTIVATIONS[name], make((), dtype))


def test_activation_in_place(no_fallback):
    x = make((3, 4))
    xt = x.to("tpu")
    F.leaky_relu_(x, 0.1)
    F.leaky_relu_(xt, 0.1)
    assert_same(xt, x)
    F.hardswish(x, inplace=True)
    F.hardswish(xt, inplace=True)
    assert_same(xt, x)


# --- unary math ---

UNARY = {
    "asin": (torch.asin, -0.99, 0.99),
    "acos": (torch.acos, -0.99, 0.99),
    "atan": (torch.atan, -10, 10),
    "sinh": (torch.sinh, -5, 5),
    "cosh": (torch.cosh, -5, 5),
    "asinh": (torch.asinh, -10, 10),
    "acosh": (torch.acosh, 1.0, 10),
    "atanh": (torch.atanh, -0.99, 0.99),
    "erfinv": (torch.erfinv, -0.99, 0.99),
    "exp2": (torch.exp2, -10, 10),
    "log10": (torch.log10, 0.01, 100),
    "sgn": (torch.sgn, -3, 3),
    "frac": (torch.frac, -5, 5),
}


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(no_fallback, name, dtype):
    fn, low, high = UNARY[name]
    run_both(fn, make((5, 16), dtype, low=low, high=high), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["asin", "exp2", "log10", "sgn"])
def test_unary_ints(no_fallback, name):
    fn = UNARY[name][0]
    run_both(fn, make((6,), torch.int64, low=1, high=4) if name != "asin" else torch.tensor([0, 1, -1]))


def test_sgn_special_values(no_fallback):
    run_both(torch.sgn, torch.tensor([float("nan"), -0.0, 0.0, -float("inf"), 2.0]))
    run_both(torch.sgn, torch.tensor([True, False]))


# --- pieces of _safe_softmax ---


def test_isneginf_all_any_where_out(no_fallback):
    x = torch.tensor([[-float("inf"), 1.0, float("inf")], [-float("inf"), -float("inf"), 0.0]])
    run_both(torch.isneginf, x)
    run_both(torch.isposinf, x)
    run_both(torch.isneginf, torch.tensor([1, -2]))
    b = torch.isneginf(x)
    run_both(lambda t: torch.all(t, dim=1), b)
    run_both(lambda t: torch.any(t, dim=0, keepdim=True), b)
    run_both(lambda t: torch.all(t, dim=-1), b.to(torch.uint8))
    out = torch.empty(2, 3)
    outt = out.to("tpu")
    torch.where(b, x, torch.zeros(3), out=out)
    torch.where(b.to("tpu"), x.to("tpu"), torch.zeros(3, device="tpu"), out=outt)
    assert_same(outt, out)


def test_rules_are_registered():
    for name in ["aten::cumsum", "aten::sort.stable", "aten::topk", "aten::linspace.out", "aten::logsumexp"]:
        assert torch_tpu._C._op_supported(name), name
