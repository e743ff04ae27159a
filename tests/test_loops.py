"""Loops that compile once (issue 9): where a view starts is a runtime value,
so reading `table[i]` or `x[:, j]` for every i or j is one program; scheduler
tables stay on the host; fused eager cuts its graph where a loop step repeats,
whatever ran before the loop. So after one warm-up image at a resolution, any
number of steps compiles nothing new, in every mode."""

from __future__ import annotations

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode, eager_mode


def compiles() -> int:
    return torch_tpu.metrics()["compiles"]


def test_reading_a_table_entry_by_index_is_one_program(no_fallback):
    table = torch.linspace(0, 1, 9).to("tpu")
    x = torch.arange(30.0).reshape(5, 6).to("tpu")
    (table[1] * 2).cpu()
    (x[:, 1] + 1).cpu()
    (x[1:3, 2:4] * 3).cpu()
    x[:, 1].add_(0).cpu()
    before = compiles()
    got = [(table[i] * 2).cpu() for i in range(1, 9)]
    cols = [(x[:, j] + 1).cpu() for j in range(1, 6)]
    blocks = [(x[i : i + 2, j : j + 2] * 3).cpu() for i in range(1, 4) for j in range(1, 5)]
    for j in range(1, 6):  # in-place writes through views at other offsets
        x[:, j].add_(j)
    assert compiles() == before, "a new view offset compiled a new program"
    ref_t, ref_x = torch.linspace(0, 1, 9), torch.arange(30.0).reshape(5, 6)
    torch.testing.assert_close(torch.stack(got), ref_t[1:] * 2)
    torch.testing.assert_close(torch.stack(cols), (ref_x[:, 1:] + 1).t())
    want = [ref_x[i : i + 2, j : j + 2] * 3 for i in range(1, 4) for j in range(1, 5)]
    torch.testing.assert_close(torch.stack(blocks), torch.stack(want))
    for j in range(1, 6):
        ref_x[:, j] += j
    torch.testing.assert_close(x.cpu(), ref_x)


def test_last_column_reads_pad_for_any_offset(no_fallback):
    # x[:, j] slices past the end of the storage for the last columns: the
    # program pads by the most any offset can overrun
    x = torch.randn(4, 7)
    t = x.to("tpu")
    for j in (1, 6, 3, 5):
        torch.testing.assert_close(t[:, j].cpu(), x[:, j], rtol=0, atol=0)
        torch.testing.assert_close(t[::2, j].cpu(), x[::2, j], rtol=0, atol=0)


def test_fused_eager_reads_table_entries_in_one_step_program(no_fallback):
    table = torch.linspace(0.1, 1.0, 30)
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        t = table.to("tpu")
        w = (torch.eye(8) * 0.9).to("tpu")
        y = torch.ones(8, 8, device="tpu")
        y.cpu()
        seen = []
        for i in range(1, 25):
            y = (y * t[i] + t[i - 1]).tanh() * 1.5 - 0.25
            y = y @ w + 0.01 * y.sum()
            y = y.softmax(-1) * 3 + y.mean() + y.amax()
            y = y - y.min() + t[i] * 0.5
            seen.append(compiles())
        out = y.cpu()
    ref = torch.ones(8, 8)
    for i in range(1, 25):
        ref = (ref * table[i] + table[i - 1]).tanh() * 1.5 - 0.25
        ref = ref @ (torch.eye(8) * 0.9) + 0.01 * ref.sum()
        ref = ref.softmax(-1) * 3 + ref.mean() + ref.amax()
        ref = ref - ref.min() + table[i] * 0.5
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert seen[-1] == seen[4], f"compiles kept growing with the step index: {seen}"


diffusers = pytest.importorskip("diffusers")

STEPS = (2, 4, 7, 28)
_cpu_images: dict[int, torch.Tensor] = {}


def flux_image(pipe, steps: int) -> torch.Tensor:
    images = pipe(
        "a photo of a cat",
        num_inference_steps=steps,
        height=64,
        width=64,
        guidance_scale=0.0,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
    ).images
    return images.cpu()


def cpu_image(steps: int) -> torch.Tensor:
    from torch_tpu.testing import tiny

    if steps not in _cpu_images:
        _cpu_images[steps] = flux_image(tiny.flux_pipeline("tiny"), steps)
    return _cpu_images[steps]


@pytest.mark.parametrize("mode", ["strict", "compiled", "fused"])
def test_any_number_of_steps_compiles_nothing_new(no_fallback, mode):
    from torch_tpu.testing import tiny

    pipe = tiny.flux_pipeline("tiny")
    pipe.transformer.to("tpu")
    pipe.vae.to("tpu")
    eager = EagerMode.DEFER_AND_FUSE if mode == "fused" else EagerMode.DEFER_NEVER
    with eager_mode(eager):
        if mode == "compiled":
            pipe.enable_tpu_compile()
        # the warm-up is a call like the later ones (a CPU generator makes the
        # latents on the host; without one they would be drawn on the device)
        pipe.tpu_warmup(
            "a photo of a cat",
            num_inference_steps=4,
            height=64,
            width=64,
            guidance_scale=0.0,
            output_type="pt",
            generator=torch.Generator().manual_seed(1),
        )
        for steps in STEPS:
            before = compiles()
            image = flux_image(pipe, steps)
            new = compiles() - before
            assert new == 0, f"{mode}: {steps} steps compiled {new} new programs after the warm-up"
            diff = (image - cpu_image(steps)).abs().max().item()
            assert diff <= 1e-3, f"{mode}, {steps} steps: max abs diff {diff:.2e} from CPU"
    assert pipe.scheduler.sigmas.device.type == "cpu"  # tables stay on the host
