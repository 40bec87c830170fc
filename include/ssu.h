/*
 * ssu.h -- libssu: selective state update (Mamba decode step) as a C library.
 *
 * libssu advances the recurrent state of Mamba-family layers by one token
 * (or a few, for speculative decoding) straight out of the slot-addressed
 * state pools that serving engines keep:
 *
 *     dA    = exp(A * dt)
 *     state = dA * state + (B * dt) * x
 *     out   = (sum_n state * C + D * x) * silu(z)
 *
 * Conventions (apply to every function below):
 *  - Every function returns an ssu_status_t; SSU_SUCCESS (0) on success.
 *    On failure ssu_last_error_message() returns a message for the calling
 *    thread that names the offending argument and values.
 *  - Out-parameters are written only on success. The library never frees
 *    caller memory and no C++ exception crosses this interface.
 *  - Extensible structs start with `uint32_t struct_size`; initialize them
 *    with their SSU_*_INIT macro. Fields are only ever appended; the library
 *    reads min(struct_size, sizeof(known struct)) bytes, so a program built
 *    against an older header keeps working with a newer library.
 *  - Optional tensors are given by a NULL data pointer, never by an empty shape.
 *  - Thread safety: contexts and plans are immutable after creation and may
 *    be used from any thread, on any stream, concurrently. Error messages are
 *    per thread. Destroy a handle only when no call is using it.
 *
 * This header is plain C99 and includes only <stdint.h> and <stddef.h>.
 */
#ifndef SSU_H_
#define SSU_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#  define SSU_API __attribute__((visibility("default")))
#else
#  define SSU_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define SSU_VERSION_MAJOR 0
#define SSU_VERSION_MINOR 1
#define SSU_VERSION_PATCH 0
/** MAJOR*10000 + MINOR*100 + PATCH of this header. */
#define SSU_VERSION \
  (SSU_VERSION_MAJOR * 10000 + SSU_VERSION_MINOR * 100 + SSU_VERSION_PATCH)

/** The version of the loaded library, encoded like SSU_VERSION. */
SSU_API uint32_t ssu_version(void);
/** The version of the loaded library as static text, e.g. "0.1.0". */
SSU_API const char* ssu_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/**
 * Status codes have fixed values grouped in families of 100:
 * SSU_STATUS_FAMILY(s) is 0 (success), 1 (invalid argument), 2 (not
 * supported), 3 (driver / device), 4 (resources), 5 (internal), 6 (version).
 * New codes may be added inside a family; callers that do not know a code
 * should branch on its family.
 */
typedef int32_t ssu_status_t;
#define SSU_STATUS_FAMILY(s) ((int32_t)(s) / 100)

#define SSU_SUCCESS 0

#define SSU_ERROR_INVALID_ARGUMENT 100   /* a value is out of its domain   */
#define SSU_ERROR_NULL_POINTER 101       /* a required pointer is NULL      */
#define SSU_ERROR_BAD_RANK 102           /* a tensor has the wrong ndim     */
#define SSU_ERROR_BAD_SHAPE 103          /* a dimension does not match      */
#define SSU_ERROR_BAD_STRIDE 104         /* a stride is not allowed         */
#define SSU_ERROR_BAD_DTYPE 105          /* a dtype is not allowed there    */
#define SSU_ERROR_DTYPE_MISMATCH 106     /* two tensors must share a dtype  */
#define SSU_ERROR_INDEX_OUT_OF_RANGE 107 /* a slot or token index is >= its bound */
#define SSU_ERROR_SEQLEN_OUT_OF_RANGE 108 /* a varlen length exceeds max_tokens */
#define SSU_ERROR_INCOMPATIBLE_OPTIONS 109 /* options that exclude each other */
#define SSU_ERROR_UNKNOWN_FLAG 110       /* a flag bit this library does not know */
#define SSU_ERROR_STRUCT_SIZE 111        /* struct_size smaller than the first version */
#define SSU_ERROR_PLAN_MISMATCH 112      /* execute arguments do not fit the plan */
#define SSU_ERROR_BAD_HANDLE 113         /* a handle is NULL or of the wrong kind */

#define SSU_ERROR_NOT_SUPPORTED 200      /* valid, but not implemented here */
#define SSU_ERROR_BACKEND_UNAVAILABLE 201 /* the backend is not built in     */
#define SSU_ERROR_ALGORITHM_UNAVAILABLE 202 /* pinned algorithm cannot run this */

#define SSU_ERROR_DRIVER_NOT_FOUND 300   /* libcuda.so.1 could not be loaded */
#define SSU_ERROR_DRIVER_TOO_OLD 301     /* the driver lacks a needed entry point */
#define SSU_ERROR_NO_DEVICE 302          /* no such device ordinal           */
#define SSU_ERROR_DEVICE_UNSUPPORTED 303 /* no kernels for this architecture */
#define SSU_ERROR_CUDA 304               /* a driver call failed (message names it) */

#define SSU_ERROR_OUT_OF_MEMORY 400      /* host allocation failed           */
#define SSU_ERROR_RESOURCES 401          /* threads or other resources       */

#define SSU_ERROR_INTERNAL 500           /* a bug in libssu; please report   */

#define SSU_ERROR_VERSION 600            /* incompatible library version     */

/** Static, never-NULL English text for a status code ("unknown status" for
 *  values this library does not know). */
SSU_API const char* ssu_status_string(ssu_status_t status);

/** The detailed message of the last failed call on this thread, e.g.
 *  "x.shape[2]=80 but state.shape[2] (dim)=64". Valid until the next libssu
 *  call on this thread; "" if the last call succeeded. Never NULL. */
SSU_API const char* ssu_last_error_message(void);

/* ------------------------------------------------------------------------ */
/* Data types and tensor descriptors                                         */
/* ------------------------------------------------------------------------ */

/** Element types. Plain integers (not a C enum) so the ABI is fixed-size. */
typedef int32_t ssu_dtype_t;
#define SSU_DTYPE_INVALID 0
#define SSU_DTYPE_F32 1
#define SSU_DTYPE_F16 2
#define SSU_DTYPE_BF16 3
#define SSU_DTYPE_I16 4
#define SSU_DTYPE_I32 5
#define SSU_DTYPE_I64 6

/** Bytes per element of a dtype, 0 for an unknown one. */
SSU_API size_t ssu_dtype_size(ssu_dtype_t dtype);
/** Static name of a dtype ("f32", "bf16", ...; "invalid" if unknown). */
SSU_API const char* ssu_dtype_name(ssu_dtype_t dtype);

#define SSU_MAX_DIMS 6

/**
 * A strided view of caller memory. Strides are in elements (not bytes) and
 * may be 0 (broadcast along that axis) or larger than dense. `data` is host
 * memory for the CPU backend and device memory for the CUDA backend; NULL
 * marks an optional tensor as absent. Entries past ndim are ignored.
 */
typedef struct ssu_tensor {
  void* data;
  ssu_dtype_t dtype;
  int32_t ndim;
  int64_t shape[SSU_MAX_DIMS];
  int64_t strides[SSU_MAX_DIMS];
} ssu_tensor_t;

/**
 * A slot-addressed state pool.
 *  - state: (S, H, P, N) = (slots, heads, dim, dstate), dtype f32, bf16 or
 *    f16; N <= 256 (larger N is refused with SSU_ERROR_NOT_SUPPORTED), any
 *    P >= 1. The inner three axes must be dense (strides P*N, N, 1); the slot
 *    stride is free (>= H*P*N), so a pool can live inside a larger buffer.
 *  - state_scale: reserved for int16 block-scaled states (S, H, P) f32;
 *    leave data NULL. An int16 state is rejected with SSU_ERROR_NOT_SUPPORTED
 *    by this version.
 * Later versions append pools (e.g. for the Mamba-3 step) to this struct.
 */
typedef struct ssu_state_pool {
  uint32_t struct_size;
  uint32_t reserved0; /* must be 0 */
  ssu_tensor_t state;
  ssu_tensor_t state_scale;
} ssu_state_pool_t;

/** Identifiers of the library's structs, for ssu_struct_size(). */
#define SSU_STRUCT_TENSOR 1
#define SSU_STRUCT_STATE_POOL 2
#define SSU_STRUCT_CONTEXT_OPTIONS 3
#define SSU_STRUCT_PLAN_OPTIONS 4
#define SSU_STRUCT_PLAN_INFO 5
#define SSU_STRUCT_UPDATE_ARGS 6

/** sizeof() of a struct as the loaded library knows it (0 for an unknown
 *  id), so that bindings can check their layouts against the library. */
SSU_API size_t ssu_struct_size(int32_t struct_id);

/* ------------------------------------------------------------------------ */
/* Initializers for extensible structs                                       */
/* ------------------------------------------------------------------------ */
/* In C these are designated initializers; in C++ (which has none before
 * C++20) they are calls to a tiny template that value-initializes the struct
 * and sets struct_size. Every field not named is zero. */
#ifdef __cplusplus
}
template <typename T>
static inline T ssu_struct_init_(void) {
  T v = T();
  v.struct_size = (uint32_t)sizeof(T);
  return v;
}
template <typename T>
static inline T ssu_update_args_init_(void) {
  T v = ssu_struct_init_<T>();
  v.pad_slot_id = -1;
  return v;
}
#  define SSU_STRUCT_INIT_(T) ssu_struct_init_<T>()
#  define SSU_STATE_POOL_INIT SSU_STRUCT_INIT_(ssu_state_pool_t)
#  define SSU_CONTEXT_OPTIONS_INIT SSU_STRUCT_INIT_(ssu_context_options_t)
#  define SSU_PLAN_OPTIONS_INIT SSU_STRUCT_INIT_(ssu_plan_options_t)
#  define SSU_PLAN_INFO_INIT SSU_STRUCT_INIT_(ssu_plan_info_t)
#  define SSU_UPDATE_ARGS_INIT ssu_update_args_init_<ssu_update_args_t>()
extern "C" {
#else
#  define SSU_STATE_POOL_INIT {.struct_size = (uint32_t)sizeof(ssu_state_pool_t)}
#  define SSU_CONTEXT_OPTIONS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_context_options_t)}
#  define SSU_PLAN_OPTIONS_INIT {.struct_size = (uint32_t)sizeof(ssu_plan_options_t)}
#  define SSU_PLAN_INFO_INIT {.struct_size = (uint32_t)sizeof(ssu_plan_info_t)}
#  define SSU_UPDATE_ARGS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_update_args_t), .pad_slot_id = -1}
#endif

/* ------------------------------------------------------------------------ */
/* Contexts                                                                  */
/* ------------------------------------------------------------------------ */

/** Backends. */
typedef int32_t ssu_backend_t;
#define SSU_BACKEND_AUTO 0 /* CUDA if a driver and device are usable, else CPU */
#define SSU_BACKEND_CPU 1
#define SSU_BACKEND_CUDA 2

/** Static name of a backend ("cpu", "cuda", "auto"; "invalid" if unknown). */
SSU_API const char* ssu_backend_name(ssu_backend_t backend);

/** One backend on one device, with everything it needs loaded up front. */
typedef struct ssu_context_s* ssu_context_t;

typedef struct ssu_context_options {
  uint32_t struct_size;
  ssu_backend_t backend;  /* SSU_BACKEND_*; default AUTO                  */
  int32_t device_ordinal; /* CUDA device ordinal; must be 0 for the CPU   */
  int32_t num_threads;    /* CPU worker threads incl. the caller; 0 = all
                             hardware threads, 1 = run on the caller only  */
} ssu_context_options_t;

/**
 * Creates a context. `options` may be NULL (all defaults).
 * CPU: starts the worker threads.
 * CUDA: loads libcuda.so.1 at run time, retains the device's primary
 * context (so libssu shares the device with PyTorch, CuPy, JAX and
 * cudart-based code), loads the embedded kernels and resolves every kernel
 * handle, so that no later call loads anything.
 * Returns SSU_ERROR_DRIVER_NOT_FOUND / SSU_ERROR_NO_DEVICE /
 * SSU_ERROR_BACKEND_UNAVAILABLE when the backend cannot run here.
 */
SSU_API ssu_status_t ssu_context_create(const ssu_context_options_t* options,
                                        ssu_context_t* out_context);
/** Destroys a context. NULL is a no-op. Destroy its plans first. */
SSU_API ssu_status_t ssu_context_destroy(ssu_context_t context);
/** The backend a context runs (never AUTO). */
SSU_API ssu_status_t ssu_context_get_backend(ssu_context_t context,
                                             ssu_backend_t* out_backend);
/** A static description of the context's device, e.g. "cpu (2 threads)" or
 *  "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)". */
SSU_API const char* ssu_context_device_name(ssu_context_t context);

/* ------------------------------------------------------------------------ */
/* Streams                                                                   */
/* ------------------------------------------------------------------------ */

/** A CUDA stream (a CUstream / cudaStream_t cast to this type). NULL is the
 *  legacy default stream. The CPU backend runs synchronously on the calling
 *  thread (and its workers) and ignores the stream. */
typedef struct ssu_stream_s* ssu_stream_t;

/* ------------------------------------------------------------------------ */
/* Selective state update (Mamba-1 / Mamba-2), single- and multi-token       */
/* ------------------------------------------------------------------------ */

/* Flags of ssu_update_args_t.flags. Unknown bits are rejected. */
#define SSU_UPDATE_DT_SOFTPLUS 0x1u /* dt = softplus(dt + dt_bias)        */
#define SSU_UPDATE_DISABLE_STATE_UPDATE 0x2u /* never write the state pool */

/**
 * Arguments of a selective state update. Notation: S pool slots, H heads,
 * P dim (head size), N dstate, G groups (H % G == 0; head h reads group
 * h / (H/G)), Bt sequences in this call, T tokens per sequence.
 *
 * Three forms, chosen by x's rank and cu_seqlens:
 *  - single token:  x (Bt, H, P);      B, C (Bt, G, N);    dt (Bt, H[, P])
 *  - multi token:   x (Bt, T, H, P);   B, C (Bt, T, G, N); dt (Bt, T, H[, P])
 *  - varlen:        cu_seqlens (Bt+1,) given, x (TT, H, P) packed tokens;
 *                   B, C (TT, G, N); dt (TT, H[, P]); max_tokens = T >= 1.
 *                   Sequence b owns tokens [cu[b], cu[b+1]); its length must
 *                   be <= T; a length <= 0 writes nothing for b.
 * z and out have x's shape. x, B, C, z and out share one dtype (f32, bf16
 * or f16) and their last axis must be dense (stride 1).
 *
 * Per head or per channel (Mamba-1 is H = G = 1 with per-channel A and dt):
 *  - dt: (..., H) per head or (..., H, P) per channel (a stride-0 P axis is
 *    per head);
 *  - A: (H,) per head, or (H, P, N) per channel; each of f32/bf16/f16;
 *  - D, dt_bias (optional): (H,) or (H, P); each of f32/bf16/f16.
 * Strides of these may be anything, 0 included.
 *
 * Slots:
 *  - src_index (optional): (Bt,) or, multi-token only, (Bt, T); int32 or
 *    int64. Absent: sequence b uses slot b. The initial state is read from
 *    src[b] (1-D), src[b, 0] (2-D) or src[b, max(num_accepted[b]-1, 0)].
 *  - dst_index (optional, same dtype as src): (Bt,) final state goes to
 *    dst[b] instead of the source slot; (Bt, T), multi-token only: after
 *    token t the state is stored to dst[b, t] and no final store happens.
 *    A padding entry in dst_index skips that store.
 *  - A slot index is padding when it is negative or equals pad_slot_id.
 *    A sequence whose initial slot is padding reads and writes no pool
 *    memory and its outputs are exactly zero. Indices >= S are rejected by
 *    the CPU backend before anything is written; the CUDA backend treats the
 *    row as padding and sets bit SSU_ERROR_BIT_INDEX in *error_word.
 *  - num_accepted_tokens (optional): (Bt,) int32/int64, needs a 2-D src;
 *    values must be <= T (0 and 1 both select column 0).
 *  - intermediate_states (optional): (I, T, H, P, N), the state's dtype,
 *    inner three axes dense; after every token t of sequence b the state is
 *    stored to intermediate_states[intermediate_index[b], t] (the (I, T)
 *    rows must not overlap; the index defaults to the initial slot; a
 *    padding index skips these stores). The final state is also stored
 *    unless SSU_UPDATE_DISABLE_STATE_UPDATE. Excludes a 2-D dst_index.
 *    Intermediate stores happen even with that flag.
 *
 * Writes: out for every token of every sequence; the state pool only as
 * stated above; nothing else. With SSU_UPDATE_DISABLE_STATE_UPDATE the pool
 * is bit-identical afterwards. Two sequences of one call writing the same
 * slot, or one writing a slot another reads, is undefined.
 */
typedef struct ssu_update_args {
  uint32_t struct_size;
  uint32_t flags;          /* SSU_UPDATE_* */
  int64_t pad_slot_id;     /* additional padding value; default -1       */
  int64_t max_tokens;      /* varlen only: T, the longest sequence allowed */
  const ssu_state_pool_t* pool; /* required */
  ssu_tensor_t x;          /* required */
  ssu_tensor_t dt;         /* required */
  ssu_tensor_t A;          /* required */
  ssu_tensor_t B;          /* required */
  ssu_tensor_t C;          /* required */
  ssu_tensor_t D;          /* optional (absent: 0) */
  ssu_tensor_t dt_bias;    /* optional (absent: 0) */
  ssu_tensor_t z;          /* optional (absent: no gate) */
  ssu_tensor_t out;        /* required */
  ssu_tensor_t src_index;  /* optional */
  ssu_tensor_t dst_index;  /* optional */
  ssu_tensor_t cu_seqlens; /* optional: selects the varlen form */
  ssu_tensor_t num_accepted_tokens; /* optional */
  ssu_tensor_t intermediate_states; /* optional */
  ssu_tensor_t intermediate_index;  /* optional, needs intermediate_states */
  uint32_t* error_word;    /* optional device word, CUDA backend only:
                              bits SSU_ERROR_BIT_* are OR-ed in, never
                              cleared; ignored by the CPU backend */
} ssu_update_args_t;

/* Bits the CUDA backend ORs into *error_word. */
#define SSU_ERROR_BIT_INDEX 0x1u  /* a slot index >= its pool size       */
#define SSU_ERROR_BIT_SEQLEN 0x2u /* a varlen length > max_tokens (clamped) */

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

/** A validated, immutable operation configuration with its algorithm. */
typedef struct ssu_plan_s* ssu_plan_t;

/** Algorithms. AUTO lets the plan choose; a specific value pins it (plan
 *  creation fails with SSU_ERROR_ALGORITHM_UNAVAILABLE if it cannot run). */
typedef int32_t ssu_algorithm_t;
#define SSU_ALGORITHM_AUTO 0
#define SSU_ALGORITHM_CPU_ROWS 1   /* CPU: row blocks over worker threads */
#define SSU_ALGORITHM_CUDA_SIMPLE 2 /* CUDA: one block per (sequence, head) tile */
#define SSU_ALGORITHM_CUDA_TMA 3    /* CUDA sm_90+: TMA-pipelined tiles    */

typedef struct ssu_plan_options {
  uint32_t struct_size;
  ssu_algorithm_t algorithm; /* default AUTO */
} ssu_plan_options_t;

typedef struct ssu_plan_info {
  uint32_t struct_size;
  ssu_backend_t backend;
  ssu_algorithm_t algorithm;
  uint32_t reserved0;
  const char* algorithm_name; /* static text */
} ssu_plan_info_t;

/**
 * Validates `args` and creates a plan for this kind of update. Everything
 * but the data pointers, the strides, the batch size Bt (and the packed
 * token count TT) and the pool's slot count S is fixed by the plan: H, P, N,
 * G, T, the form (single / multi / varlen), every dtype, which optional
 * tensors are present, per-head vs per-channel layouts, the rank of the slot
 * indices and the flags. Plan creation validates shapes, dtypes and strides
 * but reads no tensor data. `options` may be NULL. Returns the status of the
 * first check that fails.
 */
SSU_API ssu_status_t ssu_plan_create_update(ssu_context_t context,
                                            const ssu_update_args_t* args,
                                            const ssu_plan_options_t* options,
                                            ssu_plan_t* out_plan);
/** Destroys a plan. NULL is a no-op. */
SSU_API ssu_status_t ssu_plan_destroy(ssu_plan_t plan);
/** Describes a plan (backend, algorithm). */
SSU_API ssu_status_t ssu_plan_get_info(ssu_plan_t plan, ssu_plan_info_t* info);

/**
 * Runs the update planned by `plan` on `args` (which must fit the plan, see
 * ssu_plan_create_update; else SSU_ERROR_PLAN_MISMATCH or the validation
 * status) on `stream`.
 * CPU: synchronous; index and length checks run before anything is written.
 * CUDA: asynchronous; never synchronizes, allocates or copies through the
 * host, so it may be captured into a CUDA graph; launch errors are returned.
 * On any error nothing has been written (CPU) or launched (CUDA).
 */
SSU_API ssu_status_t ssu_plan_execute_update(ssu_plan_t plan,
                                             const ssu_update_args_t* args,
                                             ssu_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SSU_H_ */
