"""Compiles side by side in strict eager: two threads at once vs one, and one thread's queue.

Each "set" is ``--programs`` strict-eager ops at shapes no earlier op used, so
each op compiles one new program. Four runs, each in a child process of its
own (the compile pool's size is read once per process):

- one thread runs set A and then set B, compiling at the op
  (``TORCH_TPU_COMPILE_THREADS=0``): the programs compile one after another;
- two threads run a set each, compiling at the op: compiles run outside the
  engine lock, so on two free cores they overlap (target <= 0.65x of the
  first run);
- one thread runs both sets with the launch queue (the default: new programs
  compile on the pool while the thread goes on);
- two threads with the queue.

Prints the wall and CPU times, the ratio of each run to the first, the
compiles, the most compiles in flight at once and the launches made from the
queue. The executable cache's disk tier is off (TORCH_TPU_CACHE_DIR=0), so every
program really compiles. Asserts nothing.

    .venv/bin/python bench/compile_threads.py              # 2 x 100 programs
    .venv/bin/python bench/compile_threads.py --quick      # 2 x 25
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

os.environ["TORCH_TPU_CACHE_DIR"] = "0"  # before torch_tpu loads: no disk tier, every program is new

import torch  # noqa: E402

import torch_tpu  # noqa: E402


def make_set(first_col: int, programs: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Operands on the device for |programs| ops of distinct shapes (uploads only: no compile)."""
    out = []
    for k in range(programs):
        shape = (8, first_col + k)
        out.append((torch.randn(shape).to("tpu"), torch.randn(shape).to("tpu")))
    return out


def run_set(operands: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for a, b in operands:
        torch.addcmul(a, a, b, value=0.5)  # one op, one new program per shape
    torch.tpu.synchronize()


def child(threads: int, n: int) -> None:
    """One run in this process: prints wall s, CPU s and the metrics as one line."""
    warm = make_set(10, 4)  # the runtime and the op's first lowering, outside the timings
    run_set(warm)
    sets = [make_set(1000 + i * 1000, n) for i in range(2)]
    torch_tpu.reset_metrics()
    c0, t0 = time.process_time(), time.perf_counter()
    if threads == 1:
        for s in sets:
            run_set(s)
    else:
        workers = [threading.Thread(target=run_set, args=(s,)) for s in sets]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = torch_tpu.metrics()
    print(
        wall,
        cpu,
        m["compiles"],
        m["compile_seconds"],
        m["max_concurrent_compiles"],
        m["queued_launches"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=100, help="programs per set")
    parser.add_argument("--quick", action="store_true", help="25 programs per set")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # threads, in a child process
    args = parser.parse_args()
    n = 25 if args.quick else args.programs
    if args.child:
        child(args.child, n)
        return
    runs = (
        ("one thread, at the op", 1, "0"),
        ("two threads, at the op", 2, "0"),
        ("one thread, queue", 1, None),
        ("two threads, queue", 2, None),
    )
    print(f"compile_threads: 2 sets of {n} new programs each, {os.cpu_count()} CPUs")
    print(
        f"{'run':<24}{'wall s':>8}{'CPU s':>8}{'ratio':>7}{'compiles':>10}{'compile s':>11}"
        f"{'most at once':>14}{'queued':>8}"
    )
    first = None
    for label, threads, pool in runs:
        env = dict(os.environ)
        env.pop("TORCH_TPU_COMPILE_THREADS", None)
        if pool is not None:
            env["TORCH_TPU_COMPILE_THREADS"] = pool
        argv = [sys.executable, __file__, "--child", str(threads), "--programs", str(n)]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout.split()
        wall, cpu, compiles, compile_s, most, queued = float(out[0]), float(out[1]), *out[2:]
        first = first or wall
        print(
            f"{label:<24}{wall:>8.2f}{cpu:>8.2f}{wall / first:>6.2f}x{compiles:>10}{float(compile_s):>11.2f}"
            f"{most:>14}{queued:>8}"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("ratio: wall time over the first run's (the issue's target for two threads at the op: <= 0.65x)")
    print(f"load average at the end: {load:.1f} (other processes share the CPUs: the ratios need free cores)")
    print("CPU s: the child's CPU time (all threads, the compiler's included); compile s adds each")
    print("compile's own wall time, so overlapping compiles count twice.")


if __name__ == "__main__":
    main()
