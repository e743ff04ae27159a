// Tensor.cpp: dtypes both ways, a tpu tensor as the core sees it, and a core
// result as a PyTorch tensor.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_conj_physical.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/neg.h>
#include <c10/core/TensorImpl.h>

#include "Common.h"

namespace torch_tpu {

std::optional<tpurt_dtype_t> to_tpurt_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::kBool:
      return TPURT_DTYPE_BOOL;
    case c10::kByte:
      return TPURT_DTYPE_U8;
    case c10::kChar:
      return TPURT_DTYPE_I8;
    case c10::kShort:
      return TPURT_DTYPE_I16;
    case c10::kInt:
      return TPURT_DTYPE_I32;
    case c10::kLong:
      return TPURT_DTYPE_I64;
    case c10::kHalf:
      return TPURT_DTYPE_F16;
    case c10::kBFloat16:
      return TPURT_DTYPE_BF16;
    case c10::kFloat:
      return TPURT_DTYPE_F32;
    case c10::kDouble:
      return TPURT_DTYPE_F64;
    case c10::kUInt16:
      return TPURT_DTYPE_U16;
    case c10::kUInt32:
      return TPURT_DTYPE_U32;
    case c10::kUInt64:
      return TPURT_DTYPE_U64;
    case c10::kFloat8_e4m3fn:
      return TPURT_DTYPE_F8E4M3FN;
    case c10::kFloat8_e5m2:
      return TPURT_DTYPE_F8E5M2;
    case c10::kFloat8_e4m3fnuz:
      return TPURT_DTYPE_F8E4M3FNUZ;
    case c10::kFloat8_e5m2fnuz:
      return TPURT_DTYPE_F8E5M2FNUZ;
    case c10::kComplexFloat:
      return TPURT_DTYPE_C64;
    case c10::kComplexDouble:
      return TPURT_DTYPE_C128;
    default:
      return std::nullopt;
  }
}

tpurt_dtype_t to_tpurt_dtype(c10::ScalarType type, std::string_view op) {
  std::optional<tpurt_dtype_t> dtype = to_tpurt_dtype(type);
  TORCH_CHECK(dtype.has_value(), op, ": tpu does not support dtype ", type);
  return *dtype;
}

c10::ScalarType to_torch_dtype(tpurt_dtype_t dtype) {
  switch (dtype) {
    case TPURT_DTYPE_BOOL:
      return c10::kBool;
    case TPURT_DTYPE_U8:
      return c10::kByte;
    case TPURT_DTYPE_I8:
      return c10::kChar;
    case TPURT_DTYPE_I16:
      return c10::kShort;
    case TPURT_DTYPE_I32:
      return c10::kInt;
    case TPURT_DTYPE_I64:
      return c10::kLong;
    case TPURT_DTYPE_F16:
      return c10::kHalf;
    case TPURT_DTYPE_BF16:
      return c10::kBFloat16;
    case TPURT_DTYPE_F32:
      return c10::kFloat;
    case TPURT_DTYPE_F64:
      return c10::kDouble;
    case TPURT_DTYPE_U16:
      return c10::kUInt16;
    case TPURT_DTYPE_U32:
      return c10::kUInt32;
    case TPURT_DTYPE_U64:
      return c10::kUInt64;
    case TPURT_DTYPE_F8E4M3FN:
      return c10::kFloat8_e4m3fn;
    case TPURT_DTYPE_F8E5M2:
      return c10::kFloat8_e5m2;
    case TPURT_DTYPE_F8E4M3FNUZ:
      return c10::kFloat8_e4m3fnuz;
    case TPURT_DTYPE_F8E5M2FNUZ:
      return c10::kFloat8_e5m2fnuz;
    case TPURT_DTYPE_C64:
      return c10::kComplexFloat;
    case TPURT_DTYPE_C128:
      return c10::kComplexDouble;
    default:
      TORCH_CHECK(false, "tpu: the core returned an invalid dtype (", static_cast<int>(dtype), ")");
  }
}

tpurt_tensor_t describe(const at::Tensor& t, std::string_view op) {
  TORCH_CHECK(t.dim() <= TPURT_MAX_RANK, op, ": tpu tensors have at most ", TPURT_MAX_RANK,
              " dimensions, got ", t.dim());
  tpurt_tensor_t view{};
  view.storage = storage_of(t.storage(), op);
  view.dtype = to_tpurt_dtype(t.scalar_type(), op);
  view.rank = static_cast<int32_t>(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    view.sizes[d] = t.size(d);
    view.strides[d] = t.stride(d);
  }
  view.offset = t.storage_offset();
  return view;
}

at::Tensor resolve_lazy_bits(const at::Tensor& t) {
  at::Tensor r = t;
  // _conj and _neg_view flip the bit back: the storage's own values, which
  // the device then conjugates (the _conj_physical rule) or negates
  if (r.is_conj()) r = at::_conj_physical(at::_conj(r));
  if (r.is_neg()) r = at::neg(at::_neg_view(r));
  return r;
}

at::Tensor tensor_from_result_consume(const tpurt_result_t& result) {
  if (result.storage == nullptr) return at::Tensor();  // an undefined tensor (None)
  const c10::ScalarType type = to_torch_dtype(result.dtype);
  c10::IntArrayRef sizes(result.sizes, result.rank);
  const size_t nbytes = static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(type);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, make_data_ptr(result.storage),
                       c10::GetAllocator(kTpu), /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                          c10::scalarTypeToTypeMeta(type));
  if (result.has_strides) {
    t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, c10::IntArrayRef(result.strides, result.rank));
  } else {
    t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  }
  return t;
}

}  // namespace torch_tpu
