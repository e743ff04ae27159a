"""Soak (slow): 10,000 mixed strict-eager ops, 10,000 fused-eager ops and 500
compiled calls in one child process. After a warm-up, RSS may not grow by 1 MB
or more and live device buffers return to their baseline. The numbers are
printed (pytest -s) for the record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SOAK = r"""
import gc, json, torch, torch_tpu
from torch_tpu import EagerMode, TpuBackend

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"): return int(line.split()[1])

torch.manual_seed(0)
x = torch.randn(32, 32).to("tpu")
w = torch.randn(32, 32).to("tpu")
idx = torch.tensor([0, 3, 5]).to("tpu")

def ten_ops(i):  # ten ops of different kinds
    y = x @ w
    y = y.relu()
    y = y * (0.5 + i % 3)
    y = y + x
    y = torch.softmax(y, dim=-1)
    y = y.index_select(0, idx)
    y = y.sum(dim=0)
    y = torch.where(y > 0.1, y, torch.zeros_like(y))
    y = y.to(torch.bfloat16).float()
    return y.mean()

def phase(name, n_ops, body, warm_ops):
    for i in range(warm_ops // 10):
        body(i)
    torch.tpu.synchronize(); gc.collect()
    buffers0, rss0 = torch_tpu.metrics()["live_buffers"], rss_kb()
    for i in range(n_ops // 10):
        body(i)
    torch.tpu.synchronize(); gc.collect()
    m = torch_tpu.metrics()
    return {"phase": name, "ops": n_ops, "rss_growth_kb": rss_kb() - rss0,
            "live_buffers_before": buffers0, "live_buffers_after": m["live_buffers"]}

def strict(i):
    v = ten_ops(i)
    if i % 100 == 0: v.item()

def fused(i):
    with torch_tpu.eager_mode(EagerMode.DEFER_AND_FUSE):
        v = ten_ops(i)
        v.cpu()

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to("tpu")
compiled = torch.compile(model, backend=TpuBackend(), dynamic=False)

def compiled_call(i):  # one call per "ten ops" slot: 500 calls for 5,000 "ops"
    with torch.no_grad():
        out = compiled(x)
    if i % 50 == 0: out.cpu()

results = [
    phase("strict", 10000, strict, 1000),
    phase("fused", 10000, fused, 1000),
    phase("compiled", 5000, compiled_call, 500),
]
results[2]["calls"] = 500
print(json.dumps(results))
"""


@pytest.mark.slow
def test_soak_rss_and_buffers_stay_flat():
    env = dict(os.environ, TORCH_TPU_CACHE_DIR="0")
    proc = subprocess.run([sys.executable, "-c", SOAK], env=env, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for r in results:
        print(f"\n{json.dumps(r)}")
    for r in results:
        assert r["rss_growth_kb"] < 1024, r
        assert r["live_buffers_after"] <= r["live_buffers_before"], r
