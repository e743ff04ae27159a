// Allocator.cpp: PrivateUse1 storages are core storage objects. The DataPtr's
// data is a fake, never dereferenced address; its context is the storage.
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include "Common.h"

namespace torch_tpu {
namespace {

void release(void* ctx) { tpurt_storage_release(static_cast<tpurt_storage_t*>(ctx)); }

struct TpuAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    tpurt_storage_t* storage = nullptr;
    check(tpurt_storage_create(current_device(), nbytes, &storage), "tpu allocator");
    return make_data_ptr(storage);
  }

  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu storages hold no host bytes to copy; copy tensors (tensor.copy_) instead");
  }
};

TpuAllocator g_allocator;

}  // namespace

c10::DataPtr make_data_ptr(tpurt_storage_t* storage) {
  return {tpurt_storage_address(storage), storage, &release,
          c10::Device(kTpu, static_cast<c10::DeviceIndex>(tpurt_storage_device(storage)))};
}

tpurt_storage_t* storage_of(const c10::Storage& storage, std::string_view op) {
  const c10::DataPtr& ptr = storage.data_ptr();
  TORCH_CHECK(ptr.get_deleter() == &release && ptr.get_context() != nullptr, op,
              ": tensor on tpu has no tpu storage behind it");
  return static_cast<tpurt_storage_t*>(ptr.get_context());
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  if (storage.data_ptr().get_context() == nullptr) {  // never allocated
    impl->set_data_ptr_noswap(g_allocator.allocate(nbytes));
  } else {
    tpurt_storage_t* st = storage_of(storage, "resize_");
    check(tpurt_storage_resize(st, nbytes), "resize_");
    tpurt_storage_retain(st);                      // the new DataPtr's reference; the old one drops its own
    impl->set_data_ptr_noswap(make_data_ptr(st));  // the address may move with the size
  }
  impl->set_nbytes(nbytes);
}

}  // namespace torch_tpu

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &torch_tpu::g_allocator);
