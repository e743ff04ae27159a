"""The torch that torch_tpu._C was built against, and the check at import.

The C++ glue uses PyTorch's C++ API, whose ABI changes with every release: an
extension built against one torch and loaded under another crashes or fails
with an undefined symbol. ``_C`` records the version it was compiled against
(``_C._built_torch_version``, and a marker string in the binary) and calls
:func:`check` first thing when it is imported.
"""

from __future__ import annotations

import os
import re

import torch

_MARKER = b"torch_tpu:built-against-torch="

REBUILD_HINT = (
    "rebuild torch_tpu against the torch you have: in a source checkout `make build` "
    "(or `pip install --no-build-isolation -e .`); from an sdist or wheel "
    "`pip install --no-build-isolation --no-binary torch_tpu --force-reinstall --no-deps torch_tpu`. "
    "Build without isolation, so that pip builds against this torch and not a fresh download."
)


def release(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13.0``: CPU and CUDA builds of a release share the C++ API."""
    return str(version).split("+", 1)[0]


def mismatch_message(built: str, loaded: str) -> str:
    return f"torch_tpu._C was built against torch {built}, but torch {loaded} is loaded: {REBUILD_HINT}"


def check(built: str) -> None:
    """Raises ImportError when the loaded torch is not the release ``built``."""
    loaded = str(torch.__version__)
    if release(built) != release(loaded):
        raise ImportError(mismatch_message(built, loaded))


def built_version_from_file(path: str) -> str | None:
    """Reads the marker from a built ``_C`` without loading it (None if absent)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    m = re.search(re.escape(_MARKER) + rb"([0-9A-Za-z.+_-]+)\x00", data)
    return m.group(1).decode() if m else None


def explain_load_failure(error: ImportError) -> ImportError | None:
    """A clearer ImportError when ``_C`` failed to load because it was built for
    another torch (an undefined symbol, usually; the caller chains |error|);
    None when that is not why."""
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith("_C.") and name.endswith(".so"):
            built = built_version_from_file(os.path.join(here, name))
            if built and release(built) != release(str(torch.__version__)):
                return ImportError(mismatch_message(built, str(torch.__version__)))
    return None
