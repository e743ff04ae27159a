/* pjrt_abi.h: our own declarations of the subset of the PJRT C API that the
** pjrt room calls, at the 0.114 layout. Written from the API's published
** layout facts (never a copied header); private to csrc/pjrt/.
**
** Rules of the ABI:
**  - every struct starts with `size_t struct_size; void* extension_start;`
**    and its STRUCT_SIZE is offsetof(last field) + sizeof(last field);
**  - the plugin accepts any struct_size >= the one it was built with, so we
**    declare the newest layout and always send our own STRUCT_SIZE;
**  - function slot i of the PJRT_Api table lies at byte 40 + 8 * i and may be
**    called only if it lies below the plugin's api struct_size.
** LP64 only (x86-64, aarch64 Linux).
*/
#ifndef TPURT_PJRT_PJRT_ABI_H_
#define TPURT_PJRT_PJRT_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

_Static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8, "the PJRT ABI declared here is LP64");

/* Opaque plugin objects. */
typedef struct pjrt_abi_error_s pjrt_abi_error_t;
typedef struct pjrt_abi_client_s pjrt_abi_client_t;
typedef struct pjrt_abi_device_s pjrt_abi_device_t;
typedef struct pjrt_abi_device_description_s pjrt_abi_device_description_t;
typedef struct pjrt_abi_event_s pjrt_abi_event_t;
typedef struct pjrt_abi_buffer_s pjrt_abi_buffer_t;
typedef struct pjrt_abi_loaded_executable_s pjrt_abi_loaded_executable_t;
typedef struct pjrt_abi_executable_s pjrt_abi_executable_t;
typedef struct pjrt_abi_serialized_executable_s pjrt_abi_serialized_executable_t;

#define PJRTABI_STRUCT_SIZE(type, last) (offsetof(type, last) + sizeof(((type*)0)->last))
/* Defines type##_SIZE, the STRUCT_SIZE we send, and checks it against the
** size the 0.114 layout gives. */
#define PJRTABI_DEFINE_SIZE(type, last, n) \
  enum { type##_SIZE = (n) };              \
  _Static_assert(PJRTABI_STRUCT_SIZE(type, last) == (n), #type " has the 0.114 size")
#define PJRTABI_CHECK_OFFSET(type, field, n) _Static_assert(offsetof(type, field) == (n), #type "." #field)

/*===--- the api table ---===*/

typedef struct pjrt_abi_version_s {
  size_t struct_size;
  void* extension_start;
  int major;
  int minor;
} pjrt_abi_version_t;

/* The head of PJRT_Api; the function pointers follow at byte 40. */
typedef struct pjrt_abi_api_head_s {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_version_t version;
} pjrt_abi_api_head_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_api_head_t, version, 16);
_Static_assert(sizeof(pjrt_abi_api_head_t) == 40, "PJRT_Api function slots start at byte 40");

#define PJRTABI_SLOT_OFFSET(slot) (40 + 8 * (size_t)(slot))
#define PJRTABI_API_SIZE_0_114 1144 /* 138 slots */

/* Slot numbers (their order never changes). */
enum {
  PJRTABI_ERROR_DESTROY = 0,
  PJRTABI_ERROR_MESSAGE = 1,
  PJRTABI_ERROR_GET_CODE = 2,
  PJRTABI_PLUGIN_INITIALIZE = 3,
  PJRTABI_PLUGIN_ATTRIBUTES = 4,
  PJRTABI_EVENT_DESTROY = 5,
  PJRTABI_EVENT_IS_READY = 6,
  PJRTABI_EVENT_ERROR = 7,
  PJRTABI_EVENT_AWAIT = 8,
  PJRTABI_EVENT_ON_READY = 9,
  PJRTABI_CLIENT_CREATE = 10,
  PJRTABI_CLIENT_PLATFORM_NAME = 12,
  PJRTABI_CLIENT_PLATFORM_VERSION = 14,
  PJRTABI_CLIENT_ADDRESSABLE_DEVICES = 16,
  PJRTABI_CLIENT_COMPILE = 20,
  PJRTABI_CLIENT_BUFFER_FROM_HOST_BUFFER = 22,
  PJRTABI_DEVICE_DESCRIPTION_ID = 23,
  PJRTABI_DEVICE_DESCRIPTION_KIND = 26,
  PJRTABI_DEVICE_GET_DESCRIPTION = 29,
  PJRTABI_DEVICE_MEMORY_STATS = 34,
  PJRTABI_EXECUTABLE_DESTROY = 40,
  PJRTABI_EXECUTABLE_NUM_OUTPUTS = 44,
  PJRTABI_EXECUTABLE_SERIALIZE = 49,
  PJRTABI_LOADED_EXECUTABLE_DESTROY = 50,
  PJRTABI_LOADED_EXECUTABLE_GET_EXECUTABLE = 51,
  PJRTABI_LOADED_EXECUTABLE_EXECUTE = 55,
  PJRTABI_EXECUTABLE_DESERIALIZE_AND_LOAD = 56,
  PJRTABI_BUFFER_DESTROY = 58,
  PJRTABI_BUFFER_ELEMENT_TYPE = 59,
  PJRTABI_BUFFER_DIMENSIONS = 60,
  PJRTABI_BUFFER_COPY_TO_DEVICE = 69,
  PJRTABI_BUFFER_TO_HOST_BUFFER = 70,
  PJRTABI_BUFFER_READY_EVENT = 72,
};

/* Every function takes a pointer to its args struct and returns an error
** (NULL = OK), except Error_Destroy and Error_Message, which return void. */
typedef pjrt_abi_error_t* (*pjrt_abi_fn_t)(void* args);
typedef void (*pjrt_abi_void_fn_t)(void* args);

/*===--- errors ---===*/

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_error_t* error;
} pjrt_abi_error_destroy_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_error_destroy_args_t, error, 24);

typedef struct {
  size_t struct_size;
  void* extension_start;
  const pjrt_abi_error_t* error;
  const char* message; /* out; lives as long as |error| */
  size_t message_size; /* out */
} pjrt_abi_error_message_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_error_message_args_t, message_size, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  const pjrt_abi_error_t* error;
  int code; /* out; abseil codes, 1:1 with tpurt_status_code_t */
} pjrt_abi_error_get_code_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_error_get_code_args_t, code, 28);

/*===--- plugin ---===*/

typedef struct {
  size_t struct_size;
  void* extension_start;
} pjrt_abi_plugin_initialize_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_plugin_initialize_args_t, extension_start, 16);

enum {
  PJRTABI_NAMED_VALUE_STRING = 0,
  PJRTABI_NAMED_VALUE_INT64 = 1,
  PJRTABI_NAMED_VALUE_INT64_LIST = 2,
  PJRTABI_NAMED_VALUE_FLOAT = 3,
  PJRTABI_NAMED_VALUE_BOOL = 4,
};

typedef struct {
  size_t struct_size;
  void* extension_start;
  const char* name;
  size_t name_size;
  int type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  } value;
  size_t value_size; /* element count for strings and lists, 1 for scalars */
} pjrt_abi_named_value_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_named_value_t, type, 32);
PJRTABI_CHECK_OFFSET(pjrt_abi_named_value_t, value, 40);
PJRTABI_DEFINE_SIZE(pjrt_abi_named_value_t, value_size, 56);

/*===--- events ---===*/

/* Event_Destroy, Event_Error and Event_Await share this shape. */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_event_t* event;
} pjrt_abi_event_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_event_args_t, event, 24);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_event_t* event;
  bool is_ready; /* out */
} pjrt_abi_event_is_ready_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_event_is_ready_args_t, is_ready, 25);

/* The callback runs on a plugin thread (or at once, in the caller, if the
** event is ready); it owns |error| and must not block. */
typedef void (*pjrt_abi_on_ready_fn_t)(pjrt_abi_error_t* error, void* user_arg);
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_event_t* event;
  pjrt_abi_on_ready_fn_t callback;
  void* user_arg;
} pjrt_abi_event_on_ready_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_event_on_ready_args_t, user_arg, 40);

/*===--- client ---===*/

typedef struct {
  size_t struct_size;
  void* extension_start;
  const pjrt_abi_named_value_t* create_options;
  size_t num_options;
  void* kv_get_callback; /* all key-value callbacks NULL: one process */
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  pjrt_abi_client_t* client; /* out */
  void* kv_try_get_callback;
  void* kv_try_get_user_arg;
} pjrt_abi_client_create_args_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_client_create_args_t, client, 64);
PJRTABI_DEFINE_SIZE(pjrt_abi_client_create_args_t, kv_try_get_user_arg, 88);

/* Client_PlatformName and Client_PlatformVersion share this shape. */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_client_t* client;
  const char* text; /* out; owned by the client */
  size_t text_size; /* out */
} pjrt_abi_client_string_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_client_string_args_t, text_size, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_client_t* client;
  pjrt_abi_device_t* const* addressable_devices; /* out; owned by the client */
  size_t num_addressable_devices;                /* out */
} pjrt_abi_client_addressable_devices_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_client_addressable_devices_args_t, num_addressable_devices, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  const char* code;
  size_t code_size;
  const char* format; /* "mlir" */
  size_t format_size;
} pjrt_abi_program_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_program_t, format_size, 48);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_client_t* client;
  const pjrt_abi_program_t* program;
  const char* compile_options; /* serialized CompileOptionsProto */
  size_t compile_options_size;
  pjrt_abi_loaded_executable_t* executable; /* out */
} pjrt_abi_client_compile_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_client_compile_args_t, executable, 56);

/* PJRT_HostBufferSemantics */
enum { PJRTABI_HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL = 0 };

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_client_t* client;
  const void* data;
  int type; /* PJRTABI_TYPE_* */
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides; /* NULL: dense row-major */
  size_t num_byte_strides;
  int host_buffer_semantics;
  pjrt_abi_device_t* device;
  void* memory;                            /* NULL: the device's default memory */
  void* device_layout;                     /* NULL: dense major-to-minor */
  pjrt_abi_event_t* done_with_host_buffer; /* out */
  pjrt_abi_buffer_t* buffer;               /* out */
} pjrt_abi_buffer_from_host_args_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_buffer_from_host_args_t, type, 32);
PJRTABI_CHECK_OFFSET(pjrt_abi_buffer_from_host_args_t, host_buffer_semantics, 72);
PJRTABI_DEFINE_SIZE(pjrt_abi_buffer_from_host_args_t, buffer, 120);

/*===--- devices ---===*/

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_device_t* device;
  pjrt_abi_device_description_t* device_description; /* out */
} pjrt_abi_device_get_description_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_device_get_description_args_t, device_description, 32);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_device_description_t* device_description;
  const char* device_kind; /* out */
  size_t device_kind_size; /* out */
} pjrt_abi_device_description_kind_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_device_description_kind_args_t, device_kind_size, 40);

/* DeviceDescription_Id: the device's global id (the ids a device assignment
** names). */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_device_description_t* device_description;
  int id; /* out */
} pjrt_abi_device_description_id_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_device_description_id_args_t, id, 28);

/*===--- executables ---===*/

/* Executable_Destroy and LoadedExecutable_Destroy. */
typedef struct {
  size_t struct_size;
  void* extension_start;
  void* executable;
} pjrt_abi_executable_destroy_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_executable_destroy_args_t, executable, 24);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_loaded_executable_t* loaded_executable;
  pjrt_abi_executable_t* executable; /* out; Executable_Destroy it */
} pjrt_abi_loaded_executable_get_executable_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_loaded_executable_get_executable_args_t, executable, 32);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_executable_t* executable;
  size_t num_outputs; /* out */
} pjrt_abi_executable_num_outputs_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_executable_num_outputs_args_t, num_outputs, 32);

typedef struct {
  size_t struct_size;
  void* extension_start;
  const pjrt_abi_executable_t* executable;
  const char* serialized_bytes;                                             /* out */
  size_t serialized_bytes_size;                                             /* out */
  pjrt_abi_serialized_executable_t* serialized_executable;                  /* out */
  void (*serialized_executable_deleter)(pjrt_abi_serialized_executable_t*); /* out */
} pjrt_abi_executable_serialize_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_executable_serialize_args_t, serialized_executable_deleter, 56);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_client_t* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  pjrt_abi_loaded_executable_t* loaded_executable;   /* out */
  const char* overridden_serialized_compile_options; /* NULL: the blob's own */
  size_t overridden_serialized_compile_options_size;
  void* load_options; /* by 0.114 */
} pjrt_abi_deserialize_and_load_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_deserialize_and_load_args_t, load_options, 72);

typedef struct {
  size_t struct_size;
  void* extension_start;
  void* send_callbacks;
  void* recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void* context;
  const char* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids;
  void* multi_slice_config; /* 120 bytes up to here (0.97 .. 0.105) */
  bool use_major_to_minor_data_layout_for_callbacks;
  void* hlo_output_callbacks;
  size_t num_hlo_output_callbacks;
} pjrt_abi_execute_options_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_execute_options_t, launch_id, 48);
_Static_assert(PJRTABI_STRUCT_SIZE(pjrt_abi_execute_options_t, multi_slice_config) == 120,
               "ExecuteOptions at 0.97..0.105");
PJRTABI_DEFINE_SIZE(pjrt_abi_execute_options_t, num_hlo_output_callbacks, 144);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_loaded_executable_t* executable;
  pjrt_abi_execute_options_t* options;
  pjrt_abi_buffer_t* const* const* argument_lists; /* [num_devices][num_args] */
  size_t num_devices;
  size_t num_args;
  pjrt_abi_buffer_t** const* output_lists;   /* [num_devices][num_outputs], filled */
  pjrt_abi_event_t** device_complete_events; /* [num_devices] or NULL, filled */
  pjrt_abi_device_t* execute_device;         /* NULL: compile-time devices */
} pjrt_abi_execute_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_execute_args_t, execute_device, 80);

/*===--- buffers ---===*/

/* PJRT_Buffer_Type: its own numbering (BF16 is 13). */
enum {
  PJRTABI_TYPE_INVALID = 0,
  PJRTABI_TYPE_PRED = 1,
  PJRTABI_TYPE_S8 = 2,
  PJRTABI_TYPE_S16 = 3,
  PJRTABI_TYPE_S32 = 4,
  PJRTABI_TYPE_S64 = 5,
  PJRTABI_TYPE_U8 = 6,
  PJRTABI_TYPE_U16 = 7,
  PJRTABI_TYPE_U32 = 8,
  PJRTABI_TYPE_U64 = 9,
  PJRTABI_TYPE_F16 = 10,
  PJRTABI_TYPE_F32 = 11,
  PJRTABI_TYPE_F64 = 12,
  PJRTABI_TYPE_BF16 = 13,
  PJRTABI_TYPE_C64 = 14,
  PJRTABI_TYPE_C128 = 15,
  PJRTABI_TYPE_F8E5M2 = 16,
  PJRTABI_TYPE_F8E4M3FN = 17,
  PJRTABI_TYPE_F8E5M2FNUZ = 19,
  PJRTABI_TYPE_F8E4M3FNUZ = 20,
};

/* Buffer_Destroy. */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_buffer_t* buffer;
} pjrt_abi_buffer_destroy_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_buffer_destroy_args_t, buffer, 24);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_buffer_t* buffer;
  int type; /* out */
} pjrt_abi_buffer_element_type_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_buffer_element_type_args_t, type, 28);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_buffer_t* buffer;
  const int64_t* dims; /* out; lives as long as the buffer */
  size_t num_dims;     /* out */
} pjrt_abi_buffer_dimensions_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_buffer_dimensions_args_t, num_dims, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_buffer_t* src;
  void* host_layout; /* NULL: the buffer's own layout */
  void* dst;
  size_t dst_size;
  pjrt_abi_event_t* event; /* out */
} pjrt_abi_buffer_to_host_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_buffer_to_host_args_t, event, 56);

/* Buffer_CopyToDevice. Not in our layout notes: inferred from
** the naming pattern (buffer in, dst_device in, dst_buffer out) and checked
** at run time against the CPU plugin (a wrong struct_size is rejected). */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_buffer_t* buffer;
  pjrt_abi_device_t* dst_device;
  pjrt_abi_buffer_t* dst_buffer; /* out */
} pjrt_abi_buffer_copy_to_device_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_buffer_copy_to_device_args_t, dst_buffer, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_buffer_t* buffer;
  pjrt_abi_event_t* event; /* out */
} pjrt_abi_buffer_ready_event_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_buffer_ready_event_args_t, event, 32);

/*===--- device memory statistics ---===*/

/* An optional statistic: the value counts only when is_set is true. */
typedef struct {
  int64_t value;
  bool is_set;
} pjrt_abi_optional_i64_t;

/* Device_MemoryStats: bytes_in_use is always set; the rest only if the
** plugin knows them. Plugins without an allocator (the CPU one) answer
** UNIMPLEMENTED. */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_device_t* device;
  int64_t bytes_in_use;
  pjrt_abi_optional_i64_t peak_bytes_in_use;
  pjrt_abi_optional_i64_t num_allocs;
  pjrt_abi_optional_i64_t largest_alloc_size;
  pjrt_abi_optional_i64_t bytes_limit;
  pjrt_abi_optional_i64_t bytes_reserved;
  pjrt_abi_optional_i64_t peak_bytes_reserved;
  pjrt_abi_optional_i64_t bytes_reservable_limit;
  pjrt_abi_optional_i64_t largest_free_block_bytes;
  pjrt_abi_optional_i64_t pool_bytes;
  pjrt_abi_optional_i64_t peak_pool_bytes;
  pjrt_abi_optional_i64_t peak_allocated_bytes;
} pjrt_abi_device_memory_stats_args_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_device_memory_stats_args_t, bytes_limit, 80);
/* The last optional's padding is not part of the 0.114 STRUCT_SIZE. */
enum { pjrt_abi_device_memory_stats_args_t_SIZE = 201 };
_Static_assert(offsetof(pjrt_abi_device_memory_stats_args_t, peak_allocated_bytes) + 9 == 201,
               "Device_MemoryStats has the 0.114 size");

/*===--- compile-only targets (pjrt/target.c) ---===
** A topology made from a name compiles with no client and no device
** (PJRT_Compile), and its executable reports the compiler's cost analysis
** and memory needs. Slots 82..96 exist from 0.4x on; each is gated by the
** plugin's table size like every other slot. */

typedef struct pjrt_abi_topology_s pjrt_abi_topology_t;

enum {
  PJRTABI_EXECUTABLE_NAME = 41,
  PJRTABI_EXECUTABLE_GET_COST_ANALYSIS = 46,
  PJRTABI_TOPOLOGY_CREATE = 82,
  PJRTABI_TOPOLOGY_DESTROY = 83,
  PJRTABI_TOPOLOGY_PLATFORM_NAME = 84,
  PJRTABI_TOPOLOGY_PLATFORM_VERSION = 85,
  PJRTABI_TOPOLOGY_GET_DEVICE_DESCRIPTIONS = 86,
  PJRTABI_COMPILE = 89,
  PJRTABI_EXECUTABLE_FINGERPRINT = 94,
  PJRTABI_EXECUTABLE_GET_COMPILED_MEMORY_STATS = 96,
};

typedef struct {
  size_t struct_size;
  void* extension_start;
  const char* topology_name;
  size_t topology_name_size;
  const pjrt_abi_named_value_t* create_options;
  size_t num_options;
  pjrt_abi_topology_t* topology; /* out; TopologyDescription_Destroy it */
} pjrt_abi_topology_create_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_topology_create_args_t, topology, 56);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_topology_t* topology;
} pjrt_abi_topology_destroy_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_topology_destroy_args_t, topology, 24);

/* TopologyDescription_PlatformName and _PlatformVersion share this shape. */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_topology_t* topology;
  const char* text; /* out; owned by the topology */
  size_t text_size; /* out */
} pjrt_abi_topology_string_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_topology_string_args_t, text_size, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_topology_t* topology;
  pjrt_abi_device_description_t* const* descriptions; /* out; owned by the topology */
  size_t num_descriptions;                            /* out */
} pjrt_abi_topology_device_descriptions_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_topology_device_descriptions_args_t, num_descriptions, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  const pjrt_abi_topology_t* topology;
  const pjrt_abi_program_t* program;
  const char* compile_options; /* serialized CompileOptionsProto */
  size_t compile_options_size;
  pjrt_abi_client_t* client;         /* NULL: compile only */
  pjrt_abi_executable_t* executable; /* out; Executable_Destroy it */
} pjrt_abi_compile_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_compile_args_t, executable, 64);

/* Executable_Name and Executable_Fingerprint share this shape. */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_executable_t* executable;
  const char* text; /* out; owned by the executable */
  size_t text_size; /* out */
} pjrt_abi_executable_string_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_executable_string_args_t, text_size, 40);

typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_executable_t* executable;
  size_t num_properties;                    /* out */
  const pjrt_abi_named_value_t* properties; /* out; owned by the executable */
} pjrt_abi_executable_cost_analysis_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_executable_cost_analysis_args_t, properties, 40);

/* Mirrors the compiler's memory stats: device (HBM) bytes, then host
** bytes; the last two fields are newer than some plugins, which leave them
** zero (we zero the struct). */
typedef struct {
  size_t struct_size;
  void* extension_start;
  pjrt_abi_executable_t* executable;
  int64_t generated_code_size_in_bytes; /* out, all of them */
  int64_t argument_size_in_bytes;
  int64_t output_size_in_bytes;
  int64_t alias_size_in_bytes;
  int64_t temp_size_in_bytes;
  int64_t host_generated_code_size_in_bytes;
  int64_t host_argument_size_in_bytes;
  int64_t host_output_size_in_bytes;
  int64_t host_alias_size_in_bytes;
  int64_t host_temp_size_in_bytes;
  int64_t peak_memory_in_bytes;
  int64_t total_size_in_bytes;
} pjrt_abi_compiled_memory_stats_args_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_compiled_memory_stats_args_t, host_temp_size_in_bytes, 96);
PJRTABI_DEFINE_SIZE(pjrt_abi_compiled_memory_stats_args_t, total_size_in_bytes, 120);

/*===--- end of compile-only targets ---===*/

#endif /* TPURT_PJRT_PJRT_ABI_H_ */
