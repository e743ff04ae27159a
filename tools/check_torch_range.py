"""Proves the torch range of pyproject.toml: the C++ glue (torch_tpu/csrc)
compiles against the headers of the lowest and the highest torch in it.

    python tools/check_torch_range.py                     # 2.11.0 and 2.15.0, from the cache
    python tools/check_torch_range.py --download          # fetch missing wheels first (pip download)
    python tools/check_torch_range.py 2.12.1 installed    # any versions; "installed": this env's torch

A header-only check (``c++ -fsyntax-only``): each glue file is parsed and
type-checked against that torch's C++ API, nothing is linked or run. The
headers come from torch wheels unpacked into the cache
(``~/.cache/torch_tpu/torch-headers``, or ``--cache``): ``torch-<version>/include``.
With the headers cached, the tool fetches nothing. ``--download`` runs
``pip download`` for a missing wheel; by default the macOS arm64 wheel, the
smallest one that carries the full C++ headers (the platform's own branches
in them are chosen by this compiler's macros, not by the wheel);
``--platform manylinux_2_28_x86_64`` takes the Linux one (~500 MB).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import sysconfig
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The range in pyproject.toml is torch>=LOWEST_MINOR,<(HIGHEST_MINOR + 1).
LOWEST = "2.11.0"
HIGHEST = "2.15.0"
DEFAULT_PLATFORM = {"2.11.0": "macosx_11_0_arm64"}
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "torch_tpu", "torch-headers")


def wheel_platform(version: str, asked: str | None) -> str:
    # torch's macOS wheels name the minimum macOS they need; newer ones need 14.0.
    return asked or DEFAULT_PLATFORM.get(version, "macosx_14_0_arm64")


def find_wheel(version: str, dirs: list[str]) -> str | None:
    for d in dirs:
        found = sorted(glob.glob(os.path.join(d, f"torch-{version}-*.whl")))
        if found:
            return found[0]
    return None


def download(version: str, dest: str, platform: str) -> str:
    os.makedirs(dest, exist_ok=True)
    py = f"{sys.version_info.major}{sys.version_info.minor}"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--platform",
        platform,
        "--python-version",
        py,
        f"torch=={version}",
        "-d",
        dest,
    ]
    print("  $", " ".join(cmd), flush=True)
    # A machine-wide pip constraint on torch must not veto a download of headers.
    subprocess.run(cmd, check=True, env={**os.environ, "PIP_CONSTRAINT": ""})
    wheel = find_wheel(version, [dest])
    if not wheel:
        raise SystemExit(f"pip download left no torch-{version} wheel in {dest}")
    return wheel


def headers_for(version: str, args: argparse.Namespace) -> str:
    """The include directory of |version|, unpacked into the cache if needed."""
    if version == "installed":
        import torch.utils.cpp_extension as ext

        return ext.include_paths()[0]
    include = os.path.join(args.cache, f"torch-{version}", "include")
    if os.path.isfile(os.path.join(include, "torch", "extension.h")):
        return include
    wheels = os.path.join(args.cache, "wheels")
    wheel = find_wheel(version, [wheels, *args.wheels])
    if not wheel:
        if not args.download:
            raise SystemExit(
                f"no headers for torch {version} in {args.cache} and no wheel in {[wheels, *args.wheels]}; "
                "rerun with --download (pip download, once) or --wheels DIR"
            )
        wheel = download(version, wheels, wheel_platform(version, args.platform))
    print(f"  unpacking the headers of {os.path.basename(wheel)}", flush=True)
    target = os.path.join(args.cache, f"torch-{version}")
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.namelist() if m.startswith("torch/include/")]
        for m in members:
            out = os.path.join(target, "include", m[len("torch/include/") :])
            if m.endswith("/"):
                continue
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(m) as src, open(out, "wb") as dst:
                dst.write(src.read())
    return include


def header_version(include: str) -> str:
    """TORCH_VERSION as the headers define it (so a mislabelled cache shows)."""
    for rel in ("torch/headeronly/version.h", "torch/csrc/api/include/torch/version.h"):
        path = os.path.join(include, rel)
        if os.path.isfile(path):
            with open(path) as f:
                m = re.search(r'#define TORCH_VERSION\s*\\?\s*"([^"]+)"', f.read())
            if m:
                return m.group(1)
    return "unknown"


def compile_flags(include: str, version: str) -> list[str]:
    return [
        os.environ.get("CXX", "c++"), "-std=c++20", "-fsyntax-only", "-Wall", "-Werror=return-type",
        "-I", include, "-I", os.path.join(include, "torch", "csrc", "api", "include"),
        "-I", os.path.join(ROOT, "csrc", "include"), "-I", sysconfig.get_paths()["include"],
        "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C",
        f'-DTORCH_TPU_BUILT_TORCH_VERSION="{version}"',
    ]  # fmt: skip


def check(version: str, include: str, jobs: int) -> bool:
    sources = sorted(glob.glob(os.path.join(ROOT, "torch_tpu", "csrc", "*.cpp")))
    flags = compile_flags(include, version)
    print(f"torch {version} (headers say {header_version(include)}):", flush=True)
    print(f"  {' '.join(flags)} torch_tpu/csrc/<file>.cpp", flush=True)
    start = time.time()

    def one(src: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        return src, subprocess.run([*flags, src], capture_output=True, text=True)

    ok = True
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for src, proc in pool.map(one, sources):
            name = os.path.relpath(src, ROOT)
            if proc.returncode == 0:
                print(f"  ok    {name}", flush=True)
            else:
                ok = False
                print(f"  FAIL  {name}\n" + "\n".join(proc.stderr.splitlines()[:30]), flush=True)
    print(f"torch {version}: {'OK' if ok else 'FAILED'} ({len(sources)} files, {time.time() - start:.0f} s)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "versions", nargs="*", default=[LOWEST, HIGHEST], help="torch versions, or 'installed'"
    )
    parser.add_argument("--cache", default=DEFAULT_CACHE, help="where unpacked headers and wheels are kept")
    parser.add_argument("--wheels", action="append", default=[], help="a directory with torch wheels")
    parser.add_argument("--download", action="store_true", help="pip download a wheel that is not cached")
    parser.add_argument("--platform", help="wheel platform tag for --download")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    results = {}
    for version in args.versions:
        include = headers_for(version, args)
        results[version] = check(version, include, args.jobs)
    print("summary: " + ", ".join(f"torch {v} {'OK' if ok else 'FAILED'}" for v, ok in results.items()))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
