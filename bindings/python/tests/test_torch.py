"""ssu.torch against a float64 reference of the selective state update, in
the layouts serving engines and mamba_ssm pass: 3-D Mamba-1 tensors, stride-0
expanded A/dt/D/dt_bias, int32/int64 slot indices with padding, multi-token
and varlen forms, intermediate states, int16 pools and stochastic rounding;
the custom op under torch.compile(fullgraph=True) and opcheck; CUDA-graph
capture. CPU tensors run on the CPU backend; the same tests run on CUDA
tensors when a GPU and a CUDA-enabled libssu are present. Every test runs
on both per-call paths where the C extension ssu._fastcall is importable
("fast"), else on the Python one ("pure") only. Skipped without torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ssu  # noqa: E402
import ssu.torch as ssut  # noqa: E402

import reference  # noqa: E402


def _cuda_usable():
    if not torch.cuda.is_available():
        return False
    try:
        ssu.Context("cuda").close()
        return True
    except ssu.SsuError:
        return False


DEVICES = ["cpu"] + (["cuda"] if _cuda_usable() else [])
needs_cuda = pytest.mark.skipif("cuda" not in DEVICES,
                                reason="needs a GPU and a CUDA-enabled libssu")


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# The per-call paths of the cached entries: ssu._fastcall (C) where it is
# importable, and the Python one it falls back to.
PATHS = (["fast"] if ssut._fastcall is not None else []) + ["pure"]


@pytest.fixture(autouse=True, params=PATHS)
def path(request):
    """Runs the test with the entries of one path (built after the cache
    is cleared), then restores the module's default."""
    previous = ssut._use_fastcall(request.param == "fast")
    yield request.param
    ssut._use_fastcall(previous)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, dtype=torch.float32, device="cpu", scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(dtype=dtype, device=device)


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------------------
# The reference: mamba_ssm's recurrence in float64 on the layouts as passed
# ---------------------------------------------------------------------------

def ref_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
             state_batch_indices=None, dst_state_batch_indices=None, pad_slot_id=-1):
    """One token per sequence, in float64: returns (new state, out). Accepts
    the 3-D (no head axis) and 4-D layouts with any broadcasting; slot
    indices pick pool rows, padded rows give zero output and touch nothing."""
    f = lambda t: None if t is None else t.detach().to("cpu", torch.float64)
    state, x, dt, A, B, C, D, z, dt_bias = map(f, (state, x, dt, A, B, C, D, z, dt_bias))
    new = state.clone()
    mamba1 = state.dim() == 3
    if mamba1:  # (S, D, N) -> (S, 1, D, N) and likewise for the rest
        state, x, dt, B, C = state[:, None], x[:, None], dt[:, None], B[:, None], C[:, None]
        A = A[None]
        D = None if D is None else D[None]
        z = None if z is None else z[:, None]
        dt_bias = None if dt_bias is None else dt_bias[None]
    Bt, H, P = x.shape
    N = state.shape[-1]
    G = B.shape[1]
    if dt.dim() == 2:
        dt = dt[:, :, None]
    dt = dt.expand(Bt, H, P)
    if dt_bias is not None:
        dt = dt + (dt_bias[:, None] if dt_bias.dim() == 1 else dt_bias)
    if dt_softplus:
        dt = torch.nn.functional.softplus(dt)
    A = (A[:, None, None] if A.dim() == 1 else A).expand(H, P, N)
    Bh = B.repeat_interleave(H // G, dim=1)  # (Bt, H, N)
    Ch = C.repeat_interleave(H // G, dim=1)
    out = torch.zeros(Bt, H, P, dtype=torch.float64)
    for b in range(Bt):
        slot = b if state_batch_indices is None else int(state_batch_indices[b])
        if slot < 0 or slot == pad_slot_id:
            continue
        h = state[slot] * torch.exp(A * dt[b][:, :, None]) \
            + (dt[b][:, :, None] * Bh[b][:, None, :]) * x[b][:, :, None]
        y = (h * Ch[b][:, None, :]).sum(-1)
        if D is not None:
            y = y + x[b] * (D[:, None] if D.dim() == 1 else D)
        if z is not None:
            y = y * torch.nn.functional.silu(z[b])
        out[b] = y
        dst = slot if dst_state_batch_indices is None else int(dst_state_batch_indices[b])
        if dst >= 0 and dst != pad_slot_id:
            new[dst] = h[0] if mamba1 else h
    return new, (out[:, 0] if mamba1 else out)


def assert_close(got, want, dtype, what):
    torch.testing.assert_close(got.detach().to("cpu", torch.float64), want, **tol(dtype),
                               msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------------------
# mamba_ssm / vLLM layouts, one token
# ---------------------------------------------------------------------------

def mamba2_inputs(g, device, dtype, S=7, Bt=4, H=4, P=16, N=16, G=2, index_dtype=torch.int32):
    """Mamba-2 as mamba_ssm and vLLM call it: per-head A, dt, D and dt_bias
    expanded to (H, P, N), (Bt, H, P), (H, P) with stride-0 axes."""
    A_h = -(torch.rand(H, generator=g) + 0.5).to(device)
    dt_h = randn(g, Bt, H, device=device, dtype=dtype, scale=0.5)
    D_h = randn(g, H, device=device)
    bias_h = (torch.rand(H, generator=g) - 3.0).to(device)
    return dict(
        state=randn(g, S, H, P, N, device=device),
        x=randn(g, Bt, H, P, dtype=dtype, device=device),
        dt=dt_h[:, :, None].expand(Bt, H, P),
        A=A_h[:, None, None].expand(H, P, N),
        B=randn(g, Bt, G, N, dtype=dtype, device=device),
        C=randn(g, Bt, G, N, dtype=dtype, device=device),
        D=D_h[:, None].expand(H, P),
        z=randn(g, Bt, H, P, dtype=dtype, device=device),
        dt_bias=bias_h[:, None].expand(H, P),
        dt_softplus=True,
        state_batch_indices=torch.tensor([5, -1, 0, 3][:Bt], dtype=index_dtype, device=device),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
def test_mamba2_expanded_views(device, dtype, index_dtype):
    g = gen(1)
    a = mamba2_inputs(g, device, dtype, index_dtype=index_dtype)
    want_state, want_out = ref_step(**a)
    state = a["state"]
    out = ssut.selective_state_update(**a)
    assert out.shape == a["x"].shape and out.dtype == dtype
    assert_close(out, want_out, dtype, "out")
    assert_close(state, want_state, torch.float32, "state")
    assert torch.all(out[1] == 0), "a padded sequence's output is exactly zero"


def test_mamba1_no_head_axis(device):
    """mamba_ssm's Mamba-1 step: state (S, D, N), x and dt (Bt, D), A (D, N),
    B and C (Bt, N), D and dt_bias (D,); no slot indices (slot = b)."""
    g = gen(2)
    S, Bt, Dm, N = 3, 3, 24, 16
    a = dict(state=randn(g, S, Dm, N, device=device), x=randn(g, Bt, Dm, device=device),
             dt=randn(g, Bt, Dm, device=device, scale=0.5),
             A=-(torch.rand(Dm, N, generator=g) + 0.5).to(device),
             B=randn(g, Bt, N, device=device), C=randn(g, Bt, N, device=device),
             D=randn(g, Dm, device=device), z=randn(g, Bt, Dm, device=device),
             dt_bias=(torch.rand(Dm, generator=g) - 3.0).to(device), dt_softplus=True)
    want_state, want_out = ref_step(**a)
    out = ssut.selective_state_update(**a)
    assert out.shape == (Bt, Dm)
    assert_close(out, want_out, torch.float32, "out")
    assert_close(a["state"], want_state, torch.float32, "state")


def test_vllm_out_dst_and_pad_slot_id(device):
    """vLLM's additions: a preallocated out (written in place and returned),
    dst_state_batch_indices, and a pad_slot_id other than -1."""
    g = gen(3)
    a = mamba2_inputs(g, device, torch.float32)
    pad = 6
    a["state_batch_indices"] = torch.tensor([2, pad, 4, 1], dtype=torch.int32, device=device)
    a["dst_state_batch_indices"] = torch.tensor([0, 5, pad, 3], dtype=torch.int32,
                                                device=device)
    a["pad_slot_id"] = pad
    want_state, want_out = ref_step(**a)
    out = torch.full_like(a["x"], 7.0)
    got = ssut.selective_state_update(**a, out=out)
    assert got is out
    assert_close(out, want_out, torch.float32, "out")
    assert_close(a["state"], want_state, torch.float32, "state")


# ---------------------------------------------------------------------------
# The other forms, against the project's float64 reference (tests/reference.py)
# ---------------------------------------------------------------------------

def np64(t):
    return None if t is None else t.detach().to("cpu", torch.float64).numpy()


def libssu_inputs(g, device, Bt=3, T=None, TT=None, S=8, H=4, P=16, N=16, G=2):
    lead = (TT,) if TT is not None else (Bt,) if T is None else (Bt, T)
    return dict(state=randn(g, S, H, P, N, device=device),
                x=randn(g, *lead, H, P, device=device),
                dt=randn(g, *lead, H, device=device, scale=0.5),
                A=-(torch.rand(H, generator=g) + 0.5).to(device),
                B=randn(g, *lead, G, N, device=device), C=randn(g, *lead, G, N, device=device),
                D=randn(g, H, device=device), z=randn(g, *lead, H, P, device=device),
                dt_bias=(torch.rand(H, generator=g) - 3.0).to(device), dt_softplus=True)


def check_against_reference(a, ref_kwargs, inter=None):
    state0 = np64(a["state"])
    want_state, want_out, want_inter = reference.update(
        state0, np64(a["x"]), np64(a["dt"]), np64(a["A"]), np64(a["B"]), np64(a["C"]),
        D=np64(a["D"]), dt_bias=np64(a["dt_bias"]), z=np64(a["z"]), dt_softplus=True,
        intermediate_states=np64(inter), **ref_kwargs)
    out = ssut.selective_state_update(**a)
    np.testing.assert_allclose(np64(out), want_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np64(a["state"]), want_state, rtol=1e-4, atol=1e-4)
    if inter is not None:
        np.testing.assert_allclose(np64(inter), want_inter, rtol=1e-4, atol=1e-4)


def test_multi_token_spec_decode(device):
    """vLLM speculative decoding: (Bt, T) per-token slots in and out, and
    num_accepted_tokens picking where each sequence starts."""
    g = gen(4)
    Bt, T = 3, 4
    a = libssu_inputs(g, device, Bt=Bt, T=T, S=16)
    src = torch.arange(Bt * T, dtype=torch.int64, device=device).reshape(Bt, T)
    dst = torch.flip(src, dims=[1]).contiguous()
    acc = torch.tensor([1, 3, 0], dtype=torch.int64, device=device)
    a.update(state_batch_indices=src, dst_state_batch_indices=dst, num_accepted_tokens=acc)
    check_against_reference(a, dict(src_index=src.cpu().numpy(), dst_index=dst.cpu().numpy(),
                                    num_accepted_tokens=acc.cpu().numpy()))


def test_varlen_cu_seqlens(device):
    g = gen(5)
    cu = torch.tensor([0, 2, 2, 5], dtype=torch.int32, device=device)
    a = libssu_inputs(g, device, TT=5)
    slots = torch.tensor([3, 1, 6], dtype=torch.int32, device=device)
    a.update(cu_seqlens=cu, state_batch_indices=slots, max_seqlen=4)
    check_against_reference(a, dict(cu_seqlens=cu.cpu().numpy(), max_tokens=4,
                                    src_index=slots.cpu().numpy()))


@pytest.mark.parametrize("disable", [False, True], ids=["store", "disable_state_update"])
def test_intermediate_states_buffer(device, disable):
    """FlashInfer's intermediate buffer: the state after every token goes to
    intermediate_states_buffer[intermediate_state_indices[b], t]."""
    g = gen(6)
    Bt, T = 2, 3
    a = libssu_inputs(g, device, Bt=Bt, T=T)
    slots = torch.tensor([4, 0], dtype=torch.int32, device=device)
    rows = torch.tensor([1, 0], dtype=torch.int32, device=device)
    inter = torch.zeros(2, T, 4, 16, 16, device=device)
    a.update(state_batch_indices=slots, intermediate_states_buffer=inter,
             intermediate_state_indices=rows, disable_state_update=disable)
    check_against_reference(a, dict(src_index=slots.cpu().numpy(),
                                    intermediate_index=rows.cpu().numpy(),
                                    disable_state_update=disable), inter=inter)


def test_int16_pool_with_state_scale(device):
    """An int16 pool with per-row scales: the stored rows decode to the f32
    reference within the quantization step."""
    g = gen(7)
    a = mamba2_inputs(g, device, torch.float32)
    f32_state = a["state"]
    amax = f32_state.abs().amax(dim=-1, keepdim=True)
    scale = (amax / 32767).squeeze(-1).contiguous()
    q = torch.round(f32_state / (amax / 32767)).to(torch.int16)
    a["state"] = q
    a["state_scale"] = scale
    plain = {k: v for k, v in a.items() if k != "state_scale"}
    want_state, want_out = ref_step(**dict(plain, state=q.double() * scale.double()[..., None]))
    out = ssut.selective_state_update(**a)
    assert_close(out, want_out, torch.bfloat16, "out")
    new_scale = a["state_scale"].double().cpu()[..., None]
    decoded = a["state"].double().cpu() * new_scale
    assert torch.all((decoded - want_state).abs() <= new_scale * 0.5 + 1e-6), \
        "every stored row decodes to the reference within half a quantization step"


@pytest.mark.parametrize("fmt", ["int8", "e4m3"])
def test_8bit_pool_with_state_scale(device, fmt):
    """int8 and float8_e4m3fn pools with per-row scales: the stored rows
    decode to the f32 reference within the format's tolerance (int8: 2
    decode scales; e4m3: 2^-3 relative plus 2 subnormal steps)."""
    if fmt == "e4m3" and not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    g = gen(17)
    a = mamba2_inputs(g, device, torch.float32)
    f32_state = a["state"]
    qmax = 127.0 if fmt == "int8" else 448.0
    amax = f32_state.abs().amax(dim=-1, keepdim=True)
    scale = (amax / qmax).squeeze(-1).contiguous()
    scaled = f32_state / (amax / qmax)
    q = torch.round(scaled).to(torch.int8) if fmt == "int8" else scaled.to(torch.float8_e4m3fn)
    a["state"] = q
    a["state_scale"] = scale
    plain = {k: v for k, v in a.items() if k != "state_scale"}
    want_state, want_out = ref_step(**dict(plain, state=q.double() * scale.double()[..., None]))
    out = ssut.selective_state_update(**a)
    assert_close(out, want_out, torch.bfloat16, "out")
    new_scale = a["state_scale"].double().cpu()[..., None]
    decoded = a["state"].double().cpu() * new_scale
    err = (decoded - want_state).abs()
    if fmt == "int8":
        bound = 2 * new_scale + 1e-6
    else:
        bound = want_state.abs() * 2.0 ** -3 + 2 * 2.0 ** -9 * new_scale + 1e-6
    assert torch.all(err <= bound), "every stored row decodes within the format's tolerance"


def test_stochastic_rounding_seed(device):
    """rand_seed as an int or a tensor: bf16 pool stores within one bf16 ulp
    of the f32 result, differing between seeds, identical for one seed."""
    g = gen(8)
    a = mamba2_inputs(g, device, torch.float32)
    a["state"] = a["state"].to(torch.bfloat16)
    base = a["state"].clone()
    results = []
    for seed in (1, 1, torch.tensor([2], dtype=torch.int64, device=device)):
        a["state"] = base.clone()
        ssut.selective_state_update(**a, rand_seed=seed, philox_rounds=7)
        results.append(a["state"].clone())
    assert torch.equal(results[0], results[1])
    assert not torch.equal(results[0], results[2])
    want_state, _ = ref_step(**{**a, "state": base})
    assert_close(results[2], want_state, torch.bfloat16, "state")


# ---------------------------------------------------------------------------
# Caching, errors
# ---------------------------------------------------------------------------

def test_plan_reused_across_batch_sizes(device):
    ssut.clear_cache()
    g = gen(9)
    for Bt in (1, 2, 3, 4):
        a = mamba2_inputs(g, device, torch.float32, Bt=Bt)
        want_state, want_out = ref_step(**a)
        out = ssut.selective_state_update(**a)
        assert_close(out, want_out, torch.float32, f"out (Bt={Bt})")
        assert_close(a["state"], want_state, torch.float32, f"state (Bt={Bt})")
    assert len(ssut._SSU.plans) == 1, "one plan serves every batch size"
    assert len(ssut._SSU.entries) == 4, "one argument struct per batch size"


def test_errors_name_the_argument(device):
    g = gen(10)
    a = mamba2_inputs(g, device, torch.float32)
    bad = dict(a, x=a["x"][:, :, :8])
    with pytest.raises(ssu.SsuError) as e:
        ssut.selective_state_update(**bad)
    assert "x" in str(e.value) and e.value.status == 103
    bad = dict(a, state_batch_indices=a["state_batch_indices"].to(torch.float32))
    with pytest.raises(ssu.SsuError) as e:
        ssut.selective_state_update(**bad)
    assert "state_batch_indices" in str(e.value) and "src_index" not in str(e.value)
    if device == "cpu":
        bad = dict(a, state_batch_indices=torch.tensor([0, 1, 2, 99], dtype=torch.int32))
        with pytest.raises(ssu.SsuError) as e:
            ssut.selective_state_update(**bad)
        assert "state_batch_indices" in str(e.value)


def test_calls_check_every_argument_against_the_cached_struct(device, monkeypatch):
    """A call reuses a recent call's struct only when every argument still
    matches it: options, optional tensors, layouts, dtypes and batch sizes
    changing on one pool all give the reference result, and a tensor whose
    strides change in place is seen as changed. A call that repeats one of
    the last two layouts skips the keyed lookup."""
    g = gen(20)
    a = mamba2_inputs(g, device, torch.float32)
    Bt, H, P = a["x"].shape
    storage = randn(g, Bt * H * 2 * P, device=device)
    x = storage[:Bt * H * P].view(Bt, H, P)
    a["x"] = x
    ssut.clear_cache()
    lookups = []
    lookup = ssut._SSU.lookup
    monkeypatch.setattr(ssut._SSU, "lookup", lambda *args: lookups.append(1) or lookup(*args))
    monkeypatch.setattr(ssut._SSU, "run", ssut._SSU.lookup)

    def step(change, what):
        """One call, against the reference; whether it looked its struct up."""
        call = dict(a, **change)
        want_state, want_out = ref_step(**dict(call, state=a["state"].clone()))
        before = len(lookups)
        out = ssut.selective_state_update(**call)
        assert_close(out, want_out, torch.float32, f"out, {what}")
        assert_close(a["state"], want_state, torch.float32, f"state, {what}")
        return len(lookups) > before

    variants = [
        {},
        {"dt_softplus": False},
        {"z": None},
        {"A": a["A"][:, 0, 0].contiguous()},
        {"dt": a["dt"][:, :, 0].contiguous()},
        {"D": None, "dt_bias": None},
        {"state_batch_indices": a["state_batch_indices"].long()},
        {"pad_slot_id": 5},
        {k: a[k][:3] for k in ("x", "dt", "B", "C", "z", "state_batch_indices")},
    ]
    for i, change in enumerate(variants):
        what = f"variant {i} {sorted(change)}"
        assert step(change, what) or not ssut._guards, f"{what} is new but was not looked up"
        assert not step(change, what + " again") or not ssut._guards, \
            f"{what} repeats the last layout but was looked up"
    for turn in range(4):
        what = f"variants 1 and 2 taking turns, turn {turn}"
        assert step(variants[1 + turn % 2], what) == (turn < 2) or not ssut._guards, \
            f"{what}: {'a new' if turn < 2 else 'one of the last two'} layouts"
    # A tensor that differs from the last ones only in what the lookup key
    # leaves out (requires_grad here) runs the struct of its layout, and
    # calls stop looking it up within two calls.
    D_grad = a["D"][:, 0].clone().requires_grad_()[:, None].expand(H, P)
    looked = [step({"D": D_grad}, f"D requiring grad, call {k}") for k in range(3)]
    assert not ssut._guards or (looked[0] and not looked[2])
    # The same tensor object, now every other P-block of storage.
    x.as_strided_((Bt, H, P), (H * 2 * P, 2 * P, 1))
    assert step({}, "x with new strides") or not ssut._guards, "new strides not looked up"
    ssut.clear_cache()  # the entries made here call the counting lookup


def test_threads_sharing_a_cached_entry():
    """Four threads calling with one layout (so one cached argument struct)
    on their own pools get what each would get alone, with the interpreter
    switching threads as often as it can."""
    import sys
    import threading
    g = gen(19)
    inputs = [mamba2_inputs(g, "cpu", torch.float32) for _ in range(4)]
    want = []
    for a in inputs:
        state = a["state"].clone()
        outs = [ssut.selective_state_update(**dict(a, state=state)).clone() for _ in range(1000)]
        want.append((state, outs))
    got = [None] * 4

    def worker(i):
        a = inputs[i]
        state = a["state"].clone()
        outs = [ssut.selective_state_update(**dict(a, state=state)).clone() for _ in range(1000)]
        got[i] = (state, outs)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    for (ws, wo), (gs, go) in zip(want, got):
        assert torch.equal(ws, gs) and all(torch.equal(a, b) for a, b in zip(wo, go))


def test_mixed_devices_are_refused():
    if "cuda" not in DEVICES:
        pytest.skip("needs CUDA")
    g = gen(11)
    a = mamba2_inputs(g, "cuda", torch.float32)
    a["B"] = a["B"].cpu()
    with pytest.raises(ValueError, match="B is on cpu"):
        ssut.selective_state_update(**a)


# ---------------------------------------------------------------------------
# Tracing: the custom op
# ---------------------------------------------------------------------------

def test_opcheck(device):
    """torch.library.opcheck: schema (mutations declared), fake tensor and
    AOT-dispatch checks of torch.ops.ssu.selective_state_update."""
    g = gen(12)
    a = mamba2_inputs(g, device, torch.float32)
    out = torch.empty_like(a["x"])
    args = (a["state"], a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"],
            out, a["state_batch_indices"], None, None, None, None, None, None, None, None,
            True, False, -1, 0, 0)
    torch.library.opcheck(torch.ops.ssu.selective_state_update.default, args)


def test_op_bumps_the_written_tensors_versions(device):
    """Through the dispatcher the written tensors' version counters move, as
    after torch's in-place ops (autograd's check of saved tensors reads
    them); the read-only ones stay."""
    g = gen(21)
    a = mamba2_inputs(g, device, torch.float32)
    out = torch.empty_like(a["x"])
    scale = torch.ones(a["state"].shape[:-1], device=device)
    for state_scale in (None, scale):
        state = a["state"] if state_scale is None else a["state"].to(torch.int16)
        args = (state, a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"],
                out, a["state_batch_indices"], None, None, None, None, None, state_scale, None,
                None, True, False, -1, 0, 0)
        before = [t._version for t in args[:19] if isinstance(t, torch.Tensor)]
        torch.ops.ssu.selective_state_update.default(*args)
        after = [t._version for t in args[:19] if isinstance(t, torch.Tensor)]
        moved = [t is state or t is out or t is state_scale
                 for t in args[:19] if isinstance(t, torch.Tensor)]
        assert [b != a_ for b, a_ in zip(before, after)] == moved


def test_torch_compile_fullgraph(device):
    """A decode step (projection, the update, a residual) compiled with
    fullgraph=True matches eager, state mutation included."""
    g = gen(13)
    a = mamba2_inputs(g, device, torch.float32)
    W = randn(g, 16, 16, device=device, scale=0.25)

    def step(state, x, dt, B, C, z, slots):
        y = ssut.selective_state_update(state, x @ W, dt, a["A"], B, C, D=a["D"], z=z,
                                        dt_bias=a["dt_bias"], dt_softplus=True,
                                        state_batch_indices=slots)
        return y + x

    args = [a[k] for k in ("x", "dt", "B", "C", "z", "state_batch_indices")]
    s_eager, s_comp = a["state"].clone(), a["state"].clone()
    want = step(s_eager, *args)
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    for _ in range(2):  # twice: the second call reuses the compiled graph
        got = compiled(s_comp, *args)
    s_eager2 = s_eager.clone()
    want = step(s_eager2, *args)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s_comp, s_eager2, rtol=1e-4, atol=1e-4)


@needs_cuda
def test_torch_compile_reduce_overhead():
    """mode="reduce-overhead" (inductor with CUDA graphs) over several steps
    leaves the pool and outputs where eager steps leave them."""
    g = gen(18)
    a = mamba2_inputs(g, "cuda", torch.float32)
    xs = [randn(g, *a["x"].shape, device="cuda") for _ in range(4)]

    def step(state, x):
        return ssut.selective_state_update(state, x, a["dt"], a["A"], a["B"], a["C"], D=a["D"],
                                           z=a["z"], dt_bias=a["dt_bias"], dt_softplus=True,
                                           state_batch_indices=a["state_batch_indices"]) * 2

    s_eager, s_comp = a["state"].clone(), a["state"].clone()
    torch._dynamo.reset()
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for x in xs:
        want = step(s_eager, x)
        got = compiled(s_comp, x).clone()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s_comp, s_eager, rtol=1e-5, atol=1e-5)


@needs_cuda
def test_cuda_graph_capture_and_replay():
    """Eight captured steps on the current (capture) stream replay to the
    same pool and outputs as eight eager steps."""
    g = gen(14)
    a = mamba2_inputs(g, "cuda", torch.float32)
    xs = [randn(g, *a["x"].shape, device="cuda") for _ in range(8)]
    eager_state = a["state"].clone()
    eager_out = []
    for x in xs:
        eager_out.append(ssut.selective_state_update(**dict(a, state=eager_state, x=x)).clone())

    x_in = torch.empty_like(xs[0])
    outs = [torch.empty_like(xs[0]) for _ in xs]
    graph_state = a["state"].clone()
    start = a["state"].clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up builds the cached plan and struct
        ssut.selective_state_update(**dict(a, state=graph_state, x=x_in, out=outs[0]))
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    step_inputs = [torch.empty_like(x) for x in xs]
    with torch.cuda.graph(graph):
        for i in range(8):
            ssut.selective_state_update(**dict(a, state=graph_state, x=step_inputs[i],
                                               out=outs[i]))
    graph_state.copy_(start)
    for i, x in enumerate(xs):
        step_inputs[i].copy_(x)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(graph_state, eager_state, rtol=0, atol=0)
    for got, want in zip(outs, eager_out):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---------------------------------------------------------------------------
# Mamba-3 and replay through ssu.torch
# ---------------------------------------------------------------------------

def op_arguments(operation, kwargs):
    """The positional arguments of torch.ops.ssu.<operation> (its tensors,
    pointers, then options) from keyword arguments; absent ones are None."""
    names = [n for n, *_ in operation.tensors] + [n for n, _ in operation.pointers]
    return tuple(kwargs.get(n) for n in names) + tuple(
        kwargs[n] for n in operation.scalar_names)


def test_mamba3_step(device):
    g = gen(15)
    S, Bt, R, H, P, N = 5, 3, 2, 2, 16, 16
    a = dict(state=randn(g, S, H, P, N, device=device),
             prev_B=randn(g, S, R, H, N, device=device), prev_x=randn(g, S, H, P, device=device),
             A=-(torch.rand(Bt, H, generator=g) + 0.5).to(device),
             dt=(torch.rand(Bt, H, generator=g) * 0.3).to(device),
             trap=torch.rand(Bt, H, generator=g).to(device),
             B=randn(g, Bt, R, H, N, device=device), C=randn(g, Bt, R, H, N, device=device),
             x=randn(g, Bt, H, P, device=device), xproj=randn(g, R, H, P, device=device),
             D=randn(g, H, device=device), z=randn(g, Bt, H, P, device=device),
             zproj=randn(g, R, H, P, device=device), outproj=randn(g, R, H, P, device=device),
             state_batch_indices=torch.tensor([4, -1, 1], dtype=torch.int32, device=device))
    want = _m3_ref_args(a)
    out = ssut.mamba3_step(**a, update_prev=True)
    for got, ref in zip((a["state"], a["prev_B"], a["prev_x"], out), want):
        np.testing.assert_allclose(np64(got), ref, rtol=1e-4, atol=1e-4)
    torch.library.opcheck(torch.ops.ssu.mamba3_step.default, op_arguments(
        ssut._MAMBA3_STEP, dict(a, out=out, update_prev=True, pad_slot_id=-1)))


def _m3_ref_args(a):
    kw = {k: np64(v) for k, v in a.items() if k != "state_batch_indices"}
    return reference.mamba3_step(src_index=a["state_batch_indices"].cpu().numpy(),
                                 update_prev=True, **kw)


def test_mamba3_rotary(device):
    g = gen(16)
    S, Bt, R, H, N, Sa = 4, 2, 1, 2, 16, 8
    a = dict(angle_state=(torch.rand(S, H, Sa, generator=g) * 6).to(device),
             angle_rate=randn(g, Bt, H, Sa, device=device),
             dt=(torch.rand(Bt, H, generator=g) * 0.3).to(device),
             q=randn(g, Bt, R, H, N, device=device), k=randn(g, Bt, R, H, N, device=device),
             state_batch_indices=torch.tensor([3, 0], dtype=torch.int32, device=device))
    want = reference.mamba3_rotary(
        np64(a["angle_state"]), np64(a["angle_rate"]), np64(a["dt"]), np64(a["q"]),
        np64(a["k"]), src_index=a["state_batch_indices"].cpu().numpy())
    q_out, k_out = ssut.mamba3_rotary(**a)
    torch.library.opcheck(torch.ops.ssu.mamba3_rotary.default, op_arguments(
        ssut._MAMBA3_ROTARY, dict(a, angle_state=a["angle_state"].clone(), q_out=q_out.clone(),
                                  k_out=k_out.clone(), halved=False, pad_slot_id=-1)))
    got = (a["angle_state"], q_out, k_out)
    np.testing.assert_allclose(np64(got[1]), want[1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np64(got[2]), want[2], rtol=1e-4, atol=1e-4)
    d = np.abs(np64(got[0]) - want[0])
    assert np.all(np.minimum(d, 2 * np.pi - d) < 1e-4)


@pytest.mark.skipif(not ssu.has_replay, reason="the library has no replay")
def test_replay_steps_and_flush_match_plain_updates(device):
    """Replay steps (ring of 3) then a flush leave the f32 pool where plain
    updates leave it, with the same outputs."""
    g = gen(17)
    S, Bt, H, P, N, G, L = 4, 2, 2, 16, 16, 1, 3
    plain = libssu_inputs(g, device, Bt=Bt, S=S, H=H, P=P, N=N, G=G)
    slots = torch.tensor([2, 0], dtype=torch.int32, device=device)
    ckpt = plain["state"].clone()
    ring = dict(ring_x=torch.zeros(S, L, H, P, device=device),
                ring_B=torch.zeros(S, L, G, N, device=device),
                ring_dt=torch.zeros(S, L, H, device=device),
                committed=torch.zeros(S, dtype=torch.int32, device=device),
                pending=torch.zeros(S, dtype=torch.int32, device=device))
    for step in range(5):
        tok = {k: randn(g, *plain[k].shape, device=device, scale=0.5 if k == "dt" else 1.0)
               for k in ("x", "dt", "B", "C", "z")}
        want = ssut.selective_state_update(**dict(plain, **tok), state_batch_indices=slots)
        got = ssut.replay(ckpt, **ring, **tok, A=plain["A"], D=plain["D"],
                          dt_bias=plain["dt_bias"], dt_softplus=True, state_batch_indices=slots)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    step = dict(ring, state=ckpt, **tok, A=plain["A"], D=plain["D"], dt_bias=plain["dt_bias"],
                out=torch.empty_like(tok["x"]), state_batch_indices=slots, dt_softplus=True,
                disable_state_update=True, pad_slot_id=-1, max_seqlen=0, philox_rounds=0)
    torch.library.opcheck(torch.ops.ssu.replay.default, op_arguments(ssut._REPLAY, step))
    ssut.replay_flush(ckpt, **ring, A=plain["A"], slots=slots)
    torch.testing.assert_close(ckpt, plain["state"], rtol=1e-5, atol=1e-5)
    assert int(ring["committed"].sum()) == 0 and int(ring["pending"].sum()) == 0


@pytest.mark.skipif(not ssu.has_replay, reason="the library has no replay")
@pytest.mark.parametrize("fmt", ["int8", "e4m3"])
def test_replay_8bit_checkpoint_flushes_the_plain_update_bits(device, fmt):
    """int8 / float8_e4m3fn checkpoints with their state_scale pool: with a
    ring of 1 every step folds one entry and stores the row once, as a plain
    update does, so codes and scales match the plain update's bit for bit
    (on the CUDA backend too: its flush stores the CPU's bits)."""
    if fmt == "e4m3" and not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    code = torch.int8 if fmt == "int8" else torch.float8_e4m3fn
    g = gen(19)
    S, Bt, H, P, N, G, L = 4, 2, 2, 16, 16, 1, 1
    plain = libssu_inputs(g, device, Bt=Bt, S=S, H=H, P=P, N=N, G=G)
    plain["state"] = torch.zeros(S, H, P, N, dtype=code, device=device)
    plain["state_scale"] = torch.ones(S, H, P, device=device)
    slots = torch.tensor([2, 0], dtype=torch.int32, device=device)
    ckpt, ckpt_scale = plain["state"].clone(), plain["state_scale"].clone()
    ring = dict(ring_x=torch.zeros(S, L, H, P, device=device),
                ring_B=torch.zeros(S, L, G, N, device=device),
                ring_dt=torch.zeros(S, L, H, device=device),
                committed=torch.zeros(S, dtype=torch.int32, device=device),
                pending=torch.zeros(S, dtype=torch.int32, device=device))
    common = dict(A=plain["A"], D=plain["D"], dt_bias=plain["dt_bias"], dt_softplus=True,
                  state_batch_indices=slots, state_scale=ckpt_scale)
    for step in range(5):
        tok = {k: randn(g, *plain[k].shape, device=device, scale=0.5 if k == "dt" else 1.0)
               for k in ("x", "dt", "B", "C", "z")}
        want = ssut.selective_state_update(**dict(plain, **tok), state_batch_indices=slots)
        got = ssut.replay(ckpt, **ring, **tok, **common)
        # The outputs come from the folded fp32 state, the plain update's
        # from the stored (quantized) one: they differ by the format's step.
        tol = 2e-2 if fmt == "int8" else 2.0 ** -3
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    ssut.replay_flush(ckpt, **ring, A=plain["A"], slots=slots, state_scale=ckpt_scale)
    assert torch.equal(ckpt.view(torch.uint8), plain["state"].view(torch.uint8))
    assert torch.equal(ckpt_scale.view(torch.int32), plain["state_scale"].view(torch.int32))
    assert int(ring["committed"].sum()) == 0 and int(ring["pending"].sum()) == 0


# ---------------------------------------------------------------------------
# The two per-call paths: the C extension and the Python fallback
# ---------------------------------------------------------------------------

def _runs_on(op, path):
    """Whether the function the operation's next call tries first is the
    path's: a ssu._fastcall object or a function written in Python."""
    kind = type(op.run).__module__ + "." + type(op.run).__name__
    return kind == ("ssu._fastcall.Guarded" if path == "fast" else "builtins.function")


def _operation_calls(device):
    """(op, [three calls]) for every operation: two layouts of each (the
    first repeated, so that its struct is found by the check), each call a
    function of the tensors' clones that returns what it wrote."""
    g = gen(30)
    m2, m2b = libssu_inputs(g, device, Bt=3), mamba2_inputs(g, device, torch.float32, Bt=2)
    S, Bt, R, H, P, N = 5, 3, 2, 2, 16, 16
    m3 = dict(state=randn(g, S, H, P, N, device=device),
              prev_B=randn(g, S, R, H, N, device=device), prev_x=randn(g, S, H, P, device=device),
              A=-(torch.rand(Bt, H, generator=g) + 0.5).to(device),
              dt=(torch.rand(Bt, H, generator=g) * 0.3).to(device),
              trap=torch.rand(Bt, H, generator=g).to(device),
              B=randn(g, Bt, R, H, N, device=device), C=randn(g, Bt, R, H, N, device=device),
              x=randn(g, Bt, H, P, device=device), xproj=randn(g, R, H, P, device=device),
              state_batch_indices=torch.tensor([4, -1, 1], dtype=torch.int32, device=device))
    m3b = dict(m3, outproj=randn(g, R, H, P, device=device), D=randn(g, H, device=device))
    rot = dict(angle_state=(torch.rand(4, H, 8, generator=g) * 6).to(device),
               angle_rate=randn(g, 2, H, 8, device=device),
               dt=(torch.rand(2, H, generator=g) * 0.3).to(device),
               q=randn(g, 2, 1, H, N, device=device), k=randn(g, 2, 1, H, N, device=device),
               state_batch_indices=torch.tensor([3, 0], dtype=torch.int32, device=device))
    slots = torch.tensor([2, 0], dtype=torch.int32, device=device)
    plain = libssu_inputs(g, device, Bt=2, S=4, H=2, G=1)
    L = 3
    ring = dict(ring_x=torch.zeros(4, L, 2, 16, device=device),
                ring_B=torch.zeros(4, L, 1, 16, device=device),
                ring_dt=torch.zeros(4, L, 2, device=device),
                committed=torch.zeros(4, dtype=torch.int32, device=device),
                pending=torch.zeros(4, dtype=torch.int32, device=device))
    tok = {k: plain[k] for k in ("x", "dt", "B", "C", "z")}
    rep = dict(plain, **ring, **tok, state_batch_indices=slots)
    rep.pop("state")

    def fresh(a):
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in a.items()}

    def ssu_call(a, **kw):
        a = fresh(a)
        out = ssut.selective_state_update(**a, **kw)
        return (a["state"], out)

    def m3_call(a):
        a = fresh(a)
        out = ssut.mamba3_step(**a)
        return (a["state"], a["prev_B"], a["prev_x"], out)

    def rot_call(a, halved):
        a = fresh(a)
        return (a["angle_state"],) + ssut.mamba3_rotary(**a, halved=halved)

    def replay_call(disable):
        state, r = plain["state"].clone(), fresh(rep)
        out = ssut.replay(state, **r, disable_state_update=disable)
        return (state, out, r["committed"], r["pending"], r["ring_x"])

    def flush_call(with_acc):
        state, r = plain["state"].clone(), fresh(rep)
        ssut.replay(state, **r)  # a step of this layout first: the flush uses its plan
        acc = torch.ones(2, dtype=torch.int32, device=device) if with_acc else None
        ssut.replay_flush(state, r["ring_x"], r["ring_B"], r["ring_dt"], r["committed"],
                          r["pending"], plain["A"], slots, num_accepted_tokens=acc)
        return (state, r["committed"], r["pending"])

    calls = [
        (ssut._SSU, [lambda: ssu_call(m2), lambda: ssu_call(m2b),
                     lambda: ssu_call(m2, pad_slot_id=5)]),
        (ssut._MAMBA3_STEP, [lambda: m3_call(m3), lambda: m3_call(m3b),
                             lambda: m3_call(dict(m3, update_prev=False))]),
        (ssut._MAMBA3_ROTARY, [lambda: rot_call(rot, False), lambda: rot_call(rot, True),
                               lambda: rot_call(dict(rot, pad_slot_id=3), False)]),
    ]
    if ssu.has_replay:
        calls += [(ssut._REPLAY, [lambda: replay_call(False), lambda: replay_call(True),
                                  lambda: replay_call(False)]),
                  (ssut._REPLAY_FLUSH, [lambda: flush_call(False), lambda: flush_call(True),
                                        lambda: flush_call(False)])]
    return calls


def test_both_paths_give_the_same_results(device, path):
    """Every operation, called in a sequence that goes through the keyed
    lookup, the check of the last struct and the swap of the last two,
    writes bit for bit what the Python path writes, and its next call
    starts on the path under test."""
    order = [0, 0, 1, 0, 1, 1, 2, 0, 0]
    got = {}
    for which in ([path, "pure"] if path == "fast" else [path]):
        ssut._use_fastcall(which == "fast")
        results = []
        for op, calls in _operation_calls(device):
            results.append([calls[i]() for i in order])
            assert _runs_on(op, which), f"{op.name}: {type(op.run)} after repeated calls"
        got[which] = results
    ssut._use_fastcall(path == "fast")
    if len(got) == 2:
        for op_fast, op_pure in zip(got["fast"], got["pure"]):
            for call_fast, call_pure in zip(op_fast, op_pure):
                for a, b in zip(call_fast, call_pure):
                    assert torch.equal(a, b)


def test_errors_are_the_same_on_both_paths(path):
    """An error the library reports when the step runs (here a slot index
    past the pool, on the CPU backend) raises the same SsuError, message and
    status, on both paths: from the call that builds the struct, and from
    one that finds it by the check. The Mamba-1 layout adds its note."""
    g = gen(31)
    a = mamba2_inputs(g, "cpu", torch.float32)
    bad = dict(a, state_batch_indices=torch.tensor([0, 1, 2, 99], dtype=torch.int32))
    m1 = dict(state=randn(g, 3, 24, 16), x=randn(g, 2, 24), dt=randn(g, 2, 24),
              A=-torch.ones(24, 16), B=randn(g, 2, 16), C=randn(g, 2, 16))
    m1_bad = dict(m1, state_batch_indices=torch.tensor([0, 7], dtype=torch.int32))
    seen = {}
    for which in ([path, "pure"] if path == "fast" else [path]):
        ssut._use_fastcall(which == "fast")
        messages = []
        for good, wrong in ((a, bad), (m1, m1_bad)):
            for warm in (False, True):
                ssut.clear_cache()
                if warm:  # the struct is built; the bad call finds it by the check
                    ssut.selective_state_update(**good)
                    ssut.selective_state_update(**good)
                with pytest.raises(ssu.SsuError) as e:
                    ssut.selective_state_update(**wrong)
                messages.append((e.value.status, str(e.value)))
                if warm:
                    assert _runs_on(ssut._SSU, which)
        seen[which] = messages
    ssut._use_fastcall(path == "fast")
    for status, text in seen["pure"]:
        assert "ssu.torch.selective_state_update: state_batch_indices" in text and status != 0
        assert "state_batch_indices" in text and "src_index" not in text
    assert seen["pure"][2][1].endswith("D (1, D))"), "the Mamba-1 note"
    if "fast" in seen:
        assert seen["fast"] == seen["pure"]


def test_threads_taking_turns_between_layouts(path):
    """Threads that each alternate between two layouts (so the operation's
    first and second entries keep swapping under them), one more that
    changes its batch size every call (keyed lookups and new structs), all
    get what each gets alone."""
    import sys
    import threading
    g = gen(32)
    jobs = []
    for i in range(4):
        a = mamba2_inputs(g, "cpu", torch.float32)
        flat = dict(a, **{k: a[k].contiguous() for k in ("A", "dt", "D", "dt_bias")})
        jobs.append([a, flat])
    jobs.append([mamba2_inputs(g, "cpu", torch.float32, Bt=bt) for bt in (1, 2, 3)])

    def work(layouts, n=300):
        states = [lay["state"].clone() for lay in layouts]
        outs = []
        for k in range(n):
            j = k % len(layouts)
            outs.append(ssut.selective_state_update(**dict(layouts[j], state=states[j])).clone())
        return states, outs

    want = [work(job) for job in jobs]
    got = [None] * len(jobs)

    def worker(i):
        got[i] = work(jobs[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    for (ws, wo), (gs, go) in zip(want, got):
        assert all(torch.equal(a, b) for a, b in zip(ws, gs))
        assert all(torch.equal(a, b) for a, b in zip(wo, go))


def test_rotating_layouts_leave_no_garbage(path):
    """Three layouts in rotation look their structs up on every call and
    make new checked functions each time; those form reference cycles
    (each entry's function names the other's), which the garbage collector
    must be able to free."""
    import gc
    g = gen(33)
    layouts = [mamba2_inputs(g, "cpu", torch.float32, Bt=bt) for bt in (1, 2, 3)]
    for k in range(30):
        ssut.selective_state_update(**layouts[k % 3])
    gc.collect()
    before = len(gc.get_objects())
    for k in range(600):
        ssut.selective_state_update(**layouts[k % 3])
    gc.collect()
    assert len(gc.get_objects()) - before < 100


def test_pure_path_selected_by_environment(path):
    """SSU_TORCH_PURE=1 at import leaves the C extension unused."""
    if path != "pure":
        pytest.skip("one run is enough")
    import os
    import subprocess
    import sys
    code = ("import ssu.torch as t, sys; "
            "sys.exit(0 if t._fastcall is None and not t._fast else 1)")
    env = dict(os.environ, SSU_TORCH_PURE="1")
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0
