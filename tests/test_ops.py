"""The first op set against PyTorch CPU: several shapes (broadcasting, 0-d,
empty), f32/bf16/i64 where they apply, and no CPU fallback."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same, to_tpu

FLOAT = [torch.float32, torch.bfloat16]
ALL = [torch.float32, torch.bfloat16, torch.int64]


def make(shape, dtype, seed=0, low=-3.0, high=3.0, positive=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.rand(shape, generator=g) * (high - low) + low
        if positive:
            x = x.abs() + 0.1
        return x.to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    lo = 1 if positive else int(low)
    return torch.randint(lo, int(high) + 1, shape, generator=g).to(dtype)


def run_both(fn, *inputs, **tol):
    expected = fn(*inputs)
    actual = fn(*to_tpu(inputs))
    assert_same(actual, expected, **tol)


SHAPE_PAIRS = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((), (5,)), ((0, 3), (3,)), ((), ())]

BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
}


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(no_fallback, name, shapes, dtype):
    a, b = make(shapes[0], dtype, 1), make(shapes[1], dtype, 2)
    run_both(BINARY[name], a, b)


@pytest.mark.parametrize("dtype", ALL)
def test_div_variants(no_fallback, dtype):
    a = make((3, 4), dtype, 1)
    b = make((4,), dtype, 2, positive=True)
    run_both(lambda x, y: x / y, a, b)
    run_both(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b)
    run_both(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a, b)
    run_both(lambda x, y: torch.remainder(x, y), a, b)


@pytest.mark.parametrize("dtype", ALL)
def test_scalar_operands_and_promotion(no_fallback, dtype):
    a = make((2, 3), dtype, 3)
    run_both(lambda x: x * 0.5, a)
    run_both(lambda x: x + 2, a)
    run_both(lambda x: 3 - x, a)
    run_both(lambda x: x * torch.tensor(2.5), a)  # a 0-d CPU tensor
    run_both(lambda x: x > 1, a)


def test_mixed_dtype_promotion(no_fallback):
    i = make((2, 3), torch.int64, 1)
    f = make((2, 3), torch.float32, 2)
    b = make((3,), torch.bfloat16, 3)
    run_both(lambda x, y: x + y, i, f)
    run_both(lambda x, y: x * y, f, b)
    run_both(lambda x, y: x + y, i, b)
    run_both(lambda x: x / 2, i)


def test_logical(no_fallback):
    a, b = make((3, 4), torch.bool, 1), make((4,), torch.bool, 2)
    run_both(torch.logical_and, a, b)
    run_both(torch.logical_or, a, b)
    run_both(torch.logical_xor, a, b)
    run_both(torch.logical_not, a)
    run_both(lambda x, y: x & y, a, b)
    run_both(lambda x, y: x | y, a, b)
    run_both(lambda x: ~x, a)


UNARY_FLOAT = {
    "exp": torch.exp,
    "log": lambda x: torch.log(x.abs() + 0.1),
    "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.1),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "pow_scalar": lambda x: torch.pow(x, 2),
    "pow_frac": lambda x: torch.pow(x.abs(), 0.5),
    "pow_tensor": lambda x: torch.pow(x.abs() + 0.5, x),
    "abs": torch.abs,
    "neg": torch.neg,
    "clamp": lambda x: torch.clamp(x, -1, 0.5),
    "clamp_min": lambda x: torch.clamp(x, min=-0.5),
    "clamp_max": lambda x: torch.clamp(x, max=0.5),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
}


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("shape", [(2, 5), (), (0, 4), (3, 1, 4)], ids=str)
@pytest.mark.parametrize("name", list(UNARY_FLOAT))
def test_unary(no_fallback, name, shape, dtype):
    run_both(UNARY_FLOAT[name], make(shape, dtype, 4))


@pytest.mark.parametrize("name", ["abs", "neg", "clamp", "relu", "pow_scalar"])
def test_unary_int(no_fallback, name):
    run_both(UNARY_FLOAT[name], make((3, 4), torch.int64, 5))


def test_where(no_fallback):
    c = make((3, 4), torch.bool, 1)
    a, b = make((3, 4), torch.float32, 2), make((4,), torch.float32, 3)
    run_both(torch.where, c, a, b)
    run_both(lambda c, a: torch.where(c, a, 0.0), c, a)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("shape", [(3, 4, 5), (7,), (2, 0, 3)], ids=str)
def test_reductions(no_fallback, shape, dtype):
    x = make(shape, dtype, 6)
    run_both(lambda t: t.sum(), x)
    run_both(lambda t: t.sum(dim=-1), x)
    run_both(lambda t: t.sum(dim=0, keepdim=True), x)
    if dtype.is_floating_point:
        run_both(lambda t: t.mean(dim=-1), x)
        run_both(lambda t: t.mean(), x)
        if x.numel() > 0 and x.shape[-1] > 1:
            run_both(lambda t: t.var(dim=-1), x)
            run_both(lambda t: t.var(dim=-1, unbiased=False, keepdim=True), x)
    if x.numel() > 0:
        run_both(lambda t: t.amax(dim=-1), x)
        run_both(lambda t: t.amin(dim=0, keepdim=True), x)
        run_both(lambda t: t.argmax(dim=-1), x)
        run_both(lambda t: t.argmax(), x)
        run_both(lambda t: t.max(), x)


def test_argmax_ties_pick_first(no_fallback):
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    run_both(lambda t: t.argmax(dim=1), x)


@pytest.mark.parametrize("dtype", FLOAT)
def test_matmul_family(no_fallback, dtype):
    a, b = make((4, 5), dtype, 1), make((5, 3), dtype, 2)
    bias = make((3,), dtype, 3)
    run_both(torch.mm, a, b)
    run_both(lambda x, y: x @ y, a, b)
    run_both(lambda c, x, y: torch.addmm(c, x, y), bias, a, b)
    run_both(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2), bias, a, b)
    w = make((3, 5), dtype, 4)
    run_both(lambda x, w, c: F.linear(x, w, c), a, w, bias)
    x3 = make((2, 4, 5), dtype, 5)
    y3 = make((2, 5, 3), dtype, 6)
    run_both(torch.bmm, x3, y3)
    run_both(torch.matmul, x3, b)
    run_both(lambda x, w, c: F.linear(x, w, c), x3, w, bias)


@pytest.mark.parametrize("dtype", FLOAT)
def test_softmax(no_fallback, dtype):
    x = make((3, 7), dtype, 7)
    run_both(lambda t: torch.softmax(t, dim=-1), x)
    run_both(lambda t: torch.softmax(t, dim=0), x)
    run_both(lambda t: torch.log_softmax(t, dim=-1), x)


def test_softmax_bf16_accumulates_in_f32(no_fallback):
    x = make((2, 4096), torch.bfloat16, 8)
    run_both(lambda t: torch.softmax(t, dim=-1), x)
    run_both(lambda t: t.float().softmax(-1).sum(-1), x)


@pytest.mark.parametrize("dtype", FLOAT)
def test_layer_norm(no_fallback, dtype):
    x = make((2, 3, 8), dtype, 9)
    w, b = make((8,), dtype, 10), make((8,), dtype, 11)
    run_both(lambda t, w, b: F.layer_norm(t, (8,), w, b), x, w, b)
    run_both(lambda t: F.layer_norm(t, (3, 8)), x)
    run_both(lambda t: torch.native_layer_norm(t, (8,), None, None, 1e-5), x)


def test_factories(no_fallback):
    for dtype in ALL:
        assert_same(torch.zeros(2, 3, dtype=dtype, device="tpu"), torch.zeros(2, 3, dtype=dtype))
        assert_same(torch.ones(4, dtype=dtype, device="tpu"), torch.ones(4, dtype=dtype))
        assert_same(torch.full((2, 2), 7, dtype=dtype, device="tpu"), torch.full((2, 2), 7, dtype=dtype))
    assert_same(torch.arange(10, device="tpu"), torch.arange(10))
    assert_same(torch.arange(1, 4, 0.5, device="tpu"), torch.arange(1, 4, 0.5))
    assert_same(torch.arange(5, 0, -2, device="tpu"), torch.arange(5, 0, -2))
    assert torch.empty(3, 4, device="tpu").shape == (3, 4)


def test_random_factories_are_seeded(no_fallback):
    torch.manual_seed(0)
    torch.tpu.manual_seed(0)
    a = torch.rand(1000, device="tpu")
    torch.tpu.manual_seed(0)
    b = torch.rand(1000, device="tpu")
    assert torch.equal(a.cpu(), b.cpu())
    assert a.min().item() >= 0 and a.max().item() < 1
    n = torch.randn(20000, device="tpu").cpu()
    assert abs(n.mean().item()) < 0.05 and abs(n.std().item() - 1) < 0.05
    m = torch.normal(2.0, 3.0, size=(20000,), device="tpu").cpu()
    assert abs(m.mean().item() - 2) < 0.15 and abs(m.std().item() - 3) < 0.15


@pytest.mark.parametrize("dtype", ALL)
def test_cat_stack_split_chunk(no_fallback, dtype):
    a, b = make((2, 3), dtype, 1), make((4, 3), dtype, 2)
    run_both(lambda x, y: torch.cat([x, y]), a, b)
    run_both(lambda x, y: torch.cat([x.t(), y.t()], dim=1), a, b)
    run_both(lambda x: torch.stack([x, x * 2], dim=1), a)
    run_both(lambda x: [t * 1 for t in torch.split(x, 2)], b)
    run_both(lambda x: [t + 0 for t in torch.chunk(x, 3, dim=1)], b)


@pytest.mark.parametrize("dtype", ALL)
def test_casts_and_copies(no_fallback, dtype):
    x = make((3, 4), dtype, 12)
    for target in [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool, torch.float16]:
        run_both(lambda t, target=target: t.to(target), x)
    run_both(lambda t: t.clone(), x)
    run_both(lambda t: t.t().contiguous(), x)
    run_both(lambda t: t.new_zeros(2).fill_(3), x)
    run_both(lambda t: t.clone().zero_(), x)
    run_both(lambda t: torch.zeros_like(t).copy_(t), x)
    run_both(lambda t: torch.zeros_like(t).copy_(t.flip(0)), x)


def test_embedding_and_index_select(no_fallback):
    w = make((10, 4), torch.float32, 13)
    idx = torch.tensor([[1, 5, 9], [0, 0, 3]])
    run_both(lambda w, i: F.embedding(i, w), w, idx)
    run_both(lambda w, i: torch.index_select(w, 0, i.flatten()), w, idx)
    run_both(lambda w, i: torch.index_select(w, 1, i[0, :2] % 4), w, idx)


def test_data_dependent_selection(no_fallback):
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    run_both(torch.nonzero, x)
    run_both(lambda t: torch.nonzero(t[:, :0]), x)
    run_both(lambda t: torch.nonzero(torch.zeros_like(t)), x)
    run_both(lambda t: torch.masked_select(t, t > 0), x)
    run_both(lambda t: torch.masked_select(t, torch.tensor([True, False, True]).to(t.device)), x)
    run_both(lambda t: t[t != 0], x)
    run_both(lambda t: t[torch.tensor([1, 0])], x)  # a CPU index tensor

    def masked_write(t):
        t = t.clone()
        t[t < 0] = 7.0
        return t

    run_both(masked_write, x)


def test_print_needs_no_fallback(no_fallback, capsys):
    x = torch.tensor([[0.0, 1.5, float("inf")], [2.0, float("nan"), -3.0]], device="tpu")
    print(x)
    print(x.to(torch.int64).clamp(-5, 5))
    out = capsys.readouterr().out
    assert "device='tpu:0'" in out and "1.5000" in out


def test_bad_shapes_and_dtypes_raise_pytorch_errors():
    a, b = torch.ones(3, device="tpu"), torch.ones(4, device="tpu")
    with pytest.raises(RuntimeError, match=r"aten::add.Tensor: The size of tensor a \(3\) must match"):
        a + b
    m1, m2 = torch.ones(2, 3, device="tpu"), torch.ones(4, 5, device="tpu")
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        torch.mm(m1, m2)
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        torch.mm(m1, torch.ones(3, 2, device="tpu", dtype=torch.bfloat16))
    with pytest.raises(IndexError, match="Dimension out of range"):
        a.sum(dim=3)
    x = torch.ones(2, 2, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.add_(0.5)
    # the device is still healthy afterwards
    assert (a * 2).sum().item() == 6
