"""tools/pytorch_tests.py counts every test of PyTorch's own files honestly: a test
that kills the process or runs past the timeout is counted as such and the rest of
the file still runs; expected failures need a reason. These tests need no PyTorch
checkout: a fake test/ folder stands in for it."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture
def tool(monkeypatch):
    monkeypatch.syspath_prepend(str(TOOLS))  # the tool imports its neighbours (junit_outcomes)
    return importlib.import_module("pytorch_tests")


FAKE = """
import os, time

def test_ok():
    pass

def test_fails():
    assert 1 == 2, "one is not two"

def test_crashes():
    os.abort()

def test_after_the_crash():
    pass

def test_hangs():
    time.sleep(60)

def test_last():
    pass
"""


def test_a_crash_and_a_timeout_are_counted_and_the_file_goes_on(tool, tmp_path):
    (tmp_path / "src" / "test").mkdir(parents=True)
    (tmp_path / "src" / "test" / "test_fake.py").write_text(FAKE)
    (tmp_path / "work").mkdir()
    runner = tool.Runner(tmp_path / "src", tmp_path / "work", timeout=3.0, keyword=None)
    result = runner.run_file("test/test_fake.py")
    kinds = {node.split("::")[-1]: o.kind for node, o in result.tests.items()}
    assert kinds == {
        "test_ok": "passed",
        "test_fails": "failed",
        "test_crashes": "crashed",
        "test_after_the_crash": "passed",
        "test_hangs": "timeout",
        "test_last": "passed",
    }
    assert "one is not two" in result.tests["test_fake.py::test_fails"].message
    assert "Fatal Python error: Aborted" in result.tests["test_fake.py::test_crashes"].message
    assert not result.error


def test_expected_failures_need_a_reason_and_match_patterns(tool, tmp_path):
    listed = tmp_path / "expected.txt"
    listed.write_text("# comment\n\nt.py::TestAPRIVATEUSE1::test_x_tpu_*  a reason\n")
    entries = tool.read_expected(listed)
    assert tool.expected_reason("t.py::TestAPRIVATEUSE1::test_x_tpu_float32", entries) == "a reason"
    assert tool.expected_reason("t.py::TestAPRIVATEUSE1::test_y_tpu", entries) is None
    listed.write_text("t.py::TestAPRIVATEUSE1::test_x_tpu\n")
    with pytest.raises(SystemExit, match="needs its reason"):
        tool.read_expected(listed)


def test_the_cpu_variant_of_a_tpu_test(tool):
    assert tool.cpu_node("t.py::TestAPRIVATEUSE1::test_x_tpu_complex64_float32") == (
        "t.py::TestACPU::test_x_cpu_complex64_float32"
    )
    assert tool.cpu_node("t.py::TestATPU::test_tpu_thing_tpu") == "t.py::TestACPU::test_tpu_thing_cpu"


def test_the_checked_in_list_parses(tool):
    for pattern, reason in tool.read_expected(tool.EXPECTED):
        assert pattern.split("::")[0] in {Path(f).name for f in tool.FILES}, pattern
        assert len(reason) > 10, pattern
