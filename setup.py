"""Builds torch_tpu._C: the C++ glue (torch_tpu/csrc) linked with the C core (build/libtpurt.a)."""

import glob
import os
import subprocess
import sys

import torch
from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    sys.exit(
        "torch_tpu is compiled against the torch of the environment it runs in, and none was found. "
        "Install torch (2.11 to 2.15) first, then build without isolation: "
        "`pip install --no-build-isolation torch_tpu` or `python -m build --no-isolation`."
    )

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBTPURT = os.path.join("build", "libtpurt.a")


class BuildTpuExtension(BuildExtension):
    """Rebuilds the core first (make is incremental), then the extension."""

    def run(self) -> None:
        subprocess.check_call(["make", "lib"], cwd=ROOT)
        super().run()


KINETO_INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include", "kineto")

setup(
    ext_modules=[
        CppExtension(
            name="torch_tpu._C",
            sources=sorted(glob.glob("torch_tpu/csrc/*.cpp")),
            # Kineto's headers (Profiler.cpp) are in torch's include tree.
            include_dirs=[os.path.join(ROOT, "csrc", "include"), KINETO_INCLUDE],
            extra_compile_args=["-std=c++20", "-O2", "-Wall"],
            # _C records the torch it is built against and refuses another at import.
            define_macros=[("TORCH_TPU_BUILT_TORCH_VERSION", f'"{torch.__version__}"')],
            extra_objects=[LIBTPURT],
            libraries=["dl", "pthread"],
            depends=[LIBTPURT, *glob.glob("torch_tpu/csrc/*.h"), "csrc/include/tpurt.h"],
        )
    ],
    cmdclass={"build_ext": BuildTpuExtension},
)
