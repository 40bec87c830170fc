/*
 * ssu.h -- libssu: selective state update (Mamba decode step) as a C library.
 *
 * libssu advances the recurrent state of Mamba-family layers by one token
 * (or a few, for speculative decoding) straight out of the slot-addressed
 * state pools that serving engines keep:
 *
 *     dA    = exp(A * dt)
 *     state = dA * state + B * (dt * x)
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
 *    against an older header keeps working with a newer library. A
 *    struct_size below the known struct must be the size of a released
 *    layout (one that ends inside a field is refused).
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

/* While MAJOR is 0, a MINOR release may remove API; the shared library
 * stays libssu.so.0 and the values that remain keep their numbers.
 *  0.3: SSU_ALGORITHM_CUDA_TMA (3), reserved but never implemented, was
 *       removed; plan creation refuses 3 like any unknown algorithm. */
#define SSU_VERSION_MAJOR 0
#define SSU_VERSION_MINOR 3
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
/* 8-bit block-scaled states (pool.state / intermediate_states only, with an
 * f32 decode-scale pool like i16; see ssu_state_pool_t). */
#define SSU_DTYPE_I8 7      /* int8 codes -127..127                       */
#define SSU_DTYPE_F8E4M3 8  /* OCP FP8 E4M3 codes (bias 7, max 448, no Inf) */

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
 * A slot-addressed state pool and its companion pools. S is the slot count
 * (shape[0] of `state`); every pool below is indexed by the same slots.
 *  - state: (S, H, P, N) = (slots, heads, dim, dstate), dtype f32, bf16,
 *    f16, or i16, i8 or f8e4m3 with state_scale (block-scaled, see below;
 *    the 8-bit formats: the plain update and replay checkpoints on both
 *    backends, Mamba-3 on neither); N <= 256
 *    (larger N is refused with SSU_ERROR_NOT_SUPPORTED), any P >= 1. The
 *    inner three axes must be dense (strides P*N, N, 1); the slot stride is
 *    free (>= H*P*N), so a pool can live inside a larger buffer.
 *  - state_scale: (S, H, P) f32, required with an i16, i8 or f8e4m3 state
 *    and refused otherwise; inner two axes dense, slot stride free. One
 *    decode scale per row: the row's real values are value(q[n]) * scale
 *    (value(q) = q for the integer formats, the E4M3 number of code q for
 *    f8e4m3). A store of an fp32 row v writes amax = max|v|,
 *    enc = (amax == 0 ? 1 : QMAX / amax) and scale = 1 / enc (fp32
 *    operations, in this order), with QMAX = 32767 (i16), 127 (i8) or 448
 *    (f8e4m3), and q[n] = round(clamp(v[n] * enc, +-QMAX)):
 *      i16, i8: round half to even to an integer (codes never reach -QMAX-1);
 *      f8e4m3:  round to the nearest E4M3 number, ties to even (OCP FP8
 *               E4M3: sign, 4 exponent bits with bias 7, 3 mantissa bits;
 *               subnormals k * 2^-9, largest 448, codes 0x7F / 0xFF NaN, no
 *               infinities; a zero keeps its sign), or stochastically (see
 *               ssu_update_args_t.rounding_seed).
 *    A row holding NaN or +-Inf cannot be represented: it is stored with a
 *    NaN (NaN row) or Inf (Inf row) scale and codes 0 (i16, i8) or 0x7F
 *    (f8e4m3), so it loads back as all NaN. No error is raised. (A row so
 *    small that QMAX / amax overflows stores scale 0 and loads as zeros.)
 * Mamba-3 pools (used only by the Mamba-3 operations; leave them NULL for
 * ssu_plan_create_update, which refuses them):
 *  - prev_B: (S, R, H, N), the previous token's B, in the input dtype; last
 *    axis dense, other strides free.
 *  - prev_x: (S, H, P), the previous token's x, in the input dtype; last
 *    axis dense, other strides free.
 *  - angle_state: (S, H, Sa) f32, the rotary angles in [0, 2*pi); last axis
 *    dense, other strides free (ssu_plan_create_mamba3_rotary).
 * The Mamba-3 fields were appended in 0.2: a struct_size that ends before
 * them means they are absent.
 */
typedef struct ssu_state_pool {
  uint32_t struct_size;
  uint32_t reserved0; /* must be 0 */
  ssu_tensor_t state;
  ssu_tensor_t state_scale;
  /* 0.2 */
  ssu_tensor_t prev_B;
  ssu_tensor_t prev_x;
  ssu_tensor_t angle_state;
} ssu_state_pool_t;

/** Identifiers of the library's structs, for ssu_struct_size(). */
#define SSU_STRUCT_TENSOR 1
#define SSU_STRUCT_STATE_POOL 2
#define SSU_STRUCT_CONTEXT_OPTIONS 3
#define SSU_STRUCT_PLAN_OPTIONS 4
#define SSU_STRUCT_PLAN_INFO 5
#define SSU_STRUCT_UPDATE_ARGS 6
#define SSU_STRUCT_MAMBA3_STEP_ARGS 7
#define SSU_STRUCT_MAMBA3_ROTARY_ARGS 8
#define SSU_STRUCT_REPLAY_RING 9
#define SSU_STRUCT_REPLAY_ARGS 10
#define SSU_STRUCT_REPLAY_FLUSH_ARGS 11

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
#  define SSU_MAMBA3_STEP_ARGS_INIT ssu_update_args_init_<ssu_mamba3_step_args_t>()
#  define SSU_MAMBA3_ROTARY_ARGS_INIT ssu_update_args_init_<ssu_mamba3_rotary_args_t>()
#  define SSU_REPLAY_RING_INIT SSU_STRUCT_INIT_(ssu_replay_ring_t)
#  define SSU_REPLAY_ARGS_INIT ssu_update_args_init_<ssu_replay_args_t>()
#  define SSU_REPLAY_FLUSH_ARGS_INIT ssu_update_args_init_<ssu_replay_flush_args_t>()
extern "C" {
#else
#  define SSU_STATE_POOL_INIT {.struct_size = (uint32_t)sizeof(ssu_state_pool_t)}
#  define SSU_CONTEXT_OPTIONS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_context_options_t)}
#  define SSU_PLAN_OPTIONS_INIT {.struct_size = (uint32_t)sizeof(ssu_plan_options_t)}
#  define SSU_PLAN_INFO_INIT {.struct_size = (uint32_t)sizeof(ssu_plan_info_t)}
#  define SSU_UPDATE_ARGS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_update_args_t), .pad_slot_id = -1}
#  define SSU_MAMBA3_STEP_ARGS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_mamba3_step_args_t), .pad_slot_id = -1}
#  define SSU_MAMBA3_ROTARY_ARGS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_mamba3_rotary_args_t), .pad_slot_id = -1}
#  define SSU_REPLAY_RING_INIT {.struct_size = (uint32_t)sizeof(ssu_replay_ring_t)}
#  define SSU_REPLAY_ARGS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_replay_args_t), .pad_slot_id = -1}
#  define SSU_REPLAY_FLUSH_ARGS_INIT \
    {.struct_size = (uint32_t)sizeof(ssu_replay_flush_args_t), .pad_slot_id = -1}
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
 * State dtypes and rounding of state stores:
 *  - f32: stored as is.
 *  - i16, i8, f8e4m3 (pool.state_scale given): every store of a row
 *    (final, dst and intermediate) quantizes it as described at
 *    ssu_state_pool_t and writes its scale to the matching scale row:
 *    pool.state_scale for the pool, intermediate_scales (I, T, H, P) f32
 *    for intermediate_states. Outputs use the unquantized fp32 values.
 *    Padded sequences write no scale. The CPU and CUDA backends store
 *    identical codes and scales. i8 and f8e4m3 states also serve as
 *    replay checkpoints on both backends; the Mamba-3 operations refuse
 *    them at plan creation (SSU_ERROR_NOT_SUPPORTED).
 *  - f16 / bf16: round to nearest even, or, when rounding_seed is given,
 *    stochastically: each stored element adds random bits below its last
 *    kept bit and truncates. The random word of the element at offset
 *    L = src_slot * slot_stride + h*P*N + p*N + n (elements, with src_slot
 *    the sequence's initial slot, for every store of the call) is word
 *    (L mod 4) of Philox-4x32 with key = the 64-bit seed and counter =
 *    (L - L mod 4, 0), run for rounding_rounds rounds (0 means 10); f16
 *    adds its low 13 bits, bf16 its low 16 bits, to the fp32 magnitude.
 *    Results below 2^-14 in f16 flush to a signed zero, overflow gives Inf,
 *    NaN stays NaN.
 *    The CPU and CUDA backends store identical bits: both form the fp32
 *    state with the same operation sequence (state * dA + B[n] * (dt * x),
 *    each product and the sum rounded, no contraction;
 *    the library's own exp and log1p). Outputs are never stochastically
 *    rounded.
 *    rounding_seed is read by the kernel when it runs (a device pointer for
 *    CUDA, a host pointer for the CPU), so a CUDA graph replays with the
 *    seed's current value; advance it with ssu_advance_seed.
 *  - f8e4m3 with rounding_seed: the element's word (the same L and Philox
 *    word as above) rounds x = clamp(v * enc, +-448) (fp32) stochastically.
 *    With a = |x| and e its unbiased fp32 exponent, d = 20 when a >= 2^-6
 *    (the E4M3 normal range) and d = 14 - e below (a subnormal float counts
 *    as e = -126): the E4M3 step is 2^d units of a's significand. For
 *    a >= 2^-9 (d <= 23) the low d bits of the word are added to a's fp32
 *    bit pattern as an integer and the low d bits cleared; below, the
 *    24-bit significand M (a = M * 2^(e-23)) gives k = (M + (word mod
 *    2^d)) >> d in {0, 1} (d <= 32), or, where d > 32, k = ((M >> (d-32))
 *    + word) >> 32; the result is k * 2^-9. The sign is re-applied and the
 *    exact E4M3 code stored. The mean over seeds is x exactly for
 *    a >= 2^-18 (and within 2^-41 below); the result never exceeds 448.
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
  /* 0.2 */
  ssu_tensor_t intermediate_scales; /* (I, T, H, P) f32: required with an
                              i16, i8 or f8e4m3 state and
                              intermediate_states, else refused; inner two
                              axes dense */
  const uint64_t* rounding_seed; /* optional: stochastic rounding of f16 /
                              bf16 / f8e4m3 state stores with this seed
                              (refused for f32, i16 and i8 states) */
  uint32_t rounding_rounds; /* Philox rounds, 1..32; 0 means 10 */
  uint32_t reserved1;       /* must be 0 */
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
 *  creation fails with SSU_ERROR_ALGORITHM_UNAVAILABLE if it cannot run).
 *  A value not defined here is refused the same way by every operation. */
typedef int32_t ssu_algorithm_t;
#define SSU_ALGORITHM_AUTO 0
#define SSU_ALGORITHM_CPU_ROWS 1   /* CPU: row blocks over worker threads */
#define SSU_ALGORITHM_CUDA_SIMPLE 2 /* CUDA: one block per (sequence, head) tile */
/* 3 is unused: it was SSU_ALGORITHM_CUDA_TMA, reserved but never implemented,
 * until 0.2. The other values keep their numbers. */
/* CUDA: persistent blocks with a two-stage shared-memory ring, for the
 * update's single-token forms and up to 8 tokens with a final-state store
 * (rows of 1..32 16-byte chunks), and for the Mamba-3 step with dstate <= 128;
 * AUTO picks it there. A call too small to fill the device once (or whose
 * state pool is not 16-byte aligned) runs the cuda_simple kernels. */
#define SSU_ALGORITHM_CUDA_PIPELINED 4
/* CUDA: the replay kernels (ssu_plan_create_replay's only CUDA algorithm). */
#define SSU_ALGORITHM_CUDA_REPLAY 5

/** ssu_plan_options.flags.
 *
 *  SSU_PLAN_PDL (update and replay plans; CUDA on sm_90 and later, where it
 *  is accepted and has no effect elsewhere, the CPU backend included): the
 *  plan's kernels launch with programmatic dependent launch (cuLaunchKernelEx,
 *  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION), except the
 *  persistent grids of cuda_pipelined's large calls (two or more items per
 *  block), which launch as usual.
 *  Such a launch may be scheduled while the stream's previous kernel
 *  finishes and waits (griddepcontrol.wait) for that kernel's completion
 *  and memory before it reads or writes any tensor, so results are those
 *  of an ordinary launch; what overlaps is the launch and the blocks'
 *  start, where the previous kernel lets its dependents start early.
 *  Captured into a CUDA graph, the edge from the previous kernel node
 *  becomes a programmatic one. Mamba-3 plans refuse the flag
 *  (SSU_ERROR_NOT_SUPPORTED). Plans without it launch as before. */
#define SSU_PLAN_PDL 0x1u

/** Plan options. struct_size as everywhere; a struct_size of 8 (the
 *  options before `flags`, libssu 0.3) still reads, with flags 0. */
typedef struct ssu_plan_options {
  uint32_t struct_size;
  ssu_algorithm_t algorithm; /* default AUTO */
  uint32_t flags;            /* SSU_PLAN_* bits, default 0 */
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

/**
 * Adds `increment` to the uint64 at `seed` (wrapping), in stream order.
 * CUDA: `seed` is device memory and this is one tiny kernel launch on
 * `stream`, so it may be captured into a CUDA graph after the updates that
 * read the seed: every replay then draws fresh random bits. CPU: `seed` is
 * host memory, updated before the call returns.
 */
SSU_API ssu_status_t ssu_advance_seed(ssu_context_t context, uint64_t* seed,
                                      uint64_t increment, ssu_stream_t stream);

/* ------------------------------------------------------------------------ */
/* Mamba-3 decode step (SISO R = 1, MIMO R > 1)                              */
/* ------------------------------------------------------------------------ */

/* Flags of ssu_mamba3_step_args_t.flags. */
#define SSU_MAMBA3_UPDATE_PREV 0x1u /* store this step's B and x into the
                                       prev_B / prev_x pools (after all reads) */

/**
 * Arguments of one Mamba-3 decode step, served straight from the pools
 * (see ssu_state_pool_t): state (S, H, P, N) f32/bf16/f16, prev_B
 * (S, R, H, N) and prev_x (S, H, P) in the input dtype. R is the MIMO rank,
 * one of 1, 2, 4, 8; N one of 16, 32, 64, 128, 256; P any multiple of 16
 * (other values give SSU_ERROR_NOT_SUPPORTED, as do i16, i8 and f8e4m3
 * states and a state_scale pool). The state's layout rules are those of the update
 * (inner three axes dense, slot stride >= H*P*N). The step ignores
 * pool->angle_state, so one pool struct can serve both Mamba-3 operations.
 *
 * Per call (Bt sequences, one token each):
 *  - A, dt, trap: (Bt, H), each f32/bf16/f16, any strides. dt is already
 *    softplus-ed; trap is already sigma(trap_logit).
 *  - B, C: (Bt, R, H, N), input dtype (f32/bf16/f16), last axis dense.
 *  - x: (Bt, H, P), input dtype, last axis dense.
 *  - D (optional, absent means 0): (H,); xproj: (R, H, P) required;
 *    zproj: (R, H, P), given exactly when z is; outproj (optional):
 *    (R, H, P). Each f32/bf16/f16, any strides.
 *  - z (optional): (Bt, H, P), input dtype; needs outproj.
 *  - out: (Bt, H, P) with outproj, (Bt, R, H, P) without; input dtype,
 *    last axis dense.
 *  - src_index (optional, slot = b when absent), dst_index (optional):
 *    (Bt,) int32/int64, same dtype. Padding as for ssu_update_args_t: the
 *    sequence's outputs are exactly zero and no pool is read or written;
 *    a padding dst entry skips that sequence's pool stores only.
 *
 * Per sequence b, head h, row p, column n (all fp32):
 *   alpha = exp(A*dt); gamma = trap*dt; beta = (1 - trap)*dt*alpha
 *   H'[p,n] = alpha*H[p,n] + sum_r xproj[r,p]*(gamma*x[p]*B[r,n]
 *                                            + beta*xprev[p]*Bprev[r,n])
 *   y_r[p]  = sum_n H'[p,n]*C[r,n] + D*x[p]*xproj[r,p]
 *   with outproj: y_r *= silu(z[p]*zproj[r,p]) if z;
 *                 out[b,h,p] = sum_r y_r[p]*outproj[r,p]
 *   without:      out[b,r,h,p] = y_r[p]
 * H' is stored (rounded to nearest in the state dtype) to the dst slot
 * (default: the src slot); with SSU_MAMBA3_UPDATE_PREV, B and x are stored
 * to prev_B[dst] and prev_x[dst]. Nothing else is written. A src or dst
 * slot >= S is rejected by the CPU backend before anything is written; the
 * CUDA backend treats it as padding and sets SSU_ERROR_BIT_INDEX.
 */
typedef struct ssu_mamba3_step_args {
  uint32_t struct_size;
  uint32_t flags;              /* SSU_MAMBA3_* */
  int64_t pad_slot_id;         /* additional padding value; default -1 */
  const ssu_state_pool_t* pool; /* state, prev_B, prev_x required */
  ssu_tensor_t A;
  ssu_tensor_t dt;
  ssu_tensor_t trap;
  ssu_tensor_t B;
  ssu_tensor_t C;
  ssu_tensor_t x;
  ssu_tensor_t D;       /* optional */
  ssu_tensor_t xproj;
  ssu_tensor_t z;       /* optional, needs zproj and outproj */
  ssu_tensor_t zproj;   /* exactly when z */
  ssu_tensor_t outproj; /* optional */
  ssu_tensor_t out;
  ssu_tensor_t src_index; /* optional */
  ssu_tensor_t dst_index; /* optional */
  uint32_t* error_word;   /* optional device word, CUDA backend only */
} ssu_mamba3_step_args_t;

/** Validates `args` and plans Mamba-3 steps of this kind (everything but
 *  pointers, strides, Bt and S is fixed, as for ssu_plan_create_update). */
SSU_API ssu_status_t ssu_plan_create_mamba3_step(ssu_context_t context,
                                                 const ssu_mamba3_step_args_t* args,
                                                 const ssu_plan_options_t* options,
                                                 ssu_plan_t* out_plan);
/** Runs a planned Mamba-3 step on `stream` (same contract as
 *  ssu_plan_execute_update). A plan of another operation gives
 *  SSU_ERROR_PLAN_MISMATCH. */
SSU_API ssu_status_t ssu_plan_execute_mamba3_step(ssu_plan_t plan,
                                                  const ssu_mamba3_step_args_t* args,
                                                  ssu_stream_t stream);

/* Flags of ssu_mamba3_rotary_args_t.flags. */
#define SSU_MAMBA3_ROTARY_HALVED 0x1u /* pairs (i, i + N/2) (MIMO convention);
                                         default: pairs (2i, 2i + 1) */

/**
 * The Mamba-3 rotary step, which prepares B (k) and C (q) for
 * ssu_plan_execute_mamba3_step and advances the angle pool:
 *  - pool->angle_state: (S, H, Sa) f32, 1 <= Sa <= N/2 (the other pools
 *    of the struct are ignored).
 *  - angle_rate: (Bt, H, Sa) raw rates; dt: (Bt, H) (softplus-ed); each
 *    f32/bf16/f16.
 *  - q, k: (Bt, R, H, N), one float dtype, last axis dense; any R >= 1,
 *    N <= 256 (larger: SSU_ERROR_NOT_SUPPORTED), N even with ..._HALVED;
 *    q_bias, k_bias (optional): (R, H, N), any float dtype and strides.
 *  - q_out, k_out: like q (the same dtype); each may be exactly its input
 *    (same pointer and strides) for an in-place update, else it must not
 *    overlap any input or the other output (an output that shares its
 *    input's pointer with other strides, or shares a pointer with the other
 *    input or output, is refused).
 *  - src_index / dst_index as for the step (a padding dst entry skips the
 *    angle store only; slots >= S are handled as for the step).
 * Per sequence b, head h (fp32):
 *   theta[i] = angle_state[src, h, i] + tanh(angle_rate[b, h, i]) * pi * dt[b, h]
 *   reduced to [0, 2*pi) and stored to angle_state[dst, h, i];
 *   v = q + q_bias (and k + k_bias), then for i < Sa the pair (v[a], v[c])
 *   with (a, c) = (2i, 2i+1), or (i, i + N/2) with ..._HALVED, becomes
 *   (v[a] cos(theta) - v[c] sin(theta), v[a] sin(theta) + v[c] cos(theta));
 *   elements outside the rotated pairs keep v. The rounded results go to
 *   q_out and k_out for every r.
 * A padded sequence leaves the angle pool untouched and gets zero outputs.
 */
typedef struct ssu_mamba3_rotary_args {
  uint32_t struct_size;
  uint32_t flags;              /* SSU_MAMBA3_ROTARY_* */
  int64_t pad_slot_id;         /* default -1 */
  const ssu_state_pool_t* pool; /* angle_state required */
  ssu_tensor_t angle_rate;
  ssu_tensor_t dt;
  ssu_tensor_t q;
  ssu_tensor_t k;
  ssu_tensor_t q_bias;  /* optional */
  ssu_tensor_t k_bias;  /* optional */
  ssu_tensor_t q_out;
  ssu_tensor_t k_out;
  ssu_tensor_t src_index; /* optional */
  ssu_tensor_t dst_index; /* optional */
  uint32_t* error_word;   /* optional device word, CUDA backend only */
} ssu_mamba3_rotary_args_t;

/** Validates `args` and plans rotary steps of this kind. */
SSU_API ssu_status_t ssu_plan_create_mamba3_rotary(ssu_context_t context,
                                                   const ssu_mamba3_rotary_args_t* args,
                                                   const ssu_plan_options_t* options,
                                                   ssu_plan_t* out_plan);
/** Runs a planned rotary step on `stream`. */
SSU_API ssu_status_t ssu_plan_execute_mamba3_rotary(ssu_plan_t plan,
                                                    const ssu_mamba3_rotary_args_t* args,
                                                    ssu_stream_t stream);

/* ------------------------------------------------------------------------ */
/* Checkpointed (replay) decode -- EXPERIMENTAL until 0.4                    */
/* ------------------------------------------------------------------------ */
/*
 * A plain update reads and writes the whole state every step. Replay keeps
 * each slot's state as a checkpoint (the state pool) plus a ring of the last
 * L tokens' inputs, computes the outputs from checkpoint + ring, and writes
 * the state once every L steps. An append step therefore moves the
 * checkpoint read, the ring entries read and one entry written; only a
 * flush step also writes the state. Every decision (commit, flush, append)
 * is taken per sequence on the device from two per-slot counters, so a whole
 * decode loop stays inside one CUDA graph with no host bookkeeping.
 *
 * The names and layouts below may still change before 0.4.
 *
 * Per slot s:
 *  - ckpt[s]: the state pool of ssu_state_pool_t (every state format,
 *    block-scaled ones with their state_scale pool).
 *  - a ring of L entries, one per token: x, B and the step size
 *    delta = softplus?(dt + dt_bias) as f32 (after bias and softplus).
 *  - committed[s], pending[s]: int32 counters, both 0 for a fresh slot. The
 *    caller zeroes them when a slot starts a new request (prefill writes
 *    ckpt[s] directly, like a plain update would).
 * The logical state of s is ckpt[s] advanced, in order and in fp32 with the
 * update's recurrence, by ring entries 0 .. committed[s]-1.
 */

/**
 * The ring buffers and counters of a replay pool; S, H, P, N, G as for the
 * state pool they belong to, L the ring's capacity in tokens.
 *  - x: (S, L, H, P), the input dtype;
 *  - B: (S, L, G, N), the input dtype;
 *  - dt: (S, L, H) f32, or (S, L, H, P) f32 when the step size is per
 *    channel (per-channel dt or dt_bias, the Mamba-1 layout);
 *  - committed, pending: (S,) int32.
 * The last axis of x, B and dt must be dense; every other stride is free
 * (>= 0), so the rings may be slot-major, head-major or live inside larger
 * buffers. Every tensor is caller memory (device memory for CUDA).
 */
typedef struct ssu_replay_ring {
  uint32_t struct_size;
  uint32_t reserved0; /* must be 0 */
  ssu_tensor_t x;
  ssu_tensor_t B;
  ssu_tensor_t dt;
  ssu_tensor_t committed;
  ssu_tensor_t pending;
} ssu_replay_ring_t;

/**
 * Arguments of a replay step: the update's tensors (see ssu_update_args_t)
 * in its single-token (T = 1), multi-token (Bt, T, ...) or varlen form, with
 * the slot pool and its ring. Per-head (Mamba-2) and per-channel (Mamba-1)
 * layouts, every input dtype and every state format of the update apply.
 *  - flags: SSU_UPDATE_DT_SOFTPLUS, SSU_UPDATE_DISABLE_STATE_UPDATE.
 *  - src_index (optional): (Bt,) int32/int64 slots; absent: slot = b.
 *    Padding as for the update: the sequence's outputs are exactly zero and
 *    nothing of its slot (pool, ring, counters) is read or written.
 *  - num_accepted (optional): (Bt,) int32/int64, how many of the previous
 *    call's pending tokens the sequence keeps (speculative decoding).
 *  - T (x.shape[1], or max_tokens in the varlen form) must be <= L. A varlen
 *    sequence of length <= 0 is skipped: nothing of its slot is touched; one
 *    longer than max_tokens is rejected by the CPU backend before anything is
 *    written, and clamped by CUDA, which sets SSU_ERROR_BIT_SEQLEN.
 * Per sequence b with slot s and T_b tokens:
 *  1. commit: committed[s] += (num_accepted ? num_accepted[b] : pending[s]);
 *     pending[s] = 0. (num_accepted[b] outside 0..pending[s]: the CPU backend
 *     rejects the call before writing; CUDA clamps and sets
 *     SSU_ERROR_BIT_ACCEPTED in *error_word.)
 *  2. flush if committed[s] + T_b > L: the logical state is stored to ckpt[s]
 *     exactly as the plain update would store it after the same tokens (the
 *     same fp32 operation sequence, rounding and stochastic-rounding words,
 *     for every state format), then committed[s] = 0.
 *  3. out[b, t] for t < T_b: the update's output of token t computed from the
 *     logical state and this call's tokens 0..t (within the update's
 *     tolerances; the state itself is never rounded in between).
 *  4. append: this call's x, B and delta go to ring entries committed[s] ..
 *     committed[s] + T_b - 1; pending[s] = T_b.
 * With SSU_UPDATE_DISABLE_STATE_UPDATE only the outputs are written (no
 * flush, no append, counters untouched); they are those of steps 1-3.
 * Counters must satisfy 0 <= committed, 0 <= pending, committed + pending
 * <= L (they do whenever only libssu writes them after zeroing): otherwise
 * the CPU backend rejects the call before writing and CUDA handles the
 * sequence as padding and sets SSU_ERROR_BIT_COUNTERS.
 * Ring entries at or beyond committed + pending are never read. Two
 * sequences of one call naming the same slot is undefined.
 */
typedef struct ssu_replay_args {
  uint32_t struct_size;
  uint32_t flags;           /* SSU_UPDATE_DT_SOFTPLUS | ..._DISABLE_STATE_UPDATE */
  int64_t pad_slot_id;      /* additional padding value; default -1 */
  int64_t max_tokens;       /* varlen only: T, the longest sequence allowed */
  const ssu_state_pool_t* pool;  /* required: the checkpoints */
  const ssu_replay_ring_t* ring; /* required */
  ssu_tensor_t x;           /* required */
  ssu_tensor_t dt;          /* required */
  ssu_tensor_t A;           /* required */
  ssu_tensor_t B;           /* required */
  ssu_tensor_t C;           /* required */
  ssu_tensor_t D;           /* optional */
  ssu_tensor_t dt_bias;     /* optional */
  ssu_tensor_t z;           /* optional */
  ssu_tensor_t out;         /* required */
  ssu_tensor_t src_index;   /* optional, (Bt,) */
  ssu_tensor_t cu_seqlens;  /* optional: selects the varlen form */
  ssu_tensor_t num_accepted; /* optional, (Bt,) */
  uint32_t* error_word;     /* optional device word, CUDA backend only */
  const uint64_t* rounding_seed; /* optional: stochastic rounding of f16 /
                               bf16 / f8e4m3 checkpoint stores (as for the
                               update, refused for i8; the element offsets
                               are those of the slot) */
  uint32_t rounding_rounds; /* Philox rounds, 1..32; 0 means 10 */
  uint32_t reserved1;       /* must be 0 */
} ssu_replay_args_t;

/* Bits the CUDA backend ORs into *error_word for a replay step or flush: a
 * num_accepted entry outside 0..pending (clamped), counters out of range
 * (the sequence is handled as padding). */
#define SSU_ERROR_BIT_ACCEPTED 0x4u
#define SSU_ERROR_BIT_COUNTERS 0x8u

/**
 * Arguments of a replay flush: folds the rings of a list of slots into their
 * checkpoints (ckpt = logical state, counters 0), e.g. before a slot is
 * handed to prefix caching, preemption or the plain update. For each listed
 * slot s (padding entries are skipped): commit as step 1 of a replay step
 * (num_accepted[k] when given, else pending[s]), then, if committed[s] > 0,
 * store the logical state to ckpt[s] exactly as step 2 does; then
 * committed[s] = pending[s] = 0. Nothing else is written.
 *  - pool, ring: as for the replay plan (same shapes, dtypes and layouts;
 *    S may differ like for any execute).
 *  - A: as for the replay plan (the fold recomputes exp(A * delta)).
 *  - src_index: (K,) int32/int64, required; num_accepted: optional, (K,)
 *    int32/int64. A slot >= S is handled as by a replay step.
 *  - rounding_seed / rounding_rounds: as for the replay plan (required
 *    exactly when the plan rounds stochastically).
 */
typedef struct ssu_replay_flush_args {
  uint32_t struct_size;
  uint32_t flags;           /* none defined yet: must be 0 */
  int64_t pad_slot_id;      /* default -1 */
  const ssu_state_pool_t* pool;
  const ssu_replay_ring_t* ring;
  ssu_tensor_t A;
  ssu_tensor_t src_index;
  ssu_tensor_t num_accepted;
  uint32_t* error_word;
  const uint64_t* rounding_seed;
  uint32_t rounding_rounds;
  uint32_t reserved1;
} ssu_replay_flush_args_t;

/** Validates `args` and plans replay steps of this kind: everything an update
 *  plan fixes (see ssu_plan_create_update) plus the ring's capacity L and
 *  its dtypes and layouts; T <= L is checked here. The plan's algorithm is
 *  reported by ssu_plan_get_info. */
SSU_API ssu_status_t ssu_plan_create_replay(ssu_context_t context,
                                            const ssu_replay_args_t* args,
                                            const ssu_plan_options_t* options,
                                            ssu_plan_t* out_plan);
/** Runs a planned replay step on `stream` (same contract as
 *  ssu_plan_execute_update: nothing written on error, CUDA-graph capturable). */
SSU_API ssu_status_t ssu_plan_execute_replay(ssu_plan_t plan, const ssu_replay_args_t* args,
                                             ssu_stream_t stream);
/** Runs a replay flush (see ssu_replay_flush_args_t) with a replay plan on
 *  `stream`; capturable like ssu_plan_execute_replay. */
SSU_API ssu_status_t ssu_plan_execute_replay_flush(ssu_plan_t plan,
                                                   const ssu_replay_flush_args_t* args,
                                                   ssu_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SSU_H_ */
