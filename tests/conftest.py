"""Shared pytest fixtures: every test starts with fresh metrics and checks
that nothing it ran on "tpu" fell back to the CPU unless it says so."""

from __future__ import annotations

import os

# Tests count compiles: keep them off the user's persistent cache (tests of
# the cache itself set their own directory in child processes).
os.environ.setdefault("TORCH_TPU_CACHE_DIR", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: E402


def devices_env(n: int) -> dict[str, str]:
    """Environment for a child process that needs |n| devices, or a skip.

    The CPU plugin makes as many devices as asked (TORCH_TPU_NUM_DEVICES);
    another plugin (libtpu, CUDA) has the devices it has, so a test that needs
    more skips with the reason instead of failing."""
    info = torch_tpu._C._runtime_info()
    if info["platform_name"] == "cpu":
        return {"TORCH_TPU_NUM_DEVICES": str(n)}
    if info["device_count"] < n:
        pytest.skip(f"needs {n} devices; the {info['platform_name']} plugin has {info['device_count']}")
    return {}


@pytest.fixture
def no_fallback():
    """Asserts that the test body took no CPU fallback."""
    torch_tpu.reset_metrics()
    yield
    fallbacks = torch_tpu.metrics()["cpu_fallbacks"]
    assert fallbacks == {}, f"ops fell back to the CPU: {fallbacks}"


@pytest.fixture
def tpu_env(monkeypatch):
    """Sets TORCH_TPU_* variables for one test: tpu_env(name, value). The core
    reads its configuration once, so it is read again after each change and
    after the test has put the environment back."""

    def set_env(name: str, value: str) -> None:
        monkeypatch.setenv(name, value)
        torch_tpu._C._config_reload_for_test()

    yield set_env
    monkeypatch.undo()
    torch_tpu._C._config_reload_for_test()


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.to("tpu")
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


TOL = {
    torch.float32: dict(rtol=1.3e-6 * 10, atol=1e-5),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
}


def assert_same(actual, expected, **kw):
    """Compares a tpu result (moved back to CPU) with the CPU result:
    same dtype and shape, values within the dtype's tolerance."""
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, **kw)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.device.type == "tpu", f"result is on {actual.device}, not tpu"
    actual = actual.cpu()
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    tol = dict(TOL.get(expected.dtype, dict(rtol=0, atol=0)))
    tol.update(kw)
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol)


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001
    """Under a shadow target (TORCH_TPU_TARGET), print the target report of the whole session and,
    if TORCH_TPU_TARGET_REPORT names a file, write the records there as JSON."""
    if torch_tpu.get_target() is None:
        return
    import json

    torch.tpu.synchronize()
    report = torch_tpu.target_report()
    ran = [p for p in report.programs if p["runs"] > 0 or p["error"]]
    ok = sum(1 for p in ran if p["error"] is None)
    share = 100.0 * ok / len(ran) if ran else 100.0
    print(f"\n{report}\n  programs that ran here: {ok}/{len(ran)} compile for the target ({share:.2f}%)")
    path = os.environ.get("TORCH_TPU_TARGET_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"target": report.target, "programs": report.programs}, f, default=str)


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    """Under xdist (`make pytest`) a file goes whole to one worker, in collection order. The
    OpInfo suite is a fifth of the run: started last it would finish alone, so it starts first."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.path.name != "test_opinfo.py")  # stable: the rest keep their order
