"""Run diffusers' own model tests on "tpu" and print passed/failed/skipped per file.

    python tools/diffusers_tests.py /path/to/diffusers [-k EXPR] [test files...]

The checkout is read, never written: pytest runs from a scratch directory
(build/diffusers-tests) that holds a link to our device spec, because
diffusers imports ``DIFFUSERS_TEST_DEVICE_SPEC`` by its bare file name from
the working directory. When the checkout's version differs from the
installed diffusers, this says so first (the tests may then expect an API
the installed version lacks, or the other way round).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = [
    "tests/models/transformers/test_models_transformer_flux.py",
    "tests/models/autoencoders/test_models_autoencoder_kl.py",
    "tests/models/unets/test_models_unet_2d_condition.py",
    "tests/models/transformers/test_models_transformer_sd3.py",
]
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|error|errors|xfailed|xpassed)")


def checkout_version(src: Path) -> str:
    init = (src / "src" / "diffusers" / "__init__.py").read_text() if (src / "src").is_dir() else ""
    found = re.search(r'__version__ = "([^"]+)"', init)
    if found:
        return found.group(1)
    setup = src / "setup.py"
    found = re.search(r'version="([^"]+)"', setup.read_text()) if setup.is_file() else None
    return found.group(1) if found else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", type=Path, help="a diffusers checkout (its tests/ directory is used)")
    parser.add_argument("files", nargs="*", default=FILES, help="test files relative to the checkout")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k selection")
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
    env = dict(os.environ)
    env.update(
        DIFFUSERS_TEST_BACKEND="torch_tpu",
        DIFFUSERS_TEST_DEVICE="tpu",
        DIFFUSERS_TEST_DEVICE_SPEC="tpu_spec.py",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
    )
    rows = []
    for rel in args.files:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(src),
            str(src / rel),
        ]
        if args.keyword:
            cmd += ["-k", args.keyword]
        print("+", " ".join(cmd), flush=True)
        done = subprocess.run(
            cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        print(done.stdout[-20000:], flush=True)
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        counts = {kind: 0 for kind in ("passed", "failed", "skipped")}
        for number, kind in SUMMARY.findall(last):
            kind = (
                {"error": "failed", "errors": "failed", "xfailed": "skipped", "xpassed": "passed"}[kind]
                if (kind not in counts)
                else kind
            )
            counts[kind] += int(number)
        rows.append((rel, counts))
    print(f"\n{'file':<64} {'passed':>6} {'failed':>6} {'skipped':>7}")
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for rel, counts in rows:
        print(f"{rel:<64} {counts['passed']:>6} {counts['failed']:>6} {counts['skipped']:>7}")
        for kind in total:
            total[kind] += counts[kind]
    ran = total["passed"] + total["failed"]
    share = 100.0 * total["passed"] / ran if ran else 0.0
    counts = f"{total['passed']:>6} {total['failed']:>6} {total['skipped']:>7}"
    print(f"{'total':<64} {counts}  ({share:.1f}% of the tests that ran)")
    return 0 if total["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
