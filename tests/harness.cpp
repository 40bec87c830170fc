// Test harness for the selective state update; see harness.h.
#include "harness.h"
#include "rng.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>

namespace ssutest {

// ---------------------------------------------------------------------------
// HostMemory
// ---------------------------------------------------------------------------
void* HostMemory::alloc(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  return p;
}
void HostMemory::free(void* ptr) { std::free(ptr); }
void HostMemory::upload(void* dst, const void* src_host, size_t bytes) {
  if (bytes) std::memcpy(dst, src_host, bytes);
}
void HostMemory::download(void* dst_host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst_host, src, bytes);
}

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------
namespace {


size_t elem_size(ssu_dtype_t d) {
  switch (d) {
    case SSU_DTYPE_F32: case SSU_DTYPE_I32: return 4;
    case SSU_DTYPE_F16: case SSU_DTYPE_BF16: case SSU_DTYPE_I16: return 2;
    case SSU_DTYPE_I64: return 8;
    case SSU_DTYPE_I8: case SSU_DTYPE_F8E4M3: return 1;
    default: return 0;
  }
}

const char* dname(ssu_dtype_t d) {
  switch (d) {
    case SSU_DTYPE_F32: return "f32";
    case SSU_DTYPE_F16: return "f16";
    case SSU_DTYPE_BF16: return "bf16";
    case SSU_DTYPE_I16: return "i16";
    case SSU_DTYPE_I8: return "i8";
    case SSU_DTYPE_F8E4M3: return "f8e4m3";
    case SSU_DTYPE_I32: return "i32";
    case SSU_DTYPE_I64: return "i64";
    default: return "none";
  }
}

// Fills n elements with the poison of the dtype: a quiet NaN for floats
// (visible if read as data), a large out-of-range value for indices.
void poison(uint8_t* base, ssu_dtype_t d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (d) {
      case SSU_DTYPE_F32: {
        const uint32_t v = 0x7fc00000u | uint32_t(i & 0xffff);  // NaN payloads vary
        std::memcpy(base + 4 * i, &v, 4);
        break;
      }
      case SSU_DTYPE_F16: {
        const uint16_t v = uint16_t(0x7e00u | (i & 0xff));
        std::memcpy(base + 2 * i, &v, 2);
        break;
      }
      case SSU_DTYPE_BF16: {
        const uint16_t v = uint16_t(0x7fc0u | (i & 0x3f));
        std::memcpy(base + 2 * i, &v, 2);
        break;
      }
      case SSU_DTYPE_I32: {
        const int32_t v = 0x3ead0000 + int32_t(i & 0xffff);
        std::memcpy(base + 4 * i, &v, 4);
        break;
      }
      case SSU_DTYPE_I64: {
        const int64_t v = 0x3ead00000000ll + i;
        std::memcpy(base + 8 * i, &v, 8);
        break;
      }
      default: std::memset(base + elem_size(d) * i, 0xa5, elem_size(d));
    }
  }
}

// Calls fn(idx) for every multi-index of `shape` in row-major order.
template <typename Fn>
void for_each_index(int ndim, const int64_t* shape, Fn fn) {
  for (int k = 0; k < ndim; ++k)
    if (shape[k] <= 0) return;
  int64_t idx[SSU_MAX_DIMS] = {0};
  for (;;) {
    fn(static_cast<const int64_t*>(idx));
    int k = ndim - 1;
    while (k >= 0) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
      --k;
    }
    if (k < 0) return;
  }
}

struct Tol {
  double rtol, atol;
};
Tol out_tol(ssu_dtype_t d) { return d == SSU_DTYPE_F32 ? Tol{1e-4, 1e-4} : Tol{1e-2, 1e-3}; }
Tol state_tol(ssu_dtype_t d) { return d == SSU_DTYPE_F32 ? Tol{1e-4, 1e-4} : Tol{1e-2, 1e-2}; }

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

// ---------------------------------------------------------------------------
// describe
// ---------------------------------------------------------------------------
std::string describe(const UpdateCase& c) {
  std::ostringstream o;
  o << (c.tag && *c.tag ? c.tag : "case") << ": ";
  o << (c.form == Form::Single ? "single" : c.form == Form::Multi ? "multi" : "varlen");
  if (c.form != Form::Single) o << " T=" << c.T;
  o << " store="
    << (c.store == Store::Final ? "final"
                                : c.store == Store::DstPerToken ? "dst_per_token" : "intermediate");
  o << " state=" << dname(c.state) << " input=" << dname(c.input) << " dt=" << dname(c.dt)
    << " A=" << dname(c.A) << " D=" << (c.has_D ? dname(c.D) : "absent")
    << " dt_bias=" << (c.has_dt_bias ? dname(c.dt_bias) : "absent")
    << " index=" << dname(c.index);
  o << " H=" << c.H << " G=" << c.G << " P=" << c.P << " N=" << c.N << " Bt=" << c.batch;
  if (c.A_per_channel) o << " A_per_channel";
  if (c.dt_per_channel) o << " dt_per_channel";
  if (c.D_per_channel) o << " D_per_channel";
  if (c.dt_bias_per_channel) o << " dt_bias_per_channel";
  o << (c.has_z ? " z" : " no_z") << (c.softplus ? " softplus" : " no_softplus");
  if (c.disable_update) o << " disable_state_update";
  if (!c.has_src || c.index == SSU_DTYPE_INVALID) o << " no_src";
  if (c.src_2d) o << " src_2d";
  if (c.has_dst) o << " dst";
  if (c.dst_is_src) o << " dst_is_src";
  if (c.num_accepted) o << " num_accepted";
  if (c.inter_index) o << " intermediate_index";
  if (c.shared_src) o << " shared_src";
  static const char* pads[] = {"none", "negative", "pad_slot_id", "pad_slot_id_in_range"};
  o << " pad=" << pads[int(c.pad)];
  o << " layout=";
  if (c.layout == kDense) o << "dense";
  if (c.layout & kPadded) o << "padded,";
  if (c.layout & kOddPadded) o << "odd,";
  if (c.layout & kBroadcast) o << "broadcast,";
  if (c.layout & kTransposed) o << "transposed,";
  if (c.large_dt) o << " large_dt";
  if (c.stochastic) o << " sr(seed=" << c.rounding_seed << ",rounds=" << c.rounding_rounds << ")";
  if (c.exact_values) o << " exact_values";
  o << " extra_slots=" << c.extra_slots << " seed=" << c.seed;
  return o.str();
}

// ---------------------------------------------------------------------------
// UpdateProblem
// ---------------------------------------------------------------------------
struct UpdateProblem::Buffer {
  std::string name;
  ssu_dtype_t dtype = SSU_DTYPE_INVALID;
  int64_t elems = 0;  // including guards
  int64_t lead = 0;   // guard elements before the first tensor element
  std::vector<uint8_t> image;
  void* dev = nullptr;
  bool output = false;
  size_t esize() const { return elem_size(dtype); }
  size_t bytes() const { return size_t(elems) * esize(); }
};

namespace {
struct TensorRef {
  int buffer = -1;  // -1: absent
  int ndim = 0;
  int64_t shape[SSU_MAX_DIMS] = {0};
  int64_t strides[SSU_MAX_DIMS] = {0};
  ssu_dtype_t dtype = SSU_DTYPE_INVALID;
  int64_t offset(const int64_t* idx) const {
    int64_t o = 0;
    for (int k = 0; k < ndim; ++k) o += idx[k] * strides[k];
    return o;
  }
};
}  // namespace

struct UpdateProblem::Impl {
  std::vector<Buffer> buffers;
  TensorRef state, x, dt, A, B, C, D, dt_bias, z, out, src, dst, cu, accepted, inter,
      inter_idx, scale, inter_scale, seed;
  uint64_t seed_value = 0;
  int64_t pad_slot_id = -1;
  int64_t max_tokens = 0;
  uint32_t flags = 0;
  RefProblem ref;
  // Row of the packed/flat token axis -> (sequence, token), for messages.
  std::vector<int64_t> row_seq, row_tok;
  mutable bool have_expected = false;
  mutable RefResult expected;

  Buffer& buf(const TensorRef& t) { return buffers[size_t(t.buffer)]; }
  const Buffer& buf(const TensorRef& t) const { return buffers[size_t(t.buffer)]; }

  // Creates a tensor in its own buffer. `order` lists the axes from outermost
  // to innermost in memory; `step` is the stride of the innermost one, and
  // `pad[axis]` extra elements after each run of that axis; axes in `zero`
  // get stride 0.
  TensorRef make(const std::string& name, ssu_dtype_t dtype, std::vector<int64_t> shape,
                 std::vector<int> order, int64_t step, std::vector<int64_t> pad,
                 std::vector<int> zero, bool output) {
    TensorRef t;
    t.ndim = int(shape.size());
    t.dtype = dtype;
    if (order.empty())
      for (int k = 0; k < t.ndim; ++k) order.push_back(k);
    pad.resize(shape.size(), 0);
    int64_t running = step;
    for (int k = t.ndim - 1; k >= 0; --k) {
      const int ax = order[size_t(k)];
      t.shape[ax] = shape[size_t(ax)];
      t.strides[ax] = running;
      running = running * shape[size_t(ax)] + pad[size_t(ax)];
    }
    for (int ax : zero) t.strides[ax] = 0;
    int64_t span = 1;
    for (int k = 0; k < t.ndim; ++k) {
      if (t.shape[k] <= 0) span = 0;
    }
    if (span) {
      for (int k = 0; k < t.ndim; ++k) span += (t.shape[k] - 1) * t.strides[k];
    }
    Buffer b;
    b.name = name;
    b.dtype = dtype;
    const int64_t guard = int64_t(64 / elem_size(dtype));
    b.lead = guard;
    b.elems = guard + span + guard;
    b.output = output;
    b.image.assign(b.bytes(), 0);
    poison(b.image.data(), dtype, b.elems);
    t.buffer = int(buffers.size());
    buffers.push_back(std::move(b));
    return t;
  }

  template <typename Fn>  // Fn(const int64_t* idx) -> double
  void fill(const TensorRef& t, Fn value) {
    Buffer& b = buf(t);
    uint8_t* base = b.image.data() + b.lead * b.esize();
    for_each_index(t.ndim, t.shape, [&](const int64_t* idx) {
      store_element(base, t.dtype, t.offset(idx), value(idx));
    });
  }

  double get(const TensorRef& t, const int64_t* idx) const {
    const Buffer& b = buf(t);
    return load_element(b.image.data() + b.lead * b.esize(), t.dtype, t.offset(idx));
  }

  ssu_tensor_t descriptor(const TensorRef& t) const {
    ssu_tensor_t d;
    std::memset(&d, 0, sizeof d);
    if (t.buffer < 0) return d;
    const Buffer& b = buf(t);
    d.data = static_cast<uint8_t*>(b.dev) + b.lead * b.esize();
    d.dtype = t.dtype;
    d.ndim = t.ndim;
    for (int k = 0; k < t.ndim; ++k) {
      d.shape[k] = t.shape[k];
      d.strides[k] = t.strides[k];
    }
    return d;
  }
};

UpdateProblem::UpdateProblem(const UpdateCase& c, Memory& mem)
    : case_(c), mem_(mem), impl_(new Impl) {
  Impl& m = *impl_;
  Rng rng = Rng::seeded(c.seed ^ (uint64_t(c.H) << 48) ^ (uint64_t(c.P) << 32) ^
                            (uint64_t(c.N) << 16) ^ uint64_t(c.batch),
                        0x1234567ull);
  const bool single = c.form == Form::Single;
  const int64_t Bt = c.batch, T = single ? 1 : c.T;
  const int64_t H = c.H, G = c.G, P = c.P, N = c.N, HPN = H * P * N;
  if (Bt < 1 || T < 1 || H < 1 || G < 1 || P < 1 || N < 1 || H % G)
    throw std::logic_error("UpdateProblem: bad sizes in " + describe(c));
  const bool padded_l = (c.layout & kPadded) != 0;
  const bool odd_l = (c.layout & kOddPadded) != 0;
  const bool bcast = (c.layout & kBroadcast) != 0;
  const bool transposed = (c.layout & kTransposed) != 0;
  auto padv = [&](int64_t aligned, int64_t odd) -> int64_t {
    return odd_l ? odd : padded_l ? aligned : 0;
  };
  const int64_t istep = (padded_l || odd_l) ? 2 : 1;

  // --- sequence lengths (varlen) ----------------------------------------
  std::vector<int64_t> len(size_t(Bt), T);
  std::vector<int64_t> cu(size_t(Bt + 1), 0);
  if (c.form == Form::Varlen) {
    for (auto& l : len) l = rng.below(T + 1);
    if (Bt >= 3) {
      const int64_t empty = rng.below(Bt);
      const int64_t full = (empty + 1 + rng.below(Bt - 1)) % Bt;
      len[size_t(empty)] = 0;
      len[size_t(full)] = T;
    }
    int64_t tt = 0;
    for (auto l : len) tt += l;
    if (tt == 0) len[0] = T;
    for (int64_t b = 0; b < Bt; ++b) cu[size_t(b + 1)] = cu[size_t(b)] + len[size_t(b)];
    rows_ = cu[size_t(Bt)];
  } else {
    rows_ = single ? Bt : Bt * T;
    for (int64_t b = 0; b <= Bt; ++b) cu[size_t(b)] = b * T;
  }
  m.row_seq.assign(size_t(rows_), 0);
  m.row_tok.assign(size_t(rows_), 0);
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t t = 0; t < (c.form == Form::Varlen ? len[size_t(b)] : T); ++t) {
      m.row_seq[size_t(cu[size_t(b)] + t)] = b;
      m.row_tok[size_t(cu[size_t(b)] + t)] = t;
    }

  // --- slots ---------------------------------------------------------------
  const bool has_index = c.index != SSU_DTYPE_INVALID;
  const bool has_src = has_index && c.has_src;
  const bool src2d = has_src && c.src_2d && !single;
  const bool dst2d = has_index && c.store == Store::DstPerToken && !single;
  const bool dst_alias = dst2d && c.dst_is_src && src2d;
  const bool dst1d = has_index && c.has_dst && !dst2d;
  const bool accepted = src2d && c.num_accepted;
  const bool inter = c.store == Store::Intermediate && !single;
  const bool inter_idx = inter && c.inter_index && has_index;
  const int64_t n_src = has_src ? (src2d ? Bt * T : Bt) : Bt;
  const int64_t n_dst = dst1d ? Bt : (dst2d && !dst_alias) ? Bt * T : 0;
  const int64_t reserve = c.pad == Pad::PadSlotIdInRange ? 1 : 0;
  S_ = n_src + n_dst + reserve + std::max(c.extra_slots, 0);

  std::vector<int64_t> perm(static_cast<size_t>(S_));
  for (int64_t i = 0; i < S_; ++i) perm[size_t(i)] = i;
  // Without a src index the sequences own slots 0..Bt-1: shuffle the rest.
  const int64_t fixed = has_src ? 0 : Bt;
  for (int64_t i = S_ - 1; i > fixed; --i) {
    const int64_t j = fixed + rng.below(i - fixed + 1);
    std::swap(perm[size_t(i)], perm[size_t(j)]);
  }
  int64_t cursor = fixed;
  auto take = [&]() -> int64_t {
    if (cursor >= S_) throw std::logic_error("UpdateProblem: slot allocation overflow");
    return perm[size_t(cursor++)];
  };

  int64_t reserved_slot = -1;
  if (reserve) reserved_slot = perm[size_t(S_ - 1)];  // never handed out by take()
  m.pad_slot_id = -1;
  if (c.pad == Pad::PadSlotId) m.pad_slot_id = S_ + 5;
  if (c.pad == Pad::PadSlotIdInRange) m.pad_slot_id = reserved_slot;
  auto pad_value = [&]() -> int64_t {
    if ((c.pad == Pad::PadSlotId || c.pad == Pad::PadSlotIdInRange) && rng.chance(0.67))
      return m.pad_slot_id;
    switch (rng.below(4)) {
      case 0: return -1;
      case 1: return -2;
      case 2: return -37;
      default:
        return c.index == SSU_DTYPE_I64 ? std::numeric_limits<int64_t>::min()
                                        : int64_t(std::numeric_limits<int32_t>::min());
    }
  };
  const bool pad_on = c.pad != Pad::None && has_index;

  std::vector<bool> seq_padded(size_t(Bt), false);
  if (pad_on && has_src) {
    for (int64_t b = 0; b < Bt; ++b) seq_padded[size_t(b)] = rng.chance(1.0 / 3.0);
    const int64_t one_padded = rng.below(Bt);
    seq_padded[size_t(one_padded)] = true;
    if (Bt > 1) seq_padded[size_t((one_padded + 1 + rng.below(Bt - 1)) % Bt)] = false;
  }

  std::vector<int64_t> na(size_t(Bt), 0);
  // num_accepted in [0, T]; now and then negative (max(na - 1, 0) is column 0).
  if (accepted)
    for (auto& v : na) v = rng.chance(0.1) ? -1 - rng.below(3) : rng.below(T + 1);

  std::vector<int64_t> src, dst, iidx;
  std::vector<int64_t> s0(size_t(Bt), -1);
  if (has_src) {
    src.assign(size_t(src2d ? Bt * T : Bt), 0);
    for (auto& v : src) v = take();
    for (int64_t b = 0; b < Bt; ++b) {
      const int64_t col = accepted ? std::max<int64_t>(na[size_t(b)] - 1, 0) : 0;
      const size_t at = size_t(src2d ? b * T + col : b);
      if (seq_padded[size_t(b)]) src[at] = pad_value();
      s0[size_t(b)] = src[at];
      // Other columns of a live sequence may be padding too: they are only
      // read when num_accepted names them, and as dst (alias) they skip the store.
      if (src2d && pad_on && !seq_padded[size_t(b)])
        for (int64_t t = 0; t < T; ++t)
          if (t != col && rng.chance(0.25)) src[size_t(b * T + t)] = pad_value();
    }
  } else {
    for (int64_t b = 0; b < Bt; ++b) s0[size_t(b)] = b;
  }
  // Sequences reading one slot (beam search) is defined as long as nobody
  // writes a slot that is read, and no two sequences write the same place.
  const bool sharing = c.shared_src && has_src && !src2d &&
                       (dst1d || (dst2d && !dst_alias) || c.disable_update) &&
                       !(inter && !inter_idx);
  if (sharing)
    for (int64_t b = 1; b < Bt; ++b)
      if (!seq_padded[size_t(b)] && !seq_padded[size_t(b - 1)] && rng.chance(0.5)) {
        src[size_t(b)] = src[size_t(b - 1)];
        s0[size_t(b)] = src[size_t(b)];
      }
  if (dst1d) {
    dst.assign(size_t(Bt), 0);
    for (int64_t b = 0; b < Bt; ++b) {
      const int64_t fresh = take();
      const bool own = !sharing && !seq_padded[size_t(b)] && rng.chance(0.5);
      dst[size_t(b)] = own ? s0[size_t(b)] : fresh;
      if (pad_on && !seq_padded[size_t(b)] && rng.chance(0.25)) dst[size_t(b)] = pad_value();
    }
  } else if (dst2d && !dst_alias) {
    dst.assign(size_t(Bt * T), 0);
    for (auto& v : dst) {
      v = take();
      if (pad_on && rng.chance(0.25)) v = pad_value();
    }
  }
  int64_t I = 0;
  if (inter) {
    I = inter_idx ? Bt + 2 : S_;
    if (inter_idx) {
      std::vector<int64_t> ip(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i) ip[size_t(i)] = i;
      for (int64_t i = I - 1; i > 0; --i) std::swap(ip[size_t(i)], ip[size_t(rng.below(i + 1))]);
      iidx.assign(ip.begin(), ip.begin() + Bt);
      // A padding intermediate index skips that sequence's intermediate stores.
      if (pad_on)
        for (auto& v : iidx)
          if (rng.chance(0.2)) v = pad_value();
    }
  }

  // --- tensors ----------------------------------------------------------------
  // Token-axis prefix of per-token tensors and its memory order.
  std::vector<int64_t> tok_shape;
  std::vector<int> tok_order;
  if (c.form == Form::Multi) {
    tok_shape = {Bt, T};
    tok_order = transposed ? std::vector<int>{1, 0} : std::vector<int>{0, 1};
  } else {
    tok_shape = {c.form == Form::Varlen ? rows_ : Bt};
    tok_order = {0};
  }
  const int nt = int(tok_shape.size());
  auto per_token = [&](const std::string& name, ssu_dtype_t dtype, int64_t d1, int64_t d2,
                       int64_t pad_inner, int64_t pad_mid, bool output) {
    std::vector<int64_t> shape = tok_shape;
    shape.push_back(d1);
    shape.push_back(d2);
    std::vector<int> order = tok_order;
    order.push_back(nt);
    order.push_back(nt + 1);
    std::vector<int64_t> pad(shape.size(), 0);
    pad[size_t(nt + 1)] = pad_inner;  // gap after each row: padded head/group stride
    pad[size_t(nt)] = pad_mid;
    for (int k = 0; k < nt; ++k) pad[size_t(k)] = padv(8, 1);
    return m.make(name, dtype, shape, order, 1, pad, {}, output);
  };
  m.x = per_token("x", c.input, H, P, padv(8, 1), padv(16, 3), false);
  m.z = c.has_z ? per_token("z", c.input, H, P, padv(16, 3), padv(8, 5), false) : TensorRef{};
  m.out = per_token("out", c.input, H, P, padv(24, 5), padv(8, 1), true);
  m.B = per_token("B", c.input, G, N, padv(8, 3), padv(8, 1), false);
  m.C = per_token("C", c.input, G, N, padv(16, 1), padv(24, 7), false);

  // dt: (tok, H) per head; (tok, H, P) per channel or, broadcast, with a
  // stride-0 P axis.
  {
    std::vector<int64_t> shape = tok_shape;
    std::vector<int> order = tok_order;
    shape.push_back(H);
    order.push_back(nt);
    std::vector<int> zero;
    int64_t step = istep;
    if (c.dt_per_channel || bcast) {
      shape.push_back(P);
      order.push_back(nt + 1);
      if (!c.dt_per_channel) zero.push_back(nt + 1);
      step = 1;
    }
    std::vector<int64_t> pad(shape.size(), 0);
    pad.back() = padv(8, 3);
    m.dt = m.make("dt", c.dt, shape, order, step, pad, zero, false);
  }
  // A: (H,) or (H, P, N); broadcast: (H, P, N) with P and N strides 0.
  if (c.A_per_channel || bcast) {
    std::vector<int> zero;
    if (!c.A_per_channel) zero = {1, 2};
    m.A = m.make("A", c.A, {H, P, N}, {}, 1, {0, padv(8, 1), padv(8, 3)}, zero, false);
  } else {
    m.A = m.make("A", c.A, {H}, {}, (padded_l || odd_l) ? 3 : 1, {}, {}, false);
  }
  auto per_head_param = [&](const std::string& name, ssu_dtype_t dtype, bool per_channel) {
    if (per_channel || bcast) {
      std::vector<int> zero;
      if (!per_channel) zero = {1};
      return m.make(name, dtype, {H, P}, {}, 1, {0, padv(8, 1)}, zero, false);
    }
    return m.make(name, dtype, {H}, {}, istep, {}, {}, false);
  };
  m.D = c.has_D ? per_head_param("D", c.D, c.D_per_channel) : TensorRef{};
  m.dt_bias =
      c.has_dt_bias ? per_head_param("dt_bias", c.dt_bias, c.dt_bias_per_channel) : TensorRef{};

  // State pool (S, H, P, N), slot stride possibly padded.
  // (make() pads after a run of an axis, i.e. the stride of the next outer
  // axis: the pad of axis 1 is what makes the slot stride non-dense.)
  // Block-scaled formats (i16, i8, f8e4m3) come with their scale pools.
  const bool scaled = is_scaled_dtype(c.state);
  const bool i16 = c.state == SSU_DTYPE_I16;
  if (c.stochastic && c.state != SSU_DTYPE_F16 && c.state != SSU_DTYPE_BF16 &&
      c.state != SSU_DTYPE_F8E4M3)
    throw std::logic_error("UpdateProblem: stochastic rounding needs an f16/bf16/f8e4m3 state: " +
                           describe(c));
  m.state = m.make("state", c.state, {S_, H, P, N}, {}, 1, {0, padv(64, 7), 0, 0}, {}, true);
  if (scaled)
    m.scale = m.make("state_scale", SSU_DTYPE_F32, {S_, H, P}, {}, 1, {0, padv(16, 5), 0}, {},
                     true);
  if (inter) {
    m.inter = m.make("intermediate_states", c.state, {I, T, H, P, N}, {}, 1,
                     {padv(32, 5), padv(64, 3), 0, 0, 0}, {}, true);
    if (scaled)
      m.inter_scale = m.make("intermediate_scales", SSU_DTYPE_F32, {I, T, H, P}, {}, 1,
                             {0, padv(8, 3), padv(16, 1), 0}, {}, true);
  }
  if (c.stochastic) {
    m.seed = m.make("rounding_seed", SSU_DTYPE_I64, {1}, {}, 1, {}, {}, false);
    Buffer& sb = m.buf(m.seed);
    std::memcpy(sb.image.data() + sb.lead * sb.esize(), &c.rounding_seed, 8);
    m.seed_value = c.rounding_seed;
  }

  // Index tensors use the case's index dtype; cu_seqlens of a case without
  // slot indices alternates between int32 and int64 with the seed.
  const ssu_dtype_t idx_dtype =
      has_index ? c.index : (c.seed % 2 ? SSU_DTYPE_I64 : SSU_DTYPE_I32);
  auto index_tensor = [&](const std::string& name, const std::vector<int64_t>& values,
                          bool two_d) {
    TensorRef t;
    if (two_d) {
      std::vector<int> order = transposed ? std::vector<int>{1, 0} : std::vector<int>{0, 1};
      t = m.make(name, idx_dtype, {Bt, T}, order, istep, {padv(8, 1), padv(8, 3)}, {}, false);
    } else {
      t = m.make(name, idx_dtype, {int64_t(values.size())}, {}, istep, {}, {}, false);
    }
    m.fill(t, [&](const int64_t* idx) {
      return double(values[size_t(two_d ? idx[0] * T + idx[1] : idx[0])]);
    });
    return t;
  };
  // int64 values such as INT64_MIN do not survive a trip through double:
  // write index tensors exactly.
  auto write_exact = [&](const TensorRef& t, const std::vector<int64_t>& values, bool two_d) {
    Buffer& b = m.buf(t);
    uint8_t* base = b.image.data() + b.lead * b.esize();
    for_each_index(t.ndim, t.shape, [&](const int64_t* idx) {
      const int64_t v = values[size_t(two_d ? idx[0] * T + idx[1] : idx[0])];
      if (t.dtype == SSU_DTYPE_I64)
        std::memcpy(base + 8 * t.offset(idx), &v, 8);
      else {
        const int32_t v32 = int32_t(v);
        std::memcpy(base + 4 * t.offset(idx), &v32, 4);
      }
    });
  };
  if (has_src) {
    m.src = index_tensor("src_index", src, src2d);
    write_exact(m.src, src, src2d);
  }
  if (dst_alias) {
    m.dst = m.src;
    dst = src;
  } else if (!dst.empty()) {
    m.dst = index_tensor("dst_index", dst, dst2d);
    write_exact(m.dst, dst, dst2d);
  }
  if (c.form == Form::Varlen) m.cu = index_tensor("cu_seqlens", cu, false);
  if (accepted) m.accepted = index_tensor("num_accepted_tokens", na, false);
  if (inter_idx) {
    m.inter_idx = index_tensor("intermediate_index", iidx, false);
    write_exact(m.inter_idx, iidx, false);
  }

  // --- values -----------------------------------------------------------------
  if (c.exact_values) {
    // Every fp32 state value exact (see UpdateCase::exact_values): delta a
    // multiple of 1/4 up to 1.5, x in {0, +-1/2, +-1, +-2}, B on a 2^-10 grid
    // in [-1, 1], A = 0; with the initial state on a 2^-12 grid in [-8, 8]
    // every h stays on a 2^-13 grid below 2^6: at most 19 significant bits.
    if (c.softplus || c.large_dt)
      throw std::logic_error("UpdateProblem: exact_values excludes softplus: " + describe(c));
    m.fill(m.x, [&](const int64_t*) {
      if (rng.chance(0.1)) return 0.0;
      const double v = std::ldexp(1.0, int(rng.below(3)) - 1);
      return rng.chance(0.5) ? -v : v;
    });
    if (c.has_z) m.fill(m.z, [&](const int64_t*) { return rng.normal(); });
    m.fill(m.B, [&](const int64_t*) { return double(rng.below(2049) - 1024) / 1024.0; });
    m.fill(m.C, [&](const int64_t*) { return rng.normal(); });
    m.fill(m.dt, [&](const int64_t*) { return std::ldexp(1.0, int(rng.below(3)) - 2); });
    if (c.has_dt_bias)
      m.fill(m.dt_bias, [&](const int64_t*) { return 0.25 * double(rng.below(3)); });
    m.fill(m.A, [&](const int64_t*) { return 0.0; });
    if (c.has_D) m.fill(m.D, [&](const int64_t*) { return rng.normal(); });
  } else {
  m.fill(m.x, [&](const int64_t*) { return rng.normal(); });
  if (c.has_z) m.fill(m.z, [&](const int64_t*) { return rng.normal(); });
  m.fill(m.B, [&](const int64_t*) { return rng.normal(); });
  m.fill(m.C, [&](const int64_t*) { return rng.normal(); });
  m.fill(m.dt, [&](const int64_t*) {
    if (c.large_dt && rng.chance(0.15)) return c.softplus ? rng.uniform(18.0, 30.0) : rng.uniform(1.0, 3.0);
    if (!c.softplus) return rng.uniform(0.001, 0.1);
    return c.has_dt_bias ? 0.5 * rng.normal() : rng.uniform(-4.5, -2.0);
  });
  if (c.has_dt_bias)
    m.fill(m.dt_bias, [&](const int64_t*) {
      return c.softplus ? rng.uniform(-4.0, -3.0) : rng.uniform(0.0, 0.01);
    });
  if (c.A_per_channel)
    m.fill(m.A, [&](const int64_t* idx) { return -double(idx[2] + 1) * rng.uniform(0.8, 1.2); });
  else
    m.fill(m.A, [&](const int64_t*) { return -std::exp(rng.uniform(0.0, std::log(16.0))); });
  if (c.has_D) m.fill(m.D, [&](const int64_t*) { return rng.normal(); });
  }
  if (scaled && !i16) {
    // 8-bit codes and a decode scale per row, as for int16 below: quantized
    // normal rows, all-zero rows, or, for exact values, arbitrary finite
    // codes with one on a rail and a power-of-two scale (2^-12 for i8; 2^-4
    // for f8e4m3, whose subnormal step 2^-9 then keeps every value on the
    // 2^-13 grid of the exact-value cases).
    const bool fp8 = c.state == SSU_DTYPE_F8E4M3;
    std::vector<double> codes(size_t(S_ * HPN)), scales(size_t(S_ * H * P));
    std::vector<float> row(static_cast<size_t>(N));
    for (int64_t r = 0; r < S_ * H * P; ++r) {
      const bool zero = rng.chance(c.exact_values ? 0.15 : 0.05);
      if (zero) {
        for (int64_t n = 0; n < N; ++n) codes[size_t(r * N + n)] = 0.0;
        scales[size_t(r)] = 1.0;
      } else if (c.exact_values) {
        for (int64_t n = 0; n < N; ++n) {
          double code;
          if (fp8) do code = double(rng.below(256)); while ((int64_t(code) & 0x7f) == 0x7f);
          else code = double(int8_t(rng.below(255) - 127));
          codes[size_t(r * N + n)] = code;
        }
        const bool neg = rng.chance(0.5);
        codes[size_t(r * N + rng.below(N))] = fp8 ? (neg ? 0xfe : 0x7e) : (neg ? -127.0 : 127.0);
        scales[size_t(r)] = std::ldexp(1.0, fp8 ? -4 : -12);
      } else {
        for (auto& v : row) v = float(rng.normal());
        const QuantizedRow8 q = ref_quantize_row8(row.data(), N, c.state);
        for (int64_t n = 0; n < N; ++n)
          codes[size_t(r * N + n)] = fp8 ? double(q.q[size_t(n)]) : double(int8_t(q.q[size_t(n)]));
        scales[size_t(r)] = q.scale;
      }
    }
    m.fill(m.state, [&](const int64_t* idx) {
      return codes[size_t(((idx[0] * H + idx[1]) * P + idx[2]) * N + idx[3])];
    });
    m.fill(m.scale,
           [&](const int64_t* idx) { return scales[size_t((idx[0] * H + idx[1]) * P + idx[2])]; });
  } else if (i16) {
    // Codes and a decode scale per row: quantized normal rows (now and then
    // an all-zero row, scale 1), or, for exact values, arbitrary codes with
    // one on a rail and the scale 2^-12, so that every load is exact.
    std::vector<double> codes(size_t(S_ * HPN)), scales(size_t(S_ * H * P));
    std::vector<float> row(static_cast<size_t>(N));
    for (int64_t r = 0; r < S_ * H * P; ++r) {
      const bool zero = rng.chance(c.exact_values ? 0.15 : 0.05);
      if (zero) {
        for (int64_t n = 0; n < N; ++n) codes[size_t(r * N + n)] = 0.0;
        scales[size_t(r)] = 1.0;
      } else if (c.exact_values) {
        for (int64_t n = 0; n < N; ++n) codes[size_t(r * N + n)] = double(rng.below(65535) - 32767);
        codes[size_t(r * N + rng.below(N))] = rng.chance(0.5) ? 32767.0 : -32767.0;
        scales[size_t(r)] = std::ldexp(1.0, -12);
      } else {
        for (auto& v : row) v = float(rng.normal());
        const QuantizedRow q = ref_quantize_row(row.data(), N);
        for (int64_t n = 0; n < N; ++n) codes[size_t(r * N + n)] = q.q[size_t(n)];
        scales[size_t(r)] = q.scale;
      }
    }
    m.fill(m.state, [&](const int64_t* idx) {
      return codes[size_t(((idx[0] * H + idx[1]) * P + idx[2]) * N + idx[3])];
    });
    m.fill(m.scale,
           [&](const int64_t* idx) { return scales[size_t((idx[0] * H + idx[1]) * P + idx[2])]; });
  } else if (c.exact_values) {
    m.fill(m.state, [&](const int64_t*) {
      return std::max(-8.0, std::min(8.0, std::round(rng.normal() * 8192.0) / 4096.0));
    });
  } else {
    m.fill(m.state, [&](const int64_t*) { return rng.normal(); });
  }

  // --- arguments --------------------------------------------------------------
  m.flags = (c.softplus ? SSU_UPDATE_DT_SOFTPLUS : 0u) |
            (c.disable_update ? SSU_UPDATE_DISABLE_STATE_UPDATE : 0u);
  m.max_tokens = c.form == Form::Varlen ? T : 0;

  // --- the reference problem, gathered back from the images --------------
  RefProblem& r = m.ref;
  r.form = c.form;
  r.S = S_; r.H = H; r.P = P; r.N = N; r.G = G;
  r.batch = Bt; r.T = T; r.rows = rows_; r.I = I;
  r.softplus = c.softplus;
  r.disable_update = c.disable_update;
  r.has_D = c.has_D; r.has_dt_bias = c.has_dt_bias; r.has_z = c.has_z;
  r.pad_slot_id = m.pad_slot_id;
  auto token_index = [&](int64_t row, int64_t* idx) {
    if (c.form == Form::Multi) {
      idx[0] = row / T;
      idx[1] = row % T;
    } else {
      idx[0] = row;
    }
  };
  r.x.resize(size_t(rows_ * H * P));
  r.dt.resize(size_t(rows_ * H * P));
  if (c.has_z) r.z.resize(size_t(rows_ * H * P));
  r.B.resize(size_t(rows_ * G * N));
  r.C.resize(size_t(rows_ * G * N));
  for (int64_t row = 0; row < rows_; ++row) {
    int64_t idx[SSU_MAX_DIMS] = {0};
    token_index(row, idx);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p) {
        idx[nt] = h;
        idx[nt + 1] = p;
        const size_t at = size_t((row * H + h) * P + p);
        r.x[at] = m.get(m.x, idx);
        if (c.has_z) r.z[at] = m.get(m.z, idx);
        r.dt[at] = m.get(m.dt, idx);  // a per-head dt has rank nt+1 and ignores idx[nt+1]
      }
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < N; ++n) {
        idx[nt] = g;
        idx[nt + 1] = n;
        r.B[size_t((row * G + g) * N + n)] = m.get(m.B, idx);
        r.C[size_t((row * G + g) * N + n)] = m.get(m.C, idx);
      }
  }
  r.A.resize(size_t(HPN));
  if (c.has_D) r.D.resize(size_t(H * P));
  if (c.has_dt_bias) r.dt_bias.resize(size_t(H * P));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t p = 0; p < P; ++p) {
      const int64_t idx[3] = {h, p, 0};
      if (c.has_D) r.D[size_t(h * P + p)] = m.get(m.D, idx);
      if (c.has_dt_bias) r.dt_bias[size_t(h * P + p)] = m.get(m.dt_bias, idx);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t ia[3] = {h, p, n};
        r.A[size_t((h * P + p) * N + n)] = m.get(m.A, ia);
      }
    }
  r.state.resize(size_t(S_ * HPN));
  for_each_index(4, m.state.shape, [&](const int64_t* idx) {
    double v = m.get(m.state, idx);
    if (i16) v = ref_dequantize(int16_t(v), float(m.get(m.scale, idx)));
    else if (scaled) v = ref_dequantize8(uint8_t(int64_t(v)), c.state, float(m.get(m.scale, idx)));
    r.state[size_t(((idx[0] * H + idx[1]) * P + idx[2]) * N + idx[3])] = v;
  });
  r.src = src;
  r.src_2d = src2d;
  r.dst = dst;
  r.dst_2d = dst2d;
  if (c.form == Form::Varlen) r.cu_seqlens = cu;
  if (accepted) r.num_accepted = na;
  if (inter_idx) r.inter_index = iidx;

  // --- device buffers ---------------------------------------------------------
  for (auto& b : m.buffers) {
    b.dev = mem_.alloc(b.bytes());
    mem_.upload(b.dev, b.image.data(), b.bytes());
  }
  std::memset(&pool_, 0, sizeof pool_);
  pool_.struct_size = uint32_t(sizeof(ssu_state_pool_t));
  pool_.state = m.descriptor(m.state);
  pool_.state_scale = m.descriptor(m.scale);
}

UpdateProblem::~UpdateProblem() {
  for (auto& b : impl_->buffers)
    if (b.dev) mem_.free(b.dev);
}

ssu_update_args_t UpdateProblem::args() const {
  const Impl& m = *impl_;
  ssu_update_args_t a;
  std::memset(&a, 0, sizeof a);
  a.struct_size = uint32_t(sizeof a);
  a.flags = m.flags;
  a.pad_slot_id = m.pad_slot_id;
  a.max_tokens = m.max_tokens;
  a.pool = &pool_;
  a.x = m.descriptor(m.x);
  a.dt = m.descriptor(m.dt);
  a.A = m.descriptor(m.A);
  a.B = m.descriptor(m.B);
  a.C = m.descriptor(m.C);
  a.D = m.descriptor(m.D);
  a.dt_bias = m.descriptor(m.dt_bias);
  a.z = m.descriptor(m.z);
  a.out = m.descriptor(m.out);
  a.src_index = m.descriptor(m.src);
  a.dst_index = m.descriptor(m.dst);
  a.cu_seqlens = m.descriptor(m.cu);
  a.num_accepted_tokens = m.descriptor(m.accepted);
  a.intermediate_states = m.descriptor(m.inter);
  a.intermediate_index = m.descriptor(m.inter_idx);
  a.error_word = nullptr;
  a.intermediate_scales = m.descriptor(m.inter_scale);
  a.rounding_seed = rounding_seed_ptr();
  a.rounding_rounds = case_.stochastic ? case_.rounding_rounds : 0u;
  return a;
}

uint64_t* UpdateProblem::rounding_seed_ptr() const {
  const Impl& m = *impl_;
  if (m.seed.buffer < 0) return nullptr;
  return static_cast<uint64_t*>(m.descriptor(m.seed).data);
}

void UpdateProblem::reset_outputs() {
  for (auto& b : impl_->buffers)
    if (b.output) mem_.upload(b.dev, b.image.data(), b.bytes());
}

void UpdateProblem::set_rounding_seed(uint64_t value) {
  Impl& m = *impl_;
  if (m.seed.buffer < 0) throw std::logic_error("set_rounding_seed: the case is not stochastic");
  Buffer& b = m.buf(m.seed);
  std::memcpy(b.image.data() + b.lead * b.esize(), &value, 8);
  mem_.upload(b.dev, b.image.data(), b.bytes());
  m.seed_value = value;
}

bool UpdateProblem::has_buffer(const std::string& name) const {
  for (const auto& b : impl_->buffers)
    if (b.name == name) return true;
  return false;
}

std::vector<uint8_t> UpdateProblem::download(const std::string& name) const {
  for (const auto& b : impl_->buffers)
    if (b.name == name) {
      std::vector<uint8_t> v(b.bytes());
      mem_.download(v.data(), b.dev, b.bytes());
      return v;
    }
  throw std::logic_error("download: no buffer named " + name);
}

void UpdateProblem::reset() {
  for (auto& b : impl_->buffers) mem_.upload(b.dev, b.image.data(), b.bytes());
}

void UpdateProblem::rewrite(const std::string& name,
                            const std::function<void(uint8_t*, int64_t)>& f) {
  Impl& m = *impl_;
  for (const TensorRef* t : {&m.state, &m.scale, &m.x, &m.dt, &m.A, &m.B, &m.C, &m.D,
                             &m.dt_bias, &m.z}) {
    if (t->buffer < 0 || m.buf(*t).name != name) continue;
    Buffer& b = m.buf(*t);
    uint8_t* const base = b.image.data() + b.lead * b.esize();
    int64_t count = 1;
    for (int k = 0; k < t->ndim; ++k) count *= t->shape[k];
    for (int64_t e = 0; e < count; ++e) {
      int64_t idx[SSU_MAX_DIMS] = {0};
      int64_t rest = e;
      for (int k = t->ndim - 1; k >= 0; --k) {
        idx[k] = rest % t->shape[k];
        rest /= t->shape[k];
      }
      f(base + b.esize() * size_t(t->offset(idx)), e);
    }
    mem_.upload(b.dev, b.image.data(), b.bytes());
    m.have_expected = false;
    return;
  }
  throw std::logic_error("rewrite: no tensor named " + name);
}

void UpdateProblem::poke_index(const std::string& name, int64_t element, int64_t value) {
  Impl& m = *impl_;
  for (const TensorRef* t : {&m.src, &m.dst, &m.cu, &m.accepted, &m.inter_idx}) {
    if (t->buffer < 0 || m.buf(*t).name != name) continue;
    int64_t idx[SSU_MAX_DIMS] = {0};
    int64_t rest = element;
    for (int k = t->ndim - 1; k >= 0; --k) {
      idx[k] = rest % t->shape[k];
      rest /= t->shape[k];
    }
    Buffer& b = m.buf(*t);
    uint8_t* base = b.image.data() + b.lead * b.esize();
    if (t->dtype == SSU_DTYPE_I64) {
      std::memcpy(base + 8 * t->offset(idx), &value, 8);
    } else {
      const int32_t v32 = int32_t(value);
      std::memcpy(base + 4 * t->offset(idx), &v32, 4);
    }
    mem_.upload(b.dev, b.image.data(), b.bytes());
    // Keep the reference in step, so check() stays valid after a valid poke.
    const size_t at = size_t(element);
    if (t->buffer == m.src.buffer && at < m.ref.src.size()) m.ref.src[at] = value;
    if (t->buffer == m.dst.buffer && at < m.ref.dst.size()) m.ref.dst[at] = value;
    if (t == &m.cu && at < m.ref.cu_seqlens.size()) m.ref.cu_seqlens[at] = value;
    if (t == &m.accepted && at < m.ref.num_accepted.size()) m.ref.num_accepted[at] = value;
    if (t == &m.inter_idx && at < m.ref.inter_index.size()) m.ref.inter_index[at] = value;
    m.have_expected = false;
    return;
  }
  throw std::logic_error("poke_index: no index buffer named " + name);
}

namespace {

// Collects the first few failures of a check.
struct Report {
  std::string header;
  std::vector<std::string> lines;
  int64_t bad = 0;
  int64_t checked = 0;
  void fail(const std::string& line) {
    if (lines.size() < 12) lines.push_back(line);
    ++bad;
  }
  CheckResult result() const {
    CheckResult r;
    r.ok = bad == 0;
    r.elements = checked;
    if (!r.ok) {
      std::ostringstream o;
      o << header << "\n  " << bad << " bad element(s) of " << checked << " checked";
      for (const auto& l : lines) o << "\n    " << l;
      if (bad > int64_t(lines.size())) o << "\n    ...";
      r.message = o.str();
    }
    return r;
  }
};

std::string bits_hex(const uint8_t* p, size_t n) {
  char buf[40];
  uint64_t v = 0;
  std::memcpy(&v, p, std::min<size_t>(n, 8));
  std::snprintf(buf, sizeof buf, "0x%0*llx", int(2 * n), static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

CheckResult UpdateProblem::check_unchanged() const {
  const Impl& m = *impl_;
  Report rep;
  rep.header = describe(case_) + "\n  expected every buffer to be unchanged";
  for (const auto& b : m.buffers) {
    std::vector<uint8_t> got(b.bytes());
    mem_.download(got.data(), b.dev, b.bytes());
    const size_t es = b.esize();
    for (int64_t e = 0; e < b.elems; ++e) {
      ++rep.checked;
      if (std::memcmp(&got[size_t(e) * es], &b.image[size_t(e) * es], es) != 0)
        rep.fail(b.name + " element " + std::to_string(e - b.lead) + " changed: " +
                 bits_hex(&b.image[size_t(e) * es], es) + " -> " +
                 bits_hex(&got[size_t(e) * es], es));
    }
  }
  return rep.result();
}

CheckResult UpdateProblem::check() const {
  const Impl& m = *impl_;
  if (!m.have_expected) {
    m.expected = reference_update(m.ref);
    m.have_expected = true;
  }
  const RefResult& ex = m.expected;
  const UpdateCase& c = case_;
  const int64_t H = c.H, P = c.P, N = c.N;
  const int64_t T = c.form == Form::Single ? 1 : c.T;
  const int nt = c.form == Form::Multi ? 2 : 1;
  Report rep;
  rep.header = describe(c);

  std::vector<std::vector<uint8_t>> got(m.buffers.size());
  std::vector<std::vector<uint8_t>> covered(m.buffers.size());
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const Buffer& b = m.buffers[i];
    got[i].resize(b.bytes());
    mem_.download(got[i].data(), b.dev, b.bytes());
    covered[i].assign(size_t(b.elems), 0);
  }

  // Compares one logical element of an output tensor; `where` names it
  // (called only on failure: formatting every element would dominate).
  auto compare = [&](const TensorRef& t, const int64_t* idx, double ref, Expect how, Tol tol,
                     auto&& where) {
    const size_t bi = size_t(t.buffer);
    const Buffer& b = m.buffers[bi];
    const int64_t e = b.lead + t.offset(idx);
    covered[bi][size_t(e)] = 1;
    ++rep.checked;
    const size_t es = b.esize();
    const uint8_t* gp = &got[bi][size_t(e) * es];
    const uint8_t* ip = &b.image[size_t(e) * es];
    switch (how) {
      case Expect::Unchanged:
        if (std::memcmp(gp, ip, es) != 0)
          rep.fail(where() + " must be unchanged: was " + bits_hex(ip, es) + " (" +
                   fmt_double(load_element(ip, t.dtype, 0)) + "), now " + bits_hex(gp, es) +
                   " (" + fmt_double(load_element(gp, t.dtype, 0)) + ")");
        break;
      case Expect::Zero: {
        const double g = load_element(gp, t.dtype, 0);
        if (!(g == 0.0)) rep.fail(where() + " must be exactly 0 (padding), got " + fmt_double(g));
        break;
      }
      case Expect::Close: {
        const double g = load_element(gp, t.dtype, 0);
        const double lim = tol.atol + tol.rtol * std::fabs(ref);
        if (!(std::fabs(g - ref) <= lim))
          rep.fail(where() + " got " + fmt_double(g) + " ref " + fmt_double(ref) + " |diff| " +
                   fmt_double(std::fabs(g - ref)) + " > tol " + fmt_double(lim));
        break;
      }
    }
  };
  auto ll = [](int64_t v) { return static_cast<long long>(v); };

  // out
  const Tol otol = out_tol(c.input);
  for (int64_t row = 0; row < rows_; ++row) {
    int64_t idx[SSU_MAX_DIMS] = {0};
    if (c.form == Form::Multi) {
      idx[0] = row / T;
      idx[1] = row % T;
    } else {
      idx[0] = row;
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p) {
        idx[nt] = h;
        idx[nt + 1] = p;
        const size_t at = size_t((row * H + h) * P + p);
        compare(m.out, idx, ex.out[at], ex.out_expect[at], otol, [&] {
          char where[160];
          std::snprintf(where, sizeof where, "out[b=%lld t=%lld (row %lld) h=%lld p=%lld]",
                        ll(m.row_seq[size_t(row)]), ll(m.row_tok[size_t(row)]), ll(row), ll(h),
                        ll(p));
          return std::string(where);
        });
      }
  }
  // State pool and intermediate buffer, row by row. A row (all but the last
  // axis) is stored whole or not at all.
  const Tol stol = state_tol(c.state);
  const bool scaled = is_scaled_dtype(c.state);
  const bool i16 = c.state == SSU_DTYPE_I16;
  const int64_t slot_stride = m.state.strides[0];
  // An 8-bit row (i8, f8e4m3): the stored scale and codes against the
  // reference's store of the row. Exact values: every bit (stochastic
  // rounding with the words of the row's source elements; a zero may carry
  // either sign). Otherwise within tolerance: the scale within 1e-3 of
  // max|row| / QMAX; an int8 element within two decode scales of the
  // float64 value, an E4M3 element within 2^-3 of it (relative: one E4M3
  // step, what stochastic rounding may move it) plus two subnormal steps
  // (2 * 2^-9 decode scales).
  const bool fp8 = c.state == SSU_DTYPE_F8E4M3;
  const double qmax = ref_qmax(c.state);
  auto check_row8 = [&](const std::vector<float>& fr, int64_t src_slot, int64_t hh, int64_t pp,
                        const std::vector<double>& refv, size_t base, auto raw, auto where,
                        auto read_scale) {
    std::vector<uint32_t> words;
    if (c.stochastic && c.exact_values)
      for (int64_t n = 0; n < N; ++n)
        words.push_back(ref_sr_word(
            m.seed_value, uint64_t(src_slot * slot_stride + (hh * P + pp) * N + n),
            c.rounding_rounds));
    const QuantizedRow8 q = ref_quantize_row8(fr.data(), N, c.state,
                                              words.empty() ? nullptr : words.data());
    const float gs = read_scale();
    if (c.exact_values) {
      if (std::memcmp(&gs, &q.scale, 4) != 0)
        rep.fail(where(-1) + " stored " + fmt_double(gs) + ", expected " + fmt_double(q.scale));
    } else if (!(std::fabs(gs - q.scale) <= 1e-3 * q.scale + 1e-4 / qmax)) {
      rep.fail(where(-1) + " stored " + fmt_double(gs) + ", expected about " +
               fmt_double(q.scale) + " (max|row| / " + fmt_double(qmax) + ")");
    }
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t code = *raw(n);
      const uint8_t want = q.q[size_t(n)];
      if (c.exact_values) {
        const bool zeros = fp8 && (code & 0x7f) == 0 && (want & 0x7f) == 0;
        if (code != want && !zeros) {
          char b[160];
          std::snprintf(b, sizeof b, " code 0x%02x, expected 0x%02x for the exact value %.9g", code,
                        want, double(fr[size_t(n)]));
          rep.fail(where(n) + b);
        }
        continue;
      }
      const double ref = refv[base + size_t(n)];
      const double g = double(ref_dequantize8(code, c.state, gs));
      double lim;
      if (!ref_state8_element_ok(code, g, ref, double(q.scale), c.state, &lim)) {
        char b[200];
        std::snprintf(b, sizeof b, " code 0x%02x * scale %.9g = %.9g, ref %.9g > tol %.9g", code,
                      double(gs), g, ref, lim);
        rep.fail(where(n) + b);
      }
    }
  };
  auto check_rows = [&](const char* name, const TensorRef& st, const TensorRef& sc,
                        const std::vector<double>& refv, const std::vector<Expect>& expv,
                        const std::vector<int64_t>& row_src) {
    const int rd = st.ndim - 1;  // row axes
    std::vector<float> fr(static_cast<size_t>(N));
    int64_t r = 0;  // row-major row number, the reference's layout
    for_each_index(rd, st.shape, [&](const int64_t* ridx) {
      int64_t idx[SSU_MAX_DIMS] = {0};
      for (int k = 0; k < rd; ++k) idx[k] = ridx[k];
      const int64_t hh = ridx[rd - 2], pp = ridx[rd - 1];
      auto where = [&](int64_t n) {
        std::string w = std::string(name) + "[";
        for (int k = 0; k < rd; ++k) w += std::to_string(ridx[k]) + ",";
        return w + (n < 0 ? std::string("scale") : "n=" + std::to_string(n)) + "]";
      };
      const size_t base = size_t(r * N);
      const Expect how = expv[base];
      ++r;
      if (how != Expect::Close || (!scaled && !c.exact_values)) {
        for (int64_t n = 0; n < N; ++n) {
          idx[rd] = n;
          compare(st, idx, refv[base + size_t(n)], expv[base + size_t(n)], stol,
                  [&] { return where(n); });
        }
        return;  // an unstored scale is checked as unchanged with the gaps
      }
      for (int64_t n = 0; n < N; ++n) fr[size_t(n)] = float(refv[base + size_t(n)]);
      const int64_t src_slot = row_src[size_t(r - 1)];
      // The raw stored element n of this row.
      auto raw = [&](int64_t n) -> const uint8_t* {
        idx[rd] = n;
        const size_t bi = size_t(st.buffer);
        const int64_t e = m.buffers[bi].lead + st.offset(idx);
        covered[bi][size_t(e)] = 1;
        ++rep.checked;
        return &got[bi][size_t(e) * m.buffers[bi].esize()];
      };
      if (!scaled) {
        // Exact values: the stored bits are what SPEC.md section 5 says for
        // the (exact) fp32 value.
        for (int64_t n = 0; n < N; ++n) {
          const float f = fr[size_t(n)];
          uint32_t want = 0, have = 0;
          const uint8_t* gp = raw(n);
          if (c.state == SSU_DTYPE_F32) {
            std::memcpy(&want, &f, 4);
            std::memcpy(&have, gp, 4);
          } else {
            uint16_t h16;
            std::memcpy(&h16, gp, 2);
            have = h16;
            if (c.stochastic) {
              const uint64_t L = uint64_t(src_slot * slot_stride + (hh * P + pp) * N + n);
              const uint32_t w = ref_sr_word(m.seed_value, L, c.rounding_rounds);
              want = c.state == SSU_DTYPE_F16 ? ref_f16_sr(f, w) : ref_bf16_sr(f, w);
            } else {
              want = c.state == SSU_DTYPE_F16 ? float_to_f16_bits(f) : float_to_bf16_bits(f);
            }
          }
          if (want != have) {
            char b[160];
            std::snprintf(b, sizeof b, " stored 0x%x, expected 0x%x for the exact value %.9g",
                          have, want, double(f));
            rep.fail(where(n) + b);
          }
        }
        return;
      }
      if (!i16) {
        check_row8(fr, row_src[size_t(r - 1)], hh, pp, refv, base, raw, where, [&]() -> float {
          int64_t sidx[SSU_MAX_DIMS] = {0};
          for (int k = 0; k < rd; ++k) sidx[k] = ridx[k];
          const size_t sbi = size_t(sc.buffer);
          const int64_t se = m.buffers[sbi].lead + sc.offset(sidx);
          covered[sbi][size_t(se)] = 1;
          ++rep.checked;
          float gs;
          std::memcpy(&gs, &got[sbi][size_t(se) * 4], 4);
          return gs;
        });
        return;
      }
      // int16: codes and the decode scale.
      const QuantizedRow q = ref_quantize_row(fr.data(), N);
      int64_t sidx[SSU_MAX_DIMS] = {0};
      for (int k = 0; k < rd; ++k) sidx[k] = ridx[k];
      const size_t sbi = size_t(sc.buffer);
      const int64_t se = m.buffers[sbi].lead + sc.offset(sidx);
      covered[sbi][size_t(se)] = 1;
      ++rep.checked;
      float gs;
      std::memcpy(&gs, &got[sbi][size_t(se) * 4], 4);
      if (c.exact_values) {
        if (std::memcmp(&gs, &q.scale, 4) != 0)
          rep.fail(where(-1) + " stored " + fmt_double(gs) + ", expected " + fmt_double(q.scale));
      } else if (!(std::fabs(gs - q.scale) <= 1e-3 * q.scale + 1e-4 / 32767.0)) {
        rep.fail(where(-1) + " stored " + fmt_double(gs) + ", expected about " +
                 fmt_double(q.scale) + " (max|row| / 32767)");
      }
      for (int64_t n = 0; n < N; ++n) {
        int16_t code;
        std::memcpy(&code, raw(n), 2);
        if (c.exact_values) {
          if (code != q.q[size_t(n)])
            rep.fail(where(n) + " code " + std::to_string(code) + ", expected " +
                     std::to_string(q.q[size_t(n)]) + " for the exact value " +
                     fmt_double(fr[size_t(n)]));
          continue;
        }
        const double ref = refv[base + size_t(n)];
        const double g = double(ref_dequantize(code, gs));
        const double lim = 2.0 * double(q.scale) + 1e-4 * std::fabs(ref);
        if (code == -32768 || !(std::fabs(g - ref) <= lim))
          rep.fail(where(n) + " code " + std::to_string(code) + " * scale " + fmt_double(gs) +
                   " = " + fmt_double(g) + ", ref " + fmt_double(ref) + " > tol " +
                   fmt_double(lim));
      }
    });
  };
  check_rows("state", m.state, m.scale, ex.state, ex.state_expect, ex.state_row_src);
  if (m.inter.buffer >= 0)
    check_rows("intermediate_states", m.inter, m.inter_scale, ex.inter, ex.inter_expect,
               ex.inter_row_src);
  // Everything else (inputs, gaps, guards) must be bit-identical.
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    const Buffer& b = m.buffers[i];
    const size_t es = b.esize();
    for (int64_t e = 0; e < b.elems; ++e) {
      if (covered[i][size_t(e)]) continue;
      ++rep.checked;
      if (std::memcmp(&got[i][size_t(e) * es], &b.image[size_t(e) * es], es) != 0)
        rep.fail(b.name + (b.output ? " gap/guard" : " (input)") + " element " +
                 std::to_string(e - b.lead) + " was written: " +
                 bits_hex(&b.image[size_t(e) * es], es) + " -> " +
                 bits_hex(&got[i][size_t(e) * es], es));
    }
  }
  return rep.result();
}

// ---------------------------------------------------------------------------
// run_update_case
// ---------------------------------------------------------------------------
CheckResult run_update_case(ssu_context_t context, Memory& mem, const UpdateCase& c,
                            ssu_stream_t stream, const ssu_plan_options_t* plan_options,
                            ssu_algorithm_t* algorithm) {
  UpdateProblem problem(c, mem);
  return run_update_problem(context, problem, false, stream, plan_options, algorithm);
}

CheckResult run_update_problem(ssu_context_t context, UpdateProblem& problem, bool restore,
                               ssu_stream_t stream, const ssu_plan_options_t* plan_options,
                               ssu_algorithm_t* algorithm) {
  const UpdateCase& c = problem.spec();
  Memory& mem = problem.memory();
  if (restore) problem.reset();
  const ssu_update_args_t args = problem.args();
  ssu_plan_t plan = nullptr;
  ssu_status_t st = ssu_plan_create_update(context, &args, plan_options, &plan);
  if (st != SSU_SUCCESS) {
    CheckResult r;
    r.ok = false;
    r.message = describe(c) + "\n  ssu_plan_create_update failed: " + std::to_string(st) +
                " (" + ssu_status_string(st) + "): " + ssu_last_error_message();
    return r;
  }
  if (algorithm) {
    ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
    *algorithm = ssu_plan_get_info(plan, &info) == SSU_SUCCESS ? info.algorithm : -1;
  }
  st = ssu_plan_execute_update(plan, &args, stream);
  const std::string msg = st == SSU_SUCCESS ? "" : ssu_last_error_message();
  mem.synchronize(stream);
  ssu_plan_destroy(plan);
  if (st != SSU_SUCCESS) {
    CheckResult r;
    r.ok = false;
    r.message = describe(c) + "\n  ssu_plan_execute_update failed: " + std::to_string(st) +
                " (" + ssu_status_string(st) + "): " + msg;
    return r;
  }
  return problem.check();
}

}  // namespace ssutest
