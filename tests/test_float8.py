"""8-bit floats on "tpu": storage, copies, casts bit for bit as PyTorch's CPU
kernels (saturation of float8_e4m3fn, NaN bit patterns), matmul; and
``param.data = t`` across cpu and tpu (set_data), as CUDA allows."""

import pytest
import torch

import torch_tpu  # noqa: F401

from conftest import assert_same

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def edge_values(dtype: torch.dtype) -> torch.Tensor:
    """Every bf16 and f16 bit pattern as the source (all signs, NaNs,
    infinities, subnormals, and the values around each float8's range and
    rounding midpoints), plus values beyond float8 range."""
    every_bf16 = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    every_f16 = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    big = torch.tensor([448.0, 449.0, 464.0, 465.0, 480.0, 57344.0, 61439.0, 61440.0, 1e30, -1e30, 3.0e38])
    values = torch.cat([every_bf16.float(), every_f16.float(), big, -big])
    return values.to(dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.cpu().view(torch.uint8)


def assert_widens_as_cpu(f8_tpu: torch.Tensor, f8_cpu: torch.Tensor, wide: torch.dtype) -> None:
    """Widening is exact, bit for bit, except for the payload of a NaN, which
    PyTorch itself does not keep consistently (float8 -> bf16 drops a NaN's
    sign, float8 -> f32 sets other mantissa bits than XLA): NaN where CPU has NaN."""
    got, want = f8_tpu.to(wide).cpu(), f8_cpu.to(wide)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    as_int = {2: torch.int16, 4: torch.int32}[want.element_size()]
    assert torch.equal(got[~nan].view(as_int), want[~nan].view(as_int))


@pytest.mark.parametrize("f8", FLOAT8, ids=str)
@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_cast_to_float8_and_back_is_bit_exact(f8, source, no_fallback):
    x = edge_values(source)
    on_tpu = x.to("tpu").to(f8)
    assert on_tpu.dtype == f8 and on_tpu.device.type == "tpu"
    expected = x.to(f8)
    mismatch = (bits(on_tpu) != bits(expected)).nonzero().flatten()
    assert mismatch.numel() == 0, (
        f"{mismatch.numel()} casts differ, e.g. {x[mismatch[:5]].tolist()}:"
        f" tpu {bits(on_tpu)[mismatch[:5]].tolist()} cpu {bits(expected)[mismatch[:5]].tolist()}"
    )
    # and back: every float8 value widens exactly
    assert_widens_as_cpu(on_tpu, expected, source)


@pytest.mark.parametrize("f8", FLOAT8, ids=str)
def test_every_float8_value_widens_exactly(f8, no_fallback):
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(f8)
    on_tpu = every.to("tpu")
    assert torch.equal(bits(on_tpu), bits(every))  # copies keep the bits
    for wide in (torch.float32, torch.bfloat16, torch.float16):
        assert_widens_as_cpu(on_tpu, every, wide)
    assert torch.equal(bits(on_tpu.clone()), bits(every))


def test_float8_storage_views_and_printing(no_fallback):
    x = torch.randn(4, 6).to(torch.float8_e4m3fn)
    t = x.to("tpu")
    assert torch.equal(bits(t[1:3, ::2]), bits(x[1:3, ::2]))
    assert torch.equal(bits(t.t().contiguous()), bits(x.t().contiguous()))
    assert "float8_e4m3fn" in repr(t)
    empty = torch.empty(3, dtype=torch.float8_e5m2, device="tpu")
    empty.copy_(torch.tensor([1.0, 2.0, -3.0]))
    assert empty.float().cpu().tolist() == [1.0, 2.0, -3.0]


def test_float8_matmul_matches_cpu(no_fallback):
    a = torch.randn(8, 16).to(torch.float8_e4m3fn)
    b = torch.randn(16, 4).to(torch.float8_e4m3fn)
    got = a.to("tpu") @ b.to("tpu")
    assert got.dtype == torch.float8_e4m3fn
    # the same products in f32, rounded once to float8 (CPU's kernel does the same)
    want = (a.float() @ b.float()).to(torch.float8_e4m3fn)
    assert_same(got.float(), want.float(), atol=0.0, rtol=0.125)


def test_layerwise_casting_module_round_trip(no_fallback):
    """diffusers' layerwise casting: weights stored in float8, cast to the
    compute dtype for the forward and back after."""
    lin = torch.nn.Linear(16, 8).to("tpu")
    ref = torch.nn.Linear(16, 8)
    ref.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    for m in (lin, ref):
        m.to(torch.float8_e4m3fn)
        m.to(torch.float32)
    assert torch.equal(lin.weight.cpu(), ref.weight)
    x = torch.randn(2, 16)
    assert_same(lin(x.to("tpu")), ref(x))


@pytest.mark.parametrize("weight_dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float32])
def test_conv_backward_with_weight_of_another_dtype(weight_dtype, no_fallback):
    """diffusers' layerwise casting puts the weight back into float8 storage
    after the forward, so the backward sees a float8 weight and bf16
    activations: as on the CPU, the weight is read in the input's dtype and
    every gradient comes back in the input's dtype."""
    torch.manual_seed(0)
    dy = torch.randn(2, 3, 8, 8, dtype=torch.bfloat16)
    x = torch.randn(2, 2, 8, 8, dtype=torch.bfloat16)
    w = torch.randn(3, 2, 3, 3).to(weight_dtype)
    args = ([3], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
    # the reference reads the weight in the input's dtype itself and sums in f32, as we do:
    # CPU's own kernel takes a weight of another dtype on AVX512 hosts only (on AVX2 it
    # raises), and there rounds its bf16 partial sums
    f32 = (dy.float(), x.float(), w.to(x.dtype).float())
    want = [g.to(x.dtype) for g in torch.ops.aten.convolution_backward(*f32, *args)]
    got = torch.ops.aten.convolution_backward(dy.to("tpu"), x.to("tpu"), w.to("tpu"), *args)
    assert_same(list(got), list(want))


def test_layerwise_casting_conv_training(no_fallback):
    """The same through autograd, as diffusers' test_layerwise_casting_training:
    the gradients match the same steps on the CPU."""

    def grads(device):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(2, 3, 3, padding=1).to(device, torch.bfloat16)
        x = torch.randn(2, 2, 8, 8).to(device, torch.bfloat16).requires_grad_()
        conv.to(torch.float8_e4m3fn)
        conv.to(torch.bfloat16)  # the pre-forward cast
        y = conv(x)
        if device == "tpu":  # the post-forward cast: the saved weight is float8 now
            # (the CPU reference keeps it in bf16, the same values: CPU's kernel takes a
            # float8 weight with bf16 activations on AVX512 hosts only)
            conv.to(torch.float8_e4m3fn)
        y.float().square().mean().backward()
        return [x.grad, conv.weight.grad, conv.bias.grad]

    assert_same(grads("tpu"), grads("cpu"))


@pytest.mark.parametrize("start", ["cpu", "tpu"])
def test_set_data_across_devices(start, no_fallback):
    other = "tpu" if start == "cpu" else "cpu"
    p = torch.nn.Parameter(torch.randn(3, 4, device=start))
    new = torch.arange(12.0).reshape(3, 4).to(other)
    p.data = new
    assert p.device.type == other and isinstance(p, torch.nn.Parameter) and p.requires_grad
    assert torch.equal(p.detach().cpu(), torch.arange(12.0).reshape(3, 4))
    (p * 2).sum().backward()
    assert p.grad.device.type == other
    assert torch.equal(p.grad.cpu(), torch.full((3, 4), 2.0))
    p.data = p.data.to(start)  # and back, as group offloading does
    assert p.device.type == start


def test_set_data_still_refuses_other_layouts():
    p = torch.nn.Parameter(torch.randn(2, 2, device="tpu"))
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        p.data = torch.eye(2).to_sparse()


def test_record_stream_is_accepted_for_tpu_streams(no_fallback):
    """diffusers' group offloading with streams calls record_stream; a tpu
    buffer lives until its queued work is done, so there is nothing to record."""
    x = torch.ones(3, device="tpu")
    x.record_stream(torch.tpu.Stream())
    with pytest.raises(RuntimeError, match="expected a tpu stream"):
        x.record_stream(torch.Stream("cpu"))


def test_safetensors_load_file_onto_tpu(tmp_path, no_fallback):
    """diffusers' group offloading to disk loads with device="tpu", a name
    safetensors' own parser refuses."""
    st = pytest.importorskip("safetensors.torch")
    path = tmp_path / "w.safetensors"
    st.save_file({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}, str(path))
    loaded = st.load_file(str(path), device="tpu")
    assert {k: v.device.type for k, v in loaded.items()} == {"w": "tpu", "b": "tpu"}
    assert torch.equal(loaded["w"].cpu(), torch.arange(6.0).reshape(2, 3))
    assert st.load_file(str(path))["w"].device.type == "cpu"  # other devices: safetensors as it is
