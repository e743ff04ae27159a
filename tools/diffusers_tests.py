"""Run diffusers' own model tests on "tpu" and print passed/failed/skipped per file.

    python tools/diffusers_tests.py /path/to/diffusers [-k EXPR] [--no-cpu-check] [test files...]

The checkout is read, never written: pytest runs from a scratch directory
(build/diffusers-tests) that holds a link to our device spec, because
diffusers imports ``DIFFUSERS_TEST_DEVICE_SPEC`` by its bare file name from
the working directory. When the checkout's version differs from the
installed diffusers, this says so first (the tests may then expect an API
the installed version lacks, or the other way round).

Some tests cannot pass in this environment whatever torch_tpu does. They
are counted apart as "environment" failures, each listed with its reason:
  - "needs the Hub": the failure's exception chain holds huggingface_hub's
    offline error (a download from the Hugging Face Hub; there is no network
    here, and HF_HUB_OFFLINE=1). tools/diffusers_hub_offline.py, a pytest
    plugin, records them;
  - "fails on CPU too": every other tpu failure is run again on plain CPU
    PyTorch (DIFFUSERS_TEST_DEVICE=cpu, torch_tpu not imported); one that
    fails there as well (a missing package, a test that does not match the
    installed diffusers) is not torch_tpu's to fix.
A tpu failure that passes or skips on CPU stays a tpu failure. The share is
passed / (passed + tpu failures); the share counting the environment
failures as failures is printed too.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import junit_outcomes
from junit_outcomes import Outcome, first_line

ROOT = Path(__file__).resolve().parent.parent
FILES = [
    "tests/models/transformers/test_models_transformer_flux.py",
    "tests/models/autoencoders/test_models_autoencoder_kl.py",
    "tests/models/unets/test_models_unet_2d_condition.py",
    "tests/models/transformers/test_models_transformer_sd3.py",
]


@dataclass
class FileResult:
    rel: str
    tests: dict[str, Outcome] = field(default_factory=dict)  # pytest node id -> outcome on tpu
    hub: dict[str, str] = field(default_factory=dict)  # node id -> the Hub's offline error
    on_cpu: dict[str, Outcome] = field(default_factory=dict)  # the other tpu failures, run on CPU
    error: str = ""  # pytest did not report (a crash, a collection error)

    def count(self, kind: str) -> int:
        return sum(o.kind == kind for o in self.tests.values())

    def failed(self) -> list[str]:
        return [t for t, o in self.tests.items() if o.kind == "failed"]

    def environment(self) -> dict[str, str]:
        """tpu failures that cannot pass here -> why."""
        why = {}
        for t in self.failed():
            if t in self.hub:
                why[t] = f"needs the Hub: {self.hub[t]}"
            elif self.on_cpu.get(t, Outcome("")).kind == "failed":
                why[t] = f"fails on CPU too: {self.on_cpu[t].message}"
        return why

    def tpu_failures(self) -> list[str]:
        env = self.environment()
        return [t for t in self.failed() if t not in env]


def checkout_version(src: Path) -> str:
    init = (src / "src" / "diffusers" / "__init__.py").read_text() if (src / "src").is_dir() else ""
    found = re.search(r'__version__ = "([^"]+)"', init)
    if found:
        return found.group(1)
    setup = src / "setup.py"
    found = re.search(r'version="([^"]+)"', setup.read_text()) if setup.is_file() else None
    return found.group(1) if found else "unknown"


def read_junit(path: Path, src: Path, rel: str) -> dict[str, Outcome]:
    """pytest's junit XML as {node id: outcome}, node ids under the checkout |src|."""
    return junit_outcomes.read_junit(
        path,
        rel[:-3].replace("/", "."),
        lambda cls, name: "::".join([str(src / rel), *([cls] if cls else []), name]),
    )


def run_pytest(
    targets: list[str], src: Path, work: Path, env: dict[str, str], tag: str, keyword: str | None
) -> tuple[Path | None, str]:
    """Runs pytest on |targets|; returns (its junit XML, "") or (None, why there is none).
    The Hub plugin's record goes to <tag>.hub.json."""
    junit, log, hub = work / f"{tag}.xml", work / f"{tag}.log", work / f"{tag}.hub.json"
    for old in (junit, hub):
        old.unlink(missing_ok=True)
    env = dict(env, DIFFUSERS_TESTS_HUB_LOG=str(hub))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tools"), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "diffusers_hub_offline"]
    cmd += ["--rootdir", str(src), "--junitxml", str(junit), *(["-k", keyword] if keyword else []), *targets]
    shown = cmd if len(targets) <= 2 else [*cmd[: -len(targets)], targets[0], f"... ({len(targets)} tests)"]
    print("+", " ".join(shown), flush=True)
    with log.open("w") as out:
        done = subprocess.run(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    lines = log.read_text(errors="replace").strip().splitlines()
    print(f"  {lines[-1] if lines else '(no output)'}   [log: {log}]", flush=True)
    if not junit.is_file():
        return None, f"pytest exited {done.returncode} without a report (see {log})"
    return junit, ""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", type=Path, help="a diffusers checkout (its tests/ directory is used)")
    parser.add_argument("files", nargs="*", default=FILES, help="test files relative to the checkout")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k selection")
    parser.add_argument(
        "--no-cpu-check",
        action="store_true",
        help="do not run the tpu failures again on CPU (every failure then counts against tpu)",
    )
    args = parser.parse_args()
    src: Path = args.src.resolve()
    if not (src / "tests" / "testing_utils.py").is_file():
        print(
            f"diffusers-tests: {src} is not a diffusers checkout (no tests/testing_utils.py)", file=sys.stderr
        )
        return 2

    # the installed version without importing diffusers (which imports torch and its backends)
    installed, checked_out = importlib.metadata.version("diffusers"), checkout_version(src)
    if installed != checked_out:
        print(
            f"diffusers-tests: WARNING: the checkout is diffusers {checked_out} but {installed} is installed;"
            f" check out the tag v{installed} for tests that match the installed code"
        )

    work = ROOT / "build" / "diffusers-tests"
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "tpu_spec.py"
    if spec.is_symlink() or spec.exists():
        spec.unlink()
    spec.symlink_to(ROOT / "torch_tpu" / "testing" / "diffusers_device_spec.py")
    base = {k: v for k, v in os.environ.items() if not k.startswith("DIFFUSERS_TEST_")}
    base["HF_HUB_OFFLINE"] = "1"  # no network here: say so at once instead of timing out
    tpu_env = dict(
        base,
        DIFFUSERS_TEST_BACKEND="torch_tpu",
        DIFFUSERS_TEST_DEVICE="tpu",
        DIFFUSERS_TEST_DEVICE_SPEC="tpu_spec.py",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), base.get("PYTHONPATH", "")) if p),
    )
    # plain PyTorch on the CPU: torch_tpu is neither the backend nor autoloaded
    cpu_env = dict(base, DIFFUSERS_TEST_DEVICE="cpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0")

    results: list[FileResult] = []
    for rel in args.files:
        result = FileResult(rel)
        stem = Path(rel).stem
        junit, result.error = run_pytest([str(src / rel)], src, work, tpu_env, f"{stem}.tpu", args.keyword)
        if junit is not None:
            result.tests = read_junit(junit, src, rel)
            hub_log = junit.with_suffix(".hub.json")
            if hub_log.is_file():  # node ids relative to the checkout, as pytest writes them
                result.hub = {str(src / t): m for t, m in json.loads(hub_log.read_text()).items()}
        failed = [t for t in result.failed() if t not in result.hub]
        if failed and not args.no_cpu_check:
            junit, error = run_pytest(failed, src, work, cpu_env, f"{stem}.cpu", None)
            if junit is None:
                print(f"  the CPU check did not report: {error}")
            else:
                result.on_cpu = read_junit(junit, src, rel)
        results.append(result)

    print("\nEnvironment failures (they cannot pass here whatever the device does):")
    listed = False
    for result in results:
        for test, why in result.environment().items():
            listed = True
            print(f"  {test.split('::', 1)[1]}")
            print(f"      tpu: {first_line(result.tests[test].message)}")
            print(f"      why: {first_line(why, 200)}")
    if not listed:
        print("  (none)")
    print("\nTests that fail on tpu only:")
    listed = False
    for result in results:
        if result.error:
            listed = True
            print(f"  {result.rel}: {result.error}")
        for test in result.tpu_failures():
            listed = True
            cpu = result.on_cpu.get(test)
            on_cpu = "not run on CPU" if cpu is None else f"{cpu.kind} on CPU"
            if cpu is not None and cpu.kind == "skipped":
                on_cpu += f" ({first_line(cpu.message, 80)})"
            print(f"  {test.split('::', 1)[1]}  [{on_cpu}]")
            print(f"      tpu: {first_line(result.tests[test].message)}")
    if not listed:
        print("  (none)")

    print(f"\n{'file':<60} {'passed':>6} {'failed':>6} {'env':>5} {'skipped':>7}")
    total = [0, 0, 0, 0]
    for result in results:
        row = [
            result.count("passed"),
            len(result.tpu_failures()),
            len(result.environment()),
            result.count("skipped"),
        ]
        if result.error:
            row[1] += 1  # a file that did not report counts as one failure, never as nothing
        total = [a + b for a, b in zip(total, row)]
        print(f"{result.rel:<60} {row[0]:>6} {row[1]:>6} {row[2]:>5} {row[3]:>7}")
    passed, failed, env, skipped = total
    share = 100.0 * passed / (passed + failed) if passed + failed else 0.0
    print(f"{'total':<60} {passed:>6} {failed:>6} {env:>5} {skipped:>7}")
    print("(failed: a tpu failure; env: an environment failure, each listed above with its reason)")
    print(
        f"\n{share:.1f}% of the tests that ran and can pass here pass on tpu"
        f" ({passed} of {passed + failed}; the {env} environment failures are left out;"
        f" counting them as failures: {100.0 * passed / max(1, passed + failed + env):.1f}%)"
    )
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
