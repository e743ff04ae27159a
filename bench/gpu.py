"""The "tpu" device on a CUDA PJRT plugin against PyTorch's own CUDA kernels, on one NVIDIA GPU.

Four measurements, each printed as ms (median after warm-up), TFLOP/s and
ratios; nothing is asserted:

1. A FLUX slice: ``FluxTransformer2DModel`` with 2 double + 2 single blocks,
   hidden 3072 (24 heads of 128), 4096 image + 512 text tokens, bf16, seeded
   weights, per forward: "tpu" compiled with ``torch_tpu.TpuBackend``, fused
   eager and strict eager, against PyTorch CUDA eager and inductor. FLOPs are
   counted once with ``torch.utils.flop_counter`` on the CUDA model. Needs
   diffusers (skipped with one line without it).
2. SDPA (1, 24, 4608, 128) bf16, forward ("tpu" compiled / fused / strict,
   PyTorch eager (flash) / inductor) and forward + backward (strict eager
   against PyTorch eager). Says whether the "tpu" programs called cuDNN's
   fused attention (it reads the modules dumped to TORCH_TPU_DUMP_DIR).
3. One 8192^3 bf16 matmul: "tpu" compiled, strict eager, PyTorch.
4. The relative error of a 1024^2 f32 matmul against float64 with
   ``torch.set_float32_matmul_precision("highest")`` (and "high"), "tpu"
   against PyTorch CUDA.

Where torch sees no CUDA GPU, it prints one line and exits 0. The "tpu"
device is whatever plugin torch_tpu finds; on a GPU machine that is the CUDA
PJRT plugin of jax-cuda*-pjrt (the platform is printed first).
``--no-cudnn`` sets TORCH_TPU_CUDNN_SDPA=0 (the StableHLO attention instead
of cuDNN's), to compare two runs.

    python3 bench/gpu.py            # everything
    python3 bench/gpu.py --quick    # fewer repetitions
    python3 bench/gpu.py --skip-flux
"""

from __future__ import annotations

import argparse
import copy
import glob
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

_TMP = tempfile.TemporaryDirectory(prefix="torch_tpu_bench_gpu_")
os.environ.setdefault("TORCH_TPU_CACHE_DIR", os.path.join(_TMP.name, "tpu"))  # empty: compiles are real
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_TMP.name, "inductor")
DUMP_DIR = os.path.join(_TMP.name, "dump")
os.environ["TORCH_TPU_DUMP_DIR"] = DUMP_DIR
if "--no-cudnn" in sys.argv:
    os.environ["TORCH_TPU_CUDNN_SDPA"] = "0"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from timing import median_seconds  # noqa: E402

FLUX_CONFIG = dict(
    patch_size=1,
    in_channels=64,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=128,
    num_attention_heads=24,  # hidden 3072
    joint_attention_dim=4096,
    pooled_projection_dim=768,
    guidance_embeds=True,
    axes_dims_rope=(16, 56, 56),  # sums to attention_head_dim
)
IMAGE_SIDE = 64  # 4096 image tokens
TEXT_TOKENS = 512
SDPA_SHAPE = (1, 24, 4608, 128)
MATMUL_N = 8192
# The baseline's device (a smoke test of this script may point it at "cpu").
BASELINE = "cuda"


def timed(fn: Callable[[], object], reps: int, sync: Callable[[], None], warmup: int = 2) -> float:
    """Median seconds of |reps| calls of |fn| after |warmup| calls, each waited for."""
    return median_seconds(fn, reps, sync, warmup)


class Table:
    """Rows of (name, seconds, flops, note), printed with TFLOP/s and ratios to a baseline."""

    def __init__(self, title: str, flops: float | None) -> None:
        self.title = title
        self.flops = flops
        self.rows: list[tuple[str, float | None, str]] = []

    def add(self, name: str, fn: Callable[[], tuple[float, str]]) -> None:
        try:
            seconds, note = fn()
        except Exception as error:  # one failed variant must not cost the rest of the run
            traceback.print_exc(limit=4)
            seconds, note = None, f"FAILED: {type(error).__name__}: {str(error)[:200]}"
        self.rows.append((name, seconds, note))
        shown = f"{seconds * 1e3:.3f} ms" if seconds is not None else "-"
        print(f"  {name}: {shown} {note}", flush=True)

    def print(self, baselines: list[str]) -> None:
        print()
        print(self.title)
        head = f"  {'variant':<34}{'ms':>10}{'TFLOP/s':>10}"
        for b in baselines:
            head += f"{'/ ' + b:>22}"
        print(head + "  notes")
        times = {name: s for name, s, _ in self.rows}
        for name, seconds, note in self.rows:
            line = f"  {name:<34}"
            if seconds is None:
                line += f"{'-':>10}{'-':>10}"
            else:
                tflops = self.flops / seconds / 1e12 if self.flops else float("nan")
                line += f"{seconds * 1e3:>10.3f}{tflops:>10.1f}"
            for b in baselines:
                base = times.get(b)
                line += f"{seconds / base:>21.2f}x" if seconds and base else f"{'-':>22}"
            print(line + f"  {note}")
        print()


def cudnn_calls() -> int:
    """How many of the dumped "tpu" programs so far call cuDNN fused attention."""
    n = 0
    for path in glob.glob(os.path.join(DUMP_DIR, "*.mlir")):
        with open(path, encoding="utf-8", errors="replace") as f:
            n += "__cudnn$fmha" in f.read()
    return n


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()


def bench_flux(args, torch_tpu, sync_tpu, sync_cuda) -> None:
    try:
        from diffusers import FluxTransformer2DModel
    except ImportError:
        print("FLUX slice: skipped (diffusers is not importable; see /work/shared/device.md)")
        return
    from torch.utils.flop_counter import FlopCounterMode

    from torch_tpu import EagerMode, eager_mode

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = FluxTransformer2DModel(**FLUX_CONFIG).to(torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e9
    g = torch.Generator().manual_seed(0)
    side, c = IMAGE_SIDE, FLUX_CONFIG
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] = torch.arange(side)[:, None]
    img_ids[..., 2] = torch.arange(side)[None, :]
    kw = {
        "hidden_states": torch.randn(1, side * side, c["in_channels"], generator=g).bfloat16(),
        "encoder_hidden_states": torch.randn(
            1, TEXT_TOKENS, c["joint_attention_dim"], generator=g
        ).bfloat16(),
        "pooled_projections": torch.randn(1, c["pooled_projection_dim"], generator=g).bfloat16(),
        "timestep": torch.tensor([0.5]).bfloat16(),
        "img_ids": img_ids.reshape(-1, 3),
        "txt_ids": torch.zeros(TEXT_TOKENS, 3),
        "guidance": torch.tensor([3.5]).bfloat16(),
    }
    cuda_model = copy.deepcopy(model).to(BASELINE)
    kw_cuda = {k: v.to(BASELINE) for k, v in kw.items()}
    tpu_model = model.to("tpu")
    kw_tpu = {k: v.to("tpu") for k, v in kw.items()}
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            expected = cuda_model(**kw_cuda, return_dict=False)[0]
        flops = float(counter.get_total_flops())
    print(
        f"FLUX slice: {params:.2f} B params, "
        f"{c['num_layers']} double + {c['num_single_layers']} single blocks, "
        f"hidden {c['num_attention_heads'] * c['attention_head_dim']} "
        f"({c['num_attention_heads']} x {c['attention_head_dim']}), "
        f"{side * side} image + {TEXT_TOKENS} text tokens, bf16, {flops / 1e12:.2f} TFLOP per forward, "
        f"median of {args.reps}",
        flush=True,
    )
    table = Table("FLUX slice, per forward", flops)

    def run(fn, sync, reference=True) -> tuple[float, str]:
        torch_tpu.reset_metrics()
        t0 = time.perf_counter()
        out = fn()
        sync()
        first = time.perf_counter() - t0
        seconds = timed(fn, args.reps, sync)
        m = torch_tpu.metrics()
        note = f"first call {first:.1f} s"
        if reference:
            note += f", max|err| vs CUDA eager {max_err(out, expected):.2e}"
        return seconds, note + f", tpu compiles {m['compiles']}"

    inductor = torch.compile(cuda_model, dynamic=False)
    compiled = torch.compile(tpu_model, backend=torch_tpu.TpuBackend(), dynamic=False)

    def forward(model, inputs, mode=None) -> Callable[[], torch.Tensor]:
        def call() -> torch.Tensor:
            if mode is None:
                return model(**inputs, return_dict=False)[0]
            with eager_mode(mode):
                return model(**inputs, return_dict=False)[0]

        return call

    with torch.no_grad():
        table.add("cuda eager", lambda: run(forward(cuda_model, kw_cuda), sync_cuda, False))
        table.add("cuda inductor", lambda: run(forward(inductor, kw_cuda), sync_cuda))
        table.add("tpu compiled (TpuBackend)", lambda: run(forward(compiled, kw_tpu), sync_tpu))
        table.add(
            "tpu fused eager", lambda: run(forward(tpu_model, kw_tpu, EagerMode.DEFER_AND_FUSE), sync_tpu)
        )
        table.add(
            "tpu strict eager", lambda: run(forward(tpu_model, kw_tpu, EagerMode.DEFER_NEVER), sync_tpu)
        )
    table.print(["cuda eager", "cuda inductor"])


def bench_sdpa(args, torch_tpu, sync_tpu, sync_cuda) -> None:
    from torch_tpu import EagerMode, eager_mode

    b, h, n, d = SDPA_SHAPE
    fwd_flops = 4.0 * b * h * n * n * d  # QK^T and PV, 2 flops per multiply-add
    g = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(SDPA_SHAPE, generator=g).bfloat16() for _ in range(4))
    qc, kc, vc, gc = (t.to(BASELINE) for t in (q, k, v, grad))
    qt, kt, vt, gt = (t.to("tpu") for t in (q, k, v, grad))
    expected = F.scaled_dot_product_attention(qc, kc, vc)
    dumped_before = cudnn_calls()
    print(f"SDPA {SDPA_SHAPE} bf16: {fwd_flops / 1e12:.3f} TFLOP forward, median of {args.reps}", flush=True)

    def sdpa(q_, k_, v_):
        return F.scaled_dot_product_attention(q_, k_, v_)

    def run(fn, sync, reference=True) -> tuple[float, str]:
        out = fn()
        sync()
        seconds = timed(fn, args.reps, sync)
        return seconds, f"max|err| vs CUDA eager {max_err(out, expected):.2e}" if reference else ""

    fwd = Table("SDPA forward", fwd_flops)
    with torch.no_grad():
        fwd.add("cuda eager (flash)", lambda: run(lambda: sdpa(qc, kc, vc), sync_cuda, False))
        inductor = torch.compile(sdpa, dynamic=False)
        fwd.add("cuda inductor", lambda: run(lambda: inductor(qc, kc, vc), sync_cuda))
        compiled = torch.compile(sdpa, backend=torch_tpu.TpuBackend(), dynamic=False)
        fwd.add("tpu compiled (TpuBackend)", lambda: run(lambda: compiled(qt, kt, vt), sync_tpu))

        def fused() -> torch.Tensor:
            with eager_mode(EagerMode.DEFER_AND_FUSE):
                return sdpa(qt, kt, vt)

        fwd.add("tpu fused eager", lambda: run(fused, sync_tpu))

        def strict() -> torch.Tensor:
            with eager_mode(EagerMode.DEFER_NEVER):
                return sdpa(qt, kt, vt)

        fwd.add("tpu strict eager", lambda: run(strict, sync_tpu))
    fwd.print(["cuda eager (flash)"])

    # forward + backward: 2.5x the forward's flops for the backward (five matmuls, one recomputed)
    both = Table("SDPA forward + backward", 3.5 * fwd_flops)

    def train_step(q_, k_, v_, g_, sync, eager=None) -> Callable[[], object]:
        leaves = [t.detach().requires_grad_() for t in (q_, k_, v_)]

        def step() -> object:
            for t in leaves:
                t.grad = None
            if eager is None:
                sdpa(*leaves).backward(g_)
            else:
                with eager_mode(eager):
                    sdpa(*leaves).backward(g_)
            return leaves[0].grad

        return step

    cuda_step = train_step(qc, kc, vc, gc, sync_cuda)
    cuda_step()
    expected_dq = cuda_step()
    both.add("cuda eager (flash)", lambda: (timed(cuda_step, args.reps, sync_cuda), ""))

    def tpu_train(eager) -> tuple[float, str]:
        step = train_step(qt, kt, vt, gt, sync_tpu, eager)
        dq = step()
        sync_tpu()
        return timed(step, args.reps, sync_tpu), f"max|err dq| vs CUDA {max_err(dq, expected_dq):.2e}"

    both.add("tpu strict eager", lambda: tpu_train(EagerMode.DEFER_NEVER))
    both.add("tpu fused eager", lambda: tpu_train(EagerMode.DEFER_AND_FUSE))
    both.print(["cuda eager (flash)"])
    used = cudnn_calls() - dumped_before
    state = os.environ.get("TORCH_TPU_CUDNN_SDPA", "1")
    print(f"tpu SDPA programs calling cuDNN fused attention: {used} (TORCH_TPU_CUDNN_SDPA={state})")
    flash = {name: s for name, s, _ in fwd.rows}
    tpu_best = min((s for name, s, _ in fwd.rows if name.startswith("tpu") and s), default=None)
    if tpu_best and flash.get("cuda eager (flash)"):
        share = flash["cuda eager (flash)"] / tpu_best
        print(f"target: tpu SDPA >= 70% of PyTorch flash TFLOP/s: measured {share:.0%} (best tpu mode)")
    print()


def bench_matmul(args, torch_tpu, sync_tpu, sync_cuda) -> None:
    from torch_tpu import EagerMode, eager_mode

    n = MATMUL_N
    flops = 2.0 * n**3
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).bfloat16() for _ in range(2))
    ac, bc = a.to(BASELINE), b.to(BASELINE)
    at, bt = a.to("tpu"), b.to("tpu")
    expected = ac @ bc
    print(f"matmul {n}^3 bf16: {flops / 1e12:.2f} TFLOP, median of {args.reps}", flush=True)

    def mm(x, y):
        return x @ y

    def run(fn, sync) -> tuple[float, str]:
        out = fn()
        sync()
        rel = max_err(out, expected) / expected.float().abs().max().item()
        return timed(fn, args.reps, sync), f"max|err| / max|ref| {rel:.1e}"

    table = Table(f"matmul {n}^3 bf16, one call", flops)
    table.add("cuda eager", lambda: run(lambda: mm(ac, bc), sync_cuda))
    compiled = torch.compile(mm, backend=torch_tpu.TpuBackend(), dynamic=False)
    table.add("tpu compiled (TpuBackend)", lambda: run(lambda: compiled(at, bt), sync_tpu))

    def strict() -> torch.Tensor:
        with eager_mode(EagerMode.DEFER_NEVER):
            return mm(at, bt)

    table.add("tpu strict eager", lambda: run(strict, sync_tpu))
    table.print(["cuda eager"])


def bench_precision() -> None:
    n = 1024
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    ref = a.double() @ b.double()

    def rel(out: torch.Tensor) -> float:
        return (torch.linalg.norm(out.double().cpu() - ref) / torch.linalg.norm(ref)).item()

    old = torch.get_float32_matmul_precision()
    print(f"f32 matmul {n}^2, ||result - float64|| / ||float64||:")
    try:
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            tpu = rel(a.to("tpu") @ b.to("tpu"))
            cuda = rel(a.to(BASELINE) @ b.to(BASELINE))
            print(f"  precision {precision!r:<10} tpu {tpu:.2e}   cuda {cuda:.2e}")
            if precision == "highest":
                print(f"  target: tpu <= 1e-5 with 'highest': {'met' if tpu <= 1e-5 else 'missed'}")
    finally:
        torch.set_float32_matmul_precision(old)
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="3 timed repetitions")
    parser.add_argument("--skip-flux", action="store_true")
    parser.add_argument("--no-cudnn", action="store_true", help="TORCH_TPU_CUDNN_SDPA=0 (read at start)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA GPU here (torch.cuda.is_available() is False); nothing measured.")
        return
    args.reps = args.reps or (3 if args.quick else 10)

    import torch_tpu

    torch.tpu._lazy_init()
    rt = torch_tpu._C._runtime_info()
    print(
        f'"tpu": platform {rt["platform_name"]} ({rt["platform_version"]}), '
        f"{torch_tpu._C._device_kind(0)}, plugin {rt['plugin_path']}"
    )
    print(f"cuda: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    if rt["platform_name"] != "cuda":
        print('note: the "tpu" plugin is not CUDA\'s, so the comparisons below are across machines')
    print(flush=True)

    def sync_tpu() -> None:
        torch.tpu.synchronize()

    def sync_cuda() -> None:
        torch.cuda.synchronize()

    sections = [bench_sdpa, bench_matmul]
    if not args.skip_flux:
        sections.insert(0, bench_flux)
    for section in sections:
        try:
            section(args, torch_tpu, sync_tpu, sync_cuda)
        except Exception:  # report and go on: device time is scarce
            traceback.print_exc()
        torch.cuda.empty_cache()  # the section's CUDA models and tensors are gone
    try:
        bench_precision()
    except Exception:
        traceback.print_exc()


if __name__ == "__main__":
    main()
