"""Convolution (forward, transposed, backward), upsampling (nearest,
nearest-exact, linear family, and gradients) and padding (constant,
reflect, replicate, and gradients) on "tpu" against PyTorch's CPU."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same, to_cpu, to_tpu

pytestmark = pytest.mark.usefixtures("no_fallback")


def rnd(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 31 * len(shape) + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def both(fn: Callable[..., Any], *args: Any, **tol: float) -> None:
    """Runs fn on CPU and tpu copies of args and compares the results."""
    expected = fn(*args)
    actual = fn(*to_tpu(list(args)))
    assert_same(actual, expected, **tol)


def grads(fn: Callable[..., torch.Tensor], *args: torch.Tensor, need: tuple[bool, ...] | None = None):
    """The gradients of sum(fn(*args) * fixed weights) w.r.t. the args that
    need them (default: all), as a tuple."""
    need = need or tuple(True for _ in args)
    leaves = [a.detach().clone().requires_grad_(n) for a, n in zip(args, need)]
    y = fn(*leaves)
    w = torch.linspace(-1.0, 1.0, y.numel(), dtype=torch.float32).reshape(y.shape).to(y.dtype).to(y.device)
    (y * w).sum().backward()
    return tuple(leaf.grad for leaf, n in zip(leaves, need) if n)


# ---- convolution --------------------------------------------------------------

CONV_CASES = [
    # (fn, input shape, weight shape, bias, kwargs)
    (F.conv1d, (2, 3, 11), (5, 3, 4), True, dict(stride=3)),
    (F.conv1d, (2, 4, 9), (6, 2, 3), False, dict(padding=2, dilation=2, groups=2)),
    (F.conv2d, (2, 3, 8, 8), (4, 3, 3, 3), True, dict(padding=1)),
    (F.conv2d, (1, 3, 9, 10), (4, 3, 3, 3), False, dict(stride=2, padding=(1, 2), dilation=(1, 2))),
    (F.conv2d, (2, 4, 7, 6), (6, 2, 3, 1), True, dict(groups=2, padding=(1, 0))),
    (F.conv2d, (2, 4, 6, 6), (4, 1, 3, 3), True, dict(groups=4, padding=1)),  # depthwise
    (F.conv2d, (1, 8, 5, 5), (16, 8, 1, 1), True, {}),  # 1x1, as in the VAE's shortcuts
    (F.conv3d, (1, 2, 5, 6, 4), (3, 2, 3, 3, 3), True, dict(padding=1)),
    (F.conv3d, (1, 2, 6, 6, 6), (4, 2, 2, 2, 2), False, dict(stride=2)),
]

CONV_T_CASES = [
    (F.conv_transpose1d, (2, 3, 5), (3, 2, 4), True, dict(stride=3, padding=2)),
    (F.conv_transpose2d, (2, 3, 5, 5), (3, 4, 3, 3), True, dict(stride=2, padding=1, output_padding=1)),
    (F.conv_transpose2d, (2, 6, 5, 4), (6, 2, 3, 3), False, dict(stride=2, groups=3, dilation=2)),
    (F.conv_transpose2d, (1, 4, 4, 4), (4, 4, 4, 4), True, dict(stride=2, padding=1)),
    (
        F.conv_transpose3d,
        (1, 2, 3, 4, 3),
        (2, 3, 3, 3, 3),
        True,
        dict(stride=(1, 2, 2), output_padding=(0, 1, 1)),
    ),
]


def _conv_args(inp, wt, bias, dtype=torch.float32):
    out_ch = wt[0]
    return (
        rnd(*inp, dtype=dtype),
        rnd(*wt, dtype=dtype, seed=1),
        (rnd(out_ch, dtype=dtype, seed=2) if bias else None),
    )


@pytest.mark.parametrize("fn,inp,wt,bias,kw", CONV_CASES)
def test_conv_forward(fn, inp, wt, bias, kw):
    x, w, b = _conv_args(inp, wt, bias)
    both(lambda x, w, b: fn(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("fn,inp,wt,bias,kw", CONV_T_CASES)
def test_conv_transpose_forward(fn, inp, wt, bias, kw):
    x, w, _ = _conv_args(inp, wt, False)
    b = rnd(wt[1] * kw.get("groups", 1), seed=2) if bias else None
    both(lambda x, w, b: fn(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", [CONV_CASES[2], CONV_CASES[4], CONV_CASES[7]])
def test_conv_half(dtype, case):
    fn, inp, wt, bias, kw = case
    x, w, b = _conv_args(inp, wt, bias, dtype)
    both(lambda x, w, b: fn(x, w, b, **kw), x, w, b)


def test_conv_transpose_bf16():
    fn, inp, wt, bias, kw = CONV_T_CASES[1]
    x, w, _ = _conv_args(inp, wt, False, torch.bfloat16)
    # against the f32 result rounded to bf16, as we accumulate: CPU's own bf16 kernel
    # rounds its partial sums to bf16 on hosts without AVX512-BF16
    expected = fn(x.float(), w.float(), **kw).to(torch.bfloat16)
    assert_same(fn(x.to("tpu"), w.to("tpu"), **kw), expected)


@pytest.mark.parametrize("fn,inp,wt,bias,kw", CONV_CASES[:6] + CONV_CASES[7:])
def test_conv_backward(fn, inp, wt, bias, kw):
    x, w, b = _conv_args(inp, wt, True)
    expected = grads(lambda x, w, b: fn(x, w, b, **kw), x, w, b)
    actual = grads(lambda x, w, b: fn(x, w, b, **kw), *to_tpu([x, w, b]))
    assert_same(actual, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fn,inp,wt,bias,kw", CONV_T_CASES)
def test_conv_transpose_backward(fn, inp, wt, bias, kw):
    x, w, _ = _conv_args(inp, wt, False)
    b = rnd(wt[1] * kw.get("groups", 1), seed=2)
    expected = grads(lambda x, w, b: fn(x, w, b, **kw), x, w, b)
    actual = grads(lambda x, w, b: fn(x, w, b, **kw), *to_tpu([x, w, b]))
    assert_same(actual, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("need", [(False, True), (True, False)])
def test_conv_backward_masked(need):
    """Only some gradients asked for (no bias; a frozen input or weight)."""
    x, w = rnd(2, 3, 6, 6), rnd(4, 3, 3, 3, seed=1)

    def fn(x, w):
        return F.conv2d(x, w, padding=1, stride=2)

    expected = grads(fn, x, w, need=need)
    actual = grads(fn, *to_tpu([x, w]), need=need)
    assert_same(actual, expected, rtol=1e-4, atol=1e-4)


def test_conv_backward_bf16():
    x, w, b = _conv_args((2, 4, 6, 6), (4, 2, 3, 3), True, torch.bfloat16)

    def fn(x, w, b):
        return F.conv2d(x, w, b, padding=1, groups=2)

    expected = grads(fn, x, w, b)
    actual = grads(fn, *to_tpu([x, w, b]))
    assert_same(actual, expected, rtol=3e-2, atol=5e-2)


def test_conv2d_module_train_step():
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(3, 8, 3, padding=1)
    tpu = torch.nn.Conv2d(3, 8, 3, padding=1)
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    x = rnd(2, 3, 8, 8)
    for m, inp in ((cpu, x), (tpu, x.to("tpu"))):
        y = m(inp)
        y.square().mean().backward()
    assert_same(tpu(x.to("tpu")), cpu(x))
    assert_same(tpu.weight.grad, cpu.weight.grad, rtol=1e-4, atol=1e-5)
    assert_same(tpu.bias.grad, cpu.bias.grad, rtol=1e-4, atol=1e-5)


def test_vae_like_upsample_then_conv():
    """The decoder's Upsample2D: nearest x2, then a 3x3 conv."""
    x, w, b = rnd(1, 4, 6, 5), rnd(4, 4, 3, 3, seed=1), rnd(4, seed=2)

    def fn(x, w, b):
        return F.conv2d(F.interpolate(x, scale_factor=2.0, mode="nearest"), w, b, padding=1)

    both(fn, x, w, b)
    both(fn, x.bfloat16(), w.bfloat16(), b.bfloat16())
    expected = grads(fn, x, w, b)
    actual = grads(fn, *to_tpu([x, w, b]))
    assert_same(actual, expected, rtol=1e-4, atol=1e-4)


def test_downsample_pad_then_strided_conv():
    """The encoder's Downsample2D: pad (0, 1, 0, 1), then a stride-2 conv."""
    x, w, b = rnd(1, 4, 8, 8), rnd(4, 4, 3, 3, seed=1), rnd(4, seed=2)

    def fn(x, w, b):
        return F.conv2d(F.pad(x, (0, 1, 0, 1), mode="constant", value=0.0), w, b, stride=2)

    both(fn, x, w, b)
    expected = grads(fn, x, w, b)
    actual = grads(fn, *to_tpu([x, w, b]))
    assert_same(actual, expected, rtol=1e-4, atol=1e-4)


def _message(fn: Callable[[], Any]) -> str:
    with pytest.raises(Exception) as info:
        fn()
    return str(info.value).splitlines()[0]


CONV_ERRORS = [
    lambda d: F.conv2d(rnd(1, 3, 8, 8).to(d), rnd(8, 4, 3, 3).to(d)),
    lambda d: F.conv2d(rnd(1, 3, 2, 2).to(d), rnd(8, 3, 3, 3).to(d)),
    lambda d: F.conv3d(rnd(1, 3, 2, 9, 9).to(d), rnd(8, 3, 3, 3, 3).to(d), padding=(0, 1, 1)),
    lambda d: F.conv2d(rnd(1, 3, 8, 8).to(d), rnd(8, 3, 3, 3).to(d), rnd(7).to(d)),
    lambda d: F.conv2d(rnd(1, 4, 8, 8).to(d), rnd(8, 2, 3, 3).to(d), groups=3),
    lambda d: F.conv2d(rnd(1, 3, 8, 8).to(d), rnd(8, 3, 3, 3).to(d), stride=0),
    lambda d: F.conv2d(rnd(1, 3, 8, 8).to(d), rnd(8, 3, 3, 3).to(d), padding=-1),
    lambda d: F.conv2d(rnd(1, 3, 8, 8).to(d), rnd(8, 3, 3, 3).to(d), dilation=0),
    lambda d: F.conv_transpose2d(rnd(1, 3, 8, 8).to(d), rnd(4, 3, 3, 3).to(d)),
    lambda d: F.conv_transpose2d(rnd(1, 3, 8, 8).to(d), rnd(3, 4, 3, 3).to(d), rnd(5).to(d)),
    lambda d: F.conv_transpose2d(rnd(1, 3, 8, 8).to(d), rnd(3, 4, 3, 3).to(d), stride=2, output_padding=2),
    lambda d: torch.ops.aten.convolution(
        rnd(1, 3, 8).to(d), rnd(8, 3, 3, 3).to(d), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1
    ),
    lambda d: torch.ops.aten.convolution(
        rnd(1, 3, 8, 8).to(d), rnd(8, 3, 3, 3).to(d), None, [1, 1, 1], [0, 0], [1, 1], False, [0, 0], 1
    ),
    lambda d: torch.ops.aten.convolution(
        rnd(1, 4, 8, 8).to(d), rnd(2, 2, 3, 3).to(d), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 3
    ),
    lambda d: torch.ops.aten.convolution(
        rnd(1, 4, 8, 8).to(d), rnd(2, 2, 3, 3).to(d), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 0
    ),
    lambda d: F.conv2d(rnd(1, 3, 8, 8).to(d), rnd(8, 3, 3, 3).to(d), rnd(8).double().to(d)),
]


@pytest.mark.parametrize("case", range(len(CONV_ERRORS)))
def test_conv_errors(case):
    expected = _message(lambda: CONV_ERRORS[case]("cpu"))
    actual = _message(lambda: CONV_ERRORS[case]("tpu"))
    assert re.search(re.escape(expected), actual), f"{actual!r} does not carry {expected!r}"


# ---- resampling ---------------------------------------------------------------

INTERP_CASES = [
    dict(scale_factor=2.0, mode="nearest"),
    dict(size=(9, 11), mode="nearest"),
    dict(size=(3, 4), mode="nearest"),
    dict(scale_factor=1.7, mode="nearest"),
    dict(scale_factor=(3.0, 0.5), mode="nearest"),
    dict(scale_factor=2.0, mode="nearest-exact"),
    dict(size=(9, 11), mode="nearest-exact"),
    dict(scale_factor=1.7, mode="nearest-exact"),
    dict(scale_factor=2.0, mode="bilinear", align_corners=False),
    dict(scale_factor=2.0, mode="bilinear", align_corners=True),
    dict(size=(9, 11), mode="bilinear", align_corners=False),
    dict(size=(9, 11), mode="bilinear", align_corners=True),
    dict(size=(3, 4), mode="bilinear", align_corners=False),
    dict(size=(1, 4), mode="bilinear", align_corners=True),
    dict(scale_factor=1.7, mode="bilinear", align_corners=False),
    dict(scale_factor=(1.0, 2.5), mode="bilinear", align_corners=False),
]


@pytest.mark.parametrize("kw", INTERP_CASES, ids=str)
def test_interpolate(kw):
    both(lambda x: F.interpolate(x, **kw), rnd(2, 3, 5, 7))


@pytest.mark.parametrize("kw", [INTERP_CASES[i] for i in (0, 1, 6, 8, 11)], ids=str)
def test_interpolate_bf16(kw):
    both(lambda x: F.interpolate(x, **kw), rnd(1, 2, 5, 7, dtype=torch.bfloat16))


@pytest.mark.parametrize("kw", INTERP_CASES, ids=str)
def test_interpolate_backward(kw):
    x = rnd(2, 3, 5, 7)
    expected = grads(lambda x: F.interpolate(x, **kw), x)
    actual = grads(lambda x: F.interpolate(x, **kw), x.to("tpu"))
    assert_same(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape,kw",
    [
        ((2, 3, 5), dict(scale_factor=3.0, mode="nearest")),
        ((2, 3, 5), dict(size=8, mode="nearest-exact")),
        ((2, 3, 5), dict(size=9, mode="linear")),
        ((2, 3, 5), dict(size=9, mode="linear", align_corners=True)),
        ((1, 2, 2, 3, 4), dict(scale_factor=2.0, mode="nearest")),
        ((1, 2, 2, 3, 4), dict(size=(3, 5, 7), mode="nearest")),
        ((1, 2, 2, 3, 4), dict(size=(3, 5, 7), mode="nearest-exact")),
        ((1, 2, 2, 3, 4), dict(size=(3, 5, 7), mode="trilinear")),
        ((1, 2, 2, 3, 4), dict(scale_factor=2.0, mode="trilinear", align_corners=True)),
    ],
    ids=str,
)
def test_interpolate_1d_3d(shape, kw):
    x = rnd(*shape)
    both(lambda x: F.interpolate(x, **kw), x)
    expected = grads(lambda x: F.interpolate(x, **kw), x)
    actual = grads(lambda x: F.interpolate(x, **kw), x.to("tpu"))
    assert_same(actual, expected, rtol=1e-5, atol=1e-5)


def test_upsample_scale_is_a_parameter():
    """A different scale with the same sizes reuses the program yet picks
    PyTorch's own indices for it."""
    x = rnd(1, 1, 4, 7)
    for scale in (1.5, 1.6, 1.55):
        both(lambda x, s=scale: torch.ops.aten.upsample_nearest2d(x, [6, 11], s, s), x)
        both(lambda x, s=scale: torch.ops.aten.upsample_bilinear2d(x, [6, 11], False, s, s), x)


UPSAMPLE_ERRORS = [
    lambda d: torch.ops.aten.upsample_nearest2d(rnd(3, 3, 3).to(d), [6, 6]),
    lambda d: torch.ops.aten.upsample_nearest2d(rnd(1, 3, 3, 3).to(d), [0, 6]),
    lambda d: torch.ops.aten.upsample_nearest2d(rnd(1, 3, 3, 3).to(d), [6]),
    lambda d: torch.ops.aten.upsample_nearest2d(rnd(1, 0, 3, 3).to(d), [6, 6]),
    lambda d: torch.ops.aten.upsample_nearest1d(rnd(1, 3, 3).to(d), [0]),
    lambda d: torch.ops.aten.upsample_nearest3d(rnd(1, 1, 3, 3, 3).to(d), [0, 3, 3]),
    lambda d: torch.ops.aten.upsample_bilinear2d(rnd(3, 3, 3).to(d), [6, 6], False),
    lambda d: torch.ops.aten.upsample_nearest2d_backward(rnd(1, 3, 5, 6).to(d), [6, 6], [1, 3, 3, 3]),
]


@pytest.mark.parametrize("case", range(len(UPSAMPLE_ERRORS)))
def test_upsample_errors(case):
    expected = _message(lambda: UPSAMPLE_ERRORS[case]("cpu"))
    actual = _message(lambda: UPSAMPLE_ERRORS[case]("tpu"))
    assert re.search(re.escape(expected), actual), f"{actual!r} does not carry {expected!r}"


# ---- padding ------------------------------------------------------------------

PAD_CASES = [
    ((2, 3, 5, 7), dict(pad=(1, 2, 3, 1))),
    ((2, 3, 5, 7), dict(pad=(1, 2, -1, 1), value=2.5)),
    ((2, 3, 5, 7), dict(pad=(-2, -3))),
    ((2, 3, 5, 7), dict(pad=(-7, 2))),
    ((2, 3, 5, 7), dict(pad=(0, 1, 0, 1, 1, 0))),
    ((2, 3, 5, 7), dict(pad=(1, 2, 3, 4), mode="reflect")),
    ((2, 3, 5, 7), dict(pad=(4, 6, 4, 4), mode="reflect")),
    ((2, 3, 5, 7), dict(pad=(1, 2, 3, 4), mode="replicate")),
    ((3, 5, 7), dict(pad=(3, 1, 2, 0), mode="replicate")),
    ((2, 3, 6), dict(pad=(2, 3), mode="reflect")),
    ((2, 3, 6), dict(pad=(2, 3), mode="replicate")),
    ((1, 2, 3, 4, 5), dict(pad=(1, 1, 1, 2, 2, 1), mode="reflect")),
    ((1, 2, 3, 4, 5), dict(pad=(1, 1, 1, 2, 2, 1), mode="replicate")),
    ((2, 3, 5, 7), dict(pad=(1, 1, 1, 1), mode="circular")),
]


@pytest.mark.parametrize("shape,kw", PAD_CASES, ids=str)
def test_pad(shape, kw):
    x = rnd(*shape)
    both(lambda x: F.pad(x, **kw), x)
    both(lambda x: F.pad(x, **kw), x.bfloat16())
    expected = grads(lambda x: F.pad(x, **kw), x)
    actual = grads(lambda x: F.pad(x, **kw), x.to("tpu"))
    assert_same(actual, expected, rtol=1e-6, atol=1e-6)


def test_pad_integer_and_bool():
    x = torch.arange(12).reshape(3, 4)
    both(lambda x: F.pad(x, (1, 2), value=7), x)
    both(lambda x: torch.ops.aten.constant_pad_nd(x, [1, 1, -1, 0], 2.5), x)
    both(lambda x: torch.ops.aten.constant_pad_nd(x, [1, 1], 1), x > 5)
    both(lambda x: F.pad(x, (1, 2, 1, 0), mode="replicate"), x.reshape(1, 3, 4))


@pytest.mark.parametrize("op", ["reflection", "replication"])
def test_negative_pads(op):
    x = rnd(1, 3, 4, 6)
    fn = getattr(torch.ops.aten, f"{op}_pad2d")
    both(lambda x: fn(x, [-1, 2, 0, -2]), x)
    bwd = getattr(torch.ops.aten, f"{op}_pad2d_backward")
    g = rnd(1, 3, 2, 7, seed=3)
    both(lambda g, x: bwd(g, x, [-1, 2, 0, -2]), g, x)


PAD_ERRORS = [
    lambda d: torch.ops.aten.constant_pad_nd(rnd(2, 3).to(d), [1, 1, 1, 1, 1]),
    lambda d: torch.ops.aten.constant_pad_nd(rnd(2, 3).to(d), [1, 1, 1, 1, 1, 1]),
    lambda d: F.pad(rnd(1, 3, 3, 3).to(d), (3, 3, 1, 1), mode="reflect"),
    lambda d: torch.ops.aten.reflection_pad2d(rnd(1, 3, 3, 5).to(d), [1, 1, 3, 3]),
    lambda d: torch.ops.aten.reflection_pad3d(rnd(1, 3, 5, 5, 3).to(d), [1, 1, 1, 1, 5, 1]),
    lambda d: torch.ops.aten.reflection_pad2d(rnd(3, 3).to(d), [1, 1, 1, 1]),
    lambda d: torch.ops.aten.reflection_pad2d(rnd(1, 3, 3, 3).to(d), [1, 1, 1]),
    lambda d: torch.ops.aten.replication_pad2d(rnd(1, 3, 3, 3).to(d), [1, 1, 1]),
    lambda d: torch.ops.aten.replication_pad1d(rnd(1, 2, 4).to(d), [-3, -1]),
    lambda d: torch.ops.aten.replication_pad2d(rnd(1, 3, 3, 3).to(d), [-2, -2, -2, -2]),
    lambda d: torch.ops.aten.replication_pad3d(rnd(1, 3, 3, 3, 3).to(d), [-2, -2, -2, -2, -2, -2]),
    lambda d: torch.ops.aten.reflection_pad2d_backward(
        rnd(1, 3, 4, 5).to(d), rnd(1, 3, 4, 4).to(d), [1, 1, 0, 0]
    ),
]


@pytest.mark.parametrize("case", range(len(PAD_ERRORS)))
def test_pad_errors(case):
    expected = _message(lambda: PAD_ERRORS[case]("cpu"))
    actual = _message(lambda: PAD_ERRORS[case]("tpu"))
    assert re.search(re.escape(expected), actual), f"{actual!r} does not carry {expected!r}"


def test_results_stay_on_device():
    x = rnd(1, 2, 4, 4).to("tpu")
    for y in (
        F.conv2d(x, rnd(3, 2, 3, 3).to("tpu")),
        F.interpolate(x, scale_factor=2.0),
        F.interpolate(x, size=(5, 5), mode="bilinear"),
        F.pad(x, (1, 1, 1, 1), mode="reflect"),
    ):
        assert y.device.type == "tpu"
        assert to_cpu(y).isfinite().all()
