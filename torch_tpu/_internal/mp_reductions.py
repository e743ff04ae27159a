"""A "tpu" tensor through ``torch.multiprocessing`` (queues, pipes, ``Pool``
arguments): sent through host memory, the way a CPU tensor is.

PyTorch pickles a tensor for another process with ``reduce_tensor``
(``torch.multiprocessing.reductions``): CUDA memory goes by IPC handle, any other
storage through ``_share_fd_cpu_``, which a tpu storage refuses. The refusal is
raised in the queue's feeder thread, which prints it and drops the item, so the
receiver waited forever (issue 24, defect 8). Here a tpu tensor is reduced to
its value as a CPU tensor (itself shared through a file descriptor by PyTorch's
own reducer) plus its device, and rebuilt on that device by the receiver. It is
a copy, not shared memory: an in-place change on one side is not seen on the
other (README, "Differences from CUDA"). A receiver that cannot use tpu (a
child forked after the parent started the runtime) raises at ``get``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_registered = False


def _rebuild_tpu_tensor(
    value: torch.Tensor, index: int, requires_grad: bool, as_parameter: bool
) -> torch.Tensor:
    t = value.to(torch.device("tpu", index))
    if as_parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def _wrap(original: Callable[[torch.Tensor], Any], as_parameter: bool) -> Callable[[torch.Tensor], Any]:
    def reduce(tensor: torch.Tensor) -> Any:
        if tensor.device.type != "tpu":
            return original(tensor)
        if tensor.requires_grad and not tensor.is_leaf:
            raise RuntimeError(
                "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not "
                "support crossing process boundaries.  If you just want to transfer the data, call detach() "
                "on the tensor before serializing (e.g., putting it on the queue)."
            )
        value = tensor.detach().cpu()
        return (_rebuild_tpu_tensor, (value, tensor.device.index or 0, tensor.requires_grad, as_parameter))

    reduce._tpu_wrapped = True  # type: ignore[attr-defined]
    return reduce


def register() -> None:
    """Wraps PyTorch's reducers for ``torch.Tensor`` and ``Parameter`` once."""
    global _registered
    if _registered:
        return
    _registered = True
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing.reductions as reductions

    for cls, as_parameter in ((torch.Tensor, False), (torch.nn.Parameter, True)):
        original = ForkingPickler._extra_reducers.get(cls, reductions.reduce_tensor)  # type: ignore[attr-defined]
        if getattr(original, "_tpu_wrapped", False):
            continue
        ForkingPickler.register(cls, _wrap(original, as_parameter))
