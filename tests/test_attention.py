"""scaled_dot_product_attention on "tpu" against PyTorch CPU: the fused
(overrideable) path as one program, masks, causal, scale, GQA, backward, the
math path, and nn.MultiheadAttention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_tpu

from conftest import assert_same, to_cpu, to_tpu

FLOAT = [torch.float32, torch.bfloat16]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def qkv(b, h, lq, s, d, dtype, hk=None, dv=None, seed=0):
    hk = hk or h
    q = make((b, h, lq, d), dtype, seed)
    k = make((b, hk, s, d), dtype, seed + 1)
    v = make((b, hk, s, dv or d), dtype, seed + 2)
    return q, k, v


def reference(q, k, v, **kw):
    """CPU SDPA in f32, rounded to the inputs' dtype: bf16 CPU kernels differ
    from each other by more than a bf16 ulp, f32 is the honest reference."""
    mask = kw.get("attn_mask")
    if mask is not None and mask.dtype != torch.bool:
        kw = dict(kw, attn_mask=mask.float())
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), **kw)
    return out.to(q.dtype)


def sdpa_both(q, k, v, tol=None, **kw):
    expected = reference(q, k, v, **kw)
    kw_tpu = {n: to_tpu(x) for n, x in kw.items()}
    actual = F.scaled_dot_product_attention(*to_tpu((q, k, v)), **kw_tpu)
    assert_same(actual, expected, **(tol or {}))
    return actual


SHAPES = [  # (B, H, L, S, D): Flux-like self attention, cross attention
    (1, 4, 64, 64, 32),
    (1, 4, 256, 256, 64),
    (2, 2, 48, 80, 32),
    (2, 3, 33, 17, 16),
]


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sdpa_forward(no_fallback, shape, dtype):
    sdpa_both(*qkv(*shape, dtype))


def test_sdpa_value_head_dim_differs(no_fallback):
    sdpa_both(*qkv(2, 2, 24, 40, 32, torch.float32, dv=16))


def test_sdpa_3d(no_fallback):
    q, k, v = make((3, 20, 16)), make((3, 28, 16), seed=1), make((3, 28, 16), seed=2)
    sdpa_both(q, k, v)


def bools(shape, seed, p_keep=0.7):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) < p_keep


MASKS = {
    "bool_b1ls": lambda b, h, lq, s: bools((b, 1, lq, s), 5),
    "bool_ls": lambda b, h, lq, s: bools((lq, s), 6),
    "float_b1ls": lambda b, h, lq, s: make((b, 1, lq, s), seed=7),
    "float_ls": lambda b, h, lq, s: make((lq, s), seed=8),
    "float_bhls": lambda b, h, lq, s: make((b, h, lq, s), seed=9),
    "float_b11s": lambda b, h, lq, s: make((b, 1, 1, s), seed=10),
}


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("mask", list(MASKS))
def test_sdpa_masks(no_fallback, mask, dtype):
    b, h, lq, s, d = 2, 4, 64, 96, 32
    m = MASKS[mask](b, h, lq, s)
    if m.dtype != torch.bool:
        m = m.to(dtype)
    sdpa_both(*qkv(b, h, lq, s, d, dtype), attn_mask=m)


def test_sdpa_fully_masked_rows(no_fallback):
    q, k, v = qkv(1, 2, 8, 12, 16, torch.float32)
    m = torch.ones(8, 12, dtype=torch.bool)
    m[3] = False
    out = sdpa_both(q, k, v, attn_mask=m).cpu()
    assert torch.equal(out[:, :, 3], torch.zeros_like(out[:, :, 3]))
    fm = torch.zeros(8, 12)
    fm[5] = float("-inf")
    sdpa_both(q, k, v, attn_mask=fm)


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("ls", [(64, 64), (32, 80), (80, 32)], ids=str)
def test_sdpa_causal(no_fallback, ls, dtype):
    sdpa_both(*qkv(1, 4, ls[0], ls[1], 32, dtype), is_causal=True)


def test_sdpa_causal_and_mask(no_fallback):
    q, k, v = qkv(1, 2, 16, 16, 8, torch.float32)
    m = make((16, 16), seed=3)
    # PyTorch's CPU (flash) kernel applies both; so do we
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)
    actual = F.scaled_dot_product_attention(*to_tpu((q, k, v)), attn_mask=m.to("tpu"), is_causal=True)
    assert_same(actual, expected)


@pytest.mark.parametrize("scale", [0.05, 1.0, -0.3])
def test_sdpa_scale(no_fallback, scale):
    sdpa_both(*qkv(1, 4, 40, 56, 32, torch.float32), scale=scale)


def test_sdpa_scale_does_not_recompile(no_fallback):
    q, k, v = to_tpu(qkv(1, 2, 16, 16, 8, torch.float32))
    F.scaled_dot_product_attention(q, k, v, scale=0.25).cpu()
    before = torch_tpu.metrics()["compiles"]
    out = F.scaled_dot_product_attention(q, k, v, scale=0.75)
    assert torch_tpu.metrics()["compiles"] == before
    assert_same(out, F.scaled_dot_product_attention(*to_cpu((q, k, v)), scale=0.75))


@pytest.mark.parametrize("dtype", FLOAT)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gqa(no_fallback, causal, dtype):
    sdpa_both(*qkv(2, 8, 48, 48, 32, dtype, hk=2), is_causal=causal, enable_gqa=True)


def test_sdpa_gqa_mask(no_fallback):
    q, k, v = qkv(1, 8, 32, 40, 16, torch.float32, hk=2)
    sdpa_both(q, k, v, attn_mask=make((1, 8, 32, 40), seed=4), enable_gqa=True)


def test_sdpa_gqa_without_flag_matches_cpu(no_fallback):
    # without enable_gqa, the math path decides (as on CPU): one kv head
    # broadcasts, two heads for eight is an error
    q, k, v = qkv(1, 8, 16, 16, 8, torch.float32, hk=1)
    sdpa_both(q, k, v)
    q, k, v = qkv(1, 8, 16, 16, 8, torch.float32, hk=2)
    with pytest.raises(RuntimeError, match="must match the size"):
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(RuntimeError, match="must match the size"):
        F.scaled_dot_product_attention(*to_tpu((q, k, v)))


@pytest.mark.parametrize(
    "case",
    [
        dict(shape=(1, 4, 64, 64, 32)),
        dict(shape=(2, 2, 24, 40, 16), is_causal=True),
        dict(shape=(2, 4, 32, 32, 16), hk=2, enable_gqa=True),
        dict(shape=(2, 8, 24, 24, 16), hk=2, enable_gqa=True, is_causal=True),
        dict(shape=(1, 2, 16, 24, 8), mask="bool"),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", FLOAT)
def test_sdpa_backward(no_fallback, case, dtype):
    case = dict(case)
    b, h, lq, s, d = case.pop("shape")
    hk = case.pop("hk", None)
    mask = case.pop("mask", None)
    q, k, v = qkv(b, h, lq, s, d, dtype, hk=hk)
    if mask == "bool":
        case["attn_mask"] = bools((lq, s), 1, 0.8)
    grad = make((b, h, lq, d), dtype, seed=11)

    def grads(q, k, v, grad, kw):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        out.backward(grad)
        return out, q.grad, k.grad, v.grad

    expected = grads(q.float(), k.float(), v.float(), grad.float(), case)
    expected = [x.to(dtype) for x in expected]
    actual = grads(*to_tpu((q, k, v, grad)), {n: to_tpu(x) for n, x in case.items()})
    tol = dict(rtol=4e-2, atol=4e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    assert_same(actual, expected, **tol)


@pytest.mark.parametrize("mask_shape", [(24, 32), (2, 1, 24, 32), (2, 4, 24, 32)], ids=str)
def test_sdpa_backward_float_mask_grad(no_fallback, mask_shape):
    q, k, v = qkv(2, 4, 24, 32, 16, torch.float32)
    m = make(mask_shape, seed=12)
    grad = make((2, 4, 24, 16), seed=13)

    def grads(q, k, v, m, grad):
        q, k, v, m = (x.detach().requires_grad_() for x in (q, k, v, m))
        F.scaled_dot_product_attention(q, k, v, attn_mask=m).backward(grad)
        return q.grad, k.grad, v.grad, m.grad

    assert_same(grads(*to_tpu((q, k, v, m, grad))), grads(q, k, v, m, grad), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("needs", ["q", "kv", "v"])
def test_sdpa_backward_some_inputs(no_fallback, needs):
    q, k, v = qkv(2, 4, 20, 28, 16, torch.float32, hk=2)
    grad = make((2, 4, 20, 16), seed=14)

    def grads(q, k, v, grad):
        xs = {"q": q, "k": k, "v": v}
        for name in needs:
            xs[name] = xs[name].detach().requires_grad_()
        F.scaled_dot_product_attention(xs["q"], xs["k"], xs["v"], enable_gqa=True).backward(grad)
        return [xs[name].grad for name in needs]

    assert_same(grads(*to_tpu((q, k, v, grad))), grads(q, k, v, grad), rtol=1e-4, atol=1e-5)


def test_sdpa_3d_backward(no_fallback):
    q, k, v = make((3, 20, 16)), make((3, 28, 16), seed=1), make((3, 28, 16), seed=2)

    def grads(q, k, v):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum().backward()
        return q.grad, k.grad, v.grad

    assert_same(grads(*to_tpu((q, k, v))), grads(q, k, v), rtol=1e-4, atol=1e-5)


def test_sdpa_one_program(no_fallback):
    q, k, v = to_tpu(qkv(1, 4, 64, 64, 32, torch.float32))
    m = make((1, 1, 64, 64)).to("tpu")
    for kw in [{}, dict(attn_mask=m), dict(is_causal=True), dict(scale=0.3)]:
        F.scaled_dot_product_attention(q, k, v, **kw).cpu()  # compile outside the count
        before = torch_tpu.metrics()["executions"]
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        assert torch_tpu.metrics()["executions"] - before == 1, kw
        out.cpu()


def test_sdpa_gqa_one_program(no_fallback):
    q, k, v = to_tpu(qkv(1, 8, 32, 32, 16, torch.float32, hk=2))
    F.scaled_dot_product_attention(q, k, v, enable_gqa=True).cpu()
    before = torch_tpu.metrics()["executions"]
    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert torch_tpu.metrics()["executions"] - before == 1


def test_sdpa_fused_op_outputs(no_fallback):
    q, k, v = qkv(2, 4, 24, 40, 16, torch.float32)
    res = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*to_tpu((q, k, v)))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
    assert_same(res[0], out)
    assert_same(res[1], lse)
    assert res[2] is None and res[3] is None and res[8] is None
    assert res[4] == 24 and res[5] == 40


def test_sdpa_choice_is_overrideable():
    q, k, v = to_tpu(qkv(1, 2, 8, 8, 8, torch.float32))
    assert torch._fused_sdp_choice(q, k, v) == int(SDPBackend.OVERRIDEABLE)
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.5) == int(SDPBackend.MATH)
    with sdpa_kernel(SDPBackend.MATH):
        assert torch._fused_sdp_choice(q, k, v) == int(SDPBackend.MATH)


@pytest.mark.parametrize("dtype", FLOAT)
def test_sdpa_math_path(no_fallback, dtype):
    q, k, v = qkv(1, 4, 32, 48, 16, dtype)
    m = make((1, 1, 32, 48), dtype, seed=3)
    with sdpa_kernel(SDPBackend.MATH):
        sdpa_both(q, k, v, attn_mask=m)
        sdpa_both(q, k, v, is_causal=True)
    expected = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, m)
    actual = torch.ops.aten._scaled_dot_product_attention_math(*to_tpu((q, k, v, m)))
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    assert_same(actual, expected, **tol)


def test_sdpa_math_path_backward(no_fallback):
    q, k, v = qkv(1, 2, 16, 16, 8, torch.float32)

    def grads(q, k, v):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        return q.grad, k.grad, v.grad

    assert_same(grads(*to_tpu((q, k, v))), grads(q, k, v), rtol=1e-4, atol=1e-5)


def test_sdpa_dropout_takes_math_path():
    q, k, v = to_tpu(qkv(1, 2, 16, 16, 8, torch.float32))
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5).cpu()
    assert out.shape == (1, 2, 16, 8) and torch.isfinite(out).all()


def test_sdpa_errors():
    q, k, v = qkv(1, 2, 8, 8, 8, torch.float32)
    for args in [(q, k, v.double()), (q, k[..., :4], v)]:
        with pytest.raises(RuntimeError) as cpu_err:
            F.scaled_dot_product_attention(*args)
        with pytest.raises(RuntimeError) as tpu_err:
            F.scaled_dot_product_attention(*to_tpu(args))
        assert str(cpu_err.value).splitlines()[0] in str(tpu_err.value)


def test_fused_op_dropout_error():
    q, k, v = to_tpu(qkv(1, 2, 8, 8, 8, torch.float32))
    with pytest.raises(RuntimeError, match="dropout_p > 0"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, None, 0.5)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(no_fallback, batch_first):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first).eval()
    x = make((2, 10, 32) if batch_first else (10, 2, 32), seed=21)
    mask = bools((10, 10), 2, 0.8)
    with torch.no_grad():
        expected = mha(x, x, x, need_weights=False, attn_mask=~mask)[0]
        mha_tpu = mha.to("tpu")
        actual = mha_tpu(*to_tpu((x, x, x)), need_weights=False, attn_mask=(~mask).to("tpu"))[0]
    assert_same(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        dict(shape=(2, 4, 48, 23, 16), rows=16),
        dict(shape=(1, 4, 64, 64, 16), rows=16, is_causal=True),
        dict(shape=(2, 8, 48, 19, 16), hk=2, enable_gqa=True, is_causal=True, rows=24),
        dict(shape=(2, 4, 37, 23, 16), rows=37),  # a prime L: one block per batch entry
        dict(shape=(1, 2, 48, 24, 8), mask="bool", rows=16),  # a mask: one block, no loop
    ],
    ids=str,
)
def test_sdpa_query_blocks_match_one_block(no_fallback, case, tpu_env, tmp_path):
    # A small budget makes the call a while loop over blocks of query rows
    # (as long sequences are): each block is an exact softmax over all keys,
    # so results match CPU; the dumped modules show the loop.
    case = dict(case)
    b, h, lq, s, d = case.pop("shape")
    hk = case.pop("hk", None)
    rows = case.pop("rows")
    group = h // (hk or h)
    tpu_env("TORCH_TPU_SDPA_BLOCK_BYTES", str(rows * group * s * 4))
    tpu_env("TORCH_TPU_DUMP_DIR", str(tmp_path))
    masked = case.pop("mask", None) == "bool"
    if masked:
        case["attn_mask"] = bools((lq, s), 3, 0.8)
    q, k, v = qkv(b, h, lq, s, d, torch.float32, hk=hk, seed=5)
    grad = make((b, h, lq, d), seed=12)

    def grads(q, k, v, grad, kw):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        out.backward(grad)
        return out, q.grad, k.grad, v.grad

    expected = grads(q, k, v, grad, case)
    actual = grads(*to_tpu((q, k, v, grad)), {n: to_tpu(x) for n, x in case.items()})
    assert_same(actual, expected, rtol=1e-4, atol=1e-5)
    attention = [m for m in (p.read_text() for p in tmp_path.glob("*.mlir")) if "stablehlo.exponential" in m]
    assert len(attention) == 2  # forward and backward
    for m in attention:
        if masked:
            assert "stablehlo.while" not in m
        else:
            assert m.count("stablehlo.while") == 1 and "stablehlo.dynamic_update_slice" in m
            assert f"x{rows}x{s}xf32>" in m  # one block's scores, [1, (G), rows, S]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_flash_attention_op_returns_output_and_logsumexp(no_fallback, causal, scale):
    # aten::_scaled_dot_product_flash_attention (diffusers' "_native_flash"
    # backend calls it for the logsumexp its ring attention merges with),
    # against the CPU's own flash kernel (the CPU's op of this name)
    q, k, v = qkv(2, 3, 24, 40, 16, torch.float32)
    if causal:
        k, v = k[:, :, :24].contiguous(), v[:, :, :24].contiguous()
    want = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    op = torch.ops.aten._scaled_dot_product_flash_attention
    got = op(*to_tpu((q, k, v)), 0.0, causal, False, scale=scale)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-5, atol=1e-5)
    assert got[1].dtype == torch.float32 and got[1].shape == (2, 3, 24)
    torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-5)
    assert (got[4], got[5]) == (24, k.shape[2])  # max_q, max_k


def test_flash_attention_op_refuses_dropout(no_fallback):
    q, k, v = to_tpu(qkv(1, 2, 8, 8, 8, torch.float32))
    with pytest.raises(RuntimeError, match="_scaled_dot_product_flash_attention.*dropout_p"):
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.5, False, False)


def test_sdpa_kernel_flash_runs_the_fused_op(no_fallback):
    # sdpa_kernel(FLASH_ATTENTION) (diffusers' "_native_flash" without context
    # parallelism) selects tpu's fused op; it raised "No viable backend"
    q, k, v = qkv(1, 2, 16, 16, 8, torch.float32)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        got = F.scaled_dot_product_attention(*to_tpu((q, k, v)), is_causal=True)
    assert_same(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))
