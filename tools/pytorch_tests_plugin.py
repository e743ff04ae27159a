"""pytest plugin for tools/pytorch_tests.py: a run that a crash cannot erase.

Loaded with ``-p pytorch_tests_plugin`` (tools/ on the path). It does three
things, each switched on by an environment variable the tool sets:
  - ``PYTORCH_TESTS_PROGRESS``: a file that gets a line when a test starts,
    one with its outcome when it ends, and one when the session finishes,
    each written through at once. When the process dies (a signal, an abort,
    the timeout below) pytest writes no junit XML; this log still holds the
    outcome of every test that ended, and the last test that started and did
    not end is the one that killed it;
  - ``PYTORCH_TESTS_TIMEOUT``: seconds a test may run. Past that, faulthandler
    prints every thread's stack and ends the process from its own watchdog
    thread, which works even while the main thread is stuck in native code
    (a compile). The tool counts the test as timed out and goes on;
  - ``PYTORCH_TESTS_DESELECT``: a file of node ids (one a line) not to run
    again: the tests an earlier run of the same file already finished, and
    the one that killed it.
No test's outcome is changed.
"""

from __future__ import annotations

import faulthandler
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO

import pytest

_progress: IO[str] | None = None
_outcome: dict[str, tuple[str, str]] = {}  # node id -> (outcome, first line of the message)


def _write(*fields: str) -> None:
    if _progress is not None:
        clean = (f.replace("\t", " ").replace("\n", " ") for f in fields[1:])
        _progress.write("\t".join([fields[0], f"{time.time():.3f}", *clean]) + "\n")
        _progress.flush()
        os.fsync(_progress.fileno())


def first_line(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):  # (file, line, "Skipped: why")
        return str(report.longrepr[2])
    text = getattr(report, "longreprtext", "") or ""
    # pytest's long report ends with the "E   Error: message" lines; the first of them says most
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return (errors[0] if errors else text.strip().splitlines()[-1] if text.strip() else "")[:300]


def pytest_configure(config: pytest.Config) -> None:
    global _progress
    path = os.environ.get("PYTORCH_TESTS_PROGRESS")
    if path:
        _progress = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the whole session)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get("PYTORCH_TESTS_DESELECT")
    if not path or not Path(path).is_file():
        return
    done = set(Path(path).read_text(encoding="utf-8").splitlines())
    dropped = [item for item in items if item.nodeid in done]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid not in done]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # setup, call and teardown each report; a failure in any of them fails the test
    if report.failed:
        _outcome[report.nodeid] = ("failed", first_line(report))
    elif report.skipped and _outcome.get(report.nodeid, ("",))[0] != "failed":
        _outcome[report.nodeid] = ("skipped", first_line(report))
    elif report.when == "call" and report.nodeid not in _outcome:
        _outcome[report.nodeid] = ("passed", "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    timeout = float(os.environ.get("PYTORCH_TESTS_TIMEOUT", "0") or 0)
    _write("start", item.nodeid)
    if timeout > 0:
        faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        yield
    finally:
        if timeout > 0:
            faulthandler.cancel_dump_traceback_later()
    outcome, message = _outcome.pop(item.nodeid, ("passed", ""))
    _write("end", item.nodeid, outcome, message)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _write("finished")
