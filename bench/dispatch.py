"""Per-op dispatch cost of cached strict-eager ops, next to PyTorch CPU.

Measures µs per `a + b` on small tensors once the program is cached, so
what is left is dispatch, the parameter upload and the launch. Prints a
table; asserts nothing.
"""

from __future__ import annotations

import time

import torch

import torch_tpu


def per_op_us(fn, iters: int, sync) -> float:
    for _ in range(20):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


def main() -> None:
    rows = []
    for n in (4, 256, 4096):
        a_cpu, b_cpu = torch.randn(n), torch.randn(n)
        a, b = a_cpu.to("tpu"), b_cpu.to("tpu")
        cpu = per_op_us(lambda x=a_cpu, y=b_cpu: x + y, 20000, lambda: None)
        tpu = per_op_us(lambda x=a, y=b: x + y, 5000, torch.tpu.synchronize)
        tpu_s = per_op_us(lambda x=a: x * 0.5, 5000, torch.tpu.synchronize)
        rows.append((n, cpu, tpu, tpu_s))
    info = torch_tpu._C._runtime_info()
    print(f"strict eager dispatch, cached programs, plugin platform={info['platform_name']}")
    print(f"{'numel':>8} {'cpu a+b':>12} {'tpu a+b':>12} {'tpu a*0.5':>12}   (µs per op)")
    for n, cpu, tpu, tpu_s in rows:
        print(f"{n:>8} {cpu:>12.1f} {tpu:>12.1f} {tpu_s:>12.1f}")
    print(torch_tpu.metrics_report())


if __name__ == "__main__":
    main()
