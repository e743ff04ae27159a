"""The documented diffusers flow (README) on this host's plugin, shadow-compiled for a TPU target.

    python bench/targets_flux.py [--target v6e:1x1] [--size 128]

Runs the tiny FLUX pipeline of torch_tpu.testing.tiny in strict eager, fused eager and compiled
mode (enable_tpu_compile + tpu_warmup), one 4-step image each, with every program also compiled
for the target (libtpu, no TPU needed). Prints, per mode, the programs the image used, how many
the target refused, and the target compiler's estimated device time for that image: the sum over
its programs of runs x estimate. An estimate is the compiler's model, not a measurement; runs of
programs the compiler gives no estimate for are counted, not summed. Then the whole report.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

import torch_tpu
import torch_tpu.testing.tiny as tiny

PROMPT = "a photo of a cat"


def _runs() -> dict[int, dict[str, Any]]:
    return {p["hash"]: p for p in torch_tpu.target_report().programs}


def _image_estimate(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]) -> dict[str, Any]:
    used = []
    for h, p in after.items():
        runs = p["runs"] - (before[h]["runs"] if h in before else 0)
        if runs > 0:
            used.append((p, runs))
    est = sum(r * p["estimated_seconds"] for p, r in used if p["error"] is None and p["estimated_seconds"])
    return {
        "programs": len(used),
        "launches": sum(r for _, r in used),
        "refused": sum(1 for p, _ in used if p["error"] is not None),
        "no_estimate_runs": sum(r for p, r in used if p["error"] is None and p["estimated_seconds"] is None),
        "estimated_ms": est * 1e3,
        "new_programs": sum(1 for h in after if h not in before),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v6e:1x1")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    torch_tpu.set_target(args.target)
    pipe = tiny.flux_pipeline("tiny")
    pipe.transformer.to("tpu")
    pipe.vae.to("tpu")
    call = {"height": args.size, "width": args.size, "num_inference_steps": args.steps, "guidance_scale": 0.0}

    results = {}

    def image(mode: str, run: Any) -> None:
        before = _runs()
        start = time.perf_counter()
        run()
        torch.tpu.synchronize()
        wall = time.perf_counter() - start
        results[mode] = {**_image_estimate(before, _runs()), "wall_s": wall}

    image("strict eager", lambda: pipe(PROMPT, **call))
    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        pipe(PROMPT, **call)  # the first fused image records the graphs; the second reuses them
        image("fused eager", lambda: pipe(PROMPT, **call))
    pipe.enable_tpu_compile()
    pipe.tpu_warmup(prompt=PROMPT, **call)
    image("compiled", lambda: pipe(PROMPT, **call))

    print(f"tiny FLUX {args.size}x{args.size}, {args.steps} steps, shadow target {args.target}")
    head = f"{'mode':<14} {'programs':>8} {'launches':>8} {'refused':>7}"
    print(f"{head} {'no-est runs':>11} {'est ms/image':>12}")
    for mode, r in results.items():
        print(
            f"{mode:<14} {r['programs']:>8} {r['launches']:>8} {r['refused']:>7} {r['no_estimate_runs']:>11}"
            f" {r['estimated_ms']:>12.3f}"
        )
    print("(est ms/image: the target compiler's estimate, summed over the image's launches; not measured)")
    print(torch_tpu.target_report())


if __name__ == "__main__":
    main()
