// Test harness for the Mamba-3 step and rotary step; see mamba3_harness.h.
#include "mamba3_harness.h"
#include "rng.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace ssutest {
namespace m3 {

namespace {

constexpr double kTwoPi = 6.283185307179586476925;


size_t esize(ssu_dtype_t d) {
  switch (d) {
    case SSU_DTYPE_F32: case SSU_DTYPE_I32: return 4;
    case SSU_DTYPE_F16: case SSU_DTYPE_BF16: case SSU_DTYPE_I16: return 2;
    case SSU_DTYPE_I64: return 8;
    default: return 0;
  }
}

const char* dname(ssu_dtype_t d) {
  switch (d) {
    case SSU_DTYPE_F32: return "f32";
    case SSU_DTYPE_F16: return "f16";
    case SSU_DTYPE_BF16: return "bf16";
    case SSU_DTYPE_I32: return "i32";
    case SSU_DTYPE_I64: return "i64";
    default: return "none";
  }
}

const char* pad_name(Pad p) {
  switch (p) {
    case Pad::None: return "none";
    case Pad::Negative: return "negative";
    case Pad::PadSlotId: return "pad_slot_id";
    case Pad::PadSlotIdInRange: return "pad_slot_id_in_range";
  }
  return "?";
}
const char* dst_name(Dst d) {
  switch (d) {
    case Dst::Same: return "same";
    case Dst::Distinct: return "distinct";
    case Dst::Equal: return "equal";
  }
  return "?";
}
const char* layout_name(int l) { return l == kDenseLayout ? "dense" : l == kAligned ? "aligned" : "odd"; }

// A quiet NaN for floats (payloads vary), a large value for indices.
void poison(uint8_t* base, ssu_dtype_t d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (d) {
      case SSU_DTYPE_F32: {
        const uint32_t v = 0x7fc00000u | uint32_t(i & 0xffff);
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
      default: std::memset(base + esize(d) * size_t(i), 0xa5, esize(d));
    }
  }
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string hex(uint64_t v, size_t bytes) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "0x%0*llx", int(2 * bytes), static_cast<unsigned long long>(v));
  return buf;
}

CheckResult failed_call(const std::string& header, const char* call, ssu_status_t st,
                        const std::string& msg) {
  CheckResult r;
  r.ok = false;
  r.message = header + "\n  " + call + " failed: " + std::to_string(st) + " (" +
              ssu_status_string(st) + "): " + msg;
  return r;
}

}  // namespace

Tolerance out_tolerance(ssu_dtype_t d) {
  return d == SSU_DTYPE_F32 ? Tolerance{1e-4, 1e-4} : Tolerance{1e-2, 1e-3};
}
Tolerance state_tolerance(ssu_dtype_t d) {
  return d == SSU_DTYPE_F32 ? Tolerance{1e-4, 1e-4} : Tolerance{1e-2, 1e-2};
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& shape, std::vector<int> order,
                                std::vector<int64_t> pad) {
  const int nd = int(shape.size());
  if (order.empty())
    for (int k = 0; k < nd; ++k) order.push_back(k);
  pad.resize(shape.size(), 0);
  std::vector<int64_t> st(shape.size(), 0);
  int64_t running = 1;
  for (int k = nd - 1; k >= 0; --k) {
    const int ax = order[size_t(k)];
    st[size_t(ax)] = running;
    running = running * shape[size_t(ax)] + pad[size_t(ax)];
  }
  return st;
}

// ---------------------------------------------------------------------------
// TensorSet
// ---------------------------------------------------------------------------
namespace {
enum class Kind : uint8_t { Unchanged, Close, Zero, Value, Bits, Angle };
struct Expectation {
  Kind kind = Kind::Unchanged;
  float rtol = 0, atol = 0;
  double value = 0;
  uint64_t bits = 0;
  int64_t logical = -1;  // row-major index over the shape, for messages
};
}  // namespace

struct TensorSet::Buf {
  std::string name;
  ssu_dtype_t dtype = SSU_DTYPE_INVALID;
  std::vector<int64_t> shape, strides;
  int64_t lead = 0, elems = 0;
  std::vector<uint8_t> image;
  std::vector<Expectation> expect;
  void* dev = nullptr;
  size_t es() const { return esize(dtype); }
  size_t bytes() const { return size_t(elems) * es(); }
};

TensorSet::TensorSet(Memory& mem) : mem_(mem) {}

TensorSet::~TensorSet() {
  for (auto& b : bufs_)
    if (b->dev) mem_.free(b->dev);
}

int TensorSet::add(const std::string& name, ssu_dtype_t dtype, const std::vector<int64_t>& shape,
                   const std::vector<int64_t>& strides) {
  if (shape.size() != strides.size() || shape.empty() || shape.size() > SSU_MAX_DIMS ||
      esize(dtype) == 0)
    throw std::logic_error("TensorSet::add: bad tensor " + name);
  auto b = std::make_unique<Buf>();
  b->name = name;
  b->dtype = dtype;
  b->shape = shape;
  b->strides = strides;
  int64_t span = 1;
  for (size_t k = 0; k < shape.size(); ++k)
    if (shape[k] <= 0) span = 0;
  if (span)
    for (size_t k = 0; k < shape.size(); ++k) span += (shape[k] - 1) * strides[k];
  const int64_t guard = int64_t(64 / b->es());
  b->lead = guard;
  b->elems = guard + span + guard;
  b->image.assign(b->bytes(), 0);
  poison(b->image.data(), dtype, b->elems);
  bufs_.push_back(std::move(b));
  return int(bufs_.size()) - 1;
}

void TensorSet::upload() {
  for (int i = 0; i < count(); ++i) upload(i);
}
void TensorSet::upload(int id) {
  Buf& b = *bufs_[size_t(id)];
  if (!b.dev) b.dev = mem_.alloc(b.bytes());
  mem_.upload(b.dev, b.image.data(), b.bytes());
}

int64_t TensorSet::element(int id, std::initializer_list<int64_t> idx) const {
  const Buf& b = *bufs_[size_t(id)];
  if (idx.size() != b.shape.size()) throw std::logic_error("TensorSet: rank mismatch on " + b.name);
  int64_t e = b.lead;
  size_t k = 0;
  for (int64_t i : idx) {
    if (i < 0 || i >= b.shape[k]) throw std::logic_error("TensorSet: index out of range on " + b.name);
    e += i * b.strides[k++];
  }
  return e;
}

void TensorSet::set(int id, std::initializer_list<int64_t> idx, double value) {
  Buf& b = *bufs_[size_t(id)];
  store_element(b.image.data(), b.dtype, element(id, idx), value);
}
double TensorSet::get(int id, std::initializer_list<int64_t> idx) const {
  const Buf& b = *bufs_[size_t(id)];
  return load_element(b.image.data(), b.dtype, element(id, idx));
}
uint64_t TensorSet::bits(int id, std::initializer_list<int64_t> idx) const {
  const Buf& b = *bufs_[size_t(id)];
  uint64_t v = 0;
  std::memcpy(&v, &b.image[size_t(element(id, idx)) * b.es()], b.es());
  return v;
}
void TensorSet::copy_bits(int dst, std::initializer_list<int64_t> to, const TensorSet& from_set,
                          int src, std::initializer_list<int64_t> from) {
  Buf& d = *bufs_[size_t(dst)];
  const Buf& s = *from_set.bufs_[size_t(src)];
  if (d.es() != s.es()) throw std::logic_error("copy_bits: element sizes differ");
  std::memcpy(&d.image[size_t(element(dst, to)) * d.es()],
              &s.image[size_t(from_set.element(src, from)) * s.es()], s.es());
}

ssu_tensor_t TensorSet::desc(int id) const {
  ssu_tensor_t t;
  std::memset(&t, 0, sizeof t);
  if (id < 0) return t;
  const Buf& b = *bufs_[size_t(id)];
  if (!b.dev) throw std::logic_error("TensorSet::desc before upload: " + b.name);
  t.data = static_cast<uint8_t*>(b.dev) + size_t(b.lead) * b.es();
  t.dtype = b.dtype;
  t.ndim = int32_t(b.shape.size());
  for (size_t k = 0; k < b.shape.size(); ++k) {
    t.shape[k] = b.shape[k];
    t.strides[k] = b.strides[k];
  }
  return t;
}
const std::vector<int64_t>& TensorSet::shape(int id) const { return bufs_[size_t(id)]->shape; }
ssu_dtype_t TensorSet::dtype(int id) const { return bufs_[size_t(id)]->dtype; }
const std::string& TensorSet::name(int id) const { return bufs_[size_t(id)]->name; }

void TensorSet::clear_expectations() {
  for (auto& b : bufs_) b->expect.clear();
}

namespace {
int64_t logical_of(const std::vector<int64_t>& shape, std::initializer_list<int64_t> idx) {
  int64_t l = 0;
  size_t k = 0;
  for (int64_t i : idx) l = l * shape[k++] + i;
  return l;
}
}  // namespace

#define SSU_M3_EXPECT_SLOT(id, idx)                                  \
  Buf& b_ = *bufs_[size_t(id)];                                      \
  if (b_.expect.empty()) b_.expect.resize(size_t(b_.elems));         \
  Expectation& x_ = b_.expect[size_t(element(id, idx))];             \
  x_.logical = logical_of(b_.shape, idx)

void TensorSet::expect_close(int id, std::initializer_list<int64_t> idx, double ref, double rtol,
                             double atol) {
  SSU_M3_EXPECT_SLOT(id, idx);
  x_.kind = Kind::Close;
  x_.value = ref;
  x_.rtol = float(rtol);
  x_.atol = float(atol);
}
void TensorSet::expect_zero(int id, std::initializer_list<int64_t> idx) {
  SSU_M3_EXPECT_SLOT(id, idx);
  x_.kind = Kind::Zero;
}
void TensorSet::expect_value(int id, std::initializer_list<int64_t> idx, double exact) {
  SSU_M3_EXPECT_SLOT(id, idx);
  x_.kind = Kind::Value;
  x_.value = exact;
}
void TensorSet::expect_bits(int id, std::initializer_list<int64_t> idx, uint64_t bits) {
  SSU_M3_EXPECT_SLOT(id, idx);
  x_.kind = Kind::Bits;
  x_.bits = bits;
}
void TensorSet::expect_angle(int id, std::initializer_list<int64_t> idx, double ref, double atol) {
  SSU_M3_EXPECT_SLOT(id, idx);
  x_.kind = Kind::Angle;
  x_.value = ref;
  x_.atol = float(atol);
}
#undef SSU_M3_EXPECT_SLOT

std::vector<uint8_t> TensorSet::fetch(int id) const {
  const Buf& b = *bufs_[size_t(id)];
  std::vector<uint8_t> got(b.bytes());
  mem_.download(got.data(), b.dev, b.bytes());
  return got;
}

uint64_t TensorSet::bits_at(int id, const std::vector<uint8_t>& fetched, int64_t e) const {
  const Buf& b = *bufs_[size_t(id)];
  uint64_t v = 0;
  std::memcpy(&v, &fetched[size_t(e) * b.es()], b.es());
  return v;
}

CheckResult TensorSet::check(const std::string& header, bool unchanged_only) const {
  int64_t bad = 0, checked = 0;
  std::vector<std::string> lines;
  auto fail = [&](const std::string& s) {
    if (lines.size() < 12) lines.push_back(s);
    ++bad;
  };
  const float f2pi = float(kTwoPi);
  for (const auto& bp : bufs_) {
    const Buf& b = *bp;
    const std::vector<uint8_t> got = fetch(int(&bp - &bufs_[0]));
    const size_t es = b.es();
    auto where = [&](int64_t e, const Expectation* x) {
      std::ostringstream o;
      o << b.name;
      if (x && x->logical >= 0) {
        std::vector<int64_t> idx(b.shape.size());
        int64_t rest = x->logical;
        for (size_t k = b.shape.size(); k-- > 0;) {
          idx[k] = rest % b.shape[k];
          rest /= b.shape[k];
        }
        o << "[";
        for (size_t k = 0; k < idx.size(); ++k) o << (k ? "," : "") << idx[k];
        o << "]";
      } else {
        o << " element " << (e - b.lead) << (e < b.lead || e >= b.elems - b.lead ? " (guard)" : "");
      }
      return o.str();
    };
    for (int64_t e = 0; e < b.elems; ++e) {
      ++checked;
      const uint8_t* gp = &got[size_t(e) * es];
      const uint8_t* ip = &b.image[size_t(e) * es];
      const Expectation* x = b.expect.empty() || unchanged_only ? nullptr : &b.expect[size_t(e)];
      const Kind kind = x ? x->kind : Kind::Unchanged;
      switch (kind) {
        case Kind::Unchanged:
          if (std::memcmp(gp, ip, es) != 0) {
            uint64_t was = 0, now = 0;
            std::memcpy(&was, ip, es);
            std::memcpy(&now, gp, es);
            fail(where(e, x) + " must be unchanged: was " + hex(was, es) + ", now " + hex(now, es) +
                 " (" + fmt(load_element(gp, b.dtype, 0)) + ")");
          }
          break;
        case Kind::Zero: {
          const double g = load_element(gp, b.dtype, 0);
          if (!(g == 0.0)) fail(where(e, x) + " must be exactly 0 (padding), got " + fmt(g));
          break;
        }
        case Kind::Value: {
          const double g = load_element(gp, b.dtype, 0);
          if (!(g == x->value)) fail(where(e, x) + " got " + fmt(g) + ", must be exactly " + fmt(x->value));
          break;
        }
        case Kind::Bits: {
          uint64_t now = 0;
          std::memcpy(&now, gp, es);
          if (now != x->bits)
            fail(where(e, x) + " got bits " + hex(now, es) + ", must be " + hex(x->bits, es));
          break;
        }
        case Kind::Close: {
          const double g = load_element(gp, b.dtype, 0);
          const double lim = double(x->atol) + double(x->rtol) * std::fabs(x->value);
          if (!(std::fabs(g - x->value) <= lim))
            fail(where(e, x) + " got " + fmt(g) + " ref " + fmt(x->value) + " |diff| " +
                 fmt(std::fabs(g - x->value)) + " > tol " + fmt(lim));
          break;
        }
        case Kind::Angle: {
          const double g = load_element(gp, b.dtype, 0);
          if (!(g >= 0.0 && g <= double(f2pi)))
            fail(where(e, x) + " = " + fmt(g) + " is outside [0, 2 pi)");
          else if (!(angle_distance(g, x->value) <= double(x->atol)))
            fail(where(e, x) + " got " + fmt(g) + " ref " + fmt(x->value) + " distance " +
                 fmt(angle_distance(g, x->value)) + " > " + fmt(double(x->atol)));
          break;
        }
      }
    }
  }
  CheckResult r;
  r.elements = checked;
  r.ok = bad == 0;
  if (!r.ok) {
    std::ostringstream o;
    o << header << "\n  " << bad << " bad element(s) of " << checked << " checked";
    for (const auto& l : lines) o << "\n    " << l;
    if (bad > int64_t(lines.size())) o << "\n    ...";
    r.message = o.str();
  }
  return r;
}

// ---------------------------------------------------------------------------
// describe
// ---------------------------------------------------------------------------
std::string describe(const StepCase& c) {
  std::ostringstream o;
  o << (c.tag && *c.tag ? c.tag : "step") << ": state=" << dname(c.state)
    << " input=" << dname(c.input) << " param=" << dname(c.param) << " weight=" << dname(c.weight)
    << " H=" << c.H << " P=" << c.P << " N=" << c.N << " R=" << c.R << " Bt=" << c.batch
    << (c.has_D ? " D" : " no_D") << (c.outproj ? " outproj" : " no_outproj")
    << (c.has_z ? " z" : "") << (c.update_prev ? " update_prev" : " keep_prev");
  if (c.has_src) o << " src=" << dname(c.index);
  else o << " no_src";
  o << " dst=" << dst_name(c.dst) << " pad=" << pad_name(c.pad) << (c.dst_pad ? " dst_pad" : "")
    << " layout=" << layout_name(c.layout) << " extra_slots=" << c.extra_slots
    << " seed=" << c.seed;
  return o.str();
}

std::string describe(const RotaryCase& c) {
  std::ostringstream o;
  o << (c.tag && *c.tag ? c.tag : "rotary") << ": qk=" << dname(c.qk) << " rate=" << dname(c.rate)
    << " dt=" << dname(c.dt) << " bias=" << dname(c.bias) << " H=" << c.H << " N=" << c.N
    << " R=" << c.R << " Sa=" << c.Sa << " Bt=" << c.batch
    << (c.halved ? " halved" : " interleaved") << (c.q_bias ? " q_bias" : "")
    << (c.k_bias ? " k_bias" : "") << (c.in_place ? " in_place" : "");
  if (c.has_src) o << " src=" << dname(c.index);
  else o << " no_src";
  o << " dst=" << dst_name(c.dst) << " pad=" << pad_name(c.pad)
    << " layout=" << layout_name(c.layout) << " seed=" << c.seed;
  return o.str();
}

std::string describe(const ChainConfig& c) {
  std::ostringstream o;
  o << c.tag << ": H=" << c.H << " P=" << c.P << " N=" << c.N << " R=" << c.R << " Sa=" << c.Sa
    << " Bt=" << c.batch << (c.halved ? " halved" : " interleaved") << (c.has_z ? " z" : "")
    << (c.outproj ? " outproj" : " no_outproj") << " steps=" << c.steps << " seed=" << c.seed;
  return o.str();
}

// ---------------------------------------------------------------------------
// Slots
// ---------------------------------------------------------------------------
namespace {

// Chooses src / dst slots. Without a src index the sequences own slots
// 0..Bt-1; every other slot is shuffled. Padded sequences (src padding) get
// a dst that is padding or a slot nobody uses (which must stay untouched).
Slots make_slots(Rng& rng, int64_t Bt, bool has_src, Dst dst, Pad pad, bool dst_pad,
                 ssu_dtype_t index, int extra) {
  Slots s;
  const bool pad_on = has_src && pad != Pad::None;
  const int64_t n_dst = dst == Dst::Distinct ? Bt : 0;
  const int64_t reserve = pad == Pad::PadSlotIdInRange ? 1 : 0;
  s.S = Bt + n_dst + reserve + std::max(extra, 0) + (pad_on ? 1 : 0);
  std::vector<int64_t> perm(size_t(s.S));
  for (int64_t i = 0; i < s.S; ++i) perm[size_t(i)] = i;
  const int64_t fixed = has_src ? 0 : Bt;
  for (int64_t i = s.S - 1; i > fixed; --i) {
    const int64_t j = fixed + rng.below(i - fixed + 1);
    std::swap(perm[size_t(i)], perm[size_t(j)]);
  }
  int64_t cursor = fixed;
  auto take = [&]() {
    if (cursor >= s.S - reserve) throw std::logic_error("make_slots: out of slots");
    return perm[size_t(cursor++)];
  };
  if (pad == Pad::PadSlotId) s.pad_slot_id = s.S + 5;
  if (pad == Pad::PadSlotIdInRange) s.pad_slot_id = perm[size_t(s.S - 1)];
  auto pad_value = [&]() -> int64_t {
    if ((pad == Pad::PadSlotId || pad == Pad::PadSlotIdInRange) && rng.chance(0.6))
      return s.pad_slot_id;
    switch (rng.below(4)) {
      case 0: return -1;
      case 1: return -2;
      case 2: return -37;
      default:
        return index == SSU_DTYPE_I64 ? std::numeric_limits<int64_t>::min()
                                      : int64_t(std::numeric_limits<int32_t>::min());
    }
  };
  s.live.assign(size_t(Bt), true);
  if (pad_on) {
    for (int64_t b = 0; b < Bt; ++b) s.live[size_t(b)] = !rng.chance(0.35);
    const int64_t one = rng.below(Bt);
    s.live[size_t(one)] = false;
    if (Bt > 1) s.live[size_t((one + 1 + rng.below(Bt - 1)) % Bt)] = true;
  }
  s.src.assign(size_t(Bt), 0);
  for (int64_t b = 0; b < Bt; ++b)
    s.src[size_t(b)] = !has_src ? b : s.live[size_t(b)] ? take() : pad_value();
  if (dst == Dst::Distinct) {
    const int64_t unused = pad_on ? take() : -1;  // a valid slot only padded lanes name
    s.dst.assign(size_t(Bt), 0);
    for (int64_t b = 0; b < Bt; ++b)
      s.dst[size_t(b)] = s.live[size_t(b)] ? take() : rng.chance(0.5) ? unused : pad_value();
  } else if (dst == Dst::Equal) {
    s.dst = s.src;
  }
  if (dst_pad && !s.dst.empty()) {
    for (int64_t b = 0; b < Bt; ++b)
      if (s.live[size_t(b)]) {
        s.dst[size_t(b)] = pad_value();
        break;
      }
  }
  return s;
}

bool is_pad(const Slots& s, int64_t v) { return v < 0 || v == s.pad_slot_id; }

int index_tensor(TensorSet& t, const char* name, ssu_dtype_t dtype, const std::vector<int64_t>& v,
                 int layout) {
  const int64_t Bt = int64_t(v.size());
  const int id = t.add(name, dtype, {Bt}, {layout == kDenseLayout ? 1 : layout == kAligned ? 2 : 3});
  for (int64_t b = 0; b < Bt; ++b) t.set(id, {b}, double(v[size_t(b)]));
  return id;
}

void set_index(TensorSet& t, int id, int64_t b, int64_t value) {
  // store_element goes through double: exact for every value the tests use,
  // INT64_MIN included.
  t.set(id, {b}, double(value));
}

}  // namespace

// ---------------------------------------------------------------------------
// StepProblem
// ---------------------------------------------------------------------------
StepProblem::StepProblem(const StepCase& c, Memory& mem) : c_(c), t_(mem) {
  Rng rng = Rng::seeded(c.seed * 1000003ull ^ (uint64_t(c.R) << 40) ^ (uint64_t(c.N) << 24) ^
                            (uint64_t(c.P) << 8) ^ uint64_t(c.H),
                        0x5eed5eedull);
  const int64_t Bt = c.batch, H = c.H, P = c.P, N = c.N, R = c.R;
  if (c.has_z && !c.outproj) throw std::logic_error("StepCase: z needs outproj");
  slots_ = make_slots(rng, Bt, c.has_src, c.dst, c.pad, c.dst_pad, c.index, c.extra_slots);
  const int64_t S = slots_.S;
  const int L = c.layout;
  const bool strided = L != kDenseLayout;
  auto pick = [&](int64_t aligned, int64_t odd) { return L == kOdd ? odd : strided ? aligned : 0; };

  // Pools.
  state = t_.add("pool.state", c.state, {S, H, P, N},
                 strides_of({S, H, P, N}, {}, {pick(32, 13), 0, 0, 0}));
  prev_B = t_.add("pool.prev_B", c.input, {S, R, H, N},
                  strides_of({S, R, H, N}, {}, {pick(16, 5), pick(8, 3), pick(8, 1), 0}));
  prev_x = t_.add("pool.prev_x", c.input, {S, H, P},
                  strides_of({S, H, P}, {}, {pick(8, 7), pick(8, 3), 0}));
  // Per (b, h) scalars: A is per head in a model, so broadcast it over the
  // batch (stride 0); dt column-major; trap padded.
  if (strided) {
    A = t_.add("A", c.param, {Bt, H}, {0, L == kOdd ? 3 : 1});
    dt = t_.add("dt", c.param, {Bt, H}, strides_of({Bt, H}, {1, 0}, {pick(2, 1), 0}));
    trap = t_.add("trap", c.param, {Bt, H}, {H * 2 + pick(0, 1), 2});
  } else {
    A = t_.add("A", c.param, {Bt, H}, strides_of({Bt, H}));
    dt = t_.add("dt", c.param, {Bt, H}, strides_of({Bt, H}));
    trap = t_.add("trap", c.param, {Bt, H}, strides_of({Bt, H}));
  }
  const std::vector<int64_t> brhn = {Bt, R, H, N}, bhp = {Bt, H, P}, rhp = {R, H, P};
  B = t_.add("B", c.input, brhn, strides_of(brhn, {}, {pick(8, 3), pick(8, 1), pick(16, 5), 0}));
  C = t_.add("C", c.input, brhn, strides_of(brhn, {}, {pick(24, 7), 0, pick(8, 3), 0}));
  x = t_.add("x", c.input, bhp, strides_of(bhp, {}, {pick(8, 1), pick(8, 3), 0}));
  if (c.has_z) z = t_.add("z", c.input, bhp, strides_of(bhp, {}, {pick(16, 5), 0, 0}));
  if (c.outproj)
    out = t_.add("out", c.input, bhp, strides_of(bhp, {}, {pick(8, 1), pick(8, 5), 0}));
  else
    out = t_.add("out", c.input, {Bt, R, H, P},
                 strides_of({Bt, R, H, P}, {}, {pick(8, 3), pick(8, 1), pick(16, 1), 0}));
  if (c.has_D) D = t_.add("D", c.weight, {H}, {strided ? (L == kOdd ? 3 : 2) : 1});
  // Weights, any strides: p outermost in the strided layouts.
  const std::vector<int> wo = strided ? std::vector<int>{2, 0, 1} : std::vector<int>{};
  xproj = t_.add("xproj", c.weight, rhp, strides_of(rhp, wo, {0, pick(0, 1), 0}));
  if (c.has_z) zproj = t_.add("zproj", c.weight, rhp, strides_of(rhp, wo, {pick(4, 1), 0, 0}));
  if (c.outproj) outproj = t_.add("outproj", c.weight, rhp, strides_of(rhp, {}, {pick(8, 3), 0, 0}));
  if (c.has_src) src = index_tensor(t_, "src_index", c.index, slots_.src, L);
  if (!slots_.dst.empty()) dst = index_tensor(t_, "dst_index", c.index, slots_.dst, L);

  // Values: every slot of every pool (untouched ones are compared bit for
  // bit), fresh model-like inputs.
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t n = 0; n < N; ++n) t_.set(state, {s, h, p, n}, rng.nonzero_normal());
        t_.set(prev_x, {s, h, p}, rng.nonzero_normal());
      }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) t_.set(prev_B, {s, r, h, n}, rng.nonzero_normal());
  }
  for (int64_t h = 0; h < H; ++h) {
    const double a = -rng.log_uniform(1.0, 16.0);
    for (int64_t b = 0; b < Bt; ++b) t_.set(A, {b, h}, strided ? a : -rng.log_uniform(1.0, 16.0));
    if (c.has_D) t_.set(D, {h}, rng.nonzero_normal());
  }
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t h = 0; h < H; ++h) {
      t_.set(dt, {b, h}, rng.log_uniform(0.001, 0.2));
      t_.set(trap, {b, h}, rng.uniform(0.05, 0.95));
    }
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) {
          t_.set(B, {b, r, h, n}, rng.nonzero_normal());
          t_.set(C, {b, r, h, n}, rng.nonzero_normal());
        }
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p) {
        t_.set(x, {b, h, p}, rng.nonzero_normal());
        if (c.has_z) t_.set(z, {b, h, p}, rng.nonzero_normal());
      }
  const double wscale = 1.0 / std::sqrt(double(R));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p) {
        t_.set(xproj, {r, h, p}, rng.nonzero_normal() * wscale);
        if (c.has_z) t_.set(zproj, {r, h, p}, rng.nonzero_normal());
        if (c.outproj) t_.set(outproj, {r, h, p}, rng.nonzero_normal() * wscale);
      }

  t_.upload();
  std::memset(&pool_, 0, sizeof pool_);
  pool_.struct_size = uint32_t(sizeof pool_);
  pool_.state = t_.desc(state);
  pool_.prev_B = t_.desc(prev_B);
  pool_.prev_x = t_.desc(prev_x);
  expect_reference();
}

ssu_mamba3_step_args_t StepProblem::args() const {
  ssu_mamba3_step_args_t a = SSU_MAMBA3_STEP_ARGS_INIT;
  a.flags = c_.update_prev ? SSU_MAMBA3_UPDATE_PREV : 0u;
  a.pad_slot_id = slots_.pad_slot_id;
  a.pool = &pool_;
  a.A = t_.desc(A);
  a.dt = t_.desc(dt);
  a.trap = t_.desc(trap);
  a.B = t_.desc(B);
  a.C = t_.desc(C);
  a.x = t_.desc(x);
  a.D = t_.desc(D);
  a.xproj = t_.desc(xproj);
  a.z = t_.desc(z);
  a.zproj = t_.desc(zproj);
  a.outproj = t_.desc(outproj);
  a.out = t_.desc(out);
  a.src_index = t_.desc(src);
  a.dst_index = t_.desc(dst);
  a.error_word = nullptr;
  return a;
}

void StepProblem::expect_reference() {
  const StepCase& c = c_;
  const int64_t Bt = c.batch, H = c.H, P = c.P, N = c.N, R = c.R;
  Mamba3StepRef m;
  m.batch = Bt; m.H = H; m.P = P; m.N = N; m.R = R;
  m.has_D = c.has_D; m.has_z = c.has_z; m.has_outproj = c.outproj;
  m.A.resize(size_t(Bt * H));
  m.dt.resize(m.A.size());
  m.trap.resize(m.A.size());
  m.B.resize(size_t(Bt * R * H * N));
  m.C.resize(m.B.size());
  m.prev_B.assign(m.B.size(), 0.0);
  m.x.resize(size_t(Bt * H * P));
  m.prev_x.assign(m.x.size(), 0.0);
  if (c.has_z) m.z.resize(m.x.size());
  m.state.assign(size_t(Bt * H * P * N), 0.0);
  if (c.has_D) m.D.resize(size_t(H));
  m.xproj.resize(size_t(R * H * P));
  if (c.has_z) m.zproj.resize(m.xproj.size());
  if (c.outproj) m.outproj.resize(m.xproj.size());
  for (int64_t h = 0; h < H; ++h) {
    if (c.has_D) m.D[size_t(h)] = t_.get(D, {h});
    for (int64_t r = 0; r < R; ++r)
      for (int64_t p = 0; p < P; ++p) {
        const size_t at = size_t((r * H + h) * P + p);
        m.xproj[at] = t_.get(xproj, {r, h, p});
        if (c.has_z) m.zproj[at] = t_.get(zproj, {r, h, p});
        if (c.outproj) m.outproj[at] = t_.get(outproj, {r, h, p});
      }
  }
  for (int64_t b = 0; b < Bt; ++b) {
    const bool live = slots_.live[size_t(b)];
    const int64_t s = slots_.src[size_t(b)];
    for (int64_t h = 0; h < H; ++h) {
      const size_t bh = size_t(b * H + h);
      m.A[bh] = t_.get(A, {b, h});
      m.dt[bh] = t_.get(dt, {b, h});
      m.trap[bh] = t_.get(trap, {b, h});
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) {
          const size_t at = size_t(((b * R + r) * H + h) * N + n);
          m.B[at] = t_.get(B, {b, r, h, n});
          m.C[at] = t_.get(C, {b, r, h, n});
          if (live) m.prev_B[at] = t_.get(prev_B, {s, r, h, n});
        }
      for (int64_t p = 0; p < P; ++p) {
        const size_t at = size_t((b * H + h) * P + p);
        m.x[at] = t_.get(x, {b, h, p});
        if (c.has_z) m.z[at] = t_.get(z, {b, h, p});
        if (live) {
          m.prev_x[at] = t_.get(prev_x, {s, h, p});
          for (int64_t n = 0; n < N; ++n)
            m.state[at * size_t(N) + size_t(n)] = t_.get(state, {s, h, p, n});
        }
      }
    }
  }
  const Mamba3StepResult res = reference_mamba3_step(m);

  t_.clear_expectations();
  const Tolerance ot = out_tolerance(c.input), st = state_tolerance(c.state);
  for (int64_t b = 0; b < Bt; ++b) {
    const bool live = slots_.live[size_t(b)];
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p) {
        if (c.outproj) {
          const double v = res.out[size_t((b * H + h) * P + p)];
          if (live) t_.expect_close(out, {b, h, p}, v, ot.rtol, ot.atol);
          else t_.expect_zero(out, {b, h, p});
        } else {
          for (int64_t r = 0; r < R; ++r) {
            const double v = res.out[size_t(((b * R + r) * H + h) * P + p)];
            if (live) t_.expect_close(out, {b, r, h, p}, v, ot.rtol, ot.atol);
            else t_.expect_zero(out, {b, r, h, p});
          }
        }
      }
    if (!live) continue;
    const int64_t d = slots_.dst.empty() ? slots_.src[size_t(b)] : slots_.dst[size_t(b)];
    if (is_pad(slots_, d)) continue;  // a padding dst entry skips the stores
    for (int64_t h = 0; h < H; ++h)
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t n = 0; n < N; ++n)
          t_.expect_close(state, {d, h, p, n}, res.state[size_t(((b * H + h) * P + p) * N + n)],
                          st.rtol, st.atol);
        if (c.update_prev) t_.expect_bits(prev_x, {d, h, p}, t_.bits(x, {b, h, p}));
      }
    if (c.update_prev)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t n = 0; n < N; ++n)
            t_.expect_bits(prev_B, {d, r, h, n}, t_.bits(B, {b, r, h, n}));
  }
}

CheckResult StepProblem::check() const { return t_.check(describe(c_)); }

CheckResult StepProblem::check_unchanged() const {
  return t_.check(describe(c_) + "\n  expected nothing to be written", true);
}

void StepProblem::expect_padded(int64_t b) {
  slots_.live.at(size_t(b)) = false;
  expect_reference();
}

void StepProblem::poke_index(bool to_dst, int64_t b, int64_t value) {
  const int id = to_dst ? dst : src;
  if (id < 0) throw std::logic_error("poke_index: no such index tensor");
  set_index(t_, id, b, value);
  t_.upload(id);
}

// ---------------------------------------------------------------------------
// RotaryProblem
// ---------------------------------------------------------------------------
RotaryProblem::RotaryProblem(const RotaryCase& c, Memory& mem) : c_(c), t_(mem) {
  Rng rng = Rng::seeded(c.seed * 7919ull ^ (uint64_t(c.R) << 40) ^ (uint64_t(c.N) << 24) ^
                            (uint64_t(c.Sa) << 8) ^ uint64_t(c.H),
                        0x5eed5eedull);
  const int64_t Bt = c.batch, H = c.H, N = c.N, R = c.R, Sa = c.Sa;
  slots_ = make_slots(rng, Bt, c.has_src, c.dst, c.pad, false, c.index, c.extra_slots);
  const int64_t S = slots_.S;
  const int L = c.layout;
  const bool strided = L != kDenseLayout;
  auto pick = [&](int64_t aligned, int64_t odd) { return L == kOdd ? odd : strided ? aligned : 0; };

  angle = t_.add("pool.angle_state", SSU_DTYPE_F32, {S, H, Sa},
                 strides_of({S, H, Sa}, {}, {pick(8, 5), pick(4, 1), 0}));
  const std::vector<int64_t> bhs = {Bt, H, Sa}, brhn = {Bt, R, H, N}, rhn = {R, H, N};
  // angle_rate and dt take any strides: Sa outermost in the strided layouts.
  rate = t_.add("angle_rate", c.rate, bhs,
                strides_of(bhs, strided ? std::vector<int>{2, 0, 1} : std::vector<int>{},
                           {0, pick(0, 1), 0}));
  dt = t_.add("dt", c.dt, {Bt, H},
              strides_of({Bt, H}, strided ? std::vector<int>{1, 0} : std::vector<int>{},
                         {pick(1, 1), 0}));
  q = t_.add("q", c.qk, brhn, strides_of(brhn, {}, {pick(8, 3), pick(8, 1), pick(8, 5), 0}));
  k = t_.add("k", c.qk, brhn, strides_of(brhn, {}, {pick(16, 1), 0, pick(8, 3), 0}));
  if (c.q_bias) q_bias = t_.add("q_bias", c.bias, rhn, strides_of(rhn, {}, {pick(4, 1), pick(4, 3), 0}));
  if (c.k_bias)
    k_bias = t_.add("k_bias", c.bias, rhn,
                    strides_of(rhn, strided ? std::vector<int>{2, 1, 0} : std::vector<int>{}, {}));
  if (c.in_place) {
    q_out = q;
    k_out = k;
  } else {
    q_out = t_.add("q_out", c.qk, brhn, strides_of(brhn, {}, {pick(8, 1), 0, pick(16, 7), 0}));
    k_out = t_.add("k_out", c.qk, brhn, strides_of(brhn, {}, {0, pick(8, 3), 0, 0}));
  }
  if (c.has_src) src = index_tensor(t_, "src_index", c.index, slots_.src, L);
  if (!slots_.dst.empty()) dst = index_tensor(t_, "dst_index", c.index, slots_.dst, L);

  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sa; ++i) t_.set(angle, {s, h, i}, rng.uniform(0.0, 6.28));
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t h = 0; h < H; ++h) {
      // Steps up to about pi either way, so that angles wrap past both ends.
      t_.set(dt, {b, h}, rng.log_uniform(0.01, 1.0));
      for (int64_t i = 0; i < Sa; ++i) t_.set(rate, {b, h, i}, 1.5 * rng.nonzero_normal());
    }
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) {
          t_.set(q, {b, r, h, n}, rng.nonzero_normal());
          t_.set(k, {b, r, h, n}, rng.nonzero_normal());
        }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n) {
        if (c.q_bias) t_.set(q_bias, {r, h, n}, 0.5 * rng.nonzero_normal());
        if (c.k_bias) t_.set(k_bias, {r, h, n}, 0.5 * rng.nonzero_normal());
      }

  t_.upload();
  std::memset(&pool_, 0, sizeof pool_);
  pool_.struct_size = uint32_t(sizeof pool_);
  pool_.angle_state = t_.desc(angle);
  expect_reference();
}

ssu_mamba3_rotary_args_t RotaryProblem::args() const {
  ssu_mamba3_rotary_args_t a = SSU_MAMBA3_ROTARY_ARGS_INIT;
  a.flags = c_.halved ? SSU_MAMBA3_ROTARY_HALVED : 0u;
  a.pad_slot_id = slots_.pad_slot_id;
  a.pool = &pool_;
  a.angle_rate = t_.desc(rate);
  a.dt = t_.desc(dt);
  a.q = t_.desc(q);
  a.k = t_.desc(k);
  a.q_bias = t_.desc(q_bias);
  a.k_bias = t_.desc(k_bias);
  a.q_out = t_.desc(q_out);
  a.k_out = t_.desc(k_out);
  a.src_index = t_.desc(src);
  a.dst_index = t_.desc(dst);
  a.error_word = nullptr;
  return a;
}

void RotaryProblem::expect_reference() {
  const RotaryCase& c = c_;
  const int64_t Bt = c.batch, H = c.H, N = c.N, R = c.R, Sa = c.Sa;
  RotaryRef m;
  m.batch = Bt; m.H = H; m.N = N; m.R = R; m.Sa = Sa;
  m.halved = c.halved; m.has_q_bias = c.q_bias; m.has_k_bias = c.k_bias;
  m.angle.assign(size_t(Bt * H * Sa), 0.0);
  m.rate.resize(m.angle.size());
  m.dt.resize(size_t(Bt * H));
  m.q.resize(size_t(Bt * R * H * N));
  m.k.resize(m.q.size());
  if (c.q_bias) m.q_bias.resize(size_t(R * H * N));
  if (c.k_bias) m.k_bias.resize(size_t(R * H * N));
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t h = 0; h < H; ++h) {
      m.dt[size_t(b * H + h)] = t_.get(dt, {b, h});
      for (int64_t i = 0; i < Sa; ++i) {
        const size_t at = size_t((b * H + h) * Sa + i);
        m.rate[at] = t_.get(rate, {b, h, i});
        if (slots_.live[size_t(b)]) m.angle[at] = t_.get(angle, {slots_.src[size_t(b)], h, i});
      }
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) {
          const size_t at = size_t(((b * R + r) * H + h) * N + n);
          m.q[at] = t_.get(q, {b, r, h, n});
          m.k[at] = t_.get(k, {b, r, h, n});
        }
    }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t n = 0; n < N; ++n) {
        const size_t at = size_t((r * H + h) * N + n);
        if (c.q_bias) m.q_bias[at] = t_.get(q_bias, {r, h, n});
        if (c.k_bias) m.k_bias[at] = t_.get(k_bias, {r, h, n});
      }
  const RotaryResult res = reference_mamba3_rotary(m);

  t_.clear_expectations();
  const Tolerance ot = out_tolerance(c.qk);
  for (int64_t b = 0; b < Bt; ++b) {
    const bool live = slots_.live[size_t(b)];
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) {
          const size_t at = size_t(((b * R + r) * H + h) * N + n);
          if (!live) {
            t_.expect_zero(q_out, {b, r, h, n});
            t_.expect_zero(k_out, {b, r, h, n});
            continue;
          }
          if (rotary_partner(n, N, Sa, c.halved, nullptr) < 0) {
            const size_t bat = size_t((r * H + h) * N + n);
            t_.expect_value(q_out, {b, r, h, n},
                            rotary_passthrough(m.q[at], c.q_bias ? m.q_bias[bat] : 0.0, c.qk));
            t_.expect_value(k_out, {b, r, h, n},
                            rotary_passthrough(m.k[at], c.k_bias ? m.k_bias[bat] : 0.0, c.qk));
          } else {
            t_.expect_close(q_out, {b, r, h, n}, res.q[at], ot.rtol, ot.atol);
            t_.expect_close(k_out, {b, r, h, n}, res.k[at], ot.rtol, ot.atol);
          }
        }
    if (!live) continue;
    const int64_t d = slots_.dst.empty() ? slots_.src[size_t(b)] : slots_.dst[size_t(b)];
    if (is_pad(slots_, d)) continue;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sa; ++i)
        t_.expect_angle(angle, {d, h, i}, res.angle[size_t((b * H + h) * Sa + i)], kAngleAtol);
  }
}

CheckResult RotaryProblem::check() const { return t_.check(describe(c_)); }
CheckResult RotaryProblem::check_unchanged() const {
  return t_.check(describe(c_) + "\n  expected nothing to be written", true);
}
void RotaryProblem::expect_padded(int64_t b) {
  slots_.live.at(size_t(b)) = false;
  expect_reference();
}

void RotaryProblem::poke_index(bool to_dst, int64_t b, int64_t value) {
  const int id = to_dst ? dst : src;
  if (id < 0) throw std::logic_error("poke_index: no such index tensor");
  set_index(t_, id, b, value);
  t_.upload(id);
}

// ---------------------------------------------------------------------------
// Runners
// ---------------------------------------------------------------------------
namespace {

// Plans and runs one step; returns false with `r` filled on a failed call.
bool step_once(ssu_context_t ctx, Memory& mem, const ssu_mamba3_step_args_t& a,
               const std::string& header, CheckResult& r) {
  ssu_plan_t plan = nullptr;
  ssu_status_t st = ssu_plan_create_mamba3_step(ctx, &a, nullptr, &plan);
  if (st != SSU_SUCCESS) {
    r = failed_call(header, "ssu_plan_create_mamba3_step", st, ssu_last_error_message());
    return false;
  }
  st = ssu_plan_execute_mamba3_step(plan, &a, nullptr);
  const std::string msg = st == SSU_SUCCESS ? "" : ssu_last_error_message();
  mem.synchronize(nullptr);
  ssu_plan_destroy(plan);
  if (st != SSU_SUCCESS) {
    r = failed_call(header, "ssu_plan_execute_mamba3_step", st, msg);
    return false;
  }
  return true;
}

}  // namespace

CheckResult run_step_case(ssu_context_t ctx, Memory& mem, const StepCase& c) {
  StepProblem p(c, mem);
  CheckResult r;
  if (!step_once(ctx, mem, p.args(), describe(c), r)) return r;
  return p.check();
}

CheckResult run_rotary_case(ssu_context_t ctx, Memory& mem, const RotaryCase& c) {
  RotaryProblem p(c, mem);
  const ssu_mamba3_rotary_args_t a = p.args();
  ssu_plan_t plan = nullptr;
  ssu_status_t st = ssu_plan_create_mamba3_rotary(ctx, &a, nullptr, &plan);
  if (st != SSU_SUCCESS)
    return failed_call(describe(c), "ssu_plan_create_mamba3_rotary", st, ssu_last_error_message());
  st = ssu_plan_execute_mamba3_rotary(plan, &a, nullptr);
  const std::string msg = st == SSU_SUCCESS ? "" : ssu_last_error_message();
  mem.synchronize(nullptr);
  ssu_plan_destroy(plan);
  if (st != SSU_SUCCESS) return failed_call(describe(c), "ssu_plan_execute_mamba3_rotary", st, msg);
  return p.check();
}

CheckResult run_gather_scatter_case(ssu_context_t ctx, Memory& mem, const StepCase& c) {
  const std::string header = describe(c) + "\n  pooled call vs gather -> dense call -> scatter";
  StepProblem p(c, mem);
  TensorSet& t = p.tensors();
  const Slots& sl = p.slots();
  const int64_t Bt = c.batch, H = c.H, P = c.P, N = c.N, R = c.R;
  CheckResult r;

  // The dense problem: pools of Bt slots (slot = b), no indices, a fresh out;
  // the per-call inputs are the pooled problem's own tensors. Padded lanes
  // get some other slot's rows (their results are not used).
  TensorSet d(mem);
  const int dstate = d.add("dense.state", c.state, {Bt, H, P, N}, strides_of({Bt, H, P, N}));
  const int dprevB = d.add("dense.prev_B", c.input, {Bt, R, H, N}, strides_of({Bt, R, H, N}));
  const int dprevx = d.add("dense.prev_x", c.input, {Bt, H, P}, strides_of({Bt, H, P}));
  const std::vector<int64_t> oshape =
      c.outproj ? std::vector<int64_t>{Bt, H, P} : std::vector<int64_t>{Bt, R, H, P};
  const int dout = d.add("dense.out", c.input, oshape, strides_of(oshape));
  for (int64_t b = 0; b < Bt; ++b) {
    const int64_t s = sl.live[size_t(b)] ? sl.src[size_t(b)] : 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t pp = 0; pp < P; ++pp) {
        for (int64_t n = 0; n < N; ++n) d.copy_bits(dstate, {b, h, pp, n}, t, p.state, {s, h, pp, n});
        d.copy_bits(dprevx, {b, h, pp}, t, p.prev_x, {s, h, pp});
      }
    for (int64_t rr = 0; rr < R; ++rr)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) d.copy_bits(dprevB, {b, rr, h, n}, t, p.prev_B, {s, rr, h, n});
  }
  d.upload();
  ssu_state_pool_t dpool = SSU_STATE_POOL_INIT;
  dpool.state = d.desc(dstate);
  dpool.prev_B = d.desc(dprevB);
  dpool.prev_x = d.desc(dprevx);
  ssu_mamba3_step_args_t da = p.args();
  da.pool = &dpool;
  da.out = d.desc(dout);
  std::memset(&da.src_index, 0, sizeof da.src_index);
  std::memset(&da.dst_index, 0, sizeof da.dst_index);
  da.pad_slot_id = -1;
  if (!step_once(ctx, mem, da, header + " (dense call)", r)) return r;
  if (!step_once(ctx, mem, p.args(), header + " (pooled call)", r)) return r;

  // Scatter: the expected pooled buffers, bit for bit.
  const std::vector<uint8_t> gstate = d.fetch(dstate), gprevB = d.fetch(dprevB),
                             gprevx = d.fetch(dprevx), gout = d.fetch(dout);
  t.clear_expectations();
  for (int64_t b = 0; b < Bt; ++b) {
    const bool live = sl.live[size_t(b)];
    for (int64_t h = 0; h < H; ++h)
      for (int64_t pp = 0; pp < P; ++pp) {
        if (c.outproj) {
          if (live) t.expect_bits(p.out, {b, h, pp}, d.bits_at(dout, gout, d.element(dout, {b, h, pp})));
          else t.expect_zero(p.out, {b, h, pp});
        } else {
          for (int64_t rr = 0; rr < R; ++rr) {
            if (live)
              t.expect_bits(p.out, {b, rr, h, pp},
                            d.bits_at(dout, gout, d.element(dout, {b, rr, h, pp})));
            else t.expect_zero(p.out, {b, rr, h, pp});
          }
        }
      }
    if (!live) continue;
    const int64_t dslot = sl.dst.empty() ? sl.src[size_t(b)] : sl.dst[size_t(b)];
    if (dslot < 0 || dslot == sl.pad_slot_id) continue;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t pp = 0; pp < P; ++pp) {
        for (int64_t n = 0; n < N; ++n)
          t.expect_bits(p.state, {dslot, h, pp, n},
                        d.bits_at(dstate, gstate, d.element(dstate, {b, h, pp, n})));
        if (c.update_prev)
          t.expect_bits(p.prev_x, {dslot, h, pp}, d.bits_at(dprevx, gprevx, d.element(dprevx, {b, h, pp})));
      }
    if (c.update_prev)
      for (int64_t rr = 0; rr < R; ++rr)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t n = 0; n < N; ++n)
            t.expect_bits(p.prev_B, {dslot, rr, h, n},
                          d.bits_at(dprevB, gprevB, d.element(dprevB, {b, rr, h, n})));
  }
  return t.check(header);
}

// ---------------------------------------------------------------------------
// The long chain
// ---------------------------------------------------------------------------
CheckResult run_chain(ssu_context_t ctx, Memory& mem, const ChainConfig& c) {
  const std::string header = describe(c);
  Rng rng = Rng::seeded(c.seed * 31337ull + 17, 0x5eed5eedull);
  const int64_t Bt = c.batch, H = c.H, P = c.P, N = c.N, R = c.R, Sa = c.Sa;
  const int64_t S = 2 * Bt + 1;
  const ssu_dtype_t F = SSU_DTYPE_F32;
  TensorSet t(mem);
  const std::vector<int64_t> brhn = {Bt, R, H, N}, bhp = {Bt, H, P}, rhp = {R, H, P};
  const int angle = t.add("pool.angle_state", F, {S, H, Sa}, strides_of({S, H, Sa}, {}, {4, 0, 0}));
  const int state = t.add("pool.state", F, {S, H, P, N}, strides_of({S, H, P, N}, {}, {16, 0, 0, 0}));
  const int prevB = t.add("pool.prev_B", F, {S, R, H, N}, strides_of({S, R, H, N}, {}, {4, 0, 0, 0}));
  const int prevx = t.add("pool.prev_x", F, {S, H, P}, strides_of({S, H, P}, {}, {4, 0, 0}));
  const int rate = t.add("angle_rate", F, {Bt, H, Sa}, strides_of({Bt, H, Sa}));
  const int dt = t.add("dt", F, {Bt, H}, strides_of({Bt, H}));
  const int A = t.add("A", F, {Bt, H}, {0, 1});
  const int trap = t.add("trap", F, {Bt, H}, strides_of({Bt, H}));
  const int qraw = t.add("q", F, brhn, strides_of(brhn));
  const int kraw = t.add("k", F, brhn, strides_of(brhn));
  const int qb = t.add("q_bias", F, {R, H, N}, strides_of({R, H, N}));
  const int kb = t.add("k_bias", F, {R, H, N}, strides_of({R, H, N}));
  const int Cq = t.add("C (q_out)", F, brhn, strides_of(brhn));
  const int Bk = t.add("B (k_out)", F, brhn, strides_of(brhn));
  const int x = t.add("x", F, bhp, strides_of(bhp));
  const int z = c.has_z ? t.add("z", F, bhp, strides_of(bhp)) : -1;
  const int D = t.add("D", F, {H}, {1});
  const int xproj = t.add("xproj", F, rhp, strides_of(rhp));
  const int zproj = c.has_z ? t.add("zproj", F, rhp, strides_of(rhp)) : -1;
  const int outproj = c.outproj ? t.add("outproj", F, rhp, strides_of(rhp)) : -1;
  const std::vector<int64_t> oshape = c.outproj ? bhp : std::vector<int64_t>{Bt, R, H, P};
  const int out = t.add("out", F, oshape, strides_of(oshape));
  std::vector<int64_t> slot(static_cast<size_t>(Bt));
  for (int64_t b = 0; b < Bt; ++b) slot[size_t(b)] = 2 * b + 1;  // odd slots; even ones untouched
  const int src = index_tensor(t, "src_index", SSU_DTYPE_I32, slot, kDenseLayout);

  // Live slots start as a fresh sequence (zero state, zero previous token,
  // zero angles); the others hold random values that must survive.
  for (int64_t s = 0; s < S; ++s) {
    const bool live = s % 2 == 1;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Sa; ++i) t.set(angle, {s, h, i}, live ? 0.0 : rng.uniform(0, 6));
      for (int64_t p = 0; p < P; ++p) {
        t.set(prevx, {s, h, p}, live ? 0.0 : rng.normal());
        for (int64_t n = 0; n < N; ++n) t.set(state, {s, h, p, n}, live ? 0.0 : rng.normal());
      }
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < N; ++n) t.set(prevB, {s, r, h, n}, live ? 0.0 : rng.normal());
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    t.set(A, {0, h}, -rng.log_uniform(1.0, 8.0));
    t.set(D, {h}, rng.nonzero_normal());
  }
  const double wscale = 1.0 / std::sqrt(double(R));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t p = 0; p < P; ++p) {
        t.set(xproj, {r, h, p}, rng.nonzero_normal() * wscale);
        if (c.has_z) t.set(zproj, {r, h, p}, rng.nonzero_normal());
        if (c.outproj) t.set(outproj, {r, h, p}, rng.nonzero_normal() * wscale);
      }
      for (int64_t n = 0; n < N; ++n) {
        t.set(qb, {r, h, n}, 0.3 * rng.nonzero_normal());
        t.set(kb, {r, h, n}, 0.3 * rng.nonzero_normal());
      }
    }
  t.upload();

  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  pool.state = t.desc(state);
  pool.prev_B = t.desc(prevB);
  pool.prev_x = t.desc(prevx);
  pool.angle_state = t.desc(angle);
  ssu_mamba3_rotary_args_t ra = SSU_MAMBA3_ROTARY_ARGS_INIT;
  ra.flags = c.halved ? SSU_MAMBA3_ROTARY_HALVED : 0u;
  ra.pool = &pool;
  ra.angle_rate = t.desc(rate);
  ra.dt = t.desc(dt);
  ra.q = t.desc(qraw);
  ra.k = t.desc(kraw);
  ra.q_bias = t.desc(qb);
  ra.k_bias = t.desc(kb);
  ra.q_out = t.desc(Cq);
  ra.k_out = t.desc(Bk);
  ra.src_index = t.desc(src);
  ssu_mamba3_step_args_t sa = SSU_MAMBA3_STEP_ARGS_INIT;
  sa.flags = SSU_MAMBA3_UPDATE_PREV;
  sa.pool = &pool;
  sa.A = t.desc(A);
  sa.dt = t.desc(dt);
  sa.trap = t.desc(trap);
  sa.B = t.desc(Bk);
  sa.C = t.desc(Cq);
  sa.x = t.desc(x);
  sa.D = t.desc(D);
  sa.xproj = t.desc(xproj);
  sa.z = t.desc(z);
  sa.zproj = t.desc(zproj);
  sa.outproj = t.desc(outproj);
  sa.out = t.desc(out);
  sa.src_index = t.desc(src);

  ssu_plan_t rplan = nullptr, splan = nullptr;
  ssu_status_t st = ssu_plan_create_mamba3_rotary(ctx, &ra, nullptr, &rplan);
  if (st != SSU_SUCCESS)
    return failed_call(header, "ssu_plan_create_mamba3_rotary", st, ssu_last_error_message());
  st = ssu_plan_create_mamba3_step(ctx, &sa, nullptr, &splan);
  if (st != SSU_SUCCESS) {
    ssu_plan_destroy(rplan);
    return failed_call(header, "ssu_plan_create_mamba3_step", st, ssu_last_error_message());
  }

  // The float64 run: per sequence state, previous token and angles.
  RotaryRef rr;
  rr.batch = Bt; rr.H = H; rr.N = N; rr.R = R; rr.Sa = Sa;
  rr.halved = c.halved; rr.has_q_bias = rr.has_k_bias = true;
  rr.angle.assign(size_t(Bt * H * Sa), 0.0);
  rr.rate.resize(rr.angle.size());
  rr.dt.resize(size_t(Bt * H));
  rr.q.resize(size_t(Bt * R * H * N));
  rr.k.resize(rr.q.size());
  rr.q_bias.resize(size_t(R * H * N));
  rr.k_bias.resize(rr.q_bias.size());
  Mamba3StepRef sr;
  sr.batch = Bt; sr.H = H; sr.P = P; sr.N = N; sr.R = R;
  sr.has_D = true; sr.has_z = c.has_z; sr.has_outproj = c.outproj;
  sr.A.resize(size_t(Bt * H));
  sr.dt.resize(sr.A.size());
  sr.trap.resize(sr.A.size());
  sr.x.resize(size_t(Bt * H * P));
  if (c.has_z) sr.z.resize(sr.x.size());
  sr.D.resize(size_t(H));
  sr.xproj.resize(size_t(R * H * P));
  if (c.has_z) sr.zproj.resize(sr.xproj.size());
  if (c.outproj) sr.outproj.resize(sr.xproj.size());
  sr.state.assign(size_t(Bt * H * P * N), 0.0);
  sr.prev_B.assign(rr.q.size(), 0.0);
  sr.prev_x.assign(sr.x.size(), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    sr.D[size_t(h)] = t.get(D, {h});
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t p = 0; p < P; ++p) {
        const size_t at = size_t((r * H + h) * P + p);
        sr.xproj[at] = t.get(xproj, {r, h, p});
        if (c.has_z) sr.zproj[at] = t.get(zproj, {r, h, p});
        if (c.outproj) sr.outproj[at] = t.get(outproj, {r, h, p});
      }
      for (int64_t n = 0; n < N; ++n) {
        rr.q_bias[size_t((r * H + h) * N + n)] = t.get(qb, {r, h, n});
        rr.k_bias[size_t((r * H + h) * N + n)] = t.get(kb, {r, h, n});
      }
    }
  }

  CheckResult result;
  int64_t checked = 0;
  for (int64_t step = 1; step <= c.steps; ++step) {
    for (int64_t b = 0; b < Bt; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const size_t bh = size_t(b * H + h);
        t.set(dt, {b, h}, rng.log_uniform(0.002, 0.1));
        t.set(trap, {b, h}, rng.uniform(0.05, 0.95));
        rr.dt[bh] = sr.dt[bh] = t.get(dt, {b, h});
        sr.trap[bh] = t.get(trap, {b, h});
        sr.A[bh] = t.get(A, {b, h});
        for (int64_t i = 0; i < Sa; ++i) {
          t.set(rate, {b, h, i}, 2.0 * rng.nonzero_normal());
          rr.rate[size_t(bh * size_t(Sa) + size_t(i))] = t.get(rate, {b, h, i});
        }
        for (int64_t r = 0; r < R; ++r)
          for (int64_t n = 0; n < N; ++n) {
            const size_t at = size_t(((b * R + r) * H + h) * N + n);
            t.set(qraw, {b, r, h, n}, rng.nonzero_normal());
            t.set(kraw, {b, r, h, n}, rng.nonzero_normal());
            rr.q[at] = t.get(qraw, {b, r, h, n});
            rr.k[at] = t.get(kraw, {b, r, h, n});
          }
        for (int64_t p = 0; p < P; ++p) {
          const size_t at = size_t((b * H + h) * P + p);
          t.set(x, {b, h, p}, rng.nonzero_normal());
          sr.x[at] = t.get(x, {b, h, p});
          if (c.has_z) {
            t.set(z, {b, h, p}, rng.nonzero_normal());
            sr.z[at] = t.get(z, {b, h, p});
          }
        }
      }
    for (int id : {rate, dt, trap, qraw, kraw, x}) t.upload(id);
    if (c.has_z) t.upload(z);

    st = ssu_plan_execute_mamba3_rotary(rplan, &ra, nullptr);
    if (st == SSU_SUCCESS) st = ssu_plan_execute_mamba3_step(splan, &sa, nullptr);
    if (st != SSU_SUCCESS) {
      result = failed_call(header + " at step " + std::to_string(step), "execute", st,
                           ssu_last_error_message());
      break;
    }

    // The reference: rotary, then the step on its rotated q (C) and k (B).
    const RotaryResult rot = reference_mamba3_rotary(rr);
    rr.angle = rot.angle;
    sr.B = rot.k;
    sr.C = rot.q;
    const Mamba3StepResult res = reference_mamba3_step(sr);
    sr.state = res.state;
    sr.prev_B = sr.B;
    sr.prev_x = sr.x;

    if (step % c.check_every != 0 && step != c.steps) continue;
    mem.synchronize(nullptr);
    t.clear_expectations();
    const Tolerance tol = state_tolerance(F);
    for (int64_t b = 0; b < Bt; ++b) {
      const int64_t s = slot[size_t(b)];
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < Sa; ++i)
          t.expect_angle(angle, {s, h, i}, rr.angle[size_t((b * H + h) * Sa + i)], kChainAngleAtol);
        for (int64_t p = 0; p < P; ++p) {
          const size_t at = size_t((b * H + h) * P + p);
          t.expect_bits(prevx, {s, h, p}, t.bits(x, {b, h, p}));
          for (int64_t n = 0; n < N; ++n)
            t.expect_close(state, {s, h, p, n}, res.state[at * size_t(N) + size_t(n)], tol.rtol,
                           tol.atol);
          if (c.outproj)
            t.expect_close(out, {b, h, p}, res.out[at], tol.rtol, tol.atol);
          else
            for (int64_t r = 0; r < R; ++r)
              t.expect_close(out, {b, r, h, p}, res.out[size_t(((b * R + r) * H + h) * P + p)],
                             tol.rtol, tol.atol);
        }
        for (int64_t r = 0; r < R; ++r)
          for (int64_t n = 0; n < N; ++n) {
            const size_t at = size_t(((b * R + r) * H + h) * N + n);
            t.expect_close(prevB, {s, r, h, n}, rot.k[at], tol.rtol, tol.atol);
            t.expect_close(Bk, {b, r, h, n}, rot.k[at], tol.rtol, tol.atol);
            t.expect_close(Cq, {b, r, h, n}, rot.q[at], tol.rtol, tol.atol);
          }
      }
    }
    CheckResult r = t.check(header + "\n  after step " + std::to_string(step));
    checked += r.elements;
    if (!r.ok) {
      result = r;
      break;
    }
  }
  ssu_plan_destroy(rplan);
  ssu_plan_destroy(splan);
  if (result.ok) result.elements = checked;
  return result;
}

// ---------------------------------------------------------------------------
// Case tables
// ---------------------------------------------------------------------------
std::vector<StepCase> step_case_table() {
  const ssu_dtype_t F32 = SSU_DTYPE_F32, BF16 = SSU_DTYPE_BF16, F16 = SSU_DTYPE_F16;
  std::vector<StepCase> t;
  uint64_t seed = 100;
  // Every (R, N) pair; the other axes cycle with co-prime periods so that
  // the pairs meet many combinations of everything else.
  const int64_t Ps[4] = {16, 64, 80, 128};
  const ssu_dtype_t states[3] = {F32, BF16, F16};
  const ssu_dtype_t inputs[2] = {BF16, F32};
  const Pad pads[4] = {Pad::Negative, Pad::None, Pad::PadSlotId, Pad::PadSlotIdInRange};
  const Dst dsts[3] = {Dst::Distinct, Dst::Same, Dst::Equal};
  int i = 0;
  for (int64_t R : {1, 2, 4, 8})
    for (int64_t N : {16, 32, 64, 128, 256}) {
      StepCase c;
      c.tag = "rank_dstate";
      c.R = R;
      c.N = N;
      c.P = Ps[i % 4];
      c.H = (R * N * c.P > 64 * 1024) ? 1 : 2;
      c.state = states[i % 3];
      c.input = inputs[(i / 2) % 2];
      c.param = i % 5 == 4 ? BF16 : F32;
      c.weight = i % 7 == 3 ? BF16 : F32;
      c.index = i % 2 ? SSU_DTYPE_I64 : SSU_DTYPE_I32;
      c.pad = pads[i % 4];
      c.dst = dsts[i % 3];
      c.update_prev = i % 5 != 2;
      // Output modes: outproj with z, outproj without z, per-rank outputs.
      c.outproj = i % 3 != 1;
      c.has_z = c.outproj && i % 2 == 0;
      c.has_D = i % 4 != 1;
      c.layout = i % 4 == 2 ? kOdd : i % 4 == 3 ? kDenseLayout : kAligned;
      c.batch = 2 + i % 3;
      c.seed = seed++;
      t.push_back(c);
      ++i;
    }
  // Every state dtype with every input dtype, both output modes, z on/off,
  // D absent/present, UPDATE_PREV on/off.
  for (ssu_dtype_t st : states)
    for (ssu_dtype_t in : {BF16, F32, F16})
      for (int mode = 0; mode < 2; ++mode) {
        if (in == F16 && mode) continue;  // f16 inputs once per state dtype
        StepCase c;
        c.tag = "dtypes";
        c.state = st;
        c.input = in;
        c.param = in == F16 ? F16 : F32;
        c.weight = in == F16 ? F16 : mode ? BF16 : F32;
        c.R = mode ? 4 : 2;
        c.N = 64;
        c.P = 64;
        c.outproj = mode == 0;
        c.has_z = mode == 0 && st != BF16;
        c.has_D = mode == 1;
        c.update_prev = st != F16;
        c.dst = mode ? Dst::Distinct : Dst::Same;
        c.pad = Pad::Negative;
        c.seed = seed++;
        t.push_back(c);
      }
  // Slot addressing: no src index (slot = b) with and without dst; int64
  // indices with a custom pad_slot_id; a padding dst entry on a live lane;
  // a single sequence; a larger batch.
  {
    StepCase c;
    c.tag = "no_src";
    c.has_src = false;
    c.R = 2;
    c.seed = seed++;
    t.push_back(c);
    c.dst = Dst::Distinct;
    c.index = SSU_DTYPE_I64;
    c.seed = seed++;
    t.push_back(c);
  }
  for (Dst d : {Dst::Distinct, Dst::Equal}) {
    StepCase c;
    c.tag = "dst_pad";
    c.dst = d;
    c.dst_pad = true;
    c.pad = Pad::PadSlotId;
    c.index = SSU_DTYPE_I64;
    c.R = 4;
    c.N = 32;
    c.batch = 4;
    c.seed = seed++;
    t.push_back(c);
  }
  for (int64_t Bt : {1, 16}) {
    StepCase c;
    c.tag = "batch";
    c.batch = Bt;
    c.H = Bt == 1 ? 1 : 4;
    c.R = 2;
    c.N = 64;
    c.P = 64;
    c.state = BF16;
    c.input = BF16;
    c.dst = Dst::Distinct;
    c.pad = Bt == 1 ? Pad::None : Pad::PadSlotIdInRange;
    c.extra_slots = 5;
    c.seed = seed++;
    t.push_back(c);
  }
  return t;
}

std::vector<StepCase> gather_scatter_case_table() {
  const ssu_dtype_t F32 = SSU_DTYPE_F32, BF16 = SSU_DTYPE_BF16, F16 = SSU_DTYPE_F16;
  std::vector<StepCase> t;
  uint64_t seed = 700;
  struct Row {
    ssu_dtype_t state, input;
    int64_t R, N, P;
    bool outproj, z, prev;
    Dst dst;
    Pad pad;
    int layout;
  };
  const Row rows[] = {
      {F32, BF16, 1, 16, 64, true, true, true, Dst::Same, Pad::Negative, kAligned},
      {F32, F32, 2, 128, 80, true, false, true, Dst::Distinct, Pad::PadSlotId, kOdd},
      {BF16, BF16, 4, 64, 128, false, false, true, Dst::Distinct, Pad::PadSlotIdInRange, kAligned},
      {F16, BF16, 8, 32, 16, true, true, false, Dst::Equal, Pad::Negative, kDenseLayout},
      {BF16, F32, 2, 256, 64, true, true, true, Dst::Same, Pad::None, kAligned},
      {F32, F16, 4, 16, 80, false, false, true, Dst::Distinct, Pad::Negative, kOdd},
  };
  int i = 0;
  for (const Row& r : rows) {
    StepCase c;
    c.tag = "gather_scatter";
    c.state = r.state;
    c.input = r.input;
    c.param = r.input == F16 ? F16 : F32;
    c.weight = r.input == F16 ? F16 : F32;
    c.R = r.R;
    c.N = r.N;
    c.P = r.P;
    c.outproj = r.outproj;
    c.has_z = r.z;
    c.update_prev = r.prev;
    c.dst = r.dst;
    c.pad = r.pad;
    c.layout = r.layout;
    c.index = i % 2 ? SSU_DTYPE_I64 : SSU_DTYPE_I32;
    c.batch = 4;
    c.seed = seed++;
    t.push_back(c);
    ++i;
  }
  return t;
}

std::vector<RotaryCase> rotary_case_table() {
  const ssu_dtype_t F32 = SSU_DTYPE_F32, BF16 = SSU_DTYPE_BF16, F16 = SSU_DTYPE_F16;
  std::vector<RotaryCase> t;
  uint64_t seed = 300;
  int i = 0;
  for (bool halved : {false, true})
    for (ssu_dtype_t qk : {F32, BF16, F16})
      for (int variant = 0; variant < 4; ++variant) {
        RotaryCase c;
        c.tag = "rotary";
        c.halved = halved;
        c.qk = qk;
        c.R = halved ? (variant % 2 ? 4 : 2) : 1;
        c.N = variant == 3 ? 128 : variant == 2 ? 16 : 64;
        // Sa = N/2 (every element rotated), and Sa < N/2 (pass-through).
        c.Sa = variant == 0 ? c.N / 2 : variant == 1 ? c.N / 4 : variant == 2 ? 3 : c.N / 2 - 1;
        c.q_bias = variant != 1;
        c.k_bias = variant % 2 == 0;
        c.bias = variant == 2 ? BF16 : F32;
        c.rate = variant == 3 ? BF16 : F32;
        c.dt = variant == 1 ? F16 : F32;
        c.in_place = variant == 2 || (variant == 1 && halved);
        c.index = i % 2 ? SSU_DTYPE_I64 : SSU_DTYPE_I32;
        c.pad = variant == 0 ? Pad::Negative : variant == 1 ? Pad::PadSlotId
                : variant == 2 ? Pad::PadSlotIdInRange : Pad::None;
        c.dst = variant == 1 ? Dst::Distinct : variant == 2 ? Dst::Equal : Dst::Same;
        c.layout = i % 3 == 0 ? kAligned : i % 3 == 1 ? kOdd : kDenseLayout;
        c.batch = 2 + i % 3;
        c.seed = seed++;
        t.push_back(c);
        ++i;
      }
  {
    RotaryCase c;
    c.tag = "rotary_no_src";
    c.has_src = false;
    c.dst = Dst::Distinct;
    c.N = 32;
    c.Sa = 16;
    c.seed = seed++;
    t.push_back(c);
  }
  {
    RotaryCase c;
    c.tag = "rotary_large_batch";
    c.batch = 16;
    c.H = 4;
    c.R = 4;
    c.N = 256;
    c.Sa = 64;
    c.halved = true;
    c.qk = BF16;
    c.pad = Pad::Negative;
    c.dst = Dst::Distinct;
    c.seed = seed++;
    t.push_back(c);
  }
  return t;
}

std::vector<ChainConfig> chain_configs() {
  std::vector<ChainConfig> v;
  ChainConfig siso;
  siso.tag = "chain_siso";
  siso.R = 1;
  siso.N = 32;
  siso.Sa = 16;
  siso.halved = false;
  siso.has_z = true;
  siso.outproj = true;
  siso.seed = 1;
  v.push_back(siso);
  ChainConfig mimo;
  mimo.tag = "chain_mimo";
  mimo.R = 4;
  mimo.N = 64;
  mimo.P = 16;
  mimo.Sa = 16;  // Sa < N/2: half of every row passes through
  mimo.halved = true;
  mimo.has_z = false;
  mimo.outproj = false;
  mimo.seed = 2;
  v.push_back(mimo);
  return v;
}

// ---------------------------------------------------------------------------
// Suites
// ---------------------------------------------------------------------------
void SuiteResult::add(const CheckResult& r, const std::string& what) {
  ++run;
  elements += r.elements;
  if (r.ok) return;
  ++failed;
  if (failures.size() < 25) failures.push_back(what + ": " + r.message);
}

namespace {

bool selected(const std::string& description) {
  const char* filter = std::getenv("SSU_TEST_FILTER");
  return !filter || description.find(filter) != std::string::npos;
}
bool verbose() { return std::getenv("SSU_TEST_VERBOSE") != nullptr; }

template <typename Case, typename Fn>
SuiteResult run_table(const std::vector<Case>& table, const char* label, const char* what, Fn fn) {
  SuiteResult res;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string d = describe(table[i]);
    if (!selected(d)) continue;
    if (verbose()) {
      std::printf("[%s %s %zu] %s\n", label, what, i, d.c_str());
      std::fflush(stdout);
    }
    CheckResult r;
    try {
      r = fn(i, table[i]);
    } catch (const std::exception& e) {
      r.ok = false;
      r.message = d + "\n  exception: " + e.what();
    }
    res.add(r, std::string(what) + " case " + std::to_string(i));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s mamba3 %s: %lld cases run (of %zu), %lld failed, %lld elements checked, %.1f s\n",
              label, what, (long long)res.run, table.size(), (long long)res.failed,
              (long long)res.elements, secs);
  return res;
}

}  // namespace

SuiteResult run_step_table(ssu_context_t ctx, Memory& mem, const char* label, ssu_context_t second) {
  return run_table(step_case_table(), label, "step", [&](size_t i, const StepCase& c) {
    return run_step_case(second && i % 4 == 3 ? second : ctx, mem, c);
  });
}

SuiteResult run_gather_scatter_table(ssu_context_t ctx, Memory& mem, const char* label) {
  return run_table(gather_scatter_case_table(), label, "gather/scatter",
                   [&](size_t, const StepCase& c) { return run_gather_scatter_case(ctx, mem, c); });
}

SuiteResult run_rotary_table(ssu_context_t ctx, Memory& mem, const char* label,
                             ssu_context_t second) {
  return run_table(rotary_case_table(), label, "rotary", [&](size_t i, const RotaryCase& c) {
    return run_rotary_case(second && i % 4 == 3 ? second : ctx, mem, c);
  });
}

SuiteResult run_chains(ssu_context_t ctx, Memory& mem, const char* label) {
  return run_table(chain_configs(), label, "chain",
                   [&](size_t, const ChainConfig& c) { return run_chain(ctx, mem, c); });
}

std::vector<std::string> table_coverage_problems() {
  std::vector<std::string> miss;
  const std::vector<StepCase> steps = step_case_table();
  const std::vector<RotaryCase> rots = rotary_case_table();
  auto has = [&](auto pred) {
    for (const auto& c : steps)
      if (pred(c)) return true;
    return false;
  };
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) miss.push_back("the step table lacks " + what);
  };
  for (int64_t R : {1, 2, 4, 8})
    for (int64_t N : {16, 32, 64, 128, 256})
      need(has([&](const StepCase& c) { return c.R == R && c.N == N; }),
           "R=" + std::to_string(R) + " N=" + std::to_string(N));
  for (int64_t P : {16, 64, 80, 128})
    need(has([&](const StepCase& c) { return c.P == P; }), "P=" + std::to_string(P));
  for (ssu_dtype_t st : {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16})
    for (ssu_dtype_t in : {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16})
      need(has([&](const StepCase& c) { return c.state == st && c.input == in; }),
           std::string("state=") + dname(st) + " input=" + dname(in));
  for (ssu_dtype_t idx : {SSU_DTYPE_I32, SSU_DTYPE_I64})
    need(has([&](const StepCase& c) { return c.has_src && c.index == idx; }),
         std::string("index ") + dname(idx));
  for (Pad p : {Pad::None, Pad::Negative, Pad::PadSlotId, Pad::PadSlotIdInRange})
    need(has([&](const StepCase& c) { return c.has_src && c.pad == p; }),
         std::string("pad=") + pad_name(p));
  for (Dst d : {Dst::Same, Dst::Distinct, Dst::Equal})
    need(has([&](const StepCase& c) { return c.dst == d; }), std::string("dst=") + dst_name(d));
  for (bool prev : {false, true})
    need(has([&](const StepCase& c) { return c.update_prev == prev; }), "update_prev on and off");
  need(has([](const StepCase& c) { return c.outproj && c.has_z; }), "outproj with z");
  need(has([](const StepCase& c) { return c.outproj && !c.has_z; }), "outproj without z");
  need(has([](const StepCase& c) { return !c.outproj; }), "per-rank outputs");
  need(has([](const StepCase& c) { return !c.has_D; }), "D absent");
  need(has([](const StepCase& c) { return c.has_D; }), "D present");
  need(has([](const StepCase& c) { return !c.has_src; }), "no src index");
  need(has([](const StepCase& c) { return c.dst_pad; }), "a padding dst entry");
  for (int l : {kDenseLayout, kAligned, kOdd})
    need(has([&](const StepCase& c) { return c.layout == l; }), std::string("layout ") + layout_name(l));
  auto rhas = [&](auto pred) {
    for (const auto& c : rots)
      if (pred(c)) return true;
    return false;
  };
  auto rneed = [&](bool ok, const std::string& what) {
    if (!ok) miss.push_back("the rotary table lacks " + what);
  };
  for (bool halved : {false, true}) {
    const std::string hs = halved ? "halved" : "interleaved";
    rneed(rhas([&](const RotaryCase& c) { return c.halved == halved && c.Sa < c.N / 2; }), hs + " with Sa < N/2");
    rneed(rhas([&](const RotaryCase& c) { return c.halved == halved && c.Sa == c.N / 2; }), hs + " with Sa = N/2");
    rneed(rhas([&](const RotaryCase& c) { return c.halved == halved && c.in_place; }), hs + " in place");
    rneed(rhas([&](const RotaryCase& c) { return c.halved == halved && !c.q_bias; }), hs + " without q_bias");
    rneed(rhas([&](const RotaryCase& c) { return c.halved == halved && !c.k_bias; }), hs + " without k_bias");
    rneed(rhas([&](const RotaryCase& c) { return c.halved == halved && c.q_bias && c.k_bias; }), hs + " with both biases");
  }
  for (ssu_dtype_t qk : {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16})
    rneed(rhas([&](const RotaryCase& c) { return c.qk == qk; }), std::string("qk=") + dname(qk));
  for (Pad p : {Pad::Negative, Pad::PadSlotId, Pad::PadSlotIdInRange})
    rneed(rhas([&](const RotaryCase& c) { return c.pad == p; }), std::string("pad=") + pad_name(p));
  return miss;
}

}  // namespace m3
}  // namespace ssutest
