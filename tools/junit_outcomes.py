"""Each test's outcome in pytest's junit XML, for tools/diffusers_tests.py and tools/pytorch_tests.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Outcome:
    kind: str  # "passed", "failed", "skipped"; pytorch_tests adds "crashed" and "timeout"
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in ("failed", "crashed", "timeout")


def first_line(text: str | None, limit: int = 160) -> str:
    line = next((s.strip() for s in (text or "").splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def read_junit(path: Path, module: str, node_of: Callable[[str, str], str]) -> dict[str, Outcome]:
    """pytest's junit XML as {node id: outcome}. The classname is the test
    module's dotted path (|module|), then the class; node_of(class path with
    "::", test name) makes the node id."""
    tests: dict[str, Outcome] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        cls = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
        node = node_of(cls.replace(".", "::"), name)
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            outcome = Outcome("failed", failure.get("message") or failure.text or "")
        elif skipped is not None:
            outcome = Outcome("skipped", skipped.get("message") or "")
        else:
            outcome = Outcome("passed")
        # a test that passed and then errored in teardown is reported twice: failed wins
        if tests.get(node, Outcome("")).kind != "failed":
            tests[node] = outcome
    return tests
