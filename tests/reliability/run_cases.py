"""Runs catalogue cases in one mode, in this process, and prints one JSON line per
case: what the CPU did and what the tpu did (exception type and message, or
success). ``START <case>`` goes to stderr before each case, so that a crash or a
hang names its case.

    python tests/reliability/run_cases.py MODE CASE [CASE...]   (MODE: strict, debug, fused)
"""

from __future__ import annotations

import json
import sys
import warnings
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
}


def _read_back(r: Any) -> None:
    if isinstance(r, torch.Tensor):
        r.cpu()
    elif isinstance(r, (tuple, list)):
        for v in r:
            _read_back(v)


def run(code: str, device: str, mode: str | None) -> list[str] | None:
    """None if |code| ran (and its result read back), else [type, first line of message]."""
    scope: dict[str, Any] = {"torch": torch, "F": F, "d": device}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode is None:
                exec(code, scope)
                _read_back(scope.get("r"))
            else:
                with torch_tpu.eager_mode(MODES[mode]):
                    exec(code, scope)
                    _read_back(scope.get("r"))
                    torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001 - recording what was raised is the point
        lines = str(e).strip().splitlines()
        return [type(e).__name__, lines[0][:300] if lines else ""]
    return None


def main() -> None:
    mode, names = sys.argv[1], sys.argv[2:]
    table = {name: code for name, code, _ in CASES}
    for name in names:
        print(f"START {name}", file=sys.stderr, flush=True)
        cpu = run(table[name], "cpu", None)
        tpu = run(table[name], "tpu", mode)
        print(json.dumps({"case": name, "mode": mode, "cpu": cpu, "tpu": tpu}), flush=True)


if __name__ == "__main__":
    main()
