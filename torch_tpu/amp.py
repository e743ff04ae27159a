"""``torch.tpu.amp``: autocast and GradScaler for "tpu", as ``torch.cuda.amp`` is for CUDA.

``torch.autocast("tpu")`` runs matmuls, convolutions and linear layers in bf16
(the default; float16 works too) and norms, softmax and losses in float32,
with PyTorch's own op lists (registered for the tpu in torch_tpu/csrc/Autocast.cpp).
``GradScaler("tpu")`` unscales and updates its scale on the device.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["GradScaler", "autocast"]


class autocast(torch.amp.autocast_mode.autocast):  # noqa: N801 (torch's name)
    """``torch.autocast("tpu", ...)``; bf16 unless |dtype| says otherwise."""

    def __init__(
        self, enabled: bool = True, dtype: torch.dtype | None = None, cache_enabled: bool = True
    ) -> None:
        super().__init__("tpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("tpu", ...)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("tpu", *args, **kwargs)
