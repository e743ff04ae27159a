"""The bad-input catalogue (catalogue.py) in strict, debug and fused eager.

Cases run in child processes (several per child, to keep the run short) with a
timeout: a crash or hang fails the test and names the case it was in. Each case
records the exception type and message of the CPU and of the tpu; where the CPU
raises the tpu must raise too, and where the CPU computes the tpu must compute,
unless the case names a row of the README's "Differences from CPU" table that
covers that mode. The default run takes a representative subset; the whole
matrix is marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.catalogue import CASES, DIFFERENCES, QUICK

HERE = Path(__file__).parent
MODES = ("strict", "debug", "fused")
BATCH = 12  # cases per child process
TIMEOUT_S = 240


def run_batch(mode: str, names: list[str]) -> list[dict]:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR="0")
    try:
        proc = subprocess.run(
            [sys.executable, str(HERE / "run_cases.py"), mode, *names],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        started = [line[6:] for line in err.splitlines() if line.startswith("START ")]
        pytest.fail(f"{mode}: hung (over {TIMEOUT_S} s) in case {started[-1] if started else '?'}")
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(records) != len(names):
        started = [line[6:] for line in proc.stderr.splitlines() if line.startswith("START ")]
        pytest.fail(
            f"{mode}: the child exited with {proc.returncode} in case {started[-1] if started else '?'}:\n"
            + proc.stderr[-3000:]
        )
    return records


def check(records: list[dict]) -> None:
    differences = {name: diff for name, _, diff in CASES}
    wrong = []
    for rec in records:
        cpu_raised, tpu_raised = rec["cpu"] is not None, rec["tpu"] is not None
        if cpu_raised == tpu_raised:
            continue
        diff = differences[rec["case"]]
        if diff is not None and rec["mode"] in DIFFERENCES[diff]:
            continue
        wrong.append(f"{rec['case']} ({rec['mode']}): cpu {rec['cpu']}, tpu {rec['tpu']}")
    assert not wrong, "silent or undocumented differences from CPU:\n" + "\n".join(wrong)


def batches(names: list[str]) -> list[list[str]]:
    return [names[i : i + BATCH] for i in range(0, len(names), BATCH)]


def test_catalogue_is_large_enough():
    assert len(CASES) >= 60
    assert len({name for name, _, _ in CASES}) == len(CASES)
    assert set(QUICK) <= {name for name, _, _ in CASES}
    assert all(diff is None or diff in DIFFERENCES for _, _, diff in CASES)


@pytest.mark.parametrize("mode", MODES)
def test_quick_subset(mode):
    records = run_batch(mode, list(QUICK))
    check(records)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_whole_catalogue(mode):
    names = [name for name, _, _ in CASES]
    records = [rec for batch in batches(names) for rec in run_batch(mode, batch)]
    check(records)
    same_type = sum(1 for r in records if r["cpu"] and r["tpu"] and r["cpu"][0] == r["tpu"][0])
    print(f"\n{mode}: {len(records)} cases; both raised the same exception type in {same_type}")
