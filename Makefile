# torch_tpu: two commands for users (make demo, make test), the rest for us.
#
#   make demo    venv + build, then a tiny model on "tpu" vs CPU
#   make test    venv + build, then make lint, the C tests of the core
#                (plain and ASan+UBSan) and pytest
#   make test-plugin PLUGIN=/path/to/plugin.so
#                pytest against another PJRT plugin (libtpu, a CUDA plugin)
#   make dist    sdist and wheel in dist/ (built against the venv's torch)
#   make lib     the C core alone (build/libtpurt.a)
#   make ctest   the C tests alone
#   make format  clang-format the C and C++ sources
#   make lint    ruff, clang-format --dry-run and tools/lint_conventions.py

PYTHON   ?= python3
VENV     := .venv
PY       := $(VENV)/bin/python
PIP      := $(VENV)/bin/pip
# Our pip calls print errors only (-qq): pip warns at every call about index
# locations that a machine's pip configuration may name.
PIPQ     := $(PIP) -qq --disable-pip-version-check
# Compile commands are not echoed (make V=1 shows them); errors still are.
V        ?= 0
Q        := $(if $(filter 1,$(V)),,@)
# The CPU build of torch that lies on this machine's disk; never a range.
TORCH    := torch==2.13.0

CC       ?= gcc
# The one source of the version: the package's torch_tpu/_version.py (read by
# setuptools for the metadata, imported as torch_tpu.__version__, passed to
# the core here).
VERSION  := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' torch_tpu/_version.py)
CFLAGS   := -std=c11 -Wall -Wextra -Werror -fPIC -O2 -g -D_GNU_SOURCE -fvisibility=hidden \
            -DTPURT_VERSION='"$(VERSION)"'
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDLIBS   := -ldl -lpthread -lm

CORE_SRCS  := $(sort $(wildcard csrc/base/*.c csrc/pjrt/*.c csrc/ir/*.c csrc/lower/*.c csrc/engine/*.c csrc/cache/*.c))
CORE_HDRS  := $(wildcard csrc/*/*.h csrc/*/*.def)
TEST_SRCS  := $(sort $(wildcard csrc/tests/*_test.c))
CORE_OBJS  := $(CORE_SRCS:csrc/%.c=build/obj/%.o)
ASAN_OBJS  := $(CORE_SRCS:csrc/%.c=build/asan/%.o)
TEST_BINS  := $(TEST_SRCS:csrc/tests/%.c=build/tests/%)
ASAN_BINS  := $(TEST_SRCS:csrc/tests/%.c=build/asan-tests/%)

# The C tests find the CPU plugin the same way the Python package does.
PLUGIN = $(shell $(PY) torch_tpu/_discovery.py 2>/dev/null)

.PHONY: opinfo-target demo test test-plugin dist lib ctest ctest-asan pytest diffusers-tests pytorch-tests venv build dev format lint clean

demo: build
	@$(PY) -m torch_tpu demo

test: build lint ctest ctest-asan pytest

# ---- environment -----------------------------------------------------------

venv: $(VENV)/.stamp

$(VENV)/.stamp: pyproject.toml
	@echo "setting up $(VENV): $(TORCH) (CPU build), the CPU PJRT plugin, test tools, diffusers"
	@$(PYTHON) -m venv $(VENV)
	@$(PIPQ) install --upgrade pip
	@$(PIPQ) install "$(TORCH)"
	@$(PIPQ) install xla-cpu-pjrt pytest pytest-xdist expecttest ruff numpy pybind11 setuptools wheel ninja build "clang-format==18.1.8"
	@$(PIPQ) install "diffusers==0.42.1" "transformers==5.23.0" pillow accelerate parameterized requests-mock
	@# libtpu compiles for named TPU chips with no TPU attached (compile-only targets);
	@# the target tests skip with a one-line reason where it cannot load
	@$(PIPQ) install libtpu
	@touch $@

# The glue is built against the torch in the venv, never in an isolated env.
# (autoload off while building: importing torch must not load a stale _C)
build: venv lib
	@echo "building the C++ glue against the venv's torch (pip install --no-build-isolation -e .)"
	@TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIPQ) install --no-build-isolation --no-deps -e .

# An sdist (everything needed to build) and a wheel built from it, against
# the venv's torch: never in an isolated environment with another torch.
dist: venv
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -m build --no-isolation -o dist .

# Incremental rebuild for development (after one `make build`): the core,
# then only the glue files that changed (ninja), into the source tree.
dev: lib
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) setup.py -q build_ext --inplace

# ---- the C core ------------------------------------------------------------

lib: build/libtpurt.a

build/libtpurt.a: $(CORE_OBJS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "built the C core: $@")
	$(Q)ar rcs $@ $^

build/obj/%.o: csrc/%.c $(CORE_HDRS)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

build/asan/%.o: csrc/%.c $(CORE_HDRS)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -O1 $(SANFLAGS) -c $< -o $@

# The core's version comes from here (base/util.c).
build/obj/base/util.o build/asan/base/util.o: torch_tpu/_version.py

build/libtpurt-asan.a: $(ASAN_OBJS)
	@mkdir -p $(@D)
	$(Q)ar rcs $@ $^

build/tests/%: csrc/tests/%.c csrc/tests/test.h csrc/tests/ir_check.h build/libtpurt.a
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $< build/libtpurt.a -o $@ $(LDLIBS)

# A PJRT "plugin" that only validates client options (options_test.c).
FAKE_PLUGIN := build/tests/fake_pjrt_plugin.so
$(FAKE_PLUGIN): csrc/tests/fake_pjrt_plugin.c csrc/tests/fake_plugin.h csrc/pjrt/pjrt_abi.h
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -shared $< -o $@

# A "plugin" that uses the distributed create options and key-value
# callbacks as a multi-process plugin does (kv_store_test.c).
FAKE_KV_PLUGIN := build/tests/fake_kv_plugin.so
$(FAKE_KV_PLUGIN): csrc/tests/fake_kv_plugin.c csrc/tests/fake_plugin.h csrc/pjrt/pjrt_abi.h csrc/pjrt/kv_store.h
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -shared $< -o $@

build/asan-tests/%: csrc/tests/%.c csrc/tests/test.h csrc/tests/ir_check.h build/libtpurt-asan.a
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -O1 $(SANFLAGS) $< build/libtpurt-asan.a -o $@ $(LDLIBS)

ctest: venv $(TEST_BINS) $(FAKE_PLUGIN) $(FAKE_KV_PLUGIN)
	@set -e; for t in $(TEST_BINS); do \
	  TORCH_TPU_CACHE_DIR=0 TORCH_TPU_PJRT_PLUGIN=$(PLUGIN) TPURT_TEST_DATA=csrc/tests/data \
	  TPURT_FAKE_PLUGIN=$(FAKE_PLUGIN) TPURT_FAKE_KV_PLUGIN=$(FAKE_KV_PLUGIN) $$t; done

# The plugin is a large C++ library built without sanitizers: leak checking
# covers our allocations only (suppressions for the plugin's own).
ctest-asan: venv $(ASAN_BINS) $(FAKE_PLUGIN) $(FAKE_KV_PLUGIN)
	@set -e; for t in $(ASAN_BINS); do \
	  TORCH_TPU_CACHE_DIR=0 TORCH_TPU_PJRT_PLUGIN=$(PLUGIN) TPURT_TEST_DATA=csrc/tests/data \
	  TPURT_FAKE_PLUGIN=$(FAKE_PLUGIN) TPURT_FAKE_KV_PLUGIN=$(FAKE_KV_PLUGIN) \
	  ASAN_OPTIONS=detect_leaks=1:detect_odr_violation=0 \
	  LSAN_OPTIONS=suppressions=csrc/tests/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1 $$t; done

# pytest runs one worker per core, up to 4 (PYTEST_WORKERS=0: one process).
# Most tests are bound by one Python thread, so on this project's 2-core
# hosts two workers take 15 minutes where one takes 25. A file stays in one
# worker (--dist loadfile): its module fixtures are built once.
# --durations: the slowest tests are listed, so the 25-minute budget is seen.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
pytest: build
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=25 tests

# diffusers' own model tests (FLUX, AutoencoderKL, UNet2DCondition, SD3) on
# "tpu", with passed/failed/skipped per file. Slow, so not part of `make test`.
# DIFFUSERS_SRC: a checkout of diffusers at the installed version's tag (the
# sdist has no model tests); it is only read. DIFFUSERS_K: a pytest -k filter.
# op_db (tests/test_opinfo.py, f32 and bf16) shadow-compiled for a TPU target through libtpu:
# the session ends with the target report and the share of programs that compile for it. Slow
# (each distinct program also compiles for the TPU); TARGET=v5e:1x1 etc., OPINFO_K=-k filter.
TARGET ?= v6e:1x1
opinfo-target: build
	TORCH_TPU_TARGET=$(TARGET) TORCH_TPU_TARGET_REPORT=build/opinfo-target.json \
	  $(PY) -m pytest -q -s tests/test_opinfo.py $(if $(OPINFO_K),-k "$(OPINFO_K)")

diffusers-tests: build
	@test -n "$(DIFFUSERS_SRC)" || { echo "usage: make diffusers-tests DIFFUSERS_SRC=/path/to/diffusers"; exit 2; }
	$(PY) tools/diffusers_tests.py "$(DIFFUSERS_SRC)" $(if $(DIFFUSERS_K),-k "$(DIFFUSERS_K)")

# PyTorch's own device-generic tests for core tensor ops (test_indexing, test_view_ops,
# test_shape_ops, test_sort_and_select), instantiated for "tpu" and run with the CPU
# fallback off: a per-test timeout (PYTORCH_TIMEOUT, seconds), crashes counted, the
# failures checked against tools/pytorch_tests_expected.txt. Slow, not part of `make test`.
# PYTORCH_SRC: a PyTorch checkout (only its test/ files are read). PYTORCH_K: a -k filter.
pytorch-tests: build
	@test -n "$(PYTORCH_SRC)" || { echo "usage: make pytorch-tests PYTORCH_SRC=/path/to/pytorch"; exit 2; }
	$(PY) tools/pytorch_tests.py "$(PYTORCH_SRC)" $(if $(PYTORCH_K),-k "$(PYTORCH_K)") \
	  $(if $(PYTORCH_TIMEOUT),--timeout $(PYTORCH_TIMEOUT))

# The Python suite on another PJRT plugin, e.g. a CUDA one:
#   make test-plugin PLUGIN=$$(python -c "import jax_plugins.xla_cuda13 as p, os; \
#       print(os.path.join(os.path.dirname(p.__file__), 'xla_cuda_plugin.so'))")
# Tests that need more devices than the plugin has skip, saying so.
test-plugin: build
	@if [ "$(origin PLUGIN)" != "command line" ] || [ ! -f "$(PLUGIN)" ]; then \
	  echo "usage: make test-plugin PLUGIN=/path/to/pjrt_plugin.so (a file)"; exit 2; fi
	TORCH_TPU_PJRT_PLUGIN=$(PLUGIN) $(PY) -m pytest -q tests

# ---- housekeeping ----------------------------------------------------------

format:
	$(VENV)/bin/clang-format -i $(wildcard csrc/*/*.[ch]) $(wildcard torch_tpu/csrc/*.cpp torch_tpu/csrc/*.h)

# Style (ruff, clang-format), then the core's conventions that the compiler
# cannot check (tools/lint_conventions.py: must-use statuses, _consume names,
# duplicate op-table rows, op-name literals outside the op list, unguarded
# globals in engine/ and cache/, op-name tests in the glue).
lint: venv
	$(VENV)/bin/ruff check torch_tpu tests bench tools
	$(VENV)/bin/clang-format --dry-run -Werror $(wildcard csrc/*/*.[ch]) $(wildcard torch_tpu/csrc/*.cpp torch_tpu/csrc/*.h)
	$(PY) tools/lint_conventions.py

clean:
	rm -rf build dist *.egg-info torch_tpu/*.so
