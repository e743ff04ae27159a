"""Training on "tpu": backward ops, norms, losses and the optimizers' foreach
ops match PyTorch CPU, and a small MLP trains like it does on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_tpu

from conftest import assert_same

# Gradients of half types go through more roundings than a forward op.
GRAD_TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
}


def run_grads(fn, inputs, device, grad_seed=1):
    """Output and input gradients of fn(*inputs) on |device|, for a fixed
    random output gradient."""
    xs = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*xs)
    gen = torch.Generator().manual_seed(grad_seed)
    g = torch.randn(out.shape, generator=gen).to(out.dtype).to(device)
    out.backward(g)
    return [out.detach()] + [x.grad for x in xs if x.is_floating_point()]


def check_grads(fn, inputs, dtype=torch.float32, **tol):
    expected = run_grads(fn, inputs, "cpu")
    actual = run_grads(fn, inputs, "tpu")
    assert_same(actual, expected, **(tol or GRAD_TOL[dtype]))


ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "hardswish": F.hardswish,
    "softmax": lambda t: t.softmax(-1),
    "softmax_dim1": lambda t: t.softmax(1),
    "log_softmax": lambda t: t.log_softmax(-1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_backward(name, dtype, no_fallback):
    torch.manual_seed(0)
    x = (torch.randn(4, 6, 5) * 3).to(dtype)
    check_grads(ACTIVATIONS[name], [x], dtype)


def test_relu_backward_at_zero(no_fallback):
    x = torch.tensor([-1.0, 0.0, 0.0, 2.0])
    check_grads(F.relu, [x])


def test_softmax_backward_half_to_float(no_fallback):
    torch.manual_seed(0)
    x = torch.randn(3, 7).to(torch.bfloat16)
    check_grads(lambda t: t.softmax(-1, dtype=torch.float32), [x], torch.bfloat16)
    check_grads(lambda t: t.log_softmax(-1, dtype=torch.float32), [x], torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward(affine, dtype, no_fallback):
    torch.manual_seed(0)
    ln = nn.LayerNorm((6, 5), elementwise_affine=affine).to(dtype)
    if affine:
        with torch.no_grad():
            ln.weight.copy_(torch.randn(6, 5))
            ln.bias.copy_(torch.randn(6, 5))
    x = torch.randn(4, 6, 5).to(dtype)
    expected = run_grads(ln, [x], "cpu")
    expected_params = [p.grad.clone() for p in ln.parameters()]
    ln.zero_grad()
    ln_tpu = ln.to("tpu")
    actual = run_grads(ln_tpu, [x], "tpu")
    assert_same(actual, expected, **GRAD_TOL[dtype])
    assert_same([p.grad for p in ln_tpu.parameters()], expected_params, **GRAD_TOL[dtype])


@pytest.mark.parametrize(
    "groups,channels,shape",
    [(1, 6, (3,)), (2, 6, (4, 5)), (3, 6, (7,)), (6, 6, (2, 3)), (4, 8, (3,))],
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(groups, channels, shape, affine, no_fallback):
    torch.manual_seed(0)
    gn = nn.GroupNorm(groups, channels, affine=affine)
    if affine:
        with torch.no_grad():
            gn.weight.copy_(torch.randn(channels))
            gn.bias.copy_(torch.randn(channels))
    x = torch.randn(2, channels, *shape) * 2 + 1
    expected = run_grads(gn, [x], "cpu")
    expected_params = [p.grad.clone() for p in gn.parameters()]
    gn.zero_grad()
    gn_tpu = gn.to("tpu")
    actual = run_grads(gn_tpu, [x], "tpu")
    assert_same(actual, expected, **GRAD_TOL[torch.float32])
    assert_same([p.grad for p in gn_tpu.parameters()], expected_params, **GRAD_TOL[torch.float32])


def test_group_norm_stats(no_fallback):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 5)
    w, b = torch.randn(6), torch.randn(6)
    expected = torch.ops.aten.native_group_norm(x, w, b, 2, 6, 5, 3, 1e-5)
    actual = torch.ops.aten.native_group_norm(x.to("tpu"), w.to("tpu"), b.to("tpu"), 2, 6, 5, 3, 1e-5)
    assert_same(list(actual), list(expected))


def test_group_norm_bf16(no_fallback):
    torch.manual_seed(0)
    gn = nn.GroupNorm(2, 4).to(torch.bfloat16)
    x = torch.randn(2, 4, 3, 3).to(torch.bfloat16)
    expected = run_grads(gn, [x], "cpu")
    actual = run_grads(gn.to("tpu"), [x], "tpu")
    assert_same(actual, expected, **GRAD_TOL[torch.bfloat16])


def test_group_norm_bad_groups():
    x = torch.randn(2, 6, 3, device="tpu")
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        torch.ops.aten.native_group_norm(x, None, None, 2, 6, 3, 4, 1e-5)


def test_rms_norm(no_fallback):
    # rms_norm is a composite (pow/mean/rsqrt/mul) on PrivateUse1.
    torch.manual_seed(0)
    rms = nn.RMSNorm(8)
    with torch.no_grad():
        rms.weight.copy_(torch.randn(8))
    x = torch.randn(3, 8)
    expected = run_grads(rms, [x], "cpu")
    expected_w = rms.weight.grad.clone()
    rms.zero_grad()
    rms_tpu = rms.to("tpu")
    assert_same(run_grads(rms_tpu, [x], "tpu"), expected, **GRAD_TOL[torch.float32])
    assert_same(rms_tpu.weight.grad, expected_w, **GRAD_TOL[torch.float32])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_mse_loss(reduction, dtype, no_fallback):
    torch.manual_seed(0)
    x, t = torch.randn(4, 6).to(dtype), torch.randn(4, 6).to(dtype)
    check_grads(lambda a, b: F.mse_loss(a, b, reduction=reduction), [x, t], dtype)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy(reduction, weighted, no_fallback):
    torch.manual_seed(0)
    logits = torch.randn(5, 4)
    target = torch.tensor([0, 3, -100, 1, 3])

    def fn(x):
        w = torch.arange(1.0, 5.0, device=x.device) if weighted else None
        return F.cross_entropy(x, target.to(x.device), weight=w, reduction=reduction)

    check_grads(fn, [logits])


def test_nll_loss_unbatched_and_ignore_index(no_fallback):
    torch.manual_seed(0)
    x = torch.randn(4).log_softmax(0)
    check_grads(lambda a: F.nll_loss(a, torch.tensor(2, device=a.device)), [x])
    y = torch.randn(3, 4).log_softmax(1)
    check_grads(lambda a: F.nll_loss(a, torch.tensor([1, 2, 1], device=a.device), ignore_index=1), [y])


def test_nll_loss_all_ignored_is_nan(no_fallback):
    x = torch.randn(2, 3)
    t = torch.tensor([-100, -100])
    expected = F.nll_loss(x, t)
    actual = F.nll_loss(x.to("tpu"), t.to("tpu"))
    assert_same(actual, expected)


# ---- foreach ops ---------------------------------------------------------------


def lists(n=3, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (5,), (2, 2, 2)][:n]
    return [(torch.rand(s, generator=gen) + 0.5).to(dtype) for s in shapes]


FOREACH = {
    "add_scalar": lambda a, b, c: torch._foreach_add(a, 0.5),
    "add_list_alpha": lambda a, b, c: torch._foreach_add(a, b, alpha=-0.3),
    "add_tensor": lambda a, b, c: torch._foreach_add(a, torch.tensor(2.0, device=a[0].device), alpha=0.5),
    "sub_list": lambda a, b, c: torch._foreach_sub(a, b),
    "mul_scalar": lambda a, b, c: torch._foreach_mul(a, 0.9),
    "mul_list": lambda a, b, c: torch._foreach_mul(a, b),
    "mul_tensor": lambda a, b, c: torch._foreach_mul(a, torch.tensor(0.25, device=a[0].device)),
    "div_list": lambda a, b, c: torch._foreach_div(a, b),
    "div_scalar": lambda a, b, c: torch._foreach_div(a, 3.0),
    "maximum_list": lambda a, b, c: torch._foreach_maximum(a, b),
    "pow_scalar": lambda a, b, c: torch._foreach_pow(a, 2.0),
    "pow_scalar_and_tensor": lambda a, b, c: torch._foreach_pow(0.9, a),
    "addcmul": lambda a, b, c: torch._foreach_addcmul(a, b, c, value=0.1),
    "addcdiv": lambda a, b, c: torch._foreach_addcdiv(a, b, c, value=-0.01),
    "lerp_scalar": lambda a, b, c: torch._foreach_lerp(a, b, 0.1),
    "lerp_scalar_big": lambda a, b, c: torch._foreach_lerp(a, b, 0.8),
    "lerp_list": lambda a, b, c: torch._foreach_lerp(a, b, c),
    "sqrt": lambda a, b, c: torch._foreach_sqrt(a),
    "neg": lambda a, b, c: torch._foreach_neg(a),
    "reciprocal": lambda a, b, c: torch._foreach_reciprocal(a),
    "exp": lambda a, b, c: torch._foreach_exp(a),
    "norm": lambda a, b, c: torch._foreach_norm(a),
    "norm_inf": lambda a, b, c: torch._foreach_norm(a, float("inf")),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(FOREACH))
def test_foreach_functional(name, dtype, no_fallback):
    a, b, c = lists(dtype=dtype, seed=0), lists(dtype=dtype, seed=1), lists(dtype=dtype, seed=2)
    expected = FOREACH[name](a, b, c)
    actual = FOREACH[name]([t.to("tpu") for t in a], [t.to("tpu") for t in b], [t.to("tpu") for t in c])
    assert_same(list(actual), list(expected))


@pytest.mark.parametrize(
    "name", ["add_", "mul_", "addcmul_", "addcdiv_", "lerp_", "sqrt_", "maximum_", "zero_"]
)
def test_foreach_in_place(name, no_fallback):
    a, b, c = lists(seed=0), lists(seed=1), lists(seed=2)
    calls = {
        "add_": lambda x, y, z: torch._foreach_add_(x, y, alpha=2.0),
        "mul_": lambda x, y, z: torch._foreach_mul_(x, 0.5),
        "addcmul_": lambda x, y, z: torch._foreach_addcmul_(x, y, z, value=0.3),
        "addcdiv_": lambda x, y, z: torch._foreach_addcdiv_(x, y, z, value=0.3),
        "lerp_": lambda x, y, z: torch._foreach_lerp_(x, y, 0.1),
        "sqrt_": lambda x, y, z: torch._foreach_sqrt_(x),
        "maximum_": lambda x, y, z: torch._foreach_maximum_(x, y),
        "zero_": lambda x, y, z: torch._foreach_zero_(x),
    }
    ta = [t.to("tpu") for t in a]
    views = [t.view(-1) for t in ta]  # aliases see the write
    calls[name](a, b, c)
    calls[name](ta, [t.to("tpu") for t in b], [t.to("tpu") for t in c])
    assert_same(ta, a)
    assert_same([v.view(t.shape) for v, t in zip(views, a)], a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_single_tensor_optimizer_ops(dtype, no_fallback):
    torch.manual_seed(0)
    x, y, z = (torch.rand(4, 5).to(dtype) + 0.5 for _ in range(3))
    t = lambda v: v.to("tpu")  # noqa: E731
    assert_same(torch.addcmul(t(x), t(y), t(z), value=0.5), torch.addcmul(x, y, z, value=0.5))
    assert_same(torch.addcdiv(t(x), t(y), t(z), value=-2), torch.addcdiv(x, y, z, value=-2))
    assert_same(torch.lerp(t(x), t(y), 0.3), torch.lerp(x, y, 0.3))
    assert_same(torch.lerp(t(x), t(y), 0.7), torch.lerp(x, y, 0.7))
    assert_same(torch.lerp(t(x), t(y), t(z) - 1), torch.lerp(x, y, z - 1))
    xa = t(x)
    xa.addcmul_(t(y), t(z), value=2)
    assert_same(xa, x.clone().addcmul_(y, z, value=2))


# ---- training ------------------------------------------------------------------


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(16, 32),
        nn.GELU(approximate="tanh"),
        nn.LayerNorm(32),
        nn.Linear(32, 32),
        nn.SiLU(),
        nn.Linear(32, 8),
    )


def train(device, make_opt, steps=20):
    model = mlp().to(device)
    opt = make_opt(model.parameters())
    gen = torch.Generator().manual_seed(123)
    x = torch.randn(steps, 12, 16, generator=gen)
    y = torch.randn(steps, 12, 8, generator=gen)
    losses = []
    for i in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x[i].to(device)), y[i].to(device))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return model, torch.stack([v.cpu() for v in losses])


def check_training(make_opt, make_cpu_opt=None):
    ref_model, expected = train("cpu", make_cpu_opt or make_opt)
    model, actual = train("tpu", make_opt)
    assert all(p.device.type == "tpu" for p in model.parameters())
    assert expected[-1] < expected[0]  # it learns
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=0)
    for p, e in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), e.detach(), rtol=1e-4, atol=1e-5)
    return model


def test_sgd_momentum_trains_like_cpu(no_fallback):
    check_training(lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=True))


def test_sgd_nesterov_weight_decay_trains_like_cpu(no_fallback):
    check_training(
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01, foreach=True)
    )


def test_adamw_capturable_trains_like_cpu(no_fallback):
    # capturable keeps the step counts on the device (the CPU cannot be
    # capturable; the math is the same).
    check_training(
        lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True, capturable=True),
        lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True),
    )


@pytest.mark.parametrize("amsgrad", [False, True])
def test_adamw_trains_like_cpu(amsgrad, no_fallback):
    # The default AdamW on tpu: foreach, step counts on the CPU, the bias
    # corrections as Scalar[] (runtime parameters, no recompiles).
    check_training(lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=amsgrad))


def test_adamw_does_not_recompile_per_step():
    train("tpu", lambda p: torch.optim.AdamW(p, lr=1e-2), steps=3)
    before = torch_tpu.metrics()["compiles"]
    train("tpu", lambda p: torch.optim.AdamW(p, lr=1e-2), steps=5)
    assert torch_tpu.metrics()["compiles"] == before


def test_clip_grad_norm():
    # _foreach_norm is native; the total norm (linalg_vector_norm) belongs to
    # the reductions.
    model = mlp()
    x = torch.randn(4, 16)
    model(x).pow(2).sum().backward()
    expected = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    model_tpu = mlp().to("tpu")
    model_tpu(x.to("tpu")).pow(2).sum().backward()
    actual = torch.nn.utils.clip_grad_norm_(model_tpu.parameters(), 0.5)
    assert_same(actual, expected, rtol=1e-5, atol=1e-5)
    assert_same(
        [p.grad for p in model_tpu.parameters()], [p.grad for p in model.parameters()], rtol=1e-5, atol=1e-6
    )


def test_norm_backward_output_mask(no_fallback):
    torch.manual_seed(0)
    x, g = torch.randn(3, 4), torch.randn(3, 4)
    w, b = torch.randn(4), torch.randn(4)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [4], w, b, 1e-5)
    t = lambda v: v.to("tpu")  # noqa: E731
    for mask in ([True, False, False], [False, True, True], [True, True, True]):
        expected = torch.ops.aten.native_layer_norm_backward(g, x, [4], mean, rstd, w, b, mask)
        actual = torch.ops.aten.native_layer_norm_backward(
            t(g), t(x), [4], t(mean), t(rstd), t(w), t(b), mask
        )
        for a, e in zip(actual, expected):
            assert (a is None) == (e is None), mask
            if e is not None:
                assert_same(a, e)
    xg = torch.randn(2, 4, 3)
    _, mean, rstd = torch.ops.aten.native_group_norm(xg, w, None, 2, 4, 3, 2, 1e-5)
    gg = torch.randn(2, 4, 3)
    for mask in ([True, False, False], [False, True, True]):
        expected = torch.ops.aten.native_group_norm_backward(gg, xg, mean, rstd, w, 2, 4, 3, 2, mask)
        actual = torch.ops.aten.native_group_norm_backward(
            t(gg), t(xg), t(mean), t(rstd), t(w), 2, 4, 3, 2, mask
        )
        for a, e in zip(actual, expected):
            assert (a is None) == (e is None), mask
            if e is not None:
                assert_same(a, e)
