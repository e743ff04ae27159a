// Views.cpp: the ops PyTorch needs registered explicitly for PrivateUse1.
// View ops stay PyTorch's own metadata kernels (so aliasing survives); the
// rest create, resize, point and copy storages, or read one element.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "Common.h"

namespace torch_tpu {
namespace {

constexpr c10::DispatchKeySet kTpuKeys(c10::DispatchKey::PrivateUse1);

void check_factory(std::string_view op, c10::ScalarType dtype, std::optional<c10::Layout> layout,
                   std::optional<bool> pin_memory) {
  // which dtypes the platform has comes from its plugin, asked once per dtype
  check_consume(tpurt_dtype_check(to_tpurt_dtype(dtype, op)), op);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, op,
              ": tpu supports only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), op, ": only CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const c10::ScalarType type = c10::dtype_or_default(dtype);
  check_factory("aten::empty.memory_format", type, layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, c10::GetAllocator(kTpu), kTpuKeys, type, memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const c10::ScalarType type = c10::dtype_or_default(dtype);
  check_factory("aten::empty_strided", type, layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, c10::GetAllocator(kTpu), kTpuKeys, type);
}

// Sizes and strides as given; the storage grows (never shrinks) to fit.
void set_geometry(const at::Tensor& self, c10::IntArrayRef size, at::OptionalIntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  const size_t itemsize = self.dtype().itemsize();
  size_t nbytes = 0;
  if (stride.has_value()) {
    impl->set_sizes_and_strides(size, *stride);
    nbytes = at::detail::computeStorageNbytes(size, *stride, itemsize, impl->storage_offset());
  } else {
    impl->set_sizes_contiguous(size);
    nbytes = at::detail::computeStorageNbytesContiguous(size, itemsize, impl->storage_offset());
  }
  if (nbytes > self.storage().nbytes()) resize_storage_bytes(self.storage(), nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  if (self.sizes() != size) set_geometry(self, size, std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_offset_(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                                c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  set_geometry(self, size, stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt);
  return self;
}

at::Tensor& set_storage_(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset_(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_tensor_(at::Tensor& self, const at::Tensor& source) {
  if (!self.is_same(source)) {
    set_storage_offset_(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
  }
  return self;
}

at::Tensor& set_empty_(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(kTpu), /*resizable=*/true);
  return set_storage_offset_(self, std::move(storage), 0, {0}, {});
}

// self -> dst. The core converts dtypes device-side; host copies go through a
// dense host tensor of the tpu side's dtype.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  constexpr std::string_view op = "aten::_copy_from";
  if (dst.numel() == 0) return dst;
  if (dst.is_conj() || dst.is_neg()) {
    // a lazily conjugated (negated) destination: its storage takes the
    // conjugate (negation) of the value; flipping both bits says just that
    at::Tensor storage_view = dst, value = self;
    if (dst.is_conj()) {
      storage_view = at::_conj(storage_view);
      value = at::_conj(value);
    }
    if (dst.is_neg()) {
      storage_view = at::_neg_view(storage_view);
      value = at::_neg_view(value);
    }
    copy_from(value, storage_view, non_blocking);
    return dst;
  }
  if (dst.device().type() == kTpu && self.device().type() == kTpu) {
    const c10::DeviceGuard guard(dst.device());
    // as PyTorch's copy_ on the CPU: no write through an expanded view, no
    // source that partly overlaps the destination (the order would matter)
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, self);
    const tpurt_tensor_t to = describe(dst, op);
    const at::Tensor source = resolve_lazy_bits(self).expand_as(dst);
    const tpurt_tensor_t from = describe(source, op);
    check_consume(tpurt_tensor_copy(&to, &from), op);
  } else if (dst.device().type() == kTpu) {
    TORCH_CHECK(self.is_cpu(), op, ": cannot copy from ", self.device(), " to ", dst.device());
    const c10::DeviceGuard guard(dst.device());
    const at::Tensor host =
        self.to(dst.scalar_type()).resolve_conj().resolve_neg().expand_as(dst).contiguous();
    const tpurt_tensor_t to = describe(dst, op);
    check_consume(tpurt_tensor_write_host(&to, host.const_data_ptr(), host.nbytes()), op);
  } else {
    TORCH_CHECK(dst.is_cpu(), op, ": cannot copy from ", self.device(), " to ", dst.device());
    const c10::DeviceGuard guard(self.device());
    const at::Tensor source = resolve_lazy_bits(self);
    const tpurt_tensor_t from = describe(source, op);
    const bool direct = dst.is_contiguous() && dst.scalar_type() == self.scalar_type() &&
                        dst.sizes() == self.sizes() && !dst.is_conj() && !dst.is_neg();
    // non_blocking into pinned memory: queued on the device, complete at the
    // next event or synchronize (as CUDA). Anywhere else it waits.
    if (non_blocking && direct && tpurt_host_contains(dst.const_data_ptr())) {
      check_consume(tpurt_tensor_read_host_async(&from, dst.mutable_data_ptr(), dst.nbytes()), op);
      return dst;
    }
    const at::Tensor host = direct ? dst : at::empty(self.sizes(), self.options().device(at::kCPU));
    check_consume(tpurt_tensor_read_host(&from, host.mutable_data_ptr(), host.nbytes()), op);
    if (!direct) const_cast<at::Tensor&>(dst).copy_(host);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  const at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  copy_from(self, host, false);  // a sync point
  return at::native::_local_scalar_dense_cpu(host);
}

// `param.data = t` (set_data) between cpu and tpu, as CUDA allows between
// cpu and cuda. PyTorch's own check (TensorImpl::has_compatible_shallow_copy_type)
// counts only its built-in backends as dense, so it would refuse a cpu/tpu
// pair; diffusers' group offloading swaps parameters' data across devices.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::Layout::Strided && (t.device().is_cpu() || t.device().type() == kTpu);
  };
  if (dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// Tensor.record_stream(s): CUDA's caching allocator must not hand a block to
// another tensor while a side stream still uses it. A tpu storage is a PJRT
// buffer that the plugin keeps alive until the work queued on it is done, so
// there is nothing to record (diffusers' group offloading with streams calls
// it); the stream must still be a tpu stream.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kTpu, "record_stream: expected a tpu stream for a tpu tensor, got a ",
              stream.device_type(), " stream");
  (void)self;
}

}  // namespace
}  // namespace torch_tpu

// Registered above autograd: the op is CompositeImplicitAutograd, whose
// kernel would otherwise answer before the backend key is reached.
// _copy_from sees the conjugate and negative bits itself (copy_from resolves
// a source's and flips a destination's): PyTorch's fallback for those keys
// would copy a lazily conjugated destination first and write into the copy.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(torch_tpu::has_compatible_shallow_copy_type));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(torch_tpu::has_compatible_shallow_copy_type));
  using namespace torch_tpu;
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  // complex <-> (..., 2) real views of one storage; the engine reads and
  // writes a complex storage through a real view by its parts (view.c)
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset_));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor_));
  m.impl("set_", TORCH_FN(set_empty_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
}
