// Per-sequence slot resolution shared by the CPU checks and loops.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/convert.h"
#include "ssu_update_params.h"

namespace ssu {
namespace cpu {

inline bool is_pad(const ssu_update_params& p, int64_t slot) {
  return slot < 0 || slot == p.pad_slot_id;
}

struct Sequence {
  int64_t tok0;      // first packed token (varlen), else 0
  int64_t len;       // tokens to process (may be <= 0 for varlen)
  int64_t init_col;  // src column of the initial state
  int64_t src;       // initial slot (may be padding)
  bool pad;
};

// cu_seqlens[b + 1] - cu_seqlens[b] without overflow: entries as far apart
// as INT64_MIN and INT64_MAX give a length beyond any T (or below zero).
inline int64_t sequence_length(int64_t tok0, int64_t tok1) {
  int64_t len;
  if (__builtin_sub_overflow(tok1, tok0, &len))
    return tok1 > tok0 ? INT64_MAX : INT64_MIN;
  return len;
}

inline Sequence resolve_sequence(const ssu_update_params& p, int64_t b) {
  Sequence s;
  if (p.features & SSU_F_VARLEN) {
    s.tok0 = load_index(p.cu_seqlens, p.seqlen_dtype, b * p.cu_seqlens_stride);
    s.len = sequence_length(
        s.tok0, load_index(p.cu_seqlens, p.seqlen_dtype, (b + 1) * p.cu_seqlens_stride));
    if (s.len <= 0) {
      // An empty sequence reads nothing more: check_data does not look at
      // its num_accepted entry, so that may hold any value (a column far
      // outside src_index included).
      s.init_col = 0;
      s.src = -1;
      s.pad = true;
      return s;
    }
  } else {
    s.tok0 = 0;
    s.len = p.ntokens;
  }
  s.init_col = 0;
  if (p.features & SSU_F_HAS_ACCEPTED) {
    const int64_t acc = load_index(p.num_accepted, p.accepted_dtype, b * p.num_accepted_stride);
    s.init_col = std::max<int64_t>(acc - 1, 0);
  }
  s.src = (p.features & SSU_F_HAS_SRC)
              ? load_index(p.src_index, p.index_dtype,
                           b * p.src_stride_b + s.init_col * p.src_stride_t)
              : b;
  s.pad = is_pad(p, s.src);
  return s;
}

inline int64_t dst_slot(const ssu_update_params& p, int64_t b, int64_t t) {
  return load_index(p.dst_index, p.index_dtype, b * p.dst_stride_b + t * p.dst_stride_t);
}

inline int64_t intermediate_slot(const ssu_update_params& p, int64_t b, const Sequence& s) {
  return (p.features & SSU_F_HAS_INTER_INDEX)
             ? load_index(p.inter_index, p.inter_index_dtype, b * p.inter_index_stride)
             : s.src;
}

}  // namespace cpu
}  // namespace ssu
