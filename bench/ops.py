"""Strict-eager forward time of the tiny diffusion models on "tpu" next to PyTorch CPU.

For each model of ``torch_tpu.testing.tiny`` (Flux transformer, AutoencoderKL
decode, UNet2DConditionModel, SD3 transformer, CLIP text model, T5 encoder)
one forward is timed in strict eager (``DEFER_NEVER``, the default) on "tpu"
and with PyTorch's own CPU kernels, in the same process. Also printed: the
first call's wall time and compiles (a fresh, private executable cache), the
executions (program launches) per warm forward and the CPU fallbacks (there
should be none). Prints tables; asserts nothing.

    .venv/bin/python bench/ops.py            # "small" models, 5 repetitions
    .venv/bin/python bench/ops.py --quick    # "tiny" models, 3 repetitions
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time

# A private, empty executable cache: the first call's compiles are real.
_CACHE = tempfile.TemporaryDirectory(prefix="torch_tpu_bench_ops_")
os.environ["TORCH_TPU_CACHE_DIR"] = _CACHE.name

import torch  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu.testing import tiny  # noqa: E402


def _inputs(name: str, size: str) -> tuple[object, dict[str, torch.Tensor]]:
    """The model and seeded CPU inputs of one forward, sized like a 256x256 image."""
    g = torch.Generator().manual_seed(0)
    small = size == "small"
    clip_dim, t5_dim = (128, 128) if small else (32, 32)
    if name == "flux transformer":
        model = tiny.flux_transformer(size)
        img, txt = (256, 128) if small else (16, 8)  # 256 tokens: a 256x256 image, 8x VAE, 2x2 packing
        ch = model.config.in_channels
        return model, {
            "hidden_states": torch.randn(1, img, ch, generator=g),
            "encoder_hidden_states": torch.randn(1, txt, t5_dim, generator=g),
            "pooled_projections": torch.randn(1, clip_dim, generator=g),
            "timestep": torch.tensor([0.5]),
            "img_ids": torch.zeros(img, 3),
            "txt_ids": torch.zeros(txt, 3),
            "guidance": torch.tensor([3.5]),
        }
    if name == "vae decode":
        model = tiny.autoencoder_kl(size)
        side = 32 if small else 16  # small: 32x32 latent -> 256x256 image
        return model, {"z": torch.randn(1, model.config.latent_channels, side, side, generator=g)}
    if name == "unet2d":
        model = tiny.unet2d_condition(size)
        side = 32 if small else 16  # SD-style 4-channel latent of a 256x256 image
        return model, {
            "sample": torch.randn(1, 4, side, side, generator=g),
            "timestep": torch.tensor([500.0]),
            "encoder_hidden_states": torch.randn(1, 77, clip_dim, generator=g),
        }
    if name == "sd3 transformer":
        model = tiny.sd3_transformer(size)
        side = 32 if small else 16
        cfg = model.config
        return model, {
            "hidden_states": torch.randn(1, cfg.in_channels, side, side, generator=g),
            "encoder_hidden_states": torch.randn(1, 77, cfg.joint_attention_dim, generator=g),
            "pooled_projections": torch.randn(1, cfg.pooled_projection_dim, generator=g),
            "timestep": torch.tensor([500.0]),
        }
    if name == "clip text":
        model = tiny.clip_text_model(size)
        return model, {"input_ids": torch.randint(2, 60, (1, 77), generator=g)}
    if name == "t5 encoder":
        model = tiny.t5_encoder(size)
        return model, {"input_ids": torch.randint(3, 60, (1, 128 if small else 32), generator=g)}
    raise ValueError(name)


MODELS = ["flux transformer", "vae decode", "unet2d", "sd3 transformer", "clip text", "t5 encoder"]


def _forward(name: str, model, kw: dict[str, torch.Tensor]) -> torch.Tensor:
    if name == "vae decode":
        return model.decode(kw["z"], return_dict=False)[0]
    out = model(**kw, return_dict=False)
    return out[0]


def _median_s(fn, reps: int, warmup: int, sync) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_model(name: str, size: str, reps: int) -> dict[str, object]:
    cpu_model, kw_cpu = _inputs(name, size)
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    kw_tpu = {k: v.to("tpu") for k, v in kw_cpu.items()}
    torch.tpu.synchronize()
    row: dict[str, object] = {"model": name}
    with torch.no_grad():
        torch_tpu.reset_metrics()
        t0 = time.perf_counter()
        out = _forward(name, tpu_model, kw_tpu)
        torch.tpu.synchronize()
        row["first_s"] = time.perf_counter() - t0
        m = torch_tpu.metrics()
        row["compiles"] = m["compiles"]
        row["compile_s"] = m["compile_seconds"]
        row["first_exec"] = m["executions"]

        torch_tpu.reset_metrics()
        _forward(name, tpu_model, kw_tpu)
        torch.tpu.synchronize()
        m = torch_tpu.metrics()
        row["exec"] = m["executions"]
        row["warm_compiles"] = m["compiles"]

        row["tpu_s"] = _median_s(lambda: _forward(name, tpu_model, kw_tpu), reps, 1, torch.tpu.synchronize)
        threads = torch.get_num_threads()
        row["cpu_s"] = _median_s(lambda: _forward(name, cpu_model, kw_cpu), reps, 1, lambda: None)
        if threads > 1:  # on a loaded machine OpenMP's barriers can cost more than the work
            torch.set_num_threads(1)
            row["cpu1_s"] = _median_s(lambda: _forward(name, cpu_model, kw_cpu), reps, 1, lambda: None)
            torch.set_num_threads(threads)
        else:
            row["cpu1_s"] = row["cpu_s"]
        expected = _forward(name, cpu_model, kw_cpu)
        row["max_err"] = (out.cpu() - expected).abs().max().item()
        row["fallbacks"] = dict(torch_tpu.metrics()["cpu_fallbacks"])
        n_params = sum(p.numel() for p in cpu_model.parameters())
        row["params_m"] = n_params / 1e6
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["tiny", "small"], default=None, help="model size (default small)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (median)")
    parser.add_argument("--quick", action="store_true", help="tiny models, 3 repetitions")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    args = parser.parse_args()
    size = args.size or ("tiny" if args.quick else "small")
    reps = args.reps or (3 if args.quick else 5)

    info = torch_tpu._C._runtime_info()
    print(
        f"strict eager forward, size={size}, f32, batch 1, median of {reps}; "
        f"plugin platform={info['platform_name']}, torch threads={torch.get_num_threads()}"
    )
    rows = []
    for name in args.models.split(","):
        rows.append(bench_model(name.strip(), size, reps))
        r = rows[-1]
        print(f"  done {name}: tpu {r['tpu_s'] * 1e3:.1f} ms, cpu {r['cpu_s'] * 1e3:.1f} ms", flush=True)
    nthr = torch.get_num_threads()

    print()
    head = (
        f"{'model':<17}{'params M':>9}{f'cpu{nthr}t ms':>10}{'cpu1t ms':>9}{'tpu ms':>9}{'tpu/cpu':>8}"
        f"{'1st call s':>11}{'compiles':>9}{'compile s':>10}{'exec/fwd':>9}{'max|err|':>10}  fallbacks"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        fb = r["fallbacks"]
        fb_text = "none" if not fb else ", ".join(f"{k}x{v}" for k, v in sorted(fb.items()))
        print(
            f"{r['model']:<17}{r['params_m']:>9.2f}{r['cpu_s'] * 1e3:>10.1f}{r['cpu1_s'] * 1e3:>9.1f}"
            f"{r['tpu_s'] * 1e3:>9.1f}{r['tpu_s'] / min(r['cpu_s'], r['cpu1_s']):>8.2f}"
            f"{r['first_s']:>11.2f}{r['compiles']:>9}{r['compile_s']:>10.2f}"
            f"{r['exec']:>9}{r['max_err']:>10.1e}  {fb_text}"
        )
    print()
    print(f"cpu{nthr}t / cpu1t: PyTorch CPU eager with {nthr} threads / 1 thread; tpu/cpu uses the faster.")
    print("tpu/cpu > 1: tpu slower. exec/fwd: program launches per warm forward (one per op in")
    print("strict eager). compiles/compile s: first call into an empty cache.")


if __name__ == "__main__":
    main()
