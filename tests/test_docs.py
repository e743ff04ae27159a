"""The design document stays a design and stays true: docs/architecture.md
keeps its size, the files it names exist, and the numbers it states are the
code's (counts come from the code here, never from the text)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "architecture.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
# The lead folds other branches' design notes in; this is the hard limit.
MAX_LINES = 650


def _lint_tool():
    spec = importlib.util.spec_from_file_location("lint_conventions", ROOT / "tools" / "lint_conventions.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _docs() -> list[Path]:
    return [DESIGN, PERFORMANCE]


def test_design_document_size():
    n = len(DESIGN.read_text().splitlines())
    assert n <= MAX_LINES, (
        f"docs/architecture.md has {n} lines (at most {MAX_LINES}); measurements go to performance.md"
    )


def test_measurements_are_dated():
    text = PERFORMANCE.read_text()
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert sections
    for title in sections:
        assert re.search(r"\b20\d\d-\d\d(-\d\d)?\b", title), f"performance.md section without a date: {title}"


# A path in backquotes: csrc/..., torch_tpu/..., room-relative (lower/x.c) or a glue file (Kernel.cpp).
PATH = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:c|h|cpp|py|md|txt|def|toml))(?::\w+)?`")
SEARCH = ("", "csrc", "torch_tpu/csrc", "torch_tpu", "tests", "docs")


def _exists(path: str) -> bool:
    if any((ROOT / base / path).exists() for base in SEARCH):
        return True
    # a bare name, as a room's table writes it: any room of the core or the glue
    return "/" not in path and any(ROOT.glob(f"csrc/*/{path}"))


def _sources(*patterns: str) -> str:
    """The text of the repository files matching |patterns|, joined."""
    return "\n".join(p.read_text(errors="replace") for pattern in patterns for p in ROOT.glob(pattern))


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.name)
def test_named_files_exist(doc):
    missing = sorted({m for m in PATH.findall(doc.read_text()) if "<" not in m and not _exists(m)})
    # DESIGN.md is the founding design, kept outside the repository (the document says so)
    missing = [m for m in missing if m != "DESIGN.md"]
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


def test_named_consume_functions_exist():
    sources = _sources("csrc/*/*.[ch]", "torch_tpu/csrc/*.cpp", "torch_tpu/csrc/*.h")
    names = set(re.findall(r"`(\w+_consume\w*)`", DESIGN.read_text()))
    assert names
    missing = sorted(n for n in names if not re.search(r"\b" + n + r"\s*\(", sources))
    assert not missing, f"architecture.md names _consume functions that do not exist: {missing}"


def test_named_core_identifiers_exist():
    """A function, type or macro of the core that the design names is in the code."""
    sources = _sources("csrc/*/*.[ch]", "torch_tpu/csrc/*.cpp", "torch_tpu/**/*.py")
    known = set(re.findall(r"\b\w+\b", sources))
    prefixes = r"(?:tpurt|pjrt|lower|ir|graph|storage|spmd|cache|engine|view|TPURT|LOWER)_"
    names = set(re.findall(r"`(" + prefixes + r"\w+)`", DESIGN.read_text()))
    assert len(names) > 50
    missing = sorted(n for n in names if n not in known)
    assert not missing, f"architecture.md names identifiers the code does not have: {missing}"


def test_row_counts_stated_are_the_tables():
    lint = _lint_tool()
    rows = len(lint.table_rows(lint.load(ROOT)))
    assert rows > 0
    # performance.md's rows are query rows of attention blocks, not table rows
    for m in re.finditer(r"\b(?:about |around )?(\d[\d,]*) (?:op-table |table )?rows\b", DESIGN.read_text()):
        stated = int(m.group(1).replace(",", ""))
        assert stated == rows, f"architecture.md says {m.group(0)!r}; the op tables have {rows} rows"


def _log_size() -> int:
    m = re.search(r"^#define LOG_SIZE (\d+)", (ROOT / "csrc/pjrt/execute.c").read_text(), re.MULTILINE)
    assert m, "LOG_SIZE not found in csrc/pjrt/execute.c"
    return int(m.group(1))


def test_launch_log_size_stated_is_the_code():
    size = _log_size()
    design = DESIGN.read_text()
    stated = re.findall(r"ring log of ([\d,]+) records", design)
    assert stated, "architecture.md no longer states the launch log's size"
    assert all(int(s.replace(",", "")) == size for s in stated), (stated, size)
    header = (ROOT / "csrc/include/tpurt.h").read_text()
    kept = re.findall(r"keeps the latest ([\d,]+)", header)
    assert kept and all(int(s.replace(",", "")) == size for s in kept), (kept, size)


def test_sources_name_no_missing_rule_files_or_research_notes():
    """Comments and docstrings point at files that exist (a rule file that was
    split, the research notes that live outside the repository)."""
    c_files = {p.name for p in ROOT.glob("csrc/*/*.[ch]")}
    bad = []
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("csrc/*/*.[ch]"), *ROOT.glob("torch_tpu/**/*.py")]
    for path in files:
        if path.name in ("test_docs.py", "test_lint.py"):
            continue
        text = path.read_text(errors="replace")
        for m in re.finditer(r"\bcsrc/\w+/(\w+\.[ch])\b", text):
            if m.group(1) not in c_files:
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
        if path.suffix == ".py":
            for m in re.finditer(r"\(([a-z_]+\.c)\b", text):
                if m.group(1) not in c_files:
                    bad.append(f"{path.relative_to(ROOT)}: {m.group(1)}")
        for m in re.finditer(r"\bresearch/[\w./-]+\.md\b", text):
            if not (ROOT / m.group(0)).exists():
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not bad, bad
