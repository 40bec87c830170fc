"""The Python binding on the CPU backend against the float64 reference."""

import ctypes

import numpy as np
import pytest

import ssu
from reference import bf16_bits, bf16_to_f32, update as ref_update

RTOL = ATOL = 1e-4


@pytest.fixture(scope="module")
def ctx():
    with ssu.Context("cpu", num_threads=2) as c:
        yield c


def rng(seed):
    return np.random.default_rng(seed)


def make(seed, S=6, H=4, P=16, N=16, G=2, Bt=3, T=None, TT=None, per_channel=False):
    """Model-like inputs: A < 0, dt_bias in [-4, -3], randn B/C/x/z."""
    r = rng(seed)
    lead = (TT,) if TT is not None else ((Bt, T) if T is not None else (Bt,))
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    a = dict(
        state=f(S, H, P, N),
        x=f(*lead, H, P),
        B=f(*lead, G, N),
        C=f(*lead, G, N),
        z=f(*lead, H, P),
    )
    if per_channel:
        a["dt"] = (r.random((*lead, H, P)) * 0.5 - 0.25).astype(np.float32)
        a["A"] = -(r.random((H, P, N)) + 0.5).astype(np.float32)
        a["D"] = f(H, P)
        a["dt_bias"] = (r.random((H, P)) - 4.0).astype(np.float32)
    else:
        a["dt"] = (r.random((*lead, H)) * 0.5 - 0.25).astype(np.float32)
        a["A"] = -(r.random(H) + 0.5).astype(np.float32)
        a["D"] = f(H)
        a["dt_bias"] = (r.random(H) - 4.0).astype(np.float32)
    a["out"] = np.full_like(a["x"], np.nan)
    return a


def run(ctx, args):
    """Runs through a plan and compares with the reference; returns the
    pool before the call."""
    before = args["state"].copy()
    inter0 = args.get("intermediate_states")
    inter0 = None if inter0 is None else inter0.copy()
    want_state, want_out, want_inter = ref_update(
        **{k: v for k, v in args.items() if k != "state"}, state=before)
    plan = ctx.plan_update(**args)
    assert plan.backend == "cpu" and plan.algorithm_name
    plan.execute(**args)
    np.testing.assert_allclose(args["out"], want_out, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(args["state"], want_state, rtol=RTOL, atol=ATOL)
    if want_inter is not None:
        np.testing.assert_allclose(args["intermediate_states"], want_inter, rtol=RTOL, atol=ATOL)
    return before


def same_bits(a, b):
    return np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def test_library_and_names():
    assert ssu.version() // 10000 == 0
    assert ssu.version_string().startswith("0.")
    assert ssu.status_string(103)
    assert ssu.dtype_code("bf16") == 3 and ssu.dtype_code("torch.float16") == 2


def test_plan_pdl_flag(ctx):
    # SSU_PLAN_PDL changes only how CUDA kernels launch: the CPU plan runs as usual.
    a = make(3, Bt=2)
    want = make(3, Bt=2)
    ctx.plan_update(pdl=True, **a).execute(**a)
    ctx.plan_update(**want).execute(**want)
    assert same_bits(a["out"], want["out"]) and same_bits(a["state"], want["state"])


def test_pinned_algorithms(ctx):
    a = make(2, Bt=2)
    plan = ctx.plan_update(algorithm="cpu_rows", **a)
    assert plan.algorithm_name == "cpu_rows"
    assert ctx.plan_update(algorithm=plan.algorithm, **a).algorithm_name == "cpu_rows"
    assert ctx.plan_update(**a).algorithm_name == "cpu_rows"
    # Every CUDA algorithm is refused by the CPU backend; the library's
    # message names it as the binding does, so the names round-trip.
    for name, code in [("cuda_simple", 2), ("cuda_pipelined", 4)]:
        for pinned in (name, name.upper(), code):
            with pytest.raises(ssu.SsuError) as e:
                ctx.plan_update(algorithm=pinned, **a)
            assert e.value.status == 202 and e.value.family == 2
            assert e.value.status_string == "algorithm not available"
            assert f"({name})" in e.value.message, e.value.message
    with pytest.raises(ValueError, match="cuda_pipelined"):
        ctx.plan_update(algorithm="pipelined", **a)
    # cuda_tma (code 3) was removed in 0.3: its name is no longer one the
    # binding knows, and its code is refused like any unknown code.
    with pytest.raises(ValueError, match="unknown algorithm 'cuda_tma'"):
        ctx.plan_update(algorithm="cuda_tma", **a)
    for code in (3, 99):
        with pytest.raises(ssu.SsuError) as e:
            ctx.plan_update(algorithm=code, **a)
        assert e.value.status == 202, e.value.message
        assert f"algorithm={code} is not an algorithm" in e.value.message, e.value.message


def test_single_token_padding_and_dst(ctx):
    a = make(1, Bt=4)
    a["src_index"] = np.array([4, -1, 1, 7], dtype=np.int32)  # 7 = pad_slot_id
    a["dst_index"] = np.array([2, 3, 0, 5], dtype=np.int32)
    a["pad_slot_id"] = 7
    a["dt_softplus"] = True
    before = run(ctx, a)
    # Padded sequences: outputs exactly zero, their dst slots untouched.
    assert np.all(a["out"][1] == 0) and np.all(a["out"][3] == 0)
    for s in (1, 3, 4, 5):
        assert same_bits(a["state"][s], before[s]), f"slot {s} changed"


def test_single_token_default_slots_no_optionals(ctx):
    a = make(2, Bt=3)
    for k in ("D", "dt_bias", "z"):
        del a[k]
    run(ctx, a)


def test_multi_token_final_store(ctx):
    a = make(3, Bt=2, T=3)
    a["src_index"] = np.array([5, 0], dtype=np.int64)
    a["dst_index"] = np.array([1, 2], dtype=np.int64)
    a["dt_softplus"] = True
    run(ctx, a)


def test_multi_token_2d_src_dst(ctx):
    a = make(4, S=10, Bt=2, T=3)
    a["src_index"] = np.array([[3, 9, 9], [-1, 0, 0]], dtype=np.int32)
    a["dst_index"] = np.array([[4, -1, 6], [7, 8, 9]], dtype=np.int32)
    a["dt_softplus"] = True
    before = run(ctx, a)
    assert np.all(a["out"][1] == 0)  # second sequence padded
    for s in (0, 1, 2, 3, 5, 7, 8, 9):
        assert same_bits(a["state"][s], before[s]), f"slot {s} changed"


def test_num_accepted_tokens(ctx):
    a = make(5, S=8, Bt=3, T=3)
    a["src_index"] = np.array([[0, 1, 2], [3, 4, 5], [6, 7, -1]], dtype=np.int64)
    a["num_accepted_tokens"] = np.array([2, 3, 0], dtype=np.int64)  # cols 1, 2, 0
    a["dt_softplus"] = True
    run(ctx, a)


def test_varlen(ctx):
    cu = np.array([0, 2, 2, 5, 6], dtype=np.int32)  # lengths 2, 0, 3, 1
    a = make(6, S=6, Bt=4, TT=6)
    a["cu_seqlens"] = cu
    a["max_tokens"] = 3
    a["src_index"] = np.array([3, 1, 0, 5], dtype=np.int32)
    a["dt_softplus"] = True
    before = run(ctx, a)
    assert same_bits(a["state"][1], before[1])  # zero-length sequence


def test_varlen_too_long_is_rejected_before_writing(ctx):
    a = make(7, Bt=2, TT=5)
    a["cu_seqlens"] = np.array([0, 1, 5], dtype=np.int64)
    a["max_tokens"] = 3
    before = a["state"].copy()
    with pytest.raises(ssu.SsuError) as e:
        ctx.update(**a)
    assert e.value.status == 108  # SSU_ERROR_SEQLEN_OUT_OF_RANGE
    assert same_bits(a["state"], before)


def test_disable_state_update(ctx):
    a = make(8, Bt=3, T=2)
    a["src_index"] = np.array([0, 2, 4], dtype=np.int32)
    a["disable_state_update"] = True
    a["dt_softplus"] = True
    before = run(ctx, a)
    assert same_bits(a["state"], before)


@pytest.mark.parametrize("with_index", [False, True])
def test_intermediate_buffer(ctx, with_index):
    a = make(9, S=5, Bt=2, T=3)
    a["src_index"] = np.array([1, 3], dtype=np.int32)
    I = 5 if not with_index else 2
    a["intermediate_states"] = np.full((I, 3, 4, 16, 16), np.nan, dtype=np.float32)
    if with_index:
        a["intermediate_index"] = np.array([1, 0], dtype=np.int32)
    a["dt_softplus"] = True
    run(ctx, a)


def test_intermediate_with_disable_keeps_pool(ctx):
    a = make(10, S=4, Bt=2, T=2)
    a["intermediate_states"] = np.zeros((4, 2, 4, 16, 16), dtype=np.float32)
    a["disable_state_update"] = True
    before = run(ctx, a)
    assert same_bits(a["state"], before)


@pytest.mark.parametrize("T", [None, 2])
def test_mamba1_per_channel(ctx, T):
    a = make(11, S=3, H=1, G=1, P=48, N=16, Bt=2, T=T, per_channel=True)
    a["src_index"] = np.array([2, 0], dtype=np.int64)
    a["dt_softplus"] = True
    run(ctx, a)


def test_strided_pool_and_broadcast_params(ctx):
    S, H, P, N = 4, 2, 8, 16
    a = make(12, S=S, H=H, P=P, N=N, G=1, Bt=2)
    # A pool whose slots are 100 floats apart inside a larger buffer.
    slot = H * P * N
    big = np.zeros(S * (slot + 100), dtype=np.float32)
    pool = np.lib.stride_tricks.as_strided(
        big, shape=(S, H, P, N), strides=((slot + 100) * 4, P * N * 4, N * 4, 4))
    pool[...] = a["state"]
    a["state"] = pool
    a["A"] = np.broadcast_to(np.float32(-1.25), (H,))  # stride 0
    a["src_index"] = np.array([3, 1], dtype=np.int32)
    run(ctx, a)
    assert np.all(big.reshape(S, slot + 100)[:, slot:] == 0)  # gaps untouched


def test_bf16_via_uint16_override(ctx):
    a = make(13, Bt=2)
    S, H, P, N = a["state"].shape
    bf = {k: bf16_bits(a[k]) for k in ("state", "x", "B", "C", "z")}
    out = np.zeros_like(bf["x"])
    args = {k: ssu.tensor(v, dtype="bf16") for k, v in bf.items()}
    args.update(dt=a["dt"], A=a["A"], D=a["D"], dt_bias=a["dt_bias"],
                out=ssu.tensor(out, dtype="bf16"), dt_softplus=True,
                src_index=np.array([0, 4], dtype=np.int32))
    want_state, want_out, _ = ref_update(
        state=bf16_to_f32(bf["state"]), x=bf16_to_f32(bf["x"]), B=bf16_to_f32(bf["B"]),
        C=bf16_to_f32(bf["C"]), z=bf16_to_f32(bf["z"]), dt=a["dt"], A=a["A"], D=a["D"],
        dt_bias=a["dt_bias"], src_index=args["src_index"], dt_softplus=True)
    ctx.update(**args)
    np.testing.assert_allclose(bf16_to_f32(out), want_out, rtol=1e-2, atol=1e-3 + 1e-2)
    np.testing.assert_allclose(bf16_to_f32(bf["state"]), want_state, rtol=1e-2, atol=1e-2)
    # Without the override a uint16 array is refused with a clear message.
    with pytest.raises(TypeError, match="explicit dtype"):
        ctx.update(**{**args, "x": bf["x"]})


def test_f16_numpy(ctx):
    a = make(14, Bt=2)
    h = {k: a[k].astype(np.float16) for k in ("x", "B", "C", "z")}
    out = np.zeros_like(h["x"])
    state = a["state"].copy()
    want_state, want_out, _ = ref_update(
        state=state, dt=a["dt"], A=a["A"], D=a["D"], dt_bias=a["dt_bias"], dt_softplus=True,
        **h)
    ctx.update(state=state, out=out, dt=a["dt"], A=a["A"], D=a["D"], dt_bias=a["dt_bias"],
               dt_softplus=True, **h)
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(state, want_state, rtol=RTOL, atol=ATOL)


def test_error_carries_status_and_message(ctx):
    a = make(15, Bt=2)
    a["x"] = a["x"][:, :, :8]  # dim 8 against the pool's 16
    a["out"] = a["out"][:, :, :8]
    with pytest.raises(ssu.SsuError) as e:
        ctx.plan_update(**a)
    err = e.value
    assert err.family == 1 and err.status in (103,)
    assert err.message and err.message in str(err)
    assert err.status_string == ssu.status_string(err.status)


def test_out_of_range_slot_writes_nothing(ctx):
    a = make(16, Bt=2)
    a["src_index"] = np.array([0, 6], dtype=np.int32)  # S = 6
    before = a["state"].copy()
    out_before = a["out"].copy()
    plan = ctx.plan_update(**a)  # plans read no tensor data
    with pytest.raises(ssu.SsuError) as e:
        plan.execute(**a)
    assert e.value.status == 107
    assert same_bits(a["state"], before) and same_bits(a["out"], out_before)


def test_plan_mismatch(ctx):
    a = make(17, Bt=2)
    plan = ctx.plan_update(**a)
    b = make(17, Bt=2, H=8, G=2)
    with pytest.raises(ssu.SsuError) as e:
        plan.execute(**b)
    assert e.value.family == 1


def test_argument_errors(ctx):
    a = make(18, Bt=1)
    with pytest.raises(TypeError, match="unknown update argument"):
        ctx.plan_update(**a, bogus=1)
    ro = a["out"].copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ctx.plan_update(**{**a, "out": ro})
    with pytest.raises(TypeError, match="not an array"):
        ctx.plan_update(**{**a, "x": [1.0, 2.0]})


def test_bound_update_and_pointer_swap(ctx):
    a = make(19, Bt=2)
    a["src_index"] = np.array([1, 2], dtype=np.int32)
    a["dt_softplus"] = True
    plan = ctx.plan_update(**a)
    x2 = (a["x"] * 0.5).astype(np.float32)
    want_state, want_out, _ = ref_update(**{**a, "x": x2})
    call = plan.bind(**a)
    call.set_data_ptr(x=x2.ctypes.data)
    call()
    np.testing.assert_allclose(a["out"], want_out, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(a["state"], want_state, rtol=RTOL, atol=ATOL)
    call.set(src_index=np.array([0, 6], dtype=np.int32))
    with pytest.raises(ssu.SsuError):
        call()


class _DLPackOnly:
    """Exposes a numpy array through DLPack only (like a torch CPU tensor);
    `legacy` producers do not take max_version."""

    def __init__(self, arr, legacy):
        self.arr, self.legacy, self.capsules = arr, legacy, []

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None, **kw):
        if self.legacy and max_version is not None:
            raise TypeError("max_version is not supported")
        cap = self.arr.__dlpack__(**({} if self.legacy else {"max_version": max_version}))
        self.capsules.append(cap)
        return cap


@pytest.mark.parametrize("legacy", [False, True])
def test_dlpack_is_borrowed(ctx, legacy):
    a = make(20, Bt=2)
    want_state, want_out, _ = ref_update(**a)
    wrapped = {k: _DLPackOnly(v, legacy) if isinstance(v, np.ndarray) else v
               for k, v in a.items()}
    ctx.update(**wrapped)
    np.testing.assert_allclose(a["out"], want_out, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(a["state"], want_state, rtol=RTOL, atol=ATOL)
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    caps = wrapped["x"].capsules
    assert caps, "the DLPack path was not used"
    # Not consumed: the capsule keeps its name, so its deleter still runs.
    assert get_name(caps[0]) == (b"dltensor" if legacy else b"dltensor_versioned")


class _FakeCuda:
    def __init__(self, typestr="<f4"):
        self.__cuda_array_interface__ = {
            "shape": (2, 4, 16), "typestr": typestr, "data": (0x1000, False),
            "strides": None, "version": 3}


def test_cuda_array_interface_rules(ctx):
    a = make(21, Bt=2)
    with pytest.raises(ValueError, match="CUDA memory"):
        ctx.plan_update(**{**a, "x": _FakeCuda()})
    with pytest.raises(TypeError, match="cannot tell bf16 from f16"):
        ctx.plan_update(**{**a, "x": _FakeCuda("<f2")})


def test_context_errors():
    with pytest.raises(ssu.SsuError) as e:
        ssu.Context("cpu", device=1)
    assert e.value.status in (ssu._lib.ERROR_INVALID_ARGUMENT, ssu._lib.ERROR_NO_DEVICE)
    assert "device_ordinal" in e.value.message
    with pytest.raises(ValueError):
        ssu.Context("tpu")
