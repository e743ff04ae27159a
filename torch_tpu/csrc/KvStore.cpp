// KvStore.cpp: a multi-process PJRT client's key-value store served from
// torch.distributed's own Store (the one torchrun and init_process_group set
// up), so that a job has one rendezvous. The core calls get/put from the
// plugin's threads while it creates the client (tpurt_runtime_set_distributed);
// this file only moves bytes between the two interfaces.
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "Common.h"

namespace torch_tpu {
namespace {

// The store the client was told about. Never freed: the plugin may call it
// for as long as the client lives, which is until the process exits.
struct Held {
  c10::intrusive_ptr<c10d::Store> store;
};
Held* g_held;  // the last one given (a later call before the runtime starts replaces it)

tpurt_status_t store_error(tpurt_status_code_t code, const char* what, const std::string& key,
                           const std::exception& e) {
  return tpurt_status_create(code, "torch.distributed store: %s '%s': %s", what, key.c_str(), e.what());
}

// c10d's TCPStore and PrefixStore are C++ and thread-safe; a store written
// in Python takes the GIL in pybind's trampoline.
tpurt_status_t kv_get(void* user, const char* key, size_t key_size, int64_t timeout_ms, char** out_value,
                      size_t* out_size) {
  *out_value = nullptr;
  *out_size = 0;
  const std::string k(key, key_size);
  auto& store = *static_cast<Held*>(user)->store;
  try {
    store.wait({k}, std::chrono::milliseconds(timeout_ms));
  } catch (const std::exception& e) {
    // c10d reports a wait that ran out (DistStoreError) and a lost
    // connection alike; either way the key did not come in time.
    return store_error(TPURT_DEADLINE_EXCEEDED, "waiting for", k, e);
  }
  try {
    const std::vector<uint8_t> value = store.get(k);
    char* copy = static_cast<char*>(std::malloc(value.empty() ? 1 : value.size()));
    if (!copy) return tpurt_status_create(TPURT_RESOURCE_EXHAUSTED, "torch.distributed store: out of memory");
    if (!value.empty()) std::memcpy(copy, value.data(), value.size());
    *out_value = copy;
    *out_size = value.size();
    return nullptr;
  } catch (const std::exception& e) {
    return store_error(TPURT_UNAVAILABLE, "reading", k, e);
  }
}

tpurt_status_t kv_put(void* user, const char* key, size_t key_size, const char* value, size_t value_size) {
  const std::string k(key, key_size);
  try {
    static_cast<Held*>(user)->store->set(k, std::vector<uint8_t>(value, value + value_size));
    return nullptr;
  } catch (const std::exception& e) {
    return store_error(TPURT_UNAVAILABLE, "writing", k, e);
  }
}

}  // namespace

void register_kv_store_bindings(py::module& m) {
  m.def(
      "_set_distributed_client",
      [](const c10::intrusive_ptr<c10d::Store>& store, int64_t node_id, int64_t num_nodes) -> bool {
        TORCH_CHECK(store, "_set_distributed_client: no store given");
        auto* held = new Held{store};
        const tpurt_kv_store_t kv{held, &kv_get, &kv_put};
        tpurt_status_t status = tpurt_runtime_set_distributed(node_id, num_nodes, &kv);
        if (tpurt_status_code(status) == TPURT_FAILED_PRECONDITION) {
          tpurt_status_free(status);
          delete held;
          return false;
        }
        if (status) {
          delete held;
          check_consume(status, "_set_distributed_client");
        }
        delete g_held;  // not started yet: nothing calls the old one
        g_held = held;
        return true;
      },
      py::arg("store"), py::arg("node_id"), py::arg("num_nodes"),
      "Creates the PJRT client, when the runtime starts, as node |node_id| of |num_nodes| with key-value "
      "callbacks served from |store|. False when the runtime has already started (its client is then one "
      "process's).");
}

}  // namespace torch_tpu
