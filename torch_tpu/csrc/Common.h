// Common.h: what the glue files share. Each declaration is defined in the
// file named beside it; no file here decides op semantics (that is the core).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "Status.h"
#include "tpurt.h"

namespace torch_tpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// ---- Tensor.cpp: dtypes and views ------------------------------------------
std::optional<tpurt_dtype_t> to_tpurt_dtype(c10::ScalarType type);
// Throws "<op>: tpu does not support dtype ComplexFloat" for unmapped types.
tpurt_dtype_t to_tpurt_dtype(c10::ScalarType type, std::string_view op);
c10::ScalarType to_torch_dtype(tpurt_dtype_t dtype);
// The core's view of a tpu tensor: storage (borrowed), dtype, sizes, strides.
tpurt_tensor_t describe(const at::Tensor& t, std::string_view op);
// |t| without PyTorch's lazy conjugate and negative bits (conj(), and the
// views some ops make of it): the value they stand for, computed on the
// device. The core reads storages as they are, so every tensor it reads
// goes through this first; |t| itself when no bit is set.
at::Tensor resolve_lazy_bits(const at::Tensor& t);
// Wraps a core result as a dense tpu tensor; consumes its storage reference.
at::Tensor tensor_from_result_consume(const tpurt_result_t& result);

// ---- Allocator.cpp: storages -----------------------------------------------
// A DataPtr for |storage| that owns one reference (released by its deleter).
c10::DataPtr make_data_ptr(tpurt_storage_t* storage);
// The core storage behind a tpu tensor's storage; throws if there is none.
tpurt_storage_t* storage_of(const c10::Storage& storage, std::string_view op);
// Grows (or shrinks) a tpu storage in place, keeping its contents.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);
// Pinned host memory (the core's host blocks) for pin_memory().
c10::Allocator* host_allocator();
// What the plugin (or, for the CPU plugin, the host) says of |device|'s memory.
tpurt_device_memory_t device_memory(c10::DeviceIndex device);

// ---- Guard.cpp: devices ----------------------------------------------------
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
// Initialises the runtime if needed; 0 on any failure, never throws.
c10::DeviceIndex device_count() noexcept;

// ---- Generator.cpp: RNG state (seed, offset) per generator ------------------
struct TpuGeneratorImpl : public c10::GeneratorImpl {
  explicit TpuGeneratorImpl(c10::DeviceIndex index);
  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return kTpu; }

 private:
  TpuGeneratorImpl* clone_impl() const override;
  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);

// ---- Kernel.cpp: the core's ops, the CPU fallback switch and counters --------
// Registers the boxed kernel by name for each op the core supports (once).
void register_core_ops();
bool cpu_fallback_enabled();
void set_cpu_fallback_enabled(bool enabled);
std::map<std::string, uint64_t> cpu_fallback_counts();
void reset_cpu_fallback_counts();

}  // namespace torch_tpu
