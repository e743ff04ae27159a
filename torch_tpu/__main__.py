"""python -m torch_tpu {info,demo,bench}"""

from __future__ import annotations

import argparse
import time

import torch

import torch_tpu


def info() -> None:
    torch.tpu._lazy_init()
    rt = torch_tpu._C._runtime_info()
    major, minor = rt["api_version"]
    print(f"plugin:    {rt['plugin_path']}")
    print(f"PJRT API:  {major}.{minor}")
    print(f"platform:  {rt['platform_name']} ({rt['platform_version']})")
    print(f"devices:   {rt['device_count']}")
    for i in range(rt["device_count"]):
        print(f"  tpu:{i}  {torch_tpu._C._device_kind(i)}")
    print("cache:     in-memory executable cache")


def _timed(model: torch.nn.Module, x: torch.Tensor, device: str) -> tuple[torch.Tensor, float]:
    with torch.no_grad():
        model(x)  # warm-up (compiles on tpu)
        if device == "tpu":
            torch.tpu.synchronize()
        start = time.perf_counter()
        y = model(x)
        out = y.cpu()
    return out, time.perf_counter() - start


def demo() -> None:
    info()
    print()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.LayerNorm(256),
        torch.nn.Linear(256, 64),
    )
    x = torch.randn(32, 64)
    ref, cpu_s = _timed(model, x, "cpu")
    out, tpu_s = _timed(model.to("tpu"), x.to("tpu"), "tpu")
    print(f"model: {model}")
    print(f"cpu:   {cpu_s * 1e3:8.2f} ms")
    print(f"tpu:   {tpu_s * 1e3:8.2f} ms")
    print(f"max abs difference: {(out - ref).abs().max().item():.3e}")
    print()
    print(torch_tpu.metrics_report())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m torch_tpu", description=__doc__)
    parser.add_argument("command", choices=["info", "demo", "bench"])
    args = parser.parse_args()
    if args.command == "info":
        info()
    elif args.command == "demo":
        demo()
    else:
        print("benchmarks: see bench/")


if __name__ == "__main__":
    main()
