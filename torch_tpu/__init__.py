"""torch_tpu: a native PyTorch "tpu" device on any PJRT plugin.

``import torch_tpu`` (or just ``import torch``, through PyTorch's backend autoload)
registers the device. Nothing is loaded until the device is first used.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import Any

# XLA inside the plugin logs INFO lines to stderr at start-up; keep warnings
# and errors only unless the user asked for more.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _autoload() -> None:
    """Entry point of PyTorch's device-backend autoload (``torch.backends`` group).

    Defined before ``import torch``: importing this package first imports torch,
    whose autoload imports this (then partly initialised) package and calls this;
    the registration below runs once torch is ready.
    """


import torch  # noqa: E402

try:
    from torch_tpu import _C  # noqa: E402 (checks that torch is the one it was built for)
except ImportError as _error:
    from torch_tpu._torch_version import explain_load_failure

    _explained = explain_load_failure(_error)
    if _explained is None:
        raise
    raise _explained from _error
from torch_tpu import _discovery, amp  # noqa: E402
from torch_tpu import device as _device_module  # noqa: E402
from torch_tpu import diffusers as _diffusers  # noqa: E402,F401 (an import hook: never imports diffusers)
from torch_tpu._discovery import find_plugin  # noqa: E402
from torch_tpu._safetensors import install_lazily as _install_safetensors  # noqa: E402
from torch_tpu._version import __version__  # noqa: E402
from torch_tpu.compile import TpuBackend, mark_repeated_blocks  # noqa: E402
from torch_tpu.metrics import metrics, metrics_report, reset_metrics  # noqa: E402
from torch_tpu.modes import EagerMode, eager_mode, get_eager_mode, set_eager_mode  # noqa: E402
from torch_tpu.targets import get_target, reset_target_report, set_target, target, target_report  # noqa: E402

_install_safetensors()  # load_file(device="tpu"), as for built-in devices (an import hook)

__all__ = [
    "EagerMode",
    "TpuBackend",
    "cached_compile",
    "mark_repeated_blocks",
    "__version__",
    "cpu_fallback_mode",
    "eager_mode",
    "get_eager_mode",
    "get_target",
    "metrics",
    "metrics_report",
    "reset_metrics",
    "reset_target_report",
    "set_eager_mode",
    "set_target",
    "target",
    "target_report",
]


def cached_compile(fn: Any, *, backend: TpuBackend, **torch_compile_kwargs: Any) -> Any:
    """``torch.compile(fn, backend=backend, ...)`` whose dynamo output a later
    process loads instead of tracing: see :func:`torch_tpu.dynamo_cache.cached_compile`."""
    from torch_tpu.dynamo_cache import cached_compile as compile_cached  # imports dynamo: only when asked

    return compile_cached(fn, backend=backend, **torch_compile_kwargs)


class cpu_fallback_mode:  # noqa: N801 (a function to users, also a context manager)
    """Turns the CPU fallback for ops without a tpu lowering on or off.

    ``cpu_fallback_mode(False)`` sets the mode at once; ``with cpu_fallback_mode(False):``
    restores the previous mode on exit.
    """

    def __init__(self, enabled: bool) -> None:
        self.previous = bool(_C._get_cpu_fallback_enabled())
        _C._set_cpu_fallback_enabled(bool(enabled))

    def __enter__(self) -> cpu_fallback_mode:
        return self

    def __exit__(self, *exc: object) -> None:
        _C._set_cpu_fallback_enabled(self.previous)


_compile_note_given = False
# One backend for the routed default compile (see tpu_backend in compile.py).
_default_compile_backend: TpuBackend | None = None


def _route_default_compile() -> None:
    """``torch.compile(model)`` (inductor, the default) on tpu inputs runs through ``TpuBackend``.

    Inductor has its own code generator for any device named "tpu" (Pallas,
    which needs JAX and targets real TPUs only); in torch 2.13 that choice is
    made inside inductor by the device's name, so registering a device
    interface for "tpu" would not keep it out. The default backend is
    therefore routed here, before inductor sees the graph: graphs whose
    inputs are on "tpu" go to ``TpuBackend`` (one note, once per process);
    every other graph reaches inductor untouched.
    """
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is None or getattr(wrapper.__call__, "_tpu_routed", False):
        return
    inductor_call = wrapper.__call__

    def __call__(self: Any, model_: Any, inputs_: Any, *args: Any, **kwargs: Any) -> Any:
        global _compile_note_given, _default_compile_backend
        if not any(isinstance(x, torch.Tensor) and x.device.type == "tpu" for x in inputs_):
            return inductor_call(self, model_, inputs_, *args, **kwargs)
        if not _compile_note_given:
            _compile_note_given = True
            logging.getLogger("torch_tpu.compile").warning(
                "torch_tpu: torch.compile without a backend on tpu inputs uses TpuBackend "
                "(backend='tpu'); inductor's tpu code generator is for JAX/Pallas"
            )
        if _default_compile_backend is None:
            # dynamic=None makes a changed size symbolic: each new size is
            # then compiled as a static program of its own.
            _default_compile_backend = TpuBackend(specialize_dynamic=True)
        return _default_compile_backend(model_, inputs_)

    __call__._tpu_routed = True  # type: ignore[attr-defined]
    wrapper.__call__ = __call__


def _register() -> None:
    if getattr(torch, "tpu", None) is _device_module:
        return  # already done in this process
    torch.utils.rename_privateuse1_backend("tpu")
    torch._register_device_module("tpu", _device_module)
    _device_module.amp = amp  # type: ignore[attr-defined]
    sys.modules["torch.tpu.amp"] = amp
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    # autocast("tpu") runs in bf16 unless told otherwise (the TPU's native
    # type). PyTorch keeps this per thread: threads started later begin with
    # float16, so pass dtype= there (or torch.tpu.set_autocast_dtype).
    torch.set_autocast_dtype("tpu", torch.bfloat16)
    _route_default_compile()
    _discovery.prepare_plugin_env()
    from torch_tpu import _c10d

    _c10d.register()  # torch.distributed's "tpu" backend (torch.distributed is imported by torch)
    from torch_tpu._internal import mp_reductions

    mp_reductions.register()  # tpu tensors through torch.multiprocessing: by value, through host memory
    # At exit, before the interpreter and the plugin's statics are torn down,
    # wait for the programs still running (issue 24, defect 0: a script that
    # ended right after its last launch crashed in the program's code).
    if hasattr(_C, "_wait_idle"):
        atexit.register(_C._wait_idle)
    # and for the compile-only programs still compiling for a target on the
    # compile pool (TpuBackend(target_only=True)): their records are written
    if hasattr(_C, "_shadow_wait"):
        atexit.register(_C._shadow_wait)
    try:
        _C._set_default_plugin(find_plugin())
    except RuntimeError as error:  # import must not fail: report at first device use
        _device_module._discovery_error = error


_register()
# TORCH_TPU_TARGET=v6e:1x1: shadow-compile this process's programs for that target from the start.
if os.environ.get("TORCH_TPU_TARGET"):
    set_target(os.environ["TORCH_TPU_TARGET"])
