"""The tiny FLUX transformer with tensor parallelism over 4 devices, shadow-compiled for v5e:2x2.

    TORCH_TPU_NUM_DEVICES=4 python bench/targets_flux_tp.py [--target v5e:2x2]

Shards the transformer by its _tp_plan (torch_tpu.distributed.parallelize_module) over a 4-device
mesh of this host's plugin, runs it compiled (TpuBackend), and compiles every SPMD program for the
target's 4 chips. Prints, per SPMD program, the compiler's per-chip argument bytes against the
bound 1/4 x sharded parameter bytes + replicated bytes (+ the inputs), and the target report.
"""

from __future__ import annotations

import argparse

import torch

import torch_tpu
import torch_tpu.testing.tiny as tiny
from torch_tpu.distributed import Mesh, is_sharded, parallelize_module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="v5e:2x2")
    ap.add_argument("--no-tp", action="store_true", help="one device, unsharded (the comparison)")
    args = ap.parse_args()
    torch_tpu.set_target(args.target)
    model = tiny.flux_transformer("tiny").to("tpu")
    if not args.no_tp:
        parallelize_module(model, Mesh([0, 1, 2, 3], (4,), ("tp",)))
    sharded = sum(p.numel() * p.element_size() for p in model.parameters() if is_sharded(p))
    replicated = sum(p.numel() * p.element_size() for p in model.parameters() if not is_sharded(p))
    inputs = tiny.flux_transformer_inputs(device="tpu")
    input_bytes = sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
    compiled = torch.compile(model, backend=torch_tpu.TpuBackend(), dynamic=False)
    with torch.no_grad():
        compiled(**inputs, return_dict=False)
    torch.tpu.synchronize()
    bound = sharded / 4 + replicated + input_bytes
    report = torch_tpu.target_report()
    print(f"parameters: {sharded} B sharded, {replicated} B replicated; inputs {input_bytes} B")
    print(f"bound per chip: sharded/4 + replicated + inputs = {bound:.0f} B")
    for p in report.programs:
        if p["label"] == "compiled program" or p["num_partitions"] > 1:
            arg = p["memory"]["argument_bytes"] if p["memory"] else None
            ok = "within" if arg is not None and arg <= bound else "OVER"
            err = p["error"] and p["error"][:120]
            print(
                f"  x{p['num_partitions']} {p['label'][:50]}: error={err}"
                f" per-chip argument bytes {arg} ({ok} the bound)"
            )
    print(report)


if __name__ == "__main__":
    main()
