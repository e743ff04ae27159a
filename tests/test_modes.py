"""The four execution modes: same results as CPU, selection by API and
environment, per-thread state, debug checks, and fused eager compiling a
loop once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch
from torch import nn

import torch_tpu
from torch_tpu import EagerMode, eager_mode

from conftest import assert_same

MODES = [EagerMode.DEFER_NEVER, EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING, EagerMode.DEFER_AND_FUSE]


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.LayerNorm(32), nn.Linear(32, 8))


def workload(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    y = model(x)
    z = y.softmax(-1) * 0.5 + x[:, :8].t().contiguous().t()
    z[:, 1] = 3.0
    z.t().add_(1)
    return [y, z, z.sum(dim=0), z.argmax(dim=1)]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_every_mode_matches_cpu(no_fallback, mode):
    x = torch.randn(4, 16)
    expected = workload(small_model(), x)
    model = small_model().to("tpu")
    with eager_mode(mode):
        actual = workload(model, x.to("tpu"))
        assert torch_tpu.get_eager_mode() == mode
    assert_same(actual, expected, rtol=1e-5, atol=1e-5)


def test_context_manager_restores_on_exception():
    assert torch_tpu.get_eager_mode() == EagerMode.DEFER_NEVER
    with pytest.raises(ValueError), eager_mode(EagerMode.DEFER_AND_FUSE):
        assert torch_tpu.get_eager_mode() == EagerMode.DEFER_AND_FUSE
        with eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
            raise ValueError("boom")
    assert torch_tpu.get_eager_mode() == EagerMode.DEFER_NEVER


def test_modes_are_per_thread():
    seen: dict[str, EagerMode] = {}
    barrier = threading.Barrier(2)

    def worker(name: str, mode: EagerMode) -> None:
        with eager_mode(mode):
            barrier.wait()
            x = torch.ones(3, device="tpu") * 2
            seen[name] = torch_tpu.get_eager_mode()
            assert x.cpu().tolist() == [2.0, 2.0, 2.0]
            barrier.wait()

    a = threading.Thread(target=worker, args=("a", EagerMode.DEFER_AND_FUSE))
    b = threading.Thread(target=worker, args=("b", EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING))
    a.start(), b.start()
    a.join(), b.join()
    assert seen == {"a": EagerMode.DEFER_AND_FUSE, "b": EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING}
    assert torch_tpu.get_eager_mode() == EagerMode.DEFER_NEVER


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TORCH_TPU_LAUNCH_BLOCKING": "1"}, "DEFER_NEVER_AND_LAUNCH_BLOCKING"),
        ({"TORCH_TPU_DEFER_AND_FUSE": "1"}, "DEFER_AND_FUSE"),
        ({}, "DEFER_NEVER"),
    ],
)
def test_environment_selects_the_mode(env, expected):
    code = "import torch, torch_tpu; print(torch_tpu.get_eager_mode().name)"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected


def test_debug_eager_raises_at_the_failing_line(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text("""
import torch, torch_tpu
x = torch.randn(5, 3, device="tpu")
with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
    y = x * 2
    z = torch.index_select(y, 0, torch.tensor([0, 7], device="tpu"))  # the user's line
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert out.returncode != 0
    assert "IndexError" in out.stderr and "out of bounds" in out.stderr
    assert 'user_script.py", line 6' in out.stderr and "# the user's line" in out.stderr


def test_strict_eager_clamps_out_of_range_indices():
    # The documented TPU behaviour outside debug mode: no sync, no error.
    x = torch.arange(5.0, device="tpu")
    assert torch.index_select(x, 0, torch.tensor([1, 9], device="tpu")).cpu().tolist() == [1.0, 4.0]


def test_fused_eager_runs_a_chain_as_one_program(no_fallback):
    model = small_model().to("tpu")
    x = torch.randn(4, 16, device="tpu")
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        model(x).cpu()  # warm: compile
        torch_tpu.reset_metrics()
        y = model(x).cpu()
        m = torch_tpu.metrics()
    assert m["executions"] == 1 and m["compiles"] == 0
    torch.testing.assert_close(y, small_model()(x.cpu()), rtol=1e-5, atol=1e-5)


def test_fused_eager_does_not_compute_dead_temporaries():
    x = torch.randn(64, device="tpu")
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        for _ in range(10):
            _ = x.exp() * 3  # dropped at once: never an output
        y = x + 1
        torch_tpu.reset_metrics()
        y.cpu()
    assert torch_tpu.metrics()["executions"] == 1


def flux_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": torch.randn(1, 16, 16, generator=g),
        "encoder_hidden_states": torch.randn(1, 8, 32, generator=g),
        "pooled_projections": torch.randn(1, 32, generator=g),
        "img_ids": torch.zeros(16, 3),
        "txt_ids": torch.zeros(8, 3),
        "guidance": torch.tensor([3.5]),
    }


def denoise(model, inputs: dict[str, torch.Tensor], steps: int, device: str) -> torch.Tensor:
    from torch_tpu.testing import tiny

    scheduler = tiny.flow_match_scheduler()
    scheduler.set_timesteps(steps)
    kw = {k: v.to(device) for k, v in inputs.items()}
    latents = kw.pop("hidden_states")
    with torch.no_grad():
        for t in scheduler.timesteps:
            timestep = (t / 1000).expand(1).to(device)
            v = model(hidden_states=latents, timestep=timestep, return_dict=False, **kw)[0]
            latents = scheduler.step(v, t, latents, return_dict=False)[0]
    return latents


def test_fused_eager_flux_loop_compiles_once_per_step_shape():
    pytest.importorskip("diffusers")
    from torch_tpu.testing import tiny

    model = tiny.flux_transformer("tiny").to("tpu")
    inputs = flux_inputs()
    strict = denoise(model, inputs, 20, "tpu").cpu()
    torch_tpu.reset_metrics()
    compiles = []

    from diffusers import FlowMatchEulerDiscreteScheduler  # noqa: F401

    with eager_mode(EagerMode.DEFER_AND_FUSE):
        scheduler = tiny.flow_match_scheduler()
        scheduler.set_timesteps(20)
        kw = {k: v.to("tpu") for k, v in inputs.items()}
        latents = kw.pop("hidden_states")
        with torch.no_grad():
            for t in scheduler.timesteps:
                timestep = (t / 1000).expand(1).to("tpu")
                v = model(hidden_states=latents, timestep=timestep, return_dict=False, **kw)[0]
                latents = scheduler.step(v, t, latents, return_dict=False)[0]
                compiles.append(torch_tpu.metrics()["compiles"])
        fused = latents.cpu()
    flushes = torch_tpu._C._flush_counts()
    print("fused compiles per step:", compiles, "flushes:", flushes)
    assert compiles[-1] == compiles[1], f"compiles kept growing after the first steps: {compiles}"
    assert compiles[-1] <= 8
    torch.testing.assert_close(fused, strict, rtol=1e-5, atol=1e-5)


def test_modes_print_by_name() -> None:
    assert str(EagerMode.DEFER_AND_FUSE) == "EagerMode.DEFER_AND_FUSE"
    assert f"{EagerMode.DEFER_NEVER}" == "EagerMode.DEFER_NEVER"
    assert f"{EagerMode.DEFER_AND_FUSE:d}" == "2" and int(EagerMode.DEFER_AND_FUSE) == 2
    with eager_mode(EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        assert str(torch_tpu.get_eager_mode()) == "EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING"
