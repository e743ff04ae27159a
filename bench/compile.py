"""torch.compile on "tpu" (TpuBackend) for a small but not trivial FLUX transformer.

The model: ``FluxTransformer2DModel`` with hidden size 256 (4 heads of 64),
2 double-stream and 2 single-stream blocks, 1024 image tokens (a 32x32
packed latent) and 16 text tokens, float32, seeded weights, batch 1. Timed per
forward after warm-up (median): "tpu" compiled with ``TpuBackend``, "tpu"
strict eager, PyTorch CPU eager, and PyTorch ``torch.compile`` (inductor) on
the CPU. CPU numbers are taken with torch's default thread count and with one
thread (on a shared, loaded machine OpenMP barriers can cost more than the
work). Compile times are the first call's wall time (dynamo + lowering + XLA,
or dynamo + inductor + the C++ compiler), each into an empty cache. Prints
tables and ratios; asserts nothing.

    .venv/bin/python bench/compile.py            # 10 timed forwards each
    .venv/bin/python bench/compile.py --quick    # 3 timed forwards, 256 image tokens
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
import traceback

_TMP = tempfile.TemporaryDirectory(prefix="torch_tpu_bench_compile_")
os.environ["TORCH_TPU_CACHE_DIR"] = os.path.join(_TMP.name, "tpu")  # empty: compiles are real
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_TMP.name, "inductor")  # likewise for inductor

import torch  # noqa: E402

import torch_tpu  # noqa: E402

CONFIG = dict(
    patch_size=1,
    in_channels=64,  # 4 * 16 latent channels (2x2 packing)
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=64,
    num_attention_heads=4,  # hidden 256
    joint_attention_dim=128,
    pooled_projection_dim=128,
    guidance_embeds=True,
    axes_dims_rope=(16, 24, 24),  # sums to attention_head_dim
)


def build_model():
    from diffusers import FluxTransformer2DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = FluxTransformer2DModel(**CONFIG)
    return model.eval()


def make_inputs(side: int, text: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    return {
        "hidden_states": torch.randn(1, side * side, CONFIG["in_channels"], generator=g),
        "encoder_hidden_states": torch.randn(1, text, CONFIG["joint_attention_dim"], generator=g),
        "pooled_projections": torch.randn(1, CONFIG["pooled_projection_dim"], generator=g),
        "timestep": torch.tensor([0.5]),
        "img_ids": img_ids.reshape(-1, 3),
        "txt_ids": torch.zeros(text, 3),
        "guidance": torch.tensor([3.5]),
    }


def timed(fn, reps: int, sync) -> tuple[float, float]:
    """(first call seconds, median of |reps| later calls) with one extra warm-up call."""
    t0 = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t0
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def per_call_costs(calls: int = 2000) -> tuple[float, float]:
    """Fixed host cost in us of one call: a strict-eager op and a tiny compiled
    function doing the same op (64 floats: the work itself is nothing)."""
    x = torch.randn(64, device="tpu")

    def add_one(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    compiled = torch.compile(add_one, backend=torch_tpu.TpuBackend(), dynamic=False)
    costs = []
    for fn in (add_one, compiled):
        for _ in range(50):
            fn(x)
        torch.tpu.synchronize()
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(x)
            torch.tpu.synchronize()
            samples.append((time.perf_counter() - t0) / calls * 1e6)
        costs.append(statistics.median(samples))
    return costs[0], costs[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--side", type=int, default=None, help="packed latent side (tokens = side^2)")
    parser.add_argument("--text", type=int, default=16, help="text tokens")
    parser.add_argument("--quick", action="store_true", help="3 reps, 256 image tokens")
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args()
    reps = args.reps or (3 if args.quick else 10)
    side = args.side or (16 if args.quick else 32)

    cpu_model = build_model()
    params = sum(p.numel() for p in cpu_model.parameters()) / 1e6
    kw_cpu = make_inputs(side, args.text)
    kw_tpu = {k: v.to("tpu") for k, v in kw_cpu.items()}
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    threads = torch.get_num_threads()
    sync_tpu = torch.tpu.synchronize

    def nothing() -> None:
        return None

    print(
        f"FLUX transformer {params:.2f} M params, hidden 256, 2 double + 2 single blocks, "
        f"{side * side} image + {args.text} text tokens, f32, batch 1, median of {reps}"
    )
    rows: list[tuple[str, float | None, float | None, str]] = []
    with torch.no_grad():
        expected = cpu_model(**kw_cpu, return_dict=False)[0]

        torch_tpu.reset_metrics()
        compiled_tpu = torch.compile(tpu_model, backend=torch_tpu.TpuBackend(), dynamic=False)
        first, per = timed(lambda: compiled_tpu(**kw_tpu, return_dict=False), reps, sync_tpu)
        m = torch_tpu.metrics()
        err = (compiled_tpu(**kw_tpu, return_dict=False)[0].cpu() - expected).abs().max().item()
        note = f"{m['compiles']} compile(s), XLA {m['compile_seconds']:.2f} s, max|err| {err:.1e}"
        rows.append(("tpu compiled (TpuBackend)", first, per, note))
        torch_tpu.reset_metrics()
        compiled_tpu(**kw_tpu, return_dict=False)
        sync_tpu()
        m = torch_tpu.metrics()
        rows[-1] = (*rows[-1][:3], rows[-1][3] + f", warm: {m['executions']} exec, {m['compiles']} compiles")
        print(f"  done {rows[-1][0]}", flush=True)

        torch_tpu.reset_metrics()
        first, per = timed(lambda: tpu_model(**kw_tpu, return_dict=False), reps, sync_tpu)
        m = torch_tpu.metrics()
        note = f"{m['compiles']} compiles, {m['compile_seconds']:.2f} s XLA"
        rows.append(("tpu strict eager", first, per, note))
        fb = m["cpu_fallbacks"]
        print(f"  done {rows[-1][0]}", flush=True)

        for n in sorted({threads, 1}, reverse=True):
            torch.set_num_threads(n)
            _, per = timed(lambda: cpu_model(**kw_cpu, return_dict=False), reps, nothing)
            rows.append((f"cpu eager, {n} thread(s)", None, per, ""))
        torch.set_num_threads(threads)
        print("  done cpu eager", flush=True)

        if not args.no_inductor:
            try:
                inductor = torch.compile(copy.deepcopy(cpu_model), dynamic=False)
                for n in sorted({threads, 1}, reverse=True):
                    torch.set_num_threads(n)
                    first, per = timed(lambda: inductor(**kw_cpu, return_dict=False), reps, nothing)
                    note = "compile = first call" if n == threads else "already compiled"
                    rows.append((f"cpu inductor, {n} thread(s)", first if n == threads else None, per, note))
                torch.set_num_threads(threads)
                err = (inductor(**kw_cpu, return_dict=False)[0] - expected).abs().max().item()
                rows[-1] = (*rows[-1][:3], rows[-1][3] + f", max|err| {err:.1e}")
            except Exception as error:  # inductor needs a working C++ toolchain
                torch.set_num_threads(threads)
                print(f"inductor failed: {type(error).__name__}: {str(error)[:500]}")
                traceback.print_exc(limit=3)
            print("  done inductor", flush=True)

    print()
    head = f"{'variant':<28}{'first call s':>13}{'ms/forward':>12}  notes"
    print(head)
    print("-" * 100)
    for name, first, per, note in rows:
        first_text = f"{first:>13.2f}" if first is not None else f"{'':>13}"
        print(f"{name:<28}{first_text}{per * 1e3:>12.1f}  {note}")
    per = {name: p for name, _, p, _ in rows}
    cpu_best = min(p for name, p in per.items() if name.startswith("cpu eager"))
    tpu_c = per["tpu compiled (TpuBackend)"]
    print()
    print(f"tpu compiled / tpu strict eager : {tpu_c / per['tpu strict eager']:.2f}")
    print(f"tpu compiled / cpu eager (best) : {tpu_c / cpu_best:.2f}")
    cpu_default = per[f"cpu eager, {threads} thread(s)"]
    print(f"tpu compiled / cpu eager ({threads} thr) : {tpu_c / cpu_default:.2f}")
    ind = [p for name, p in per.items() if name.startswith("cpu inductor")]
    if ind:
        print(f"tpu compiled / cpu inductor (best): {tpu_c / min(ind):.2f}")
    print(f"tpu strict eager / cpu eager (best): {per['tpu strict eager'] / cpu_best:.2f}")
    print(
        f"target: compiled tpu no slower than CPU eager (best thread count): "
        f"{'met' if tpu_c <= cpu_best else 'missed'}; CPU fallbacks in eager: {fb if fb else 'none'}"
    )
    strict_us, compiled_us = per_call_costs()
    print()
    print(f"fixed cost of one call (x + 1 on 64 floats): strict eager op {strict_us:.1f} us, ", end="")
    print(f"compiled function {compiled_us:.1f} us (dynamo guards + aot_autograd wrapper + one launch)")


if __name__ == "__main__":
    main()
