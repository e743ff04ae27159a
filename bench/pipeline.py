"""Seconds per image of the "small" FLUX pipeline: CPU PyTorch vs "tpu" strict, fused and compiled.

``tiny.flux_pipeline("small")`` (FLUX transformer with hidden 256, 2 double +
4 single blocks; an 8x VAE with 16 latent channels; CLIP and T5 text encoders
of width 128) at 256x256 with 4 steps and 128 T5 tokens. Variants:

- ``cpu``: the whole pipeline on the CPU with PyTorch's kernels, at torch's
  default thread count and at one thread (on a shared, loaded machine OpenMP
  barriers can cost more than the work);
- ``tpu strict`` / ``tpu fused``: transformer and VAE on "tpu", text encoders on
  the CPU, in ``DEFER_NEVER`` and ``DEFER_AND_FUSE``;
- ``tpu compiled``: the same placement, ``pipe.enable_tpu_compile()`` and
  ``pipe.tpu_warmup(...)`` from ``torch_tpu.diffusers`` (or, where those are
  missing, ``torch.compile(..., backend=TpuBackend(), dynamic=False)`` on the
  transformer and the VAE's decode).

Each variant runs one warm-up call (its time and compiles are printed), then
the median of ``--reps`` timed calls. A bar chart is written with PIL
(``bench/pipeline.png``, ``--out`` to change). Asserts nothing.

    .venv/bin/python bench/pipeline.py            # 3 timed images per variant
    .venv/bin/python bench/pipeline.py --quick    # 1 timed image, no fused variant
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

_CACHE = tempfile.TemporaryDirectory(prefix="torch_tpu_bench_pipeline_")
os.environ["TORCH_TPU_CACHE_DIR"] = _CACHE.name  # empty: the warm-up compiles are real

import torch  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu import EagerMode, eager_mode  # noqa: E402

PROMPT = "a small red fox in the snow"


def build(device: str):
    from torch_tpu.testing import tiny

    pipe = tiny.flux_pipeline("small")
    if device == "tpu":
        pipe.transformer.to("tpu")
        pipe.vae.to("tpu")
    return pipe


def generate(pipe, args) -> torch.Tensor:
    with torch.no_grad():
        image = pipe(
            PROMPT,
            height=args.size,
            width=args.size,
            num_inference_steps=args.steps,
            guidance_scale=3.5,
            max_sequence_length=args.max_sequence_length,
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).images
    return image.cpu()


def measure(name: str, pipe, args, mode: EagerMode = EagerMode.DEFER_NEVER, warmup=None) -> dict[str, object]:
    with eager_mode(mode):
        torch_tpu.reset_metrics()
        t0 = time.perf_counter()
        image = warmup() if warmup is not None else generate(pipe, args)
        first = time.perf_counter() - t0
        m = torch_tpu.metrics()
        warm_compiles, compile_s = m["compiles"], m["compile_seconds"]
        torch_tpu.reset_metrics()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            image = generate(pipe, args)
            times.append(time.perf_counter() - t0)
        m = torch_tpu.metrics()
    row = {
        "name": name,
        "s_per_image": statistics.median(times),
        "first_s": first,
        "warm_compiles": warm_compiles,
        "compile_s": compile_s,
        "later_compiles": m["compiles"],
        "exec": m["executions"] / args.reps,
        "fallbacks": dict(m["cpu_fallbacks"]),
        "image": image,
    }
    print(f"  done {name}: {row['s_per_image']:.3f} s/image (first call {first:.2f} s)", flush=True)
    return row


def compile_pipeline(pipe, args):
    """Compiled mode; returns the warm-up callable."""
    if hasattr(pipe, "enable_tpu_compile") and hasattr(pipe, "tpu_warmup"):
        pipe.enable_tpu_compile()
        return "enable_tpu_compile + tpu_warmup", lambda: pipe.tpu_warmup(
            PROMPT,
            height=args.size,
            width=args.size,
            num_inference_steps=args.steps,
            guidance_scale=3.5,
            max_sequence_length=args.max_sequence_length,
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).images.cpu()
    backend = torch_tpu.TpuBackend()
    pipe.transformer = torch.compile(pipe.transformer, backend=backend, dynamic=False)
    pipe.vae.decode = torch.compile(pipe.vae.decode, backend=backend, dynamic=False)
    return "torch.compile(TpuBackend) by hand", lambda: generate(pipe, args)


def bar_chart(rows: list[dict[str, object]], path: str, title: str) -> None:
    from PIL import Image, ImageDraw, ImageFont

    width, bar_h, gap, left, top = 760, 34, 14, 190, 56
    height = top + len(rows) * (bar_h + gap) + 40
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    draw.text((12, 12), title, fill="black", font=font)
    draw.text((12, 30), "seconds per image (lower is better)", fill="dimgray", font=font)
    biggest = max(float(r["s_per_image"]) for r in rows)
    scale = (width - left - 90) / biggest
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        value = float(r["s_per_image"])
        color = (90, 110, 130) if str(r["name"]).startswith("cpu") else (40, 120, 200)
        draw.text((12, y + bar_h // 2 - 6), str(r["name"]), fill="black", font=font)
        draw.rectangle([left, y, left + max(1, int(value * scale)), y + bar_h], fill=color)
        label_xy = (left + int(value * scale) + 6, y + bar_h // 2 - 6)
        draw.text(label_xy, f"{value:.2f} s", fill="black", font=font)
    draw.line([left, top - 4, left, height - 30], fill="black")
    img.save(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256, help="height and width (multiple of 16)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-sequence-length", type=int, default=128, help="T5 tokens")
    parser.add_argument("--reps", type=int, default=None, help="timed images per variant")
    parser.add_argument("--quick", action="store_true", help="1 timed image, no fused variant")
    parser.add_argument("--no-fused", action="store_true")
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipeline.png")
    parser.add_argument("--out", default=default_out, help="bar chart PNG")
    args = parser.parse_args()
    args.reps = args.reps or (1 if args.quick else 3)
    threads = torch.get_num_threads()

    title = (
        f"small FLUX pipeline, {args.size}x{args.size}, {args.steps} steps, f32, "
        f"plugin {torch_tpu._C._runtime_info()['platform_name']}"
    )
    print(title + f"; median of {args.reps}")
    rows = []
    cpu_pipe = build("cpu")
    for n in sorted({threads, 1}, reverse=True):
        torch.set_num_threads(n)
        rows.append(measure(f"cpu eager, {n} thr", cpu_pipe, args))
    torch.set_num_threads(threads)
    reference = rows[0]["image"]

    pipe = build("tpu")
    rows.append(measure("tpu strict eager", pipe, args))
    if not (args.quick or args.no_fused):
        rows.append(measure("tpu fused eager", pipe, args, EagerMode.DEFER_AND_FUSE))
    del pipe
    compiled_pipe = build("tpu")
    how, warmup = compile_pipeline(compiled_pipe, args)
    rows.append(measure("tpu compiled", compiled_pipe, args, warmup=warmup))
    print()
    head = (
        f"{'variant':<18}{'s/image':>9}{'vs cpu best':>12}{'1st call s':>11}{'1st compiles':>13}"
        f"{'compile s':>10}{'later compiles':>15}{'exec/image':>11}{'max|diff|':>10}  fallbacks"
    )
    print(head)
    print("-" * len(head))
    cpu_best = min(float(r["s_per_image"]) for r in rows if str(r["name"]).startswith("cpu"))
    for r in rows:
        diff = (r["image"] - reference).abs().max().item()
        fb = r["fallbacks"]
        print(
            f"{r['name']:<18}{r['s_per_image']:>9.3f}{cpu_best / float(r['s_per_image']):>11.2f}x"
            f"{r['first_s']:>11.2f}{r['warm_compiles']:>13}{r['compile_s']:>10.2f}{r['later_compiles']:>15}"
            f"{r['exec']:>11.0f}{diff:>10.1e}  {fb if fb else 'none'}"
        )
    print(f"compiled via: {how}; 'vs cpu best' > 1: faster than the faster CPU thread count")
    bar_chart(rows, args.out, title)
    print(f"bar chart: {args.out}")


if __name__ == "__main__":
    main()
