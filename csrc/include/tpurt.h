/* tpurt.h: the one public header of libtpurt, the C core of torch_tpu.
**
** The PyTorch glue (torch_tpu/csrc) includes only this file. Everything here
** is plain C11 and knows nothing of PyTorch or Python.
**
** Conventions (see docs/architecture.md, "Ownership"):
**  - Every fallible call returns a tpurt_status_t and is marked
**    TPURT_MUST_USE. NULL means OK. A non-NULL status is owned by the
**    caller, who returns it, frees it with tpurt_status_free(), or drops it
**    on purpose with tpurt_status_ignore(). A status someone else keeps is
**    handed out as a tpurt_borrowed_status_t, which cannot be freed.
**  - One teardown verb per kind: a refcounted object (a storage) comes from
**    *_create / *_retain and is dropped with *_release; an owned plain
**    object (a program, an event) is freed with *_free. Accessors return
**    borrowed pointers.
**  - A function that takes ownership of an argument ends in _consume and
**    names the consumed argument in its comment.
**  - Output parameters are named out_*.
*/
#ifndef TPURT_H_
#define TPURT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*/
/* Status                                                                 */
/*===------------------------------------------------------------------===*/

/* Codes 0..16 are the abseil codes PJRT uses, one to one. */
typedef enum tpurt_status_code_e {
  TPURT_OK = 0,
  TPURT_CANCELLED = 1,
  TPURT_UNKNOWN = 2,
  TPURT_INVALID_ARGUMENT = 3, /* bad shapes, dtypes, values from the caller */
  TPURT_DEADLINE_EXCEEDED = 4,
  TPURT_NOT_FOUND = 5, /* plugin file, symbol, op rule missing */
  TPURT_ALREADY_EXISTS = 6,
  TPURT_PERMISSION_DENIED = 7,
  TPURT_RESOURCE_EXHAUSTED = 8, /* out of device or host memory */
  TPURT_FAILED_PRECONDITION = 9,
  TPURT_ABORTED = 10,
  TPURT_OUT_OF_RANGE = 11,  /* index out of bounds */
  TPURT_UNIMPLEMENTED = 12, /* no lowering rule for this op or form */
  TPURT_INTERNAL = 13,
  TPURT_UNAVAILABLE = 14,
  TPURT_DATA_LOSS = 15,
  TPURT_UNAUTHENTICATED = 16,
  /* Not an error: an out= argument must be resized first (see op call). */
  TPURT_NEEDS_RESIZE = 100,
} tpurt_status_code_t;

/* The result of a call that must not be ignored: a status, or anything
** the caller must free (GCC and clang warn, and the build makes that an
** error). A cast to void does not silence it: drop a status with
** tpurt_status_ignore(). */
#if defined(__GNUC__) || defined(__clang__)
#define TPURT_MUST_USE __attribute__((warn_unused_result))
#else
#define TPURT_MUST_USE
#endif

typedef struct tpurt_status_s* tpurt_status_t;
/* A status that someone else owns (e.g. an error an object keeps): read
** its code and message; copy it with tpurt_status_clone to keep or return
** it. The const makes freeing or returning it as owned a compile error. */
typedef const struct tpurt_status_s* tpurt_borrowed_status_t;

/* Creates a status with a printf-style message. Never returns NULL unless
** |code| is TPURT_OK. */
TPURT_MUST_USE tpurt_status_t tpurt_status_create(tpurt_status_code_t code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
tpurt_status_code_t tpurt_status_code(tpurt_borrowed_status_t status);
/* The message; lives as long as |status|. "" for NULL. */
const char* tpurt_status_message(tpurt_borrowed_status_t status);
/* A new status with the same code and message (NULL for NULL). */
TPURT_MUST_USE tpurt_status_t tpurt_status_clone(tpurt_borrowed_status_t status);
/* Frees |status|; NULL is fine. */
void tpurt_status_free(tpurt_status_t status);
/* Drops a status on purpose (frees it): the one way to ignore the result
** of a TPURT_MUST_USE call, where the error does not matter (a best-effort
** cleanup, a probe whose failure is a valid answer). */
void tpurt_status_ignore(tpurt_status_t status);
/* Prepends "<prefix>: " to the message of |status| (consumed) and returns
** it; NULL stays NULL. */
TPURT_MUST_USE tpurt_status_t tpurt_status_annotate_consume(tpurt_status_t status, const char* prefix);

/*===------------------------------------------------------------------===*/
/* Element types                                                          */
/*===------------------------------------------------------------------===*/

/* Our own numbering (not PJRT's, not PyTorch's). Ordered for promotion
** tables: bool < unsigned/signed ints < floats. */
typedef enum tpurt_dtype_e {
  TPURT_DTYPE_INVALID = 0,
  TPURT_DTYPE_BOOL,
  TPURT_DTYPE_U8,
  TPURT_DTYPE_I8,
  TPURT_DTYPE_I16,
  TPURT_DTYPE_I32,
  TPURT_DTYPE_I64,
  TPURT_DTYPE_F16,
  TPURT_DTYPE_BF16,
  TPURT_DTYPE_F32,
  TPURT_DTYPE_F64,
  /* Unsigned wide ints: PyTorch has them as limited types; the core uses
  ** them for RNG state and bits. */
  TPURT_DTYPE_U16,
  TPURT_DTYPE_U32,
  TPURT_DTYPE_U64,
  /* 8-bit floats (PyTorch's float8_e4m3fn, _e5m2, _e4m3fnuz, _e5m2fnuz):
  ** storage, copies and casts; which ones a platform has comes from its
  ** plugin (tpurt_dtype_supported). */
  TPURT_DTYPE_F8E4M3FN,
  TPURT_DTYPE_F8E5M2,
  TPURT_DTYPE_F8E4M3FNUZ,
  TPURT_DTYPE_F8E5M2FNUZ,
  /* Complex (PyTorch's complex64 and complex128: PJRT's C64 and C128): a
  ** pair of f32 or f64, real part first. Not floats to the rules
  ** (tpurt_dtype_is_float is false); which ones a platform has comes from
  ** its plugin. */
  TPURT_DTYPE_C64,
  TPURT_DTYPE_C128,
  TPURT_DTYPE_COUNT,
} tpurt_dtype_t;

size_t tpurt_dtype_size(tpurt_dtype_t dtype);
/* PyTorch-style name for messages: "Float", "BFloat16", "Long"... */
const char* tpurt_dtype_name(tpurt_dtype_t dtype);
bool tpurt_dtype_is_float(tpurt_dtype_t dtype);
bool tpurt_dtype_is_integral(tpurt_dtype_t dtype); /* ints, not bool */
bool tpurt_dtype_is_float8(tpurt_dtype_t dtype);
bool tpurt_dtype_is_complex(tpurt_dtype_t dtype);
/* The real type of a complex type's parts (C64 -> F32, C128 -> F64); any
** other type is its own. */
tpurt_dtype_t tpurt_dtype_to_real(tpurt_dtype_t dtype);
/* The complex type whose parts hold |dtype| (F64 -> C128, other floats and
** ints -> C64, as PyTorch's toComplexType); a complex type is its own. */
tpurt_dtype_t tpurt_dtype_to_complex(tpurt_dtype_t dtype);
/* NULL when the platform has |dtype|, else UNIMPLEMENTED naming the dtype
** and the platform. Asks the plugin once per dtype (it compiles a
** conversion to the type and back); cheap after that. */
TPURT_MUST_USE tpurt_status_t tpurt_dtype_check(tpurt_dtype_t dtype);

#define TPURT_MAX_RANK 8

/*===------------------------------------------------------------------===*/
/* Configuration                                                          */
/*===------------------------------------------------------------------===*/

/* Every TORCH_TPU_* environment variable, parsed once (csrc/base/config.c). */
#define TPURT_CONFIG_MAX_DEVICES 64
typedef struct tpurt_config_s {
  const char* plugin_path;     /* TORCH_TPU_PJRT_PLUGIN, or NULL */
  int32_t num_devices;         /* TORCH_TPU_NUM_DEVICES: 1..64, default 1 */
  bool num_devices_set;        /* whether TORCH_TPU_NUM_DEVICES was given */
  bool cpu_fallback;           /* TORCH_TPU_CPU_FALLBACK, default on */
  bool launch_blocking;        /* TORCH_TPU_LAUNCH_BLOCKING: threads start in debug eager */
  bool defer_and_fuse;         /* TORCH_TPU_DEFER_AND_FUSE: threads start in fused eager */
  int64_t fuse_max_ops;        /* TORCH_TPU_FUSE_MAX_OPS: >= 1, default 2048 */
  bool print_mlir;             /* TORCH_TPU_PRINT_MLIR */
  const char* dump_dir;        /* TORCH_TPU_DUMP_DIR, or NULL */
  const char* cache_dir;       /* TORCH_TPU_CACHE_DIR, or NULL for the default; "0": off */
  uint64_t cache_memory_bytes; /* TORCH_TPU_CACHE_MEMORY_BYTES, default 1 GiB */
  uint64_t cache_disk_bytes;   /* TORCH_TPU_CACHE_DISK_BYTES, default 2 GiB; 0: no cap */
  uint64_t sdpa_block_bytes;   /* TORCH_TPU_SDPA_BLOCK_BYTES; 0: the measured defaults (attention.c) */
  bool cudnn_sdpa;             /* TORCH_TPU_CUDNN_SDPA: cuDNN attention on a CUDA plugin, default on */
  const char* pjrt_options;    /* TORCH_TPU_PJRT_OPTIONS (client options; parsed by the pjrt room), or NULL */
  const char* xla_options;     /* TORCH_TPU_XLA_OPTIONS (compile options; parsed by the pjrt room), or NULL */
  bool target_refuse;          /* TORCH_TPU_TARGET_REFUSE: a program the shadow target refuses is not run */
  int64_t compile_notice_ms;   /* TORCH_TPU_COMPILE_NOTICE_MS: a compile burst this long says so; 0: never */
  int64_t compile_threads; /* TORCH_TPU_COMPILE_THREADS: 0..64 programs compiling at once; -1: the cores */
  /* TORCH_TPU_TARGET_COMPILE_THREADS: 1..64 compile-only programs compiling for the target at once
  ** (on the pool); default 1: libtpu spreads one compile over the host's cores itself */
  int64_t target_compile_threads;
} tpurt_config_t;

/* The configuration; a variable whose value does not parse reads as its
** default here, and tpurt_config_check reports it. Never fails. */
const tpurt_config_t* tpurt_config(void);
/* For tests only: reads the environment again. Strings of the previous
** configuration are freed, so no other thread may be using them. */
void tpurt_config_reload_for_test(void);
/* NULL if every TORCH_TPU_* variable parsed, else an error naming the first
** bad one, its value and what it accepts (the same error on every call). */
TPURT_MUST_USE tpurt_status_t tpurt_config_check(void);

/*===------------------------------------------------------------------===*/
/* Runtime                                                                */
/*===------------------------------------------------------------------===*/

/* Loads the PJRT plugin and creates the client, once per process. Safe to
** call many times; later calls return the first result again (a failed
** initialisation is remembered and reported every time). The plugin is
** found by TORCH_TPU_PJRT_PLUGIN, then libtpu, then the CPU plugin package;
** TORCH_TPU_NUM_DEVICES sets the CPU plugin's device count (default 1). */
TPURT_MUST_USE tpurt_status_t tpurt_runtime_init(void);

/* The plugin to load when TORCH_TPU_PJRT_PLUGIN is unset. The Python
** package discovers it (libtpu, a CUDA plugin, the CPU plugin package) and
** tells the core before the first init; C programs may call it too. */
void tpurt_runtime_set_default_plugin(const char* path);

/* A job that spans processes (torchrun, one process per chip): a plugin
** whose client spans processes (the GPU plugin; libtpu on a pod) exchanges
** its topology through key-value callbacks and is told its place by the
** create options node_id / num_nodes. The glue serves the store from
** torch.distributed's own (so there is one rendezvous) and calls this before
** the runtime starts; the client is then created with the callbacks and, for
** num_nodes > 1, the options (a plugin that refuses them is created again
** without them, the callbacks kept). The store must be thread-safe (the
** plugin calls it from its threads) and outlive the process; get blocks
** until the key exists or the timeout passes (then DEADLINE_EXCEEDED) and
** returns a malloc'd copy. FAILED_PRECONDITION once the runtime has started:
** its client is then a one-process client. */
typedef struct tpurt_kv_store_s {
  void* user;
  tpurt_status_t (*get)(void* user, const char* key, size_t key_size, int64_t timeout_ms, char** out_value,
                        size_t* out_size);
  tpurt_status_t (*put)(void* user, const char* key, size_t key_size, const char* value, size_t value_size);
} tpurt_kv_store_t;
TPURT_MUST_USE tpurt_status_t tpurt_runtime_set_distributed(int64_t node_id, int64_t num_nodes,
                                                            const tpurt_kv_store_t* store);

/* Plugin client options: TORCH_TPU_PJRT_OPTIONS="name=value,..." is read at
** init and passed to PJRT_Client_Create as typed named values (true/false:
** bool, an integer: int64, another number: float, else or "quoted": string).
** A malformed list fails init with a message naming the item; an option the
** plugin rejects fails init with the plugin's error and the list we passed. */

/* XLA compile options for the programs this thread compiles from now on:
** "name=value name=value" (DebugOptions fields, e.g. xla_dump_to=/tmp/d),
** on top of the process's TORCH_TPU_XLA_OPTIONS (same syntax; these win on
** a shared name). They reach XLA through CompileOptionsProto's
** env_option_overrides and are part of the executable cache key. An unknown
** name is XLA's compile error, naming it. NULL or "" returns the thread to
** the process options. A malformed spec is INVALID_ARGUMENT and changes
** nothing. */
TPURT_MUST_USE tpurt_status_t tpurt_set_thread_compile_options(const char* spec);

/* Number of addressable devices; 0 (never an error) if init failed. */
int tpurt_device_count(void);

typedef struct tpurt_runtime_info_s {
  const char* plugin_path;      /* the .so that was loaded */
  int api_major, api_minor;     /* PJRT_Api version the plugin reports */
  const char* platform_name;    /* "cpu", "tpu", "cuda" */
  const char* platform_version; /* free text from the plugin */
  const char* device_kind;      /* kind of device 0 */
  int device_count;
} tpurt_runtime_info_t;

/* Fills |out_info| with borrowed strings that live for the process. */
TPURT_MUST_USE tpurt_status_t tpurt_runtime_info(tpurt_runtime_info_t* out_info);

/* Kind string of device |device| ("cpu", "TPU v5 lite"...). */
TPURT_MUST_USE tpurt_status_t tpurt_device_kind(int device, const char** out_kind);

/* Waits for all work queued on |device| (-1: every device). Reports the first
** asynchronous error since the last sync, naming the op that caused it. */
TPURT_MUST_USE tpurt_status_t tpurt_synchronize(int device);

/*===------------------------------------------------------------------===*/
/* Storage                                                                */
/*===------------------------------------------------------------------===*/

/* A storage is the device memory behind one PyTorch StorageImpl. It holds a
** reference to a value (an immutable PJRT buffer, or a value of the pending
** graph, or nothing yet). Writes swap in a new value, so every alias sees
** them. Reference counted; thread-safe retain/release. */
typedef struct tpurt_storage_s tpurt_storage_t;

/* Creates an empty storage of |nbytes| on |device|. */
TPURT_MUST_USE tpurt_status_t tpurt_storage_create(int device, size_t nbytes, tpurt_storage_t** out_storage);
/* The same for PyTorch's allocator (torch.empty and every factory): device
** memory is only taken when a value is computed, so a storage larger than
** the whole device (its memory limit; the host's RAM on the CPU plugin) is
** refused here with RESOURCE_EXHAUSTED, else a never-written storage reads as
** zeros that the compiler folds and `torch.empty(huge).sum()` returns 0. */
TPURT_MUST_USE tpurt_status_t tpurt_storage_create_checked(int device, size_t nbytes,
                                                           tpurt_storage_t** out_storage);
void tpurt_storage_retain(tpurt_storage_t* storage);
void tpurt_storage_release(tpurt_storage_t* storage);
size_t tpurt_storage_nbytes(const tpurt_storage_t* storage);
int tpurt_storage_device(const tpurt_storage_t* storage);
/* A unique, never dereferenced address that stands for the storage's first
** byte: PyTorch compares data pointers, so distinct storages get disjoint
** [address, address + nbytes) ranges. */
void* tpurt_storage_address(const tpurt_storage_t* storage);
/* Grows or shrinks the storage to |nbytes|, keeping the common prefix. */
TPURT_MUST_USE tpurt_status_t tpurt_storage_resize(tpurt_storage_t* storage, size_t nbytes);

/* A strided view of a storage: what a PyTorch tensor is. Sizes and strides
** are in elements of |dtype|; |offset| too. */
typedef struct tpurt_tensor_s {
  tpurt_storage_t* storage; /* borrowed */
  tpurt_dtype_t dtype;
  int32_t rank;
  int64_t sizes[TPURT_MAX_RANK];
  int64_t strides[TPURT_MAX_RANK];
  int64_t offset;
} tpurt_tensor_t;

/* Host -> device: copies |host| (dense, row-major, |view|'s sizes and dtype)
** into the region of the storage that |view| describes. Asynchronous: the
** core copies the host bytes before returning. */
TPURT_MUST_USE tpurt_status_t tpurt_tensor_write_host(const tpurt_tensor_t* view, const void* host,
                                                      size_t host_nbytes);
/* Device -> host: waits for the value and writes |view| densely (row-major)
** into |host|. Surfaces pending asynchronous errors. */
TPURT_MUST_USE tpurt_status_t tpurt_tensor_read_host(const tpurt_tensor_t* view, void* host,
                                                     size_t host_nbytes);
/* Device -> device: dst = src (dtype conversion included), any devices. */
TPURT_MUST_USE tpurt_status_t tpurt_tensor_copy(const tpurt_tensor_t* dst, const tpurt_tensor_t* src);

/* How to split a tensor over a mesh of devices (torch_tpu.distributed). */
typedef struct tpurt_sharding_spec_s {
  int32_t num_devices;
  const int* devices; /* device indices, row-major over mesh_shape */
  int32_t mesh_rank;
  const int64_t* mesh_shape;
  const int8_t* dim_axis; /* per tensor dim: the mesh axis that splits it, or -1 (whole) */
} tpurt_sharding_spec_t;
/* Replaces the value of the whole tensor |view| by one shard per mesh
** device (in place: every alias sees it). INVALID_ARGUMENT for a view that
** is not its whole storage, a device that does not exist, or a dim not
** divisible by its mesh axis. */
TPURT_MUST_USE tpurt_status_t tpurt_tensor_shard(const tpurt_tensor_t* view,
                                                 const tpurt_sharding_spec_t* spec);
/* The number of devices the storage's value is spread over (0: one device). */
int32_t tpurt_storage_num_shards(const tpurt_storage_t* storage);

/*===------------------------------------------------------------------===*/
/* Ops                                                                    */
/*===------------------------------------------------------------------===*/

/* One argument of an aten op, as its schema types it. */
typedef enum tpurt_arg_kind_e {
  TPURT_ARG_NONE = 0,    /* an absent optional */
  TPURT_ARG_TENSOR,      /* a device tensor: .tensor */
  TPURT_ARG_TENSOR_LIST, /* .list: a run of .list_len TPURT_ARG_TENSOR args */
  TPURT_ARG_SCALAR,      /* a number that becomes a runtime parameter */
  TPURT_ARG_INT,         /* int / SymInt: a program attribute */
  TPURT_ARG_FLOAT,       /* float: a runtime parameter, like SCALAR */
  TPURT_ARG_BOOL,        /* bool: a program attribute */
  TPURT_ARG_INT_LIST,    /* int[] and bool[] (0/1): a program attribute */
  TPURT_ARG_FLOAT_LIST,  /* float[] (ScalarList): runtime parameters */
  TPURT_ARG_DTYPE,       /* ScalarType: a program attribute */
  TPURT_ARG_STRING,      /* str: a program attribute (e.g. "tanh") */
  TPURT_ARG_GENERATOR,   /* RNG state: a runtime parameter */
  TPURT_ARG_OTHER,       /* something the core ignores (layout, device...) */
} tpurt_arg_kind_t;

/* The three tiers of PyTorch's type promotion. */
typedef enum tpurt_scalar_tier_e {
  TPURT_TIER_TENSOR = 0, /* a tensor with dim > 0 */
  TPURT_TIER_ZERO_DIM,   /* a 0-d tensor that is not a wrapped number */
  TPURT_TIER_WRAPPED,    /* a Python number */
} tpurt_scalar_tier_t;

typedef struct tpurt_arg_s {
  tpurt_arg_kind_t kind;
  bool is_write; /* the schema marks this argument as mutated, Tensor(a!) */
  union {
    tpurt_tensor_t tensor;
    struct { /* SCALAR, FLOAT: the value; dtype is Bool, Long, Double, or a
             ** 0-d CPU tensor's own dtype. */
      tpurt_dtype_t dtype;
      tpurt_scalar_tier_t tier;
      double f;
      int64_t i;
    } scalar;
    int64_t i; /* INT, BOOL (0/1), DTYPE */
    struct {
      const int64_t* data;
      int32_t len;
    } ints;
    struct {
      const double* data;
      int32_t len;
    } floats;
    const char* str;
    struct {
      uint64_t seed;
      uint64_t offset; /* counter, advanced by the caller after the call */
    } rng;
    int32_t list_len; /* TENSOR_LIST: the next list_len args are its items */
  } u;
} tpurt_arg_t;

/* A tensor result of an op: a new storage (owned by the caller, retained
** once) viewed densely with |sizes|. A NULL storage is an undefined tensor
** (e.g. a gradient the output mask did not ask for). */
typedef struct tpurt_result_s {
  /* A number known without the device (a SymInt return such as SDPA's
  ** max_q): storage is NULL and host_int holds it. */
  bool is_host_int;
  int64_t host_int;
  tpurt_storage_t* storage;
  tpurt_dtype_t dtype;
  int32_t rank;
  int64_t sizes[TPURT_MAX_RANK];
  /* Dense row-major unless has_strides: then a permuted dense layout, as
  ** PyTorch's meta kernel gives it (e.g. attention output in its query's
  ** memory order), so later view ops see the strides PyTorch expects. */
  bool has_strides;
  int64_t strides[TPURT_MAX_RANK];
  int device;
} tpurt_result_t;

/* Enough for ordinary ops; ops returning Tensor[] (_foreach_*) need up
** to one result per list item: size results by the tensors passed. */
#define TPURT_MAX_RESULTS 16

/* PyTorch's float32 matmul precision (torch.get_float32_matmul_precision())
** when an op is called: f32 dots and convolutions ask the platform for it.
** Zero is PyTorch's default. */
typedef enum tpurt_matmul_precision_e {
  TPURT_MATMUL_PRECISION_HIGHEST = 0,
  TPURT_MATMUL_PRECISION_HIGH = 1,
  TPURT_MATMUL_PRECISION_MEDIUM = 2,
} tpurt_matmul_precision_t;

typedef struct tpurt_op_call_s {
  const char* name; /* "aten::add.Tensor" */
  const tpurt_arg_t* args;
  int32_t num_args;
  int device;                                /* device the op runs on */
  tpurt_matmul_precision_t matmul_precision; /* part of the op's cache key */
  /* Outputs, for ops whose schema returns new tensors: the caller's array
  ** of max_results entries (TPURT_MAX_RESULTS, or more for Tensor[]). */
  tpurt_result_t* results;
  int32_t max_results;
  int32_t num_results;
  /* Set with TPURT_NEEDS_RESIZE: resize args[resize_arg] to resize_sizes
  ** and call again. */
  int32_t resize_arg;
  int32_t resize_rank;
  int64_t resize_sizes[TPURT_MAX_RANK];
} tpurt_op_call_t;

/* True if the core has a native rule for |name|. */
bool tpurt_op_supported(const char* name);

/* What a caller must know of op |name| before it translates the op's
** arguments, from the op's row (all false for an op without one); ask once
** per op. */
typedef struct tpurt_op_facts_s {
  /* The op draws random numbers but its schema takes no Generator
  ** (native_dropout): pass the device's default generator as one trailing
  ** GENERATOR arg, and advance it after the call, as for an explicit one. */
  bool default_generator;
  /* tpurt_op_check_args has something to check for this op. */
  bool checks_args;
} tpurt_op_facts_t;
tpurt_op_facts_t tpurt_op_facts(const char* name);

/* Reads a tensor to the host as tpurt_tensor_read_host does (which is one). */
typedef tpurt_status_t (*tpurt_read_host_fn)(const tpurt_tensor_t* view, void* host, size_t host_nbytes);

/* Checks the argument values of |call| that PyTorch's CPU kernels refuse
** and its program would use anyway: an index out of bounds (a gather clamps
** it, a scatter drops it) and an integer division or remainder by zero
** (XLA gives -1 or the dividend). The error is PyTorch's, in its words, with
** OUT_OF_RANGE where PyTorch raises an IndexError. Numbers the call holds (a
** Python number, a 0-d CPU tensor) are always checked; a device tensor's
** values only through |read|, one host read (a sync) each: debug eager
** passes tpurt_tensor_read_host, the other modes NULL. Call it before
** tpurt_op_run; NULL when the values are fine. */
TPURT_MUST_USE tpurt_status_t tpurt_op_check_args(const tpurt_op_call_t* call, tpurt_read_host_fn read);

/* Runs the op. In-place and out= variants write into their is_write tensor
** args (every alias of those storages sees the new values) and produce no
** results; functional ops fill call->results. */
TPURT_MUST_USE tpurt_status_t tpurt_op_run(tpurt_op_call_t* call);

/*===------------------------------------------------------------------===*/
/* Execution modes                                                        */
/*===------------------------------------------------------------------===*/

/* When the pending graph is flushed; per thread. */
typedef enum tpurt_eager_mode_e {
  TPURT_MODE_DEFER_NEVER = 0,        /* strict eager: every op runs at once, async */
  TPURT_MODE_LAUNCH_BLOCKING = 1,    /* debug eager: every op runs and is waited for */
  TPURT_MODE_DEFER_AND_FUSE = 2,     /* fused eager: ops batch into one program */
  TPURT_MODE_INTERNAL_DEFER_ALL = 3, /* tracing for torch.compile: never flushed */
} tpurt_eager_mode_t;

/* The calling thread's mode. The first call reads TORCH_TPU_LAUNCH_BLOCKING
** and TORCH_TPU_DEFER_AND_FUSE. Leaving fused eager flushes. */
tpurt_eager_mode_t tpurt_get_eager_mode(void);
TPURT_MUST_USE tpurt_status_t tpurt_set_eager_mode(tpurt_eager_mode_t mode);
/* Runs the pending graph of fused eager now. */
TPURT_MUST_USE tpurt_status_t tpurt_flush(void);
/* Flushes by reason, for the metrics: name and count of reason |i| (0..). */
int tpurt_flush_reason_count(void);
const char* tpurt_flush_reason_name(int i);
uint64_t tpurt_flush_count(int i);

/*===------------------------------------------------------------------===*/
/* Tracing for torch.compile                                              */
/*===------------------------------------------------------------------===*/

/* A compiled program: traced once, run many times with new inputs. */
typedef struct tpurt_program_s tpurt_program_t;

/* Starts recording every op into one graph (the calling thread must be in
** TPURT_MODE_INTERNAL_DEFER_ALL). */
TPURT_MUST_USE tpurt_status_t tpurt_trace_begin(int device);
/* Declares |placeholder| (dense) as input |index| of the program. */
TPURT_MUST_USE tpurt_status_t tpurt_trace_input(const tpurt_tensor_t* placeholder, int32_t index);
/* Declares |placeholder| as input |index| of a compile-only trace, split
** over a mesh as |spec| says (tpurt_tensor_shard's spec; partition p is
** the target's device p, so spec->devices is not read). The program then
** spans spec->num_devices partitions: tpurt_trace_end compiles it for that
** many chips of the target. INVALID_ARGUMENT for a bad mesh, a dim not
** divisible by its axis, or two meshes in one trace; tpurt_trace_end
** refuses a trace that is not compile-only. */
TPURT_MUST_USE tpurt_status_t tpurt_trace_input_sharded(const tpurt_tensor_t* placeholder, int32_t index,
                                                        const tpurt_sharding_spec_t* spec);
/* Ends the trace: the program returns |outputs| (dense copies of those
** views); it is compiled (through the cache) now. */
TPURT_MUST_USE tpurt_status_t tpurt_trace_end(const tpurt_tensor_t* outputs, int32_t num_outputs,
                                              int32_t num_inputs, tpurt_program_t** out_program);
/* Compile-only tracing on this thread: tpurt_trace_end compiles the program
** for the shadow target only (recorded and persisted like shadow compiles)
** and never for this process's plugin; the program cannot run. The target's
** compile runs on the compile pool: tpurt_trace_end returns without waiting
** for it, and the verdict (a refusal too) is the record's, read after
** tpurt_shadow_wait. No target set is tpurt_trace_end's error. */
void tpurt_trace_set_compile_only(bool on);
/* Abandons an unfinished trace (the traced function raised). */
void tpurt_trace_abort(void);
/* Runs the program: one launch. Results are new tensors. Random ops inside
** draw from |rng| = the device generator's (seed, offset); the caller then
** advances the offset by tpurt_program_num_rng(). */
TPURT_MUST_USE tpurt_status_t tpurt_program_run(tpurt_program_t* program, int device,
                                                const tpurt_tensor_t* inputs, int32_t num_inputs,
                                                const uint64_t rng[2], tpurt_result_t* results,
                                                int32_t max_results);
int32_t tpurt_program_num_rng(const tpurt_program_t* program);
/* True if |inputs| can be run as they are: on |device|, contiguous, with
** the traced dtypes and sizes. The caller's fast path for repeated calls;
** anything else takes the slow path (signature, maybe a new trace). */
bool tpurt_program_accepts(const tpurt_program_t* program, int device, const tpurt_tensor_t* inputs,
                           int32_t num_inputs);
int32_t tpurt_program_num_outputs(const tpurt_program_t* program);
/* The StableHLO text of the program (borrowed). */
const char* tpurt_program_text(const tpurt_program_t* program);
void tpurt_program_free(tpurt_program_t* program);

/*===------------------------------------------------------------------===*/
/* Metrics                                                                */
/*===------------------------------------------------------------------===*/

/* The one list of the metrics, in report order: X(name, KIND, label).
** tpurt_metrics_t's fields, tpurt_metric_infos(), and through it the keys of
** torch_tpu.metrics() and the lines of metrics_report() all come from it.
** KIND is COUNT (a uint64_t) or SECONDS (a double). */
#define TPURT_METRICS(X)                                                                              \
  X(compiles, COUNT, "compiles")                           /* compilations done by the plugin */      \
  X(cache_hits, COUNT, "executable cache hits")            /* executable reuses */                    \
  X(cache_hits_memory, COUNT, "cache hits in memory")      /* programs found in tier 1 */             \
  X(cache_hits_disk, COUNT, "cache hits on disk")          /* programs loaded from tier 2 */          \
  X(cache_entries, COUNT, "cached programs")               /* programs tier 1 holds now */            \
  X(cache_bytes_memory, COUNT, "cached program bytes")     /* bytes tier 1 holds now */               \
  X(cache_disk_writes, COUNT, "cache writes to disk")      /* entries written to tier 2 */            \
  X(cache_disk_rejects, COUNT, "cache entries rejected")   /* corrupt, truncated, foreign */          \
  X(plans, COUNT, "eager op plans")                        /* held now, each holds its program */     \
  X(plan_bytes, COUNT, "eager op plan bytes")              /* their bytes in the memory budget */     \
  X(executions, COUNT, "executions")                       /* PJRT program launches */                \
  X(spmd_compiles, COUNT, "SPMD programs compiled (mesh)") /* programs compiled for a mesh */         \
  X(compile_seconds, SECONDS, "time compiling (s)")                                                   \
  X(compiles_eager_op, COUNT, "compiles: eager ops") /* strict-eager op programs */                   \
  X(compile_seconds_eager_op, SECONDS, "time compiling eager ops (s)")                                \
  X(compiles_fused_graph, COUNT, "compiles: fused graphs") /* fused-eager graphs */                   \
  X(compile_seconds_fused_graph, SECONDS, "time compiling fused graphs (s)")                          \
  X(compiles_compiled_graph, COUNT, "compiles: compiled graphs") /* torch.compile graphs */           \
  X(compile_seconds_compiled_graph, SECONDS, "time compiling compiled graphs (s)")                    \
  X(compiles_block, COUNT, "compiles: blocks") /* tagged BLOCK by the caller */                       \
  X(compile_seconds_block, SECONDS, "time compiling blocks (s)")                                      \
  X(max_concurrent_compiles, COUNT, "most compiles at once")    /* since the last reset */            \
  X(queued_launches, COUNT, "eager ops queued behind compiles") /* launched from the compile queue */ \
  X(execute_seconds, SECONDS, "device time (s)") /* of completed launches (completion events) */      \
  X(bytes_to_device, COUNT, "bytes to device")                                                        \
  X(bytes_from_device, COUNT, "bytes from device")                                                    \
  X(live_buffers, COUNT, "live buffers")   /* PJRT buffers held now */                                \
  X(live_storages, COUNT, "live storages") /* storage objects alive now */                            \
  X(bytes_in_use, COUNT, "bytes in use")   /* bytes of live buffers, all devices */                   \
  X(peak_bytes_in_use, COUNT, "peak bytes in use")

#define TPURT_METRIC_TYPE_COUNT uint64_t
#define TPURT_METRIC_TYPE_SECONDS double
#define TPURT_METRIC_FIELD_(name, kind, label) TPURT_METRIC_TYPE_##kind name;
/* A hit on either tier of the executable cache (csrc/cache/cache.h) is not
** a compile. */
typedef struct tpurt_metrics_s {
  TPURT_METRICS(TPURT_METRIC_FIELD_)
} tpurt_metrics_t;
#undef TPURT_METRIC_FIELD_

/* One metric of TPURT_METRICS, for the glue to read a tpurt_metrics_t by
** name. */
typedef struct tpurt_metric_info_s {
  const char* name;  /* the field's name: the key in torch_tpu.metrics() */
  const char* label; /* the line in metrics_report() */
  bool is_seconds;   /* a double; else a uint64_t */
  size_t offset;     /* of the field in tpurt_metrics_t */
} tpurt_metric_info_t;
/* Every metric, in report order; sets *out_count. */
const tpurt_metric_info_t* tpurt_metric_infos(int* out_count);

void tpurt_metrics_get(tpurt_metrics_t* out_metrics);
void tpurt_metrics_reset(void);

/* The core's version, the package's (torch_tpu/_version.py, the one source:
** the Makefile passes it to the compiler); part of every executable cache
** key. */
const char* tpurt_version(void);

/* Where the executable cache stands. Settles the cache's configuration
** (environment, directory) if nothing has yet; never fails. */
typedef struct tpurt_cache_info_s {
  char dir[4096];                        /* tier-2 directory ("" if none was chosen) */
  bool disk_enabled;                     /* tier 2 in use */
  char refused[512];                     /* why tier 2 is not in use ("" when it is) */
  uint64_t disk_entries, disk_bytes;     /* entry files in the directory now */
  uint64_t memory_entries, memory_bytes; /* tier 1 now */
  uint64_t memory_limit_bytes;           /* TORCH_TPU_CACHE_MEMORY_BYTES */
} tpurt_cache_info_t;
void tpurt_cache_info(tpurt_cache_info_t* out_info);
/* Imports the entries of another cache directory |source_dir| (copied from
** another host, say) into this process's disk tier: each entry's MAC must
** check under the source's own key (its mac.key), and the plugin must load
** the program; it is then rewritten under this cache's key. An entry that
** fails is reported on stderr and counted in *out_refused. Fails when this
** process has no disk tier or the source has no key. */
TPURT_MUST_USE tpurt_status_t tpurt_cache_import(const char* source_dir, uint64_t* out_imported,
                                                 uint64_t* out_refused);
/*===------------------------------------------------------------------===*/
/* Events, launch timing, memory, host memory                             */
/*===------------------------------------------------------------------===*/

/* A marker in a device's work queue (one queue per device: the default
** stream). Recording captures the work queued so far; its time is when that
** work completed, from the plugin's completion events. */
typedef struct tpurt_event_s tpurt_event_t;
/* Runs pending fused work first, so the event follows it. */
TPURT_MUST_USE tpurt_status_t tpurt_event_record(int device, tpurt_event_t** out_event);
void tpurt_event_free(tpurt_event_t* event);
/* True once the captured work has completed (never waits). */
bool tpurt_event_query(tpurt_event_t* event);
void tpurt_event_synchronize(tpurt_event_t* event);
/* Milliseconds from |start|'s completion to |end|'s; waits for both. */
double tpurt_event_elapsed_ms(tpurt_event_t* start, tpurt_event_t* end);

/* One completed unit of device work: a program launch or an asynchronous
** copy to the host. Times are host monotonic nanoseconds (see
** tpurt_now_ns); start..end is its device time: from when the device could
** start it (its launch, or the previous completion on the device) to its
** completion event. */
typedef struct tpurt_launch_record_s {
  char name[128]; /* the op or graph label */
  int device;
  int32_t num_ops; /* StableHLO ops in the program; 0 if unknown */
  bool is_copy;    /* a device -> host copy */
  bool compiled;   /* first run after a compile (else a cache hit) */
  uint64_t launch_ns, start_ns, end_ns;
  uint64_t correlation; /* the launching thread's tpurt_set_launch_correlation id (0: none) */
} tpurt_launch_record_t;
uint64_t tpurt_now_ns(void);
/* Tags the launches this thread queues from now on with |id| (a profiler's
** correlation id of the op being run; 0: none), so that a trace can link a
** launch's device time to the op that queued it. */
void tpurt_set_launch_correlation(uint64_t id);
/* Names the programs this thread compiles from now on (|label| must live
** until the next call; NULL: the op or graph names them). The long-compile
** notice says what is compiling with it. */
void tpurt_set_compile_label(const char* label);
/* What a compile was for, in the per-kind metrics (compiles_<kind>,
** compile_seconds_<kind>). AUTO: the site that compiles says (a strict-eager
** op, a fused-eager graph, a traced torch.compile graph); another kind set
** here wins over the site's for this thread's compiles until it is set back
** (a caller that compiles blocks of a model sets BLOCK around them).
** Returns the kind set before. */
typedef enum tpurt_compile_kind_e {
  TPURT_COMPILE_KIND_AUTO = 0, /* counted as OTHER when no site says */
  TPURT_COMPILE_KIND_EAGER_OP,
  TPURT_COMPILE_KIND_FUSED_GRAPH,
  TPURT_COMPILE_KIND_COMPILED_GRAPH,
  TPURT_COMPILE_KIND_BLOCK,
  TPURT_COMPILE_KINDS,
} tpurt_compile_kind_t;
tpurt_compile_kind_t tpurt_set_compile_kind(tpurt_compile_kind_t kind);
/* Waits for every launch queued so far (all devices) without reporting or
** clearing asynchronous errors: they still surface at the next
** synchronize. Never initialises the runtime. */
void tpurt_wait_idle(void);
/* Copies the records from index |since| on; returns how many, sets the
** next index. The core keeps the latest 4096 (LOG_SIZE in pjrt/execute.c).
** With |max| 0, only sets the index the next record will have. */
int tpurt_launch_log(uint64_t since, tpurt_launch_record_t* out, int max, uint64_t* out_next);

/* Device time per program name, since the last tpurt_metrics_reset. */
typedef struct tpurt_program_stats_s {
  char name[128];
  uint64_t runs;
  uint64_t device_ns;
} tpurt_program_stats_t;
int tpurt_program_stats(tpurt_program_stats_t* out, int max, uint64_t* out_device_ns, uint64_t* out_runs);

/* What the plugin reports of a device's memory (PJRT_Device_MemoryStats).
** -1: not reported. reported is false where the plugin has no such call
** (the CPU plugin); on the CPU platform the device's memory is the host's,
** so bytes_limit and bytes_free are then the host's RAM (from_host). */
typedef struct tpurt_device_memory_s {
  bool reported;
  bool from_host;
  int64_t bytes_in_use, peak_bytes_in_use, num_allocs, largest_alloc_size;
  int64_t bytes_limit, bytes_reserved, peak_bytes_reserved;
  int64_t bytes_free; /* bytes_limit - bytes_in_use, or the host's available RAM */
} tpurt_device_memory_t;
TPURT_MUST_USE tpurt_status_t tpurt_device_memory(int device, tpurt_device_memory_t* out_memory);

/* Host memory for staging copies (PyTorch's pinned memory). Page aligned;
** freeing waits for asynchronous copies into it. */
TPURT_MUST_USE tpurt_status_t tpurt_host_alloc(size_t nbytes, void** out_ptr);
void tpurt_host_free(void* ptr);
/* True if |ptr| lies inside a live tpurt_host_alloc block. */
bool tpurt_host_contains(const void* ptr);

/* Device -> host without waiting (a non_blocking copy into host memory from
** tpurt_host_alloc): complete at the device's next event or synchronize. */
TPURT_MUST_USE tpurt_status_t tpurt_tensor_read_host_async(const tpurt_tensor_t* view, void* host,
                                                           size_t host_nbytes);

/* Per device memory: bytes held by live buffers now and at peak. */
uint64_t tpurt_memory_allocated(int device);
uint64_t tpurt_max_memory_allocated(int device);
void tpurt_reset_peak_memory(int device);

/*===------------------------------------------------------------------===*/
/* Compile-only targets (pjrt/target.c, cache/shadow.c)                   */
/*===------------------------------------------------------------------===*/

/* A target is a PJRT plugin plus a topology name ("v6e:1x1", "v5e:2x2"):
** programs compile for it through PJRT_Compile with no client and no
** device, so nothing compiled for it runs here. It tells the compiler's
** verdict, cost analysis and memory needs. Thread-safe (one compile at a
** time per target). */
typedef struct tpurt_target_s tpurt_target_t;

/* Loads |plugin_path| (initialising it once per process) and makes the
** topology |topology|. A name the plugin does not know is its error. */
TPURT_MUST_USE tpurt_status_t tpurt_target_create(const char* plugin_path, const char* topology,
                                                  tpurt_target_t** out_target);
void tpurt_target_free(tpurt_target_t* target);

typedef struct tpurt_target_info_s {
  const char* plugin_path;
  int api_major, api_minor;
  const char* topology;         /* the name it was made from */
  const char* platform_name;    /* "tpu" */
  const char* platform_version; /* free text from the plugin */
  const char* device_kind;      /* "TPU v6 lite" */
  int num_devices;              /* chips (or cores) in the topology */
  const char* identity;         /* plugin, api, platform and topology: a cache key part */
  const char* runtime_identity; /* the plugin identity of a process whose runtime is this plugin (the
                                ** key of its executable cache), as far as it can be known here */
} tpurt_target_info_t;
/* Borrowed strings that live as long as |target|. */
void tpurt_target_info(const tpurt_target_t* target, tpurt_target_info_t* out_info);
/* The global id of the topology's |index|th device (-1: no such device),
** for device assignments of SPMD programs. */
int64_t tpurt_target_device_id(const tpurt_target_t* target, int index);

/* What compiling one program for a target told. The figures are the
** compiler's: flops and bytes from its cost analysis, estimated_seconds its
** own model of the run time (an estimate, never a measurement; the compiler
** gives none for some programs, e.g. with while loops: has_estimate false).
** Memory is the chip's (HBM) need of one device. */
typedef struct tpurt_target_program_s {
  double compile_seconds;
  bool has_cost, has_estimate, has_memory;
  double flops, transcendentals, bytes_accessed;
  double estimated_seconds; /* 0 unless has_estimate */
  int64_t argument_bytes, output_bytes, alias_bytes, temp_bytes, generated_code_bytes;
  int64_t host_temp_bytes;
  int64_t serialized_bytes;
  char fingerprint[80];
} tpurt_target_program_t;

/* Compiles StableHLO text |mlir| for |target| with CompileOptionsProto bytes
** |options| (NULL: this thread's compile options, as the runtime uses).
** A compiler refusal is its error, naming the target. */
TPURT_MUST_USE tpurt_status_t tpurt_target_compile(tpurt_target_t* target, const char* mlir, size_t mlir_size,
                                                   const char* options, size_t options_size,
                                                   tpurt_target_program_t* out_program);

/* tpurt_target_compile, also returning the executable serialised
** (PJRT_Executable_Serialize) in *out_bytes (malloc'd; NULL when the plugin
** cannot serialise it). */
TPURT_MUST_USE tpurt_status_t tpurt_target_compile_serialized(tpurt_target_t* target, const char* mlir,
                                                              size_t mlir_size, const char* options,
                                                              size_t options_size,
                                                              tpurt_target_program_t* out_program,
                                                              char** out_bytes, size_t* out_size);

/* Precompile: with it on (and a shadow target set), each one-device program
** compiled for the target is also written, serialised, into this process's
** executable cache directory under the key that a process running on the
** target's plugin computes for it (cache_precompiled_store): a host with
** that plugin and its chips, given the directory (`python -m torch_tpu
** cache import DIR`), loads it without compiling. Meanwhile this process's
** own programs are kept in memory only, so the directory holds the target's
** programs alone. */
void tpurt_shadow_set_precompile(bool on);

/* Shadow compilation: with a target set, every program this process
** compiles or takes from the cache for its own plugin (strict-eager plans,
** fused graphs, traced programs, SPMD programs) is also compiled for the
** target, once per distinct program, and recorded. Lowering decisions that
** depend on the platform ask the target (tpurt_lowering_platform). Takes
** ownership of |target|; NULL turns shadowing off. Records start empty. */
TPURT_MUST_USE tpurt_status_t tpurt_shadow_set_consume(tpurt_target_t* target);
/* The current target (borrowed), or NULL. */
const tpurt_target_t* tpurt_shadow_target(void);
/* Forgets the records (and their run counts) of the current target. */
void tpurt_shadow_reset(void);

typedef struct tpurt_shadow_record_s {
  const char* label; /* the aten op, or the fused graph / program it came from */
  const char* error; /* NULL: the target compiled it; else the compiler's refusal */
  uint64_t runs;     /* launches on this process's plugin since it was recorded */
  int32_t num_partitions;
  bool from_disk;   /* the figures came from the persistent cache (not compiled now) */
  bool precompiled; /* its serialised executable is in the cache dir for the target's runtime */
  uint64_t hash;
  tpurt_target_program_t program;
} tpurt_shadow_record_t;
/* Copies up to |max| records into |out| (strings live for the process) and
** returns how many there are, after waiting for the compile-only programs
** still compiling (tpurt_shadow_wait). */
size_t tpurt_shadow_records(tpurt_shadow_record_t* out, size_t max);
/* Waits until no compile-only program (tpurt_trace_set_compile_only) is
** compiling for the target on the compile pool. */
void tpurt_shadow_wait(void);
/* The platform lowering rules see: the shadow target's when one is set
** (programs are lowered for the chip they are meant for), else the
** runtime's; "" before init. */
const char* tpurt_lowering_platform(void);

#ifdef __cplusplus
}
#endif

#endif /* TPURT_H_ */
