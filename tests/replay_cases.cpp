// The replay case table: what SPEC.md section 7 promises, one group of
// cases per feature. Deterministic: every case has its own fixed seed.
#include <algorithm>

#include "replay_harness.h"

namespace ssutest {

namespace {

// Enough steps for every slot to flush a few times (each slot is served in
// about three steps of four).
int steps_for(int64_t L, int64_t T) {
  return int(std::min<int64_t>(60, std::max<int64_t>(12, (3 * L) / T + 8)));
}

}  // namespace

std::vector<ReplayCase> replay_case_table() {
  std::vector<ReplayCase> v;
  uint64_t seed = 7000;
  auto add = [&](ReplayCase c) {
    c.seed = seed++;
    v.push_back(c);
  };
  // The 8-bit checkpoint cases (added later) draw their seeds from a range
  // of their own, so that every older case keeps its data.
  uint64_t seed8 = 7800;
  auto add8 = [&](ReplayCase c) {
    c.seed = seed8++;
    v.push_back(c);
  };
  const ssu_dtype_t F32 = SSU_DTYPE_F32, BF16 = SSU_DTYPE_BF16, F16 = SSU_DTYPE_F16,
                    I16 = SSU_DTYPE_I16, I32 = SSU_DTYPE_I32, I64 = SSU_DTYPE_I64,
                    I8 = SSU_DTYPE_I8, E4M3 = SSU_DTYPE_F8E4M3;

  // Every ring capacity, one token per call: a checkpoint store every L steps.
  for (int64_t L : {1, 2, 7, 16, 32}) {
    ReplayCase c;
    c.tag = "ring_capacity";
    c.single().ring(L).run(steps_for(L, 1)).shape(2, 1, 16, 16);
    c.pad = Pad::Negative;
    add(c);
  }

  // Every token count with the capacities around it (T = L flushes at every
  // call after the first).
  {
    const int64_t tl[][2] = {{2, 2}, {2, 7}, {2, 32}, {4, 4}, {4, 7}, {4, 16},
                             {8, 8}, {8, 16}, {8, 32}};
    int i = 0;
    for (const auto& p : tl) {
      ReplayCase c;
      c.tag = "tokens";
      c.multi(p[0]).ring(p[1]).run(steps_for(p[1], p[0])).shape(2, 1, 16, 16);
      c.index = i % 2 ? I64 : I32;
      c.pad = i % 3 == 0 ? Pad::None : Pad::Negative;
      c.dtypes(i % 2 ? BF16 : F32, i % 3 == 1 ? F16 : F32);
      add(c);
      ++i;
    }
  }
  // One token per call in the multi-token form.
  {
    ReplayCase c;
    c.tag = "tokens";
    c.multi(1).ring(3).run(14).shape(2, 1, 16, 16);
    add(c);
  }

  // Every state dtype with every input dtype, in turn single, multi and
  // varlen, with every parameter dtype.
  {
    const ssu_dtype_t states[] = {F32, BF16, F16, I16, I8, E4M3};
    const ssu_dtype_t inputs[] = {F32, BF16, F16};
    int i = 0;
    for (ssu_dtype_t st : states)
      for (ssu_dtype_t in : inputs) {
        ReplayCase c;
        c.tag = "dtypes";
        if (i % 3 == 0) c.single().ring(7);
        if (i % 3 == 1) c.multi(2).ring(7);
        if (i % 3 == 2) c.varlen(4).ring(16);
        c.run(steps_for(c.L, c.T));
        c.dtypes(st, in, inputs[(i / 3 + i) % 3]);
        c.shape(2, 1, 32, 16);
        c.pad = i % 2 ? Pad::Negative : Pad::None;
        c.index = i % 4 == 3 ? I64 : I32;
        if (st == I8 || st == E4M3) add8(c);
        else add(c);
        ++i;
      }
    // e4m3 checkpoints rounded stochastically, in every form.
    for (int f = 0; f < 3; ++f) {
      ReplayCase c;
      c.tag = "dtypes";
      if (f == 0) c.single().ring(7);
      if (f == 1) c.multi(2).ring(7);
      if (f == 2) c.varlen(4).ring(16);
      c.run(steps_for(c.L, c.T));
      c.dtypes(E4M3, inputs[f], inputs[(f + 1) % 3]).shape(2, 1, 32, 16);
      c.sr(0xe4 + uint64_t(f), f == 1 ? 5 : 0);
      c.pad = f % 2 ? Pad::None : Pad::Negative;
      add8(c);
    }
  }

  // Speculative decoding: num_accepted random in 0..pending.
  {
    const int64_t tl[][2] = {{2, 2}, {2, 7}, {4, 4}, {4, 7}, {4, 16}, {8, 8}, {8, 32}};
    const ssu_dtype_t sts[] = {F32, BF16, F16, I16, F32, BF16, F32};
    const ssu_dtype_t ins[] = {F32, BF16, F16, BF16, BF16, F32, F16};
    for (int i = 0; i < 7; ++i) {
      ReplayCase c;
      c.tag = "speculative";
      c.multi(tl[i][0]).ring(tl[i][1]).run(steps_for(tl[i][1], 2) / 2 + 8).shape(2, 1, 16, 16);
      c.speculative = true;
      c.dtypes(sts[i], ins[i]);
      c.pad = i % 2 ? Pad::Negative : Pad::PadSlotId;
      c.index = i % 3 == 2 ? I64 : I32;
      if (i == 5) c.accepted = I64;  // num_accepted i64 with i32 slots
      if (i == 5) c.index = I32;
      if (i == 6) c.accepted = I32;  // and the other way round
      if (i == 6) c.index = I64;
      add(c);
    }
    const ssu_dtype_t sts8[] = {I8, E4M3, E4M3};
    for (int i = 0; i < 3; ++i) {
      ReplayCase c;
      c.tag = "speculative";
      c.multi(tl[i + 2][0]).ring(tl[i + 2][1]).run(steps_for(tl[i + 2][1], 2) / 2 + 8);
      c.shape(2, 1, 16, 16).dtypes(sts8[i], ins[i]);
      if (i == 2) c.sr(0x5bec);
      c.speculative = true;
      c.pad = i % 2 ? Pad::Negative : Pad::PadSlotId;
      c.index = i == 1 ? I64 : I32;
      add8(c);
    }
  }

  // Varlen: lengths 0..T (0 skips the sequence), with and without num_accepted.
  {
    const int64_t tl[][2] = {{2, 7}, {4, 4}, {4, 16}, {8, 8}};
    int i = 0;
    for (const auto& p : tl) {
      ReplayCase c;
      c.tag = "varlen";
      c.varlen(p[0]).ring(p[1]).run(steps_for(p[1], 2)).shape(2, 1, 16, 16);
      c.pad = Pad::Negative;
      c.index = i % 2 ? I64 : I32;
      c.dtypes(i % 2 ? F16 : F32, i % 2 ? BF16 : F32);
      add(c);
      ++i;
    }
    for (const auto& p : {std::pair<int64_t, int64_t>{4, 7}, {8, 16}}) {
      ReplayCase c;
      c.tag = "varlen_speculative";
      c.varlen(p.first).ring(p.second).run(steps_for(p.second, 2)).shape(2, 1, 16, 16);
      c.speculative = true;
      c.pad = Pad::PadSlotId;
      c.dtypes(BF16, BF16);
      add(c);
    }
  }

  // Mamba-1: per-channel A (S4D-real), dt, D and dt_bias, H = G = 1.
  {
    ReplayCase c;
    c.tag = "mamba1";
    c.mamba1_layer(128, 16).single().ring(7).run(20);
    c.pad = Pad::Negative;
    add(c);
    c.tag = "mamba1_speculative";
    c.mamba1_layer(64, 16).multi(4).ring(16).run(20).dtypes(BF16, BF16);
    c.speculative = true;
    add(c);
    c = ReplayCase();
    c.tag = "mamba1_dt_per_head";  // only dt_bias makes the step per channel
    c.mamba1_layer(64, 16).single().ring(2).run(12).dtypes(F32, F16);
    c.mamba1_dt_per_head = true;
    add(c);
    c = ReplayCase();
    c.tag = "mamba1_i16_varlen";
    c.mamba1_layer(32, 16).varlen(2).ring(4).run(14).dtypes(I16, BF16, BF16);
    c.pad = Pad::Negative;
    add(c);
    c.tag = "mamba1_i8_varlen";
    c.dtypes(I8, BF16, BF16);
    add8(c);
    c = ReplayCase();
    c.tag = "mamba1_f8e4m3";
    c.mamba1_layer(64, 16).single().ring(7).run(16).dtypes(E4M3, F32);
    c.pad = Pad::Negative;
    add8(c);
    c.tag = "mamba1_f8e4m3_sr_speculative";
    c.multi(2).ring(5).dtypes(E4M3, BF16).sr(0x3e);
    c.speculative = true;
    add8(c);
  }

  // Padding and slot indices.
  {
    ReplayCase c;
    c.tag = "no_src_index";  // sequence b uses slot b, every slot served every step
    c.single().ring(7).run(20).shape(2, 1, 16, 16);
    c.index = SSU_DTYPE_INVALID;
    add(c);
    c.tag = "no_src_index_speculative";
    c.multi(4).ring(7).run(16).dtypes(BF16, BF16);
    c.speculative = true;
    add(c);
    c = ReplayCase();
    c.tag = "pad_slot_id";
    c.multi(2).ring(4).run(16).shape(2, 1, 16, 16);
    c.pad = Pad::PadSlotId;
    c.index = I64;
    c.batch = 5;
    add(c);
    c.tag = "pad_slot_id_in_range";
    c.pad = Pad::PadSlotIdInRange;
    c.index = I32;
    c.speculative = true;
    add(c);
    c = ReplayCase();
    c.tag = "batch_1";
    c.single().ring(2).run(10).shape(2, 1, 16, 16);
    c.batch = 1;
    c.spare_active = 0;
    add(c);
    c.tag = "many_spare_slots";  // most slots wait several steps between calls
    c.multi(2).ring(7).run(30);
    c.batch = 2;
    c.spare_active = 4;
    c.pad = Pad::Negative;
    c.index = I64;
    add(c);
  }

  // disable_state_update: outputs only, nothing of the slot written.
  {
    ReplayCase c;
    c.tag = "disable_state_update";
    c.single().ring(2).run(16).shape(2, 1, 16, 16);
    c.disable_every = 3;
    c.pad = Pad::Negative;
    add(c);
    c.multi(4).ring(7).run(16).dtypes(BF16, BF16);
    c.disable_every = 2;
    c.speculative = true;
    add(c);
    c = ReplayCase();
    c.tag = "disable_state_update_only";  // every step, from warm slots
    c.multi(2).ring(7).run(6).dtypes(I16, F32).shape(2, 1, 16, 16);
    c.disable_every = 1;
    c.warm_start = true;
    c.speculative = true;
    add(c);
    c.dtypes(E4M3, BF16).sr(0xd15);
    add8(c);
    c = ReplayCase();
    c.tag = "disable_state_update";
    c.multi(2).ring(4).run(16).dtypes(I8, F16).shape(2, 1, 16, 16);
    c.disable_every = 3;
    c.pad = Pad::Negative;
    add8(c);
    c = ReplayCase();
    c.tag = "disable_state_update_varlen";
    c.varlen(4).ring(8).run(16).dtypes(F16, F16).shape(2, 1, 16, 16);
    c.disable_every = 4;
    add(c);
  }

  // Stochastic rounding of 16-bit checkpoints.
  {
    ReplayCase c;
    c.tag = "stochastic_rounding";
    c.single().ring(7).run(20).dtypes(BF16, BF16).shape(2, 1, 32, 16).sr(0x5eed);
    c.pad = Pad::Negative;
    add(c);
    c.multi(4).ring(16).run(20).dtypes(F16, F16).sr(0xfeedbeefcafe, 7);
    c.speculative = true;
    add(c);
    c.varlen(4).ring(8).run(16).dtypes(BF16, F32).sr(12345, 1);
    c.speculative = false;
    add(c);
    c.single().ring(1).run(12).dtypes(F16, BF16).sr(0xdeadbeef, 32);
    add(c);
    // ... and of e4m3 checkpoints.
    c.single().ring(7).run(20).dtypes(E4M3, BF16).sr(0x5eed8);
    add8(c);
    c.multi(4).ring(16).run(20).dtypes(E4M3, F16).sr(0xfeedbeefcafe, 7);
    c.speculative = true;
    add8(c);
    c.single().ring(1).run(12).dtypes(E4M3, F32).sr(0xdeadbeef, 32);
    c.speculative = false;
    add8(c);
  }

  // Layouts: padded strides everywhere, entry-major rings.
  {
    ReplayCase c;
    c.tag = "layout";
    c.single().ring(7).run(20).shape(2, 1, 16, 16);
    c.layout = kReplayPadded;
    c.pad = Pad::Negative;
    add(c);
    c.multi(4).ring(8).run(16).dtypes(BF16, BF16);
    c.speculative = true;
    add(c);
    c.layout = kReplayEntryMajor;
    c.multi(2).ring(7).dtypes(I16, F16);
    add(c);
    c.layout = kReplayPadded | kReplayEntryMajor;
    c.dtypes(I8, BF16);
    add8(c);
    c.single().dtypes(E4M3, F16).sr(0x1a);
    c.speculative = false;
    add8(c);
    c = ReplayCase();
    c.tag = "layout_mamba1";
    c.mamba1_layer(32, 16).varlen(2).ring(5).run(14).dtypes(F16, F32);
    c.layout = kReplayPadded | kReplayEntryMajor;
    c.pad = Pad::PadSlotId;
    add(c);
  }

  // Slots that start mid-ring (counters and ring entries of earlier calls).
  {
    ReplayCase c;
    c.tag = "warm_start";
    c.single().ring(16).run(24).shape(2, 1, 16, 16);
    c.warm_start = true;
    add(c);
    c.multi(4).ring(7).run(14).dtypes(BF16, BF16);
    c.speculative = true;
    c.pad = Pad::Negative;
    add(c);
    c.varlen(8).ring(16).run(12).dtypes(I16, BF16);
    c.speculative = false;
    add(c);
    c.dtypes(I8, BF16);
    add8(c);
    c.multi(4).ring(7).run(14).dtypes(E4M3, F32);
    c.speculative = true;
    add8(c);
  }

  // Optional inputs absent, no softplus, steps beyond softplus' threshold.
  {
    ReplayCase c;
    c.tag = "optional_inputs";
    c.multi(2).ring(4).run(12).shape(2, 1, 16, 16);
    c.has_D = false;
    c.has_z = false;
    add(c);
    c.has_D = true;
    c.has_dt_bias = false;
    add(c);
    c.has_z = true;
    c.has_dt_bias = true;
    c.softplus = false;
    add(c);
    c.softplus = true;
    c.large_dt = true;
    c.single().ring(7).run(16).dtypes(BF16, BF16);
    add(c);
  }

  // Shapes: groups, larger dstate and dim.
  {
    ReplayCase c;
    c.tag = "shapes";
    c.single().ring(7).run(16).shape(4, 2, 32, 64);
    c.pad = Pad::Negative;
    add(c);
    c.multi(4).ring(8).run(12).shape(4, 4, 16, 128).dtypes(BF16, BF16);
    c.speculative = true;
    add(c);
    c.single().ring(16).run(24).shape(8, 1, 64, 16).dtypes(F32, BF16);
    c.speculative = false;
    c.batch = 4;
    add(c);
  }

  // Round trips (SPEC section 7): replay + flush against the plain update
  // fed the committed tokens. f32: bit-identical.
  for (int64_t L : {1, 2, 7, 16}) {
    ReplayCase c;
    c.tag = "round_trip";
    c.single().ring(L).run(std::max(16, int(2 * L + 6))).shape(2, 1, 16, 16);
    c.round_trip = true;
    c.pad = Pad::Negative;
    c.index = L % 2 ? I32 : I64;
    add(c);
    ReplayCase s = c;
    s.tag = "round_trip_speculative";
    if (L >= 4) s.multi(4);
    else s.multi(L);
    s.speculative = true;
    s.run(std::max(14, int(L + 8)));
    add(s);
  }
  {
    ReplayCase c;
    c.tag = "round_trip_varlen";
    c.varlen(4).ring(7).run(14).shape(2, 1, 16, 16);
    c.round_trip = true;
    c.speculative = true;
    c.pad = Pad::PadSlotId;
    add(c);
    c.tag = "round_trip_mamba1";
    c.mamba1_layer(32, 16).single().ring(7).run(16);
    c.speculative = false;
    c.pad = Pad::Negative;
    add(c);
  }
  // 16-bit checkpoints: within tolerance of the plain update and no worse
  // against float64; with L = 1 every step stores what the plain update
  // stores, so the bits agree for every format.
  for (ssu_dtype_t st : {BF16, F16, I16}) {
    ReplayCase c;
    c.tag = "round_trip_16bit";
    c.dtypes(st, st == I16 ? F32 : st).shape(2, 1, 16, 16);
    c.round_trip = true;
    c.pad = Pad::Negative;
    c.single().ring(1).run(12);
    add(c);
    c.single().ring(7).run(24);
    add(c);
    c.multi(4).ring(16).run(20);
    c.speculative = true;
    add(c);
  }
  {
    ReplayCase c;
    c.tag = "round_trip_stochastic";
    c.dtypes(BF16, BF16).shape(2, 1, 16, 16).sr(0xabcdef);
    c.round_trip = true;
    c.pad = Pad::Negative;
    c.single().ring(1).run(12);
    add(c);
    c.dtypes(F16, F16).sr(0x1234567, 5);
    c.multi(4).ring(7).run(16);
    c.speculative = true;
    add(c);
  }
  // 8-bit checkpoints (SPEC section 8): the same round trips; with L = 1
  // every step stores what the plain update stores (codes and scales).
  for (ssu_dtype_t st : {I8, E4M3}) {
    ReplayCase c;
    c.tag = "round_trip_8bit";
    c.dtypes(st, st == I8 ? F32 : BF16).shape(2, 1, 16, 16);
    c.round_trip = true;
    c.pad = Pad::Negative;
    c.single().ring(1).run(12);
    add8(c);
    c.single().ring(2).run(16);
    c.index = I64;
    add8(c);
    c.single().ring(7).run(24);
    add8(c);
    c.multi(4).ring(16).run(20);
    c.speculative = true;
    add8(c);
  }
  {
    ReplayCase c;
    c.tag = "round_trip_stochastic";
    c.dtypes(E4M3, BF16).shape(2, 1, 16, 16).sr(0xabcdef8);
    c.round_trip = true;
    c.pad = Pad::Negative;
    c.single().ring(1).run(12);
    add8(c);
    c.dtypes(E4M3, F16).sr(0x12345678, 5);
    c.multi(4).ring(7).run(16);
    c.speculative = true;
    add8(c);
  }
  // Every checkpoint store against the plain update over the same tokens
  // from the same checkpoint: the same bits in every format (RN, SR, int16).
  {
    struct F {
      ssu_dtype_t state, input;
      bool sr;
    };
    const F fs[] = {{F32, BF16, false}, {BF16, BF16, false}, {F16, F32, false},
                    {I16, BF16, false}, {BF16, F32, true},   {F16, F16, true}};
    int i = 0;
    for (const F& f : fs) {
      ReplayCase c;
      c.tag = "flush_exact";
      c.dtypes(f.state, f.input).shape(2, 1, 32, 16);
      if (f.sr) c.sr(0x51ed + uint64_t(i), i % 2 ? 0 : 3);
      c.flush_exact = true;
      c.pad = Pad::Negative;
      if (i % 3 == 0) c.single().ring(7).run(24);
      if (i % 3 == 1) c.multi(4).ring(16).run(20);
      if (i % 3 == 2) c.varlen(4).ring(8).run(18);
      c.speculative = i % 3 != 0;
      c.index = i % 2 ? I64 : I32;
      add(c);
      ++i;
    }
    const F fs8[] = {{I8, BF16, false}, {E4M3, F32, false}, {E4M3, BF16, true},
                     {I8, F16, false},  {E4M3, F16, false}, {E4M3, F32, true}};
    for (int j = 0; j < 6; ++j) {
      const F& f = fs8[j];
      ReplayCase c;
      c.tag = "flush_exact";
      c.dtypes(f.state, f.input).shape(2, 1, 32, 16);
      if (f.sr) c.sr(0x8b1d + uint64_t(j), j % 2 ? 0 : 3);
      c.flush_exact = true;
      c.pad = Pad::Negative;
      if (j % 3 == 0) c.single().ring(7).run(24);
      if (j % 3 == 1) c.multi(4).ring(16).run(20);
      if (j % 3 == 2) c.varlen(4).ring(8).run(18);
      c.speculative = j % 3 != 0;
      c.index = j % 2 ? I64 : I32;
      add8(c);
    }
    // Groups of four heads with dstate 128 and 20 rows: on the GPU the
    // warp-per-head kernels' shared group, their f32 copies of the committed
    // B entries (flush) and of C (2 and 4 tokens), full 16-element lane rows
    // and an odd number of row steps (the f32 kernels fold two at a time).
    const F gs[] = {{F32, BF16, false}, {BF16, BF16, false}, {F16, F32, true}, {I16, F16, false}};
    for (const F& f : gs) {
      ReplayCase c;
      c.tag = "flush_exact_groups";
      c.dtypes(f.state, f.input).shape(8, 2, 20, 128);
      if (f.sr) c.sr(0x6a3 + uint64_t(i), 0);
      c.flush_exact = true;
      c.pad = Pad::PadSlotId;
      if (i % 2 == 0) c.single().ring(16).run(40);
      else c.multi(i % 4 == 1 ? 2 : 4).ring(i % 4 == 1 ? 7 : 16).run(18);
      c.speculative = i % 2 != 0;
      add(c);
      ++i;
    }
    const F gs8[] = {{I8, BF16, false}, {E4M3, F16, true}};
    for (int j = 0; j < 2; ++j) {
      const F& f = gs8[j];
      ReplayCase c;
      c.tag = "flush_exact_groups";
      c.dtypes(f.state, f.input).shape(8, 2, 20, 128);
      if (f.sr) c.sr(0x8a3 + uint64_t(j), 0);
      c.flush_exact = true;
      c.pad = Pad::PadSlotId;
      if (j == 0) c.single().ring(16).run(40);
      else c.multi(4).ring(16).run(18);
      c.speculative = j != 0;
      add8(c);
    }
    ReplayCase c;
    c.tag = "flush_exact_mamba1";
    c.mamba1_layer(64, 16).single().ring(2).run(12).dtypes(I16, F32);
    c.flush_exact = true;
    add(c);
    c.mamba1_dt_per_head = true;
    c.multi(2).ring(5).dtypes(BF16, BF16).sr(77);
    c.speculative = true;
    add(c);
    c = ReplayCase();
    c.tag = "flush_exact_mamba1";
    c.mamba1_layer(64, 16).single().ring(2).run(12).dtypes(I8, F32);
    c.flush_exact = true;
    add8(c);
    c.mamba1_dt_per_head = true;
    c.multi(2).ring(5).dtypes(E4M3, BF16).sr(78);
    c.speculative = true;
    add8(c);
  }
  // 16-bit checkpoints whose inputs have their dtype, at the GPU warp-per-
  // head kernels' shapes (dstate 128: two 16-byte chunks per lane and row;
  // 64: one), with and without a shared group, an odd number of row steps
  // (20 rows) and whole heads of 64 rows: one token per call first.
  {
    struct M {
      ssu_dtype_t st;
      int64_t h, g, p, n, L;
    };
    const M ms[] = {{BF16, 8, 2, 20, 128, 16}, {F16, 8, 2, 20, 128, 7},
                    {BF16, 4, 4, 24, 64, 7},   {F16, 4, 1, 64, 64, 16},
                    {BF16, 8, 1, 64, 128, 32}};
    int i = 0;
    for (const M& m : ms) {
      ReplayCase c;
      c.tag = "mma_dots";
      c.single().ring(m.L).run(int(2 * m.L + 6)).shape(m.h, m.g, m.p, m.n).dtypes(m.st, m.st);
      c.flush_exact = i % 2 == 0;
      c.pad = i % 2 ? Pad::PadSlotId : Pad::Negative;
      c.speculative = i == 3;
      add(c);
      ++i;
    }
    // Two and four tokens, whose row sums the GPU kernels take by tensor
    // cores (a token pair per mma; with dstate 64 the lanes' second chunk is
    // zero in both operands), and varlen calls mixing 1..4 tokens (one and
    // three go the FMA way).
    ReplayCase c;
    c.tag = "mma_dots_tokens";
    c.multi(4).ring(16).run(14).shape(8, 2, 20, 128).dtypes(F16, F16);
    c.flush_exact = true;
    c.speculative = true;
    add(c);
    c.multi(2).ring(7).run(16).shape(4, 4, 24, 64).dtypes(BF16, BF16);
    c.pad = Pad::PadSlotId;
    add(c);
    c.varlen(4).ring(8).run(18).shape(8, 2, 20, 128).dtypes(BF16, BF16);
    c.speculative = false;
    add(c);
    // Three and eight tokens and varlen calls of 1..8 at the same shapes
    // (the FMA way on the GPU).
    c.multi(3).ring(7).run(14).shape(4, 4, 24, 64).dtypes(F16, F16);
    c.speculative = true;
    add(c);
    c.multi(8).ring(16).run(12).shape(8, 2, 20, 128).dtypes(BF16, BF16);
    c.flush_exact = true;
    add(c);
    c.varlen(8).ring(16).run(14).shape(8, 1, 64, 128).dtypes(F16, F16);
    c.flush_exact = false;
    c.speculative = false;
    add(c);
  }
  return v;
}

std::vector<ReplayCase> replay_long_case_table() {
  std::vector<ReplayCase> v;
  uint64_t seed = 9000;
  auto add = [&](ReplayCase c) {
    c.seed = seed++;
    v.push_back(c);
  };
  const ssu_dtype_t sts[] = {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16,
                             SSU_DTYPE_I16, SSU_DTYPE_I8,   SSU_DTYPE_F8E4M3};
  for (ssu_dtype_t st : sts)
    for (int64_t L : {16, 32}) {
      ReplayCase c;
      c.tag = "long_serving";
      c.single().ring(L).run(int(2 * L + 8)).shape(8, 1, 64, 128);
      c.dtypes(st, SSU_DTYPE_BF16);
      c.batch = 64;
      c.spare_active = 16;
      c.pad = Pad::Negative;
      if (st == SSU_DTYPE_BF16 || st == SSU_DTYPE_F8E4M3) c.sr(0x77);
      add(c);
      ReplayCase s = c;
      s.tag = "long_speculative";
      s.multi(4).run(int(L + 8));
      s.batch = 32;
      s.speculative = true;
      add(s);
    }
  ReplayCase m;
  m.tag = "long_mamba1";
  m.mamba1_layer(1024, 16).single().ring(16).run(40).dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16);
  m.batch = 32;
  add(m);
  return v;
}

}  // namespace ssutest
