"""python -m torch_tpu {info,demo,bench,target,precompile,cache import DIR}"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

import torch

import torch_tpu


def _no_chip_line(rt_error: BaseException | None = None) -> str | None:
    """One line for a plugin that can only compile here (libtpu on a host with no TPU)."""
    from torch_tpu import _discovery, targets

    plugin = os.environ.get("TORCH_TPU_PJRT_PLUGIN") or ""
    libtpu = _discovery.libtpu_path()
    is_libtpu = bool(plugin) and (plugin == libtpu or os.path.basename(plugin).startswith("libtpu"))
    if not is_libtpu or _discovery.has_tpu_chips():
        return None
    avail = targets.available_topologies(plugin)
    listed = ", ".join(avail) if avail else "none (the plugin made no topology)"
    return (
        f"torch_tpu: no TPU is attached to this host (no /dev/accel*, no /dev/vfio TPU), so {plugin} cannot "
        f"run programs here; compile-only targets available: {listed} "
        f"(TORCH_TPU_TARGET=v6e:1x1, or python -m torch_tpu target --target v6e:1x1 script.py)"
    )


def info() -> None:
    line = _no_chip_line()
    if line:
        print(line)
        return
    torch.tpu._lazy_init()
    rt = torch_tpu._C._runtime_info()
    major, minor = rt["api_version"]
    print(f"plugin:    {rt['plugin_path']}")
    print(f"PJRT API:  {major}.{minor}")
    print(f"platform:  {rt['platform_name']} ({rt['platform_version']})")
    print(f"devices:   {rt['device_count']}")
    for i in range(rt["device_count"]):
        print(f"  tpu:{i}  {torch_tpu._C._device_kind(i)}")
    print(f"torch:     {torch.__version__} (torch_tpu built against {torch_tpu._C._built_torch_version})")
    for name in ("TORCH_TPU_PJRT_OPTIONS", "TORCH_TPU_XLA_OPTIONS"):
        if os.environ.get(name):
            print(f"{name}: {os.environ[name]}")
    ci = torch_tpu._C._cache_info()
    if ci["enabled"]:
        print(f"cache:     {ci['dir']} ({ci['entries']} programs, {ci['bytes'] / 2**20:.1f} MiB on disk)")
    else:
        print(f"cache:     in memory only ({ci['refused'] or 'TORCH_TPU_CACHE_DIR=0'})")


def _timed(model: torch.nn.Module, x: torch.Tensor, device: str) -> tuple[torch.Tensor, float]:
    with torch.no_grad():
        model(x)  # warm-up (compiles on tpu)
        if device == "tpu":
            torch.tpu.synchronize()
        start = time.perf_counter()
        y = model(x)
        out = y.cpu()
    return out, time.perf_counter() - start


def mlp_demo() -> None:
    """The MLP block on tpu vs CPU (the demo when diffusers is not installed)."""
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


# The seed's documentation examples use 1024x1024. The tiny VAE upsamples only
# 2x, so 1024x1024 would be 65,536 image tokens in the transformer: far too slow
# for a demo on a CPU plugin. 128x128 (1,024 image tokens) keeps each image
# around a second here.
DEMO_SIZE = 128
DEMO_PROMPT = "a photo of a cat"
DEMO_LATER = 2  # timed images after the first, per mode


def _pixels(image: Any) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0)


def _run_mode(name: str, reference: torch.Tensor, seed_example: Any) -> dict[str, Any]:
    """Runs one of the seed's examples (``seed_example(pipe, call)``) on a fresh
    tiny pipeline and measures it."""
    from torch_tpu.testing.tiny import flux_pipeline

    pipe = flux_pipeline("tiny")  # the seed: FluxPipeline.from_pretrained(..., torch_dtype=torch.bfloat16)
    pipe.transformer.to("tpu")
    pipe.vae.to("tpu")
    # _execution_device is now tpu automatically
    assert pipe._execution_device.type == "tpu"

    def call(output_type: str = "pil") -> Any:
        return pipe(
            DEMO_PROMPT,
            height=DEMO_SIZE,
            width=DEMO_SIZE,
            num_inference_steps=4,
            guidance_scale=0.0,
            generator=torch.Generator().manual_seed(0),
            output_type=output_type,
        ).images[0]

    torch_tpu.reset_metrics()
    first_s, image = seed_example(pipe, call)
    first = torch_tpu.metrics()
    torch_tpu.reset_metrics()
    later_s = 0.0
    with _mode_of(name):
        for _ in range(DEMO_LATER):
            start = time.perf_counter()
            image = call()
            later_s += time.perf_counter() - start
        later = torch_tpu.metrics()
        pt = call("pt")
    fallbacks = {**first["cpu_fallbacks"]}
    for op, n in later["cpu_fallbacks"].items():
        fallbacks[op] = fallbacks.get(op, 0) + n
    return {
        "mode": name,
        "image": image,
        "first_s": first_s,
        "later_s": later_s / DEMO_LATER,
        "compiles": f"{first['compiles']} / {later['compiles']}",
        "fallbacks": sum(fallbacks.values()),
        "diff": (pt.cpu() - reference).abs().max().item(),
    }


def _mode_of(name: str) -> Any:
    import contextlib

    if name == "fused eager":
        return torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE)
    return contextlib.nullcontext()


def _strict_eager(pipe: Any, call: Any) -> tuple[float, Any]:
    # Strict eager is the default: nothing to enable.
    start = time.perf_counter()
    image = call()
    return time.perf_counter() - start, image


def _compiled(pipe: Any, call: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    pipe.enable_tpu_compile()
    pipe.tpu_warmup(
        prompt=DEMO_PROMPT, height=DEMO_SIZE, width=DEMO_SIZE, num_inference_steps=4, guidance_scale=0.0
    )
    warm = time.perf_counter() - start
    start = time.perf_counter()
    image = call()
    print(f"  compiled: warm-up {warm:.2f} s, then one image in {time.perf_counter() - start:.3f} s")
    return warm, image


def _fused_eager(pipe: Any, call: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        image = call()
    return time.perf_counter() - start, image


def diffusers_demo(output: str = "output.png") -> None:
    """The seed's three examples on the tiny FLUX pipeline, each against CPU."""
    from torch_tpu.testing.tiny import flux_pipeline

    print(f'tiny FluxPipeline (torch_tpu.testing.tiny), "{DEMO_PROMPT}", {DEMO_SIZE}x{DEMO_SIZE}, 4 steps')
    print("transformer and VAE on tpu, text encoders on CPU; CPU reference: the same pipeline on CPU\n")
    cpu = flux_pipeline("tiny")
    start = time.perf_counter()
    reference = cpu(
        DEMO_PROMPT,
        height=DEMO_SIZE,
        width=DEMO_SIZE,
        num_inference_steps=4,
        guidance_scale=0.0,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
    ).images[0]
    cpu_s = time.perf_counter() - start
    rows = [
        _run_mode("strict eager", reference, _strict_eager),
        _run_mode("compiled", reference, _compiled),
        _run_mode("fused eager", reference, _fused_eager),
    ]
    rows[0]["image"].save(output)
    header = (
        f"{'mode':<14}{'first image':>13}{'later (each)':>14}"
        f"{'compiles first/later':>22}{'CPU fallbacks':>15}{'max |tpu-cpu|':>15}"
    )
    print()
    print(header)
    print("-" * len(header))
    print(f"{'cpu (torch)':<14}{cpu_s:>12.3f}s{'':>14}{'':>22}{'':>15}{'':>15}")
    for r in rows:
        print(
            f"{r['mode']:<14}{r['first_s']:>12.3f}s{r['later_s']:>13.3f}s{r['compiles']:>22}"
            f"{r['fallbacks']:>15}{r['diff']:>15.3e}"
        )
    print()
    print("first image: includes compiling (compiled mode: enable_tpu_compile + tpu_warmup).")
    print("compiles: programs the plugin compiled; the modes share one process and its executable cache.")
    print("max |tpu-cpu|: float32 pixels in [0, 1] (output_type='pt'), same CPU generator seed.")
    print(f"saved {output} (strict eager)")


class _NotActionable(logging.Filter):
    """Drops transformers' "requires torchvision" notes: the tiny pipeline never
    processes images, so a demo user has nothing to act on. The demo only: a
    program that imports torch_tpu keeps every library message."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "requires torchvision" not in record.getMessage()


def demo() -> None:
    logging.getLogger("transformers.utils.import_utils").addFilter(_NotActionable())
    info()
    print()
    try:
        import diffusers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("diffusers/transformers not installed: the MLP demo instead\n")
        mlp_demo()
        return
    diffusers_demo()


def run_under_target(topology: str, script: str, script_args: list[str]) -> None:
    """Runs |script| on this process's plugin with every program shadow-compiled for |topology|,
    then prints the target report."""
    import runpy
    import sys

    torch_tpu.set_target(topology)
    sys.argv = [script, *script_args]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        torch.tpu.synchronize()
        print(torch_tpu.target_report())


def precompile(topology: str, script: str, script_args: list[str], cache_dir: str | None = None) -> None:
    """Runs |script| on this process's plugin, compiling each of its programs for |topology| too,
    and writes the target's executables, serialised, into the cache directory (--cache-dir, else
    TORCH_TPU_CACHE_DIR's): a TPU host with the same libtpu loads them without compiling, after
    `python -m torch_tpu cache import DIR` (or with TORCH_TPU_CACHE_DIR=DIR and its mac.key)."""
    import runpy
    import sys

    from torch_tpu import targets

    if cache_dir:
        # before the cache's first use: it reads the directory once
        os.environ["TORCH_TPU_CACHE_DIR"] = os.path.abspath(cache_dir)
    ci = torch_tpu._C._cache_info()
    if not ci["enabled"]:
        raise RuntimeError(f"precompile needs a cache directory to write to: {ci['refused']}")
    torch_tpu.set_target(topology)
    targets.set_precompile(True)
    sys.argv = [script, *script_args]
    start = time.perf_counter()
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        # every compile for the target ends while precompiling is on
        torch.tpu.synchronize()
        torch_tpu._C._shadow_wait()
        targets.set_precompile(False)
    report = torch_tpu.target_report()
    stored = [p for p in report.programs if p["precompiled"]]
    spmd = sum(1 for p in report.compiled if p["num_partitions"] > 1)
    print(report)
    print(
        f"precompiled {len(stored)} programs for {topology} into {ci['dir']} in "
        f"{time.perf_counter() - start:.1f} s ({sum(p['from_cache'] for p in stored)} were there already; "
        f"{len(report.failed)} refused by the target's compiler, {spmd} SPMD programs not precompiled)"
    )
    print(
        f"on a TPU host with the same libtpu ({report.target['plugin_path']}, the same path) and torch_tpu "
        f"{torch_tpu.__version__}: python -m torch_tpu cache import {ci['dir']}"
    )


def cache_import(source: str) -> None:
    """Imports a cache copied from elsewhere: each entry must check under the source's
    own key (its mac.key) and load in the plugin, and is rewritten under this cache's key."""
    ci = torch_tpu._C._cache_info()
    result = torch_tpu._C._cache_import(source)
    print(f"imported {result['imported']} programs into {ci['dir']}; refused {result['refused']}")
    if result["refused"]:
        raise SystemExit(1)


def main() -> None:
    import sys

    if len(sys.argv) > 1 and sys.argv[1] == "target":
        tp = argparse.ArgumentParser(prog="python -m torch_tpu target", description=run_under_target.__doc__)
        tp.add_argument("--target", required=True, help="topology name, e.g. v6e:1x1 or v5e:2x2")
        tp.add_argument("script")
        tp.add_argument("args", nargs=argparse.REMAINDER)
        targs = tp.parse_args(sys.argv[2:])
        try:
            run_under_target(targs.target, targs.script, targs.args)
        except RuntimeError as e:
            if "target" in str(e):
                raise SystemExit(f"torch_tpu: {e}") from None
            raise
        return
    if len(sys.argv) > 1 and sys.argv[1] == "precompile":
        pp = argparse.ArgumentParser(prog="python -m torch_tpu precompile", description=precompile.__doc__)
        pp.add_argument("--target", required=True, help="topology name, e.g. v6e:1x1")
        pp.add_argument("--cache-dir", help="where to write the programs (default: TORCH_TPU_CACHE_DIR's)")
        pp.add_argument("script")
        pp.add_argument("args", nargs=argparse.REMAINDER)
        pargs = pp.parse_args(sys.argv[2:])
        try:
            precompile(pargs.target, pargs.script, pargs.args, pargs.cache_dir)
        except RuntimeError as e:
            if "target" in str(e) or "precompile" in str(e):
                raise SystemExit(f"torch_tpu: {e}") from None
            raise
        return
    parser = argparse.ArgumentParser(prog="python -m torch_tpu", description=__doc__)
    parser.add_argument("command", choices=["info", "demo", "bench", "target", "precompile", "cache"])
    parser.add_argument("args", nargs="*", help="cache: import DIR")
    args = parser.parse_args()
    if args.command == "cache":
        if len(args.args) != 2 or args.args[0] != "import":
            parser.error("usage: python -m torch_tpu cache import DIR")
        try:
            cache_import(args.args[1])
        except RuntimeError as e:
            raise SystemExit(f"torch_tpu: {e}") from None
    elif args.command == "info":
        try:
            info()
        except RuntimeError as e:  # a bad plugin or configuration: one line, no traceback
            raise SystemExit(f"torch_tpu: {e}") from None
    elif args.command == "demo":
        demo()
    else:
        print("benchmarks: see bench/")


if __name__ == "__main__":
    main()
