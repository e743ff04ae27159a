/* pjrt_internal.h: what the files of the pjrt room share and nobody else
** sees: the loaded api table, the process-wide client state, and the call
** helper that turns a PJRT_Error into a status.
*/
#ifndef TPURT_PJRT_PJRT_INTERNAL_H_
#define TPURT_PJRT_PJRT_INTERNAL_H_

#include <pthread.h>

#include "../base/base.h"
#include "pjrt.h"
#include "pjrt_abi.h"

#define PJRT_MIN_MINOR 57   /* 0.57 rearranged PJRT_Api: older is unsupported */
#define PJRT_MAX_DEVICES 64 /* the size of the per-device counters */

/* A loaded plugin: its api table and version. */
typedef struct pjrt_api_s {
  char* path;
  const unsigned char* table; /* the PJRT_Api struct */
  size_t size;                /* its struct_size */
  int major, minor;
} pjrt_api_t;

/* Loads |path| and checks its api table (version, size). Does not
** initialise the plugin. Never dlcloses. */
TPURT_MUST_USE tpurt_status_t pjrt_api_load(const char* path, pjrt_api_t* out_api);
/* Calls Plugin_Initialize on |api| unless this process already did for
** the same plugin table (the runtime and a target may share a plugin). */
TPURT_MUST_USE tpurt_status_t pjrt_api_initialize_once(const pjrt_api_t* api);
/* The function in |slot|, or NULL if the plugin's table lacks it. */
void* pjrt_api_slot(const pjrt_api_t* api, int slot);
/* Calls slot |slot| (named |name| in messages, e.g. "Client_Compile") with
** |args|; a missing slot is UNIMPLEMENTED, a PJRT error is converted to a
** status with the same code and message and destroyed. */
TPURT_MUST_USE tpurt_status_t pjrt_api_call(const pjrt_api_t* api, int slot, const char* name, void* args);
/* Marks the plugin unusable in this process: a forked child of a process
** whose plugin was initialised has its memory but none of its threads, so
** a call would wait for work no thread will do (Event_Await hung). From
** then on every pjrt_api_call fails at once (FAILED_PRECONDITION, saying
** to use the spawn start method) and calls nothing. */
void pjrt_api_mark_forked(void);
bool pjrt_api_forked(void);
/* The error every use of the runtime gets in such a child; |name| says
** what was tried. */
TPURT_MUST_USE tpurt_status_t pjrt_api_forked_error(const char* name);
/* The completion lists and their lock after a fork (execute.c): the
** child drops the parent's pending launches without calling the plugin. */
void pjrt_execute_forget_after_fork(void);
/* A status from |error| (consumed: the PJRT error is freed); NULL: NULL. */
TPURT_MUST_USE tpurt_status_t pjrt_api_error_consume(const pjrt_api_t* api, pjrt_abi_error_t* error);
/* Destroys |event|, ignoring NULL. */
void pjrt_api_event_free(const pjrt_api_t* api, pjrt_abi_event_t* event);
/* Waits for |event|, destroys it, and returns its error. */
TPURT_MUST_USE tpurt_status_t pjrt_api_event_await(const pjrt_api_t* api, pjrt_abi_event_t* event);

/* Declares |var|, an args struct of |type| zeroed with our 0.114
** STRUCT_SIZE set. */
#define PJRT_ARGS(type, var) type var = {.struct_size = type##_SIZE}
/* A StableHLO module's text as a PJRT program (the client's compile and a
** target's compile both take one); borrows |mlir|. */
static inline pjrt_abi_program_t pjrt_mlir_program(const char* mlir, size_t mlir_size) {
  PJRT_ARGS(pjrt_abi_program_t, program);
  program.code = mlir;
  program.code_size = mlir_size;
  program.format = "mlir";
  program.format_size = 4;
  return program;
}
/* Calls |slot| of the process-wide api. */
#define PJRT_CALL(slot, name, args) pjrt_api_call(&pjrt_g.api, (slot), (name), (args))

/* One unit of device work: a program launch, or an asynchronous copy to
** the host. Buffers it produced keep it (the op name for error messages);
** events and the launch log read its times. */
typedef struct pjrt_launch_s {
  tpurt_refcount_t refcount;
  int device;
  bool is_copy;         /* a device -> host copy, not a program */
  bool first_run;       /* the executable's first launch after it was compiled */
  bool has_callback;    /* Event_OnReady will set done_ns */
  int32_t num_ops;      /* StableHLO ops of the program (0: unknown) */
  uint64_t launch_ns;   /* host monotonic clock when it was queued */
  uint64_t done_ns;     /* when its completion event fired; 0 before (atomic) */
  uint64_t correlation; /* the launching thread's profiler correlation id (0: none) */
  /* The buffers it produces, not retained: each clears its slot when it is
  ** released (lock held). When the launch fails, their bytes leave the
  ** memory counters at once (they hold no value), so memory_allocated and
  ** the next out-of-memory hint do not count a result that never was. */
  struct pjrt_buffer_s** outputs;
  size_t num_outputs;
  char op_name[];
} pjrt_launch_t;
void pjrt_launch_retain(pjrt_launch_t* launch);
void pjrt_launch_release(pjrt_launch_t* launch);
/* Takes the bytes of |launch|'s live outputs out of the memory counters
** (lock held): it failed, they hold no value. */
void pjrt_launch_failed_locked(pjrt_launch_t* launch);

/* The process-wide runtime, set up once by pjrt_init. */
typedef struct pjrt_state_s {
  pthread_mutex_t lock; /* serialises calls into the plugin */
  pjrt_api_t api;
  pjrt_abi_client_t* client;
  int num_devices;
  pjrt_abi_device_t* devices[PJRT_MAX_DEVICES];
  int device_ids[PJRT_MAX_DEVICES]; /* global ids (DeviceDescription_Id), for device assignments */
  char* device_kinds[PJRT_MAX_DEVICES];
  char* platform_name;
  char* platform_version;
  char* identity;
  pjrt_counters_t counters;
} pjrt_state_t;
extern pjrt_state_t pjrt_g;

/* Index of |device| among the addressable devices, or an OUT_OF_RANGE
** status. Requires a successful pjrt_init. */
TPURT_MUST_USE tpurt_status_t pjrt_check_device(int device);

/* Fills |out_values| (options->count of them) with PJRT_NamedValues that
** borrow |options|' strings. */
void pjrt_client_options_to_abi(const pjrt_client_options_t* options, pjrt_abi_named_value_t* out_values);

/* Records a new buffer in the counters (lock held). */
void pjrt_count_buffer_locked(const pjrt_buffer_t* buffer);
/* Wraps the plugin buffer |raw| (consumed; lock held): reads its type and
** dims. On error the plugin buffer is freed. */
TPURT_MUST_USE tpurt_status_t pjrt_wrap_buffer_consume_locked(pjrt_abi_buffer_t* raw, int device,
                                                              pjrt_launch_t* launch,
                                                              pjrt_buffer_t** out_buffer);
/* Destroys the plugin buffer of |raw| (lock held). */
void pjrt_raw_buffer_free_locked(pjrt_abi_buffer_t* raw);

#endif /* TPURT_PJRT_PJRT_INTERNAL_H_ */
