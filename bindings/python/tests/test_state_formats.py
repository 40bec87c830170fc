"""int16 block-scaled state pools, stochastic rounding of f16/bf16 states and
the seed they read, on the CPU backend."""

import numpy as np
import pytest

import ssu
from reference import bf16_bits, bf16_to_f32, update as ref_update
from test_cpu import _DLPackOnly, make, same_bits


@pytest.fixture(scope="module")
def ctx():
    with ssu.Context("cpu", num_threads=2) as c:
        yield c


def quantize(v):
    """Rows of the last axis to int16 codes and f32 decode scales, as ssu.h
    describes the stores of an int16 pool."""
    v = np.asarray(v, np.float32)
    amax = np.max(np.abs(v), axis=-1)
    enc = np.where(amax == 0, np.float32(1), np.float32(32767) / np.where(amax == 0, 1, amax))
    enc = enc.astype(np.float32)
    q = np.rint(np.clip(v * enc[..., None], -32767, 32767)).astype(np.int16)
    return q, (np.float32(1) / enc).astype(np.float32)


def dequantize(q, scale):
    return q.astype(np.float32) * scale[..., None]


def int16_args(seed, **kw):
    a = make(seed, **kw)
    a["state"], a["state_scale"] = quantize(a["state"])
    return a


def check_int16(got_q, got_scale, want):
    got = dequantize(got_q, got_scale).astype(np.float64)
    tol = 1e-4 * np.abs(want) + 2.0 * got_scale[..., None]
    assert np.all(np.abs(got - want) <= tol), np.max(np.abs(got - want) - tol)


def test_int16_update_against_reference(ctx):
    a = int16_args(30, Bt=3)
    a["src_index"] = np.array([4, -1, 1], np.int32)
    a["dst_index"] = np.array([2, 3, 1], np.int32)
    a["dt_softplus"] = True
    q0, s0 = a["state"].copy(), a["state_scale"].copy()
    want_state, want_out, _ = ref_update(
        **{k: v for k, v in a.items() if k not in ("state", "state_scale")},
        state=dequantize(q0, s0))
    plan = ctx.plan_update(**a)
    plan.execute(**a)
    np.testing.assert_allclose(a["out"], want_out, rtol=1e-4, atol=1e-4)
    check_int16(a["state"], a["state_scale"], want_state)
    for s in (0, 3, 4, 5):  # no destination: codes and scales untouched
        assert same_bits(a["state"][s], q0[s]) and same_bits(a["state_scale"][s], s0[s])
    # Every stored row uses the full code range.
    assert np.all(np.max(np.abs(a["state"][[1, 2]].astype(np.int32)), axis=-1) == 32767)


def test_int16_identity_step_round_trips(ctx):
    # A = 0 and B = 0 leave every row as loaded: the store quantizes it back
    # to the same codes.
    a = int16_args(31, Bt=2)
    a["A"] = np.zeros_like(a["A"])
    a["B"] = np.zeros_like(a["B"])
    q0, s0 = a["state"].copy(), a["state_scale"].copy()
    ctx.update(**a)
    np.testing.assert_array_equal(a["state"], q0)
    np.testing.assert_allclose(a["state_scale"], s0, rtol=1e-6, atol=0)


def test_int16_intermediate_states(ctx):
    a = int16_args(32, S=4, Bt=2, T=2)
    a["src_index"] = np.array([3, 0], np.int32)
    a["intermediate_states"] = np.zeros((4, 2, 4, 16, 16), np.int16)
    a["intermediate_scales"] = np.full((4, 2, 4, 16), np.nan, np.float32)
    a["dt_softplus"] = True
    want_state, want_out, want_inter = ref_update(
        **{k: v for k, v in a.items()
           if k not in ("state", "state_scale", "intermediate_states", "intermediate_scales")},
        state=dequantize(a["state"], a["state_scale"]),
        intermediate_states=np.zeros((4, 2, 4, 16, 16)))
    ctx.update(**a)
    np.testing.assert_allclose(a["out"], want_out, rtol=1e-4, atol=1e-4)
    check_int16(a["state"], a["state_scale"], want_state)
    for s in (3, 0):
        check_int16(a["intermediate_states"][s], a["intermediate_scales"][s], want_inter[s])


def test_int16_needs_its_scales(ctx):
    a = int16_args(33, Bt=1)
    del a["state_scale"]
    with pytest.raises(ssu.SsuError) as e:
        ctx.plan_update(**a)
    assert e.value.family == 1 and "state_scale" in e.value.message


# ---------------------------------------------------------------------------
# Stochastic rounding
# ---------------------------------------------------------------------------

def _ordinal(bits, sign_bit, mag_mask):
    bits = bits.astype(np.int64)
    return np.where(bits & sign_bit, -(bits & mag_mask), bits & mag_mask)


def within_one_ulp_f16(sr, rn):
    """SR picks one of the two f16 neighbours of the fp32 value, RN the
    nearest: they are at most one unit apart. Below 2^-14 SR flushes to a
    signed zero."""
    s, r = sr.view(np.uint16), rn.view(np.uint16)
    close = np.abs(_ordinal(s, 0x8000, 0x7FFF) - _ordinal(r, 0x8000, 0x7FFF)) <= 1
    flushed = ((r & 0x7C00) == 0) & ((s & 0x7FFF) == 0)
    return np.all(close | flushed)


def f16_update(ctx, a, state0, **extra):
    state = state0.copy()
    ctx.update(**{**a, "state": state, **extra})
    return state


def sr_args(seed):
    a = make(seed, S=4, Bt=2)
    a["src_index"] = np.array([3, 1], np.int32)
    a["dt_softplus"] = True
    return a, a.pop("state").astype(np.float16)


def test_stochastic_rounding_f16(ctx):
    a, state0 = sr_args(40)
    rn = f16_update(ctx, a, state0)
    seed = np.array([1234], np.uint64)
    sr1 = f16_update(ctx, a, state0, rounding_seed=seed)
    assert same_bits(sr1, f16_update(ctx, a, state0, rounding_seed=seed)), "not deterministic"
    sr2 = f16_update(ctx, a, state0, rounding_seed=np.array([99], np.uint64))
    for sr in (sr1, sr2):
        assert within_one_ulp_f16(sr, rn)
    stored = [3, 1]
    n = rn[stored].size
    assert np.count_nonzero(sr1[stored].view(np.uint16) != rn[stored].view(np.uint16)) > n // 20
    assert np.count_nonzero(sr1[stored].view(np.uint16) != sr2[stored].view(np.uint16)) > n // 20
    for s in (0, 2):  # not stored
        assert same_bits(sr1[s], state0[s])
    # The round count is part of the random stream.
    sr5 = f16_update(ctx, a, state0, rounding_seed=seed, rounding_rounds=5)
    assert within_one_ulp_f16(sr5, rn) and not same_bits(sr5, sr1)


def test_stochastic_rounding_bf16(ctx):
    a, state0 = sr_args(41)
    bits0 = bf16_bits(state0.astype(np.float32))
    rn = bits0.copy()
    ctx.update(**{**a, "state": ssu.tensor(rn, dtype="bf16")})
    sr = bits0.copy()
    ctx.update(**{**a, "state": ssu.tensor(sr, dtype="bf16"),
                  "rounding_seed": np.array([5], np.uint64)})
    assert np.all(np.abs(_ordinal(sr, 0x8000, 0x7FFF) - _ordinal(rn, 0x8000, 0x7FFF)) <= 1)
    assert np.any(sr != rn)
    np.testing.assert_allclose(bf16_to_f32(sr), bf16_to_f32(rn), rtol=1e-2, atol=1e-2)


def test_seed_is_read_when_the_update_runs(ctx):
    # A bound update keeps the seed's address: advancing the seed in place
    # changes the next call's bits, as a replayed CUDA graph would.
    a, state0 = sr_args(42)
    seed = np.array([7], np.uint64)
    state = state0.copy()
    call = ctx.plan_update(**{**a, "state": state, "rounding_seed": seed}).bind(
        **{**a, "state": state, "rounding_seed": seed})
    call()
    first = state.copy()
    state[...] = state0
    call()
    assert same_bits(state, first)
    ctx.advance_seed(seed, 1)
    state[...] = state0
    call()
    assert not same_bits(state, first)
    assert within_one_ulp_f16(state, first)
    # The same result as passing the advanced value to a fresh update.
    assert same_bits(state, f16_update(ctx, a, state0, rounding_seed=np.array([8], np.uint64)))


def test_rounding_seed_refused_for_f32_and_int16(ctx):
    a = make(43, Bt=1)
    with pytest.raises(ssu.SsuError) as e:
        ctx.plan_update(**a, rounding_seed=np.array([1], np.uint64))
    assert e.value.family == 1
    b = int16_args(43, Bt=1)
    with pytest.raises(ssu.SsuError) as e:
        ctx.plan_update(**b, rounding_seed=np.array([1], np.uint64))
    assert e.value.family == 1


# ---------------------------------------------------------------------------
# advance_seed
# ---------------------------------------------------------------------------

def test_advance_seed(ctx):
    seed = np.array([41], np.uint64)
    ctx.advance_seed(seed, 1)
    assert seed[0] == 42
    ssu.advance_seed(ctx, seed, 100)
    assert seed[0] == 142
    seed[0] = np.uint64(2**64 - 2)
    ctx.advance_seed(seed, 5)  # wraps
    assert seed[0] == 3
    s64 = np.array(5, np.int64)  # a 0-d int64 array works too
    ctx.advance_seed(s64, 2)
    assert s64 == 7
    dl = np.array([10], np.uint64)
    ctx.advance_seed(_DLPackOnly(dl, False), 3)
    assert dl[0] == 13


def test_advance_seed_argument_errors(ctx):
    with pytest.raises(TypeError, match="one-element uint64 array"):
        ctx.advance_seed(5, 1)
    with pytest.raises(ValueError, match="exactly one element"):
        ctx.advance_seed(np.zeros(2, np.uint64), 1)
    with pytest.raises(TypeError, match="64-bit"):
        ctx.advance_seed(np.zeros(1, np.int32), 1)
    ro = np.zeros(1, np.uint64)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ctx.advance_seed(ro, 1)
