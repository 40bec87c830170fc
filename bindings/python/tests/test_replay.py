"""Replay (checkpointed decode) through the Python binding on the CPU
backend: replay steps and flushes against the plain update."""

import numpy as np
import pytest

import ssu

S, H, P, N, G = 5, 4, 16, 16, 2
RTOL, ATOL = 1e-4, 1e-5

pytestmark = pytest.mark.skipif(not ssu.has_replay, reason="the library has no replay")


@pytest.fixture(scope="module")
def ctx():
    with ssu.Context("cpu", num_threads=2) as c:
        yield c


def f32(r, *shape):
    return r.standard_normal(shape).astype(np.float32)


def weights(r, per_channel):
    """A < 0 and dt_bias in [-4, -3], per head or per channel."""
    if per_channel:
        return dict(A=-(r.random((H, P, N)) + 0.5).astype(np.float32), D=f32(r, H, P),
                    dt_bias=(r.random((H, P)) - 4.0).astype(np.float32))
    return dict(A=-(r.random(H) + 0.5).astype(np.float32), D=f32(r, H),
                dt_bias=(r.random(H) - 4.0).astype(np.float32))


def tokens(r, lead, per_channel):
    """One call's per-token inputs with leading axes `lead` ((Bt,) or (Bt, T))."""
    dt_shape = (*lead, H, P) if per_channel else (*lead, H)
    return dict(x=f32(r, *lead, H, P), B=f32(r, *lead, G, N), C=f32(r, *lead, G, N),
                z=f32(r, *lead, H, P),
                dt=(r.random(dt_shape) * 0.5 - 0.25).astype(np.float32))


def new_ring(L, per_channel=False):
    """Ring buffers of S slots with capacity L, counters zero (fresh slots)."""
    return dict(ring_x=np.zeros((S, L, H, P), np.float32),
                ring_B=np.zeros((S, L, G, N), np.float32),
                ring_dt=np.zeros((S, L, H, P) if per_channel else (S, L, H), np.float32),
                committed=np.zeros(S, np.int32), pending=np.zeros(S, np.int32))


def same_bits(a, b):
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_head", "per_channel"])
def test_replay_then_flush_equals_plain_update(ctx, per_channel):
    """T = 1, every token committed: 8 replay steps (ring of 3, so checkpoints
    are stored inside steps too) and a flush leave the f32 pool bit for bit
    where 8 plain updates leave it."""
    r = np.random.default_rng(3)
    L, steps = 3, 8
    state0 = f32(r, S, H, P, N)
    w = weights(r, per_channel)
    slots = np.array([4, -1, 1], np.int32)  # the second sequence is padding
    bt = len(slots)
    plain, ckpt, ring = state0.copy(), state0.copy(), new_ring(L, per_channel)
    update_plan = replay_plan = None
    for k in range(steps):
        tok = tokens(r, (bt,), per_channel)
        out_plain = np.full((bt, H, P), np.nan, np.float32)
        out_replay = np.full((bt, H, P), np.nan, np.float32)
        common = dict(tok, **w, src_index=slots, dt_softplus=True)
        if update_plan is None:
            update_plan = ctx.plan_update(state=plain, out=out_plain, **common)
            replay_plan = ctx.plan_replay(state=ckpt, out=out_replay, **ring, **common)
            assert replay_plan.kind == "replay" and replay_plan.backend == "cpu"
            assert replay_plan.algorithm_name
        update_plan.execute(state=plain, out=out_plain, **common)
        replay_plan.execute(state=ckpt, out=out_replay, **ring, **common)
        np.testing.assert_allclose(out_replay, out_plain, rtol=RTOL, atol=ATOL,
                                   err_msg=f"step {k}")
        assert np.all(out_replay[1] == 0), "padding outputs are exactly zero"

    # Stored inside steps 4 and 7; one entry committed since, one pending.
    assert ring["committed"].tolist() == [0, 1, 0, 0, 1]
    assert ring["pending"].tolist() == [0, 1, 0, 0, 1]
    assert not same_bits(ckpt, plain), "the checkpoints lag until flushed"
    replay_plan.flush(state=ckpt, **ring, A=w["A"], src_index=np.array([1, -1, 4], np.int64))
    assert not ring["committed"].any() and not ring["pending"].any()
    assert same_bits(ckpt, plain)
    assert same_bits(ckpt[[0, 2, 3]], state0[[0, 2, 3]]), "slots never named are untouched"


def test_speculative_num_accepted(ctx):
    """T = 3 draft tokens per call; the next call (or the flush) names how
    many each sequence keeps. Outputs follow the accepted tokens only, and
    the flushed pool equals plain updates of just the accepted tokens."""
    r = np.random.default_rng(8)
    L, T = 8, 3
    state0 = f32(r, S, H, P, N)
    w = weights(r, False)
    slots = np.array([2, 0], np.int64)
    bt = len(slots)
    # num_accepted of each call (the first call has nothing pending), then
    # that of the flush.
    accepted = [[0, 0], [3, 1], [0, 2], [2, 3], [3, 3], [1, 0]]
    final = [3, 2]
    ckpt, ring = state0.copy(), new_ring(L)
    plain = state0.copy()
    prev = None  # the previous call's drafts
    step = None

    def commit_plain(drafts, acc):
        """Plain single-token updates of the accepted drafts."""
        for t in range(T):
            src = np.where(np.array(acc) > t, slots, -1)
            one = {k: np.ascontiguousarray(v[:, t]) for k, v in drafts.items()}
            ctx.update(state=plain, out=np.empty((bt, H, P), np.float32), src_index=src,
                       dt_softplus=True, **one, **w)

    for k, acc in enumerate(accepted):
        if prev is not None:
            commit_plain(prev, acc)
        drafts = tokens(r, (bt, T), False)
        want = np.full((bt, T, H, P), np.nan, np.float32)
        ctx.update(state=plain, out=want, src_index=slots, dt_softplus=True,
                   disable_state_update=True, **drafts, **w)
        out = np.full((bt, T, H, P), np.nan, np.float32)
        num_accepted = np.array(acc, np.int32)
        call = dict(drafts, out=out, num_accepted=num_accepted)
        if step is None:
            plan = ctx.plan_replay(state=ckpt, **ring, src_index=slots, dt_softplus=True,
                                   **call, **w)
            step = plan.bind(state=ckpt, **ring, src_index=slots, dt_softplus=True,
                             **call, **w)
        else:
            step.set(**call)
        step()
        np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL, err_msg=f"call {k}")
        assert ring["pending"][slots].tolist() == [T, T]
        prev = drafts

    commit_plain(prev, final)
    flush = plan.bind_flush(state=ckpt, **ring, A=w["A"], src_index=slots,
                            num_accepted=np.array(final, np.int32))
    flush()
    assert not ring["committed"].any() and not ring["pending"].any()
    assert same_bits(ckpt, plain)


def test_num_accepted_above_pending_is_refused(ctx):
    """num_accepted > pending: SsuError with the library's message, and
    nothing written (outputs, checkpoints, ring, counters)."""
    r = np.random.default_rng(21)
    L, T = 4, 2
    ckpt = f32(r, S, H, P, N)
    w = weights(r, False)
    slots = np.array([3, 1], np.int32)
    ring = new_ring(L)
    first = dict(tokens(r, (2, T), False), out=np.empty((2, T, H, P), np.float32),
                 num_accepted=np.zeros(2, np.int32))
    plan = ssu.plan_replay(ctx, state=ckpt, **ring, src_index=slots, **first, **w)
    ssu.execute_replay(plan, state=ckpt, **ring, src_index=slots, **first, **w)
    assert ring["pending"][slots].tolist() == [T, T]

    before = {k: v.copy() for k, v in ring.items()}
    ckpt0 = ckpt.copy()
    out = np.full((2, T, H, P), np.nan, np.float32)
    bad = np.array([1, T + 1], np.int32)
    with pytest.raises(ssu.SsuError) as e:
        ssu.execute_replay(plan, state=ckpt, **ring, src_index=slots, out=out, num_accepted=bad,
                           **tokens(r, (2, T), False), **w)
    assert e.value.status == 100 and e.value.family == 1
    assert e.value.message.startswith(f"num_accepted[1]={T + 1} but ring.pending[1]={T}")
    assert e.value.message in str(e.value)
    assert np.isnan(out).all()
    assert same_bits(ckpt, ckpt0)
    for k, v in ring.items():
        assert np.array_equal(v, before[k]), k

    # The flush checks the same before writing.
    with pytest.raises(ssu.SsuError, match=r"num_accepted\[0\]=3 but ring.pending\[3\]=2"):
        ssu.replay_flush(plan, state=ckpt, **ring, A=w["A"], src_index=slots,
                         num_accepted=bad[::-1].copy())
    assert same_bits(ckpt, ckpt0)
    for k, v in ring.items():
        assert np.array_equal(v, before[k]), k

    update = ctx.plan_update(state=ckpt, out=np.empty((2, H, P), np.float32), src_index=slots,
                             **tokens(r, (2,), False), **w)
    with pytest.raises(TypeError, match="replay plan"):
        update.flush(state=ckpt, **ring, A=w["A"], src_index=slots)
    with pytest.raises(TypeError, match="replay plan"):
        ssu.execute_replay(update)
