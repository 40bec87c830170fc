// The table of selective-state-update cases shared by the CPU and GPU suites.
//
// Read it like a feature list: every form (single token, multi token,
// varlen) and store mode (final, 1-D dst, per-token dst, intermediate
// buffer, num_accepted_tokens) is crossed with every (state, input, param)
// dtype combination; then every value of every shape axis is swept; then
// seeded random mixes cover interactions. Seeds are fixed: a failure
// reproduces from its printed description.
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

#include "harness.h"

namespace ssutest {

namespace {

constexpr ssu_dtype_t F32 = SSU_DTYPE_F32, BF16 = SSU_DTYPE_BF16, F16 = SSU_DTYPE_F16;
constexpr ssu_dtype_t I16 = SSU_DTYPE_I16, I32 = SSU_DTYPE_I32, I64 = SSU_DTYPE_I64, NOIDX = SSU_DTYPE_INVALID;
const ssu_dtype_t kFloat[3] = {F32, BF16, F16};

struct Mode {
  const char* tag;
  std::function<void(UpdateCase&)> set;
};

// Every mode the API offers; `c` arrives with defaults (single token, 1-D
// src, D, dt_bias, z, softplus).
std::vector<Mode> modes() {
  return {
      {"single_slot_is_batch", [](UpdateCase& c) { c.single(); c.index = NOIDX; }},
      {"single_src", [](UpdateCase& c) { c.single(); }},
      {"single_src_dst", [](UpdateCase& c) { c.single(); c.has_dst = true; }},
      {"single_dst_only",  // no src_index: sequence b reads slot b, writes dst[b]
       [](UpdateCase& c) { c.single(); c.has_src = false; c.has_dst = true; c.pad = Pad::Negative; }},
      {"single_pad_negative",
       [](UpdateCase& c) { c.single(); c.has_dst = true; c.pad = Pad::Negative; }},
      {"single_pad_slot_id", [](UpdateCase& c) { c.single(); c.pad = Pad::PadSlotId; }},
      {"single_pad_slot_id_in_range",
       [](UpdateCase& c) { c.single(); c.has_dst = true; c.pad = Pad::PadSlotIdInRange; }},
      {"single_disable_update",
       [](UpdateCase& c) {
         c.single(); c.has_dst = true; c.pad = Pad::Negative; c.disable_update = true;
       }},
      {"single_shared_src",  // beam search: sequences read one slot, write their own
       [](UpdateCase& c) { c.single(); c.has_dst = true; c.shared_src = true; }},
      {"single_minimal",
       [](UpdateCase& c) {
         c.single(); c.has_D = c.has_dt_bias = c.has_z = false; c.softplus = false;
       }},
      {"single_mamba1",
       [](UpdateCase& c) { c.single(); c.mamba1(); c.N = 16; c.pad = Pad::Negative; }},
      {"multi_final", [](UpdateCase& c) { c.multi(c.T); }},
      {"multi_slot_is_batch", [](UpdateCase& c) { c.multi(c.T); c.index = NOIDX; }},
      {"multi_dst", [](UpdateCase& c) { c.multi(c.T); c.has_dst = true; c.pad = Pad::Negative; }},
      {"multi_dst_per_token",
       [](UpdateCase& c) { c.multi(c.T); c.store = Store::DstPerToken; c.pad = Pad::PadSlotId; }},
      {"multi_dst_per_token_only",  // no src_index, per-token dst
       [](UpdateCase& c) {
         c.multi(c.T); c.has_src = false; c.store = Store::DstPerToken; c.pad = Pad::PadSlotId;
       }},
      {"multi_spec_decode",  // vLLM-style: one (Bt, T) slot table for src and dst
       [](UpdateCase& c) {
         c.multi(c.T); c.src_2d = true; c.num_accepted = true; c.store = Store::DstPerToken;
         c.dst_is_src = true; c.pad = Pad::Negative;
       }},
      {"multi_accepted_final",
       [](UpdateCase& c) {
         c.multi(c.T); c.src_2d = true; c.num_accepted = true; c.has_dst = true;
         c.pad = Pad::PadSlotIdInRange;
       }},
      {"multi_intermediate",
       [](UpdateCase& c) {
         c.multi(c.T); c.store = Store::Intermediate; c.pad = Pad::PadSlotIdInRange;
       }},
      {"multi_intermediate_index_disable",
       [](UpdateCase& c) {
         c.multi(c.T); c.store = Store::Intermediate; c.inter_index = true; c.has_dst = true;
         c.disable_update = true; c.pad = Pad::Negative;
       }},
      {"multi_dst_per_token_disable",
       [](UpdateCase& c) {
         c.multi(c.T); c.store = Store::DstPerToken; c.disable_update = true;
       }},
      {"multi_shared_src_dst_per_token",
       [](UpdateCase& c) {
         c.multi(c.T); c.store = Store::DstPerToken; c.shared_src = true; c.pad = Pad::Negative;
       }},
      {"multi_mamba1",
       [](UpdateCase& c) { c.multi(c.T); c.mamba1(); c.N = 16; c.has_dst = true; }},
      {"varlen_final", [](UpdateCase& c) { c.varlen(c.T); c.pad = Pad::PadSlotId; }},
      {"varlen_slot_is_batch", [](UpdateCase& c) { c.varlen(c.T); c.index = NOIDX; }},
      {"varlen_dst_per_token",
       [](UpdateCase& c) { c.varlen(c.T); c.store = Store::DstPerToken; c.pad = Pad::Negative; }},
      {"varlen_spec_decode",
       [](UpdateCase& c) {
         c.varlen(c.T); c.src_2d = true; c.num_accepted = true; c.store = Store::DstPerToken;
         c.dst_is_src = true; c.pad = Pad::PadSlotIdInRange;
       }},
      {"varlen_intermediate_index",
       [](UpdateCase& c) {
         c.varlen(c.T); c.store = Store::Intermediate; c.inter_index = true;
         c.src_2d = true; c.num_accepted = true; c.pad = Pad::Negative;
       }},
  };
}

const Mode& mode_named(const std::vector<Mode>& ms, const char* tag) {
  for (const auto& m : ms)
    if (std::string(m.tag) == tag) return m;
  throw std::logic_error(std::string("no mode ") + tag);
}

const uint32_t kLayouts[] = {
    kDense,
    kPadded,
    kOddPadded | kTransposed,
    kBroadcast | kPadded,
    kPadded | kTransposed,
    kOddPadded | kBroadcast,
};

// splitmix64 for choosing table entries; the same on every platform.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int64_t work(const UpdateCase& c) {
  const int64_t T = c.form == Form::Single ? 1 : c.T;
  return c.batch * T * c.H * c.P * c.N;
}

}  // namespace

std::vector<UpdateCase> update_case_table() {
  std::vector<UpdateCase> cases;
  const std::vector<Mode> ms = modes();
  uint64_t seed = 1;

  // 1. Every mode x every (state, input, param) dtype combination, with small
  // shapes and layouts rotating so that the table also spreads them.
  {
    const int64_t hg[][2] = {{2, 1}, {4, 2}, {8, 8}, {1, 1}, {8, 1}, {4, 4}};
    const int64_t Ps[] = {64, 80, 128, 64};
    const int64_t Ns[] = {16, 32, 64, 16, 96};
    const int64_t Bs[] = {3, 1, 5, 4};
    const int64_t Ts[] = {2, 4, 1, 8, 3};
    int k = 0;
    for (const Mode& mode : ms) {
      for (ssu_dtype_t st : kFloat)
        for (ssu_dtype_t in : kFloat)
          for (ssu_dtype_t pa : kFloat) {
            UpdateCase c;
            c.tag = mode.tag;
            c.dtypes(st, in, pa);
            c.shape(hg[k % 6][0], hg[k % 6][1], Ps[k % 4], Ns[k % 5]);
            c.batch = Bs[k % 4];
            c.T = Ts[k % 5];
            c.index = (k % 2) ? I64 : I32;
            c.layout = kLayouts[k % 6];
            c.seed = seed++;
            mode.set(c);
            if (c.form == Form::Single) c.T = 1;
            // Keep each case small: the table runs ~1000 cases.
            if (c.P * c.N > 64 * 64 && c.H >= 4) c.N = 32;
            cases.push_back(c);
            ++k;
          }
    }
  }

  // 2. Mixed parameter dtypes: dt, A, D, dt_bias each of its own dtype.
  for (const Mode& mode : ms) {
    for (int rep = 0; rep < 3; ++rep) {
      const uint64_t r = mix(seed * 7919);
      UpdateCase c;
      c.tag = mode.tag;
      c.dtypes(kFloat[r % 3], kFloat[(r >> 4) % 3], F32);
      c.params(kFloat[(r >> 8) % 3], kFloat[(r >> 12) % 3], kFloat[(r >> 16) % 3],
               kFloat[(r >> 20) % 3]);
      if (c.dt == c.A && c.A == c.D && c.D == c.dt_bias) c.dt_bias = kFloat[(r >> 24) % 3 == 0 ? 1 : 0];
      c.shape(4, 2, 64, 32);
      c.batch = 3;
      c.T = 3;
      c.index = (r >> 28) % 2 ? I64 : I32;
      c.layout = kLayouts[(r >> 32) % 6];
      c.seed = seed++;
      mode.set(c);
      cases.push_back(c);
    }
  }

  // 3. Every value of every shape axis.
  auto add = [&](const char* mode_tag, auto tweak) {
    UpdateCase c;
    c.tag = mode_tag;
    const uint64_t r = mix(seed);
    c.dtypes(kFloat[r % 3], kFloat[(r >> 8) % 3], kFloat[(r >> 16) % 3]);
    c.index = (r >> 24) % 2 ? I64 : I32;
    c.layout = kLayouts[(r >> 32) % 6];
    c.shape(2, 1, 64, 16);
    c.batch = 3;
    c.T = 2;
    c.seed = seed++;
    mode_named(ms, mode_tag).set(c);
    tweak(c);
    if (c.form == Form::Single) c.T = 1;
    cases.push_back(c);
  };
  for (int64_t N : {16, 32, 64, 96, 128, 256})
    for (const char* m : {"single_src_dst", "multi_spec_decode", "varlen_intermediate_index",
                          "single_mamba1"})
      add(m, [&](UpdateCase& c) {
        c.N = N;
        if (c.A_per_channel) c.P = 128;  // Mamba-1: H = G = 1
        else c.shape(4, 1, c.P, N);
      });
  for (const char* m : {"single_mamba1", "multi_mamba1"})
    for (int64_t N : {32, 64, 128, 256})
      add(m, [&](UpdateCase& c) { c.P = 80; c.N = N; });
  for (int64_t P : {64, 80, 128, 2064})
    for (const char* m : {"single_pad_slot_id", "single_mamba1", "multi_dst_per_token",
                          "varlen_spec_decode"})
      add(m, [&](UpdateCase& c) {
        c.P = P;
        c.N = P == 2064 ? 16 : 32;
        if (!c.A_per_channel) {  // Mamba-1 keeps H = G = 1
          c.H = P == 2064 ? 2 : 4;
          c.G = 2;
        }
      });
  for (auto hg : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {2, 1}, {2, 2}, {8, 1}, {8, 2}, {8, 8}, {64, 1}, {64, 2}, {64, 8}, {64, 64}})
    for (const char* m : {"single_pad_negative", "multi_intermediate_index_disable",
                          "varlen_dst_per_token"})
      add(m, [&](UpdateCase& c) {
        c.H = hg.first;
        c.G = hg.second;
        c.N = hg.first == 64 ? 16 : 32;
      });
  for (int64_t Bt : {1, 3, 64})
    for (const char* m : {"single_src_dst", "single_slot_is_batch", "multi_spec_decode",
                          "varlen_final", "multi_intermediate"})
      add(m, [&](UpdateCase& c) {
        c.batch = Bt;
        c.H = Bt == 64 ? 8 : 4;
        c.G = 2;
        c.T = Bt == 64 ? 4 : 2;
      });
  for (int64_t T : {1, 2, 4, 8})
    for (const char* m : {"multi_final", "multi_spec_decode", "multi_accepted_final",
                          "varlen_dst_per_token", "multi_intermediate", "varlen_slot_is_batch"})
      add(m, [&](UpdateCase& c) { c.T = T; c.batch = 4; });
  for (ssu_dtype_t idx : {I32, I64})
    for (const Mode& mode : ms)
      if (std::string(mode.tag).find("slot_is_batch") == std::string::npos)
        add(mode.tag, [&](UpdateCase& c) { c.index = idx; });
  // Steps beyond softplus' threshold (20) and large unsoftplused steps.
  for (const char* m : {"single_src", "single_minimal", "multi_spec_decode", "varlen_final"})
    add(m, [&](UpdateCase& c) { c.large_dt = true; });
  // Every layout with a store-heavy mode.
  for (uint32_t layout : kLayouts)
    for (const char* m : {"multi_spec_decode", "varlen_intermediate_index", "single_mamba1"})
      add(m, [&](UpdateCase& c) { c.layout = layout; });
  // Optional inputs one at a time.
  for (int which = 0; which < 4; ++which)
    for (const char* m : {"single_src_dst", "multi_dst_per_token"})
      add(m, [&](UpdateCase& c) {
        c.has_D = which != 0;
        c.has_dt_bias = which != 1;
        c.has_z = which != 2;
        c.softplus = which != 3;
      });
  // Per-channel parameters one at a time, on a Mamba-2 shaped problem.
  for (int which = 0; which < 4; ++which)
    for (const char* m : {"multi_dst", "single_src_dst", "varlen_final"})
      add(m, [&](UpdateCase& c) {
        c.A_per_channel = which == 0;
        c.dt_per_channel = which == 1;
        c.D_per_channel = which == 2;
        c.dt_bias_per_channel = which == 3;
      });
  // Shapes of real models.
  add("single_src_dst", [](UpdateCase& c) { c.shape(80, 1, 64, 128); c.batch = 3; });  // Mamba-2 2.7B
  add("multi_spec_decode", [](UpdateCase& c) { c.shape(128, 8, 64, 128); c.batch = 2; c.T = 2; });  // Nemotron-H
  add("single_mamba1", [](UpdateCase& c) { c.P = 1536; c.batch = 3; });  // Mamba-1 130M
  add("varlen_spec_decode", [](UpdateCase& c) { c.shape(32, 1, 64, 128); c.batch = 4; c.T = 4; });

  // 4. Seeded random mixes of everything.
  for (int i = 0; i < 120; ++i) {
    const Mode& mode = ms[mix(seed * 31) % ms.size()];
    uint64_t r = mix(seed * 131 + 7);
    auto pick = [&](uint64_t n) {
      const uint64_t v = r % n;
      r = mix(r);
      return v;
    };
    UpdateCase c;
    c.tag = mode.tag;
    c.dtypes(kFloat[pick(3)], kFloat[pick(3)], kFloat[pick(3)]);
    c.params(kFloat[pick(3)], kFloat[pick(3)], kFloat[pick(3)], kFloat[pick(3)]);
    const int64_t Hs[] = {1, 2, 8, 64};
    c.H = Hs[pick(4)];
    const int64_t Gs[] = {1, 2, 8, 64};
    do c.G = Gs[pick(4)]; while (c.H % c.G);
    const int64_t Ps[] = {64, 80, 128, 2064};
    c.P = Ps[pick(4)];
    const int64_t Ns[] = {16, 32, 64, 96, 128, 256};
    c.N = Ns[pick(6)];
    const int64_t Bs[] = {1, 3, 64};
    c.batch = Bs[pick(3)];
    const int64_t Ts[] = {1, 2, 4, 8};
    c.T = Ts[pick(4)];
    c.index = pick(2) ? I64 : I32;
    c.layout = kLayouts[pick(6)];
    c.has_D = pick(4) != 0;
    c.has_dt_bias = pick(4) != 0;
    c.has_z = pick(3) != 0;
    c.softplus = pick(4) != 0;
    c.large_dt = pick(5) == 0;
    c.A_per_channel = c.A_per_channel || pick(5) == 0;
    c.dt_per_channel = c.dt_per_channel || pick(5) == 0;
    c.D_per_channel = c.D_per_channel || pick(5) == 0;
    c.dt_bias_per_channel = c.dt_bias_per_channel || pick(5) == 0;
    c.extra_slots = int(pick(5));
    c.seed = seed++;
    mode.set(c);
    if (c.form == Form::Single) c.T = 1;
    if (c.G > c.H || c.H % c.G) c.G = 1;
    // Bound the work (Bt*T*H*P*N) and the pool size so the table stays fast.
    while (work(c) > (int64_t(3) << 20) || c.H * c.P * c.N > (int64_t(1) << 20)) {
      if (c.batch > 3) c.batch = 3;
      else if (c.N > 32) c.N /= 2;
      else if (c.P > 128) c.P = 128;
      else if (c.H > 8) { c.H = 8; c.G = std::min<int64_t>(c.G, 8); }
      else if (c.T > 2) c.T /= 2;
      else break;
    }
    // Mixes whose pool passes about 2^20 elements are a third of this section
    // but most of the table's host time (inputs, float64 reference, checks);
    // every size and mode they draw is also swept above, so the GPU suite's
    // default run skips them.
    const int64_t pool_slots = c.batch * (c.form == Form::Single ? 1 : c.T) + c.extra_slots;
    c.long_only = c.H * c.P * c.N * pool_slots > (int64_t(1) << 20);
    cases.push_back(c);
  }

  // 5. int16 block-scaled states and stochastic rounding (f16, bf16), every
  // mode, each twice: model-like values (checked within SPEC.md section 6's
  // tolerances) and exact values (stored bits checked exactly, which pins
  // down the quantizer, the random word of every element and the offset L
  // of every store: final, 1-D dst, per-token dst, intermediate, varlen).
  {
    const ssu_dtype_t kinds[3] = {I16, F16, BF16};
    const uint32_t rounds[] = {0, 10, 1, 32, 7};
    const int64_t hg[][2] = {{2, 1}, {4, 2}, {3, 3}};
    const int64_t Ps[] = {16, 64, 5};
    const int64_t Ns[] = {16, 32, 8, 64};
    const int64_t Ts[] = {2, 3, 4};
    int k = 0;
    for (const Mode& mode : ms)
      for (ssu_dtype_t st : kinds)
        for (bool exact : {false, true}) {
          UpdateCase c;
          c.tag = mode.tag;
          c.dtypes(st, kFloat[k % 3], kFloat[(k / 3) % 3]);
          c.shape(hg[k % 3][0], hg[k % 3][1], Ps[(k / 2) % 3], Ns[k % 4]);
          c.batch = 3;
          c.T = Ts[k % 3];
          c.index = (k % 2) ? I64 : I32;
          c.layout = kLayouts[(k / 2) % 6];
          c.seed = seed++;
          if (st != I16) c.sr(mix(seed * 977), rounds[k % 5]);
          mode.set(c);
          if (exact) c.exact();
          if (c.form == Form::Single) c.T = 1;
          cases.push_back(c);
          ++k;
        }
    // Exact values with every state dtype rounded to nearest (the control
    // group of the bit checks above).
    for (const char* m : {"single_src_dst", "multi_dst_per_token", "multi_intermediate",
                          "varlen_spec_decode"})
      for (ssu_dtype_t st : {F32, F16, BF16})
        add(m, [&](UpdateCase& c) {
          c.state = st;
          c.exact();
        });
    // Sizes that are multiples of nothing, seeds with high bits, larger rows.
    for (int64_t N : {1, 7, 17, 100, 255})
      for (ssu_dtype_t st : kinds)
        add(N % 2 ? "multi_spec_decode" : "varlen_intermediate_index", [&](UpdateCase& c) {
          c.state = st;
          c.shape(3, 1, N > 64 ? 3 : 17, N);
          if (st != I16) c.sr(0xffffffff00000000ull ^ uint64_t(N), uint32_t(N % 32) + 1);
          if (N % 3 == 1) c.exact();
        });
    for (ssu_dtype_t st : kinds)
      add("single_src_dst", [&](UpdateCase& c) {
        c.state = st;
        c.shape(8, 2, 64, 128);
        c.batch = 4;
        if (st != I16) c.sr(~uint64_t(0));
      });
  }
  return cases;
}

std::vector<UpdateCase> state8_case_table() {
  std::vector<UpdateCase> cases;
  const std::vector<Mode> ms = modes();
  constexpr ssu_dtype_t I8 = SSU_DTYPE_I8, E4M3 = SSU_DTYPE_F8E4M3;
  const uint32_t rounds[] = {0, 10, 1, 32, 7};
  const int64_t hg[][2] = {{2, 1}, {4, 2}, {3, 3}};
  const int64_t Ps[] = {16, 64, 5};
  const int64_t Ns[] = {16, 32, 8, 64};
  const int64_t Ts[] = {2, 3, 4};
  uint64_t seed = 9000;
  int k = 0;
  // Every mode x {int8, e4m3 nearest, e4m3 stochastic} x {model-like values
  // (checked within tolerance), exact values (codes and scales bit for bit)}.
  for (const Mode& mode : ms)
    for (int kind = 0; kind < 3; ++kind)
      for (bool exact : {false, true}) {
        UpdateCase c;
        c.tag = mode.tag;
        c.dtypes(kind == 0 ? I8 : E4M3, kFloat[k % 3], kFloat[(k / 3) % 3]);
        c.shape(hg[k % 3][0], hg[k % 3][1], Ps[(k / 2) % 3], Ns[k % 4]);
        c.batch = 3;
        c.T = Ts[k % 3];
        c.index = (k % 2) ? I64 : I32;
        c.layout = kLayouts[(k / 2) % 6];
        c.large_dt = k % 7 == 3;
        c.seed = seed++;
        if (kind == 2) c.sr(mix(seed * 977), rounds[k % 5]);
        mode.set(c);
        if (exact) c.exact();
        if (c.form == Form::Single) c.T = 1;
        cases.push_back(c);
        ++k;
      }
  // Sizes that are multiples of nothing, larger rows, seeds with high bits,
  // a Mamba-2 shaped problem.
  for (int64_t N : {1, 7, 17, 100, 255})
    for (int kind = 0; kind < 3; ++kind) {
      UpdateCase c;
      const Mode& mode = mode_named(ms, N % 2 ? "multi_spec_decode" : "varlen_intermediate_index");
      c.tag = mode.tag;
      c.dtypes(kind == 0 ? I8 : E4M3, kFloat[k % 3], kFloat[(k / 3) % 3]);
      c.shape(3, 1, N > 64 ? 3 : 17, N);
      c.batch = 3;
      c.T = 3;
      c.index = (k % 2) ? I64 : I32;
      c.layout = kLayouts[k % 6];
      c.seed = seed++;
      if (kind == 2) c.sr(0xffffffff00000000ull ^ uint64_t(N), uint32_t(N % 32) + 1);
      mode.set(c);
      if (N % 3 == 1) c.exact();
      cases.push_back(c);
      ++k;
    }
  for (int kind = 0; kind < 3; ++kind) {
    UpdateCase c;
    const Mode& mode = mode_named(ms, "single_src_dst");
    c.tag = mode.tag;
    c.dtypes(kind == 0 ? I8 : E4M3, BF16, F32);
    c.shape(8, 2, 64, 128);
    c.batch = 4;
    c.seed = seed++;
    if (kind == 2) c.sr(~uint64_t(0));
    mode.set(c);
    cases.push_back(c);
  }
  return cases;
}

std::vector<UpdateCase> state_bits_case_table() {
  std::vector<UpdateCase> cases;
  const std::vector<Mode> ms = modes();
  uint64_t seed = 7000;
  int k = 0;
  for (const Mode& mode : ms)
    for (int store = 0; store < 6; ++store) {
      UpdateCase c;
      c.tag = mode.tag;
      const ssu_dtype_t st[6] = {F32, F16, BF16, F16, BF16, I16};
      c.dtypes(st[store], kFloat[k % 3], kFloat[(k / 3) % 3]);
      c.shape(k % 2 ? 4 : 2, k % 4 == 1 ? 2 : 1, (k % 3) ? 64 : 17, (k % 5) ? 32 : 16);
      c.batch = 3 + k % 3;
      c.T = 2 + k % 3;
      c.index = (k % 2) ? I64 : I32;
      c.layout = kLayouts[k % 6];
      c.large_dt = k % 7 == 0;
      c.seed = seed++;
      if (store == 3 || store == 4) c.sr(mix(seed) ^ 0xfeedull, uint32_t(k % 3 == 0 ? 0 : 1 + k % 32));
      mode.set(c);
      if (c.form == Form::Single) c.T = 1;
      cases.push_back(c);
      ++k;
    }
  return cases;
}

std::vector<UpdateCase> odd_size_case_table() {
  std::vector<UpdateCase> cases;
  const std::vector<Mode> ms = modes();
  const int64_t Ns[] = {1, 7, 17, 100, 255};
  const int64_t Ps[] = {1, 3, 17, 65, 130};
  const int64_t hg[][2] = {{3, 1}, {6, 3}, {5, 5}};
  const char* tags[] = {"single_src_dst", "multi_spec_decode", "varlen_intermediate_index",
                        "single_mamba1", "multi_dst_per_token"};
  uint64_t seed = 5000;
  int k = 0;
  for (int64_t N : Ns)
    for (int64_t P : Ps) {
      UpdateCase c;
      const Mode& mode = mode_named(ms, tags[k % 5]);
      c.tag = mode.tag;
      const uint64_t r = mix(seed);
      c.dtypes(kFloat[r % 3], kFloat[(r >> 8) % 3], kFloat[(r >> 16) % 3]);
      c.index = (r >> 24) % 2 ? I64 : I32;
      c.layout = kLayouts[(r >> 32) % 6];
      c.shape(hg[k % 3][0], hg[k % 3][1], P, N);
      c.batch = 3;
      c.T = 3;
      c.seed = seed++;
      mode.set(c);
      c.P = P;
      c.N = N;
      if (c.form == Form::Single) c.T = 1;
      cases.push_back(c);
      ++k;
    }
  return cases;
}

}  // namespace ssutest
