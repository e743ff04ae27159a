"""Packaging: the torch version check of _C, the sdist's contents and metadata,
and (slow) a wheel built from the sdist, installed and imported in a fresh venv."""

from __future__ import annotations

import email
import glob
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest
import torch

import torch_tpu
from torch_tpu import _torch_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd: list[str], timeout: int = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout
    )


# ---- the torch version _C was built against ----------------------------------------


def test_c_records_its_torch() -> None:
    built = torch_tpu._C._built_torch_version
    assert _torch_version.release(built) == _torch_version.release(torch.__version__)
    # The same version is readable from the binary without loading it.
    assert _torch_version.built_version_from_file(torch_tpu._C.__file__) == built


def test_other_torch_gets_a_clear_error() -> None:
    # Another torch, faked: the check reads torch.__version__ when _C loads.
    code = "import torch; torch.__version__ = '2.99.1+cu130'; import torch_tpu"
    proc = run([sys.executable, "-c", code], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: torch_tpu._C was built against torch ")
    assert (
        f"built against torch {torch_tpu._C._built_torch_version}, but torch 2.99.1+cu130 is loaded" in last
    )
    assert "pip install --no-build-isolation" in last and "make build" in last


def test_same_release_other_build_is_accepted() -> None:
    # A CPU and a CUDA build of one release share the C++ API: no error.
    release = _torch_version.release(torch.__version__)
    code = f"import torch; torch.__version__ = '{release}+cu130'; import torch_tpu; print('ok')"
    proc = run([sys.executable, "-c", code], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_explains_a_failed_load(tmp_path, monkeypatch) -> None:
    # A _C that cannot load (here: garbage) but carries the marker of another torch.
    fake = tmp_path / "_C.cpython-311-x86_64-linux-gnu.so"
    fake.write_bytes(b"\x7fELF junk torch_tpu:built-against-torch=2.11.0+cpu\x00 more")
    assert _torch_version.built_version_from_file(str(fake)) == "2.11.0+cpu"
    monkeypatch.setattr(_torch_version.os.path, "abspath", lambda _: str(tmp_path / "__init__.py"))
    error = _torch_version.explain_load_failure(ImportError("undefined symbol: _ZN3c10"))
    assert error is not None and "built against torch 2.11.0+cpu" in str(error)


# ---- sdist -------------------------------------------------------------------------


def build_dist(out: str, *what: str) -> subprocess.CompletedProcess[str]:
    return run(
        [sys.executable, "-m", "build", "--no-isolation", *what, "-o", out, ROOT],
        timeout=1800,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )


def source_files() -> set[str]:
    """What building needs: the core, the glue, the build files, the package."""
    files = {"Makefile", "setup.py", "pyproject.toml", "README.md", "MANIFEST.in"}
    for pattern in ("csrc/**/*.[ch]", "torch_tpu/csrc/*.cpp", "torch_tpu/csrc/*.h", "torch_tpu/**/*.py"):
        files |= {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)}
    files |= {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests", "*.py"))}
    return files


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> str:
    pytest.importorskip("build")
    out = str(tmp_path_factory.mktemp("sdist"))
    proc = build_dist(out, "--sdist")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = glob.glob(os.path.join(out, "*.tar.gz"))
    return path


def test_sdist_has_everything_to_build(sdist: str) -> None:
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(f"torch_tpu-{torch_tpu.__version__}/PKG-INFO")
        metadata = email.message_from_bytes(pkg_info.read())
    missing = source_files() - names
    assert not missing, f"the sdist lacks {sorted(missing)}"
    assert "csrc/include/tpurt.h" in names and "csrc/pjrt/pjrt_abi.h" in names
    built = [n for n in names if n.endswith((".so", ".o", ".a")) or n.startswith("build/")]
    assert not built, f"build products in the sdist: {built}"
    requires = metadata.get_all("Requires-Dist")
    assert "torch<2.16,>=2.11" in requires
    assert 'xla-cpu-pjrt; extra == "cpu"' in requires
    assert "cpu" in metadata.get_all("Provides-Extra")


# ---- wheel (slow: compiles the core and the glue from the sdist) ----------------------


@pytest.mark.slow
def test_wheel_installs_and_imports_in_a_fresh_venv(tmp_path) -> None:
    out = tmp_path / "dist"
    proc = build_dist(str(out))  # the sdist, then the wheel built from it
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = glob.glob(str(out / "*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.startswith("torch_tpu/_C.") and n.endswith(".so") for n in names)
    assert not any(n.startswith("torch_tpu/csrc/") for n in names), "glue sources in the wheel"

    # A fresh venv that already has torch: the wheel goes in first (no deps,
    # nothing downloaded), then this venv's site-packages (torch, numpy, the
    # CPU plugin) joins it through a .pth line, which adds the directory but
    # not the .pth files in it (so not this checkout's editable torch_tpu).
    # No PYTHONPATH: this checkout (and its torch_tpu.egg-info) must not be
    # seen, or pip takes torch_tpu for installed already.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, env=env)
    py = str(venv / "bin" / "python")
    proc = subprocess.run(
        [py, "-m", "pip", "install", "-qq", "--no-index", "--no-deps", wheel],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert os.path.isdir(os.path.join(site, "torch_tpu")), "the wheel did not install"
    torch_site = os.path.dirname(os.path.dirname(torch.__file__))
    with open(os.path.join(site, "with_torch.pth"), "w") as f:
        f.write(torch_site + "\n")
    code = (
        "import torch, torch_tpu; print(torch_tpu.__file__); "
        "print((torch.ones(2, 3, device='tpu') * 2 + 1).cpu().sum().item())"
    )
    proc = subprocess.run(
        [py, "-c", code], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    where, total = proc.stdout.split()
    assert where.startswith(site), where
    assert float(total) == 18.0


# ---- the torch range ----------------------------------------------------------------


def load_range_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "check_torch_range", os.path.join(ROOT, "tools", "check_torch_range.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_range_tool_checks_the_ends_of_the_declared_range() -> None:
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("torch")]
    tool = load_range_tool()
    low = ".".join(tool.LOWEST.split(".")[:2])
    major, minor = (int(p) for p in tool.HIGHEST.split(".")[:2])
    assert spec == f"torch>={low},<{major}.{minor + 1}", spec


@pytest.mark.slow
def test_glue_compiles_against_the_ends_of_the_range() -> None:
    tool = load_range_tool()
    for version in (tool.LOWEST, tool.HIGHEST):
        if not os.path.isfile(
            os.path.join(tool.DEFAULT_CACHE, f"torch-{version}", "include", "torch", "extension.h")
        ):
            pytest.skip(
                f"no cached headers of torch {version}: run tools/check_torch_range.py --download once"
            )
    proc = run([sys.executable, os.path.join(ROOT, "tools", "check_torch_range.py")], timeout=3600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert f"torch {tool.LOWEST} OK, torch {tool.HIGHEST} OK" in proc.stdout
