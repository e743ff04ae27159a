"""Scaled dot product attention on "tpu" against PyTorch CPU's SDPA.

For each shape: forward, and forward + backward, f32, median of a few runs
after warm-up. "tpu" runs one program per SDPA call (strict eager); CPU runs
PyTorch's own SDPA (its flash kernel for CPU) at the thread counts given.
Prints ms and the ratio tpu / CPU; asserts nothing.

    .venv/bin/python bench/attention.py
    .venv/bin/python bench/attention.py --shapes 1,4,1040,64 --reps 5
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from timing import median_seconds

import torch_tpu  # noqa: F401

DEFAULT_SHAPES = ["1,4,1040,64", "1,8,4096,64"]
CPU_TIME = False


def timed(fn, reps: int, sync) -> float:
    """Median wall ms of |reps| calls after one warm-up; with --cpu-time, the
    process's CPU ms instead (all threads: steadier on a shared machine)."""
    clock = time.process_time if CPU_TIME else time.perf_counter
    return median_seconds(fn, reps, sync, clock=clock) * 1e3


def run(shape: tuple[int, ...], device: str, backward: bool, reps: int) -> tuple[float, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
    q, k, v = (t.to(device).requires_grad_(backward) for t in (q, k, v))
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    out = {}

    def step() -> None:
        o = F.scaled_dot_product_attention(q, k, v)
        if backward:
            (dq,) = torch.autograd.grad(o, (q,), torch.ones_like(o))
            out["r"] = dq
        else:
            out["r"] = o

    ms = timed(step, reps, sync)
    return ms, out["r"].detach().cpu()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--threads", type=int, nargs="*", default=None, help="CPU thread counts (default 1 and all)"
    )
    ap.add_argument("--cpu-time", action="store_true", help="process CPU time instead of wall time")
    ap.add_argument("--forward-only", action="store_true")
    args = ap.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu_time
    threads = args.threads or sorted({1, torch.get_num_threads()})
    clock = "process CPU ms" if CPU_TIME else "wall ms"
    print(f"SDPA f32, median of {args.reps} ({clock}); CPU threads {threads}")
    print(
        f"{'shape':>16} {'pass':>8} {'tpu ms':>9} "
        + " ".join(f"{'cpu' + str(t) + ' ms':>9}" for t in threads)
        + f" {'tpu/cpu best':>13} {'max err':>9}"
    )
    default_threads = torch.get_num_threads()
    for s in args.shapes:
        shape = tuple(int(x) for x in s.split(","))
        for backward in (False,) if args.forward_only else (False, True):
            tpu_ms, tpu_r = run(shape, "tpu", backward, args.reps)
            cpu = []
            for t in threads:
                torch.set_num_threads(t)
                ms, cpu_r = run(shape, "cpu", backward, args.reps)
                cpu.append(ms)
            torch.set_num_threads(default_threads)
            err = (tpu_r - cpu_r).abs().max().item()
            print(
                f"{s:>16} {'fwd+bwd' if backward else 'fwd':>8} {tpu_ms:9.2f} "
                + " ".join(f"{c:9.2f}" for c in cpu)
                + f" {tpu_ms / min(cpu):13.2f} {err:9.1e}"
            )


if __name__ == "__main__":
    main()
