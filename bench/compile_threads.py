"""Compiles in two threads at once vs one after the other (strict eager).

Each "set" is ``--programs`` strict-eager ops at shapes no earlier op used, so
each op compiles one new program. One thread runs set A and then set B; then
two threads run sets C and D (as many programs, shapes of their own) side by
side. Compiles run outside the engine lock, so on a machine with two or more
free cores the two threads' compiles overlap and the pair finishes in well
under the single thread's time. Prints both times, the ratio (target <= 0.65x),
the compiles and the most compiles in flight at once. The executable cache's
disk tier is off (TORCH_TPU_CACHE_DIR=0), so every program really compiles.
Asserts nothing.

    .venv/bin/python bench/compile_threads.py              # 2 x 100 programs
    .venv/bin/python bench/compile_threads.py --quick      # 2 x 25
"""

from __future__ import annotations

import argparse
import os
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=100, help="programs per set")
    parser.add_argument("--quick", action="store_true", help="25 programs per set")
    args = parser.parse_args()
    n = 25 if args.quick else args.programs

    warm = make_set(10, 4)  # the runtime and the op's first lowering, outside the timings
    run_set(warm)

    sets = [make_set(1000 + i * 1000, n) for i in range(4)]  # A, B for one thread; C, D for two

    torch_tpu.reset_metrics()
    c0, t0 = time.process_time(), time.perf_counter()
    run_set(sets[0])
    run_set(sets[1])
    one, cpu1 = time.perf_counter() - t0, time.process_time() - c0
    m1 = torch_tpu.metrics()

    torch_tpu.reset_metrics()
    threads = [threading.Thread(target=run_set, args=(s,)) for s in sets[2:]]
    c0, t0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    two, cpu2 = time.perf_counter() - t0, time.process_time() - c0
    m2 = torch_tpu.metrics()

    print(f"compile_threads: 2 sets of {n} new programs each, {os.cpu_count()} CPUs")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{'run':<26}{'wall s':>8}{'CPU s':>8}{'compiles':>10}{'compile s':>11}{'most at once':>14}")
    rows = (("one thread, both sets", one, cpu1, m1), ("two threads, a set each", two, cpu2, m2))
    for label, wall, cpu, m in rows:
        print(
            f"{label:<26}{wall:>8.2f}{cpu:>8.2f}{m['compiles']:>10}{m['compile_seconds']:>11.2f}"
            f"{m['max_concurrent_compiles']:>14}"
        )
    ratio = two / one
    print(f"two threads / one thread: {ratio:.2f}x (target <= 0.65x: {'met' if ratio <= 0.65 else 'missed'})")
    print(f"load average at the end: {load:.1f} (other processes share the CPUs: the ratio needs free cores)")
    print("CPU s: this process's CPU time (all threads, the compiler's included); compile s adds each")
    print("compile's own wall time, so overlapping compiles count twice.")


if __name__ == "__main__":
    main()
