"""tools/diffusers_tests.py sorts diffusers' test failures honestly: only a
failure that needs the (offline) Hub, or that fails on plain CPU too, is left
out of the share, and each is listed with its reason. These tests need no
diffusers checkout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def load(name: str):
    if str(TOOLS) not in sys.path:  # the tools import their shared junit_outcomes
        sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_hub_error_follows_the_exception_chain():
    errors = pytest.importorskip("huggingface_hub.errors")
    plugin = load("diffusers_hub_offline")
    try:
        try:
            raise errors.LocalEntryNotFoundError("not cached and offline")
        except errors.LocalEntryNotFoundError as e:
            raise OSError(
                "fusing/autoencoder-kl-dummy does not appear to have a file named config.json"
            ) from e
    except OSError as e:
        wrapped = e
    assert plugin.hub_error(wrapped) == "LocalEntryNotFoundError: not cached and offline"
    # an error of the same name from elsewhere is not the Hub's
    other = type("LocalEntryNotFoundError", (Exception,), {})("x")
    assert plugin.hub_error(other) is None
    assert plugin.hub_error(RuntimeError("aten::foo: no tpu lowering")) is None
    assert plugin.hub_error(None) is None


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.models.m.test_x.TestA" name="test_ok" time="0.1"/>
<testcase classname="tests.models.m.test_x.TestA" name="test_hub" time="0.1">
  <failure message="OSError: no config.json">trace</failure></testcase>
<testcase classname="tests.models.m.test_x.TestA" name="test_cpu_too" time="0.1">
  <failure message="ImportError: no package">trace</failure></testcase>
<testcase classname="tests.models.m.test_x.TestA" name="test_tpu[p0]" time="0.1">
  <failure message="RuntimeError: tpu bug">trace</failure></testcase>
<testcase classname="tests.models.m.test_x.TestA" name="test_teardown" time="0.1"/>
<testcase classname="tests.models.m.test_x.TestA" name="test_teardown" time="0.1">
  <error message="teardown failed">trace</error></testcase>
<testcase classname="tests.models.m.test_x" name="test_module_level" time="0.1">
  <skipped type="pytest.skip" message="requires CUDA">skip</skipped></testcase>
</testsuite></testsuites>
"""


def test_failures_are_sorted_and_none_is_dropped(tmp_path):
    tool = load("diffusers_tests")
    src, rel = tmp_path / "diffusers", "tests/models/m/test_x.py"
    (tmp_path / "tpu.xml").write_text(JUNIT)
    tests = tool.read_junit(tmp_path / "tpu.xml", src, rel)
    node = f"{src / rel}::TestA::"
    assert tests[node + "test_ok"].kind == "passed"
    assert tests[node + "test_tpu[p0]"].message == "RuntimeError: tpu bug"
    assert tests[node + "test_teardown"].kind == "failed"  # a teardown error is a failure
    assert tests[f"{src / rel}::test_module_level"].kind == "skipped"

    result = tool.FileResult(rel, tests=tests)
    result.hub = {node + "test_hub": "LocalEntryNotFoundError: offline"}
    result.on_cpu = {
        node + "test_cpu_too": tool.Outcome("failed", "ImportError: no package"),
        node + "test_tpu[p0]": tool.Outcome("passed"),
        node + "test_teardown": tool.Outcome("skipped", "requires a hardware accelerator"),
    }
    env = result.environment()
    assert sorted(env) == [node + "test_cpu_too", node + "test_hub"]
    assert env[node + "test_hub"].startswith("needs the Hub")
    assert env[node + "test_cpu_too"].startswith("fails on CPU too")
    # passing or skipping on CPU leaves it a tpu failure
    assert sorted(result.tpu_failures()) == [node + "test_teardown", node + "test_tpu[p0]"]
    assert (result.count("passed"), result.count("skipped")) == (1, 1)
