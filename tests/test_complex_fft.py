"""complex64 / complex128 on "tpu" and torch.fft: storage and copies, printing, real views of
complex storage, the complex elementwise basics, and every torch.fft transform compared with
CPU within the float32 table of tests/test_opinfo.py, with the CPU fallback off."""

from __future__ import annotations

import pytest
import torch

import torch_tpu

# assert_close's float32 defaults, the table test_opinfo.py uses for f32 and complex64 results
RTOL, ATOL = 1.3e-6, 1e-5


def same(actual: torch.Tensor, expected: torch.Tensor, scale: float = 1.0) -> None:
    """The tpu result equals CPU's: dtype, shape, values within the f32 table. |scale| widens
    the absolute tolerance for transforms whose outputs are sums of |scale| terms of order 1."""
    assert actual.device.type == "tpu"
    actual = actual.cpu()
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL * scale)


def run(fn, *inputs, **kwargs):
    """fn(*inputs, **kwargs) on CPU and on tpu with the CPU fallback off; returns (tpu result,
    CPU result)."""
    expected = fn(*inputs, **kwargs)
    torch_tpu.reset_metrics()
    with torch_tpu.cpu_fallback_mode(False):
        actual = fn(*(x.to("tpu") for x in inputs), **kwargs)
    assert torch_tpu.metrics()["cpu_fallbacks"] == {}
    return actual, expected


def real_input(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def complex_input(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.complex64, generator=torch.Generator().manual_seed(sum(shape)))


# ---- storage, copies, printing ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_copy_round_trip_is_bit_exact(dtype, no_fallback):
    x = torch.randn(5, 7, dtype=dtype)
    x[0, 0] = complex(float("nan"), float("-inf"))
    back = x.to("tpu").cpu()
    assert back.dtype == dtype
    assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))
    # a strided (transposed) view reads through the engine's view machinery
    got = x.to("tpu").t().contiguous().cpu()
    assert torch.equal(got.view(torch.uint8), x.t().contiguous().view(torch.uint8))


def test_factories_and_fill(no_fallback):
    z = torch.zeros(2, 3, dtype=torch.complex64, device="tpu")
    assert torch.equal(z.cpu(), torch.zeros(2, 3, dtype=torch.complex64))
    e = torch.empty(4, dtype=torch.complex64, device="tpu").fill_(2.5)
    assert torch.equal(e.cpu(), torch.full((4,), 2.5 + 0j, dtype=torch.complex64))
    o = torch.ones(3, dtype=torch.complex64, device="tpu")
    assert torch.equal(o.cpu(), torch.ones(3, dtype=torch.complex64))


def test_print(no_fallback):
    x = torch.tensor([1.5 - 2j, -0.25 + 0j], dtype=torch.complex64)
    text = str(x.to("tpu"))
    assert text == str(x).replace(")", ", device='tpu:0')")


# ---- real views of complex storage ---------------------------------------------------------


def test_real_imag_view_as_real_alias(no_fallback):
    x = complex_input(3, 4)
    t = x.to("tpu")
    assert torch.equal(t.real.cpu(), x.real)
    assert torch.equal(t.imag.cpu(), x.imag)
    assert torch.equal(torch.view_as_real(t).cpu(), torch.view_as_real(x))
    # views alias: a write through .imag / view_as_real changes the complex tensor
    t.imag.mul_(2)
    x.imag.mul_(2)
    torch.view_as_real(t)[..., 0].add_(1)
    torch.view_as_real(x)[..., 0].add_(1)
    assert torch.equal(t.cpu(), x)
    pairs = torch.randn(3, 2)
    assert torch.equal(torch.view_as_complex(pairs.to("tpu")).cpu(), torch.view_as_complex(pairs))


# ---- elementwise basics ------------------------------------------------------------------


BASICS = {
    "abs": lambda z, w: z.abs(),
    "angle": lambda z, w: z.angle(),
    "conj": lambda z, w: z.conj(),
    "conj_physical": lambda z, w: torch.conj_physical(z),
    "resolve_conj": lambda z, w: z.conj().resolve_conj(),
    "conj_mul": lambda z, w: z.conj() * w,
    "add": lambda z, w: z + w,
    "sub": lambda z, w: z - w,
    "mul": lambda z, w: z * w,
    "div": lambda z, w: z / w,
    "mul_real_scalar": lambda z, w: z * 2.5,
    "mul_real_tensor": lambda z, w: z * w.real,
    "sum": lambda z, w: z.sum(),
    "sum_dim": lambda z, w: z.sum(1),
    "mean": lambda z, w: z.mean(0),
    "complex": lambda z, w: torch.complex(z.real, w.imag),
    "polar": lambda z, w: torch.polar(z.abs(), w.angle()),
    "exp": lambda z, w: z.exp(),
    "neg": lambda z, w: -z,
    "eq": lambda z, w: z == w,
    "to_complex128": lambda z, w: z.to(torch.complex128),
    "from_real": lambda z, w: z.real.to(torch.complex64) + w,
    "matmul": lambda z, w: z @ w.t(),
}


@pytest.mark.parametrize("name", sorted(BASICS))
def test_elementwise_basics(name):
    z, w = complex_input(3, 4), complex_input(3, 5)[:, :4]
    actual, expected = run(BASICS[name], z, w)
    if expected.dtype.is_complex or expected.dtype.is_floating_point:
        same(actual, expected)
    else:
        assert torch.equal(actual.cpu(), expected)


def test_foreach_with_real_number_lists(no_fallback):
    """A float[] item reaches the device as a real parameter, made complex in the program."""
    cpu = [complex_input(3), complex_input(2, 2)]
    tpu = [x.to("tpu") for x in cpu]
    for xs in (cpu, tpu):
        torch._foreach_mul_(xs, [2.0, -3.0])
        torch._foreach_add_(xs, 1.5)
    for a, e in zip(tpu, cpu):
        same(a, e)


# ---- torch.fft ---------------------------------------------------------------------------------

NORMS = [None, "ortho", "forward"]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [None, 5, 12])  # as is, trimmed, zero-padded
@pytest.mark.parametrize("length", [8, 9])  # even and odd
def test_rfft_irfft(norm, n, length):
    x = real_input(3, length)
    actual, expected = run(lambda v: torch.fft.rfft(v, n=n, norm=norm), x)
    same(actual, expected, scale=length)
    spectrum = torch.fft.rfft(x)
    actual, expected = run(lambda s: torch.fft.irfft(s, n=n, norm=norm), spectrum)
    same(actual, expected, scale=length)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("complex_in", [False, True])
def test_fft_ifft(norm, dim, complex_in):
    x = complex_input(6, 7, 3) if complex_in else real_input(6, 7, 3)
    for fn in (torch.fft.fft, torch.fft.ifft):
        actual, expected = run(fn, x, dim=dim, norm=norm)
        same(actual, expected, scale=8)
    actual, expected = run(lambda v: torch.fft.fft(v, n=4, dim=dim, norm=norm), x)
    same(actual, expected, scale=8)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dim", [(-2, -1), (0, 2), (2, 0)])
def test_two_dim_transforms(norm, dim):
    x, z = real_input(4, 5, 6), complex_input(4, 5, 6)
    for fn, v in ((torch.fft.fft2, z), (torch.fft.ifft2, z), (torch.fft.fft2, x), (torch.fft.rfft2, x)):
        actual, expected = run(fn, v, dim=dim, norm=norm)
        same(actual, expected, scale=30)
    half = torch.fft.rfft2(x, dim=dim)
    s = (4, 6) if dim == (0, 2) else None
    actual, expected = run(torch.fft.irfft2, half, s=s, dim=dim, norm=norm)
    same(actual, expected, scale=30)


@pytest.mark.parametrize("norm", NORMS)
def test_n_dim_transforms(norm):
    """rfftn and fftn over all dims of a 4-d tensor: more than the three dims one stablehlo.fft
    takes, so the rule chains transforms."""
    x, z = real_input(3, 4, 2, 5), complex_input(3, 4, 2, 5)
    for fn, v in ((torch.fft.rfftn, x), (torch.fft.fftn, z), (torch.fft.ifftn, z), (torch.fft.hfftn, z)):
        actual, expected = run(fn, v, norm=norm)
        same(actual, expected, scale=120)
    actual, expected = run(lambda u: torch.fft.irfftn(u, s=(3, 4, 2, 8), norm=norm), z)
    same(actual, expected, scale=120)


def test_fft_in_fused_mode_and_under_compile():
    x = real_input(4, 16)
    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        actual, expected = run(lambda v: torch.fft.irfft(torch.fft.rfft(v) * 2, n=16), x)
    same(actual, expected, scale=16)


# ---- bad input ---------------------------------------------------------------------------------


def test_complex32_is_refused_with_the_op_and_dtype():
    with pytest.raises(RuntimeError, match="tpu does not support dtype ComplexHalf"):
        torch.zeros(2, dtype=torch.complex32, device="tpu")


def test_bad_fft_input_names_the_op():
    x = torch.randn(4, 3).to("tpu")
    with torch_tpu.cpu_fallback_mode(False):
        with pytest.raises(RuntimeError, match=r"_fft_c2c.*complex64 or complex128 input, got Float"):
            torch.ops.aten._fft_c2c(x, [1], 0, True)
        with pytest.raises(RuntimeError, match=r"_fft_r2c.*float32 or float64 input, got ComplexFloat"):
            torch.ops.aten._fft_r2c(x.to(torch.complex64), [1], 0, True)
        with pytest.raises(RuntimeError, match="complex scalars"):
            x.to(torch.complex64) * 1j


def test_write_through_conj_view(no_fallback):
    """PyTorch's conjugate fallback turns an in-place op on conj() into conj_physical_ around it."""
    x = complex_input(3)
    z = x.to("tpu")
    z.conj().mul_(2).add_(1)
    x.conj().mul_(2).add_(1)
    same(z, x)
