"""Testing helpers for torch_tpu: tiny offline models and pipelines (:mod:`torch_tpu.testing.tiny`)."""

from __future__ import annotations

__all__ = ["tiny"]
