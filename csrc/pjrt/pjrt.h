/* pjrt.h: the PJRT runtime room: plugin loading, client, buffers,
** transfers, compile, execute, events. The only folder that talks to the
** plugin; everything above it sees these types and never a PJRT_* one.
**
** Thread safety: every function here may be called from any thread; calls
** into the plugin are serialised by one lock per client.
*/
#ifndef TPURT_PJRT_PJRT_H_
#define TPURT_PJRT_PJRT_H_

#include "../base/base.h"

/* A device buffer: an immutable PJRT buffer plus its shape. Reference
** counted; the PJRT buffer is destroyed when the last reference goes. */
#define PJRT_MAX_MESH_RANK 8

/* How a sharded buffer is laid out over a mesh (sharding.c). Partition p of
** an SPMD program runs on devices[p]; the mesh is row-major over
** mesh_shape. Tensor dim d is split over mesh axis dim_axis[d] (-1: whole);
** mesh axes that no dim uses hold replicas. */
typedef struct pjrt_sharding_s {
  int32_t num_devices;
  int devices[64];
  int32_t mesh_rank;
  int64_t mesh_shape[PJRT_MAX_MESH_RANK];
  int32_t rank;
  int8_t dim_axis[TPURT_MAX_RANK];
} pjrt_sharding_t;

typedef struct pjrt_buffer_s {
  void* raw; /* PJRT_Buffer*; NULL for a sharded buffer */
  int device;
  tpurt_dtype_t dtype;
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  size_t nbytes; /* dense byte size: numel * dtype size */
  tpurt_refcount_t refcount;
  /* The execution that produced the buffer (NULL: uploaded or copied), so
  ** that an asynchronous error names its op. Private to the room. */
  struct pjrt_launch_s* launch;
  /* Its bytes were taken out of the memory counters: its launch failed.
  ** Private to the room (pjrt_g.lock). */
  bool uncounted;
  /* A sharded buffer: dtype, rank, dims and nbytes are the global array's;
  ** shards[p] (owned) is partition p's block, on sharding->devices[p].
  ** NULL for an ordinary buffer. */
  pjrt_sharding_t* sharding;
  struct pjrt_buffer_s** shards;
  /* A future (pjrt_buffer_future_create): the shape of a value that a
  ** launch queued by the engine will produce. While |pending|, raw is NULL
  ** and every call that needs the contents waits until the value comes
  ** (pjrt_buffer_fulfil_consume) or its launch fails
  ** (pjrt_buffer_future_fail, which keeps the reason in |failure|, owned).
  ** Private to the room (written under its future lock). */
  bool pending;
  tpurt_status_t failure;
} pjrt_buffer_t;

/* A compiled, loaded program. Reference counted: pjrt_compile and
** pjrt_executable_deserialize return one reference; the program is destroyed
** when the last one is released. */
typedef struct pjrt_executable_s pjrt_executable_t;

/* Loads the plugin and creates the client once (see tpurt_runtime_init). */
TPURT_MUST_USE tpurt_status_t pjrt_init(void);
int pjrt_device_count(void);
TPURT_MUST_USE tpurt_status_t pjrt_info(tpurt_runtime_info_t* out_info);
TPURT_MUST_USE tpurt_status_t pjrt_device_kind(int device, const char** out_kind);
/* Plugin identity for cache keys: "<path>|<api major.minor>|<platform
** name>|<platform version>"; "" if init failed. */
const char* pjrt_identity(void);
/* Opens |path| and checks that it is a usable PJRT plugin (GetPjrtApi,
** api version), without initialising it or touching the process's runtime.
** For tests and diagnostics. The library stays loaded. */
TPURT_MUST_USE tpurt_status_t pjrt_probe_plugin(const char* path, int* out_major, int* out_minor);

/* Host -> device. The host bytes (dense row-major) are copied before this
** returns; the transfer itself is asynchronous. */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_from_host(int device, tpurt_dtype_t dtype, int32_t rank,
                                                    const int64_t* dims, const void* data,
                                                    pjrt_buffer_t** out_buffer);
/* Device -> host: waits, then writes the whole buffer densely into |dst|. */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_to_host(pjrt_buffer_t* buffer, void* dst, size_t dst_size);
/* Device -> other device (same contents). */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_copy_to_device(pjrt_buffer_t* buffer, int device,
                                                         pjrt_buffer_t** out_buffer);
void pjrt_buffer_retain(pjrt_buffer_t* buffer);
void pjrt_buffer_release(pjrt_buffer_t* buffer);
/* A future: a buffer of |dtype| and |dims| on |device| whose value a later
** launch gives (one reference for the caller). It holds no device memory
** and is not counted until then. */
pjrt_buffer_t* pjrt_buffer_future_create(int device, tpurt_dtype_t dtype, int32_t rank, const int64_t* dims);
/* Gives |future| the value of |value| (consumed: its device buffer and
** launch move into the future, which every holder shares), and wakes the
** threads waiting for it. A value of another shape fails the future. */
void pjrt_buffer_fulfil_consume(pjrt_buffer_t* future, pjrt_buffer_t* value);
/* Marks |future| as never to be computed because of |cause| (copied): a
** call that needs its contents returns that error from then on. */
void pjrt_buffer_future_fail(pjrt_buffer_t* future, tpurt_borrowed_status_t cause);
/* True while |buffer| is a future whose value has not come yet. */
bool pjrt_buffer_is_pending(const pjrt_buffer_t* buffer);
/* Waits while |buffer| is a pending future; then NULL, or (a copy of) the
** error that lost its value. Cheap for an ordinary buffer. */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_ready(pjrt_buffer_t* buffer);

/* Waits until |buffer| is computed; returns its asynchronous error, if any. */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_await(pjrt_buffer_t* buffer);

/* Compiles StableHLO text (format "mlir") for one device, synchronously,
** with the compile options in force on this thread
** (pjrt_current_compile_options). Counts a compile in the metrics and adds
** its wall time. */
TPURT_MUST_USE tpurt_status_t pjrt_compile(const char* mlir, size_t mlir_size,
                                           pjrt_executable_t** out_executable);
/* Records what the launch log reports of a program loaded from its
** serialised form: the StableHLO op count of |mlir|. */
void pjrt_executable_note_module(pjrt_executable_t* executable, const char* mlir, size_t mlir_size);
/* The same with explicit CompileOptionsProto bytes (the cache passes the
** ones its key was made from). */
TPURT_MUST_USE tpurt_status_t pjrt_compile_with_options(const char* mlir, size_t mlir_size,
                                                        const char* options, size_t options_size,
                                                        pjrt_executable_t** out_executable);
/* Shadow compilation: |runs| (atomic, outlives the executable) counts each
** launch from now on; |gen| is the shadow generation it was recorded under. */
void pjrt_executable_set_shadow(pjrt_executable_t* executable, uint64_t* runs, uint32_t gen);
uint32_t pjrt_executable_shadow_gen(const pjrt_executable_t* executable);
/* False when a shadow target is set and |executable| was not yet compiled
** for it (cache/shadow.c answers through pjrt_shadow_gen_now). */
bool pjrt_executable_shadowed(const pjrt_executable_t* executable);
/* The current shadow generation, 0 when no target is set (set by cache/). */
extern uint32_t pjrt_shadow_gen_now;
void pjrt_executable_retain(pjrt_executable_t* executable);
void pjrt_executable_release(pjrt_executable_t* executable);
size_t pjrt_executable_num_outputs(const pjrt_executable_t* executable);
/* Serialised form (PJRT_Executable_Serialize); caller frees *out_bytes. */
TPURT_MUST_USE tpurt_status_t pjrt_executable_serialize(pjrt_executable_t* executable, char** out_bytes,
                                                        size_t* out_size);
TPURT_MUST_USE tpurt_status_t pjrt_executable_deserialize(const char* bytes, size_t size,
                                                          pjrt_executable_t** out_executable);

/* Launches |executable| on |device| asynchronously. |outputs| receives
** num_outputs new buffers (refcount 1, owned by the caller), whose dtypes
** and dims are read from the plugin. |op_name| is remembered with the
** completion event, so an error the plugin reports later names the op. */
TPURT_MUST_USE tpurt_status_t pjrt_execute(pjrt_executable_t* executable, int device,
                                           pjrt_buffer_t* const* args, size_t num_args,
                                           pjrt_buffer_t** outputs, size_t num_outputs, const char* op_name);

/*===--- SPMD: one program over several devices (execute.c, options.c) ---===*/

/* The global PJRT id of device index |device| (what a device assignment
** names), or -1 if there is no such device. */
int pjrt_device_id(int device);
/* CompileOptionsProto bytes for an SPMD program over |num_partitions|
** devices with global ids |device_ids| (partition i runs on device_ids[i]):
** num_partitions, use_spmd_partitioning, use_shardy_partitioner and the
** device assignment, plus the
** option overrides in force on this thread. Caller frees *out_bytes. */
TPURT_MUST_USE tpurt_status_t pjrt_spmd_compile_options(int32_t num_partitions, const int64_t* device_ids,
                                                        char** out_bytes, size_t* out_size);
/* Compiles a module whose @main carries Shardy (sdy.sharding) attributes
** as one SPMD program over device indices |devices| (XLA's partitioner inserts the
** collectives). */
TPURT_MUST_USE tpurt_status_t pjrt_compile_spmd(const char* mlir, size_t mlir_size, int32_t num_devices,
                                                const int* devices, pjrt_executable_t** out_executable);
/* Launches an SPMD program once across |devices| (the order it was compiled
** with). |args| is [num_devices][num_args], partition d's arguments on
** devices[d]; |outputs| is [num_devices][num_outputs] and receives new
** buffers (owned by the caller), each that device's shard. */
TPURT_MUST_USE tpurt_status_t pjrt_execute_spmd(pjrt_executable_t* executable, int32_t num_devices,
                                                const int* devices, pjrt_buffer_t* const* args,
                                                size_t num_args, pjrt_buffer_t** outputs, size_t num_outputs,
                                                const char* op_name);

/* Sharded buffers (sharding.c). */
/* INVALID_ARGUMENT unless |sharding| is a valid mesh of existing devices
** and splits a |rank|-d array of |dims| evenly. */
TPURT_MUST_USE tpurt_status_t pjrt_sharding_check(const pjrt_sharding_t* sharding, int32_t rank,
                                                  const int64_t* dims);
/* pjrt_sharding_check without the devices: a mesh of |sharding|'s shape
** anywhere (a compile-only target's chips). */
TPURT_MUST_USE tpurt_status_t pjrt_sharding_check_layout(const pjrt_sharding_t* sharding, int32_t rank,
                                                         const int64_t* dims);
bool pjrt_sharding_is_replicated(const pjrt_sharding_t* sharding);
bool pjrt_sharding_same_mesh(const pjrt_sharding_t* a, const pjrt_sharding_t* b);
uint64_t pjrt_sharding_hash(const pjrt_sharding_t* sharding);
/* A sharding as Shardy (XLA's partitioner) reads it: the module's mesh
** symbol ("sdy.mesh @mesh = <[\"a0\"=2, \"a1\"=2]>", partition p at
** row-major mesh index p) and the sharding attribute of a |rank|-d value on
** it ("#sdy.sharding<@mesh, [{\"a0\"}, {}]>"; NULL |sharding|: replicated). */
struct tpurt_strbuf_s;
void pjrt_sharding_sdy_mesh(const pjrt_sharding_t* mesh, struct tpurt_strbuf_s* out);
void pjrt_sharding_sdy_text(const pjrt_sharding_t* sharding, int32_t rank, struct tpurt_strbuf_s* out);
/* Where partition |p|'s block of an array of |dims| starts, and its dims. */
void pjrt_sharding_shard_dims(const pjrt_sharding_t* sharding, int32_t p, const int64_t* dims,
                              int64_t* out_start, int64_t* out_dims);
/* A sharded buffer of the global shape made of |shards| (one per mesh
** device; takes ownership of them). */
pjrt_buffer_t* pjrt_buffer_sharded_create_consume(const pjrt_sharding_t* sharding, tpurt_dtype_t dtype,
                                                  int32_t rank, const int64_t* dims, pjrt_buffer_t** shards);
/* Splits dense host |data| of the global shape and uploads each block. */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_shard_from_host(const pjrt_sharding_t* sharding,
                                                          tpurt_dtype_t dtype, int32_t rank,
                                                          const int64_t* dims, const void* data,
                                                          pjrt_buffer_t** out_buffer);
/* Reads every shard and places it at its block of |dst| (dense, global). */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_gather_to_host(pjrt_buffer_t* buffer, void* dst, size_t dst_size);

/* Keeps |error| (consumed), the failure of work the engine had queued for
** |device|, for the device's next pjrt_synchronize (unless it has an
** earlier error already). */
void pjrt_record_async_error_consume(int device, tpurt_status_t error);
/* Waits for everything launched on |device| (-1: all). Returns the first
** asynchronous error seen since the last call, as "<op>: <message>". */
TPURT_MUST_USE tpurt_status_t pjrt_synchronize(int device);

/* The host monotonic clock in nanoseconds (the clock of every time below). */
uint64_t pjrt_now_ns(void);
/* This thread's launches carry |id| into the launch log (0: none). */
void pjrt_set_launch_correlation(uint64_t id);
/* This thread's correlation id (what its launches carry now). */
uint64_t pjrt_launch_correlation(void);
/* What this thread's compiles are called in the long-compile notice (NULL:
** "a program"); returns the previous label. |label| must outlive its use. */
const char* pjrt_swap_compile_label(const char* label);

/* Device -> host without waiting: the copy is queued like a launch and
** completes at the device's next event or synchronize. |dst| must stay
** valid until then (pjrt_wait_host_range waits for copies into a range). */
TPURT_MUST_USE tpurt_status_t pjrt_buffer_to_host_async(pjrt_buffer_t* buffer, void* dst, size_t dst_size);
void pjrt_wait_host_range(const void* begin, size_t size);

/* A marker in a device's queue: the work queued before it. */
typedef struct pjrt_event_s pjrt_event_t;
TPURT_MUST_USE tpurt_status_t pjrt_event_record(int device, pjrt_event_t** out_event);
void pjrt_event_free(pjrt_event_t* event);
bool pjrt_event_query(pjrt_event_t* event);
void pjrt_event_synchronize(pjrt_event_t* event);
/* Waits, then returns when that work completed (PJRT completion events);
** the record time if nothing was queued. */
uint64_t pjrt_event_time_ns(pjrt_event_t* event);

/* Completed launches from record |since| on (the log keeps the latest
** 65536); *out_next is the index to pass next time. */
int pjrt_launch_log(uint64_t since, tpurt_launch_record_t* out, int max, uint64_t* out_next);
int pjrt_program_stats(tpurt_program_stats_t* out, int max, uint64_t* out_device_ns, uint64_t* out_runs);
void pjrt_program_stats_reset(void);

/* Device_MemoryStats, or UNIMPLEMENTED where the plugin has none. */
TPURT_MUST_USE tpurt_status_t pjrt_device_memory(int device, tpurt_device_memory_t* out_memory);

/* Waits for everything launched so far, on every device, leaving the
** asynchronous errors for the next pjrt_synchronize. */
void pjrt_wait_idle(void);
/*===--- options by name (options.c) ---===*/

/* One plugin client option (TORCH_TPU_PJRT_OPTIONS), typed from its text. */
typedef enum {
  PJRT_OPTION_STRING,
  PJRT_OPTION_INT64,
  PJRT_OPTION_FLOAT,
  PJRT_OPTION_BOOL
} pjrt_option_type_t;
typedef struct {
  char* name;
  pjrt_option_type_t type;
  char* string_value; /* PJRT_OPTION_STRING */
  int64_t int_value;
  float float_value;
  bool bool_value;
} pjrt_named_option_t;
typedef struct {
  pjrt_named_option_t* items;
  size_t count;
} pjrt_client_options_t;

/* Parses "name=value,name=value". A value is typed by its text: true/false
** (any case) is a bool, a decimal integer an int64, another number a float,
** anything else, or anything in quotes ("8", '1.5'), a string. A malformed
** item, a duplicate name, an empty value or a number out of range is an
** INVALID_ARGUMENT status naming it. NULL or "" is no options. */
TPURT_MUST_USE tpurt_status_t pjrt_client_options_parse(const char* spec, pjrt_client_options_t* out_options);
void pjrt_client_options_free(pjrt_client_options_t* options);
/* Appends "name=value (type), ..." to |out|, for messages. */
struct tpurt_strbuf_s;
void pjrt_client_options_describe(const pjrt_client_options_t* options, struct tpurt_strbuf_s* out);

/* The CompileOptionsProto bytes for |spec| ("name=value ..." XLA options,
** as TORCH_TPU_XLA_OPTIONS takes them): the options every compile passes,
** plus env_option_overrides. Caller frees *out_bytes. For tests. */
TPURT_MUST_USE tpurt_status_t pjrt_compile_options_encode(const char* spec, char** out_bytes,
                                                          size_t* out_size);
/* The compile options in force on this thread (TORCH_TPU_XLA_OPTIONS plus
** tpurt_set_thread_compile_options), encoded, and as "name=value ..." text.
** Borrowed: valid until this thread sets its options again. A malformed
** TORCH_TPU_XLA_OPTIONS is an INVALID_ARGUMENT status. */
TPURT_MUST_USE tpurt_status_t pjrt_current_compile_options(const char** out_bytes, size_t* out_size,
                                                           const char** out_text);
/* True when this thread has compile options of its own
** (tpurt_set_thread_compile_options): work compiled for it elsewhere would
** not see them. */
bool pjrt_thread_has_compile_options(void);

/* The kind this thread's compiles are counted under (tpurt_compile_kind_t):
** each engine site sets its own kind around its compile; a kind forced by
** tpurt_set_compile_kind (not AUTO) wins over the site's. Returns the
** previous site kind. */
tpurt_compile_kind_t pjrt_swap_compile_kind(tpurt_compile_kind_t kind);
tpurt_compile_kind_t pjrt_force_compile_kind(tpurt_compile_kind_t kind);
/* This thread's forced kind now (TPURT_COMPILE_KIND_AUTO: none), for work
** compiled for it on another thread. */
tpurt_compile_kind_t pjrt_forced_compile_kind(void);

/* Counters kept by this room, read by tpurt_metrics_get. Atomics: bumped
** from any thread without a lock, read and zeroed the same way (each field
** is consistent on its own; a snapshot of several is not a transaction). */
typedef struct pjrt_counters_s {
  _Atomic uint64_t compiles, executions, bytes_to_device, bytes_from_device;
  _Atomic uint64_t compile_ns;
  _Atomic uint64_t compiles_by_kind[TPURT_COMPILE_KINDS], compile_ns_by_kind[TPURT_COMPILE_KINDS];
  _Atomic uint64_t compiles_in_flight, max_concurrent_compiles;
  _Atomic uint64_t live_buffers;
  _Atomic uint64_t bytes_in_use[64];
  _Atomic uint64_t peak_bytes_in_use[64];
} pjrt_counters_t;
pjrt_counters_t* pjrt_counters(void);

#endif /* TPURT_PJRT_PJRT_H_ */
