"""Runs catalogue cases in one mode, in this process, and prints one JSON line per
case: what the CPU did and what the tpu did (exception type and message, or
success with a summary of the result's value). ``START <case>`` goes to stderr
before each case, so that a crash or a hang names its case.

    python tests/reliability/run_cases.py MODE CASE [CASE...]
    (MODE: strict, debug, fused, compiled)

In ``compiled`` the case's code is the body of a function run through
``torch.compile(backend="tpu")`` (the CPU reference runs it eagerly); the
tpu-only cases (sharding, an eager API) run eagerly there too.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import EagerMode

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from catalogue import CASES  # noqa: E402

MODES = {
    "strict": EagerMode.DEFER_NEVER,
    "debug": EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING,
    "fused": EagerMode.DEFER_AND_FUSE,
    "compiled": EagerMode.DEFER_NEVER,
}
MAX_VALUES = 256  # elements of a result compared with the CPU's
LOW_PRECISION = (
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.bfloat16,
    torch.float16,
)


class CpuReference(RuntimeError):
    """What a tpu-only case (sharding) expects: on the CPU it stands for 'raises'."""


def tpu_only(fn: Callable[[], Any], ok: bool = False) -> Any:
    """In a case's code: runs |fn| on the tpu. The CPU reference has no such
    API, so it raises there (the tpu must raise too) or, with ok=True,
    succeeds with None (the tpu must succeed)."""
    if _device[0] == "cpu":
        if ok:
            return None
        raise CpuReference("reference: raises")
    fn()
    return None


def shard(t: torch.Tensor, spec: tuple) -> torch.Tensor:
    from torch_tpu.distributed import Mesh, mark_sharding

    n = torch.tpu.device_count()
    return mark_sharding(t, Mesh(list(range(n)), (n,), ("x",)), spec)


_device = ["cpu"]


def _number(v: Any) -> Any:
    if isinstance(v, complex):
        return [_number(v.real), _number(v.imag)]
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v


def summary(r: Any) -> Any:
    """A JSON-able picture of a result: dtype, shape and the first values."""
    if isinstance(r, torch.Tensor):
        c = r.detach().cpu()
        if c.dtype in LOW_PRECISION:  # tolist() has no float8; halves read as floats alike
            flat = c.reshape(-1)[:MAX_VALUES].float().tolist()
        else:
            flat = c.reshape(-1)[:MAX_VALUES].tolist()
        return {"dtype": str(c.dtype), "shape": list(c.shape), "values": [_number(v) for v in flat]}
    if isinstance(r, (tuple, list)):
        return [summary(v) for v in r]
    if isinstance(r, (bool, int, float, complex)):
        return _number(r)
    if r is None:
        return None
    return repr(type(r).__name__)


def _read_back(r: Any) -> None:
    if isinstance(r, torch.Tensor):
        r.cpu()
    elif isinstance(r, (tuple, list)):
        for v in r:
            _read_back(v)


def _scope(device: str) -> dict[str, Any]:
    _device[0] = device
    return {"torch": torch, "F": F, "d": device, "tpu_only": tpu_only, "shard": shard}


def _compiled(code: str, scope: dict[str, Any]) -> Any:
    if "tpu_only(" in code:  # sharding is eager API (it marks a storage): no graph to trace
        exec(code, scope)
        return scope.get("r")
    body = "\n".join("    " + line for line in code.splitlines())
    exec(f"def _case():\n    r = None\n{body}\n    return r\n", scope)
    return torch.compile(scope["_case"], backend="tpu")()


def run(code: str, device: str, mode: str | None) -> tuple[list[str] | None, Any]:
    """(None, summary of r) if |code| ran (and its result read back), else
    ([type, first line of message], None)."""
    scope = _scope(device)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode is None:
                exec(code, scope)
                r = scope.get("r")
                _read_back(r)
            else:
                with torch_tpu.eager_mode(MODES[mode]):
                    if mode == "compiled":
                        r = _compiled(code, scope)
                    else:
                        exec(code, scope)
                        r = scope.get("r")
                    _read_back(r)
                    torch.tpu.synchronize()
            return None, summary(r)
    except Exception as e:  # noqa: BLE001 - recording what was raised is the point
        lines = str(e).strip().splitlines()
        return [type(e).__name__, lines[0][:300] if lines else ""], None


def main() -> None:
    mode, names = sys.argv[1], sys.argv[2:]
    table = {name: code for name, code, _ in CASES}
    for name in names:
        print(f"START {name}", file=sys.stderr, flush=True)
        cpu, cpu_value = run(table[name], "cpu", None)
        tpu, tpu_value = run(table[name], "tpu", mode)
        record = {"case": name, "mode": mode, "cpu": cpu, "tpu": tpu}
        print(json.dumps({**record, "cpu_value": cpu_value, "tpu_value": tpu_value}), flush=True)


if __name__ == "__main__":
    main()
