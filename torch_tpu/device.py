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
        try:
            _C._init()
        except RuntimeError as error:
            raise RuntimeError(_missing_chip_message(error)) from None
        _initialized = True
        from torch_tpu._internal import autograd_exit

        autograd_exit.register()


def _missing_chip_message(error: RuntimeError) -> str:
    """libtpu with no TPU attached cannot create a client: say so in one line, not libtpu's."""
    import os

    from torch_tpu import _discovery

    plugin = os.environ.get("TORCH_TPU_PJRT_PLUGIN") or ""
    if _discovery.has_tpu_chips() or not os.path.basename(plugin).startswith("libtpu"):
        return str(error)
    return (
        f"torch_tpu: no TPU chip is attached to this host (no /dev/accel*, no /dev/vfio TPU): {plugin} can "
        "compile for a TPU here but not run on one; run on another plugin with a compile-only target "
        "(TORCH_TPU_TARGET=v6e:1x1, torch_tpu.set_target) instead"
    )


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
    name: str  # what the device is: "TPU v5 lite", "XLA:CPU (PJRT CPU plugin)" (get_device_name)
    platform: str  # the PJRT platform: "cpu", "tpu", "cuda"
    total_memory: int = 0  # bytes; 0 when the plugin does not say
    device_kind: str = ""  # the PJRT device kind as the plugin reports it: "TPU v5 lite", "cpu"
    major: int = 0  # no CUDA compute capability (see get_device_capability)
    minor: int = 0


def _device_name(platform: str, kind: str) -> str:
    """The chip when the plugin's device kind names one (``TPU v6 lite``,
    ``NVIDIA H100 80GB HBM3``); a kind that only repeats the platform's name
    (the CPU plugin says ``cpu`` for both) names the platform and its plugin."""
    if kind and kind.casefold() != platform.casefold():
        return kind
    upper = (platform or kind or "unknown").upper()
    return f"XLA:{upper} (PJRT {upper} plugin)"


def get_device_name(device: DeviceLike = None) -> str:
    """The platform and chip, from the PJRT plugin: ``"TPU v6 lite"`` on a
    TPU, ``"XLA:CPU (PJRT CPU plugin)"`` on the CPU plugin."""
    _lazy_init()
    return _device_name(_C._runtime_info()["platform_name"], _C._device_kind(_index(device)))


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    """``(major, minor)``, as ``torch.cuda.get_device_capability`` returns it:
    ``(0, 0)``, since a PJRT device has no CUDA compute capability (checks
    such as ``capability >= (8, 0)`` are false, as for any non-CUDA device).
    What the device supports: ``torch.accelerator.get_device_capability``."""
    props = get_device_properties(device)
    return props.major, props.minor


def _device_memory(device: DeviceLike) -> dict[str, Any]:
    _lazy_init()
    return _C._device_memory(_index(device))


def get_device_properties(device: DeviceLike = None) -> TpuDeviceProperties:
    """Name, platform and total memory (what the plugin reports; the host's RAM on the CPU plugin)."""
    _lazy_init()
    info = _C._runtime_info()
    limit = _device_memory(device)["bytes_limit"]
    kind = _C._device_kind(_index(device))
    return TpuDeviceProperties(
        name=_device_name(info["platform_name"], kind),
        platform=info["platform_name"],
        total_memory=max(limit, 0),
        device_kind=kind,
    )


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by live device buffers of |device|."""
    return _C._memory_allocated(_index(device))


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_allocated` since the start or :func:`reset_peak_memory_stats`."""
    return _C._max_memory_allocated(_index(device))


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes the device holds for this process: the plugin's reservation where it reports one,
    else the live buffers (nothing is cached: a buffer is freed with its last tensor)."""
    if is_initialized():
        reserved = _C._device_memory(_index(device))["bytes_reserved"] if _C._device_count() else -1
        if reserved >= 0:
            return int(reserved)
    return memory_allocated(device)


def max_memory_reserved(device: DeviceLike = None) -> int:
    if is_initialized() and _C._device_count():
        peak = _C._device_memory(_index(device))["peak_bytes_reserved"]
        if peak >= 0:
            return int(peak)
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Nothing to release: buffers are freed with their last tensor (no caching allocator)."""


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of |device|, from the plugin's memory stats (the host's RAM on the CPU plugin)."""
    m = _device_memory(device)
    if m["bytes_limit"] < 0:
        raise RuntimeError("mem_get_info: the PJRT plugin does not report this device's memory")
    return int(max(m["bytes_free"], 0)), int(m["bytes_limit"])


def memory_stats(device: DeviceLike = None) -> dict[str, Any]:
    """The keys of ``torch.cuda.memory_stats`` that apply, plus what the plugin reports (``device.*``)."""
    index = _index(device)
    allocated, peak = memory_allocated(index), max_memory_allocated(index)
    stats: dict[str, Any] = {}
    for kind in ("allocated_bytes", "active_bytes", "requested_bytes"):
        stats[f"{kind}.all.current"] = allocated
        stats[f"{kind}.all.peak"] = peak
    stats["reserved_bytes.all.current"] = memory_reserved(index)
    stats["reserved_bytes.all.peak"] = max_memory_reserved(index)
    if is_initialized() and _C._device_count():
        for key, value in _C._device_memory(index).items():
            if isinstance(value, bool) or value >= 0:
                stats[f"device.{key}"] = value
    return dict(sorted(stats.items()))


def memory_summary(device: DeviceLike = None) -> str:
    return "\n".join(f"{k}: {v}" for k, v in memory_stats(device).items())


# ---- streams and events -------------------------------------------------------------------
# A device has one queue (the core's launch order); every stream feeds it, so
# work on two streams is always ordered. Events are markers in that queue,
# timed by the plugin's completion events.

_DEVICE_TYPE_TPU = 20  # c10::DeviceType::PrivateUse1, as torch.Stream(device_type=...) takes it


def _stream_device(device: DeviceLike) -> torch.device:
    return torch.device("tpu", _index(device))


class Stream(torch.Stream):
    """A tpu stream (``torch.cuda.Stream``'s counterpart)."""

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs:  # torch rebuilds a stream from its ids
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_stream_device(device), priority=priority)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class Event(torch.Event):
    """A tpu event (``torch.cuda.Event``'s counterpart); timing is always available."""

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        if interprocess:
            raise ValueError("tpu events cannot be shared between processes")
        return super().__new__(cls, device="tpu", enable_timing=enable_timing, blocking=blocking)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event to |end_event| (both recorded). torch.Event's
        own method takes only an exact torch.Event, so the glue times subclasses."""
        return _C._event_elapsed_ms(self, end_event)


_current_streams = threading.local()


def default_stream(device: DeviceLike = None) -> torch.Stream:
    return torch.Stream(stream_id=0, device_index=_index(device), device_type=_DEVICE_TYPE_TPU)


def current_stream(device: DeviceLike = None) -> torch.Stream:
    index = _index(device)
    stream = getattr(_current_streams, "by_device", {}).get(index)
    return stream if stream is not None else default_stream(index)


def set_stream(stream: torch.Stream | None) -> None:
    if stream is None:
        return
    if stream.device.type != "tpu":
        raise ValueError(f"set_stream: expected a tpu stream, got one on {stream.device}")
    if not hasattr(_current_streams, "by_device"):
        _current_streams.by_device = {}
    _current_streams.by_device[stream.device_index] = stream
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is not None and accelerator.type == "tpu":
        torch.accelerator.set_stream(stream)  # the guard's current stream too


class StreamContext:
    """``with torch.tpu.stream(s):`` makes |s| current, then restores the previous one."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.previous: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self.previous = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            set_stream(self.previous)


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


# ---- autocast ------------------------------------------------------------------------------


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("tpu", dtype=...)`` accepts; bf16 is the default."""
    return [torch.bfloat16, torch.float16, torch.float32]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bf16 is native on TPUs and computed by XLA on every other PJRT device."""
    return True


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("tpu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("tpu", dtype)


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("tpu")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("tpu", enabled)


def _is_in_bad_fork() -> bool:
    """PyTorch's seeding helpers ask this; the PJRT client is not fork-safe, but nothing is poisoned."""
    return False
