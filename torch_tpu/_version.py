"""The version of torch_tpu: the one place it is written.

setuptools reads it for the package metadata (pyproject.toml, ``dynamic``),
``torch_tpu.__version__`` imports it, and the Makefile passes it to the C core
(``tpurt_version()``, part of every executable cache key).
"""

__version__ = "0.1.0"
