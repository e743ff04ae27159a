"""A small CNN (conv, batch norm, max pool, adaptive average pool, linear) trains on "tpu" like it
does on the CPU, with no CPU fallback; and the pooling and batch norm rules it rests on.

Batch norm trains with batch statistics (``track_running_stats=False``) and with running
statistics, which it updates in place as CPU does
(``test_batch_norm_running_stats_training_runs_on_tpu``). Evaluation with running statistics runs
on tpu too."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_tpu  # noqa: F401 (registers the tpu device)

from conftest import assert_same


def make_cnn(track_running_stats: bool = False) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8, track_running_stats=track_running_stats),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16, track_running_stats=track_running_stats),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def train(model, device, steps, batches):
    model = model.to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches[:steps]:
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return model, torch.stack(losses)


def test_cnn_trains_like_cpu(no_fallback):
    torch.manual_seed(0)
    model = make_cnn()
    gen = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(8, 3, 16, 16, generator=gen), torch.randint(0, 10, (8,), generator=gen))
        for _ in range(10)
    ]
    cpu_model, cpu_losses = train(copy.deepcopy(model), "cpu", 10, batches)
    tpu_model, tpu_losses = train(copy.deepcopy(model), "tpu", 10, batches)
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-4, atol=1e-4)
    assert cpu_losses[-1] < cpu_losses[0], "the CPU run does not learn: the test would prove nothing"
    for (name, p_cpu), p_tpu in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert p_tpu.device.type == "tpu", name
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-4, msg=name)


def test_cnn_eval_with_running_stats(no_fallback):
    torch.manual_seed(0)
    model = make_cnn(track_running_stats=True)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    model.eval()
    x = torch.randn(4, 3, 16, 16)
    expected = model(x)
    actual = copy.deepcopy(model).to("tpu")(x.to("tpu"))
    assert_same(actual, expected, rtol=1e-4, atol=1e-5)


def test_batch_norm_running_stats_training_runs_on_tpu(no_fallback):
    """Training batch norm with running stats runs on tpu and moves the running stats as CPU does."""
    torch.manual_seed(0)
    m = nn.BatchNorm2d(3).train()
    mt = copy.deepcopy(m).to("tpu")
    x = torch.randn(2, 3, 4, 4)
    assert_same(mt(x.to("tpu")), m(x), rtol=1e-4, atol=1e-5)
    assert_same(mt.running_mean, m.running_mean, rtol=1e-5, atol=1e-6)
    assert_same(mt.running_var, m.running_var, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool_indices_and_ties(ceil_mode, no_fallback):
    # ties and a NaN: PyTorch keeps the first maximum, and a NaN wins its window
    nan = float("nan")
    x = torch.tensor([[[[1.0, 1.0, 2.0, 2.0, 0.0], [1.0, 0.5, 2.0, nan, 3.0], [4.0, 4.0, 4.0, 4.0, 4.0]]]])
    expected = F.max_pool2d(x, 2, stride=2, ceil_mode=ceil_mode, return_indices=True)
    actual = F.max_pool2d(x.to("tpu"), 2, stride=2, ceil_mode=ceil_mode, return_indices=True)
    assert_same(actual, expected)


def test_pool_bad_input_is_a_clear_error():
    x = torch.randn(1, 1, 4, 4, device="tpu")
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.avg_pool2d(torch.randn(1, 1, 1, 1, device="tpu"), 3)
