"""Runs in a child process with TORCH_TPU_NUM_DEVICES=4 (tests/test_spmd.py):
sharded ops over a (2, 2) and a (4,) mesh against the CPU, per-device bytes,
launch counts, round trips and errors. Prints one JSON line of findings."""

from __future__ import annotations

import io
import json
import sys

import torch

import torch_tpu
from torch_tpu.distributed import Mesh, is_sharded, mark_sharding


def err(fn) -> str:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is the finding
        return f"{type(e).__name__}: {e}"
    return ""


def max_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.detach().cpu().double() - want.double()).abs().max())


def ops(out: dict) -> None:
    torch.manual_seed(0)
    a_cpu = torch.randn(8, 16)
    b_cpu = torch.randn(16, 12)
    meshes = {
        "2x2": (Mesh([0, 1, 2, 3], (2, 2), ("x", "y")), ("x", "y"), ("y", None)),
        "4": (Mesh([0, 1, 2, 3], (4,), ("x",)), ("x", None), (None, "x")),
    }
    for key, (mesh, spec_a, spec_b) in meshes.items():
        a = mark_sharding(a_cpu.to("tpu"), mesh, spec_a)
        b = mark_sharding(b_cpu.to("tpu"), mesh, spec_b)
        r: dict = {"sharded": is_sharded(a) and is_sharded(b)}
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        c = a @ b
        torch.tpu.synchronize()
        r["matmul_launches"] = torch_tpu.metrics()["executions"]
        r["matmul"] = max_err(c, a_cpu @ b_cpu)
        r["chain"] = max_err(
            ((a * 2 + 1).sin() * a - a.exp() / 4).tanh(),
            ((a_cpu * 2 + 1).sin() * a_cpu - a_cpu.exp() / 4).tanh(),
        )
        r["sum"] = abs(a.sum().item() - a_cpu.sum().item())
        r["sum_dim"] = max_err(a.sum(dim=1), a_cpu.sum(dim=1))
        r["mean0"] = max_err(a.mean(0, keepdim=True), a_cpu.mean(0, keepdim=True))
        r["amax"] = max_err(a.amax(dim=-1), a_cpu.amax(dim=-1))
        r["softmax"] = max_err(torch.softmax(a, dim=-1), torch.softmax(a_cpu, dim=-1))
        r["softmax0"] = max_err(torch.softmax(a, dim=0), torch.softmax(a_cpu, dim=0))
        r["cpu_roundtrip"] = bool(torch.equal(a.cpu(), a_cpu))
        r["print"] = "tensor(" in str(a)
        out[key] = r

    # Fused eager and torch.compile on sharded operands: one SPMD program each.
    mesh, spec_a, _ = meshes["2x2"]
    a = mark_sharding(a_cpu.to("tpu"), mesh, spec_a)

    def f(t: torch.Tensor) -> torch.Tensor:
        return (t * 2 + 1).sin() * t - t.sum(dim=0, keepdim=True)

    with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
        fused = f(a).cpu()
    out["fused"] = max_err(fused, f(a_cpu))
    compiled = torch.compile(f, backend=torch_tpu.TpuBackend(), dynamic=False)
    out["compiled"] = max_err(compiled(a), f(a_cpu))

    # Per-device bytes: a sharded 64x64 f32 operand puts 1/N of it on each device.
    mesh4 = meshes["4"][0]
    torch.tpu.synchronize()
    before = [torch.tpu.memory_allocated(i) for i in range(4)]
    big = torch.ones(64, 64, device="tpu")
    placed = [torch.tpu.memory_allocated(i) - before[i] for i in range(4)]
    mark_sharding(big, mesh4, ("x", None))
    after = [torch.tpu.memory_allocated(i) - before[i] for i in range(4)]
    out["bytes"] = {"full": 64 * 64 * 4, "unsharded": placed, "sharded": after}

    # A strict-eager op on sharded inputs with a one-device operand: one launch.
    two = torch.full((64, 64), 2.0, device="tpu")
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    y = big * two
    torch.tpu.synchronize()
    out["mixed_launches"] = torch_tpu.metrics()["executions"]
    y = y + 1.0
    out["mixed_ok"] = bool(torch.equal(y.cpu(), torch.full((64, 64), 3.0)))
    out["result_sharded"] = is_sharded(y)

    # In place on a sharded tensor keeps its sharding; a whole write from the host too.
    big.add_(1.0)
    big.copy_(torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64))
    out["inplace"] = is_sharded(big) and bool(torch.equal(big.cpu(), torch.arange(4096.0).reshape(64, 64)))
    out["view_read"] = bool(torch.equal(big[3:9, 5].cpu(), torch.arange(4096.0).reshape(64, 64)[3:9, 5]))

    # state_dict, torch.save / torch.load
    lin = torch.nn.Linear(16, 8).to("tpu")
    want = {k: v.cpu().clone() for k, v in lin.state_dict().items()}
    mark_sharding(lin.weight, mesh4, ("x", None))
    mark_sharding(lin.bias, mesh4, ("x",))
    sd = lin.state_dict()
    out["state_dict"] = all(torch.equal(sd[k].cpu(), want[k]) for k in want)
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    out["save_load"] = all(torch.equal(loaded[k].cpu(), want[k]) for k in want)
    lin2 = torch.nn.Linear(16, 8).to("tpu")
    mark_sharding(lin2.weight, mesh4, (None, "x"))
    lin2.load_state_dict(want)
    out["load_state_dict"] = is_sharded(lin2.weight) and bool(torch.equal(lin2.weight.cpu(), want["weight"]))
    x = torch.randn(4, 16)
    out["linear"] = max_err(lin2(x.to("tpu")), torch.nn.functional.linear(x, want["weight"], want["bias"]))

    # Errors, with nothing lost.
    out["err_missing_device"] = err(lambda: Mesh([0, 1, 2, 7], (4,), ("x",)))
    out["err_shape"] = err(lambda: Mesh([0, 1, 2], (2, 2)))
    t = torch.ones(6, 4, device="tpu")
    out["err_divisible"] = err(lambda: mark_sharding(t, mesh4, ("x", None)))
    out["after_divisible"] = not is_sharded(t) and bool(torch.equal(t.cpu(), torch.ones(6, 4)))
    other = Mesh([3, 2, 1, 0], (4,), ("x",))
    p = mark_sharding(torch.ones(8, 4, device="tpu"), mesh4, ("x", None))
    q = mark_sharding(torch.ones(8, 4, device="tpu"), other, ("x", None))
    out["err_two_meshes"] = err(lambda: p + q)
    out["after_two_meshes"] = bool(torch.equal((p + p).cpu(), torch.full((8, 4), 2.0)))
    out["spmd_compiles"] = torch_tpu.metrics()["spmd_compiles"]


def flux(out: dict) -> None:
    """The tiny FLUX transformer, tensor-parallel over 2 and 4 devices by its
    own _tp_plan, against the same model on one device."""
    import time

    from torch_tpu.distributed import _expand, _style_dim, parallelize_module
    from torch_tpu.testing import tiny

    def timed(model) -> tuple[torch.Tensor, float]:
        model(**tiny.flux_transformer_inputs(device="tpu"), return_dict=False)  # warm: compiles
        torch.tpu.synchronize()
        t0 = time.perf_counter()
        y = model(**tiny.flux_transformer_inputs(device="tpu"), return_dict=False)[0]
        torch.tpu.synchronize()
        return y.cpu(), time.perf_counter() - t0

    with torch.no_grad():
        one = tiny.flux_transformer("tiny").to("tpu")
        ref, t_one = timed(one)
        out["one"] = {"seconds": t_one, "param_bytes": sum(p.numel() * 4 for p in one.parameters())}
        del one
        for n in (2, 4):
            mesh = Mesh(list(range(n)), (n,), ("tp",))
            torch.tpu.synchronize()
            before = [torch.tpu.memory_allocated(i) for i in range(n)]
            model = tiny.flux_transformer("tiny").to("tpu")
            parallelize_module(model, mesh)
            torch.tpu.synchronize()
            per_device = [torch.tpu.memory_allocated(i) - before[i] for i in range(n)]
            planned = set()
            for pattern, style in model._tp_plan.items():
                for _, sub in _expand(model, pattern):
                    planned.add(id(sub.weight))
                    if sub.bias is not None and _style_dim(style, pattern) == 0:
                        planned.add(id(sub.bias))
            sharded_bytes = sum(p.numel() * 4 for p in model.parameters() if id(p) in planned)
            total = sum(p.numel() * 4 for p in model.parameters())
            torch_tpu.reset_metrics()
            y, t = timed(model)
            m = torch_tpu.metrics()
            with torch_tpu.eager_mode(torch_tpu.EagerMode.DEFER_AND_FUSE):
                fused = model(**tiny.flux_transformer_inputs(device="tpu"), return_dict=False)[0].cpu()
            compiled = torch.compile(model, backend=torch_tpu.TpuBackend(), dynamic=False)
            compiled(**tiny.flux_transformer_inputs(device="tpu"), return_dict=False)
            torch.tpu.synchronize()
            torch_tpu.reset_metrics()
            yc = compiled(**tiny.flux_transformer_inputs(device="tpu"), return_dict=False)[0]
            torch.tpu.synchronize()
            mc = torch_tpu.metrics()
            out[f"tp{n}"] = {
                "fused": max_err(fused, ref),
                "compiled": max_err(yc, ref),
                "compiled_launches": mc["executions"],
                "compiled_compiles": mc["compiles"],
                "strict": max_err(y, ref),
                "seconds": t,
                "per_device_bytes": per_device,
                "bound_bytes": sharded_bytes / n + (total - sharded_bytes),
                "spmd_compiles": m["spmd_compiles"],
                "executions_two_forwards": m["executions"],
            }
            del model, compiled
            torch._dynamo.reset()


def pipeline(out: dict) -> None:
    """The tiny FLUX pipeline: text encoders on CPU, VAE on device 0, the
    transformer split over 4 devices, through enable_tpu_compile + tpu_warmup,
    against the same pipeline on one device."""
    from torch_tpu.distributed import parallelize_module
    from torch_tpu.testing.tiny import flux_pipeline

    kw = dict(
        prompt="a photo of a cat",
        height=32,
        width=32,
        num_inference_steps=2,
        guidance_scale=0.0,
        max_sequence_length=32,
        output_type="pt",
    )

    def image(sharded: bool) -> torch.Tensor:
        pipe = flux_pipeline("tiny", torch.float32)
        pipe.transformer.to("tpu")
        pipe.vae.to("tpu")
        if sharded:
            parallelize_module(pipe.transformer, Mesh([0, 1, 2, 3], (4,), ("tp",)))
        pipe.enable_tpu_compile()
        pipe.tpu_warmup(**kw, generator=torch.Generator().manual_seed(0))
        img = pipe(**kw, generator=torch.Generator().manual_seed(0)).images
        torch._dynamo.reset()
        return torch.as_tensor(img).float().cpu()

    one = image(False)
    torch_tpu.reset_metrics()
    four = image(True)
    out["pipeline"] = {"max_err": max_err(four, one), "spmd_compiles": torch_tpu.metrics()["spmd_compiles"]}


def main() -> None:
    out: dict = {"devices": torch.tpu.device_count()}
    {"ops": ops, "flux": flux, "pipeline": pipeline}[sys.argv[1]](out)
    torch.tpu.synchronize()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
