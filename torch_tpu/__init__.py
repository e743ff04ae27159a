"""torch_tpu: a native PyTorch "tpu" device on any PJRT plugin.

``import torch_tpu`` (or just ``import torch``, through PyTorch's backend autoload)
registers the device. Nothing is loaded until the device is first used.
"""

from __future__ import annotations

import os

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
from torch_tpu import device as _device_module  # noqa: E402
from torch_tpu import diffusers as _diffusers  # noqa: E402,F401 (an import hook: never imports diffusers)
from torch_tpu._discovery import find_plugin  # noqa: E402
from torch_tpu.compile import TpuBackend  # noqa: E402
from torch_tpu.metrics import metrics, metrics_report, reset_metrics  # noqa: E402
from torch_tpu.modes import EagerMode, eager_mode, get_eager_mode, set_eager_mode  # noqa: E402

__version__ = "0.1.0"
__all__ = [
    "EagerMode",
    "TpuBackend",
    "__version__",
    "cpu_fallback_mode",
    "eager_mode",
    "get_eager_mode",
    "metrics",
    "metrics_report",
    "reset_metrics",
    "set_eager_mode",
]


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


def _register() -> None:
    if getattr(torch, "tpu", None) is _device_module:
        return  # already done in this process
    torch.utils.rename_privateuse1_backend("tpu")
    torch._register_device_module("tpu", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    try:
        _C._set_default_plugin(find_plugin())
    except RuntimeError as error:  # import must not fail: report at first device use
        _device_module._discovery_error = error


_register()
