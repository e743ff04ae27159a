"""Execution modes: when ops run.

All four modes share one engine and the same lowering rules; they differ only
in when the pending graph is flushed (compiled, or fetched from the cache, and
run):

- ``DEFER_NEVER`` (the default, "strict eager"): every op runs at once,
  asynchronously, like CUDA.
- ``DEFER_NEVER_AND_LAUNCH_BLOCKING`` ("debug eager"): every op runs and is
  waited for, so an error is raised at the Python line of the op that caused
  it; results are checked against PyTorch's meta kernels and indices against
  their bounds.
- ``DEFER_AND_FUSE`` ("fused eager"): ops accumulate into one program, flushed
  at host reads (``.cpu()``, ``.item()``, ``print``), ``torch.tpu.synchronize()``,
  a size limit, and when a repeated op sequence (a loop step) starts again.
- ``INTERNAL_DEFER_ALL``: never flushed; torch.compile's TpuBackend traces with it.

The mode is per thread. ``TORCH_TPU_LAUNCH_BLOCKING=1`` or
``TORCH_TPU_DEFER_AND_FUSE=1`` set a thread's initial mode.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator

from torch_tpu import _C

__all__ = ["EagerMode", "eager_mode", "get_eager_mode", "set_eager_mode"]


class EagerMode(enum.IntEnum):
    """When the pending graph runs (values match the core's tpurt_eager_mode_t)."""

    DEFER_NEVER = 0
    DEFER_NEVER_AND_LAUNCH_BLOCKING = 1
    DEFER_AND_FUSE = 2
    INTERNAL_DEFER_ALL = 3

    # An IntEnum prints as its number since Python 3.11; a mode prints by name.
    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else int.__format__(int(self), spec)


def get_eager_mode() -> EagerMode:
    """The calling thread's mode."""
    return EagerMode(_C._get_eager_mode())


def set_eager_mode(mode: EagerMode) -> None:
    """Sets the calling thread's mode. Leaving DEFER_AND_FUSE runs what is pending."""
    _C._set_eager_mode(int(EagerMode(mode)))


@contextlib.contextmanager
def eager_mode(mode: EagerMode) -> Iterator[None]:
    """Runs the block in |mode| and restores the previous mode, also on exceptions."""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)
