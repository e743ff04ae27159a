"""Training the tiny Flux transformer on "tpu": gradients match CPU, AdamW
losses track CPU (strict eager) and eager (torch.compile), no CPU fallback."""

from __future__ import annotations

import pytest
import torch

import torch_tpu
from torch_tpu import TpuBackend

diffusers = pytest.importorskip("diffusers")
from torch_tpu.testing import tiny  # noqa: E402


def batch(device: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    inputs = {
        "hidden_states": torch.randn(2, 16, 16, generator=g),
        "encoder_hidden_states": torch.randn(2, 8, 32, generator=g),
        "pooled_projections": torch.randn(2, 32, generator=g),
        "timestep": torch.tensor([0.3, 0.7]),
        "img_ids": torch.zeros(16, 3),
        "txt_ids": torch.zeros(8, 3),
        "guidance": torch.tensor([3.5, 3.5]),
    }
    target = torch.randn(2, 16, 16, generator=g)
    return {k: v.to(device) for k, v in inputs.items()}, target.to(device)


def model_on(device: str) -> torch.nn.Module:
    model = tiny.flux_transformer("tiny").to(device)
    model.train()
    return model


def loss_of(model, inputs, target) -> torch.Tensor:
    out = model(**inputs, return_dict=False)[0]
    return torch.nn.functional.mse_loss(out, target)


def test_gradients_match_cpu(no_fallback):
    grads = {}
    for device in ("cpu", "tpu"):
        model = model_on(device)
        loss_of(model, *batch(device)).backward()
        grads[device] = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    assert grads["tpu"].keys() == grads["cpu"].keys() and grads["cpu"]
    for name, expected in grads["cpu"].items():
        torch.testing.assert_close(grads["tpu"][name], expected, rtol=1e-4, atol=1e-5, msg=name)


def train(device: str, steps: int, backend: TpuBackend | None = None) -> list[float]:
    model = model_on(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_model = torch.compile(model, backend=backend, dynamic=False) if backend else model
    inputs, target = batch(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(step_model, inputs, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_adamw_losses_track_cpu(no_fallback):
    cpu = train("cpu", 20)
    tpu = train("tpu", 20)
    torch.testing.assert_close(tpu, cpu, rtol=1e-3, atol=0)
    assert tpu[-1] < tpu[0]


def test_compiled_training_tracks_eager():
    torch._dynamo.reset()
    eager = train("tpu", 10)
    torch_tpu.reset_metrics()
    backend = TpuBackend()
    compiled = train("tpu", 10, backend)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=0)
    assert torch_tpu.metrics()["cpu_fallbacks"] == {}
    assert backend.compiles == 2  # the forward and the backward: one program each, for all 10 steps
