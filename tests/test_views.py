"""Views and in-place semantics match PyTorch: writes through views are
seen by every alias, out= works, versions bump."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_same


def both(fn):
    """Runs |fn(device)| on CPU and tpu and compares what it returns."""
    torch.manual_seed(0)
    expected = fn("cpu")
    actual = fn("tpu")
    assert_same(actual, expected)


def base(device):
    return torch.arange(12, dtype=torch.float32).reshape(3, 4).to(device)


def test_setitem_column(no_fallback):
    def f(d):
        x = base(d)
        x[:, 1] = torch.tensor([10.0, 20.0, 30.0]).to(d)
        return x

    both(f)


def test_transpose_inplace_seen_through_base(no_fallback):
    def f(d):
        x = base(d)
        x.t().add_(1)
        return x

    both(f)


def test_flat_view_slice_zero(no_fallback):
    def f(d):
        x = base(d)
        x.view(-1)[3:7].zero_()
        return x

    both(f)


def test_out_variants(no_fallback):
    def f(d):
        a, b = base(d), base(d) * 2
        out = torch.empty(3, 4, device=d)
        torch.add(a, b, out=out)
        torch.mul(a, 3, out=a)
        return out, a

    both(f)


def test_out_into_a_row_of_an_operand(no_fallback):
    def f(d):
        a = base(d)
        b = torch.ones(4, device=d)
        torch.add(a[0], b, out=a[0])
        return a

    both(f)


def test_out_resizes_an_empty_tensor(no_fallback):
    def f(d):
        a = base(d)
        out = torch.empty(0, device=d)
        torch.mul(a, a, out=out)
        return out

    both(f)


def test_two_views_share_a_storage(no_fallback):
    def f(d):
        x = torch.zeros(6, device=d)
        a = x[:3]
        b = x.view(2, 3)
        a.fill_(5)
        b[1].add_(2)
        return x, a, b

    both(f)


def test_strided_and_stepped_views(no_fallback):
    def f(d):
        x = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5).to(d)
        return [
            x[:, ::2, 1:4] * 1,
            x.permute(2, 0, 1) + 0,
            x[1].t() - 0,
            x.expand(2, 3, 4, 5) * 1,
            x[..., 2].unsqueeze(-1) * 1,
            x.diagonal(dim1=1, dim2=2) + 0,
            x.narrow(2, 1, 3).reshape(-1) * 1,
        ]

    both(f)


def test_inplace_on_stepped_view(no_fallback):
    def f(d):
        x = torch.arange(20, dtype=torch.float32).reshape(4, 5).to(d)
        x[::2, 1::2].mul_(-1)
        x[1:3].t()[2:].add_(100)
        return x

    both(f)


def test_rank8_strided_views(no_fallback):
    """A rank-8 view that is written or read by scatter/gather (its strides do
    not nest) needs no rank-9 index tensor: repeat() on a 4-d tensor copies
    into such a view (diffusers' IP-Adapter-plus image embeddings)."""

    def f(d):
        x = torch.arange(4 * 32, dtype=torch.float32).reshape(4, 1, 1, 32).to(d)
        overlapping = torch.arange(16, dtype=torch.float32).to(d).as_strided((2,) * 8, (1,) * 8)
        return [x.repeat(1, 2, 1, 1), x.repeat(2, 3, 2, 1), overlapping * 1]

    both(f)


def test_version_bumps(no_fallback):
    x = torch.zeros(3, device="tpu")
    v0 = x._version
    x.add_(1)
    assert x._version > v0
    v1 = x._version
    x[0] = 5
    assert x._version > v1


def test_scalars_compile_once():
    import torch_tpu

    x = torch.randn(16, device="tpu")
    _ = (x * 0.123).cpu()  # warm: the first call compiles
    torch_tpu.reset_metrics()
    for i in range(50):
        y = x * (0.5 + i / 7)
        assert torch.allclose(y.cpu(), x.cpu() * (0.5 + i / 7))
    assert torch_tpu.metrics()["compiles"] == 0


def test_scalars_compile_once_from_cold():
    import torch_tpu

    x = torch.randn(17, device="tpu")
    torch_tpu.reset_metrics()
    for i in range(50):
        _ = x * (0.25 + i)
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["compiles"] == 1


def _layouts(d):
    """clone/contiguous/resize_as_ in each memory format: the values and the strides."""
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5).to(d)
    v = torch.arange(2 * 3 * 2 * 4 * 5, dtype=torch.float32).reshape(2, 3, 2, 4, 5).to(d)
    cl = x.contiguous(memory_format=torch.channels_last)
    out = [cl, x.clone(memory_format=torch.channels_last), cl.clone(), cl.contiguous()]
    out.append(v.contiguous(memory_format=torch.channels_last_3d))
    flat = torch.zeros(x.numel(), device=d)
    out.append(flat.resize_as_(cl, memory_format=torch.preserve_format))
    return out


def test_memory_formats_keep_pytorchs_strides(no_fallback):
    expected, actual = _layouts("cpu"), _layouts("tpu")
    for a, e in zip(actual, expected):
        assert a.stride() == e.stride()
        assert a.cpu().stride() == e.stride()
    assert_same(actual[:-1], expected[:-1])  # resize_as_ keeps the values uninitialised


def _pointwise_layouts(d):
    """Pointwise results of channels-last, row-major, broadcast and 0-d operands, as
    TensorIterator lays them out: the first operand whose strides decide wins."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 5, generator=g).to(d)
    cl = x.contiguous(memory_format=torch.channels_last)
    cl3 = torch.randn(2, 3, 2, 4, 5, generator=g).to(d).contiguous(memory_format=torch.channels_last_3d)
    bias = torch.randn(1, 3, 1, 1, generator=g).to(d)
    return [
        cl + x,  # channels-last: the first operand decides
        x + cl,  # row-major
        bias + cl,  # the broadcast bias cannot decide: channels-last
        cl * 2,
        torch.where(cl > 0, cl, torch.tensor(0.0, device=d)),
        torch.nn.functional.gelu(cl),
        torch.relu(cl3),
        cl.to(torch.float64),
        torch.softmax(cl, 1),  # not pointwise: row-major, as on CPU
        torch.randn(3, 4, 5, generator=g).to(d) + cl,  # the 3-d operand decides: row-major
    ]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_pointwise_results_keep_channels_last_as_on_cpu(no_fallback, mode):
    from torch_tpu import EagerMode, eager_mode

    expected = _pointwise_layouts("cpu")
    with eager_mode(EagerMode.DEFER_NEVER if mode == "strict" else EagerMode.DEFER_AND_FUSE):
        actual = _pointwise_layouts("tpu")
        for a, e in zip(actual, expected):
            assert a.stride() == e.stride()
    assert_same(actual, expected)


def test_channels_last_of_the_wrong_rank_is_refused():
    for d in ("cpu", "tpu"):
        with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
            torch.zeros(3, 4, device=d).clone(memory_format=torch.channels_last)


def _attention_tail(x, residual):
    """The end of diffusers' classic attention over an image (the VAE's mid
    block): tokens back to channels, a residual add, a rescale. The reshape of
    the transposed tokens is a channels-last view, and so are the results."""
    h = x.transpose(-1, -2).reshape(residual.shape)
    return (h + residual) / 1.5


@pytest.mark.parametrize("batch", [1, 2])
def test_a_channels_last_result_is_written_by_a_transpose_not_a_scatter(
    no_fallback, tpu_env, tmp_path, batch
):
    from torch_tpu import TpuBackend

    tpu_env("TORCH_TPU_DUMP_DIR", str(tmp_path))
    g = torch.Generator().manual_seed(0)
    x, residual = torch.randn(batch, 49, 13, generator=g), torch.randn(batch, 13, 7, 7, generator=g)
    expected = _attention_tail(x, residual)
    compiled = torch.compile(_attention_tail, backend=TpuBackend(), dynamic=False)
    got = compiled(x.to("tpu"), residual.to("tpu"))
    assert got.shape == expected.shape
    assert_same(got, expected)
    text = "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.mlir")))
    assert "stablehlo.transpose" in text
    assert "stablehlo.scatter" not in text
