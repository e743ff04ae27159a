"""The tiny FLUX transformer with tensor parallelism over 4 devices, shadow-compiled for v5e:2x2.

    TORCH_TPU_NUM_DEVICES=4 python bench/targets_flux_tp.py [--target v5e:2x2] [--aligned]

Shards the transformer by its _tp_plan (torch_tpu.distributed.parallelize_module) over a 4-device
mesh of this host's plugin, runs it compiled (TpuBackend), and compiles every SPMD program for the
target's 4 chips. Prints, per SPMD program, the compiler's per-chip argument bytes against two
bounds (torch_tpu.targets.tp_argument_bounds): dense, 1/4 x sharded parameter bytes + replicated
bytes + the inputs, and tiled, the same with each chip's pieces padded to TPU tiles. At the tiny
model's widths the padding dominates; ``--aligned`` takes a model whose widths keep tiles full
(torch_tpu.testing.tiny.flux_transformer_tile_aligned), where the dense bound nearly holds.
``--meta`` does it from shapes alone: the model on the meta device, the plan's splits recorded
on its parameters, ``TpuBackend(target_only=True)``: nothing runs or compiles on this host's
plugin, the trace declares each split and the target compiles the SPMD program.
"""

from __future__ import annotations

import argparse
import json

import torch

import torch_tpu
import torch_tpu.testing.tiny as tiny
from torch_tpu.distributed import Mesh, parallelize_module
from torch_tpu.targets import tp_argument_bounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v5e:2x2")
    ap.add_argument("--aligned", action="store_true", help="the tile-aligned tiny FLUX config")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures (for tests)")
    ap.add_argument("--meta", action="store_true", help="from shapes alone (meta model, target_only)")
    args = ap.parse_args()
    torch_tpu.set_target(args.target)
    if args.aligned:
        model, inputs = tiny.flux_transformer_tile_aligned(), tiny.flux_transformer_tile_aligned_inputs()
    else:
        model, inputs = tiny.flux_transformer("tiny"), tiny.flux_transformer_inputs()
    bounds = tp_argument_bounds(model, inputs, 4)
    where = "meta" if args.meta else "tpu"
    model = parallelize_module(model.to(where), Mesh([0, 1, 2, 3], (4,), ("tp",)))
    inputs = {k: v.to(where) for k, v in inputs.items()}
    torch_tpu.reset_metrics()
    backend = torch_tpu.TpuBackend(target_only=args.meta)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        compiled(**inputs, return_dict=False)
    torch.tpu.synchronize()
    m = torch_tpu.metrics()
    # graphs compiled for this host's plugin (its one-time dtype probe is not the model's)
    plugin_graph_compiles = m["compiles_compiled_graph"] + m["compiles_block"]
    report = torch_tpu.target_report()
    print(
        f"parameters: {bounds['sharded']} B sharded, {bounds['replicated']} B replicated; "
        f"inputs {bounds['inputs']} B"
    )
    print(f"bound per chip: dense {bounds['dense']} B, tile-padded {bounds['tiled']} B")
    for p in report.programs:
        if p["num_partitions"] > 1:
            arg = p["memory"]["argument_bytes"] if p["memory"] else None
            err = p["error"] and p["error"][:120]
            ratio = f"{arg / bounds['dense']:.4f}x dense, {arg / bounds['tiled']:.4f}x tiled" if arg else "-"
            print(
                f"  x{p['num_partitions']} {p['label'][:50]}: error={err} argument bytes/chip {arg} ({ratio})"
            )
    print(report)
    if args.json:
        spmd = [p for p in report.programs if p["num_partitions"] > 1]
        print(
            json.dumps(
                {
                    **bounds,
                    "target": report.target["topology"],
                    "plugin_graph_compiles": plugin_graph_compiles,
                    "num_partitions": [p["num_partitions"] for p in spmd],
                    "errors": [p["error"] for p in spmd],
                    "argument_bytes": [p["memory"]["argument_bytes"] if p["memory"] else None for p in spmd],
                }
            )
        )


if __name__ == "__main__":
    main()
