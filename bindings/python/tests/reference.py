"""A float64 numpy reference of the selective state update (ssu.h, SPEC.md
sections 1-2), written independently of the library for the tests."""

import numpy as np


def bf16_bits(a):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _softplus(v):
    return np.where(v > 20.0, v, np.log1p(np.exp(np.minimum(v, 20.0))))


def _is_pad(i, pad_slot_id):
    return i < 0 or i == pad_slot_id


def update(state, x, dt, A, B, C, D=None, dt_bias=None, z=None, src_index=None,
           dst_index=None, cu_seqlens=None, max_tokens=None, num_accepted_tokens=None,
           intermediate_states=None, intermediate_index=None, dt_softplus=False,
           disable_state_update=False, pad_slot_id=-1, out=None):
    """Returns (state, out, intermediate_states) as float64 arrays.

    `state`, `out` and `intermediate_states` are the arrays before the call
    (their untouched parts are carried over); every input is converted to
    float64 first, so inputs should already hold their dtype's values."""
    f = lambda a: None if a is None else np.asarray(a, dtype=np.float64)
    st0 = f(state)
    st = st0.copy()
    x, dt, A, B, C, D, dt_bias, z = map(f, (x, dt, A, B, C, D, dt_bias, z))
    res_out = f(out).copy() if out is not None else np.zeros_like(x)
    inter = f(intermediate_states).copy() if intermediate_states is not None else None
    S, H, P, N = st.shape
    G = B.shape[-2]
    rep = H // G

    varlen = cu_seqlens is not None
    if varlen:
        cu = [int(v) for v in cu_seqlens]
        Bt = len(cu) - 1
        T = int(max_tokens)
        multi = True
    elif x.ndim == 4:
        Bt, T = x.shape[:2]
        multi = True
    else:
        Bt, T = x.shape[0], 1
        multi = False

    per_channel_dt = dt.ndim == x.ndim  # (..., H, P)
    A_full = np.broadcast_to(A[:, None, None], (H, P, N)) if A.ndim == 1 else A
    D_full = None if D is None else np.broadcast_to(D[:, None] if D.ndim == 1 else D, (H, P))
    bias_full = None if dt_bias is None else \
        np.broadcast_to(dt_bias[:, None] if dt_bias.ndim == 1 else dt_bias, (H, P))

    src = None if src_index is None else np.asarray(src_index)
    dst = None if dst_index is None else np.asarray(dst_index)
    na = None if num_accepted_tokens is None else np.asarray(num_accepted_tokens)

    for b in range(Bt):
        # Token positions of sequence b, as index tuples into x-like arrays.
        if varlen:
            toks = [(i,) for i in range(cu[b], cu[b + 1])]
            if len(toks) > T:
                raise ValueError("sequence longer than max_tokens")
        elif multi:
            toks = [(b, t) for t in range(T)]
        else:
            toks = [(b,)]
        if src is None:
            s0 = b
        elif src.ndim == 1:
            s0 = int(src[b])
        else:
            col = max(int(na[b]) - 1, 0) if na is not None else 0
            s0 = int(src[b, col])
        if _is_pad(s0, pad_slot_id):
            for tok in toks:
                res_out[tok] = 0.0
            continue
        if not toks:
            continue
        h = st0[s0].copy()  # the pool as it was before the call
        for t, tok in enumerate(toks):
            d = dt[tok]
            d = d if per_channel_dt else np.broadcast_to(d[:, None], (H, P))
            if bias_full is not None:
                d = d + bias_full
            if dt_softplus:
                d = _softplus(d)
            dA = np.exp(A_full * d[:, :, None])
            Bg = np.repeat(B[tok], rep, axis=0)  # (H, N)
            Cg = np.repeat(C[tok], rep, axis=0)
            xv = x[tok]  # (H, P)
            h = h * dA + (Bg[:, None, :] * d[:, :, None]) * xv[:, :, None]
            y = np.einsum("hpn,hn->hp", h, Cg)
            if D_full is not None:
                y = y + D_full * xv
            if z is not None:
                zv = z[tok]
                y = y * (zv / (1.0 + np.exp(-zv)))
            res_out[tok] = y
            if dst is not None and dst.ndim == 2 and not disable_state_update:
                d_slot = int(dst[b, t])
                if not _is_pad(d_slot, pad_slot_id):
                    st[d_slot] = h
            if inter is not None:
                idx = s0 if intermediate_index is None else int(intermediate_index[b])
                inter[idx, t] = h
        if disable_state_update or (dst is not None and dst.ndim == 2):
            continue
        d_slot = s0 if dst is None else int(dst[b])
        if not _is_pad(d_slot, pad_slot_id):
            st[d_slot] = h
    return st, res_out, inter
