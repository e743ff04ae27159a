"""torch.distributed on "tpu": the c10d backend ``"tpu"`` for the "tpu" device type.

``import torch_tpu`` (autoload does it on ``import torch``) registers it with
``Backend.register_backend("tpu", ..., devices=["tpu"])``, so that
``init_process_group()`` with no backend and ``"cpu:gloo,tpu:tpu"`` both give
tpu tensors a backend, and DDP, FSDP2, DTensor and diffusers' ``enable_parallelism``
run unchanged under ``torchrun``.

The engine is chosen by what the platform can do (docs/architecture.md,
"torch.distributed: the c10d backend"): where the PJRT client cannot span
processes (the CPU plugin), each collective is gloo's own, on host copies of
the tpu buffers (``torch_tpu/csrc/ProcessGroup.cpp``; no collective algorithm
of ours). Every collective returns an async ``Work`` whose future completes
once the results are queued on their tpu tensors.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch

BACKEND = "tpu"
_created = 0

__all__ = ["BACKEND", "host_backend", "register", "serve_client_from_store"]


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    from torch.distributed import PrefixStore, ProcessGroupGloo

    from torch_tpu import _C

    # One gloo context per group, on the group's own store prefix ("tpu/",
    # beside the "cpu/" gloo of a "cpu:gloo,tpu:tpu" group). After
    # destroy_process_group() a new group reuses the old group's name, and the
    # store still holds the old context's addresses: a peer could connect to
    # a closed socket. Every rank creates its groups in the same order, so the
    # count of backends made so far is the same on all of them.
    global _created
    _created += 1
    if _created == 1 and size > 1:
        serve_client_from_store(store, rank, size)
    gloo = ProcessGroupGloo(PrefixStore(f"gloo{_created}/", store), rank, size, timeout)
    return _C._c10d_host_backend(gloo)


def serve_client_from_store(store: Any, rank: int, world_size: int) -> bool:
    """Makes this process node ``rank`` of ``world_size`` for the PJRT client,
    with its key-value callbacks served from ``store`` (a c10d ``Store``), so
    that a plugin whose client spans processes rendezvouses through the store
    torchrun set up. The first process group does it; it takes effect only if
    the tpu runtime has not started yet (False otherwise: the client is then
    this process's alone, and collectives run on the host engine). A plugin
    that takes no ``node_id``/``num_nodes`` is created without them."""
    from torch_tpu import _C

    return bool(_C._set_distributed_client(store, rank, world_size))


def host_backend(group: Any = None) -> Any:
    """The host backend (gloo) that runs ``group``'s tpu collectives."""
    import torch.distributed as dist

    from torch_tpu import _C

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _C._c10d_host_backend_of(pg._get_backend(torch.device("tpu")))


def _undefined_backend_covers_cpu(c10d: Any) -> None:
    """``init_process_group()`` with no backend: PyTorch configures only the
    accelerator's backend. Without torch_tpu the accelerator of a CPU-only
    machine is the CPU (gloo); with it, it is "tpu". So that CPU programs keep
    working as they did (CPU tensors on gloo), the group gets both:
    exactly what ``"cpu:gloo,tpu:tpu"`` gives."""
    config = c10d.BackendConfig
    if getattr(config.__init__, "_tpu_wrapped", False):
        return
    original = config.__init__

    def __init__(self: Any, backend: Any) -> None:
        original(self, backend)
        if str(backend) == c10d.Backend.UNDEFINED and set(self.device_backend_map) == {"tpu"}:
            self.device_backend_map = {"cpu": c10d.Backend(c10d.Backend.GLOO), **self.device_backend_map}

    __init__._tpu_wrapped = True  # type: ignore[attr-defined]
    config.__init__ = __init__


def register() -> None:
    """Registers the backend (idempotent); ``import torch_tpu`` calls it."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    c10d = dist.distributed_c10d
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=["tpu"])
    _undefined_backend_covers_cpu(c10d)
