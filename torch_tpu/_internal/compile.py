"""``from torch_tpu._internal.compile import TpuBackend`` (the path diffusers uses)."""

from torch_tpu.compile import TpuBackend

__all__ = ["TpuBackend"]
