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


def _silu(v):
    return v / (1.0 + np.exp(-v))


def mamba3_step(state, prev_B, prev_x, A, dt, trap, B, C, x, xproj, D=None, z=None,
                zproj=None, outproj=None, src_index=None, dst_index=None, update_prev=False,
                pad_slot_id=-1, out=None):
    """The Mamba-3 decode step of ssu.h in float64. Returns (state, prev_B,
    prev_x, out); the pools are copies with the stored rows replaced."""
    f = lambda a: None if a is None else np.asarray(a, dtype=np.float64)
    st, pb, px = f(state).copy(), f(prev_B).copy(), f(prev_x).copy()
    st0, pb0, px0 = f(state), f(prev_B), f(prev_x)
    A, dt, trap, B, C, x, xproj, D, z, zproj, outproj = map(
        f, (A, dt, trap, B, C, x, xproj, D, z, zproj, outproj))
    Bt, R, H, N = B.shape
    P = x.shape[2]
    res = np.zeros((Bt, H, P) if outproj is not None else (Bt, R, H, P))
    for b in range(Bt):
        s = b if src_index is None else int(src_index[b])
        if _is_pad(s, pad_slot_id):
            continue
        d = s if dst_index is None else int(dst_index[b])
        alpha = np.exp(A[b] * dt[b])                      # (H,)
        gamma = trap[b] * dt[b]
        beta = (1.0 - trap[b]) * dt[b] * alpha
        # inner[r, h, p, n] = gamma*x*B + beta*xprev*Bprev, weighted by xproj
        inner = (gamma[None, :, None, None] * x[b][None, :, :, None] * B[b][:, :, None, :]
                 + beta[None, :, None, None] * px0[s][None, :, :, None]
                 * pb0[s][:, :, None, :])
        hnew = alpha[:, None, None] * st0[s] + np.einsum("rhp,rhpn->hpn", xproj, inner)
        y = np.einsum("hpn,rhn->rhp", hnew, C[b])
        if D is not None:
            y = y + D[None, :, None] * x[b][None] * xproj
        if outproj is not None:
            if z is not None:
                y = y * _silu(z[b][None] * zproj)
            res[b] = np.sum(y * outproj, axis=0)
        else:
            res[b] = y
        if _is_pad(d, pad_slot_id):
            continue
        st[d] = hnew
        if update_prev:
            pb[d] = B[b]
            px[d] = x[b]
    return st, pb, px, res


def mamba3_rotary(angle_state, angle_rate, dt, q, k, q_bias=None, k_bias=None,
                  src_index=None, dst_index=None, halved=False, pad_slot_id=-1):
    """The Mamba-3 rotary step of ssu.h in float64. Returns (angle_state,
    q_out, k_out)."""
    f = lambda a: None if a is None else np.asarray(a, dtype=np.float64)
    ang0 = f(angle_state)
    ang = ang0.copy()
    rate, dt, q, k, q_bias, k_bias = map(f, (angle_rate, dt, q, k, q_bias, k_bias))
    Bt, R, H, N = q.shape
    Sa = ang.shape[2]
    qo, ko = np.zeros_like(q), np.zeros_like(k)
    i = np.arange(Sa)
    a_idx, c_idx = (i, i + N // 2) if halved else (2 * i, 2 * i + 1)
    for b in range(Bt):
        s = b if src_index is None else int(src_index[b])
        if _is_pad(s, pad_slot_id):
            continue
        d = s if dst_index is None else int(dst_index[b])
        theta = np.mod(ang0[s] + np.tanh(rate[b]) * np.pi * dt[b][:, None], 2.0 * np.pi)
        if not _is_pad(d, pad_slot_id):
            ang[d] = theta
        cos, sin = np.cos(theta), np.sin(theta)           # (H, Sa)
        for src, bias, dst in ((q, q_bias, qo), (k, k_bias, ko)):
            v = src[b] + (bias if bias is not None else 0.0)   # (R, H, N)
            w = v.copy()
            va, vc = v[:, :, a_idx], v[:, :, c_idx]
            w[:, :, a_idx] = va * cos - vc * sin
            w[:, :, c_idx] = va * sin + vc * cos
            dst[b] = w
    return ang, qo, ko

