"""Device spec for running diffusers' own test suite on "tpu".

diffusers' ``testing_utils`` reads ``DIFFUSERS_TEST_DEVICE_SPEC=<file>.py`` and
imports it by its name minus ``.py`` (so the file must be importable under that
name from the working directory: link it there), then takes the device name and
the backend functions below. From a diffusers checkout::

    ln -sf "$(python -c 'import torch_tpu.testing.diffusers_device_spec as s; print(s.__file__)')" tpu_spec.py
    DIFFUSERS_TEST_BACKEND=torch_tpu DIFFUSERS_TEST_DEVICE=tpu DIFFUSERS_TEST_DEVICE_SPEC=tpu_spec.py \\
    HF_HUB_OFFLINE=1 python -m pytest tests/models/transformers/test_models_transformer_flux.py

Every name but ``DEVICE_NAME`` is optional to diffusers; all are given here.
"""

from __future__ import annotations

import torch

import torch_tpu  # noqa: F401  (registers "tpu" and torch.tpu)

__all__ = [
    "DEVICE_COUNT_FN",
    "DEVICE_NAME",
    "EMPTY_CACHE_FN",
    "MANUAL_SEED_FN",
    "MAX_MEMORY_ALLOCATED_FN",
    "RESET_MAX_MEMORY_ALLOCATED_FN",
    "RESET_PEAK_MEMORY_STATS_FN",
    "SUPPORTS_TRAINING",
]

DEVICE_NAME = "tpu"

# torch.manual_seed seeds the CPU and every device generator, tpu included:
# diffusers' tests draw their inputs on the CPU and move them.
MANUAL_SEED_FN = torch.manual_seed


def _empty_cache() -> None:
    """Nothing to release: freed tensors give their PJRT buffers back at once
    (the compiled-program cache is not memory the tests measure)."""


EMPTY_CACHE_FN = _empty_cache
DEVICE_COUNT_FN = torch.tpu.device_count
SUPPORTS_TRAINING = True  # autograd runs on tpu (tests/test_training.py)
RESET_PEAK_MEMORY_STATS_FN = torch.tpu.reset_peak_memory_stats
RESET_MAX_MEMORY_ALLOCATED_FN = torch.tpu.reset_peak_memory_stats
MAX_MEMORY_ALLOCATED_FN = torch.tpu.max_memory_allocated
