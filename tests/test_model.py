"""A small transformer MLP block moved with .to("tpu") matches CPU."""

from __future__ import annotations

import torch
from torch import nn

from conftest import assert_same


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 256), nn.GELU(approximate="tanh"), nn.LayerNorm(256), nn.Linear(256, 64)
    )


def test_mlp_block_matches_cpu(no_fallback):
    model = mlp()
    x = torch.randn(8, 16, 64)
    expected = model(x)
    model_tpu = mlp().to("tpu")
    actual = model_tpu(x.to("tpu"))
    assert_same(actual, expected, rtol=1e-5, atol=1e-5)
    assert (actual.cpu() - expected).abs().max().item() <= 1e-5


def test_state_dict_round_trip(no_fallback):
    model = mlp()
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("tpu")
    assert all(p.device.type == "tpu" for p in model.parameters())
    back = {k: v.cpu() for k, v in model.state_dict().items()}
    assert back.keys() == reference.keys()
    for k in reference:
        assert torch.equal(back[k], reference[k]), k
    fresh = mlp()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(back)
    x = torch.randn(2, 64)
    torch.testing.assert_close(fresh(x), mlp()(x))


def test_mlp_bf16(no_fallback):
    model = mlp().to(torch.bfloat16)
    x = torch.randn(4, 64).to(torch.bfloat16)
    expected = model(x)
    actual = mlp().to(torch.bfloat16).to("tpu")(x.to("tpu"))
    assert_same(actual, expected, rtol=1.6e-2, atol=2e-2)


def test_backward_through_mlp(no_fallback):
    model = mlp()
    x = torch.randn(4, 64)
    model(x).pow(2).mean().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model_tpu = mlp().to("tpu")
    model_tpu(x.to("tpu")).pow(2).mean().backward()
    for p, e in zip(model_tpu.parameters(), expected):
        torch.testing.assert_close(p.grad.cpu(), e, rtol=1e-4, atol=1e-5)
