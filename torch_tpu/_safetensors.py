"""``safetensors.torch.load_file(path, device="tpu")``.

safetensors parses the device name in Rust against a fixed list of PyTorch's
built-in devices, so ``device="tpu"`` is refused ("device tpu is invalid").
diffusers' group offloading to disk loads its files straight onto the onload
device that way. For a tpu device the file is read on the CPU and the tensors
are moved, which is what safetensors does for a device it knows; every other
device goes to safetensors unchanged. ``import torch_tpu`` installs this with
an import hook, so safetensors is not imported before something else imports it.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from torch_tpu._internal.import_hook import after_import

_TARGET = "safetensors.torch"


def _is_tpu(device: Any) -> bool:
    return isinstance(device, (str, torch.device)) and torch.device(device).type == "tpu"


def _install_on(module: Any) -> None:
    original = module.load_file
    if getattr(original, "_torch_tpu_wrapped", False):
        return

    @functools.wraps(original)
    def load_file(filename: Any, device: Any = "cpu") -> dict[str, torch.Tensor]:
        if _is_tpu(device):
            return {name: t.to(device) for name, t in original(filename, device="cpu").items()}
        return original(filename, device=device)

    load_file._torch_tpu_wrapped = True  # type: ignore[attr-defined]
    module.load_file = load_file


def install_lazily() -> None:
    """Called by ``import torch_tpu``: cheap, never imports safetensors."""
    after_import(_TARGET, lambda module: hasattr(module, "load_file"), _install_on)
