"""Inference graphs skip aot_autograd (``TpuBackend(direct_inference=True)``,
the default): a dynamo graph that is never differentiated is traced as dynamo
captured it. A graph that writes to an input or returns a view of one goes
through aot_autograd after all, and matches eager either way."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_tpu import TpuBackend


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def block() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "no input requires grad"])
def test_an_inference_graph_is_traced_directly(mode, no_fallback):
    model = block()
    x = torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
    if mode == "no input requires grad":
        model.requires_grad_(False)
    backend = TpuBackend()
    compiled = torch.compile(model.to("tpu"), backend=backend, dynamic=False)
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(mode, torch.enable_grad)
    with context():
        out = compiled(x.to("tpu"))
    assert backend.direct_graphs == 1 and backend.aot_after_direct == []
    assert backend.compiles == 1
    assert not out.requires_grad
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_training_still_goes_through_aot_autograd(no_fallback):
    model = block()
    x = torch.randn(4, 16)
    model(x).square().sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    backend = TpuBackend()
    tpu_model = model.to("tpu")
    torch.compile(tpu_model, backend=backend, dynamic=False)(x.to("tpu")).square().sum().backward()
    assert backend.direct_graphs == 0
    for got, want in zip((p.grad for p in tpu_model.parameters()), expected, strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


def writes_its_input(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2)
    return x.sum(0) + 1


def returns_a_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.t(), (x * 3).exp()


def writes_a_view_of_its_input(x: torch.Tensor) -> torch.Tensor:
    x[1:].add_(5)
    return x.cos()


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (writes_its_input, "writes to input 0"),
        (returns_a_view, "returns a view of an input"),
        (writes_a_view_of_its_input, "writes to input 0"),
    ],
)
@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_what_needs_functionalization_goes_through_aot(fn, why, mode, no_fallback):
    host = torch.linspace(-1, 1, 12).reshape(3, 4)
    expected_input = host.clone()
    expected = fn(expected_input)
    x = host.to("tpu")
    backend = TpuBackend()
    with mode():
        x = x.clone()  # made in the mode, as the caller's tensors would be
        out = torch.compile(fn, backend=backend, dynamic=False)(x)
    assert backend.direct_graphs == 1
    assert len(backend.aot_after_direct) == 1 and why in backend.aot_after_direct[0]
    outs = out if isinstance(out, tuple) else (out,)
    wants = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(outs, wants, strict=True):
        torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(x.cpu(), expected_input)  # the input was written as in eager
    if fn is returns_a_view:
        with mode():
            x.add_(1)  # the returned view aliases the input, as in eager
        torch.testing.assert_close(outs[0].cpu(), (expected_input + 1).t())


def test_off_every_graph_goes_through_aot(no_fallback):
    backend = TpuBackend(direct_inference=False)
    x = torch.randn(4, 16)
    model = block()
    with torch.no_grad():
        expected = model(x)
        out = torch.compile(model.to("tpu"), backend=backend, dynamic=False)(x.to("tpu"))
    assert backend.direct_graphs == 0
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_a_trace_input_requires_grad_as_its_argument_does(no_fallback):
    """matmul folds a [1, 64, 16] input into rows for a weight that requires
    grad, as in the VAE's attention under no_grad (a transposed bf16 input):
    the direct trace must decompose it as eager does."""
    torch.manual_seed(0)
    proj = nn.Linear(16, 16, bias=False).to(torch.bfloat16)
    x = torch.randn(1, 16, 64, dtype=torch.bfloat16).transpose(1, 2)
    with torch.no_grad():
        expected = proj(x)
        backend = TpuBackend()
        out = torch.compile(proj.to("tpu"), backend=backend, dynamic=False)(x.to("tpu"))
    assert backend.direct_graphs == 1
    torch.testing.assert_close(out.cpu(), expected, rtol=2e-2, atol=2e-2)


def test_the_compile_starts_when_dynamo_hands_over_the_graph(no_fallback):
    """The backend traces an inference graph and queues its compile from dynamo's example inputs,
    before dynamo builds the frame's guards and runs it; the first call finds the program."""
    model = block()
    x = torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
    backend = TpuBackend()
    at_handover: list[int] = []

    def handover(gm, example_inputs):
        fn = backend(gm, example_inputs)
        at_handover.append(backend.compiles)
        return fn

    compiled = torch.compile(model.to("tpu"), backend=handover, dynamic=False)
    with torch.no_grad():
        out = compiled(x.to("tpu"))
    assert at_handover == [1]  # compiled at the hand-over
    assert backend.compiles == 1  # and not again at the first call
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
