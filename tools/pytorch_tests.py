"""Run PyTorch's own device-generic tests on "tpu" with the CPU fallback off.

    python tools/pytorch_tests.py /path/to/pytorch [-k EXPR] [--timeout S] [test files...]

The test files (test/test_indexing.py and the others in FILES) are PyTorch's,
unmodified: ``instantiate_device_type_tests`` makes their PrivateUse1 variants
(classes ``...PRIVATEUSE1``) because torch_tpu registers the "tpu" backend,
and PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1 keeps only those. They run
with TORCH_TPU_CPU_FALLBACK=0: an op without a native rule is an error, never
a silent CPU fallback. torch.testing._internal comes from the installed torch.
The checkout is read, never written; pytest runs from build/pytorch-tests,
with our own empty pytest.ini and without the checkout's conftest.py.

A test that kills the process (a crash) or runs past --timeout seconds is
counted as such, and the file goes on from the next test: the plugin
tools/pytorch_tests_plugin.py logs each test as it starts and ends, and a
killed run is started again without the tests already done.

Every failure is run again on plain CPU PyTorch (the same test, instantiated
for CPU; torch_tpu not loaded); one that fails there too is marked so. The
checked-in list tools/pytorch_tests_expected.txt names the failures expected
on tpu, each with its reason. The tool prints passed/failed/skipped per file,
every failure with its error, and the share of non-skipped tests that pass
(every failure, expected or not, crash and timeout counted against it). It
exits 0 when every failure is an expected one.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.metadata
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import junit_outcomes
from junit_outcomes import Outcome, first_line

ROOT = Path(__file__).resolve().parent.parent
FILES = [
    "test/test_indexing.py",
    "test/test_view_ops.py",
    "test/test_shape_ops.py",
    "test/test_sort_and_select.py",
]
EXPECTED = ROOT / "tools" / "pytorch_tests_expected.txt"
# instantiate_device_type_tests names our variants' classes TestFooPRIVATEUSE1 (TestFooTPU once
# the base class has met the backend's name) and their tests test_bar_tpu[_dtype]
CLASS_SUFFIX = re.compile(r"(PRIVATEUSE1|TPU)$")
TEST_DEVICE = re.compile(r"_tpu(?=_|$)")  # the last one: the device, then only dtypes


@dataclass
class FileResult:
    rel: str
    tests: dict[str, Outcome] = field(default_factory=dict)  # node id -> outcome on tpu
    on_cpu: dict[str, Outcome] = field(default_factory=dict)  # tpu failures, run on CPU
    error: str = ""  # pytest did not report at all (a collection error, a crash outside a test)

    def count(self, *kinds: str) -> int:
        return sum(o.kind in kinds for o in self.tests.values())

    def failures(self) -> list[str]:
        return [t for t, o in self.tests.items() if o.failed]


def read_expected(path: Path) -> list[tuple[str, str]]:
    """The expected-failures list: (node id pattern, reason) per line. A line is
    a node id (fnmatch wildcards allowed), two or more spaces, then the reason."""
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = re.split(r"\s{2,}|\t", line, maxsplit=1)
        if len(parts) < 2 or not parts[1].strip():
            raise SystemExit(f"{path}:{number}: an expected failure needs its reason: {line}")
        entries.append((parts[0], parts[1].strip()))
    return entries


def expected_reason(node: str, entries: list[tuple[str, str]]) -> str | None:
    return next((reason for pattern, reason in entries if fnmatch.fnmatchcase(node, pattern)), None)


def read_junit(path: Path, rel: str) -> dict[str, Outcome]:
    """pytest's junit XML as {node id: outcome}, node ids relative to the
    checkout's test/ folder, as pytest names them."""
    name = Path(rel).name
    return junit_outcomes.read_junit(
        path, Path(rel).stem, lambda cls, test: "::".join([name, *([cls] if cls else []), test])
    )


@dataclass
class Progress:
    """What the plugin logged for one run of pytest."""

    ended: dict[str, Outcome] = field(default_factory=dict)
    running: tuple[str, float] | None = None  # the test that started and did not end
    finished: bool = False


def read_progress(text: str) -> Progress:
    progress = Progress()
    for line in text.splitlines():
        fields = line.split("\t")
        if fields[0] == "start" and len(fields) >= 3:
            progress.running = (fields[2], float(fields[1]))
        elif fields[0] == "end" and len(fields) >= 4:
            progress.ended[fields[2]] = Outcome(fields[3], fields[4] if len(fields) > 4 else "")
            progress.running = None
        elif fields[0] == "finished":
            progress.finished = True
    return progress


def death_note(log: str) -> str:
    """The line of a dead run's log that says how it died (faulthandler's, the C runtime's)."""
    for pattern in ("Fatal Python error", "Timeout (", "Segmentation fault", "Aborted", "terminate called"):
        found = [line.strip() for line in log.splitlines() if pattern in line]
        if found:
            return found[0]
    return ""


class Runner:
    def __init__(self, src: Path, work: Path, timeout: float, keyword: str | None) -> None:
        self.src, self.work, self.timeout, self.keyword = src, work, timeout, keyword
        (work / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # not the checkout's
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_TEST", "TORCH_TPU_CPU"))}
        tools = os.pathsep.join(p for p in (str(ROOT / "tools"), base.get("PYTHONPATH", "")) if p)
        base["PYTHONPATH"] = tools
        self.tpu_env = dict(base, PYTORCH_TESTING_DEVICE_ONLY_FOR="privateuse1", TORCH_TPU_CPU_FALLBACK="0")
        # plain CPU PyTorch: torch_tpu is not autoloaded
        self.cpu_env = dict(base, PYTORCH_TESTING_DEVICE_ONLY_FOR="cpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0")

    def pytest(
        self, targets: list[str], env: dict[str, str], tag: str, keyword: str | None
    ) -> tuple[int, str]:
        """One pytest run; returns (exit status, its log)."""
        junit, log = self.work / f"{tag}.xml", self.work / f"{tag}.log"
        junit.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest"]
        cmd += ["-c", str(self.work / "pytest.ini"), "--rootdir", str(self.src / "test")]
        cmd += ["-p", "pytorch_tests_plugin", "--junitxml", str(junit), *(["-k", keyword] if keyword else [])]
        shown = " ".join(cmd + targets[:1]) + (f" ... ({len(targets)} tests)" if len(targets) > 1 else "")
        print("+", shown, flush=True)
        with log.open("w") as out:
            done = subprocess.run(
                [*cmd, *targets], cwd=self.work, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        text = log.read_text(errors="replace")
        lines = text.strip().splitlines()
        print(f"  {lines[-1] if lines else '(no output)'}   [exit {done.returncode}; log: {log}]", flush=True)
        return done.returncode, text

    def run_file(self, rel: str) -> FileResult:
        """Runs one test file on tpu until every test has an outcome, however
        many times a test kills the process."""
        result, stem = FileResult(rel), Path(rel).stem
        progress_path, deselect = self.work / f"{stem}.progress", self.work / f"{stem}.deselect"
        for path in (progress_path, deselect):
            path.unlink(missing_ok=True)
        done: list[str] = []
        for attempt in range(1000):  # bounded: each pass but the last removes one test
            env = dict(
                self.tpu_env,
                PYTORCH_TESTS_PROGRESS=str(progress_path),
                PYTORCH_TESTS_TIMEOUT=str(self.timeout),
                PYTORCH_TESTS_DESELECT=str(deselect),
            )
            tag = f"{stem}.tpu" if attempt == 0 else f"{stem}.tpu.{attempt}"
            progress_path.unlink(missing_ok=True)
            status, log = self.pytest([str(self.src / rel)], env, tag, self.keyword)
            progress = read_progress(progress_path.read_text() if progress_path.is_file() else "")
            junit = self.work / f"{tag}.xml"
            if progress.finished and junit.is_file():
                result.tests.update(read_junit(junit, rel))
                return result
            # pytest died: its junit XML was never written, the progress log holds what ended
            result.tests.update(progress.ended)
            done += list(progress.ended)
            if progress.running is None:
                result.error = (
                    f"pytest exited {status} outside any test: {death_note(log) or first_line(log)}"
                )
                return result
            node, started = progress.running
            elapsed = time.time() - started
            if self.timeout > 0 and elapsed >= 0.95 * self.timeout:
                result.tests[node] = Outcome("timeout", f"ran past {self.timeout:.0f} s; killed")
            else:
                how = death_note(log) or f"exit status {status}"
                result.tests[node] = Outcome("crashed", f"killed the process: {how}")
            print(f"  {result.tests[node].kind}: {node}; going on with the rest of the file", flush=True)
            done.append(node)
            deselect.write_text("\n".join(done) + "\n", encoding="utf-8")
        result.error = "gave up after 1000 restarts"
        return result

    def check_on_cpu(self, result: FileResult) -> None:
        """Runs |result|'s tpu failures again on plain CPU PyTorch."""
        failures = result.failures()
        if not failures:
            return
        stem = Path(result.rel).stem
        on_cpu = {cpu_node(t): t for t in failures}
        env = dict(self.cpu_env, PYTORCH_TESTS_TIMEOUT=str(self.timeout))
        targets = [f"{self.src / 'test' / n}" for n in on_cpu]
        _, _ = self.pytest(targets, env, f"{stem}.cpu", None)
        junit = self.work / f"{stem}.cpu.xml"
        if junit.is_file():
            for node, outcome in read_junit(junit, result.rel).items():
                if node in on_cpu:
                    result.on_cpu[on_cpu[node]] = outcome


def cpu_node(node: str) -> str:
    """The CPU variant of a tpu test: class TestFooPRIVATEUSE1 -> TestFooCPU,
    test_bar_tpu_float32 -> test_bar_cpu_float32."""
    parts = node.split("::")
    parts[1:-1] = [CLASS_SUFFIX.sub("CPU", p) for p in parts[1:-1]]
    found = list(TEST_DEVICE.finditer(parts[-1]))
    if found:
        parts[-1] = parts[-1][: found[-1].start()] + "_cpu" + parts[-1][found[-1].end() :]
    return "::".join(parts)


def row_text(name: str, cells: Sequence[object]) -> str:
    return f"{name:<32}" + "".join(f" {c!s:>9}" for c in cells)


def report(results: list[FileResult], expected: list[tuple[str, str]]) -> int:
    unexpected = 0
    print("\nFailures on tpu (fallback off): the error, the outcome on CPU, the reason if expected")
    listed = False
    for result in results:
        if result.error:
            listed, unexpected = True, unexpected + 1
            print(f"  {result.rel}: {result.error}")
        for node in result.failures():
            listed = True
            outcome, reason = result.tests[node], expected_reason(node, expected)
            cpu = result.on_cpu.get(node)
            on_cpu = "not run on CPU" if cpu is None else f"{cpu.kind} on CPU"
            mark = "expected" if reason else "UNEXPECTED"
            unexpected += reason is None
            print(f"  [{mark}] {node}  [{outcome.kind}; {on_cpu}]")
            print(f"      tpu: {first_line(outcome.message)}")
            if reason:
                print(f"      why: {reason}")
    if not listed:
        print("  (none)")

    stale = [
        (pattern, reason)
        for pattern, reason in expected
        if not any(
            fnmatch.fnmatchcase(node, pattern) and o.failed for r in results for node, o in r.tests.items()
        )
        and any(fnmatch.fnmatchcase(node, pattern) for r in results for node in r.tests)
    ]
    if stale:
        print("\nExpected failures that no longer fail (remove them from the list):")
        for pattern, _ in stale:
            print(f"  {pattern}")

    columns = ("passed", "failed", "expected", "crashed", "timeout", "skipped")
    print("\n" + row_text("file", columns))
    total = [0] * 6
    for result in results:
        failures = result.failures()
        row = [
            result.count("passed"),
            len(failures) + (1 if result.error else 0),  # a file that never reported is a failure
            sum(expected_reason(t, expected) is not None for t in failures),
            result.count("crashed"),
            result.count("timeout"),
            result.count("skipped"),
        ]
        total = [a + b for a, b in zip(total, row)]
        print(row_text(Path(result.rel).name, row))
    print(row_text("total", total))
    passed, failed = total[0], total[1]
    cpu_too = sum(o.failed for r in results for o in r.on_cpu.values())
    print("(failed counts every failure, crash and timeout; expected: those in the list, with a reason)")
    print(
        f"\n{100.0 * passed / max(1, passed + failed):.1f}% of the non-skipped tests pass on tpu with the"
        f" CPU fallback off ({passed} of {passed + failed}); {failed - total[2]} failures are not in the"
        f" expected list; {cpu_too} of the failures fail on plain CPU PyTorch too"
    )
    return 0 if unexpected == 0 else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", type=Path, help="a PyTorch checkout (only its test/ folder is read)")
    parser.add_argument("files", nargs="*", default=FILES, help="test files relative to the checkout")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k selection")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one test may run (default 300)")
    parser.add_argument("--expected", type=Path, default=EXPECTED, help="the expected-failures list")
    parser.add_argument(
        "--no-cpu-check", action="store_true", help="do not run the tpu failures again on CPU"
    )
    args = parser.parse_args()
    src: Path = args.src.resolve()
    missing = [f for f in args.files if not (src / f).is_file()]
    if missing:
        print(
            f"pytorch-tests: {src} lacks {', '.join(missing)} (a PyTorch checkout's test files)",
            file=sys.stderr,
        )
        return 2
    print(f"pytorch-tests: torch {importlib.metadata.version('torch')} installed; test files from {src}")
    expected = read_expected(args.expected)
    work = ROOT / "build" / "pytorch-tests"
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(src, work, args.timeout, args.keyword)
    results = []
    for rel in args.files:
        result = runner.run_file(rel)
        if not args.no_cpu_check:
            runner.check_on_cpu(result)
        results.append(result)
    return report(results, expected)


if __name__ == "__main__":
    sys.exit(main())
