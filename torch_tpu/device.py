"""The ``torch.tpu`` module: devices, synchronisation, RNG and memory, like ``torch.cuda``."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch

from torch_tpu import _C

_initialized = False
_init_lock = threading.Lock()
# Set by torch_tpu/__init__.py when plugin discovery failed; raised at first use.
_discovery_error: Exception | None = None

DeviceLike = torch.device | str | int | None


def _lazy_init() -> None:
    """Loads the PJRT plugin and creates the client, once (PyTorch calls this at first use)."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        if _discovery_error is not None:
            raise RuntimeError(str(_discovery_error))
        _C._init()
        _initialized = True


def is_initialized() -> bool:
    return _initialized


def is_available() -> bool:
    """True if a PJRT plugin loads and has at least one device (never raises)."""
    try:
        _lazy_init()
    except RuntimeError:
        return False
    return _C._device_count() > 0


def device_count() -> int:
    """Number of devices of the loaded plugin; 0 if no plugin can be loaded. A bad
    ``TORCH_TPU_*`` environment variable raises a ``RuntimeError`` that names it."""
    _C._config_check()
    if _discovery_error is not None:
        return 0
    return _C._device_count()


def _index(device: DeviceLike) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"expected a tpu device, got {device}")
    return current_device() if device.index is None else device.index


def current_device() -> int:
    return _C._current_device()


def set_device(device: DeviceLike) -> None:
    """Makes |device| the current tpu device; an index the plugin does not have raises."""
    index = _index(device)
    if index < 0:
        return
    count = device_count()
    if index >= count:
        raise RuntimeError(
            f"set_device: tpu:{index} does not exist: {count} tpu device(s) (TORCH_TPU_NUM_DEVICES sets "
            "how many the CPU plugin creates)"
        )
    _C._set_device(index)


class device:
    """Context manager that makes |device| the current tpu device."""

    def __init__(self, device: DeviceLike) -> None:
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> device:
        self.previous = current_device()
        if self.index >= 0:
            _C._set_device(self.index)
        return self

    def __exit__(self, *exc: object) -> None:
        _C._set_device(self.previous)


def synchronize(device: DeviceLike = None) -> None:
    """Waits for the work queued on |device| (the current one by default); raises pending errors."""
    _lazy_init()
    _C._synchronize(_index(device))


# ---- RNG ---------------------------------------------------------------------------


def _generator(device: DeviceLike = None) -> torch.Generator:
    return _C._default_generator(_index(device))


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        return tuple(_C._default_generator(i) for i in range(max(device_count(), 1)))
    raise AttributeError(f"module 'torch.tpu' has no attribute {name!r}")


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator."""
    _C._manual_seed(current_device(), int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds the default generator of every device."""
    for i in range(max(device_count(), 1)):
        _C._manual_seed(i, int(seed))


def seed() -> int:
    """Seeds the current device's generator with a random number and returns it."""
    return _generator().seed()


def seed_all() -> None:
    for i in range(max(device_count(), 1)):
        _generator(i).seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: DeviceLike = "tpu") -> torch.Tensor:
    """The 16-byte state [seed, offset] of |device|'s default generator, as a CPU uint8 tensor."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "tpu") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(max(device_count(), 1))]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---- properties and memory ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TpuDeviceProperties:
    name: str  # the PJRT device kind: "cpu", "TPU v5 lite"...
    platform: str  # the PJRT platform: "cpu", "tpu", "cuda"
    total_memory: int = 0  # bytes; 0 when the plugin does not say


def get_device_name(device: DeviceLike = None) -> str:
    _lazy_init()
    return _C._device_kind(_index(device))


def get_device_properties(device: DeviceLike = None) -> TpuDeviceProperties:
    _lazy_init()
    info = _C._runtime_info()
    return TpuDeviceProperties(name=_C._device_kind(_index(device)), platform=info["platform_name"])


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by live device buffers of |device|."""
    return _C._memory_allocated(_index(device))


def max_memory_allocated(device: DeviceLike = None) -> int:
    return _C._max_memory_allocated(_index(device))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def _is_in_bad_fork() -> bool:
    """PyTorch's seeding helpers ask this; the PJRT client is not fork-safe, but nothing is poisoned."""
    return False
