// Generator.cpp: a tpu generator is a (seed, offset) pair. The core derives
// random bits from it; the kernel advances the offset after each random op.
// State is 16 bytes [seed u64, offset u64] as a CPU uint8 tensor.
#include <ATen/core/Generator.h>
#include <ATen/ops/empty.h>
#include <c10/core/GeneratorImpl.h>

#include <cstring>
#include <map>
#include <mutex>

#include "Common.h"

namespace torch_tpu {

TpuGeneratorImpl::TpuGeneratorImpl(c10::DeviceIndex index)
    : c10::GeneratorImpl(c10::Device(kTpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

void TpuGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void TpuGeneratorImpl::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t TpuGeneratorImpl::get_offset() const { return offset_; }
uint64_t TpuGeneratorImpl::current_seed() const { return seed_; }

uint64_t TpuGeneratorImpl::seed() {
  set_current_seed(c10::detail::getNonDeterministicRandom());
  return seed_;
}

c10::intrusive_ptr<c10::TensorImpl> TpuGeneratorImpl::get_state() const {
  at::Tensor state = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  const uint64_t words[2] = {seed_, offset_};
  std::memcpy(state.data_ptr(), words, sizeof words);
  return state.getIntrusivePtr();
}

void TpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(new_state.numel() == 16, "tpu generator state must be 16 bytes [seed, offset], got ",
              new_state.numel());
  uint64_t words[2];
  std::memcpy(words, new_state.data(), sizeof words);
  seed_ = words[0];
  offset_ = words[1];
}

TpuGeneratorImpl* TpuGeneratorImpl::clone_impl() const {
  auto* copy = new TpuGeneratorImpl(device().index());
  copy->seed_ = seed_;
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, at::Generator> generators;  // node-stable references
  if (index < 0) index = current_device();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = generators.find(index);
  if (it == generators.end()) it = generators.emplace(index, new_generator(index)).first;
  return it->second;
}

at::Generator new_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  return at::make_generator<TpuGeneratorImpl>(index);
}

}  // namespace torch_tpu
