"""The full-size FLUX.1-schnell transformer compiled for a TPU target from shapes alone.

    python bench/flux_full_target.py [--target v6e:1x1] [--cache-dir D] [--whole-graph-block]
    python bench/flux_full_target.py --tp 4 --target v5e:2x2
    python bench/flux_full_target.py --cpu [--size 256] [--text 64]

Target mode (default): FluxTransformer2DModel at FLUX.1-schnell's published configuration
(in_channels 64, 19 double and 38 single blocks, 24 heads x 128, joint_attention_dim 4096, pooled
768, rope axes 16/56/56, no guidance embedding), made on the meta device in bf16 (no weights: 24 GB
would not fit here), called once at 1024x1024 (4096 image + 512 text tokens) under
``torch.compile(backend=TpuBackend(target_only=True))``: the transformer's programs of the
documented warm-up (each of the 4 denoising steps runs the same programs) are lowered for the TPU
and compiled by libtpu for the target, never compiled or run on this host's plugin. Repeated blocks
compile once (TpuBackend's block compile). Prints the compile seconds (cold: nothing in the cache
dir; run again for warm: the target's records come from the cache dir), the host's peak RSS, the
largest program's HBM need, and the compiler's estimated ms per step and per 4-step image (an
estimate, never a measurement) with the implied MFU.

The whole-graph figure is an estimate: one program of 19 + 38 blocks would take about 20 minutes
here, so it is estimated from the blocks' own compile seconds (19 x double + 38 x single + the rest).
``--whole-graph-block`` also compiles one double + one single block as one program, the closest
measured whole-graph figure.

``--tp N``: tensor parallelism over N chips of the target (a topology of N chips, e.g. v5e:2x2):
the meta model's parameters are split by its _tp_plan (torch_tpu.distributed.parallelize_module
records each split on the meta parameter), and every program is one SPMD program of N partitions;
the compiler's figures are per chip. The CPU plugin is asked for N devices (the mesh's ids must
exist here), though nothing runs on them.

CPU mode (--cpu): a depth-reduced FLUX at full width (2 double + 4 single blocks, random bf16
weights), on this host's plugin: block-compiled vs whole-graph compile seconds and run seconds per
step. Fewer tokens than 1024x1024 by default (--size), because a full-size step takes minutes on
two CPU cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from typing import Any

SCHNELL = dict(
    patch_size=1,
    in_channels=64,
    num_layers=19,
    num_single_layers=38,
    attention_head_dim=128,
    num_attention_heads=24,
    joint_attention_dim=4096,
    pooled_projection_dim=768,
    guidance_embeds=False,
    axes_dims_rope=(16, 56, 56),
)


def traced_frames() -> int:
    """Graphs dynamo traced in this process (0 where it loaded a saved frame)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def inputs(size: int, text: int, device: Any, dtype: Any) -> dict[str, Any]:
    import torch

    tokens = (size // 16) ** 2  # VAE 8x down, then 2x2 packing
    g = torch.Generator().manual_seed(0)
    made = {
        "hidden_states": torch.randn(1, tokens, 64, generator=g),
        "encoder_hidden_states": torch.randn(1, text, 4096, generator=g),
        "pooled_projections": torch.randn(1, 768, generator=g),
        "timestep": torch.tensor([1.0]),
        "img_ids": torch.zeros(tokens, 3),
        "txt_ids": torch.zeros(text, 3),
    }
    if device == "meta":
        return {k: torch.empty(v.shape, dtype=dtype, device="meta") for k, v in made.items()}
    return {k: v.to(device=device, dtype=dtype) for k, v in made.items()}


def target_mode(args: argparse.Namespace) -> None:
    import torch
    from diffusers import FluxTransformer2DModel

    import torch_tpu
    from torch_tpu import TpuBackend
    from torch_tpu.targets import GiB, hbm_need

    start = time.perf_counter()
    torch_tpu.set_target(args.target)
    chip = torch_tpu.target_report().chip
    with torch.device("meta"):
        model = FluxTransformer2DModel(**SCHNELL).to(torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    per_chip = params * 2  # weight bytes each chip holds
    if args.tp > 1:
        from torch_tpu.distributed import Mesh, parallelize_module
        from torch_tpu.targets import tp_argument_bounds

        bounds = tp_argument_bounds(model, {}, args.tp)
        model = parallelize_module(model, Mesh(list(range(args.tp)), (args.tp,), ("tp",)))
        per_chip = bounds["sharded"] // args.tp + bounds["replicated"]
    x = inputs(1024, 512, "meta", torch.bfloat16)
    setup = time.perf_counter() - start
    backend = TpuBackend(target_only=True, name="transformer")
    if not args.no_mark:  # as enable_tpu_compile does: dynamo traces each distinct block once
        torch_tpu.mark_repeated_blocks(model)
    torch_tpu.reset_metrics()
    start = time.perf_counter()
    # as enable_tpu_compile does: a warm process loads dynamo's frame here instead of tracing
    compiled = torch_tpu.cached_compile(model, backend=backend, dynamic=False)
    loaded = time.perf_counter() - start
    with torch.no_grad():
        out = compiled(**x, return_dict=False)[0]
    traced = time.perf_counter() - start - loaded
    report = torch_tpu.target_report()  # waits for the target compiles still in flight
    wall = time.perf_counter() - start
    print(f"FLUX.1-schnell transformer: {params / 1e9:.2f} B parameters (meta, bf16: no weights), 1024x1024")
    print(f"target {args.target} ({report.target['device_kind']}), output {list(out.shape)} {out.dtype}")
    if args.tp > 1:
        print(
            f"TP over {args.tp} chips: {bounds['sharded'] / GiB:.2f} GiB of weights split, "
            f"{bounds['replicated'] / GiB:.2f} GiB replicated; partitions per program "
            f"{sorted({p['num_partitions'] for p in report.programs})}"
        )
    print(f"setup (import, target, meta model): {setup:.1f} s")
    cold = not any(p["from_cache"] for p in report.programs)
    print(
        f"compile wall time, dynamo to the last target compile: {wall:.1f} s "
        f"({'cold' if cold else 'warm: records from the cache dir'}); cached_compile {loaded:.1f} s "
        f"({'loaded dynamo' if not traced_frames() else 'nothing to load'}'s frame), "
        f"the first call returned after {traced:.1f} s "
        f"(target compiles run on the compile pool meanwhile: TORCH_TPU_COMPILE_THREADS="
        f"{os.environ.get('TORCH_TPU_COMPILE_THREADS', f'unset, {os.cpu_count()} cores')})"
    )
    print(
        f"  dynamo: {traced_frames()} graphs traced; {backend.region_calls} block calls, "
        f"{backend.region_bodies} distinct blocks"
    )
    print(f"  programs traced: {torch_tpu.metrics()['traced_programs']}")
    print(f"  host peak RSS: {rss_gib():.2f} GiB")
    step = 0.0
    no_est = []
    flops = 0.0  # of the programs with an estimate: the MFU's numerator
    compile_by_label: dict[str, float] = {}
    # Runs are counted per label (TpuBackend.target_runs); should a label have several programs,
    # which of its calls used which is not recorded: its runs take the label's largest estimate
    # (an upper bound when the programs' estimates differ).
    by_label: dict[str, list[dict]] = {}
    for p in report.programs:
        by_label.setdefault(p["label"], []).append(p)
    for p in report.programs:
        runs = backend.target_runs.get(p["label"], 0)
        need = hbm_need(p)
        est = p["estimated_seconds"]
        compile_by_label[p["label"]] = p["compile_seconds"]
        shared = len(by_label[p["label"]])
        parts = f"{p['num_partitions']}p " if args.tp > 1 else ""  # the program's partitions (chips)
        print(
            f"  {p['label'][:70]:<70} x{runs:<3}{'*' if shared > 1 else ' '}{parts}"
            f"compile {p['compile_seconds']:6.1f} s"
            f"{' (cache)' if p['from_cache'] else ''}  "
            f"HBM {need / GiB if need else 0:6.2f} GiB  "
            f"est {est * 1e3 if est else float('nan'):8.3f} ms"
            + (f"  REFUSED: {p['error'][:200]}" if p["error"] else "")
        )
    for label, programs in by_label.items():
        runs = backend.target_runs.get(label, 0)
        ok = [p for p in programs if p["error"] is None]
        if not runs or not ok:
            continue
        if all(p["estimated_seconds"] for p in ok):
            top = max(ok, key=lambda p: p["estimated_seconds"])
            step += runs * top["estimated_seconds"]
            flops += runs * (top["flops"] or 0)
        else:
            no_est.append(label)
    if any(len(v) > 1 for v in by_label.values()):
        print("  * runs of the label, over its programs (each run counted at the label's largest estimate)")
    print(f"  target compile seconds, all programs: {report.compile_seconds:.1f} s")
    if report.largest is not None:
        need = hbm_need(report.largest) or 0
        cap = f" of {chip.hbm_bytes / GiB:.0f} GiB" if chip else ""
        print(
            f"  largest program HBM need{' per chip' if args.tp > 1 else ''}: {need / GiB:.2f} GiB{cap} "
            "(weights of one block as arguments)"
        )
    print(
        f"  weights in HBM (bf16, all blocks){f' per chip of {args.tp}' if args.tp > 1 else ''}: "
        f"{per_chip / GiB:.2f} GiB{f' of {chip.hbm_bytes / GiB:.0f} GiB' if chip else ''}"
    )
    missing = f"; no estimate for {', '.join(no_est)}" if no_est else ""
    if step > 0:
        print(
            f"  estimated device time per step (the compiler's estimate): {step * 1e3:.1f} ms, "
            f"per 4-step image {4 * step * 1e3:.1f} ms{missing}"
        )
    else:  # never a sum of nothing: 0 ms would read as a figure
        print(f"  estimated device time per step and per 4-step image: no estimate{missing}")
    if chip and step > 0:
        print(
            f"  implied MFU (programs with an estimate): "
            f"{flops / (step * chip.bf16_peak_flops) * 100:.1f}% of {chip.name} bf16 peak"
            + (" (per chip: the compiler's flops and estimate are one partition's)" if args.tp > 1 else "")
        )
    blocks = {lab: s for lab, s in compile_by_label.items() if "block" in lab}
    # per program: the graphs before and after the blocks share a label
    rest = sum(p["compile_seconds"] for p in report.programs if "block" not in p["label"])
    double = next(
        (s for lab, s in blocks.items() if "transformer_blocks" in lab and "single" not in lab), None
    )
    single = next((s for lab, s in blocks.items() if "single_transformer_blocks" in lab), None)
    if cold and double is not None and single is not None:
        whole = 19 * double + 38 * single + rest
        print(
            f"  whole-graph compile, ESTIMATE (19 x {double:.1f} s + 38 x {single:.1f} s + {rest:.1f} s, "
            f"assuming XLA's time grows linearly with the blocks): {whole:.0f} s = {whole / 60:.1f} min"
        )
    if args.whole_graph_block:
        whole_slice(args)


def whole_slice(args: argparse.Namespace) -> None:
    """One double + one single block as one program: a measured whole-graph figure."""
    import torch
    from diffusers import FluxTransformer2DModel

    import torch_tpu
    from torch_tpu import TpuBackend

    torch._dynamo.reset()
    torch_tpu.reset_target_report()
    with torch.device("meta"):
        model = FluxTransformer2DModel(**{**SCHNELL, "num_layers": 1, "num_single_layers": 1})
        model = model.to(torch.bfloat16).eval()
    compiled = torch.compile(model, backend=TpuBackend(target_only=True, blocks=False), dynamic=False)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(**inputs(1024, 512, "meta", torch.bfloat16), return_dict=False)
    secs = torch_tpu.target_report().compile_seconds  # waits for the compile in flight
    wall = time.perf_counter() - start
    print(
        f"  whole graph of 1 double + 1 single block (one program): {wall:.1f} s wall, {secs:.1f} s compile"
    )


def cpu_mode(args: argparse.Namespace) -> None:
    import torch
    from diffusers import FluxTransformer2DModel

    import torch_tpu
    from torch_tpu import TpuBackend

    torch.manual_seed(0)
    cfg = {**SCHNELL, "num_layers": 2, "num_single_layers": 4}
    model = FluxTransformer2DModel(**cfg).to(torch.bfloat16).eval().to("tpu")
    x = inputs(args.size, args.text, "tpu", torch.bfloat16)
    tokens = x["hidden_states"].shape[1]
    print(
        f"depth-reduced FLUX at full width (2 double + 4 single blocks, "
        f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, bf16), "
        f"{args.size}x{args.size}: {tokens} image + {args.text} text tokens, on this host's plugin"
    )
    outs = {}
    for name, blocks in (("block-compiled", True), ("whole-graph", False)):
        torch._dynamo.reset()
        if blocks:  # as enable_tpu_compile does (a whole-graph compile inlines the marked blocks)
            torch_tpu.mark_repeated_blocks(model)
        compiled = torch.compile(model, backend=TpuBackend(blocks=blocks), dynamic=False)
        torch_tpu.reset_metrics()
        with torch.no_grad():
            start = time.perf_counter()
            out = compiled(**x, return_dict=False)[0]
            torch.tpu.synchronize()
            first = time.perf_counter() - start
            m = torch_tpu.metrics()
            runs = []
            for _ in range(args.steps):
                start = time.perf_counter()
                out = compiled(**x, return_dict=False)[0]
                torch.tpu.synchronize()
                runs.append(time.perf_counter() - start)
        outs[name] = out.float().cpu()
        compile_s = m["compile_seconds_block"] + m["compile_seconds_compiled_graph"]
        print(
            f"  {name:<15} first call (compile + run) {first:6.1f} s, {m['compiles']} plugin compiles "
            f"({compile_s:.1f} s of the model's), programs {m['traced_programs']}; "
            f"per step {min(runs):.3f} s (min of {len(runs)}), mean {sum(runs) / len(runs):.3f} s"
        )
    diff = (outs["block-compiled"] - outs["whole-graph"]).abs().max().item()
    print(f"  max |block - whole|: {diff:.3e} (bf16)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v6e:1x1")
    ap.add_argument("--cache-dir", help="TORCH_TPU_CACHE_DIR for this run (default: a new empty one: cold)")
    ap.add_argument("--whole-graph-block", action="store_true")
    ap.add_argument("--no-mark", action="store_true", help="leave the blocks unmarked (dynamo traces all 57)")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--tp", type=int, default=1, help="tensor parallelism over this many target chips")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--text", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    if args.tp > 1:  # before torch_tpu loads the plugin
        os.environ.setdefault("TORCH_TPU_NUM_DEVICES", str(args.tp))
    os.environ["TORCH_TPU_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="flux_full_")
    print(f"cache dir: {os.environ['TORCH_TPU_CACHE_DIR']}", file=sys.stderr)
    if args.cpu:
        cpu_mode(args)
    else:
        target_mode(args)


if __name__ == "__main__":
    main()
