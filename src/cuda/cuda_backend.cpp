// The CUDA backend: the embedded fatbin loaded once per context through the
// driver API, every kernel resolved at creation, launches that never
// synchronize, allocate or copy through the host.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.h"
#include "core/error.h"
#include "cuda/cuda_driver.h"
#include "ssu_cuda_launch.h"

// The fatbin, embedded by ssu_fatbin.S (generated at build time).
extern "C" const unsigned char ssu_fatbin_data[];

namespace ssu {
namespace {

using namespace ssu_cuda;

// The process-wide driver table, loaded on first use. A failed load is
// remembered and reported again to later callers.
const Driver& driver() {
  static Driver d;
  static ssu_status_t status = SSU_SUCCESS;
  static std::string message;
  static std::once_flag once;
  std::call_once(once, [] {
    CUresult init = CUDA_SUCCESS;
    switch (ssu_cuda::load_driver(d, &message, &init)) {
      case ssu_cuda::LoadError::none: break;
      case ssu_cuda::LoadError::not_found: status = SSU_ERROR_DRIVER_NOT_FOUND; break;
      case ssu_cuda::LoadError::too_old: status = SSU_ERROR_DRIVER_TOO_OLD; break;
      case ssu_cuda::LoadError::init_failed:
        status = init == CUDA_ERROR_NO_DEVICE ? SSU_ERROR_NO_DEVICE : SSU_ERROR_CUDA;
        if (init == CUDA_ERROR_NO_DEVICE) message += ": no CUDA device is visible";
        break;
    }
  });
  if (status != SSU_SUCCESS) fail(status, "%s", message.c_str());
  return d;
}

void check(const Driver& d, CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) fail(SSU_ERROR_CUDA, "%s", ssu_cuda::describe(d, call, r).c_str());
}

// Input dtypes are indices 0..2; state dtypes (the update's and the replay
// checkpoint's) add the block-scaled ones, 3 (i16), 4 (i8) and 5 (f8e4m3).
int dtype_index(int32_t dtype) {
  switch (dtype) {
    case SSU_DTYPE_F32: return 0;
    case SSU_DTYPE_F16: return 1;
    case SSU_DTYPE_BF16: return 2;
    default: return -1;
  }
}
int update_state_index(int32_t dtype) {
  switch (dtype) {
    case SSU_DTYPE_I16: return 3;
    case SSU_DTYPE_I8: return 4;
    case SSU_DTYPE_F8E4M3: return 5;
    default: return dtype_index(dtype);
  }
}
constexpr int kUpdateStateDtypes = 6;
const char* const kDtypeNames[kUpdateStateDtypes] = {"f32", "f16", "bf16", "i16", "i8", "f8e4m3"};
int dtype_bytes(int i) { return i == 0 ? 4 : i >= 4 ? 1 : 2; }
// Bytes of a state element (any update state dtype).
int64_t state_bytes(int32_t dtype) { return dtype_bytes(update_state_index(dtype)); }
bool is_scaled_state(int32_t dtype) {
  return dtype == SSU_DTYPE_I16 || dtype == SSU_DTYPE_I8 || dtype == SSU_DTYPE_F8E4M3;
}
// Which state dtypes have a stochastic store: f16, bf16, f8e4m3.
bool has_sr(int s) { return s == 1 || s == 2 || s == 5; }

// Kernel variants (see kernels/ssu_update.cu).
enum Variant { kVec1 = 0, kVec2 = 1, kGen = 2, kNumVariants = 3 };
const char* const kVariantNames[kNumVariants] = {"vec1", "vec2", "gen"};

constexpr int64_t kMaxDstate = 256;
constexpr int64_t kTileBytes = 32768;
// A block's fixed cost (index lookup, staging round trip) in tile bytes,
// for choosing the tile size (see execute_update).
constexpr int64_t kFixedBlockBytes = 24576;

int pow2_ceil(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// Rows of a tensor of `eb`-byte elements that all start 16-byte aligned.
bool rows_aligned16(const void* p, int64_t eb, std::initializer_list<int64_t> strides) {
  if (!aligned16(p)) return false;
  for (int64_t st : strides)
    if ((st * eb) % 16 != 0) return false;
  return true;
}

int64_t align16(int64_t v) { return (v + 15) & ~int64_t(15); }

// Fills the shared-memory offsets of `L` for a tile of `rows` rows (see
// ssu_cuda_launch.h) and returns the bytes a block needs.
int64_t shared_layout(const ssu_update_params& p, bool state_tile, int rows,
                      ssu_cuda_update_launch* L) {
  const int64_t T = p.ntokens, N = p.dstate, sb = state_bytes(p.state_dtype);
  const uint32_t f = p.features;
  const bool dt_per_head =
      p.dt_stride_p == 0 && (!(f & SSU_F_HAS_DT_BIAS) || p.dt_bias_stride_p == 0);
  int64_t o = state_tile ? align16(rows * N * sb) : 0;
  auto put = [&](int64_t bytes) {
    const int64_t at = o;
    o = align16(o + bytes);
    return static_cast<int32_t>(std::min<int64_t>(at, INT32_MAX));
  };
  L->off_B = put(T * N * 4);
  L->off_C = put(T * N * 4);
  L->off_dt = put(dt_per_head ? 2 * T * 4 : T * rows * 4);  // per head: dt, then exp(A*dt)
  L->off_x = put(T * rows * 4);
  L->off_z = put((f & SSU_F_HAS_Z) ? T * rows * 4 : 0);
  L->off_D = put(int64_t(rows) * 4);
  L->off_A = put((f & SSU_F_A_PER_CHANNEL) ? rows * N * 4 : 0);
  L->off_dst = put(T * 8);
  L->off_scale = put(is_scaled_state(p.state_dtype) ? int64_t(rows) * 4 : 0);
  L->reserved0 = 0;
  return o;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal) : d_(driver()) {
    int count = 0;
    check(d_, d_.DeviceGetCount(&count), "cuDeviceGetCount");
    if (count == 0) fail(SSU_ERROR_NO_DEVICE, "no CUDA device is visible");
    if (ordinal < 0 || ordinal >= count)
      fail(SSU_ERROR_NO_DEVICE, "device_ordinal=%d but %d CUDA device%s visible", ordinal,
           count, count == 1 ? " is" : "s are");
    check(d_, d_.DeviceGet(&dev_, ordinal), "cuDeviceGet");
    int major = 0, minor = 0;
    check(d_, d_.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_),
          "cuDeviceGetAttribute");
    check(d_, d_.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_),
          "cuDeviceGetAttribute");
    check(d_, d_.DeviceGetAttribute(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_),
          "cuDeviceGetAttribute");
    check(d_, d_.DeviceGetAttribute(&max_smem_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev_),
          "cuDeviceGetAttribute");
    check(d_, d_.DeviceGetAttribute(&smem_per_sm_,
                                    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev_),
          "cuDeviceGetAttribute");
    cc_ = major * 10 + minor;
    char name[256] = {0};
    check(d_, d_.DeviceGetName(name, static_cast<int>(sizeof name) - 1, dev_), "cuDeviceGetName");
    name_ = format("%s (sm_%d, %d SMs)", name, cc_, sms_);
    if (cc_ < 80)
      fail(SSU_ERROR_DEVICE_UNSUPPORTED,
           "%s: compute capability %d.%d is below the 8.0 that libssu's CUDA kernels need",
           name, major, minor);

    check(d_, d_.DevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    try {
      ContextGuard guard(d_, ctx_);
      const CUresult r = d_.LibraryLoadData(&lib_, ssu_fatbin_data, nullptr, nullptr, 0,
                                            nullptr, nullptr, 0);
      if (r == CUDA_ERROR_NO_BINARY_FOR_GPU)
        fail(SSU_ERROR_DEVICE_UNSUPPORTED,
             "%s: this libssu has no kernels for sm_%d (cuLibraryLoadData: "
             "CUDA_ERROR_NO_BINARY_FOR_GPU); rebuild with -Dcuda_archs=sm_%d",
             name, cc_, cc_);
      check(d_, r, "cuLibraryLoadData");
      for (int s = 0; s < kUpdateStateDtypes; ++s)
        for (int i = 0; i < 3; ++i)
          for (int v = 0; v < kNumVariants; ++v)
          for (int sr = 0; sr < 2; ++sr) {
            if (v == kVec2 && (s != 0 || sr)) continue;  // only f32 rows need two chunks
            if (sr && !has_sr(s)) continue;               // stochastic: f16 / bf16 / f8e4m3
            const CUfunction fn = load_streaming_kernel(
                format("ssu_update_%s_%s_%s%s", kDtypeNames[s], kDtypeNames[i],
                       kVariantNames[v], sr ? "_sr" : "").c_str());
            regs_blocks_[s][i][v][sr] = blocks_by_registers(fn);
            fn_[s][i][v][sr] = fn;
          }
      for (int s = 0; s < kUpdateStateDtypes; ++s)
        for (int i = 0; i < 3; ++i)
          for (int sr = 0; sr < 2; ++sr) {
            if (sr && !has_sr(s)) continue;
            const CUfunction fn = load_streaming_kernel(
                format("ssu_pipe_%s_%s%s", kDtypeNames[s], kDtypeNames[i], sr ? "_sr" : "").c_str());
            pipe_fn_[s][i][sr] = fn;
            pipe_regs_blocks_[s][i][sr] = blocks_by_registers(fn);
            if (s < 3 && !sr) {  // f32 / f16 / bf16 states rounded to nearest
              // several tokens
              pipe_mt_fn_[s][i] = load_streaming_kernel(
                  format("ssu_pipe_%s_%s_mt", kDtypeNames[s], kDtypeNames[i]).c_str());
              pipe_mt_regs_blocks_[s][i] = blocks_by_registers(pipe_mt_fn_[s][i]);
              // per-channel A, dt and D (Mamba-1)
              pipe_pc_fn_[s][i] = load_streaming_kernel(
                  format("ssu_pipe_%s_%s_pc", kDtypeNames[s], kDtypeNames[i]).c_str());
              pipe_pc_regs_blocks_[s][i] = blocks_by_registers(pipe_pc_fn_[s][i]);
              // the same with N = 16, one lane per row
              pipe_pc16_fn_[s][i] = load_streaming_kernel(
                  format("ssu_pipe_%s_%s_pc16", kDtypeNames[s], kDtypeNames[i]).c_str());
              pipe_pc16_regs_blocks_[s][i] = blocks_by_registers(pipe_pc16_fn_[s][i]);
            }
          }
      // SSU_CUDA_PIPE_PAIRS=0: no head pairs (pipe_pairs_ok), for tests and
      // measurements.
      if (const char* e = std::getenv("SSU_CUDA_PIPE_PAIRS")) pipe_pairs_ = std::atoi(e) != 0;
      if (const char* e = std::getenv("SSU_CUDA_PIPE_TILE")) {
        const long v = std::strtol(e, nullptr, 10);
        if (v >= 1024 && v <= 65536) pipe_tile_bytes_ = v;
      }
      if (const char* e = std::getenv("SSU_CUDA_PIPE_MAX_BLOCKS")) {
        const long v = std::strtol(e, nullptr, 10);
        if (v >= 1) {
          pipe_max_blocks_ = v;
          pinned_pipe_small_ = true;  // small calls too, so that tests reach the kernel
        }
      }
      for (int s = 0; s < kUpdateStateDtypes; ++s)
        for (int i = 0; i < 3; ++i)
          for (int sr = 0; sr < 2; ++sr)
            if (!sr || has_sr(s))
              direct_fn_[s][i][sr] = load_function(format(
                  "ssu_direct_%s_%s%s", kDtypeNames[s], kDtypeNames[i], sr ? "_sr" : "").c_str());
      for (int s = 0; s < 3; ++s)
        for (int i = 0; i < 3; ++i)
          direct_pc_fn_[s][i] = load_function(
              format("ssu_direct_%s_%s_pc", kDtypeNames[s], kDtypeNames[i]).c_str());
      for (int s = 0; s < 3; ++s)
        for (int i = 0; i < 3; ++i) {
          m1_fn_[s][i] = load_function(
              format("ssu_m1_%s_%s", kDtypeNames[s], kDtypeNames[i]).c_str());
          // Resident blocks: by registers and by shared memory (static,
          // the warps' rings and the 1 KiB the driver reserves per block).
          int stat = 0;
          check(d_, d_.FuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, m1_fn_[s][i]),
                "cuFuncGetAttribute");
          m1_resident_[s][i] = std::max<int64_t>(
              1, std::min<int64_t>(blocks_by_registers(m1_fn_[s][i], kM1Threads),
                                   smem_per_sm_ / (stat + m1_ring_bytes(s) + 1024)));
        }
      if (const char* e = std::getenv("SSU_CUDA_M1")) m1_mode_ = std::atoi(e) ? 1 : 0;
      if (const char* e = std::getenv("SSU_CUDA_M1_SEQS"))
        m1_seqs_ = std::max(0, std::min(kM1MaxSeqs, std::atoi(e)));
      if (const char* e = std::getenv("SSU_CUDA_DIRECT")) direct_mode_ = std::atoi(e) ? 1 : 0;
      if (const char* e = std::getenv("SSU_CUDA_DIRECT_K")) {
        const long v = std::strtol(e, nullptr, 10);
        if (v >= 1 && v <= SSU_CUDA_DIRECT_K && (v & (v - 1)) == 0)
          direct_chunks_per_lane_ = static_cast<int>(v);
      }
      advance_seed_fn_ = load_function("ssu_advance_seed");
      for (int si = 0; si < 3; ++si)
        for (int v = 0; v < kM3Variants; ++v) {
          m3_fn_[si][v] = load_function(
              format("ssu_mamba3_step_%s_%s", kDtypeNames[si], kM3VariantNames[v]).c_str());
          check(d_, d_.FuncSetAttribute(m3_fn_[si][v], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        max_smem_),
                "cuFuncSetAttribute");
        }
      for (int si = 0; si < 3; ++si)
        for (int v = 0; v < kM3pRanks; ++v) {
          m3p_fn_[si][v] = load_streaming_kernel(
              format("ssu_mamba3_pipe_%s_r%d", kDtypeNames[si], 1 << v).c_str());
          m3p_regs_blocks_[si][v] = blocks_by_registers(m3p_fn_[si][v], kM3pThreads);
        }
      rotary_fn_ = load_function("ssu_mamba3_rotary");
      if (const char* e = std::getenv("SSU_CUDA_REPLAY_ROWS")) replay_max_rows_ = std::atoi(e);
      // SSU_CUDA_REPLAY_WARP=0 keeps every replay on the block kernels, =1
      // takes the warp-per-head kernels at any batch where the shape allows
      // (tests and measurements); unset, the batch decides.
      if (const char* e = std::getenv("SSU_CUDA_REPLAY_WARP")) replay_warp_ = std::atoi(e) != 0 ? 1 : 0;
      // SSU_CUDA_REPLAY_WARP_PARTS: warps per head of the warp kernels (a
      // power of two; measurements), unset or 0: chosen by batch.
      if (const char* e = std::getenv("SSU_CUDA_REPLAY_WARP_PARTS"))
        replay_warp_parts_ = std::max(0, std::min(64, std::atoi(e)));
      // SSU_CUDA_REPLAY_PREFETCH: the warp kernels' L2 prefetch distance in
      // row steps (measurements; 0 turns it off).
      if (const char* e = std::getenv("SSU_CUDA_REPLAY_PREFETCH"))
        replay_prefetch_ = std::max(0, std::min(64, std::atoi(e)));
      // SSU_CUDA_REPLAY_GROUP_SHARE=0: every warp stages its group's B
      // entries and computes the B . C dots itself (measurements).
      if (const char* e = std::getenv("SSU_CUDA_REPLAY_GROUP_SHARE"))
        replay_group_share_ = std::atoi(e) != 0;
      // SSU_CUDA_REPLAY_FOLD_F32=0: flush steps widen B in the fold loop
      // instead of folding from the block's f32 copy (measurement knob).
      if (const char* e = std::getenv("SSU_CUDA_REPLAY_FOLD_F32"))
        replay_fold_f32_ = std::atoi(e) != 0;
      // SSU_CUDA_REPLAY_EARLY_ENTRIES=0: the sequence's last warp or block
      // writes an append's B and delta entries too (measurements, tests).
      if (const char* e = std::getenv("SSU_CUDA_REPLAY_EARLY_ENTRIES"))
        replay_early_entries_ = std::atoi(e) != 0;
      for (int si = 0; si < kUpdateStateDtypes; ++si)
        for (int i = 0; i < 3; ++i) {
          replay_fn_[si][i] = load_streaming_kernel(
              format("ssu_replay_%s_%s", kDtypeNames[si], kDtypeNames[i]).c_str());
          replay_warp_fn_[si][i] = load_streaming_kernel(
              format("ssu_replay_warp_%s_%s", kDtypeNames[si], kDtypeNames[i]).c_str());
          // The one-token warp kernels exist for 16-bit inputs (f16, bf16).
          if (i != 0)
            replay_warp1_fn_[si][i] = load_streaming_kernel(
                format("ssu_replay_warp1_%s_%s", kDtypeNames[si], kDtypeNames[i]).c_str());
        }
    } catch (...) {
      release();
      throw;
    }
  }

  ssu_algorithm_t plan_mamba3_step(const ssu_mamba3_params& p,
                                   ssu_algorithm_t requested) override {
    if (dtype_index(p.state_dtype) < 0 || dtype_index(p.input_dtype) < 0)
      fail(SSU_ERROR_NOT_SUPPORTED, "the CUDA Mamba-3 step supports f32, f16 and bf16 states "
           "and inputs");
    const int64_t need = m3_smem_bytes(p);
    if (need > max_smem_)
      fail(SSU_ERROR_NOT_SUPPORTED, "rank=%lld, dim=%lld, dstate=%lld need %lld bytes of shared "
           "memory per block, more than this device's %d", static_cast<long long>(p.rank),
           static_cast<long long>(p.dim), static_cast<long long>(p.dstate),
           static_cast<long long>(need), max_smem_);
    return choose_algorithm(requested, m3p_form(p), "Mamba-3 step");
  }

  void execute_mamba3_step(const ssu_mamba3_params& p, ssu_algorithm_t algorithm,
                           ssu_stream_t stream) override {
    if (p.batch <= 0) return;
    const int si = dtype_index(p.state_dtype);
    if (algorithm == SSU_ALGORITHM_CUDA_PIPELINED && execute_mamba3_pipelined(p, si, stream))
      return;
    const int v = p.rank == 1 ? 0 : p.rank == 2 ? 1 : p.rank == 4 ? 2 : 3;
    const int64_t blocks = p.batch * p.nheads;
    if (blocks > INT32_MAX)
      fail(SSU_ERROR_NOT_SUPPORTED, "batch*nheads=%lld is too large for one CUDA launch",
           static_cast<long long>(blocks));
    ssu_mamba3_params copy = p;
    // Stage the head's state through shared memory (all of it in flight at
    // once) when the tile is small enough to keep several blocks per SM.
    const int64_t tile = m3_state_tile_bytes(p);
    const int64_t staged = m3_smem_bytes(p) + tile;
    copy.cuda_stage_state = tile <= kM3MaxStagedTile && staged <= max_smem_ ? 1 : 0;
    void* args[] = {&copy};
    launch(m3_fn_[si][v], static_cast<unsigned>(blocks), kM3Threads,
           static_cast<unsigned>(copy.cuda_stage_state ? staged : m3_smem_bytes(p)), stream, args);
  }

  ssu_algorithm_t plan_mamba3_rotary(const ssu_rotary_params& p,
                                     ssu_algorithm_t requested) override {
    if (dtype_index(p.qk_dtype) < 0)
      fail(SSU_ERROR_NOT_SUPPORTED, "the CUDA rotary step supports f32, f16 and bf16 q and k");
    return simple_algorithm(requested);
  }

  void execute_mamba3_rotary(const ssu_rotary_params& p, ssu_algorithm_t,
                             ssu_stream_t stream) override {
    if (p.batch <= 0) return;
    const int64_t blocks = p.batch * p.nheads;
    if (blocks > INT32_MAX)
      fail(SSU_ERROR_NOT_SUPPORTED, "batch*nheads=%lld is too large for one CUDA launch",
           static_cast<long long>(blocks));
    ssu_rotary_params copy = p;
    void* args[] = {&copy};
    launch(rotary_fn_, static_cast<unsigned>(blocks), kM3Threads,
           static_cast<unsigned>(2 * p.nangles * 4), stream, args);
  }


  // ---- replay (kernels/ssu_replay.cu) ---------------------------------------
  ssu_algorithm_t plan_replay(const ssu_replay_params& rp, ssu_algorithm_t requested) override {
    const ssu_update_params& p = rp.u;
    if (requested != SSU_ALGORITHM_AUTO && requested != SSU_ALGORITHM_CUDA_REPLAY)
      fail(SSU_ERROR_ALGORITHM_UNAVAILABLE, "algorithm %d (%s) cannot run a replay step; use "
           "cuda_replay or auto", requested, algorithm_name(requested));
    const int si = update_state_index(p.state_dtype);
    if (si < 0)
      fail(SSU_ERROR_NOT_SUPPORTED, "pool.state.dtype=%s but the CUDA replay kernels support f32, "
           "f16, bf16, i16, i8 and f8e4m3 checkpoints", ssu_dtype_name(p.state_dtype));
    if (dtype_index(p.input_dtype) < 0)
      fail(SSU_ERROR_NOT_SUPPORTED, "x.dtype=%s but the CUDA replay kernels support f32, f16 and "
           "bf16 inputs", ssu_dtype_name(p.input_dtype));
    const int vec = 16 / dtype_bytes(si);
    if (p.dstate % vec != 0)
      fail(SSU_ERROR_NOT_SUPPORTED, "dstate=%lld but the CUDA replay kernels need a multiple of "
           "%d for a %s state (16-byte rows)", static_cast<long long>(p.dstate), vec,
           kDtypeNames[si]);
    if (p.dim * p.dstate > INT32_MAX)
      fail(SSU_ERROR_NOT_SUPPORTED, "dim*dstate=%lld exceeds the CUDA backend's limit of 2^31-1",
           static_cast<long long>(p.dim * p.dstate));
    ssu_cuda_replay_launch probe;
    const int rows = replay_rows(rp, 1 << 30);
    const int64_t need = replay_smem(rp, rows, &probe);
    if (need > max_smem_)
      fail(SSU_ERROR_NOT_SUPPORTED, "a ring of L=%lld entries with T=%lld tokens and dstate=%lld "
           "needs %lld bytes of shared memory per block, more than this device's %d",
           static_cast<long long>(rp.ring_len), static_cast<long long>(p.ntokens),
           static_cast<long long>(p.dstate), static_cast<long long>(need), max_smem_);
    return SSU_ALGORITHM_CUDA_REPLAY;
  }

  void execute_replay(const ssu_replay_params& rp, ssu_algorithm_t,
                      ssu_stream_t stream) override {
    const ssu_update_params& p = rp.u;
    if (p.batch <= 0) return;
    const int si = update_state_index(p.state_dtype), ii = dtype_index(p.input_dtype);
    const int sb = dtype_bytes(si);
    if (!aligned16(p.state) || (p.state_stride_slot * sb) % 16 != 0)
      fail(SSU_ERROR_BAD_STRIDE, "the CUDA replay kernels need pool.state 16-byte aligned with a "
           "slot stride of a multiple of 16 bytes (state at %p, slot stride %lld elements)",
           p.state, static_cast<long long>(p.state_stride_slot));
    ssu_cuda_replay_launch L;
    std::memset(&L, 0, sizeof L);
    L.p = rp;
    L.early_entries = replay_early_entries_ ? 1 : 0;
    const int64_t bh = p.batch * p.nheads;
    if (p.nheads >= 32768)
      fail(SSU_ERROR_NOT_SUPPORTED, "nheads=%lld is too many heads per sequence for the replay "
           "kernels (limit 32767)", static_cast<long long>(p.nheads));
    // The warp kernels from 1.5 heads per SM, each head in as many warps as
    // replay_warp_parts gives; the block kernels, which split heads into
    // row tiles, below that. (H100, us per step: f32 batch 2 12.7 against
    // 13.7, bf16 batch 4 13.4 against 14.9; batch 1 (one head per SM)
    // 10.9 against 10.8 f32, 10.4 against 10.1 bf16.) A call of one token
    // per sequence (max_tokens 1; the flush op has none) with 16-bit inputs
    // takes the one-token warp kernels (their multi-token paths compiled
    // out), at any batch (H200, batch 1: bf16 10.00 -> 9.80, f32
    // checkpoint 10.50 -> 10.37, int8 even).
    const bool one = p.ntokens == 1 && !(rp.rflags & SSU_RF_FLUSH_OP) && replay_warp1_fn_[si][ii];
    const bool warp_batch =
        replay_warp_ == 1 || 2 * bh >= 3 * sms_ || (replay_warp_ != 0 && one);
    const int parts = warp_batch ? replay_warp_parts(rp, bh) : 1;
    const int64_t warp_need = warp_batch ? replay_warp_smem(rp, parts, &L) : -1;
    CUfunction fn;
    int64_t blocks, need;
    if (warp_need >= 0) {
      // One warp per (sequence, head, part), SSU_CUDA_REPLAY_WARPS per block.
      if (p.nheads * parts >= 32768)
        fail(SSU_ERROR_NOT_SUPPORTED, "nheads=%lld in %d parts make too many warps per sequence "
             "for the replay kernels (limit 32767)", static_cast<long long>(p.nheads), parts);
      fn = one ? replay_warp1_fn_[si][ii] : replay_warp_fn_[si][ii];
      blocks = (bh * parts + SSU_CUDA_REPLAY_WARPS - 1) / SSU_CUDA_REPLAY_WARPS;
      need = warp_need;
    } else {
      // Whole heads per block once they fill the device four times over;
      // smaller row tiles (more blocks) below that.
      const int rows = replay_rows(rp, bh);
      need = replay_smem(rp, rows, &L);
      const int64_t tiles = L.tiles_per_head;
      if (p.nheads * tiles >= 32768)
        fail(SSU_ERROR_NOT_SUPPORTED, "nheads=%lld in %lld row tiles make too many blocks per "
             "sequence for the replay kernels (limit 32767)", static_cast<long long>(p.nheads),
             static_cast<long long>(tiles));
      fn = replay_fn_[si][ii];
      blocks = bh * tiles;
    }
    if (blocks > INT32_MAX)
      fail(SSU_ERROR_NOT_SUPPORTED, "a replay launch of %lld blocks (batch*nheads=%lld) is too "
           "large for one CUDA launch", static_cast<long long>(blocks), static_cast<long long>(bh));
    void* args[] = {&L};
    launch(fn, static_cast<unsigned>(blocks), SSU_CUDA_REPLAY_THREADS, static_cast<unsigned>(need),
           stream, args, pdl(p));
  }

  void advance_seed(uint64_t* seed, uint64_t increment, ssu_stream_t stream) override {
    unsigned long long* ptr = reinterpret_cast<unsigned long long*>(seed);
    unsigned long long inc = increment;
    void* args[] = {&ptr, &inc};
    launch(advance_seed_fn_, 1, 1, 0, stream, args);
  }

  ~CudaBackend() override { release(); }

  ssu_backend_t kind() const override { return SSU_BACKEND_CUDA; }
  const char* device_name() const override { return name_.c_str(); }

  ssu_algorithm_t plan_update(const ssu_update_params& p, ssu_algorithm_t requested) override {
    if (update_state_index(p.state_dtype) < 0)
      fail(SSU_ERROR_NOT_SUPPORTED, "the CUDA backend supports f32, f16, bf16, i16, i8 and f8e4m3 "
           "states, not %s", ssu_dtype_name(p.state_dtype));
    if (dtype_index(p.input_dtype) < 0)
      fail(SSU_ERROR_NOT_SUPPORTED, "the CUDA backend does not support %s inputs",
           ssu_dtype_name(p.input_dtype));
    if (p.dstate < 1 || p.dstate > kMaxDstate)
      fail(SSU_ERROR_NOT_SUPPORTED, "dstate=%lld but the CUDA backend supports 1..%lld",
           static_cast<long long>(p.dstate), static_cast<long long>(kMaxDstate));
    if (p.dim < 1 || p.dim * p.dstate > INT32_MAX)
      fail(SSU_ERROR_NOT_SUPPORTED, "dim*dstate=%lld exceeds the CUDA backend's limit of 2^31-1",
           static_cast<long long>(p.dim * p.dstate));
    {
      ssu_cuda_update_launch probe;
      const int64_t need = shared_layout(p, false, 1, &probe);
      if (need > max_smem_)
        fail(SSU_ERROR_NOT_SUPPORTED,
             "ntokens=%lld with dstate=%lld needs %lld bytes of shared memory per block, more "
             "than this device's %d",
             static_cast<long long>(p.ntokens), static_cast<long long>(p.dstate),
             static_cast<long long>(need), max_smem_);
    }
    return choose_algorithm(requested, pipe_form(p), "update");
  }

  void execute_update(const ssu_update_params& p, ssu_algorithm_t algorithm,
                      ssu_stream_t stream) override {
    if (algorithm != SSU_ALGORITHM_CUDA_SIMPLE && algorithm != SSU_ALGORITHM_CUDA_PIPELINED)
      fail(SSU_ERROR_INTERNAL, "CUDA backend asked to run algorithm %d", algorithm);
    if (p.batch <= 0) return;
    const int si = update_state_index(p.state_dtype), ii = dtype_index(p.input_dtype);
    const int sr = (p.features & SSU_F_STOCHASTIC) ? 1 : 0;
    if (si < 0 || ii < 0) fail(SSU_ERROR_INTERNAL, "unplanned dtype reached the CUDA backend");
    // A pipelined plan runs the simple kernels for a call whose state pool
    // is not 16-byte aligned (its pointers are only known here).
    if (algorithm == SSU_ALGORITHM_CUDA_PIPELINED && pipe_aligned(p)) {
      // Direct kernels first where forced (SSU_CUDA_DIRECT=1), then the
      // pipelined ones, then the direct ones for the calls too small for
      // those; the simple kernels take the rest.
      if (direct_mode_ == 1 && execute_direct(p, si, ii, sr, stream)) return;
      if (execute_m1(p, si, ii, sr, stream)) return;
      if (execute_pipelined(p, si, ii, sr, stream)) return;
      if (direct_mode_ != 0 && execute_direct(p, si, ii, sr, stream)) return;
    }

    ssu_cuda_update_launch L;
    std::memcpy(&L.p, &p, sizeof p);
    const int N = static_cast<int>(p.dstate), P = static_cast<int>(p.dim);

    // 16-byte state accesses need every row start 16-byte aligned: the
    // pools' base pointers, the row length and the slot strides.
    const int sb = dtype_bytes(si);
    const int vec = 16 / sb;
    bool vec_ok = (N * sb) % 16 == 0 && aligned16(p.state) &&
                  (p.state_stride_slot * sb) % 16 == 0 && N / vec <= 64;
    if (p.features & SSU_F_HAS_INTER)
      vec_ok = vec_ok && aligned16(p.inter_states) && (p.inter_stride_i * sb) % 16 == 0 &&
               (p.inter_stride_t * sb) % 16 == 0;
    Variant variant;
    if (vec_ok) {
      const int chunks = N / vec;
      variant = chunks > 32 ? kVec2 : kVec1;
      L.lanes_per_row = pow2_ceil(variant == kVec2 ? (chunks + 1) / 2 : chunks);
    } else {
      variant = kGen;
      L.lanes_per_row = pow2_ceil((N + 7) / 8);
    }
    const CUfunction fn = fn_[si][ii][variant][sr];
    if (!fn) fail(SSU_ERROR_INTERNAL, "no CUDA kernel for this state dtype and rounding");

    // Tile: the rows a block copies into shared memory (its bytes in flight).
    // Candidates halve from kTileBytes of state down to one row per lane
    // group; the one with the least estimated time wins, where a wave of
    // resident blocks costs its tile bytes plus kFixedBlockBytes (the latency
    // of a block's dependent loads expressed as bytes). This picks whole-head
    // tiles at large batch, smaller tiles where whole ones would leave a
    // mostly empty last wave, and dim tiling at small batch.
    const int groups = SSU_CUDA_THREADS / L.lanes_per_row;
    const int64_t bh = p.batch * p.nheads;
    const int64_t row_bytes = int64_t(N) * sb;
    // A per-channel A tile (f32, as large as an f32 state tile) shares the budget.
    // Several tokens per row lengthen a block's compute: smaller tiles (more
    // resident blocks) measured faster there (T=4: 0.48 vs 0.40 of copy).
    int64_t tile_bytes = p.ntokens > 1 ? kTileBytes / 2 : kTileBytes;
    if (p.features & SSU_F_A_PER_CHANNEL) tile_bytes = tile_bytes * sb / (sb + 4);
    int rows = static_cast<int>(std::max<int64_t>(groups, tile_bytes / row_bytes));
    rows = std::min(rows, P);
    int best_rows = -1;
    double best_cost = 0;
    for (int r = rows;; r = std::max(groups, r / 2)) {
      const int64_t sm = shared_layout(p, variant != kGen, r, &L);
      if (sm <= max_smem_) {
        const int64_t resident = std::max<int64_t>(
            1, std::min<int64_t>(regs_blocks_[si][ii][variant][sr], smem_per_sm_ / (sm + 1024)));
        const int64_t blocks = bh * ((P + r - 1) / r);
        const int64_t waves = (blocks + resident * sms_ - 1) / (resident * sms_);
        const double cost = double(waves) * double(int64_t(r) * row_bytes + kFixedBlockBytes);
        if (best_rows < 0 || cost < best_cost) {
          best_rows = r;
          best_cost = cost;
        }
      }
      if (r <= groups) break;
    }
    if (best_rows < 0)
      fail(SSU_ERROR_NOT_SUPPORTED,
           "ntokens=%lld with dstate=%d needs more shared memory per block than this device's "
           "%d bytes",
           static_cast<long long>(p.ntokens), N, max_smem_);
    rows = best_rows;
    const int64_t smem = shared_layout(p, variant != kGen, rows, &L);
    L.rows_per_block = rows;
    L.tiles_per_head = (P + rows - 1) / rows;
    const int64_t blocks = bh * L.tiles_per_head;
    if (blocks > INT32_MAX)
      fail(SSU_ERROR_NOT_SUPPORTED, "batch*nheads=%lld is too large for one CUDA launch",
           static_cast<long long>(bh));

    void* args[] = {&L};
    launch(fn, static_cast<unsigned>(blocks), SSU_CUDA_THREADS, static_cast<unsigned>(smem),
           stream, args, pdl(p));
  }

 private:
  // Rows per replay block for `bh` (sequence, head) pairs: whole heads (up
  // to 256 rows) when they give four blocks per SM, else smaller tiles, in
  // multiples of the block's row groups.
  int replay_rows(const ssu_replay_params& rp, int64_t bh) const {
    const ssu_update_params& p = rp.u;
    const int sb = static_cast<int>(state_bytes(p.state_dtype));
    const int chunks = static_cast<int>(p.dstate) * sb / 16;
    const int lpr = std::min(32, pow2_ceil(std::max(1, chunks)));
    const int ngrp = SSU_CUDA_REPLAY_THREADS / lpr;
    const int64_t P = p.dim;
    int64_t tiles = std::max<int64_t>(1, (P + 255) / 256);
    const int64_t want = 4 * static_cast<int64_t>(sms_);
    if (bh * tiles < want) tiles = std::min<int64_t>((want + bh - 1) / bh, (P + ngrp - 1) / ngrp);
    int64_t rows = (P + tiles - 1) / tiles;
    rows = (rows + ngrp - 1) / ngrp * ngrp;
    int r = static_cast<int>(std::min<int64_t>(rows, std::max<int64_t>(P, 1)));
    // SSU_CUDA_REPLAY_ROWS caps the rows per block (for measurements).
    if (replay_max_rows_ > 0 && r > replay_max_rows_)
      r = std::max(ngrp, replay_max_rows_ / ngrp * ngrp);
    // At least two blocks per SM by shared memory: smaller tiles otherwise.
    ssu_cuda_replay_launch probe;
    while (r > ngrp && replay_smem(rp, r, &probe) > smem_per_sm_ / 2)
      r = std::max(ngrp, (r / 2 + ngrp - 1) / ngrp * ngrp);
    return r;
  }

  // The warp-per-head replay kernels' launch (kernels/ssu_replay.cu): fills
  // L's geometry and the offsets within one warp's slice of shared memory
  // (L->warp_slice bytes) and returns the block's dynamic shared memory, or
  // -1 where those kernels cannot take the plan's shape (per-channel step
  // size or A; rows that are not 8 lanes of at most 16 elements, i.e. N *
  // sizeof(state) a multiple of 128 bytes up to 16 * 8 elements; slices too
  // large for two blocks per SM).
  // Warps per head of the warp kernels: a power of two that divides the
  // head's rows into parts of whole row steps (4 rows) and of whole 16-byte
  // chunks of x (8 rows of 16-bit inputs), the most that keep the launch
  // within 8 warps per SM, and at least two within 16 (below). Below
  // serving batch a warp's life is mostly its fixed chain of dependent round
  // trips, not its rows, so a head in several parts helps only until the
  // warps fill about half of what the registers allow (16 or 20 per SM);
  // beyond that each further part is another warp's fixed cost (H100, us
  // per step: f32 batch 2 in 1, 2, 4, 8 parts 14.3, 13.0, 12.7, 13.1; bf16
  // batch 4 15.3, 13.4, 14.2, 21.1).
  int replay_warp_parts(const ssu_replay_params& rp, int64_t bh) const {
    const ssu_update_params& p = rp.u;
    const int64_t P = p.dim;
    auto fits = [&](int64_t parts) { return P % (8 * parts) == 0; };
    if (replay_warp_parts_ > 0)
      return fits(replay_warp_parts_) && (replay_warp_parts_ & (replay_warp_parts_ - 1)) == 0
                 ? replay_warp_parts_ : 1;
    int64_t parts = 1;
    while (fits(2 * parts) && bh * 2 * parts <= 8 * static_cast<int64_t>(sms_)) parts *= 2;
    // Two parts rather than one while within 16 warps per SM (batch 5-8 of
    // the default shape): a flushing head's fold, about 24 K instructions
    // on one warp, is what a step waits for when few sequences flush at
    // once (H200, bf16 batch 8: 17.1 -> 16.1 us per step in whole cycles,
    // 31.3 -> 24.8 with the sequences' cycles out of step).
    if (parts == 1 && fits(2) && bh * 2 <= 16 * static_cast<int64_t>(sms_)) parts = 2;
    return static_cast<int>(parts);
  }

  int64_t replay_warp_smem(const ssu_replay_params& rp, int parts,
                           ssu_cuda_replay_launch* L) const {
    const ssu_update_params& p = rp.u;
    if (replay_warp_ == 0) return -1;
    if (p.features & (SSU_F_DT_PER_CHANNEL | SSU_F_A_PER_CHANNEL)) return -1;
    const int sb = static_cast<int>(state_bytes(p.state_dtype));
    const int64_t chunks = p.dstate * sb / 16;
    if (chunks % 8 != 0 || chunks / 8 > 16 / (16 / sb)) return -1;
    // A block's warps are consecutive heads of one sequence; when they are
    // of one group too, the block stages the group's committed B entries
    // and computes the B . C dots once, in a region after the warps' slices.
    const bool share =
        replay_group_share_ && p.heads_per_group * parts % SSU_CUDA_REPLAY_WARPS == 0;
    const int64_t slice =
        align16(replay_smem(rp, static_cast<int>(p.dim / parts), L, false, !share));
    int64_t need = slice * SSU_CUDA_REPLAY_WARPS;
    L->group_share = share ? 1 : 0;
    if (share) {
      const int64_t ib = dtype_bytes(dtype_index(p.input_dtype));
      const int64_t T = p.ntokens, Lr = rp.ring_len;
      L->off_group_B = static_cast<int32_t>(std::min<int64_t>(need, INT32_MAX));
      need = align16(need + Lr * p.dstate * ib);
      L->off_group_dot = static_cast<int32_t>(std::min<int64_t>(need, INT32_MAX));
      need = align16(need + T * (Lr + T) * 4);
    }
    if (slice > INT32_MAX || need > max_smem_ || 2 * need > smem_per_sm_) return -1;
    // Flush steps' fold reads the committed B entries as f32 rows padded
    // by 16 bytes every 32 elements (kernels/ssu_replay.cu), where they fit.
    L->off_group_Bf = 0;
    if (share && replay_fold_f32_) {
      // L committed entries, then (f32 states) the call's T rows of B and
      // of C; append steps of several tokens put their C rows there too.
      const int64_t with =
          align16(need + (rp.ring_len + 2 * p.ntokens) * (p.dstate + p.dstate / 8) * 4);
      if (with <= max_smem_ && 2 * with <= smem_per_sm_) {
        L->off_group_Bf = static_cast<int32_t>(need);
        need = with;
      }
    }
    L->lanes_per_row = 8;
    L->warp_slice = static_cast<int32_t>(slice);
    // L2 prefetch distance: SSU_CUDA_REPLAY_PREFETCH, else 6 row steps for
    // f32 states and 4 (steps 2-3 only) for 16-bit ones, the faster of the
    // two for each (docs/cuda.md).
    L->prefetch_steps = replay_prefetch_ >= 0 ? replay_prefetch_ : (sb == 4 ? 6 : 4);
    return need;
  }

  // Fills the geometry and shared-memory offsets of a replay launch with
  // `rows` rows per block; returns the dynamic shared memory it needs.
  // (with_tile false: no checkpoint tile, for the warp-per-head kernels;
  // with_ring_B false: no committed B entries, which the block shares.)
  int64_t replay_smem(const ssu_replay_params& rp, int rows, ssu_cuda_replay_launch* L,
                      bool with_tile = true, bool with_ring_B = true) const {
    const ssu_update_params& p = rp.u;
    const int sb = static_cast<int>(state_bytes(p.state_dtype));
    const int chunks = static_cast<int>(p.dstate) * sb / 16;
    L->lanes_per_row = std::min(32, pow2_ceil(std::max(1, chunks)));
    L->rows_per_block = rows;
    L->tiles_per_head = static_cast<int32_t>((p.dim + rows - 1) / rows);
    const int64_t T = p.ntokens, Lr = rp.ring_len, E = Lr + T, N = p.dstate;
    const int64_t ib = dtype_bytes(dtype_index(p.input_dtype));
    const bool dt_pc = p.features & SSU_F_DT_PER_CHANNEL;
    int64_t o = 0;
    auto put_bytes = [&](int64_t bytes) {
      const int64_t at = o;
      o = align16(o + bytes);
      return static_cast<int32_t>(std::min<int64_t>(at, INT32_MAX));
    };
    auto put = [&](int64_t floats) { return put_bytes(floats * 4); };
    // The checkpoint tile first (per-head step size and A only).
    const bool closed_form = !dt_pc && !(p.features & SSU_F_A_PER_CHANNEL);
    L->off_tile = put_bytes(closed_form && with_tile ? int64_t(rows) * N * sb : 0);
    L->off_Br = put_bytes(with_ring_B ? Lr * N * ib : 0);
    L->off_Bt = put_bytes(T * N * ib);
    L->off_C = put_bytes(T * N * ib);
    L->off_xr = put_bytes(Lr * rows * ib);
    L->off_xt = put_bytes(T * rows * ib);
    L->off_z = put_bytes((p.features & SSU_F_HAS_Z) ? T * rows * ib : 0);
    L->off_delta = put(dt_pc ? Lr * rows : E);
    L->off_dA = put(E);
    L->off_dtt = put(dt_pc ? T * rows : T);
    L->off_D = put(rows);
    L->off_y = put(T * rows);
    L->off_coef = put(T * E + T);
    L->off_scale = put(is_scaled_state(p.state_dtype) ? rows : 0);
    return o;
  }

  // A plan's algorithm for an operation (`what`: "update", "Mamba-3 step")
  // whose pipelined kernels cannot take its form for reason `why_not` (null:
  // they can): auto takes the pipelined kernels where they can, the simple
  // ones elsewhere; a pinned algorithm is taken or refused with the reason.
  static ssu_algorithm_t choose_algorithm(ssu_algorithm_t requested, const char* why_not,
                                          const char* what) {
    switch (requested) {
      case SSU_ALGORITHM_AUTO:
        return why_not == nullptr ? SSU_ALGORITHM_CUDA_PIPELINED : SSU_ALGORITHM_CUDA_SIMPLE;
      case SSU_ALGORITHM_CUDA_SIMPLE: return SSU_ALGORITHM_CUDA_SIMPLE;
      case SSU_ALGORITHM_CUDA_PIPELINED:
        if (why_not)
          fail(SSU_ERROR_ALGORITHM_UNAVAILABLE, "algorithm cuda_pipelined cannot run this %s: %s; "
               "use cuda_simple or auto", what, why_not);
        return SSU_ALGORITHM_CUDA_PIPELINED;
      default:
        fail(SSU_ERROR_ALGORITHM_UNAVAILABLE, "algorithm %s cannot run the %s on the CUDA "
             "backend; use cuda_pipelined, cuda_simple or auto", algorithm_name(requested), what);
    }
  }

  // The single-token form the pipelined kernels run (kernels/ssu_pipelined.cu),
  // or why not.
  static const char* pipe_form(const ssu_update_params& p) {
    const uint32_t f = p.features;
    if (f & SSU_F_VARLEN) return "it takes no variable-length sequences";
    if (p.ntokens > 1 && (is_scaled_state(p.state_dtype) || (f & SSU_F_STOCHASTIC)))
      return "with several tokens it stores f32, f16 and bf16 states rounded to nearest";
    if (p.ntokens > kPipeMaxTokens || p.ntokens * p.dstate > kPipeMaxTokenStates)
      return "it takes at most 8 tokens and ntokens*dstate <= 512";
    if (f & (SSU_F_DST_PER_TOKEN | SSU_F_HAS_INTER | SSU_F_HAS_ACCEPTED))
      return "it has no per-token stores, intermediate states or accepted-token counts";
    if (f & SSU_F_A_PER_CHANNEL) {
      // The Mamba-1 layout: one token, dense f32 A rows, RN f32/f16/bf16 states.
      if (p.ntokens != 1 || is_scaled_state(p.state_dtype) || (f & SSU_F_STOCHASTIC) ||
          p.A_dtype != SSU_DTYPE_F32 || p.A_stride_n != 1 || p.A_stride_p != p.dstate)
        return "with per-channel A it takes one token, dense f32 A and f32, f16 or bf16 "
               "states rounded to nearest";
    } else if (p.dt_stride_p != 0 || ((f & SSU_F_HAS_DT_BIAS) && p.dt_bias_stride_p != 0) ||
               ((f & SSU_F_HAS_D) && p.D_stride_p != 0)) {
      return "with per-head A it takes per-head dt, dt_bias and D (the Mamba-2 layout)";
    }
    const int64_t sb = state_bytes(p.state_dtype);
    const int64_t chunks = p.dstate * sb / 16;
    if ((p.dstate * sb) % 16 != 0 || chunks > 32 || (chunks & (chunks - 1)) != 0)
      return "its state rows are 1, 2, 4, 8, 16 or 32 16-byte chunks";
    return nullptr;
  }
  // The call's own layout, which the plan does not fix: a 16-byte aligned
  // pool and, for per-channel A, dense rows (the dtype and rounding are the
  // plan's) 16-byte aligned, as the pipelined and direct kernels read them.
  static bool pipe_aligned(const ssu_update_params& p) {
    const int64_t sb = state_bytes(p.state_dtype);
    const bool a_ok = !(p.features & SSU_F_A_PER_CHANNEL) ||
                      (p.A_stride_n == 1 && p.A_stride_p == p.dstate && aligned16(p.A) &&
                       (p.A_stride_h * 4) % 16 == 0);
    return a_ok && aligned16(p.state) && (p.state_stride_slot * sb) % 16 == 0;
  }

  // Registers per thread -> resident blocks of SSU_CUDA_THREADS (registers
  // are allocated per warp in units of 256).
  int blocks_by_registers(CUfunction fn, int threads = SSU_CUDA_THREADS) const {
    int regs = 0;
    check(d_, d_.FuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "cuFuncGetAttribute");
    const int per_block = ((regs * 32 + 255) / 256) * 256 * (threads / 32);
    return std::max(1, std::min(16, 65536 / std::max(1, per_block)));
  }

  // n / d through a multiply (see ssu_cuda_fastdiv), for 1 <= d < 2^31.
  static ssu_cuda_fastdiv fastdiv(int64_t d) {
    uint32_t l = 0;
    while ((int64_t(1) << l) < d) ++l;
    const uint64_t m = ((uint64_t(1) << 32) * ((uint64_t(1) << l) - uint64_t(d))) / uint64_t(d) + 1;
    return ssu_cuda_fastdiv{static_cast<uint32_t>(m), l};
  }
  static int log2_exact(int64_t v) {
    int l = 0;
    while ((int64_t(1) << l) < v) ++l;
    return l;
  }

  // Fills the stage layout of `L` for tiles of `rows` rows; returns the
  // shared memory of a block (two stages).
  // The per-channel form with N = 16 (Mamba-1 as released) runs the `_pc16`
  // kernels: one lane per row, A read from global memory rather than staged.
  static bool pipe_row_per_lane(const ssu_update_params& p) {
    return (p.features & SSU_F_A_PER_CHANNEL) && p.dstate == 16;
  }

  // Whether the pipelined kernels may copy a call's operands as 16-byte
  // chunks (ssu_cuda_pipe_launch::off_raw) with tiles of `rows` rows: one
  // token and per-head A (pipe_issue_raw), rows of B, C, x and z that start
  // 16-byte aligned, N and the rows of every tile multiples of a chunk.
  static bool pipe_raw_ok(const ssu_update_params& p, int rows) {
    if (p.ntokens != 1 || (p.features & SSU_F_A_PER_CHANNEL)) return false;
    const int64_t eb = dtype_bytes(dtype_index(p.input_dtype)), vi = 16 / eb;
    return p.dstate % vi == 0 && rows % vi == 0 && p.dim % vi == 0 &&
           rows_aligned16(p.B, eb, {p.B_stride_b, p.B_stride_g}) &&
           rows_aligned16(p.C, eb, {p.C_stride_b, p.C_stride_g}) &&
           rows_aligned16(p.x, eb, {p.x_stride_b, p.x_stride_h}) &&
           (!(p.features & SSU_F_HAS_Z) || rows_aligned16(p.z, eb, {p.z_stride_b, p.z_stride_h}));
  }

  // Shared memory of a pipelined block besides its two stages: the 1 KiB the
  // driver reserves per block and the kernels' static bytes (the bulk-copy
  // barriers).
  static constexpr int64_t kPipeStaticSmem = 128;
  static constexpr int64_t kPipeBlockSmem = 1024 + kPipeStaticSmem;

  // Whether a pipelined call may take two heads per item (log2_heads_per_item
  // = 1): one token, per-head A, an 8-bit state (the pipe_rows16 loop; the
  // kernels of other formats have no pairs),
  // an even number of heads per group, x, z and out rows of adjacent heads
  // adjacent (the state and scale pools' rows always are), and both heads'
  // rows within the tile budget and the operand registers.
  bool pipe_pairs_ok(const ssu_update_params& p, int64_t tile_bytes, int64_t max_rows) const {
    if (!pipe_pairs_ || p.ntokens != 1 || (p.features & SSU_F_A_PER_CHANNEL)) return false;
    const int64_t sb = state_bytes(p.state_dtype), P = p.dim;
    return sb == 1 && p.heads_per_group % 2 == 0 && p.nheads % 2 == 0 && 2 * P <= max_rows &&
           2 * P * p.dstate * sb <= tile_bytes && p.x_stride_h == P && p.out_stride_h == P &&
           (!(p.features & SSU_F_HAS_Z) || p.z_stride_h == P);
  }

  static int64_t pipe_layout(const ssu_update_params& p, int rows, ssu_cuda_pipe_launch* L) {
    const int64_t N = p.dstate, sb = state_bytes(p.state_dtype), T = p.ntokens;
    L->row_stride = pow2_ceil(rows);
    L->log2_row_stride = log2_exact(L->row_stride);
    int64_t o = align16(rows * N * sb);
    auto put = [&](int64_t bytes) {
      const int64_t at = o;
      o = align16(o + bytes);
      return static_cast<int32_t>(at);
    };
    const bool pc = p.features & SSU_F_A_PER_CHANNEL;
    // One token with per-head A and a 16- or 8-bit state: B and C with 4
    // floats of padding after every lane's 16 / sb columns, against bank
    // conflicts (kPipePadBC in kernels/ssu_pipelined.cu).
    const bool pad_bc = sb <= 2 && T == 1 && !pc;
    const int64_t bc_floats = T * N + (pad_bc ? N / (16 / sb) * 4 : 0);
    L->off_B = put(bc_floats * 4);
    L->off_C = put(bc_floats * 4);
    L->off_x = put(T * L->row_stride * 4);
    L->off_z = put((p.features & SSU_F_HAS_Z) ? T * L->row_stride * 4 : 0);
    L->off_scale = put(is_scaled_state(p.state_dtype) ? int64_t(rows) * 4 : 0);
    L->off_scal = put((2 * T + 1) * 4 << L->log2_heads_per_item);
    L->off_A = put(pc && !pipe_row_per_lane(p) ? rows * N * 4 : 0);
    L->off_dt_rows = put(pc ? int64_t(rows) * 4 : 0);
    L->off_D_rows = put(pc ? int64_t(rows) * 4 : 0);
    // Partial row sums (kernels/ssu_pipelined.cu) take the rows' own state
    // bytes up to 4 tokens, a region of their own beyond.
    const int64_t lpr = N * sb / 16;
    L->off_part = T > 4 ? put(rows * T * lpr * 4) : 0;
    // B, C and x adjacent (the raw chunks are staged as one run): one token
    // and N a multiple of 4, which pipe_raw_ok implies.
    L->off_raw = 0;
    if (pipe_raw_ok(p, rows) && L->off_C == L->off_B + 4 * bc_floats &&
        L->off_x == L->off_C + 4 * bc_floats) {
      const int64_t eb = dtype_bytes(dtype_index(p.input_dtype));
      L->off_raw = put(2 * (N + rows) * eb);
    }
    L->stage_bytes = static_cast<int32_t>(o);
    return 2 * o;
  }

  // Launches the direct kernel (kernels/ssu_direct.cu) for a call of its
  // form; returns false, launching nothing, for any other. Called for
  // pipelined plans only, whose form (pipe_form: no varlen, per-token or
  // intermediate stores, per-head dt / dt_bias / D without per-channel A,
  // rows of a power of two <= 32 chunks) and pool alignment (pipe_aligned)
  // are checked; the direct kernels take its single-token calls: per-head A
  // with any state format (f16 / bf16 / e4m3 rounded either way), or the
  // Mamba-1 form with per-channel A and f32 / f16 / bf16 states (the _pc
  // kernels, rounded to nearest; H100, batch 1 of ssu-bench --mamba1: 6.2 us
  // per call on the simple kernels before).
  // The direct kernel of a state / input dtype, rounding and layout; null
  // where there is none.
  CUfunction direct_kernel(int si, int ii, int sr, bool pc) const {
    if (pc) return si <= 2 ? direct_pc_fn_[si][ii] : nullptr;
    return direct_fn_[si][ii][sr];
  }

  bool execute_direct(const ssu_update_params& p, int si, int ii, int sr,
                      ssu_stream_t stream) const {
    if (p.ntokens != 1) return false;
    // Per-channel A: the Mamba-1 form (pipe_form, pipe_aligned), in the _pc
    // kernels (f32, f16 and bf16 states).
    const CUfunction fn = direct_kernel(si, ii, sr, p.features & SSU_F_A_PER_CHANNEL);
    if (!fn) return false;  // stochastic rounding of an f32 state: none (the plan refuses it)
    const int64_t chunks = p.dstate * dtype_bytes(si) / 16;
    ssu_cuda_direct_launch L;
    std::memset(&L, 0, sizeof L);
    std::memcpy(&L.p, &p, sizeof p);
    L.log2_chunks_per_row = log2_exact(chunks);
    // Chunks per lane: the most (fewest, longest-lived warps) that still
    // gives the call kDirectWarpsPerSm warps per SM; one where even one chunk
    // per lane does not. H100, batch 1 at the default shape: f32 7.4 / 9.6 /
    // 8.4 us with 4 / 2 / 8 chunks (2048 / 4096 / 1024 warps); bf16 5.7 / 6.0
    // with 2 / 4 chunks (2048 / 1024 warps).
    auto warps_for = [&](int cpl) {
      const int64_t rows = std::max<int64_t>(1, int64_t(cpl) * 32 / chunks);
      return (p.dim + rows - 1) / rows;  // per head
    };
    int cpl = direct_chunks_per_lane_;
    if (cpl == 0) {
      cpl = 1;
      for (int c = 2; c <= SSU_CUDA_DIRECT_K; c *= 2)
        if (p.batch * p.nheads * warps_for(c) >= int64_t(kDirectWarpsPerSm) * sms_) cpl = c;
    }
    // No more rows per warp than the head has.
    while (cpl > 1 && warps_for(cpl / 2) == 1) cpl /= 2;
    L.chunks_per_lane = cpl;
    L.warps_per_head = static_cast<int32_t>(warps_for(cpl));
    const int64_t warps = p.batch * p.nheads * L.warps_per_head;
    if (warps > INT32_MAX / SSU_CUDA_THREADS) return false;  // thread ids stay 32-bit
    L.warps = static_cast<int32_t>(warps);
    L.div_warps_per_head = fastdiv(L.warps_per_head);
    L.div_heads = fastdiv(p.nheads);
    L.div_heads_per_group = fastdiv(p.heads_per_group);
    const int eb = dtype_bytes(ii);
    L.ops_vec = rows_aligned16(p.B, eb, {p.B_stride_b, p.B_stride_g}) &&
                rows_aligned16(p.C, eb, {p.C_stride_b, p.C_stride_g});
    const int64_t blocks = (warps + SSU_CUDA_THREADS / 32 - 1) / (SSU_CUDA_THREADS / 32);
    void* args[] = {&L};
    launch(fn, static_cast<unsigned>(blocks), SSU_CUDA_THREADS, 0, stream, args, pdl(p));
    return true;
  }

  // Launches the Mamba-1 kernel (kernels/ssu_mamba1.cu) for a pipelined
  // plan's call of its form (pipe_form and pipe_aligned hold: one token,
  // dense f32 A rows, RN f32 / f16 / bf16 states) with N = 16; returns
  // false, launching nothing, otherwise, or where the call has fewer than
  // two (row tile, sequence) pairs per SM (the direct kernels take those).
  // A block takes `seqs` sequences of its row tile: as many as make the
  // call one wave of resident blocks (H200, ssu-bench --mamba1, f32 state:
  // batch 64 best at 4 per block, 256 at 16, each about one wave).
  static int64_t m1_ring_bytes(int si) {
    return int64_t(kM1Threads / 32) * SSU_CUDA_M1_DEPTH * 512 * dtype_bytes(si);
  }
  bool execute_m1(const ssu_update_params& p, int si, int ii, int sr,
                  ssu_stream_t stream) const {
    if (m1_mode_ == 0 || p.ntokens != 1 || sr || si > 2 ||
        !(p.features & SSU_F_A_PER_CHANNEL) || p.dstate != 16)
      return false;
    const CUfunction fn = m1_fn_[si][ii];
    if (!fn) return false;
    ssu_cuda_m1_launch L;
    std::memset(&L, 0, sizeof L);
    std::memcpy(&L.p, &p, sizeof p);
    const int64_t tiles_per_head = (p.dim + kM1Threads - 1) / kM1Threads;
    const int64_t tiles = p.nheads * tiles_per_head;
    const int64_t pairs = tiles * p.batch;
    const int64_t wave = m1_resident_[si][ii] * sms_;
    if (m1_mode_ != 1 && pairs < 2 * int64_t(sms_)) return false;
    int64_t seqs = m1_seqs_ > 0 ? m1_seqs_ : (pairs + wave - 1) / wave;
    seqs = std::max<int64_t>(1, std::min<int64_t>({seqs, kM1MaxSeqs, p.batch}));
    const int64_t blocks = tiles * ((p.batch + seqs - 1) / seqs);
    if (tiles > INT32_MAX || blocks > INT32_MAX) return false;
    L.tiles = static_cast<int32_t>(tiles);
    L.tiles_per_head = static_cast<int32_t>(tiles_per_head);
    L.seqs = static_cast<int32_t>(seqs);
    const unsigned smem = static_cast<unsigned>(m1_ring_bytes(si));
    void* args[] = {&L};
    launch(fn, static_cast<unsigned>(blocks), kM1Threads, smem, stream, args, pdl(p));
    return true;
  }

  // Launches the pipelined kernel; returns false (launching nothing) for a
  // call too small to give every resident block a whole tile, where the
  // simple kernels' one-wave dim tiling is faster (H100: batch 1 at the
  // default shape, 12.0 against 9.4 us with f32 states).
  bool execute_pipelined(const ssu_update_params& p, int si, int ii, int sr,
                         ssu_stream_t stream) const {
    ssu_cuda_pipe_launch L;
    std::memset(&L, 0, sizeof L);
    std::memcpy(&L.p, &p, sizeof p);
    const int N = static_cast<int>(p.dstate), P = static_cast<int>(p.dim);
    const int sb = dtype_bytes(si);
    L.lanes_per_row = N * sb / 16;
    const int groups = SSU_CUDA_THREADS / L.lanes_per_row;
    const int64_t bh = p.batch * p.nheads;
    // Tiles of pipe_tile_bytes_ (at most 256 rows), halved while the items
    // would not give every resident block two of them (small batches).
    // Operand registers: 2*T*R values (R: rows rounded up to a power of
    // two) over the block's threads, 4 per thread with one token, 8 with
    // several. max_rows is the largest power of two allowed.
    const bool mt = p.ntokens > 1, pc = p.features & SSU_F_A_PER_CHANNEL;
    int64_t max_rows = 1;
    while (2 * p.ntokens * (max_rows * 2) <= (mt ? 8 : 4) * SSU_CUDA_THREADS) max_rows *= 2;
    if (max_rows < groups) return false;
    const bool pc16 = pipe_row_per_lane(p);
    const CUfunction fn = pc16 ? pipe_pc16_fn_[si][ii]
                          : pc ? pipe_pc_fn_[si][ii]
                          : mt ? pipe_mt_fn_[si][ii]
                               : pipe_fn_[si][ii][sr];
    const int by_regs = pc16 ? pipe_pc16_regs_blocks_[si][ii]
                        : pc ? pipe_pc_regs_blocks_[si][ii]
                        : mt ? pipe_mt_regs_blocks_[si][ii]
                             : pipe_regs_blocks_[si][ii][sr];
    if (!fn) fail(SSU_ERROR_INTERNAL, "no pipelined CUDA kernel for this state dtype");
    // The per-channel A tile (f32 rows) shares the tile budget with the
    // state. The N = 16 kernels read A from global memory instead and take
    // half the budget (H100, f32 state: 0.90 / 0.94 of the copy at batch
    // 256 / 512 with 8 KiB tiles, 0.85 / 0.91 with 16 KiB).
    const int64_t tile_bytes = pc16 ? pipe_tile_bytes_ / 2
                               : pc ? pipe_tile_bytes_ * sb / (sb + 4)
                                    : pipe_tile_bytes_;
    // The _pc16 kernels hold the per-channel operands of one f32 row per
    // thread (two 16-bit rows), so their f32 tiles stop at 128 rows.
    if (pc16 && sb == 4) max_rows = std::min<int64_t>(max_rows, SSU_CUDA_THREADS);
    int rows = static_cast<int>(std::min<int64_t>(
        {int64_t(P), max_rows, std::max<int64_t>(groups, tile_bytes / (int64_t(N) * sb))}));
    int64_t resident = std::max<int64_t>(
        1, std::min<int64_t>(by_regs, smem_per_sm_ / (pipe_layout(p, rows, &L) + kPipeBlockSmem)));
    // Fewer items than resident blocks: the direct kernels (or the simple
    // ones) take the call. With 8-bit rows, and in the Mamba-1 form with N =
    // 16 and an f32 state, the direct kernels stay faster up to two items per
    // resident block (H100: i8 / e4m3 at batch 8 of the default shape 17.1 /
    // 19.7 us against 21.4 / 22.2 us here, batch 16 30.6 / 35.3 against 33.0
    // / 34.0; Mamba-1 f32 at batch 32 15.3 against 16.3 us, batch 64 27.0
    // against 22.7). Not with a 16-bit Mamba-1 state: at batch 64 the direct
    // kernels take 25.5 us, these 17.9.
    const bool direct_longer = sb == 1 || (pc16 && sb == 4);
    const int64_t min_items_per_block =
        direct_longer && direct_mode_ != 0 && direct_kernel(si, ii, sr, pc) ? 2 : 1;
    if (!pinned_pipe_small_ && bh * ((P + rows - 1) / rows) < min_items_per_block * resident * sms_)
      return false;
    for (;;) {
      const int64_t smem = pipe_layout(p, rows, &L);
      resident =
          std::max<int64_t>(1, std::min<int64_t>(by_regs, smem_per_sm_ / (smem + kPipeBlockSmem)));
      const int64_t items = bh * ((P + rows - 1) / rows);
      if (rows <= groups || items >= 2 * resident * sms_) break;
      rows = std::max(groups, rows / 2);
    }
    // Head pairs: where a whole head is a tile of less than half the tile
    // budget (8-bit rows of N = 128), an item takes two adjacent heads, so
    // that an item's fixed work (its indices, copies, barriers, scalars and
    // row sums: about 650 instructions per warp against 4 x 275 for an int8
    // head's rows) is paid once for both. Only while the call still gives
    // every block two items.
    L.log2_heads_per_item = 0;
    if (rows == P && pipe_pairs_ok(p, tile_bytes, max_rows)) {
      ssu_cuda_pipe_launch L2 = L;
      L2.log2_heads_per_item = 1;
      const int64_t smem2 = pipe_layout(p, 2 * P, &L2);
      const int64_t resident2 =
          std::max<int64_t>(1, std::min<int64_t>(by_regs, smem_per_sm_ / (smem2 + kPipeBlockSmem)));
      if (smem2 + kPipeStaticSmem <= max_smem_ &&
          bh / 2 >= 2 * std::min<int64_t>(resident2 * sms_, pipe_max_blocks_)) {
        L.log2_heads_per_item = 1;
        rows = 2 * P;
        resident = resident2;
      }
    }
    const int64_t smem = pipe_layout(p, rows, &L);
    if (smem + kPipeStaticSmem > max_smem_)
      fail(SSU_ERROR_NOT_SUPPORTED, "dstate=%d needs %lld bytes of shared memory per block, more "
           "than this device's %d", N, static_cast<long long>(smem + kPipeStaticSmem), max_smem_);
    L.rows_per_tile = rows;
    // (With head pairs: one tile per pair, counted in pairs.)
    const int64_t units = p.nheads >> L.log2_heads_per_item;  // items' heads per sequence
    L.tiles_per_head = ((P << L.log2_heads_per_item) + rows - 1) / rows;
    L.items = p.batch * units * L.tiles_per_head;
    L.div_tiles = fastdiv(L.tiles_per_head);
    L.div_heads = fastdiv(units);
    L.div_heads_per_group = fastdiv(p.heads_per_group);
    L.div_items_per_seq = fastdiv(units * L.tiles_per_head);
    L.log2_dstate = log2_exact(N);
    if (L.items > INT32_MAX || p.nheads * L.tiles_per_head > INT32_MAX)
      fail(SSU_ERROR_NOT_SUPPORTED, "batch*nheads=%lld is too large for one CUDA launch",
           static_cast<long long>(bh));
    const int64_t grid = std::min<int64_t>({L.items, resident * sms_, pipe_max_blocks_});
    void* args[] = {&L};
    // Programmatic dependent launch only while a block has fewer than two
    // items: a persistent grid started early beside the previous kernel's
    // blocks keeps some of its blocks waiting for a place, and with many
    // items each that measured slower (H100, behind a producer that let it
    // start: batch 8 0.5 us faster, batch 64 1.9 us and batch 256 15 us
    // slower, f32 state).
    launch(fn, static_cast<unsigned>(grid), SSU_CUDA_THREADS,
           static_cast<unsigned>(smem), stream, args, pdl(p) && L.items < 2 * grid);
    return true;
  }

  // Mamba-3 step kernels (kernels/ssu_mamba3.cu): per state dtype, B/C in
  // registers for R = 1, 2, 4, or read from shared memory for any R.
  static constexpr int kM3Variants = 4;
  static constexpr const char* kM3VariantNames[kM3Variants] = {"r1", "r2", "r4", "rn"};
  static constexpr int kM3Threads = 128;  // M3_THREADS

  // Shared memory of one step block: B, prev_B, C [R][N] and four [R][P]
  // per-row tables (fp32), plus a few partial sums.
  static int64_t m3_smem_bytes(const ssu_mamba3_params& p) {
    return ((3 * p.rank * p.dstate + 4 * p.rank * p.dim + 8 + 3) & ~int64_t(3)) * 4;
  }
  static int64_t m3_state_tile_bytes(const ssu_mamba3_params& p) {
    return p.dim * p.dstate * (p.state_dtype == SSU_DTYPE_F32 ? 4 : 2);
  }
  static constexpr int64_t kM3MaxStagedTile = 64 * 1024;

  // The pipelined Mamba-3 step (kernels/ssu_mamba3_pipe.cu): null when it
  // can take the problem's shape, else why not. Pool alignment is checked
  // per call (execute_mamba3_pipelined).
  static constexpr int kM3pRanks = 4;      // R = 1, 2, 4, 8
  static constexpr int kM3pThreads = 160;  // M3P_THREADS: four consumer warps, one producer
  static const char* m3p_form(const ssu_mamba3_params& p) {
    if (p.dstate > 128) return "dstate above 128 (a row must fit one warp)";
    if (p.dim * p.dstate > INT32_MAX) return "dim*dstate above 2^31-1";
    return nullptr;
  }

  // Fills the stage layout of `L` for chunks of `rows` rows; returns the
  // shared memory of a block (two stages).
  static int64_t m3p_layout(const ssu_mamba3_params& p, int rows, ssu_cuda_m3_pipe_launch* L) {
    const int64_t N = p.dstate, R = p.rank, sb = p.state_dtype == SSU_DTYPE_F32 ? 4 : 2;
    int64_t o = 64;  // the stage header
    auto put = [&](int64_t bytes) {
      const int64_t at = o;
      o = align16(o + bytes);
      return static_cast<int32_t>(at);
    };
    L->off_tile = put(rows * N * sb);
    L->off_B = put(R * N * 4);
    L->off_Bp = put(R * N * 4);
    L->off_C = put(R * N * 4);
    L->off_xg = put(rows * R * 4);
    L->off_xb = put(rows * R * 4);
    L->off_w = put(rows * R * 4);
    L->off_e = put(rows * R * 4);
    L->stage_bytes = static_cast<int32_t>(o);
    return 2 * o;
  }

  // Launches the pipelined step; returns false (launching nothing) for a
  // call the simple kernel takes instead: a state pool that is not 16-byte
  // aligned, or fewer (sequence, head) items than one wave of resident
  // blocks (unless SSU_CUDA_PIPE_MAX_BLOCKS is set, for tests).
  bool execute_mamba3_pipelined(const ssu_mamba3_params& p, int si, ssu_stream_t stream) const {
    const int64_t sb = p.state_dtype == SSU_DTYPE_F32 ? 4 : 2;
    if (!aligned16(p.state) || (p.state_stride_slot * sb) % 16 != 0) return false;
    const int v = p.rank == 1 ? 0 : p.rank == 2 ? 1 : p.rank == 4 ? 2 : 3;
    ssu_cuda_m3_pipe_launch L;
    std::memset(&L, 0, sizeof L);
    std::memcpy(&L.p, &p, sizeof p);
    const int64_t N = p.dstate, P = p.dim;
    // Chunks of pipe_tile_bytes_ of state, at least one row per lane group
    // of the four consumer warps.
    const int64_t rows_per_pass = 128 / (N / 4);
    int64_t rows = std::min<int64_t>(P, std::max(rows_per_pass, pipe_tile_bytes_ / (N * sb)));
    const int64_t smem = m3p_layout(p, static_cast<int>(rows), &L);
    if (smem > max_smem_) return false;
    const int64_t resident = std::max<int64_t>(
        1, std::min<int64_t>(m3p_regs_blocks_[si][v], smem_per_sm_ / (smem + 1024)));
    const int64_t items = p.batch * p.nheads;
    if (items > INT32_MAX || p.nheads > INT32_MAX) return false;
    if (!pinned_pipe_small_ && items < resident * sms_) return false;
    L.items = items;
    L.chunk_rows = static_cast<int32_t>(rows);
    L.chunks_per_head = static_cast<int32_t>((P + rows - 1) / rows);
    const int eb = p.input_dtype == SSU_DTYPE_F32 ? 4 : 2;
    L.ops_vec = rows_aligned16(p.B, eb, {p.B_stride_b, p.B_stride_r, p.B_stride_h}) &&
                rows_aligned16(p.C, eb, {p.C_stride_b, p.C_stride_r, p.C_stride_h}) &&
                rows_aligned16(p.prev_B, eb,
                               {p.prev_B_stride_slot, p.prev_B_stride_r, p.prev_B_stride_h});
    const int64_t grid = std::min<int64_t>({items, resident * sms_, pipe_max_blocks_});
    void* args[] = {&L};
    launch(m3p_fn_[si][v], static_cast<unsigned>(grid), kM3pThreads, static_cast<unsigned>(smem),
           stream, args);
    return true;
  }

  static ssu_algorithm_t simple_algorithm(ssu_algorithm_t requested) {
    if (requested == SSU_ALGORITHM_AUTO || requested == SSU_ALGORITHM_CUDA_SIMPLE)
      return SSU_ALGORITHM_CUDA_SIMPLE;
    fail(SSU_ERROR_ALGORITHM_UNAVAILABLE, "algorithm %s cannot run this operation on the CUDA "
         "backend; use cuda_simple or auto", algorithm_name(requested));
  }

  // Launches `fn` on `stream` with the library's context current (pushed
  // only when the caller's current context differs).
  // Whether a call's kernels launch with programmatic dependent launch: its
  // plan asked (SSU_PLAN_PDL) and the device has it (sm_90; the kernels wait
  // on the previous grid first, kernels/ssu_update.cu pdl_wait).
  bool pdl(const ssu_update_params& p) const {
    return (p.features & SSU_F_LAUNCH_PDL) && cc_ >= 90 && d_.LaunchKernelEx;
  }

  void launch(CUfunction fn, unsigned blocks, unsigned threads, unsigned smem,
              ssu_stream_t stream, void** args, bool programmatic = false) const {
    const CUstream s = reinterpret_cast<CUstream>(stream);
    CUcontext cur = nullptr;
    const bool push = d_.CtxGetCurrent(&cur) != CUDA_SUCCESS || cur != ctx_;
    if (push) check(d_, d_.CtxPushCurrent(ctx_), "cuCtxPushCurrent");
    CUresult r;
    if (programmatic) {
      CUlaunchAttribute attr;
      std::memset(&attr, 0, sizeof attr);
      attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig cfg;
      std::memset(&cfg, 0, sizeof cfg);
      cfg.gridDimX = blocks;
      cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = threads;
      cfg.blockDimY = cfg.blockDimZ = 1;
      cfg.sharedMemBytes = smem;
      cfg.hStream = s;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      r = d_.LaunchKernelEx(&cfg, fn, args, nullptr);
    } else {
      r = d_.LaunchKernel(fn, blocks, 1, 1, threads, 1, 1, smem, s, args, nullptr);
    }
    if (push) {
      CUcontext popped = nullptr;
      d_.CtxPopCurrent(&popped);
    }
    check(d_, r, "cuLaunchKernel");
  }

  // load_function, then: every block may use the device's whole opt-in
  // shared memory, and shared memory is preferred over L1 (the update
  // kernels stream their tiles through it).
  // (Less its static shared memory, which counts against the same limit.)
  CUfunction load_streaming_kernel(const char* kname) {
    const CUfunction fn = load_function(kname);
    int static_smem = 0;
    check(d_, d_.FuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
          "cuFuncGetAttribute");
    check(d_, d_.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  max_smem_ - static_smem),
          "cuFuncSetAttribute");
    check(d_, d_.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                  CU_SHAREDMEM_CARVEOUT_MAX_SHARED),
          "cuFuncSetAttribute");
    return fn;
  }

  // Resolves and loads one kernel of the library (now, not lazily at a
  // first launch that might be under stream capture).
  CUfunction load_function(const char* kname) {
    CUkernel k = nullptr;
    const CUresult rk = d_.LibraryGetKernel(&k, lib_, kname);
    if (rk != CUDA_SUCCESS)
      fail(SSU_ERROR_INTERNAL, "%s",
           ssu_cuda::describe(d_, (std::string("cuLibraryGetKernel(") + kname + ")").c_str(), rk)
               .c_str());
    CUfunction fn = nullptr;
    check(d_, d_.KernelGetFunction(&fn, k), "cuKernelGetFunction");
    if (d_.FuncLoad) check(d_, d_.FuncLoad(fn), "cuFuncLoad");
    return fn;
  }
  // Makes a context current for a scope, restoring the caller's afterwards.
  struct ContextGuard {
    ContextGuard(const Driver& d, CUcontext c) : d(d) {
      check(d, d.CtxPushCurrent(c), "cuCtxPushCurrent");
    }
    ~ContextGuard() {
      CUcontext popped = nullptr;
      d.CtxPopCurrent(&popped);
    }
    const Driver& d;
  };

  void release() {
    if (lib_) {
      d_.LibraryUnload(lib_);
      lib_ = nullptr;
    }
    if (ctx_) {
      d_.DevicePrimaryCtxRelease(dev_);
      ctx_ = nullptr;
    }
  }

  const Driver& d_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUlibrary lib_ = nullptr;
  int cc_ = 0;
  int sms_ = 1;
  int max_smem_ = 48 * 1024;
  int smem_per_sm_ = 100 * 1024;
  int regs_blocks_[kUpdateStateDtypes][3][kNumVariants][2] = {};
  std::string name_;
  CUfunction fn_[kUpdateStateDtypes][3][kNumVariants][2] = {};
  CUfunction pipe_fn_[kUpdateStateDtypes][3][2] = {};
  int pipe_regs_blocks_[kUpdateStateDtypes][3][2] = {};
  CUfunction pipe_mt_fn_[3][3] = {};
  int pipe_mt_regs_blocks_[3][3] = {};
  CUfunction pipe_pc_fn_[3][3] = {};
  int pipe_pc_regs_blocks_[3][3] = {};
  CUfunction pipe_pc16_fn_[3][3] = {};
  int pipe_pc16_regs_blocks_[3][3] = {};
  static constexpr int64_t kPipeMaxTokens = 8;
  static constexpr int64_t kPipeMaxTokenStates = 512;  // ntokens*dstate: 8 operands per thread
  // Tuning and test knobs (environment, read at context creation):
  // SSU_CUDA_PIPE_TILE (state bytes per tile) and SSU_CUDA_PIPE_MAX_BLOCKS
  // (a cap on the grid, so that every block walks several items).
  int64_t pipe_tile_bytes_ = 16384;
  int64_t pipe_max_blocks_ = INT32_MAX;
  bool pinned_pipe_small_ = false;
  bool pipe_pairs_ = true;  // SSU_CUDA_PIPE_PAIRS
  // SSU_CUDA_DIRECT: unset (-1) = the direct kernels take the pipelined
  // plan's calls that are too small for the pipelined grid; 0 = never; 1 =
  // every call of their form.
  CUfunction direct_fn_[kUpdateStateDtypes][3][2] = {};
  CUfunction direct_pc_fn_[3][3] = {};  // the Mamba-1 form (per-channel A)
  int direct_mode_ = -1;
  // SSU_CUDA_M1: unset (-1) = the Mamba-1 kernels take the pipelined plan's
  // N = 16 per-channel calls that fill the GPU; 0 = never; 1 = every such
  // call. SSU_CUDA_M1_SEQS: sequences per block (unset, 0: by call).
  CUfunction m1_fn_[3][3] = {};
  int m1_mode_ = -1;
  int m1_seqs_ = 0;
  static constexpr int kM1Threads = SSU_CUDA_M1_THREADS;
  static constexpr int kM1MaxSeqs = SSU_CUDA_M1_MAX_SEQS;
  int64_t m1_resident_[3][3] = {};  // resident blocks per SM
  // SSU_CUDA_DIRECT_K: 16-byte chunks per lane (unset, 0: chosen per call).
  int direct_chunks_per_lane_ = 0;
  // About the warps per SM below which longer warps measured slower.
  static constexpr int kDirectWarpsPerSm = 15;
  CUfunction advance_seed_fn_ = nullptr;
  CUfunction replay_fn_[kUpdateStateDtypes][3] = {};
  CUfunction replay_warp_fn_[kUpdateStateDtypes][3] = {};
  CUfunction replay_warp1_fn_[kUpdateStateDtypes][3] = {};  // f16, bf16 inputs only
  int replay_max_rows_ = 0;
  int replay_prefetch_ = -1;  // SSU_CUDA_REPLAY_PREFETCH; -1: by state dtype
  bool replay_group_share_ = true;  // SSU_CUDA_REPLAY_GROUP_SHARE
  bool replay_early_entries_ = true;  // SSU_CUDA_REPLAY_EARLY_ENTRIES
  bool replay_fold_f32_ = true;  // SSU_CUDA_REPLAY_FOLD_F32
  int replay_warp_ = -1;  // SSU_CUDA_REPLAY_WARP: 0 never, 1 always, -1 by batch
  int replay_warp_parts_ = 0;  // SSU_CUDA_REPLAY_WARP_PARTS; 0: by batch
  CUfunction m3_fn_[3][kM3Variants] = {};
  CUfunction m3p_fn_[3][kM3pRanks] = {};
  int m3p_regs_blocks_[3][kM3pRanks] = {};
  CUfunction rotary_fn_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_ordinal) {
  return std::make_unique<CudaBackend>(device_ordinal);
}

}  // namespace ssu
