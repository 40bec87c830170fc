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

inline Sequence resolve_sequence(const ssu_update_params& p, int64_t b) {
  Sequence s;
  if (p.features & SSU_F_VARLEN) {
    s.tok0 = load_index(p.cu_seqlens, p.seqlen_dtype, b * p.cu_seqlens_stride);
    s.len = load_index(p.cu_seqlens, p.seqlen_dtype, (b + 1) * p.cu_seqlens_stride) - s.tok0;
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
