/*
 * nibble plugin ABI — the one contract between the nibble host (libnibble) and a backend plugin.
 *
 * Rules (docs/writing-a-plugin.md explains each):
 *  - A plugin is a shared library named libnibble_<name>.so that exports exactly one symbol,
 *    nibble_plugin_entry. Nothing runs at load time: no registering static constructors.
 *  - Every struct defined here starts with `uint32_t struct_size`. A minor ABI version only appends
 *    fields at the end of a struct; a field is present iff it lies wholly inside struct_size, and
 * an optional function pointer is usable iff it is present and non-NULL. Any other change bumps the
 *    major version, and a host refuses a plugin of another major.
 *  - Who stamps struct_size: a struct one side fills for the other to read (kernel descriptors,
 * layer descriptors, weights, forward arguments) carries the writer's own sizeof. An output struct
 * the caller provides (nibble_plugin, nibble_error, nibble_probe_result) carries the caller's
 *    capacity; the callee writes at most that many bytes and stores back the number it filled.
 *  - No C++ type and no exception crosses this boundary. Every fallible call returns a
 *    nibble_status and may fill a caller-owned nibble_error; nothing allocated on one side is freed
 *    on the other, except prepared weights, which only the plugin's `release` frees.
 *  - Activations and outputs cross as borrowed DLPack DLTensors (DLPack 0.6 layout), validated by
 *    the host before a plugin sees them. Weights cross as the canonical weight below.
 *  - Prepared weights are immutable: the host may call `forward` concurrently from several threads
 *    on one prepared handle, each call with its own workspace.
 *
 * Compiling against an older minor: define NIBBLE_ABI_MINOR (0 .. current) before including this
 * header and the structs take that minor's layout, as a plugin built with that SDK would see them.
 *
 * Minors: 1.1 appended nibble_host.thread_budget, nibble_layer_desc.max_zero/w2_max_zero and
 * nibble_kernel.prepared_bytes. 1.2 appends nibble_plugin.plugin_context/probe2/shutdown2 (loads,
 * below). A struct's "Appended in 1.2" section is where further 1.2 fields go, after those already
 * there; the assertions at the end of this header pin where each minor's fields start. 1.3 appends
 * the device model (below): nibble_layer_desc.device_type/device_id, nibble_exec.stream,
 * nibble_kernel.device_type and nibble_plugin.device_memory, whose table later gained events
 * (optional; a table whose struct_size ends at synchronize has none).
 *
 * Loads (1.2): a host may load one plugin several times in a process, once per host context (a
 * nibble Runtime has one), calling the entry point once per context with that context's own
 * nibble_host table. Each call returns its own kernel table and a plugin_context; the host passes
 * that context to probe2 and ends the load with shutdown2(plugin_context), after which it calls
 * nothing of that load. A host before 1.2 calls the entry point once and uses probe/shutdown.
 *
 * Devices (1.3): a kernel names the DLPack device type its forward takes (nibble_kernel.
 * device_type; absent or kDLCPU: CPU memory, as every kernel before 1.3). The host asks for a
 * layer on one device (nibble_layer_desc.device_type/device_id) and hands only kernels of that
 * device type to it; prepare uploads the repacked weight into device memory the prepared handle
 * owns (prepared_bytes counts those device bytes); the host checks that x, y, topk_ids and
 * topk_weights live on that device and passes a stream in nibble_exec, on which a device forward
 * is asynchronous. A device kernel owns its device scratch (the workspace stays host memory and
 * may be 0 bytes): the host links no device runtime and cannot allocate device memory itself, and
 * a kernel that takes its scratch stream-ordered keeps concurrent forwards on one prepared handle
 * legal. The host moves data through the plugin's nibble_device_memory (alloc, copy, sync), so a
 * host without any device library can still feed a device backend, and times queued work with its
 * events where the plugin offers them.
 */
#ifndef NIBBLE_SDK_PLUGIN_H
#define NIBBLE_SDK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NIBBLE_ABI_MAJOR 1
/* The newest minor this header describes. */
#define NIBBLE_ABI_MINOR_CURRENT 3
#ifndef NIBBLE_ABI_MINOR
#define NIBBLE_ABI_MINOR NIBBLE_ABI_MINOR_CURRENT
#endif
#if NIBBLE_ABI_MINOR > NIBBLE_ABI_MINOR_CURRENT || NIBBLE_ABI_MINOR < 0
#error "NIBBLE_ABI_MINOR is newer than this SDK header (or negative)"
#endif

/* The exported entry symbol's name, as a string, for loaders. */
#define NIBBLE_PLUGIN_ENTRY_SYMBOL "nibble_plugin_entry"
/* Put on the definition of nibble_plugin_entry: plugins build with hidden visibility, and this
 * makes the entry point the symbol they export (C++ also needs extern "C"; NIBBLE_PLUGIN does
 * both). */
#define NIBBLE_PLUGIN_EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------------------------------------- */
/* Status and errors                                                                              */

typedef int32_t nibble_status;
enum {
  NIBBLE_OK = 0,
  NIBBLE_INVALID_ARGUMENT = 1, /* a bad tensor, shape or descriptor */
  NIBBLE_UNSUPPORTED = 2,      /* a valid request this kernel does not implement */
  NIBBLE_OUT_OF_MEMORY = 3,
  NIBBLE_UNAVAILABLE = 4, /* the hardware or a dependency is missing */
  NIBBLE_INTERNAL = 5     /* a bug or an unexpected failure inside the plugin */
};

/* A status as short text ("invalid argument"); "unknown status" for a code this header does not
 * know. Static inline, so the ABI gains no symbol. */
static inline const char* nibble_status_name(nibble_status status) {
  switch (status) {
    case NIBBLE_OK:
      return "ok";
    case NIBBLE_INVALID_ARGUMENT:
      return "invalid argument";
    case NIBBLE_UNSUPPORTED:
      return "unsupported";
    case NIBBLE_OUT_OF_MEMORY:
      return "out of memory";
    case NIBBLE_UNAVAILABLE:
      return "unavailable";
    case NIBBLE_INTERNAL:
      return "internal error";
    default:
      return "unknown status";
  }
}

#define NIBBLE_ERROR_MESSAGE_CAPACITY 1024
/* Caller-owned error text; the callee writes a NUL-terminated message into `message`. */
typedef struct nibble_error {
  uint32_t struct_size;
  char message[NIBBLE_ERROR_MESSAGE_CAPACITY];
} nibble_error;

/* ---------------------------------------------------------------------------------------------- */
/* Host services                                                                                  */

enum { NIBBLE_LOG_DEBUG = 0, NIBBLE_LOG_INFO = 1, NIBBLE_LOG_WARNING = 2, NIBBLE_LOG_ERROR = 3 };

/* What the host offers one load of a plugin. Valid until that load ends (shutdown2); for a plugin
 * before 1.2, which has one load, for the life of the process. */
typedef struct nibble_host {
  uint32_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;
  const char* host_version; /* semver of libnibble */
  void* ctx;                /* the host context's state (one per Runtime); passed to each service */
  /* Log a line on behalf of plugin `plugin` (its name). Thread-safe. */
  void (*log)(void* ctx, int32_t level, const char* plugin, const char* message);
#if NIBBLE_ABI_MINOR >= 1
  /* Appended in 1.1: how many threads the plugin may keep busy (>= 1) for this host context. */
  int32_t (*thread_budget)(void* ctx);
#endif
} nibble_host;

/* ---------------------------------------------------------------------------------------------- */
/* Layers and weights                                                                             */

typedef enum nibble_op {
  NIBBLE_OP_LINEAR = 1, /* y[M,N] = x[M,K] · W^T + b, W quantized (canonical weight) */
  NIBBLE_OP_DENSE = 2,  /* the same with a plain f32/f16/bf16 weight (router, unconverted layers) */
  NIBBLE_OP_MOE = 3 /* y[M,K] = Σ_j w[m,j] · down_e(silu(gate_e(x)) · up_e(x)), e = ids[m,j] */
} nibble_op;

/* The numeric modes, named as everywhere else in nibble (CLI, JSON, docs): w4a16 and w4a8. The
 * name gives the 4-bit case; 8-bit weights run under the same modes (W8A16, W8A8). */
typedef enum nibble_numeric_mode {
  NIBBLE_MODE_FLOAT = 0, /* dense: weights and activations in floating point */
  NIBBLE_MODE_W4A16 = 1, /* quantized weights, activations stay floating point (f32/f16/bf16) */
  NIBBLE_MODE_W4A8 = 2, /* quantized weights, activations quantized to int8 per token at run time */
  /* Deprecated aliases of the two (the same values), kept so that existing plugins compile. */
  NIBBLE_MODE_WEIGHT_ONLY = NIBBLE_MODE_W4A16,
  NIBBLE_MODE_DYNAMIC_INT8 = NIBBLE_MODE_W4A8
} nibble_numeric_mode;

typedef enum nibble_activation { NIBBLE_ACT_SILU = 1 } nibble_activation;

/* Bit flags of activation dtypes, used in descriptors and kernels. */
enum { NIBBLE_DTYPE_F32 = 1u << 0, NIBBLE_DTYPE_F16 = 1u << 1, NIBBLE_DTYPE_BF16 = 1u << 2 };

/*
 * What a kernel is asked to implement; format-free on purpose (no GPTQ/AWQ field, no platform).
 * Linear: K inputs, N outputs. MoE: K = hidden size, N = intermediate size I of one expert;
 * group_size/bits/has_g_idx describe w13 ([2I][K]); the w2_* fields describe w2 ([K][I]).
 */
typedef struct nibble_layer_desc {
  uint32_t struct_size;
  int32_t op;       /* nibble_op */
  const char* name; /* the layer's prefix in the checkpoint, for messages */
  int64_t K;
  int64_t N;
  int32_t bits;       /* 4 or 8; 0 for dense */
  int32_t group_size; /* > 0, or -1 for one group per output channel */
  int32_t has_g_idx;  /* act-order: groups are not k / group_size */
  int32_t symmetric;  /* every zero point equals 2^(bits-1) */
  int32_t has_bias;
  DLDataType weight_dtype; /* dense: the weight's dtype; quantized: the scales' dtype */
  int32_t numeric_mode;    /* requested nibble_numeric_mode */
  uint32_t act_dtypes;     /* NIBBLE_DTYPE_* the host may pass at forward */
  /* MoE only */
  int32_t num_experts;
  int32_t top_k;
  int32_t activation; /* nibble_activation */
  int32_t w2_group_size;
  int32_t w2_has_g_idx;
  int32_t w2_symmetric;
#if NIBBLE_ABI_MINOR >= 1
  /* Appended in 1.1: the largest effective zero point of the weight (MoE: of every expert's w13)
   * and of every w2; 0 when the host does not know. 4-bit GPTQ v1 weights can reach 16, which
   * layouts with 4-bit zero points cannot hold. */
  int32_t max_zero;
  int32_t w2_max_zero;
#endif
#if NIBBLE_ABI_MINOR >= 3
  /* Appended in 1.3: where the layer runs (a DLDeviceType and its index); absent, 0 or kDLCPU
   * means host memory. A kernel whose device_type differs is never asked. */
  int32_t device_type;
  int32_t device_id;
#endif
} nibble_layer_desc;

/*
 * The canonical quantized weight of one linear layer (K inputs, N outputs). All pointers are
 * borrowed for the duration of `prepare` only.
 *   W[n][k] = (q[n*K + k] - zeros[g(k)*N + n]) * scales[g(k)*N + n],
 *   g(k) = g_idx ? g_idx[k] : k / group_size   (group_size -1: g(k) = 0).
 */
typedef struct nibble_canonical_weight {
  uint32_t struct_size;
  int32_t bits;
  int32_t group_size;
  int64_t K;
  int64_t N;
  int64_t num_groups;
  const uint8_t* q;   /* [N][K], one unsigned value (0 .. 2^bits-1) per byte */
  const void* scales; /* [num_groups][N], dtype scales_dtype (f16, bf16 or f32) */
  DLDataType scales_dtype;
  const uint8_t* zeros; /* [num_groups][N], effective zero points, never NULL */
  const int32_t* g_idx; /* [K] or NULL */
  const void* bias;     /* [N] or NULL */
  DLDataType bias_dtype;
} nibble_canonical_weight;

/* A plain weight [N][K] row-major, with optional bias [N]. Borrowed for `prepare` only. */
typedef struct nibble_dense_weight {
  uint32_t struct_size;
  int64_t K;
  int64_t N;
  const void* data;
  DLDataType dtype;
  const void* bias;
  DLDataType bias_dtype;
} nibble_dense_weight;

/*
 * MoE experts, handed out one at a time so the transient canonical form stays small. The plugin
 * calls get_expert(e) for e in [0, num_experts), in any order, and put_expert(e) when done with
 * that expert's weights. w13: [2I][K], gate rows first; w2: [K][I].
 */
typedef struct nibble_moe_source {
  uint32_t struct_size;
  int32_t num_experts;
  void* ctx;
  nibble_status (*get_expert)(void* ctx, int32_t expert, nibble_canonical_weight* w13,
                              nibble_canonical_weight* w2, nibble_error* error);
  void (*put_expert)(void* ctx, int32_t expert);
} nibble_moe_source;

/* The weight handed to prepare: the member matching desc->op is set, the others are NULL. */
typedef struct nibble_weight_input {
  uint32_t struct_size;
  const nibble_canonical_weight* quantized; /* NIBBLE_OP_LINEAR */
  const nibble_dense_weight* dense;         /* NIBBLE_OP_DENSE */
  const nibble_moe_source* experts;         /* NIBBLE_OP_MOE */
} nibble_weight_input;

/* Opaque, immutable result of prepare; freed only by the kernel's release. */
typedef struct nibble_prepared nibble_prepared;

/*
 * One forward call. x: [M,K] row-major (row stride may exceed K); y: [M,N] (MoE: [M,K]), the same
 * dtype as x. MoE adds topk_ids [M,top_k] (int32 or int64) and topk_weights [M,top_k] (f32, f16
 * or bf16); an id of -1 means "no expert" for that slot.
 */
typedef struct nibble_forward_args {
  uint32_t struct_size;
  const DLTensor* x;
  DLTensor* y;
  const DLTensor* topk_ids;
  const DLTensor* topk_weights;
} nibble_forward_args;

/* Per-call execution context. */
typedef struct nibble_exec {
  uint32_t struct_size;
  void* workspace; /* 64-byte aligned, at least workspace_bytes() long, owned by this call */
  size_t workspace_size;
  int32_t num_threads; /* threads the call may use (>= 1) */
#if NIBBLE_ABI_MINOR >= 3
  /* Appended in 1.3: the device stream a device kernel's forward is queued on (CUDA: a
   * cudaStream_t; NULL: the device's default stream). Ignored by CPU kernels. */
  void* stream;
#endif
} nibble_exec;

/* ---------------------------------------------------------------------------------------------- */
/* Kernels and the plugin                                                                         */

typedef struct nibble_kernel nibble_kernel;
struct nibble_kernel {
  uint32_t struct_size;
  const char* name; /* unique within the plugin, e.g. "w4a16_amx" */
  int32_t op;       /* nibble_op */
  int32_t priority; /* higher wins under "auto" */
  int32_t numeric_mode;
  /* Declared bound on ‖y − y_ref‖ / ‖y_ref‖ against a float64 reference computed from the same
   * (already rounded) inputs, per activation dtype. */
  double error_bound_f32;
  double error_bound_f16;
  double error_bound_bf16;
  /* 1 if this kernel computes `desc` correctly; else 0 with a non-empty reason. Required. */
  int32_t (*can_implement)(const nibble_kernel* self, const nibble_layer_desc* desc,
                           nibble_error* reason);
  /* Bytes of workspace a forward with M rows needs. Required. */
  nibble_status (*workspace_bytes)(const nibble_kernel* self, const nibble_prepared* prepared,
                                   int64_t M, size_t* bytes, nibble_error* error);
  /* Repack the weight into the kernel's layout. Required. */
  nibble_status (*prepare)(const nibble_kernel* self, const nibble_layer_desc* desc,
                           const nibble_weight_input* weight, nibble_prepared** out,
                           nibble_error* error);
  /* Compute. May run concurrently on one prepared handle. Required. */
  nibble_status (*forward)(const nibble_kernel* self, const nibble_prepared* prepared,
                           const nibble_forward_args* args, const nibble_exec* exec,
                           nibble_error* error);
  /* Free a prepared handle. Required. */
  void (*release)(const nibble_kernel* self, nibble_prepared* prepared);
#if NIBBLE_ABI_MINOR >= 1
  /* Appended in 1.1: bytes the prepared weight holds. Optional (0 when absent). */
  size_t (*prepared_bytes)(const nibble_kernel* self, const nibble_prepared* prepared);
#endif
#if NIBBLE_ABI_MINOR >= 3
  /* Appended in 1.3: the DLDeviceType forward's tensors live on; absent or 0 means kDLCPU. */
  int32_t device_type;
#endif
};

/* Why a backend is unavailable (bits, plus text in `detail`). */
enum {
  NIBBLE_PROBE_CPU_FEATURE_MISSING = 1u << 0,
  NIBBLE_PROBE_OS_STATE_DISABLED = 1u << 1,
  NIBBLE_PROBE_DEPENDENCY_MISSING = 1u << 2,
  NIBBLE_PROBE_DEVICE_ABSENT = 1u << 3,
  NIBBLE_PROBE_CAPPED_BY_USER = 1u << 4
};

#define NIBBLE_PROBE_DETAIL_CAPACITY 512
/* Caller-owned probe answer. `detail` says why not available, or what was found when it is. */
typedef struct nibble_probe_result {
  uint32_t struct_size;
  int32_t available;
  uint32_t reasons; /* NIBBLE_PROBE_* bits when unavailable (informational when available) */
  char detail[NIBBLE_PROBE_DETAIL_CAPACITY];
} nibble_probe_result;

/* Copy directions of nibble_device_memory.copy. */
enum {
  NIBBLE_COPY_HOST_TO_DEVICE = 1,
  NIBBLE_COPY_DEVICE_TO_HOST = 2,
  NIBBLE_COPY_DEVICE_TO_DEVICE = 3
};

/*
 * Device memory of a device backend (1.3), so that a host with no device library can move
 * activations and outputs: every call takes the load's plugin_context. Memory from alloc is freed
 * only by free of the same load. copy is queued on `stream` (NULL: the default stream) and
 * completes when synchronize(stream) returns; host memory given to copy must stay valid until
 * then.
 */
typedef struct nibble_device_memory {
  uint32_t struct_size;
  int32_t device_type; /* the DLDeviceType these calls manage */
  /* Devices of that type this machine has (0 when none). */
  int32_t (*device_count)(void* plugin_context);
  nibble_status (*alloc)(void* plugin_context, int32_t device_id, size_t bytes, void** out,
                         nibble_error* error);
  void (*free)(void* plugin_context, int32_t device_id, void* ptr);
  nibble_status (*copy)(void* plugin_context, int32_t device_id, void* dst, const void* src,
                        size_t bytes, int32_t direction, void* stream, nibble_error* error);
  nibble_status (*synchronize)(void* plugin_context, int32_t device_id, void* stream,
                               nibble_error* error);
  /* Appended in 1.3, after synchronize: events, the device's own clock for queued work, so that a
   * host times a burst of forwards without counting its own launches and waits. Optional, all four
   * or none. An event is an opaque handle of one device, from event_create to event_destroy. */
  /* A new event on device_id in *event (never recorded yet). */
  nibble_status (*event_create)(void* plugin_context, int32_t device_id, void** event,
                                nibble_error* error);
  /* Free an event from event_create; its recordings need not have completed. */
  void (*event_destroy)(void* plugin_context, int32_t device_id, void* event);
  /* Queue `event` on `stream` (NULL: the default stream): it completes, and takes its time, when
   * the work queued on that stream before it has completed. Recording again replaces the last. */
  nibble_status (*event_record)(void* plugin_context, int32_t device_id, void* event, void* stream,
                                nibble_error* error);
  /* Wait until `end` has completed, then store in *seconds the time from `start` to `end`, both
   * recorded (an event never recorded is NIBBLE_INVALID_ARGUMENT). */
  nibble_status (*event_elapsed)(void* plugin_context, int32_t device_id, void* start, void* end,
                                 double* seconds, nibble_error* error);
} nibble_device_memory;

/* What a plugin says about itself; filled by nibble_plugin_entry. */
typedef struct nibble_plugin {
  uint32_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;
  const char* name; /* must equal the file name's <name> in libnibble_<name>.so */
  const char* version;
  const char* vendor;
  const char* description;
  /* Is the backend usable on this machine? Creates no threads, allocates nothing large. Required.
   */
  nibble_status (*probe)(nibble_probe_result* result);
  uint32_t kernel_count;
  const nibble_kernel* const* kernels;
  /* Join every thread the plugin started; the host calls no other function afterwards. Required. */
  void (*shutdown)(void);
#if NIBBLE_ABI_MINOR >= 2
  /* Appended in 1.2: this load's state (see "Loads" at the top), and the calls that take it.
   * probe2 and shutdown2 are optional as a pair; a plugin that fills them gets one entry call per
   * host context, and a host that has them calls them instead of probe and shutdown. */
  void* plugin_context;
  /* probe, for the load `plugin_context`. */
  nibble_status (*probe2)(void* plugin_context, nibble_probe_result* result);
  /* End the load `plugin_context`: join the threads it started and free it. */
  void (*shutdown2)(void* plugin_context);
#endif
#if NIBBLE_ABI_MINOR >= 3
  /* Appended in 1.3: device memory for the kernels whose device_type is not kDLCPU; NULL for a
   * CPU-only plugin. Valid for the load. */
  const nibble_device_memory* device_memory;
#endif
} nibble_plugin;

/*
 * The entry point. The host zero-fills *out and sets out->struct_size to its capacity and
 * out->abi_major/minor to its own version; the plugin fills at most struct_size bytes, stores back
 * the number it filled and its own abi_major/minor, and returns NIBBLE_OK (or an error with
 * `error` filled). `host` stays valid until the load it starts ends.
 */
typedef nibble_status (*nibble_plugin_entry_fn)(const nibble_host* host, nibble_plugin* out,
                                                nibble_error* error);

/* ---------------------------------------------------------------------------------------------- */
/* Append-only: each minor's first field sits where the previous minor's struct ended.            */

#ifdef __cplusplus
#define NIBBLE_ABI_ASSERT(condition, message) static_assert(condition, message)
#else
#define NIBBLE_ABI_ASSERT(condition, message) _Static_assert(condition, message)
#endif
#if NIBBLE_ABI_MINOR >= 1
NIBBLE_ABI_ASSERT(offsetof(nibble_host, thread_budget) ==
                      offsetof(nibble_host, log) + sizeof(void (*)(void)),
                  "1.1's nibble_host.thread_budget follows 1.0's last field");
NIBBLE_ABI_ASSERT(offsetof(nibble_layer_desc, max_zero) ==
                      offsetof(nibble_layer_desc, w2_symmetric) + sizeof(int32_t),
                  "1.1's nibble_layer_desc.max_zero follows 1.0's last field");
NIBBLE_ABI_ASSERT(offsetof(nibble_kernel, prepared_bytes) ==
                      offsetof(nibble_kernel, release) + sizeof(void (*)(void)),
                  "1.1's nibble_kernel.prepared_bytes follows 1.0's last field");
#endif
#if NIBBLE_ABI_MINOR >= 2
NIBBLE_ABI_ASSERT(offsetof(nibble_plugin, plugin_context) ==
                      offsetof(nibble_plugin, shutdown) + sizeof(void (*)(void)),
                  "1.2's nibble_plugin.plugin_context follows 1.1's last field");
NIBBLE_ABI_ASSERT(offsetof(nibble_plugin, probe2) ==
                      offsetof(nibble_plugin, plugin_context) + sizeof(void*),
                  "nibble_plugin.probe2 follows plugin_context");
NIBBLE_ABI_ASSERT(offsetof(nibble_plugin, shutdown2) ==
                      offsetof(nibble_plugin, probe2) + sizeof(void (*)(void)),
                  "nibble_plugin.shutdown2 follows probe2");
#endif
#if NIBBLE_ABI_MINOR >= 3
NIBBLE_ABI_ASSERT(offsetof(nibble_layer_desc, device_type) ==
                      offsetof(nibble_layer_desc, w2_max_zero) + sizeof(int32_t),
                  "1.3's nibble_layer_desc.device_type follows 1.1's last field");
NIBBLE_ABI_ASSERT(offsetof(nibble_layer_desc, device_id) ==
                      offsetof(nibble_layer_desc, device_type) + sizeof(int32_t),
                  "nibble_layer_desc.device_id follows device_type");
NIBBLE_ABI_ASSERT(offsetof(nibble_exec, stream) >=
                      offsetof(nibble_exec, num_threads) + sizeof(int32_t),
                  "1.3's nibble_exec.stream follows 1.0's last field");
NIBBLE_ABI_ASSERT(offsetof(nibble_exec, stream) <
                      offsetof(nibble_exec, num_threads) + sizeof(int32_t) + sizeof(void*),
                  "nibble_exec.stream takes the first pointer slot after num_threads");
NIBBLE_ABI_ASSERT(offsetof(nibble_kernel, device_type) ==
                      offsetof(nibble_kernel, prepared_bytes) + sizeof(void (*)(void)),
                  "1.3's nibble_kernel.device_type follows 1.1's last field");
NIBBLE_ABI_ASSERT(offsetof(nibble_plugin, device_memory) ==
                      offsetof(nibble_plugin, shutdown2) + sizeof(void (*)(void)),
                  "1.3's nibble_plugin.device_memory follows 1.2's last field");
#endif
/* nibble_device_memory is outside the minors (it first appeared in 1.3): its events follow
 * synchronize, each function one pointer after the last. */
NIBBLE_ABI_ASSERT(offsetof(nibble_device_memory, event_create) ==
                      offsetof(nibble_device_memory, synchronize) + sizeof(void (*)(void)),
                  "nibble_device_memory.event_create follows synchronize");
NIBBLE_ABI_ASSERT(offsetof(nibble_device_memory, event_destroy) ==
                      offsetof(nibble_device_memory, event_create) + sizeof(void (*)(void)),
                  "nibble_device_memory.event_destroy follows event_create");
NIBBLE_ABI_ASSERT(offsetof(nibble_device_memory, event_record) ==
                      offsetof(nibble_device_memory, event_destroy) + sizeof(void (*)(void)),
                  "nibble_device_memory.event_record follows event_destroy");
NIBBLE_ABI_ASSERT(offsetof(nibble_device_memory, event_elapsed) ==
                      offsetof(nibble_device_memory, event_record) + sizeof(void (*)(void)),
                  "nibble_device_memory.event_elapsed follows event_record");

#ifdef __cplusplus
}
#endif

#endif /* NIBBLE_SDK_PLUGIN_H */
