"""diffusers integration: ``DiffusionPipeline.enable_tpu_compile`` and ``.tpu_warmup``,
and split placement (text encoders on CPU, denoiser and VAE on "tpu").

``import torch_tpu`` installs this lazily: importing diffusers takes seconds, so
the package only registers an import hook, and the methods are added to
``DiffusionPipeline`` right after ``diffusers.pipelines.pipeline_utils`` is first
imported (at once if it already is). :func:`install` does it by hand.

What it adds, on every pipeline class (the methods live on ``DiffusionPipeline``):

- :func:`enable_tpu_compile`: ``torch.compile(component, backend=TpuBackend(),
  dynamic=False)`` on the ``nn.Module`` components on "tpu", through
  ``cached_compile`` (a later process loads dynamo's frames instead of
  tracing); an autoencoder's ``encode``/``decode`` (what pipelines call, not
  ``forward``) are compiled too.
- :func:`tpu_warmup`: one pipeline call under ``no_grad``, then
  ``torch.tpu.synchronize()``.

Split placement, when a pipeline's execution device is "tpu" (diffusers
>= 0.40 reports the accelerator of a split pipeline): each text or image
encoder that is not a diffusers model receives its tensor inputs on its own
device. diffusers 0.42.1 already does this in the FLUX, SDXL, SD3 and Wan
pipelines (``get_module_execution_device``), where the hook finds nothing to
move; most others (Stable Diffusion 1.x/2.x among them) still send the token
ids to the execution device. Encoder outputs are left alone: every pipeline
moves the embeddings to the execution device itself.

Scheduler tables stay on the host: ``scheduler.set_timesteps(..., device=tpu)``
builds its sigma/timestep tables on the CPU instead. Every step reads one entry
(``sigmas[i]``); on the device each new number of steps would be a table of a
new size, and so new programs for the ops that read it, while on the host an
entry is a number that reaches the device as a runtime scalar. The denoiser's
CPU tensor inputs (the step's timestep) are moved to its device by the same
pre-hook that serves the encoders, so any ``num_inference_steps`` runs the
programs of the first image.

Dtypes: a diffusion pipeline takes the latents' dtype from the text encoder,
so float32 text encoders with a bfloat16 denoiser feed it float32 latents,
which fails on any device. On "tpu" the denoiser checks its latents and raises
a ``TypeError`` that says so, rather than casting silently (a cast here would
still leave the VAE to fail); keep the text encoders in the denoiser's dtype
(``pipe.text_encoder.to(torch.bfloat16)``, which also runs on CPU).
"""

from __future__ import annotations

import functools
import logging
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from torch_tpu._internal.import_hook import after_import
from torch_tpu.compile import TpuBackend, mark_repeated_blocks

__all__ = ["enable_tpu_compile", "install", "installed", "tpu_warmup"]

log = logging.getLogger("torch_tpu.compile")

_TARGET = "diffusers.pipelines.pipeline_utils"
_MARK = "_torch_tpu_split_hooks"


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _is_compiled(module: Any) -> bool:
    dynamo = getattr(torch, "_dynamo", None)
    return dynamo is not None and isinstance(module, dynamo.eval_frame.OptimizedModule)


def _unwrap(module: Any) -> Any:
    return module._orig_mod if _is_compiled(module) else module


def _device_of(module: torch.nn.Module) -> torch.device | None:
    """Where the module's weights are (None for a module without any)."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return None


def _dtype_of(module: torch.nn.Module) -> torch.dtype | None:
    for tensor in module.parameters():
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def _offload_device(module: Any, *, model_offload_only: bool = False) -> torch.device | None:
    """The execution device of an accelerate hook on |module| (model CPU
    offload's ``CpuOffload``, a device map's ``AlignDevicesHook``), or None
    (no hook, or one without a device, such as sequential offload's outer
    hook). |model_offload_only|: ``CpuOffload`` hooks only, the one kind that
    leaves inputs where they are once the module is on its device."""
    hook = getattr(module, "_hf_hook", None)
    for h in [hook, *getattr(hook, "hooks", ())]:
        if model_offload_only and type(h).__name__ != "CpuOffload":
            continue
        device = getattr(h, "execution_device", None)
        if device is not None:
            device = torch.device("tpu", device) if isinstance(device, int) else torch.device(device)
            if device.type == "tpu" and device.index is None:
                device = torch.device("tpu", torch.tpu.current_device())
            return device
    return None


def _on_tpu(module: Any) -> bool:
    """Weights on "tpu", or moved there by an offload hook when it runs."""
    if not isinstance(module, torch.nn.Module):
        return False
    device = _offload_device(module) or _device_of(module)
    return device is not None and device.type == "tpu"


def _tree_map(fn: Any, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_tree_map(fn, v) for v in value)
    if type(value) is dict:
        return {k: _tree_map(fn, v) for k, v in value.items()}
    return value


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


# ---------------------------------------------------------------------------
# Split placement and the dtype check (hooks added when the pipeline runs on tpu)
# ---------------------------------------------------------------------------


def _inputs_to_module_device(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook of encoders and denoisers: tensor inputs go to the module's device.

    Under model CPU offload that is the hook's execution device: accelerate's
    ``CpuOffload`` moves the inputs only on the call that moves the module,
    and later calls (the next denoising steps) would bring the host-side
    timestep along as it is. Other accelerate hooks place inputs themselves
    (a device map's also brings the outputs back to where the inputs were)."""
    if hasattr(module, "_hf_hook"):
        device = _offload_device(module, model_offload_only=True)
        if device is None:
            return None  # sequential offload, a device map: accelerate places the inputs itself
    else:
        device = _device_of(module)
    if device is None:
        return None
    moves = [t for t in _tensors((args, kwargs)) if t.device != device]
    if not moves or (device.type != "tpu" and not any(t.device.type == "tpu" for t in moves)):
        return None  # nothing to move, or a split that does not involve tpu: not ours

    def move(t: torch.Tensor) -> torch.Tensor:
        return t.to(device) if t.device != device else t

    return _tree_map(move, args), _tree_map(move, kwargs)


_LATENT_NAMES = ("hidden_states", "sample", "x")


def _check_latent_dtype(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook of denoisers on tpu: latents in the weights' dtype."""
    latents = args[0] if args else next((kwargs[n] for n in _LATENT_NAMES if n in kwargs), None)
    if not isinstance(latents, torch.Tensor) or latents.device.type != "tpu":
        return
    if not latents.is_floating_point():
        return
    weights = _dtype_of(module)
    if weights is None or weights == latents.dtype:
        return
    name = type(_unwrap(module)).__name__
    raise TypeError(
        f"torch_tpu: {name} on tpu has {weights} weights but received {latents.dtype} latents. "
        "A diffusers pipeline takes the latents' dtype from its text encoder: keep the text encoders "
        f"in {weights} too (e.g. pipe.text_encoder.to({weights}); they may stay on the CPU), "
        "or move the whole pipeline to one dtype with pipe.to(dtype=...)."
    )


def _host_tables(scheduler: Any) -> None:
    """Makes ``scheduler.set_timesteps`` build its tables on the CPU when asked
    for "tpu" (see the module docstring)."""
    set_timesteps = getattr(scheduler, "set_timesteps", None)
    if set_timesteps is None or getattr(scheduler, _MARK, False):
        return

    @functools.wraps(set_timesteps)  # retrieve_timesteps reads its signature
    def set_timesteps_on_host(*args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "tpu":
            kwargs["device"] = "cpu"
        return set_timesteps(*args, **kwargs)

    object.__setattr__(scheduler, "set_timesteps", set_timesteps_on_host)
    object.__setattr__(scheduler, _MARK, True)


def _prepare_split_placement(pipe: Any) -> None:
    from diffusers.models.modeling_utils import ModelMixin

    for component in pipe.components.values():
        if hasattr(component, "set_timesteps") and not isinstance(component, torch.nn.Module):
            _host_tables(component)
            continue
        if not isinstance(component, torch.nn.Module) or getattr(component, _MARK, False):
            continue
        if isinstance(_unwrap(component), ModelMixin):
            if not hasattr(_unwrap(component), "decode"):  # a denoiser, not an autoencoder
                component.register_forward_pre_hook(_inputs_to_module_device, with_kwargs=True)
                component.register_forward_pre_hook(_check_latent_dtype, with_kwargs=True)
        else:  # a transformers text or image encoder
            component.register_forward_pre_hook(_inputs_to_module_device, with_kwargs=True)
        object.__setattr__(component, _MARK, True)


# ---------------------------------------------------------------------------
# The pipeline methods
# ---------------------------------------------------------------------------


def _swap_legacy_attention(module: torch.nn.Module) -> int:
    """``AttnProcessor2_0`` -> ``AttnProcessor`` on legacy ``Attention`` modules only
    (VAE, UNet). ``AttentionModuleMixin`` modules (FluxAttention and the other new
    transformers) keep their processors: the classic one lacks their RoPE and
    their attributes. Returns the number swapped."""
    from diffusers.models.attention_processor import Attention, AttnProcessor, AttnProcessor2_0

    swapped = 0
    for sub in module.modules():
        if type(sub) is Attention and type(getattr(sub, "processor", None)) is AttnProcessor2_0:
            sub.set_processor(AttnProcessor())
            swapped += 1
    return swapped


def enable_tpu_compile(
    self: Any,
    model_names: Iterable[str] | None = None,
    *,
    swap_attention_processors: bool = True,
    **compile_kwargs: Any,
) -> list[str]:
    """Compiles the pipeline's ``nn.Module`` components on "tpu" (or the named ones).

    Each is replaced by ``torch.compile(component, backend=TpuBackend(),
    dynamic=False, **compile_kwargs)`` (the caller's keyword arguments win); for
    an autoencoder, ``encode`` and ``decode`` are compiled too, since pipelines
    call those rather than ``forward``. Components that are already compiled are
    skipped, so calling this twice is harmless. It compiles through
    ``torch_tpu.cached_compile``: with a cache directory on disk, a later
    process loads dynamo's compiled frames instead of tracing. Repeated blocks (FLUX's
    ``transformer_blocks``) are marked first (``mark_repeated_blocks``): dynamo
    traces each distinct block once and it compiles as one program. Shapes are
    static: a new height,
    width, batch size or sequence length compiles again (logged at WARNING on
    the ``torch_tpu.compile`` logger); the number of steps does not.

    Args:
        model_names: names of components to compile (``pipe.components`` keys);
            default: every ``nn.Module`` component whose weights are on "tpu".
        swap_attention_processors: replace ``AttnProcessor2_0`` by
            ``AttnProcessor`` on legacy ``Attention`` modules (VAE, UNet) of the
            compiled components; never on ``AttentionModuleMixin`` modules such
            as ``FluxAttention``.
        **compile_kwargs: passed to ``torch.compile``.

    Returns:
        The names of the components compiled by this call.

    Raises:
        ValueError: a name is not a component of the pipeline, is not an
            ``nn.Module``, or is not on "tpu".
    """
    components = self.components
    if model_names is None:
        names = [n for n, c in components.items() if _on_tpu(_unwrap(c))]
        if not names:
            warnings.warn(
                f"enable_tpu_compile: no component of {type(self).__name__} is on 'tpu'; nothing compiled. "
                "Move the denoiser and the VAE first, e.g. pipe.transformer.to('tpu').",
                UserWarning,
                stacklevel=2,
            )
            return []
    else:
        names = [model_names] if isinstance(model_names, str) else list(model_names)
        unknown = [n for n in names if n not in components]
        if unknown:
            raise ValueError(
                f"enable_tpu_compile: unknown components {unknown}; this pipeline has {sorted(components)}"
            )
        for n in names:
            c = _unwrap(components[n])
            if not isinstance(c, torch.nn.Module):
                raise ValueError(
                    f"enable_tpu_compile: component {n!r} is not an nn.Module ({type(c).__name__})"
                )
            if not _on_tpu(c):
                raise ValueError(f"enable_tpu_compile: component {n!r} is not on 'tpu'; move it first")
    compiled: list[str] = []
    for name in names:
        component = components[name]
        if _is_compiled(component) or getattr(component, _COMPILED, False):
            continue
        if swap_attention_processors:
            _swap_legacy_attention(component)

        def options(method: str, name: str = name) -> dict[str, Any]:
            # The recompile log names what was compiled: "transformer.forward".
            kwargs: dict[str, Any] = {"backend": TpuBackend(name=f"{name}.{method}"), "dynamic": False}
            kwargs.update(compile_kwargs)
            return kwargs

        backend = options("forward")["backend"]
        if isinstance(backend, TpuBackend) and backend.blocks:
            # dynamo traces each distinct repeated block once (and TpuBackend
            # compiles it once): a warm process re-traces 2 FLUX blocks, not 57
            mark_repeated_blocks(component)
        for method in ("encode", "decode"):
            if hasattr(component, "decode") and callable(getattr(component, method, None)):
                object.__setattr__(component, method, _compiled_method(component, method, options(method)))
        if hasattr(component, "_hf_hook") and hasattr(component, "_old_forward"):
            # An accelerate hook (model CPU offload) wraps forward: compile the
            # forward inside it, so the hook's device moves stay eager; the
            # component stays itself, so offload can re-hook it after a call.
            component._old_forward = _compile(component._old_forward, options("forward"))
            object.__setattr__(component, _COMPILED, True)
        else:
            setattr(self, name, _compile(component, options("forward")))
        compiled.append(name)
    return compiled


_COMPILED = "_torch_tpu_compiled"


def _compile(fn: Any, options: dict[str, Any]) -> Any:
    """torch.compile; with TpuBackend, cached_compile: a later process loads
    dynamo's output from the cache directory instead of tracing."""
    if isinstance(options.get("backend"), TpuBackend):
        from torch_tpu.dynamo_cache import cached_compile

        return cached_compile(fn, **options)
    return torch.compile(fn, **options)


def _compiled_method(component: torch.nn.Module, method: str, options: dict[str, Any]) -> Any:
    """``component.<method>`` compiled. diffusers wraps an autoencoder's
    ``encode``/``decode`` in ``apply_forward_hook``, which runs an offload
    hook's ``pre_forward`` (moving the weights): that part stays eager, around
    the compiled undecorated method."""
    bound = getattr(component, method)
    inner = getattr(getattr(type(component), method, None), "__wrapped__", None)
    if inner is None:
        return _compile(bound, options)
    compiled = _compile(inner.__get__(component), options)

    @functools.wraps(bound)
    def call(*args: Any, **kwargs: Any) -> Any:
        hook = getattr(component, "_hf_hook", None)
        if hook is not None and hasattr(hook, "pre_forward"):
            hook.pre_forward(component)
        return compiled(*args, **kwargs)

    return call


def tpu_warmup(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Runs the pipeline once under ``torch.no_grad()`` (compiling what it needs
    for these arguments), then waits for the device; returns the pipeline's output.

    Call it with the height, width, batch size and sequence length of the later
    calls: under ``enable_tpu_compile`` those calls then compile nothing.
    """
    with torch.no_grad():
        output = self(*args, **kwargs)
    torch.tpu.synchronize()
    return output


# ---------------------------------------------------------------------------
# Installation
# ---------------------------------------------------------------------------


def installed() -> bool:
    """Whether ``DiffusionPipeline`` has the methods (without importing diffusers)."""
    module = sys.modules.get(_TARGET)
    if module is None:
        return False
    return getattr(module.DiffusionPipeline, "enable_tpu_compile", None) is enable_tpu_compile


def install() -> bool:
    """Adds the methods to ``DiffusionPipeline`` now (idempotent); False when
    diffusers cannot be imported."""
    try:
        from diffusers.pipelines.pipeline_utils import DiffusionPipeline
    except ImportError:
        return False
    _install_on(DiffusionPipeline)
    return True


def _trace_version_checks_quietly(import_utils: Any) -> None:
    """diffusers' ``is_torch_version`` is ``functools.cache``-wrapped, and the
    VAE's ``Upsample2D.forward`` calls it, so every compile of a VAE (ours or
    inductor's) printed dynamo's multi-line lru_cache warning, which a user
    cannot act on. The function compares the installed torch's version with
    a constant: tracing through its cache is exact, so it goes on dynamo's
    own list of wrappers it traces without warning (as dynamo does for
    einops)."""
    try:
        import torch._dynamo.utils as dynamo_utils
    except ImportError:
        return
    allow = getattr(dynamo_utils, "allow_lru_cache_wrapper_trace_without_warning", None)
    fn = getattr(import_utils, "is_torch_version", None)
    if allow is not None and fn is not None and hasattr(fn, "cache_info"):
        allow(fn)


def _balanced_over_tpu(get_final_device_map: Any) -> Any:
    """``from_pretrained(..., device_map="balanced")`` over the "tpu" devices.

    diffusers asks accelerate's ``get_max_memory`` for the accelerators'
    free memory; accelerate knows CUDA, XPU, NPU, MLU, MUSA and the like by
    name, not "tpu", so it reported none and every component silently
    stayed on the CPU (``hf_device_map`` None). When accelerate finds no
    accelerator and "tpu" devices exist, the map is made from theirs
    (``torch.tpu.mem_get_info``); diffusers then spreads the components over
    them as it does over GPUs, and accelerate's dispatch hooks move each
    component's inputs to its device."""
    if getattr(get_final_device_map, "_tpu_balanced", False):
        return get_final_device_map

    @functools.wraps(get_final_device_map)
    def balanced(device_map: Any, *args: Any, **kwargs: Any) -> Any:
        if device_map != "balanced" or kwargs.get("max_memory") is not None:
            return get_final_device_map(device_map, *args, **kwargs)
        from diffusers.pipelines import pipeline_loading_utils as loading

        known = loading.get_max_memory()
        count = torch.tpu.device_count() if not any(k not in ("cpu", "disk", "mps") for k in known) else 0
        if count == 0:
            return get_final_device_map(device_map, *args, **kwargs)
        free = {f"tpu:{i}": torch.tpu.mem_get_info(i)[0] for i in range(count)}
        saved = loading.get_max_memory
        loading.get_max_memory = lambda max_memory=None: dict(free)
        try:
            return get_final_device_map(device_map, *args, **kwargs)
        finally:
            loading.get_max_memory = saved

    balanced._tpu_balanced = True  # type: ignore[attr-defined]
    return balanced


def _install_on(cls: Any) -> None:
    if getattr(cls, "enable_tpu_compile", None) is enable_tpu_compile:
        return
    module = sys.modules.get(cls.__module__)
    if module is not None and hasattr(module, "_get_final_device_map"):
        module._get_final_device_map = _balanced_over_tpu(module._get_final_device_map)
    cls.enable_tpu_compile = enable_tpu_compile
    cls.tpu_warmup = tpu_warmup
    original = cls.__dict__.get("_execution_device")
    if isinstance(original, property) and original.fget is not None:
        getter = original.fget

        def _execution_device(self: Any) -> torch.device:
            device = getter(self)
            if torch.device(device).type == "tpu":
                _prepare_split_placement(self)
            return device

        _execution_device.__doc__ = getter.__doc__
        cls._execution_device = property(_execution_device)


def _install_lazily() -> None:
    """Called by ``import torch_tpu``: cheap, never imports diffusers."""
    after_import(
        _TARGET,
        lambda module: hasattr(module, "DiffusionPipeline"),
        lambda module: _install_on(module.DiffusionPipeline),
    )
    # A bare model (from diffusers import AutoencoderKL) imports no pipeline.
    after_import(
        "diffusers.utils.import_utils",
        lambda module: hasattr(module, "is_torch_version"),
        _trace_version_checks_quietly,
    )


_install_lazily()
