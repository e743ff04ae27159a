"""One rank of tests/test_distributed.py's failure checks (launched without
torchrun, so that a dead or missing rank is not restarted). Prints
``ERROR <type>: <message>`` and exits 3 when a collective or the init raises.

Usage: RANK=r WORLD_SIZE=n MASTER_ADDR=... MASTER_PORT=... python _dist_fail.py MODE
MODE: mismatch (ranks pass different shapes), kill (rank 1 dies after init),
missing (the others never start).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401


def main() -> None:
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    try:
        dist.init_process_group("cpu:gloo,tpu:tpu", timeout=timedelta(seconds=10))
        if mode == "kill" and rank == 1:
            os._exit(9)  # a crash: no destroy, no goodbye
        n = 4 + (rank if mode == "mismatch" else 0)
        t = torch.ones(n, device="tpu")
        dist.all_reduce(t)
        t.cpu()
        dist.barrier()
    except Exception as e:  # noqa: BLE001 - the message is the finding
        print(f"ERROR {type(e).__name__}: {str(e)[:400]}", flush=True)
        os._exit(3)
    print("OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
