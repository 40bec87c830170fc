"""The Mamba-3 decode step and rotary step on the CPU backend against the
float64 reference of ssu.h's formulas (tests/reference.py)."""

import numpy as np
import pytest

import ssu
from reference import bf16_bits, bf16_to_f32
from reference import mamba3_rotary as ref_rotary
from reference import mamba3_step as ref_step
from test_cpu import _DLPackOnly, _FakeCuda, same_bits

RTOL = ATOL = 1e-4


@pytest.fixture(scope="module")
def ctx():
    with ssu.Context("cpu", num_threads=2) as c:
        yield c


def step_inputs(seed, S=5, H=2, P=16, N=16, R=2, Bt=3, outproj=False, z=False):
    r = np.random.default_rng(seed)
    u = lambda lo, hi, *s: r.uniform(lo, hi, s).astype(np.float32)
    a = dict(
        state=u(-1, 1, S, H, P, N),
        prev_B=u(-1, 1, S, R, H, N),
        prev_x=u(-1, 1, S, H, P),
        A=u(-1.5, -0.5, Bt, H),
        dt=u(0.05, 0.5, Bt, H),
        trap=u(0.1, 0.9, Bt, H),
        B=u(-1, 1, Bt, R, H, N),
        C=u(-1, 1, Bt, R, H, N),
        x=u(-1, 1, Bt, H, P),
        D=u(-1, 1, H),
        xproj=u(0.5, 1.5, R, H, P),
    )
    if outproj:
        a["outproj"] = u(-1, 1, R, H, P)
        a["out"] = np.full((Bt, H, P), np.nan, np.float32)
    else:
        a["out"] = np.full((Bt, R, H, P), np.nan, np.float32)
    if z:
        a["z"] = u(-2, 2, Bt, H, P)
        a["zproj"] = u(0.5, 1.5, R, H, P)
    return a


def check_step(ctx, a, rtol=RTOL, atol=ATOL, run=None):
    pools = {k: a[k].copy() for k in ("state", "prev_B", "prev_x")}
    want = ref_step(**{k: v for k, v in a.items() if k != "out"})
    if run is None:
        plan = ctx.plan_mamba3_step(**a)
        assert plan.kind == "mamba3_step" and plan.backend == "cpu"
        plan.execute(**a)
    else:
        run(a)
    np.testing.assert_allclose(a["state"], want[0], rtol=rtol, atol=atol)
    np.testing.assert_array_equal(a["prev_B"], want[1].astype(np.float32))
    np.testing.assert_array_equal(a["prev_x"], want[2].astype(np.float32))
    np.testing.assert_allclose(a["out"], want[3], rtol=rtol, atol=atol)
    return pools


def test_step_per_rank_outputs_padding_and_dst(ctx):
    a = step_inputs(1)
    a["src_index"] = np.array([3, -1, 0], np.int32)
    a["dst_index"] = np.array([1, 2, 4], np.int32)
    before = check_step(ctx, a)
    assert np.all(a["out"][1] == 0)
    for s in (0, 2, 3):  # no destination (slot 2 belongs to a padded sequence)
        assert same_bits(a["state"][s], before["state"][s]), f"slot {s}"


def test_step_outproj_gate_update_prev(ctx):
    a = step_inputs(2, outproj=True, z=True)
    a["src_index"] = np.array([4, 1, 2], np.int64)
    a["dst_index"] = np.array([4, -1, 3], np.int64)  # slot 4 in place; no store for b = 1
    a["update_prev"] = True
    before = check_step(ctx, a)
    assert np.all(a["out"][1] != 0)
    for name in ("state", "prev_B", "prev_x"):
        for s in (0, 1, 2):
            assert same_bits(a[name][s], before[name][s]), f"{name} slot {s}"


@pytest.mark.parametrize("R", [1, 4])
def test_step_ranks_and_default_slots(ctx, R):
    a = step_inputs(3 + R, S=3, R=R, P=32, N=32, outproj=True)
    a["update_prev"] = True
    check_step(ctx, a)


def test_step_bf16_state(ctx):
    a = step_inputs(5)
    bits = bf16_bits(a["state"])
    a["state"] = bf16_to_f32(bits)  # the values the pool holds
    want = ref_step(**{k: v for k, v in a.items() if k not in ("out",)})
    pool = bits.copy()
    ctx.mamba3_step(**{**a, "state": ssu.tensor(pool, dtype="bf16")})
    np.testing.assert_allclose(bf16_to_f32(pool), want[0], rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(a["out"], want[3], rtol=1e-2, atol=1e-2)


def test_step_bind_and_dlpack(ctx):
    a = step_inputs(6, outproj=True)
    a["src_index"] = np.array([2, 0, 1], np.int32)
    x2 = (a["x"] * 0.5).astype(np.float32)

    def bound(args):
        call = ctx.plan_mamba3_step(**args).bind(**args)
        call.set_data_ptr(x=x2.ctypes.data)
        call()

    want = ref_step(**{**{k: v for k, v in a.items() if k != "out"}, "x": x2})
    bound(a)
    np.testing.assert_allclose(a["state"], want[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(a["out"], want[3], rtol=RTOL, atol=ATOL)

    b = step_inputs(7)
    wrapped = {k: _DLPackOnly(v, False) if isinstance(v, np.ndarray) else v for k, v in b.items()}
    want = ref_step(**{k: v for k, v in b.items() if k != "out"})
    ctx.mamba3_step(**wrapped)
    assert wrapped["x"].capsules, "the DLPack path was not used"
    np.testing.assert_allclose(b["state"], want[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(b["out"], want[3], rtol=RTOL, atol=ATOL)


def test_step_argument_errors(ctx):
    a = step_inputs(8)
    with pytest.raises(TypeError, match="unknown Mamba-3 step argument"):
        ctx.plan_mamba3_step(**a, dt_softplus=True)
    with pytest.raises(ValueError, match="CUDA memory"):
        ctx.plan_mamba3_step(**{**a, "x": _FakeCuda()})
    # z needs outproj: refused by the library with an invalid-argument status.
    z = step_inputs(8, z=True)
    with pytest.raises(ssu.SsuError) as e:
        ctx.plan_mamba3_step(**z)
    assert e.value.family == 1 and e.value.message


def test_step_plan_mismatch(ctx):
    a = step_inputs(9)
    plan = ctx.plan_mamba3_step(**a)
    with pytest.raises(ssu.SsuError) as e:
        plan.execute(**step_inputs(9, H=4))
    assert e.value.family == 1


# ---------------------------------------------------------------------------
# Rotary
# ---------------------------------------------------------------------------

def rotary_inputs(seed, S=5, H=2, N=16, R=2, Bt=3, Sa=None, dtype=np.float32):
    r = np.random.default_rng(seed)
    u = lambda lo, hi, *s: r.uniform(lo, hi, s).astype(np.float32)
    Sa = N // 2 if Sa is None else Sa
    return dict(
        angle_state=u(0, 6.28, S, H, Sa),
        angle_rate=u(-3, 3, Bt, H, Sa),
        dt=u(0.05, 1.0, Bt, H),
        q=u(-1, 1, Bt, R, H, N).astype(dtype),
        k=u(-1, 1, Bt, R, H, N).astype(dtype),
        q_bias=u(-0.5, 0.5, R, H, N),
        k_bias=u(-0.5, 0.5, R, H, N),
    )


def angle_close(got, want, tol=1e-4):
    d = np.mod(np.asarray(got, np.float64) - want, 2 * np.pi)
    assert np.all(np.minimum(d, 2 * np.pi - d) <= tol)
    assert np.all((got >= 0) & (got <= np.float32(2 * np.pi)))


@pytest.mark.parametrize("halved", [False, True])
def test_rotary_separate_outputs(ctx, halved):
    a = rotary_inputs(20 + halved, Bt=4)
    a["src_index"] = np.array([2, -1, 4, 1], np.int64)
    a["dst_index"] = np.array([0, 3, 4, -1], np.int64)  # b = 3 stores no angles
    a["halved"] = halved
    a["q_out"] = np.full_like(a["q"], np.nan)
    a["k_out"] = np.full_like(a["k"], np.nan)
    before = a["angle_state"].copy()
    want = ref_rotary(**{k: v for k, v in a.items() if k not in ("q_out", "k_out")})
    plan = ctx.plan_mamba3_rotary(**a)
    assert plan.kind == "mamba3_rotary"
    plan.execute(**a)
    np.testing.assert_allclose(a["q_out"], want[1], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(a["k_out"], want[2], rtol=RTOL, atol=ATOL)
    angle_close(a["angle_state"][[0, 4]], want[0][[0, 4]])
    for s in (1, 2, 3):  # slot 3 is the dst of a padded sequence
        assert same_bits(a["angle_state"][s], before[s]), f"slot {s}"
    assert np.all(a["q_out"][1] == 0) and np.all(a["k_out"][1] == 0)


def test_rotary_in_place_partial_halved_bound(ctx):
    a = rotary_inputs(22, Sa=3)  # pairs (i, i + 8) for i < 3; the rest pass through
    a["halved"] = True
    want = ref_rotary(**a)
    a["q_out"], a["k_out"] = a["q"], a["k"]
    call = ctx.plan_mamba3_rotary(**a).bind(**a)
    call()
    np.testing.assert_allclose(a["q"], want[1], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(a["k"], want[2], rtol=RTOL, atol=ATOL)
    angle_close(a["angle_state"], want[0])


def test_rotary_f16_no_bias(ctx):
    a = rotary_inputs(23, dtype=np.float16)
    del a["q_bias"], a["k_bias"]
    a["q_out"] = np.zeros_like(a["q"])
    a["k_out"] = np.zeros_like(a["k"])
    want = ref_rotary(**{k: v for k, v in a.items() if k not in ("q_out", "k_out")})
    ctx.mamba3_rotary(**a)
    np.testing.assert_allclose(a["q_out"].astype(np.float64), want[1], rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(a["k_out"].astype(np.float64), want[2], rtol=1e-2, atol=1e-3)


def test_rotary_argument_errors(ctx):
    a = rotary_inputs(24)
    a["q_out"], a["k_out"] = np.zeros_like(a["q"]), np.zeros_like(a["k"])
    with pytest.raises(TypeError, match="unknown Mamba-3 rotary argument"):
        ctx.plan_mamba3_rotary(**a, state=a["q"])
    ro = a["q_out"].copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ctx.plan_mamba3_rotary(**{**a, "q_out": ro})
