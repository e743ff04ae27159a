"""pytest plugin for tools/diffusers_tests.py: which failures need the Hub.

Loaded with ``-p diffusers_hub_offline`` (tools/ on the path). A failing test
whose exception, or any exception in its chain (``raise ... from``, or one
raised while handling another), is huggingface_hub's "not in the local cache
and the Hub cannot be reached" error needed a download from the Hugging Face
Hub, which this environment cannot make (``HF_HUB_OFFLINE=1``, no network).
The node ids of those tests and the Hub's message go, as JSON, to the file
named by ``DIFFUSERS_TESTS_HUB_LOG``. Nothing is recorded for a test that
passes, and no test's outcome is changed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator

import pytest

# huggingface_hub.errors: raised when a file is not cached and the Hub may not
# (HF_HUB_OFFLINE) or cannot be reached
OFFLINE_ERRORS = ("LocalEntryNotFoundError", "OfflineModeIsEnabled")
_needed: dict[str, str] = {}


def hub_error(exc: BaseException | None) -> str | None:
    """The message of the Hub's offline error in |exc|'s chain, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kind = type(exc)
        if kind.__module__.startswith("huggingface_hub") and kind.__name__ in OFFLINE_ERRORS:
            return f"{kind.__name__}: {exc}"
        exc = exc.__cause__ or exc.__context__
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None:
        message = hub_error(call.excinfo.value)
        if message:
            _needed[item.nodeid] = message


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("DIFFUSERS_TESTS_HUB_LOG")
    if path:
        with open(path, "w") as out:
            json.dump(_needed, out, indent=1)
