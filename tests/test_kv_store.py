"""The multi-process PJRT path (issue 21): a client created as node i of n, its
key-value callbacks served from torch.distributed's store.

No plugin here spans processes, so each process loads csrc/tests/fake_kv_plugin.c
(built by `make ctest`'s rule; built here if missing), whose Client_Create does
what a multi-process plugin does with its options: it publishes its address
under "fake/node/<id>" through the put callback, reads every peer's through
get, and answers (it creates no client) with what it saw. Two processes share
one TCPStore; each must see node_id, num_nodes and the other's address.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "build" / "tests" / "fake_kv_plugin.so"

CHILD = r"""
import sys
from datetime import timedelta
import torch.distributed as dist
import torch_tpu
from torch_tpu import _C
from torch_tpu._c10d import serve_client_from_store

rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(seconds=30))
print("registered", serve_client_from_store(dist.PrefixStore("job/", store), rank, world))
try:
    _C._init()
    print("created a client")
except RuntimeError as e:
    print("error:", e)
print("again", serve_client_from_store(store, rank, world))  # the runtime has started
store.set(f"done{rank}", "1")
store.wait([f"done{r}" for r in range(world)])  # rank 0 serves the store until all are done
"""


def fake_plugin() -> Path:
    if not PLUGIN.exists():
        subprocess.run(["make", str(PLUGIN.relative_to(ROOT))], cwd=ROOT, check=True, capture_output=True)
    return PLUGIN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(world: int, **env: str) -> list[str]:
    port = free_port()
    environ = dict(os.environ, TORCH_TPU_PJRT_PLUGIN=str(fake_plugin()), TORCH_TPU_CACHE_DIR="0", **env)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(r), str(world), str(port)],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )  # fmt: skip
        for r in range(world)
    ]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a process of the job hung")
        assert p.returncode == 0, err[-3000:]
        outs.append(out)
    return outs


def test_each_node_sees_its_place_and_the_others_address_through_the_store() -> None:
    outs = run_job(2)
    for rank, out in enumerate(outs):
        assert "registered True" in out, out
        assert f"fake kv plugin: node {rank} of 2; peers: addr-0 addr-1" in out, out
        assert "again False" in out, out


def test_a_plugin_that_refuses_the_node_options_is_created_without_them() -> None:
    # the callbacks stay (the plugin says "callbacks set"); node_id/num_nodes are gone
    outs = run_job(2, FAKE_KV_REFUSE_NODE="1")
    for out in outs:
        assert "fake kv plugin: one process (node -1 of -1, callbacks set)" in out, out


def test_bad_places_are_refused() -> None:
    import torch.distributed as dist

    from torch_tpu import _C

    store = dist.HashStore()
    for node, nodes in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(RuntimeError, match="not a place in a job"):
            _C._set_distributed_client(store, node, nodes)
