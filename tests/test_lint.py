"""tools/lint_conventions.py (``make lint``): each check catches a planted
violation in a tiny tree and passes the same tree without it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "lint_conventions.py"


def _load_tool():
    spec = importlib.util.spec_from_file_location("lint_conventions", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


lint = _load_tool()

# A clean tree: one of each construct every check reads, each written the
# way the conventions want it.
CLEAN = {
    "csrc/include/tpurt.h": """\
#ifdef __cplusplus
extern "C" {
#endif
/* Creates a thing; "stablehlo.add" in a comment is not a literal. */
TPURT_MUST_USE tpurt_status_t tpurt_thing_create(int n, tpurt_thing_t** out_thing);
/* Takes ownership of |target|. */
TPURT_MUST_USE tpurt_status_t tpurt_shadow_set_consume(tpurt_target_t* target);
/* The caller takes ownership of the returned buffer. */
char* tpurt_thing_name(const tpurt_thing_t* thing);
typedef tpurt_status_t (*tpurt_callback_t)(void* arg);
#define TPURT_CHECK(x) tpurt_status_t x##_status
#ifdef __cplusplus
}
#endif
""",
    "csrc/pjrt/pjrt.h": """\
/* A sharded buffer made of |shards| (takes ownership of them). */
pjrt_buffer_t* pjrt_buffer_sharded_create_consume(const pjrt_sharding_t* sharding,
                                                  pjrt_buffer_t** shards);
struct holder {
  tpurt_status_t status;
};
""",
    "csrc/pjrt/execute.c": """\
static const char kPrefix[] = "stablehlo.";
static TPURT_MUST_USE tpurt_status_t launch(int device) {
  tpurt_status_t s = NULL;
  return s;
}
tpurt_status_t pjrt_run(int device) { return launch(device); }
""",
    "csrc/ir/ir_ops.def": 'IR_OP(ADD, "stablehlo.add", 2)\nIR_OP(ERF, "chlo.erf", 1)\n',
    "csrc/lower/elementwise.c": """\
static TPURT_MUST_USE tpurt_status_t lower_add(lower_ctx_t* ctx) { return NULL; }
const lower_rule_t lower_elementwise_rules[] = {
    LOWER_FN("aten::add.Tensor", lower_add),
    LOWER_OUT_FN("aten::add.out", lower_add),
    LOWER_END,
};
""",
    "csrc/lower/activation.c": """\
const lower_rule_t lower_activation_rules[] = {
    {.name = "aten::relu", .fn = lower_relu, .variant = LOWER_FUNCTIONAL},
    LOWER_END,
};
""",
    "csrc/engine/op.c": """\
static pthread_mutex_t g_plan_lock = PTHREAD_MUTEX_INITIALIZER;
static plan_t* g_plans[64] TPURT_GUARDED_BY(g_plan_lock);
static _Thread_local sig_t t_sig;
static atomic_uint_fast64_t g_hits;
static _Atomic int g_count;
static const char* const kNames[] = {"a", "b"};
static const int kLimit = 4;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
extern int engine_live_storages;
typedef struct {
  int x;
} plan_t;
struct plan_s;
enum{ kSlots = 64 };
static void (*const kHook)(int) = NULL;
""",
    "csrc/tests/ir_test.c": "static tpurt_status_t helper(void) { return NULL; }\nstatic int g_x;\n"
    'const char* k = "stablehlo.add";\n',
    # the glue: op names in messages, and tested only where it decides what it registers
    "torch_tpu/csrc/Kernel.cpp": """\
namespace torch_tpu {
namespace {

// A comment may say name == "aten::native_dropout".
void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpFacts& facts = op_facts(op.schema());
  if (facts.core.default_generator) call.add_generator(c10::IValue());
  check_factory("aten::empty.memory_format", type);
  constexpr std::string_view kCopy = "aten::_copy_from";
}

bool keeps_pytorch_kernel(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  if (name.name == "aten::copy_" || name.name == "aten::_to_copy") return true;
  return false;
}

}  // namespace

void register_core_ops() {
  for (const c10::OperatorName& op : dispatcher.getAllOpNames()) {
    if (op.name.rfind("aten::", 0) != 0) continue;
  }
}

}  // namespace torch_tpu
""",
}


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _plant(tmp_path: Path, rel: str, text: str, append: bool = True) -> list:
    files = dict(CLEAN)
    files[rel] = files.get(rel, "") + text if append else text
    return lint.run(_tree(tmp_path, files))


def test_clean_tree_passes(tmp_path):
    assert lint.run(_tree(tmp_path, CLEAN)) == []


@pytest.mark.parametrize(
    "rel, text, where",
    [
        (
            "csrc/include/tpurt.h",
            "tpurt_status_t tpurt_thing_free(tpurt_thing_t* thing);\n",
            "tpurt_thing_free",
        ),
        # a declaration split over lines, after a comment
        ("csrc/pjrt/pjrt.h", "/* Runs. */\ntpurt_status_t\npjrt_go(int a,\n        int b);\n", "pjrt_go"),
        (
            "csrc/lower/elementwise.c",
            "static tpurt_status_t lower_sub(lower_ctx_t* c) { return NULL; }\n",
            "lower_sub",
        ),
        ("csrc/cache/cache.c", "static inline tpurt_status_t refusal(const record_t* r);\n", "refusal"),
    ],
)
def test_must_use(tmp_path, rel, text, where):
    found = _plant(tmp_path, rel, text)
    assert [v.check for v in found] == ["must-use"], found
    assert found[0].path == rel and where in found[0].message


def test_must_use_line_number(tmp_path):
    found = _plant(tmp_path, "csrc/pjrt/pjrt.h", "\n\ntpurt_status_t pjrt_go(void);\n")
    assert found[0].line == CLEAN["csrc/pjrt/pjrt.h"].count("\n") + 3


@pytest.mark.parametrize(
    "comment",
    [
        "/* A sharded buffer made of |shards| (one per device;\n** takes ownership of them). */\n",
        "/* Consumes |status| and returns it annotated. */\n",
        "// Steals the buffer of |src|.\n",
    ],
)
def test_consume(tmp_path, comment):
    decl = "pjrt_buffer_t* pjrt_buffer_sharded_create(const pjrt_sharding_t* s, pjrt_buffer_t** shards);\n"
    found = _plant(tmp_path, "csrc/pjrt/pjrt.h", comment + decl)
    assert [v.check for v in found] == ["consume"], found
    assert "pjrt_buffer_sharded_create" in found[0].message
    # the same comment on a function named for it passes
    ok = decl.replace("sharded_create(", "sharded_create_consume(")
    assert _plant(tmp_path, "csrc/pjrt/pjrt.h", comment + ok) == []


def test_consume_trailing_comment(tmp_path):
    found = _plant(
        tmp_path, "csrc/engine/engine.h", "void storage_adopt(buffer_t* b); /* takes ownership of |b| */\n"
    )
    assert [v.check for v in found] == ["consume"]
    # a trailing comment belongs to its own line, not to the next declaration
    text = (
        "void storage_adopt_consume(buffer_t* b); /* takes ownership of |b| */\nvoid storage_other(void);\n"
    )
    assert _plant(tmp_path, "csrc/engine/engine.h", text) == []


def test_duplicate_row(tmp_path):
    # the same name in another family's table
    row = '    LOWER_FN("aten::add.Tensor", lower_add2),\n'
    text = CLEAN["csrc/lower/activation.c"].replace("    LOWER_END,", row + "    LOWER_END,")
    found = _plant(tmp_path, "csrc/lower/activation.c", text, append=False)
    assert [v.check for v in found] == ["duplicate-row"], found
    assert "aten::add.Tensor" in found[0].message and "lower_elementwise_rules" in found[0].message
    # and twice in one table, in the named-field form
    row = '    {.name = "aten::relu", .fn = lower_relu2},\n'
    text = CLEAN["csrc/lower/activation.c"].replace("    LOWER_END,", row + "    LOWER_END,")
    found = _plant(tmp_path, "csrc/lower/activation.c", text, append=False)
    assert [v.check for v in found] == ["duplicate-row"], found
    assert found[0].line == 3


def test_row_names_outside_tables_are_not_rows(tmp_path):
    text = 'static const char* kAlias = "aten::add.Tensor"; /* "aten::add.out" */\n'
    assert _plant(tmp_path, "csrc/lower/elementwise.c", text) == []


@pytest.mark.parametrize(
    "rel, text",
    [
        ("csrc/lower/elementwise.c", 'static void f(ir_func_t* g) { ir_unary(g, "stablehlo.negate", 0); }\n'),
        ("csrc/lower/special.c", 'static void f(ir_func_t* g) { ir_unary(g, "chlo.erf", 0); }\n'),
        ("csrc/ir/printer.c", '#define NAME "stablehlo.add"\n'),
        ("csrc/engine/view.c", 'static void f(void) { strcmp(op, "stablehlo.subtract"); }\n'),
    ],
)
def test_op_literal(tmp_path, rel, text):
    found = _plant(tmp_path, rel, text)
    assert [v.check for v in found] == ["op-literal"], found
    assert found[0].path == rel


@pytest.mark.parametrize(
    "text",
    [
        "static int g_configured;\n",
        "static plan_t* g_plans[64];\n",
        "static const char* g_reason;\n",  # the pointer itself is mutable
        "static disk_config_t g_disk = {.dirfd = -1};\n",
        "size_t engine_spmd_compiles;\n",
        "static size_t g_num_warned, g_cap_warned;\n",
    ],
)
def test_guarded_by(tmp_path, text):
    found = _plant(tmp_path, "csrc/engine/op.c", text)
    assert [v.check for v in found] == ["guarded-by"], found
    assert found[0].path == "csrc/engine/op.c"
    annotated = text.replace(";", " TPURT_GUARDED_BY(g_plan_lock);", 1)
    if "=" in text:
        annotated = text.replace(" =", " TPURT_GUARDED_BY(g_plan_lock) =", 1)
    assert _plant(tmp_path, "csrc/engine/op.c", annotated) == []


def test_guarded_by_only_in_engine_and_cache(tmp_path):
    assert _plant(tmp_path, "csrc/pjrt/loader.c", "static int g_loaded;\n") == []
    found = _plant(tmp_path, "csrc/cache/cache.c", "static bool g_warned;\n")
    assert [v.check for v in found] == ["guarded-by"]


@pytest.mark.parametrize(
    "line, literal",
    [
        (
            '  if (name == "aten::native_dropout") call.add_generator(c10::IValue());\n',
            "aten::native_dropout",
        ),
        ('  if (name.rfind("aten::index_put", 0) == 0) return;\n', "aten::index_put"),
        ("  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };\n", None),
        ('  if (starts("aten::gather")) return;\n', "aten::gather"),
        ('  if ("aten::take" != name) return;\n', "aten::take"),
        ('  if (name.compare(0, 11, "aten::index") == 0) return;\n', "aten::index"),
    ],
)
def test_op_branch(tmp_path, line, literal):
    # planted in the boxed kernel's body
    head = "  const OpFacts& facts = op_facts(op.schema());\n"
    text = CLEAN["torch_tpu/csrc/Kernel.cpp"].replace(head, head + line)
    found = _plant(tmp_path, "torch_tpu/csrc/Kernel.cpp", text, append=False)
    if literal is None:  # no op named: nothing to find
        assert found == []
        return
    assert [v.check for v in found] == ["op-branch"], found
    assert literal in found[0].message and "tpu_boxed_kernel" in found[0].message
    assert found[0].line == 6 + line.count("\n")


def test_op_branch_in_a_glue_header_and_a_struct(tmp_path):
    text = 'struct Call {\n  void add(const std::string& n) {\n    if (n == "aten::put") return;\n  }\n};\n'
    found = _plant(tmp_path, "torch_tpu/csrc/Common.h", text)
    assert [(v.check, v.line) for v in found] == [("op-branch", 3)], found
    assert "Call" in found[0].message


def test_op_branch_reads_only_the_glue(tmp_path):
    text = 'static bool f(const char* n) { return strcmp(n, "aten::put") == 0; }\n'
    assert _plant(tmp_path, "csrc/lower/elementwise.c", text) == []


def test_command_line(tmp_path):
    root = _tree(tmp_path, CLEAN)
    ok = subprocess.run([sys.executable, str(TOOL), "--root", str(root)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (root / "csrc/lower/elementwise.c").write_text(
        CLEAN["csrc/lower/elementwise.c"] + "static tpurt_status_t f(void);\n"
    )
    bad = subprocess.run([sys.executable, str(TOOL), "--root", str(root)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "csrc/lower/elementwise.c:7: must-use: f returns a tpurt_status_t" in bad.stdout
    only = subprocess.run(
        [sys.executable, str(TOOL), "--root", str(root), "--check", "op-literal"],
        capture_output=True,
        text=True,
    )
    assert only.returncode == 0, only.stdout
