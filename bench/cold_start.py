"""Cold start of the tiny FLUX pipeline: the strict-eager first image and the documented compiled flow.

Each flow runs in a child process of its own with a fresh, empty TORCH_TPU_CACHE_DIR (cold), as a
new user meets it: the README's diffusers example, ``torch_tpu.testing.tiny.flux_pipeline("tiny")``
at 128x128 with 4 steps, the transformer and the VAE on "tpu".

- ``strict``: the first image in strict eager (every op's program compiles on first use);
- ``compiled``: ``pipe.enable_tpu_compile()`` then ``pipe.tpu_warmup(...)`` (the documented warm-up).

Prints, per flow, the seconds from before the call to its end (pipeline construction and imports
excluded), a digest of the image (made after the timed part in the compiled flow), the compiles
and their summed seconds, the most compiles in flight at once and the launches made from the
compile queue. ``--compile-threads N`` sets TORCH_TPU_COMPILE_THREADS in the children (0: every
program compiles on the thread that needs it, as before the launch queue);
``--both`` runs each flow at 0 and at the default and prints the ratio. ``--warm`` runs each flow
again in a second process over the same cache directory (a warm start: the programs, and for the
compiled flow dynamo's frames, come from it). ``--against TREE`` compares this
checkout with another built one (an older commit: ``git worktree add``, then ``make lib`` and
``setup.py build_ext --inplace`` there), the two taking turns run by run so that a slow spell of the
machine falls on both, ``--runs`` times each; it prints each run, the medians and their ratio.
Asserts nothing.

    .venv/bin/python bench/cold_start.py            # both flows, default threads
    .venv/bin/python bench/cold_start.py --both     # also at TORCH_TPU_COMPILE_THREADS=0
    .venv/bin/python bench/cold_start.py --warm     # then a second process over the same cache
    .venv/bin/python bench/cold_start.py --against /tmp/old --runs 8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = "a photo of a cat"
CALL = dict(height=128, width=128, num_inference_steps=4, guidance_scale=0.0)


def child(flow: str) -> None:
    import torch

    import torch_tpu
    import torch_tpu.testing.tiny

    pipe = torch_tpu.testing.tiny.flux_pipeline("tiny")
    pipe.transformer.to("tpu")
    pipe.vae.to("tpu")
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    start = time.perf_counter()
    if flow == "strict":
        image = pipe(PROMPT, **CALL).images[0]
        image.getpixel((0, 0))  # the image is on the host
    else:
        pipe.enable_tpu_compile()
        pipe.tpu_warmup(prompt=PROMPT, **CALL)
    seconds = time.perf_counter() - start
    m = torch_tpu.metrics()
    if flow != "strict":
        image = pipe(PROMPT, **CALL).images[0]  # after the timed warm-up: the image it prepared for
    keys = ("compiles", "compile_seconds", "max_concurrent_compiles", "queued_launches")
    # .get: an older tree (--against) may not count all of them
    digest = hashlib.sha256(image.tobytes()).hexdigest()[:16]
    print(json.dumps({"seconds": seconds, "image": digest, **{k: m.get(k) for k in keys}}))


def run(flow: str, threads: str | None, warm: bool, tree: str | None = None) -> list[dict]:
    """The flow in a child over a new cache directory; with |warm|, then in a second child over it.
    With |tree|, the child imports torch_tpu from that checkout instead of this one."""
    with tempfile.TemporaryDirectory(prefix="torch_tpu_cold_") as cache:
        env = {**os.environ, "TORCH_TPU_CACHE_DIR": cache, "TORCH_TPU_COMPILE_NOTICE_MS": "0"}
        env.pop("TORCH_TPU_COMPILE_THREADS", None)
        if threads is not None:
            env["TORCH_TPU_COMPILE_THREADS"] = threads
        if tree is not None:
            env["PYTHONPATH"] = tree
        results = []
        for _ in range(2 if warm else 1):
            command = [sys.executable, __file__, "--child", flow]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=tree)
            if out.returncode != 0:
                raise SystemExit(f"{flow} child failed:\n{out.stderr[-3000:]}")
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        return results


def compare(tree: str, runs: int) -> None:
    """Each flow cold in this checkout and in |tree|, taking turns, |runs| times each."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(f"cold start, tiny FLUX 128x128, 4 steps; {os.cpu_count()} CPUs; {tree} against {here}")
    for flow in ("strict", "compiled"):
        seconds: dict[str, list[float]] = {tree: [], here: []}
        images = set()
        for i in range(runs):
            for where in (tree, here):
                r = run(flow, None, False, where)[0]
                seconds[where].append(r["seconds"])
                images.add(r["image"])
                print(
                    f"{flow:<9}{i:>3}  {where:<40}{r['seconds']:>7.2f} s  {r['compiles']} compiles"
                    f"  image {r['image']}"
                )
        old, new = (statistics.median(seconds[w]) for w in (tree, here))
        pairs = sorted(a / b for a, b in zip(seconds[tree], seconds[here]))
        print(
            f"{flow}: median {old:.2f} s there, {new:.2f} s here: {old / new:.2f}x "
            f"(run by run {pairs[0]:.2f}x to {pairs[-1]:.2f}x); "
            + ("the same image in every run" if len(images) == 1 else f"{len(images)} different images")
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end: {load:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("strict", "compiled"), help=argparse.SUPPRESS)
    parser.add_argument("--compile-threads", help="TORCH_TPU_COMPILE_THREADS for the children")
    parser.add_argument("--both", action="store_true", help="each flow at 0 threads and at the default")
    parser.add_argument("--warm", action="store_true", help="then a second process over the same cache")
    parser.add_argument("--against", metavar="TREE", help="another built checkout, run by run")
    parser.add_argument("--runs", type=int, default=6, help="runs of each flow in each tree (--against)")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.against:
        compare(os.path.abspath(args.against), args.runs)
        return
    settings = ["0", None] if args.both else [args.compile_threads]
    print(f"cold start, tiny FLUX 128x128, 4 steps; {os.cpu_count()} CPUs")
    header = f"{'flow':<15}{'threads':>9}{'seconds':>9}{'compiles':>10}{'compile s':>11}{'at once':>9}"
    print(header + f"{'queued':>8}")
    for flow in ("strict", "compiled"):
        first = None
        for threads in settings:
            for start, r in zip(("cold", "warm"), run(flow, threads, args.warm)):
                gain = ""
                if start == "cold":
                    first = first or r["seconds"]
                    if args.both and threads is None:
                        gain = f"   {first / r['seconds']:.2f}x faster than at 0"
                print(
                    f"{flow + (' ' + start if args.warm else ''):<15}{threads or 'default':>9}"
                    f"{r['seconds']:>9.2f}{r['compiles']:>10}{r['compile_seconds']:>11.2f}"
                    f"{r['max_concurrent_compiles']:>9}{r['queued_launches']:>8}{gain}"
                )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at the end: {load:.1f}; compile s sums each compile's wall time (overlaps twice)")


if __name__ == "__main__":
    main()
