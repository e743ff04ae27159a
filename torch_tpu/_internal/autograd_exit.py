"""Lets PyTorch's autograd device threads finish with their last backward before
the interpreter shuts down.

Each ``backward()`` stashes a ``contextvars`` context in the calling thread's
thread-local state (``torch.autograd.graph._engine_run_backward``); the graph
task copies it, and for a device other than the CPU the graph task runs on that
device's autograd thread, which drops the last reference to it a moment after
``backward()`` has returned. Dropping it decrefs that Python object, which takes
the GIL. If the interpreter is finalizing by then, CPython 3.11 ends the thread
inside the take, through a C++ frame that may not unwind, and the process
aborts with "terminate called without an active exception" (about 1 exit in 8
after a short training script). At exit, while the GIL can still be taken, one
tiny backward per device that was used goes through each device thread: a
thread runs one task at a time, so by the time it has finished ours it has
dropped every earlier one. Ours carries no Python object: it calls the engine
directly, without the stash. A process that never ran a backward on a device
has no such thread (PyTorch names them ``pt_autograd_<device>``) and is left
alone: the drain would compile programs at every exit.
"""

from __future__ import annotations

import atexit
import os

import torch

_registered = False


def _autograd_device_threads_started() -> bool:
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as comm:
                if comm.read().startswith("pt_autograd_"):
                    return True
    except OSError:
        return True  # cannot tell: drain to be safe
    return False


def _drain() -> None:
    if not _autograd_device_threads_started():
        return
    try:
        from torch_tpu import _C

        for index in range(_C._device_count()):
            leaf = torch.zeros((), device=torch.device("tpu", index), requires_grad=True)
            out = leaf * 1.0
            torch.autograd.Variable._execution_engine.run_backward(  # the engine itself: no TLS stash
                (out,), (torch.ones_like(out),), False, False, (), True, True
            )
    except Exception:  # noqa: BLE001 - exiting: nothing to report to, nothing to lose
        pass


def register() -> None:
    """Registers the exit hook once; called when the runtime starts."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_drain)
