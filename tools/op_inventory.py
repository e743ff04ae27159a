"""The aten ops the tiny diffusion models use, for tests/model_ops.txt.

Runs each model of ``torch_tpu.testing.tiny`` on the CPU under a
``TorchDispatchMode`` (forward, then forward + backward) and each scheduler
step, and writes the sorted overload names ("aten::add.Tensor") in three
sections:

- ``[compute]``: ops that reach the tpu boxed kernel, so the core needs a
  rule for each (tests/test_model_ops.py asserts ``_op_supported``);
- ``[view]``: ops returning an alias of an input (view, transpose, expand,
  slice, select, unsqueeze, permute, _unsafe_view, as_strided, alias, t,
  squeeze, split, unbind, lift_fresh...): PyTorch's own metadata kernels
  run for them on tpu, they never reach the core;
- ``[composite]``: ops with only a CompositeExplicitAutograd kernel (stack,
  clone, embedding, arange, empty_like...): on tpu they reach the core whole
  when it has a rule, and otherwise run PyTorch's composite, whose calls are
  recorded here too (so they are not required);
- ``[glue]``: ops the PyTorch glue handles itself (found by experiment, see
  ``GLUE`` below).

CPU-only kernels are renamed to what the tpu device gets (``RENAMES``: the
SDPA flash kernel for CPU becomes the overrideable fused attention).

A dispatch mode sees ops after CompositeImplicitAutograd decomposition, as
the tpu kernel does, and only the outermost call of each op; composite
kernels are re-entered with the mode on (see ``Recorder``).

Usage: ``python tools/op_inventory.py [--out tests/model_ops.txt]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torch_tpu.testing import tiny  # noqa: E402

# Ops the glue (torch_tpu/csrc) handles itself, so they never reach the
# core's boxed kernel. Found by experiment: each has an explicit PrivateUse1
# kernel in Views.cpp / Attention.cpp (allocation, resize, copies between
# devices, host reads, the SDPA backend choice), or PyTorch's composite is
# kept on purpose (copy_ and _to_copy go through empty_strided + _copy_from,
# Kernel.cpp: keeps_pytorch_kernel).
GLUE = {
    "aten::_copy_from",
    "aten::_copy_from_and_resize",
    "aten::_fused_sdp_choice",
    "aten::_local_scalar_dense",
    "aten::_to_copy",
    "aten::copy_",
    "aten::empty.memory_format",
    "aten::empty_strided",
    "aten::resize_",
    "aten::set_",
    "aten::set_.source_Storage",
    "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Tensor",
}


SECTIONS = ("compute", "composite", "view", "glue")


def op_name(func: torch._ops.OpOverload) -> str:
    schema = func._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def is_view(func: torch._ops.OpOverload) -> bool:
    """True if the op returns an alias of an input that it does not write."""
    rets = func._schema.returns
    return bool(rets) and rets[0].alias_info is not None and not rets[0].alias_info.is_write


def has_kernel(name: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)


def is_composite(name: str) -> bool:
    """An op whose only kernel is a CompositeExplicitAutograd one (stack, clone,
    embedding, constant_pad_nd, empty_like, arange...): on tpu, without a rule
    of its own, PyTorch's composite runs and calls other ops, which are traced
    too. With a rule, the core takes it whole."""
    if name in WHOLE:
        return False
    composite = has_kernel(name, "CompositeExplicitAutograd") or has_kernel(name, "CompositeImplicitAutograd")
    return composite and not has_kernel(name, "CPU")


# Composites whose CPU expansion is CPU-specific (convolution picks
# thnn_conv2d / nnpack / mkldnn on CPU, convolution_overrideable on tpu):
# recorded whole as compute ops, the form the tpu families lower.
WHOLE = {"aten::convolution", "aten::convolution_backward"}


# The CPU picks CPU-only kernels for a few ops where the tpu device gets a
# device-neutral one: SDPA's math on CPU is the flash kernel for CPU, on tpu
# _fused_sdp_choice (Attention.cpp) picks the overrideable kernel.
RENAMES = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": (
        "aten::_scaled_dot_product_fused_attention_overrideable"
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (
        "aten::_scaled_dot_product_fused_attention_overrideable_backward"
    ),
}


class Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = op_name(func)
        kwargs = kwargs or {}
        if not name.startswith("aten::"):
            return func(*args, **kwargs)
        if name in GLUE:
            kind = "glue"
        elif is_view(func):
            kind = "view"
        elif is_composite(name):
            kind = "composite"
        else:
            kind = "compute"
        self.ops.setdefault(RENAMES.get(name, name), kind)
        if kind == "composite":
            # run the composite kernel (the CPU slot holds it) with this mode
            # on, so that the ops it calls are recorded as well
            with self:
                return func.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), *args, **kwargs)
        return func(*args, **kwargs)


# ---------------------------------------------------------------------------
# What is traced
# ---------------------------------------------------------------------------


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def flux_case() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny.flux_transformer("tiny")
    cfg = model.config
    h = w = 4
    txt = 8
    ids = torch.zeros(h, w, 3)
    ids[..., 1] = torch.arange(h)[:, None]
    ids[..., 2] = torch.arange(w)[None, :]
    inputs = dict(
        hidden_states=_rand(1, h * w, cfg.in_channels),
        encoder_hidden_states=_rand(1, txt, cfg.joint_attention_dim, seed=1),
        pooled_projections=_rand(1, cfg.pooled_projection_dim, seed=2),
        timestep=torch.tensor([0.5]),
        img_ids=ids.reshape(h * w, 3),
        txt_ids=torch.zeros(txt, 3),
        guidance=torch.tensor([3.5]),
    )
    return model, lambda m: m(**inputs).sample


def vae_case() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny.autoencoder_kl("tiny")
    x = _rand(1, 3, 32, 32)

    def run(m: torch.nn.Module) -> torch.Tensor:
        latents = m.encode(x).latent_dist.mode()
        return m.decode(latents).sample

    return model, run


def unet_case() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny.unet2d_condition("tiny")
    inputs = dict(
        sample=_rand(1, 4, 16, 16), timestep=torch.tensor([10]), encoder_hidden_states=_rand(1, 8, 32)
    )
    return model, lambda m: m(**inputs).sample


def sd3_case() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny.sd3_transformer("tiny")
    inputs = dict(
        hidden_states=_rand(1, 4, 16, 16),
        encoder_hidden_states=_rand(1, 8, 32, seed=1),
        pooled_projections=_rand(1, 64, seed=2),
        timestep=torch.tensor([10]),
    )
    return model, lambda m: m(**inputs).sample


def clip_case() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny.clip_text_model("tiny")
    ids = tiny.clip_tokenizer()(["a cat"], padding="max_length", max_length=77, return_tensors="pt").input_ids
    return model, lambda m: m(ids).pooler_output


def t5_case() -> tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]:
    model = tiny.t5_encoder("tiny")
    ids = tiny.t5_tokenizer()(["a cat"], padding="max_length", max_length=16, return_tensors="pt").input_ids
    return model, lambda m: m(ids).last_hidden_state


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, Callable[[torch.nn.Module], Any]]]] = {
    "FluxTransformer2DModel (tiny: 1+1 layers, heads 2x16, rope 4/4/8, guidance; 16+8 tokens)": flux_case,
    "AutoencoderKL (tiny: 2 blocks (8, 16), 4 latent ch; encode + decode 32x32)": vae_case,
    "UNet2DConditionModel (tiny: blocks (4, 8), cross-attn 32; 16x16 latents)": unet_case,
    "SD3Transformer2DModel (tiny: 1 layer, head 8x4; 16x16 latents)": sd3_case,
    "CLIPTextModel (tiny: hidden 32, 2 layers; 77 tokens)": clip_case,
    "T5EncoderModel (tiny: d_model 32, 2 layers, gated-gelu; 16 tokens)": t5_case,
}


def schedulers() -> None:
    """One full FlowMatchEuler and Euler step, as the pipelines run them."""
    sample = _rand(1, 16, 4)
    fm = tiny.flow_match_scheduler()
    fm.set_timesteps(2)
    for t in fm.timesteps:
        sample = fm.step(_rand(1, 16, 4, seed=3), t, sample).prev_sample
    eu = tiny.euler_scheduler()
    eu.set_timesteps(2)
    latents = _rand(1, 4, 8, 8) * eu.init_noise_sigma
    for t in eu.timesteps:
        x = eu.scale_model_input(latents, t)
        latents = eu.step(x * 0.1, t, latents).prev_sample


def trace() -> tuple[dict[str, str], list[str]]:
    rec = Recorder()
    traced = []
    for label, make in MODELS.items():
        model, run = make()
        with torch.no_grad(), rec:
            run(model)
        model.train()
        with rec:
            out = run(model)
            out.float().pow(2).mean().backward()
        traced.append(f"{label}: forward, forward + backward")
    with rec:
        schedulers()
    traced.append("FlowMatchEulerDiscreteScheduler (default), EulerDiscreteScheduler (SD): 2 steps each")
    return rec.ops, traced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "tests" / "model_ops.txt"))
    args = parser.parse_args()
    ops, traced = trace()
    lines = [
        "# aten ops of the tiny diffusion models (torch_tpu.testing.tiny), traced on CPU under a",
        "# TorchDispatchMode by tools/op_inventory.py; regenerate with `python tools/op_inventory.py`.",
        f"# torch {torch.__version__}. Traced:",
    ]
    lines += [f"#   {t}" for t in traced]
    lines += [
        "# [compute] ops reach the tpu kernel and need a core rule (tests/test_model_ops.py);",
        "# [composite] ops run PyTorch's composite on tpu unless lowered (their parts are listed);",
        "# [view] ops are PyTorch's metadata kernels; [glue] ops are handled by torch_tpu/csrc.",
    ]
    for section in SECTIONS:
        lines.append("")
        lines.append(f"[{section}]")
        lines += sorted(name for name, kind in ops.items() if kind == section)
    Path(args.out).write_text("\n".join(lines) + "\n")
    n = {s: sum(1 for k in ops.values() if k == s) for s in SECTIONS}
    print(f"wrote {args.out}: {n}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
