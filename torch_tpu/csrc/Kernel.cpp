// Kernel.cpp: THE boxed kernel. Every aten op that reaches PrivateUse1 without
// an explicit registration comes here; it is translated into a tpurt op call
// (arguments as the schema types them) and run by the core. Ops the core has
// no rule for go to the CPU fallback (or raise, if it is disabled).
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>

#include "Common.h"

namespace torch_tpu {
namespace {

// ---- CPU fallback -------------------------------------------------------------

std::atomic<int> g_fallback_enabled{-1};  // -1: not decided yet (TORCH_TPU_CPU_FALLBACK)
std::mutex g_fallback_mutex;
std::map<std::string, uint64_t> g_fallback_counts;
std::set<std::string> g_fallback_warned;

void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& name) {
  TORCH_CHECK_NOT_IMPLEMENTED(cpu_fallback_enabled(), name,
                              ": no tpu lowering for this op, and the CPU fallback is disabled "
                              "(TORCH_TPU_CPU_FALLBACK=0 / torch_tpu.cpu_fallback_mode(False))");
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    ++g_fallback_counts[name];
    first = g_fallback_warned.insert(name).second;
  }
  if (first) {
    TORCH_WARN(name,
               " is not lowered for tpu; running it on the CPU (slow). "
               "Set TORCH_TPU_CPU_FALLBACK=0 to make this an error.");
  }
  at::native::cpu_fallback(op, stack);
}

// ---- arguments ----------------------------------------------------------------

[[noreturn]] void different_devices(c10::DeviceIndex device, const at::Tensor& t) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
              c10::Device(kTpu, device), " and ", t.device(), "!");
}

// One op call being assembled: args for the core, and what keeps them alive.
struct Call {
  std::string_view name;  // NUL-terminated: it views a whole OpFacts::name
  c10::DeviceIndex device = 0;
  const c10::IValue* self = nullptr;  // the op's self argument, if its schema has one
  std::vector<tpurt_arg_t> args;
  std::vector<at::Tensor> tensors;  // parallel to args: the tensor behind a TENSOR arg
  std::vector<at::Tensor> writes;   // the is_write tensors, in order
  // args point into these lists' buffers, which a move of the inner vector
  // keeps (a std::deque would too, but allocates even when no op uses it)
  std::vector<std::vector<int64_t>> int_lists;
  std::vector<std::vector<double>> float_lists;
  at::Generator generator;
  std::unique_lock<std::mutex> generator_lock;

  void push(const tpurt_arg_t& arg, at::Tensor t = {}) {
    args.push_back(arg);
    tensors.push_back(std::move(t));
  }

  // A tensor argument; a 0-d CPU tensor becomes a SCALAR when |scalar_ok|.
  void add_tensor(const at::Tensor& given, bool is_write, bool scalar_ok) {
    tpurt_arg_t arg{};
    arg.is_write = is_write;
    TORCH_CHECK(!is_write || !given.defined() || !(given.is_conj() || given.is_neg()), name,
                ": tpu cannot write through a lazily conjugated or negated view; call resolve_conj() / "
                "resolve_neg() first");
    const at::Tensor t = given.defined() && given.device().type() == kTpu ? resolve_lazy_bits(given) : given;
    if (!t.defined()) {
      arg.kind = TPURT_ARG_NONE;
    } else if (t.device().type() == kTpu) {
      if (t.device().index() != device) different_devices(device, t);
      arg.kind = TPURT_ARG_TENSOR;
      arg.u.tensor = describe(t, name);
    } else if (scalar_ok && !is_write && t.device().is_cpu() && t.dim() == 0 && t.is_complex() &&
               !t.unsafeGetTensorImpl()->is_wrapped_number()) {
      // A 0-d complex CPU tensor (mul(z, torch.tensor(1j)), fill_): the core
      // has no complex scalar, so it goes over as a 0-d device tensor, which
      // promotes as the 0-d tensor it is. (A Python complex number, a wrapped
      // number, would promote by another tier: it stays refused below.)
      const at::Tensor moved = t.to(c10::Device(kTpu, device));
      arg.kind = TPURT_ARG_TENSOR;
      arg.u.tensor = describe(moved, name);
      push(arg, moved);
      return;
    } else if (scalar_ok && !is_write && t.device().is_cpu() && t.dim() == 0) {
      // (never an out= tensor: a 0-d CPU out= is on another device, not a number)
      arg.kind = TPURT_ARG_SCALAR;
      arg.u.scalar.dtype = to_tpurt_dtype(t.scalar_type(), name);
      arg.u.scalar.tier =
          t.unsafeGetTensorImpl()->is_wrapped_number() ? TPURT_TIER_WRAPPED : TPURT_TIER_ZERO_DIM;
      const c10::Scalar value = t.item();
      TORCH_CHECK(!value.isComplex(), name,
                  ": tpu does not support complex scalars (got a 0-d complex cpu tensor)");
      if (value.isFloatingPoint()) {
        arg.u.scalar.f = value.toDouble();
      } else {
        arg.u.scalar.i = value.toLong();
      }
    } else {
      different_devices(device, t);
    }
    if (is_write && t.defined()) writes.push_back(t);
    push(arg, t);
  }

  void add_scalar(const c10::Scalar& s) {
    tpurt_arg_t arg{.kind = TPURT_ARG_SCALAR};
    arg.u.scalar.tier = TPURT_TIER_WRAPPED;
    TORCH_CHECK(!s.isComplex(), name, ": tpu does not support complex scalars");
    TORCH_CHECK(!s.isSymbolic(), name, ": dynamic shapes are not supported on tpu");
    if (s.isFloatingPoint()) {
      arg.u.scalar.dtype = TPURT_DTYPE_F64;
      arg.u.scalar.f = s.toDouble();
    } else if (s.isBoolean()) {
      arg.u.scalar.dtype = TPURT_DTYPE_BOOL;
      arg.u.scalar.i = s.toBool();
    } else {
      arg.u.scalar.dtype = TPURT_DTYPE_I64;
      arg.u.scalar.i = s.toLong();
    }
    push(arg);
  }

  int64_t as_int(const c10::IValue& v) {
    if (v.isInt()) return v.toInt();
    TORCH_CHECK(v.isSymInt() && v.toSymInt().maybe_as_int().has_value(), name,
                ": dynamic shapes are not supported on tpu (got a symbolic int; use dynamic=False)");
    return *v.toSymInt().maybe_as_int();
  }

  void add_generator(const c10::IValue& v) {
    generator = v.isNone() ? default_generator(device) : v.toGenerator();
    TORCH_CHECK(generator.device().type() == kTpu, name, ": expected a tpu generator, got one for ",
                generator.device());
    generator_lock = std::unique_lock<std::mutex>(generator.mutex());
    auto* impl = generator.get<TpuGeneratorImpl>();
    tpurt_arg_t arg{.kind = TPURT_ARG_GENERATOR};
    arg.u.rng.seed = impl->current_seed();
    arg.u.rng.offset = impl->get_offset();
    push(arg);
  }

  void add(const c10::Argument& schema_arg, const c10::IValue& v) {
    c10::TypePtr type = schema_arg.real_type();
    if (auto inner = type->castRaw<c10::OptionalType>()) type = inner->getElementType();
    const bool is_write = schema_arg.alias_info() != nullptr && schema_arg.alias_info()->isWrite();
    if (type->kind() == c10::TypeKind::GeneratorType) return add_generator(v);
    if (v.isNone()) return push({.kind = TPURT_ARG_NONE});
    switch (type->kind()) {
      case c10::TypeKind::TensorType:
        return add_tensor(v.toTensor(), is_write, /*scalar_ok=*/true);
      case c10::TypeKind::NumberType:
        return add_scalar(v.toScalar());
      case c10::TypeKind::FloatType: {
        TORCH_CHECK(v.isDouble(), name, ": dynamic shapes are not supported on tpu (symbolic float)");
        tpurt_arg_t arg{.kind = TPURT_ARG_FLOAT};
        arg.u.scalar = {.dtype = TPURT_DTYPE_F64, .tier = TPURT_TIER_WRAPPED, .f = v.toDouble(), .i = 0};
        return push(arg);
      }
      case c10::TypeKind::IntType:
      case c10::TypeKind::SymIntType:
        return push({.kind = TPURT_ARG_INT, .u = {.i = as_int(v)}});
      case c10::TypeKind::BoolType:
        return push({.kind = TPURT_ARG_BOOL, .u = {.i = v.toBool()}});
      case c10::TypeKind::MemoryFormatType:  // c10::MemoryFormat's value (clone's memory_format)
        return push({.kind = TPURT_ARG_INT, .u = {.i = v.toInt()}});
      case c10::TypeKind::ScalarTypeType: {
        const tpurt_dtype_t dtype = to_tpurt_dtype(static_cast<c10::ScalarType>(v.toInt()), name);
        return push({.kind = TPURT_ARG_DTYPE, .u = {.i = dtype}});
      }
      case c10::TypeKind::StringType:
        return push({.kind = TPURT_ARG_STRING, .u = {.str = v.toStringRef().c_str()}});
      case c10::TypeKind::ListType:
        return add_list(type->expectRef<c10::ListType>().getElementType(), v, is_write);
      default:
        return push({.kind = TPURT_ARG_OTHER});
    }
  }

  // Tensor?[] is always an index list into the op's self (index,
  // index_put: PyTorch's expandTensors). As PyTorch does for CUDA: CPU index
  // tensors move to the device, and a boolean mask of rank k, which must
  // have the shape of the k dims of self it covers, becomes the k long index
  // tensors of its nonzero() (a sync: the number of selected elements is
  // data). The core checks the indices' values (tpurt_op_check_args).
  void add_indices(const c10::IValue& v) {
    std::vector<at::Tensor> items;
    int64_t dim = 0;  // the dim of self the next item indexes
    for (const c10::IValue& item : v.toListRef()) {
      at::Tensor t = item.isNone() ? at::Tensor() : item.toTensor();
      if (t.defined() && t.device().type() != kTpu) t = t.to(c10::Device(kTpu, device));
      if (t.defined() && t.scalar_type() == at::kByte) {
        TORCH_WARN(
            "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.");
      }
      if (t.defined() && (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte)) {
        check_mask(t, dim);
        for (const at::Tensor& column : t.nonzero().unbind(1)) items.push_back(column);
        dim += t.dim();
      } else {
        items.push_back(t);
        ++dim;
      }
    }
    push({.kind = TPURT_ARG_TENSOR_LIST, .u = {.list_len = static_cast<int32_t>(items.size())}});
    for (const at::Tensor& t : items) add_tensor(t, /*is_write=*/false, /*scalar_ok=*/false);
  }

  // PyTorch's IndexError for a mask whose shape is not that of the dims of
  // self from |dim| on: the device would select by a mask of another shape.
  void check_mask(const at::Tensor& mask, int64_t dim) const {
    if (self == nullptr || !self->isTensor()) return;
    const at::Tensor& indexed = self->toTensor();
    for (int64_t j = 0; j < mask.dim(); ++j) {
      TORCH_CHECK_INDEX(dim + j < indexed.dim() && mask.size(j) == indexed.size(dim + j), name,
                        ": The shape of the mask ", mask.sizes(), " at index ", j,
                        " does not match the shape of the indexed tensor ", indexed.sizes(), " at index ",
                        dim + j);
    }
  }

  void add_list(const c10::TypePtr& elem, const c10::IValue& v, bool is_write) {
    c10::TypePtr inner = elem;
    if (auto opt = elem->castRaw<c10::OptionalType>()) inner = opt->getElementType();
    if (inner->kind() == c10::TypeKind::TensorType && elem->castRaw<c10::OptionalType>()) {
      return add_indices(v);
    }
    if (inner->kind() == c10::TypeKind::TensorType) {
      const auto items = v.toListRef();
      push({.kind = TPURT_ARG_TENSOR_LIST, .u = {.list_len = static_cast<int32_t>(items.size())}});
      for (const c10::IValue& item : items) {
        add_tensor(item.isNone() ? at::Tensor() : item.toTensor(), is_write, /*scalar_ok=*/false);
      }
      return;
    }
    if (inner->kind() == c10::TypeKind::IntType || inner->kind() == c10::TypeKind::SymIntType) {
      std::vector<int64_t>& ints = int_lists.emplace_back();
      for (const c10::IValue& item : v.toListRef()) ints.push_back(as_int(item));
      tpurt_arg_t arg{.kind = TPURT_ARG_INT_LIST};
      arg.u.ints = {.data = ints.data(), .len = static_cast<int32_t>(ints.size())};
      return push(arg);
    }
    if (inner->kind() == c10::TypeKind::BoolType) {  // bool[] (output masks): 0/1 ints
      std::vector<int64_t>& ints = int_lists.emplace_back();
      for (const c10::IValue& item : v.toListRef()) ints.push_back(item.toBool() ? 1 : 0);
      tpurt_arg_t arg{.kind = TPURT_ARG_INT_LIST};
      arg.u.ints = {.data = ints.data(), .len = static_cast<int32_t>(ints.size())};
      return push(arg);
    }
    if (inner->kind() == c10::TypeKind::FloatType || inner->kind() == c10::TypeKind::NumberType) {
      std::vector<double>& floats = float_lists.emplace_back();  // float[] and Scalar[]
      for (const c10::IValue& item : v.toListRef()) {
        TORCH_CHECK(!item.isComplexDouble(), name, ": tpu does not support complex scalars");
        floats.push_back(item.isDouble() ? item.toDouble() : item.toScalar().toDouble());
      }
      tpurt_arg_t arg{.kind = TPURT_ARG_FLOAT_LIST};
      arg.u.floats = {.data = floats.data(), .len = static_cast<int32_t>(floats.size())};
      return push(arg);
    }
    push({.kind = TPURT_ARG_OTHER});
  }
};

// The device of the first tpu tensor among the inputs, else the current one.
c10::DeviceIndex call_device(c10::ArrayRef<c10::IValue> inputs) {
  auto tpu_index = [](const c10::IValue& v) -> std::optional<c10::DeviceIndex> {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kTpu) {
      return v.toTensor().device().index();
    }
    return std::nullopt;
  };
  for (const c10::IValue& v : inputs) {
    if (auto index = tpu_index(v)) return *index;
    if (v.isList()) {
      for (const c10::IValue& item : v.toListRef()) {
        if (auto index = tpu_index(item)) return *index;
      }
    }
  }
  return current_device();
}

// ---- results ------------------------------------------------------------------

c10::IValue host_scalar(const at::Tensor& t, const c10::TypePtr& type) {
  const c10::Scalar s = t.item();  // a sync point, through _local_scalar_dense
  switch (type->kind()) {
    case c10::TypeKind::BoolType:
      return s.toBool();
    case c10::TypeKind::IntType:
      return s.toLong();
    case c10::TypeKind::FloatType:
      return s.toDouble();
    default:
      return s;
  }
}

void push_returns(const c10::FunctionSchema& schema, Call& call, tpurt_op_call_t& op,
                  torch::jit::Stack* stack) {
  std::vector<at::Tensor> results;
  for (int32_t k = 0; k < op.num_results; ++k) {
    try {
      results.push_back(tensor_from_result_consume(op.results[k]));
    } catch (...) {
      for (int32_t j = k; j < op.num_results; ++j) tpurt_storage_release(op.results[j].storage);
      throw;
    }
  }
  size_t next_result = 0;
  size_t next_write = 0;
  auto take_result = [&]() -> at::Tensor {
    TORCH_CHECK(next_result < results.size(), call.name, ": the core returned ", results.size(),
                " results, the schema wants more");
    return results[next_result++];
  };
  for (const c10::Argument& ret : schema.returns()) {
    const c10::TypePtr& type = ret.real_type();
    if (ret.alias_info() != nullptr && ret.alias_info()->isWrite()) {
      TORCH_CHECK(next_write < call.writes.size(), call.name,
                  ": schema returns more written tensors than it takes");
      torch::jit::push(stack, call.writes[next_write++]);
    } else if (type->kind() == c10::TypeKind::TensorType) {
      torch::jit::push(stack, take_result());
    } else if (type->kind() == c10::TypeKind::ListType) {
      std::vector<at::Tensor> rest(results.begin() + next_result, results.end());
      next_result = results.size();
      torch::jit::push(stack, std::move(rest));
    } else if (next_result < results.size() && op.results[next_result].is_host_int) {
      // a number the core knew without the device (no sync)
      const int64_t value = op.results[next_result++].host_int;
      if (type->kind() == c10::TypeKind::BoolType) {
        torch::jit::push(stack, value != 0);
      } else if (type->kind() == c10::TypeKind::FloatType) {
        torch::jit::push(stack, static_cast<double>(value));
      } else {
        torch::jit::push(stack, value);
      }
    } else {
      torch::jit::push(stack, host_scalar(take_result(), type));
    }
  }
}

// ---- debug eager checks ----------------------------------------------------------
//
// In DEFER_NEVER_AND_LAUNCH_BLOCKING every op is also checked: its argument
// values before it runs (the core's tpurt_op_check_args, which then reads
// device tensors: the device clamps indices, as a TPU does), and its results
// against PyTorch's meta kernel after. Both cost syncs; that is what debug
// mode is for.

bool debug_mode() { return tpurt_get_eager_mode() == TPURT_MODE_LAUNCH_BLOCKING; }

// torch.get_float32_matmul_precision(), read at every op: it is part of the
// op's key, so changing it between calls never reuses a program built for
// another precision.
tpurt_matmul_precision_t matmul_precision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGH:
      return TPURT_MATMUL_PRECISION_HIGH;
    case at::Float32MatmulPrecision::MEDIUM:
      return TPURT_MATMUL_PRECISION_MEDIUM;
    default:
      return TPURT_MATMUL_PRECISION_HIGHEST;
  }
}

// ---- checks in every mode (no device work) ------------------------------------------

// Writes through a tensor with self-overlap (an expanded view) or into memory
// an input partly shares are rejected with PyTorch's own error, as its CPU
// kernels do: on the device they would give an order-dependent answer. Only
// metadata is read.
void check_write_overlap(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> in) {
  const auto& args = schema.arguments();
  for (size_t w = 0; w < args.size() && w < in.size(); ++w) {
    const c10::AliasInfo* alias = args[w].alias_info();
    if (!alias || !alias->isWrite() || !in[w].isTensor()) continue;
    const at::Tensor& out = in[w].toTensor();
    if (!out.defined() || out.numel() <= 1) continue;
    at::assert_no_internal_overlap(out);
    for (size_t r = 0; r < in.size(); ++r) {
      if (r == w || !in[r].isTensor()) continue;
      const at::Tensor& input = in[r].toTensor();
      if (input.defined() && input.device() == out.device()) at::assert_no_partial_overlap(out, input);
    }
  }
}

// The op's results as PyTorch's meta kernel gives them (shapes, dtypes,
// strides), or false if the op has no meta kernel.
bool run_meta(const c10::OperatorHandle& op, const std::vector<c10::IValue>& inputs,
              torch::jit::Stack* meta) {
  auto to_meta = [](const c10::IValue& v) -> c10::IValue {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kTpu) {
      const at::Tensor& t = v.toTensor();
      return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
    }
    return v;
  };
  for (const c10::IValue& v : inputs) {
    if (v.isTensorList() || (v.isList() && !v.toListRef().empty() && v.toListRef()[0].isTensor())) {
      std::vector<at::Tensor> items;
      for (const c10::IValue& item : v.toListRef()) items.push_back(to_meta(item).toTensor());
      meta->emplace_back(items);
    } else {
      meta->push_back(to_meta(v));
    }
  }
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), meta);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Runs the op on meta tensors and compares each tensor result's shape and
// dtype with ours: a mismatch is a bug in a lowering rule.
void check_against_meta(const c10::OperatorHandle& op, const std::string& name,
                        const std::vector<c10::IValue>& inputs, const torch::jit::Stack& outputs) {
  torch::jit::Stack meta;
  if (!run_meta(op, inputs, &meta)) return;  // no meta kernel: nothing to compare with
  for (size_t i = 0; i < outputs.size() && i < meta.size(); ++i) {
    if (!outputs[i].isTensor() || !meta[i].isTensor()) continue;
    const at::Tensor &ours = outputs[i].toTensor(), &theirs = meta[i].toTensor();
    if (!ours.defined() || !theirs.defined()) continue;
    TORCH_CHECK(ours.sizes() == theirs.sizes() && ours.scalar_type() == theirs.scalar_type(), name,
                ": internal error in the tpu lowering: result ", i, " has shape ", ours.sizes(),
                " and dtype ", ours.scalar_type(), ", PyTorch's meta kernel says shape ", theirs.sizes(),
                " and dtype ", theirs.scalar_type());
  }
}

// While tracing for torch.compile, results take the strides PyTorch's meta
// kernel gives them: the graph was captured with those strides and may view
// a result in a way only they allow. Our results are dense in logical order;
// a result whose meta strides differ is copied into that layout (one more
// op in the traced program, which XLA folds into a transpose).
void match_meta_strides(const c10::OperatorHandle& op, const std::vector<c10::IValue>& inputs,
                        c10::ArrayRef<c10::IValue> returns, torch::jit::Stack* stack, size_t first) {
  torch::jit::Stack meta;
  if (!run_meta(op, inputs, &meta)) return;
  for (size_t i = 0; i < returns.size() && i < meta.size(); ++i) {
    if (!returns[i].isTensor() || !meta[i].isTensor()) continue;
    const at::Tensor &ours = returns[i].toTensor(), &theirs = meta[i].toTensor();
    if (!ours.defined() || !theirs.defined() || ours.sizes() != theirs.sizes() || ours.numel() <= 1) continue;
    if (ours.strides() == theirs.strides() || !theirs.is_non_overlapping_and_dense()) continue;
    at::Tensor laid_out = at::empty_strided(theirs.sizes(), theirs.strides(), ours.options());
    laid_out.copy_(ours);
    (*stack)[first + i] = laid_out;
  }
}

// ---- the kernel ---------------------------------------------------------------

// An operator's "name.overload" and whether the core has a rule for it,
// worked out once per operator and thread: building the string and looking
// the rule up on every call was a visible share of recording an op.
struct OpFacts {
  std::string name;
  bool supported = false;
  tpurt_op_facts_t core{};  // what the op's row says the call must add or check
  int self_arg = -1;        // the schema position of self (what an index list indexes)
};

bool names(const std::string& name, const c10::FunctionSchema& schema) {
  const std::string &base = schema.name(), &overload = schema.overload_name();
  if (name.compare(0, base.size(), base) != 0) return false;
  if (overload.empty()) return name.size() == base.size();
  return name.size() == base.size() + 1 + overload.size() && name[base.size()] == '.' &&
         name.compare(base.size() + 1, overload.size(), overload) == 0;
}

const OpFacts& op_facts(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, OpFacts> known;
  OpFacts& facts = known[&schema];
  // An address can come back for another operator once one is deregistered
  // (a torch.library fragment that went away), so the name is checked too.
  if (facts.name.empty() || !names(facts.name, schema)) {
    facts.name = schema.name();
    if (!schema.overload_name().empty()) facts.name += "." + schema.overload_name();
    facts.supported = tpurt_op_supported(facts.name.c_str());
    facts.core = tpurt_op_facts(facts.name.c_str());
    facts.self_arg = schema.argumentIndexWithName("self").value_or(-1);
  }
  return facts;
}

// An out= (written) tensor on another device than the op's tpu tensors is
// refused with PyTorch's error, in every path: the CPU fallback would
// otherwise fail later, copying its result back, with a dispatcher error.
void check_out_devices(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> in) {
  const auto& args = schema.arguments();
  std::optional<c10::DeviceIndex> tpu;
  for (const c10::IValue& v : in) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().type() == kTpu) {
      tpu = v.toTensor().device().index();
      break;
    }
  }
  if (!tpu) return;
  for (size_t i = 0; i < args.size() && i < in.size(); ++i) {
    const c10::AliasInfo* alias = args[i].alias_info();
    if (!alias || !alias->isWrite() || !in[i].isTensor()) continue;
    const at::Tensor& out = in[i].toTensor();
    if (out.defined() && out.device().type() != kTpu) different_devices(*tpu, out);
  }
}

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const OpFacts& facts = op_facts(schema);
  const std::string& name = facts.name;
  check_out_devices(schema, torch::jit::last(*stack, schema.arguments().size()));
  if (!facts.supported) return run_on_cpu(op, stack, name);

  const size_t num_inputs = schema.arguments().size();
  const auto inputs = torch::jit::last(*stack, num_inputs);
  const bool debug = debug_mode();
  const bool tracing = tpurt_get_eager_mode() == TPURT_MODE_INTERNAL_DEFER_ALL;
  std::vector<c10::IValue> debug_inputs;
  check_write_overlap(schema, inputs);
  if (debug || tracing) debug_inputs.assign(inputs.begin(), inputs.end());
  Call call;
  call.name = name;
  call.device = call_device(inputs);
  if (facts.self_arg >= 0 && static_cast<size_t>(facts.self_arg) < num_inputs)
    call.self = &inputs[facts.self_arg];
  call.args.reserve(num_inputs + 1);
  call.tensors.reserve(num_inputs + 1);
  const c10::DeviceGuard guard(c10::Device(kTpu, call.device));
  for (size_t i = 0; i < num_inputs; ++i) call.add(schema.arguments()[i], inputs[i]);
  // Random ops whose schema has no Generator draw from the device's default
  // one, passed as a trailing argument like an explicit generator would be.
  if (facts.core.default_generator) call.add_generator(c10::IValue());

  // Room for one result per argument covers Tensor[] returns (_foreach_*).
  std::array<tpurt_result_t, TPURT_MAX_RESULTS> inline_results;
  std::vector<tpurt_result_t> many_results;
  tpurt_op_call_t run{};
  run.name = call.name.data();
  run.args = call.args.data();
  run.num_args = static_cast<int32_t>(call.args.size());
  run.device = call.device;
  run.matmul_precision = matmul_precision();
  run.results = inline_results.data();
  run.max_results = TPURT_MAX_RESULTS;
  if (call.args.size() > TPURT_MAX_RESULTS) {
    many_results.resize(call.args.size());
    run.results = many_results.data();
    run.max_results = static_cast<int32_t>(many_results.size());
  }
  if (facts.core.checks_args) {
    // Argument values the program would use anyway (an index out of bounds,
    // a zero integer divisor); only debug eager pays for reading device ones.
    tpurt_status_t status = tpurt_op_check_args(&run, debug ? tpurt_tensor_read_host : nullptr);
    if (status != nullptr) raise_status_consume(status, name);
  }
  for (int attempt = 0;; ++attempt) {
    tpurt_status_t status = tpurt_op_run(&run);
    if (status == nullptr) break;
    if (tpurt_status_code(status) == TPURT_UNIMPLEMENTED && attempt == 0) {
      // The rule declined this form of the op before anything ran: the
      // CPU fallback can still do it (or say clearly that it is disabled).
      tpurt_status_free(status);
      if (call.generator_lock.owns_lock()) call.generator_lock.unlock();
      return run_on_cpu(op, stack, name);
    }
    if (tpurt_status_code(status) != TPURT_NEEDS_RESIZE || attempt >= 3) raise_status_consume(status, name);
    tpurt_status_free(status);
    const int32_t i = run.resize_arg;
    TORCH_CHECK(i >= 0 && i < run.num_args && call.args[i].kind == TPURT_ARG_TENSOR, name,
                ": the core asked to resize argument ", i, ", which is not a tensor");
    at::native::resize_output(call.tensors[i], c10::IntArrayRef(run.resize_sizes, run.resize_rank));
    call.args[i].u.tensor = describe(call.tensors[i], name);
    run.num_results = 0;
  }
  if (call.generator.defined()) {
    auto* impl = call.generator.get<TpuGeneratorImpl>();
    impl->set_offset(impl->get_offset() + 1);
    call.generator_lock.unlock();
  }
  torch::jit::drop(*stack, num_inputs);
  push_returns(schema, call, run, stack);
  const size_t num_returns = schema.returns().size();
  if (debug) check_against_meta(op, name, debug_inputs, torch::jit::last(*stack, num_returns).vec());
  if (tracing) {
    const std::vector<c10::IValue> returns = torch::jit::last(*stack, num_returns).vec();
    match_meta_strides(op, debug_inputs, returns, stack, stack->size() - num_returns);
  }
}

}  // namespace

namespace {

// Ops whose PyTorch kernel must stay: copies that cross devices (they reach
// _copy_from), and views (they must alias, never compute).
bool keeps_pytorch_kernel(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  if (name.name == "aten::copy_" || name.name == "aten::_to_copy") return true;
  for (const c10::Argument& ret : op.schema().returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) return true;
  }
  return false;
}

}  // namespace

void register_core_ops() {
  // PyTorch gives many ops a composite kernel for every backend (add.Tensor
  // computes its meta and calls add.out; abs calls abs.out), and a composite
  // wins over a backend fallback. An op the core lowers itself is registered
  // here by name so that it reaches the core as it is. Ops with an explicit
  // PrivateUse1 kernel (views, copies, factories) keep it.
  static auto* library =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& op : dispatcher.getAllOpNames()) {
      if (op.name.rfind("aten::", 0) != 0) continue;
      const std::string name = op.overload_name.empty() ? op.name : op.name + "." + op.overload_name;
      if (!tpurt_op_supported(name.c_str())) continue;
      const auto handle = dispatcher.findOp(op);
      if (!handle || handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
          keeps_pytorch_kernel(*handle)) {
        continue;
      }
      library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
    }
  });
}

bool cpu_fallback_enabled() {
  int enabled = g_fallback_enabled.load();
  if (enabled < 0) {
    enabled = tpurt_config()->cpu_fallback ? 1 : 0;  // TORCH_TPU_CPU_FALLBACK, parsed by the core
    g_fallback_enabled.store(enabled);
  }
  return enabled != 0;
}

void set_cpu_fallback_enabled(bool enabled) { g_fallback_enabled.store(enabled ? 1 : 0); }

std::map<std::string, uint64_t> cpu_fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  return g_fallback_counts;
}

void reset_cpu_fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  g_fallback_counts.clear();
}

// Quantized tensors (quint8, qint8, ...) have no tpu storage: every op on the
// QuantizedPrivateUse1 key is refused by name, instead of the dispatcher's
// "could not run ... from the 'Quantizedtpu' backend" and its list of keys.
void quantized_refusal(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().name(),
                              ": tpu does not support quantized tensors (quint8, qint8, qint32, quint4x2); "
                              "dequantize() them on the CPU first");
}

}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_tpu::tpu_boxed_kernel>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_tpu::quantized_refusal>());
}
