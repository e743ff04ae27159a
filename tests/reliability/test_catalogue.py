"""The bad-input catalogue (catalogue.py) in strict, debug and fused eager, and
under torch.compile (slow).

Cases run in child processes (several per child, to keep the run short) with a
timeout: a crash or hang fails the test and names the case it was in. Each case
records the exception type and message of the CPU and of the tpu; where the CPU
raises the tpu must raise too, and where the CPU computes the tpu must compute,
unless the case names a row of the README's "Differences from CPU" table that
covers that mode; where both compute, the values must match (dtype, shape,
values within a small tolerance). The default run takes a representative subset; the whole
matrix is marked slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.catalogue import CASES, DIFFERENCES, QUICK, VALUE_DIFFERENCES

HERE = Path(__file__).parent
MODES = ("strict", "debug", "fused")
ALL_MODES = (*MODES, "compiled")
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


def _close(a, b) -> bool:
    """Results' summaries (run_cases.summary) equal: dtype, shape and values,
    NaN equal to NaN, floats within a small tolerance (half types looser)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a["dtype"] != b["dtype"] or a["shape"] != b["shape"] or len(a["values"]) != len(b["values"]):
            return False
        half = any(t in a["dtype"] for t in ("float16", "bfloat16", "float8"))
        return all(_close_number(x, y, 1e-2 if half else 1e-5) for x, y in zip(a["values"], b["values"]))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return _close_number(a, b, 1e-5)


def _close_number(x, y, rtol: float) -> bool:
    if isinstance(x, list) and isinstance(y, list):  # complex: [re, im]
        return len(x) == len(y) and all(_close_number(p, q, rtol) for p, q in zip(x, y))
    if isinstance(x, str) or isinstance(y, str) or isinstance(x, bool) or isinstance(y, bool):
        return x == y or (x in ("nan", "-nan") and y in ("nan", "-nan"))
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return x == y or abs(x - y) <= rtol * max(abs(x), abs(y)) + 1e-30
    return x == y


def check(records: list[dict]) -> None:
    differences = {name: diff for name, _, diff in CASES}
    wrong = []
    for rec in records:
        cpu_raised, tpu_raised = rec["cpu"] is not None, rec["tpu"] is not None
        diff = differences[rec["case"]]
        documented = diff is not None and rec["mode"] in DIFFERENCES[diff]
        if cpu_raised != tpu_raised:
            if not documented:
                wrong.append(f"{rec['case']} ({rec['mode']}): cpu {rec['cpu']}, tpu {rec['tpu']}")
            continue
        # both computed: the same value, unless a documented row says otherwise
        value_documented = diff in VALUE_DIFFERENCES and rec["mode"] in VALUE_DIFFERENCES[diff]
        if not cpu_raised and not value_documented and not _close(rec["cpu_value"], rec["tpu_value"]):
            wrong.append(
                f"{rec['case']} ({rec['mode']}): a different value: cpu {str(rec['cpu_value'])[:300]}, "
                f"tpu {str(rec['tpu_value'])[:300]}"
            )
    assert not wrong, "silent or undocumented differences from CPU:\n" + "\n".join(wrong)


def batches(names: list[str]) -> list[list[str]]:
    return [names[i : i + BATCH] for i in range(0, len(names), BATCH)]


def test_catalogue_is_large_enough():
    assert len(CASES) >= 89 + 113
    assert len({name for name, _, _ in CASES}) == len(CASES)
    assert set(QUICK) <= {name for name, _, _ in CASES}
    assert all(diff is None or diff in DIFFERENCES for _, _, diff in CASES)
    assert set(VALUE_DIFFERENCES) <= set(DIFFERENCES)


@pytest.mark.parametrize("mode", MODES)
def test_quick_subset(mode):
    records = run_batch(mode, list(QUICK))
    check(records)


@pytest.mark.slow
def test_quick_subset_compiled():
    check(run_batch("compiled", list(QUICK)))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ALL_MODES)
def test_whole_catalogue(mode):
    names = [name for name, _, _ in CASES]
    records = [rec for batch in batches(names) for rec in run_batch(mode, batch)]
    check(records)
    same_type = sum(1 for r in records if r["cpu"] and r["tpu"] and r["cpu"][0] == r["tpu"][0])
    print(f"\n{mode}: {len(records)} cases; both raised the same exception type in {same_type}")
