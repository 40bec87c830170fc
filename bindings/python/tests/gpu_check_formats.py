#!/usr/bin/env python3
"""The 0.2 operations of the Python binding on the CUDA backend with torch
tensors, against the CPU backend on numpy copies of the same inputs (run by
tools/gpu-python-check.sh after gpu_check.py):

  mamba3_step      f32 state, bf16 inputs, z gate + outproj, UPDATE_PREV,
                   src/dst slots with one padded entry: out within bf16
                   tolerance, state within 1e-4, prev_B / prev_x and every
                   untouched slot bit-identical, padded outputs exactly 0.
  mamba3_rotary    bf16 q/k, interleaved pairs: q_out/k_out within bf16
                   tolerance, angles within 1e-5 (mod 2*pi).
  sr_f16, sr_bf16  stochastic rounding with a one-element int64 CUDA seed:
                   the stored state is bit-identical to the CPU backend's for
                   the same seed; ctx.advance_seed on the device seed adds 1,
                   and a second run of the same bound update gives other
                   bits, again equal to the CPU backend's for seed + 1.
  sr_f16_token_dst multi-token with per-token dst stores: every store of a
                   sequence draws from its initial slot's stream.
  int16            int16 codes and state_scale rows bit-identical (final
                   stores, and intermediate states with their scales).
  seed_uint64      advance_seed on a torch.uint64 seed wraps modulo 2^64
                   (skipped when this torch cannot export uint64).

One PASS/FAIL line per check; exits 0 when all pass, 1 otherwise, 77
without a usable GPU. --dry-cpu runs the same checks with a second CPU
context and numpy arrays in place of the GPU (no torch needed), to check
this script itself.

    python3 gpu_check_formats.py [--json FILE] [--dry-cpu]
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ssu  # noqa: E402
from reference import bf16_bits, bf16_to_f32  # noqa: E402

SEED = 0x243F6A8885A308D3
BF16_NAN = 0x7FC0


class BF16:
    """bf16 data as its uint16 bits (numpy has no bfloat16)."""

    def __init__(self, values=None, bits=None):
        self.bits = bf16_bits(values) if bits is None else bits


def rng(seed):
    r = np.random.default_rng(seed)
    return lambda lo, hi, *s: r.uniform(lo, hi, s).astype(np.float32)


# ---------------------------------------------------------------------------
# The two sides: host (CPU backend, numpy) and device (CUDA backend, torch)
# ---------------------------------------------------------------------------

class Host:
    """numpy copies for a CPU context."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.stream = 0

    def put(self, v):
        if isinstance(v, BF16):
            return ssu.tensor(v.bits.copy(), dtype="bf16")
        if isinstance(v, np.ndarray):
            return v.copy()
        return v

    def seed(self, value):
        return np.array([value], np.uint64)

    def seed_value(self, s):
        return int(np.asarray(s).view(np.uint64).reshape(-1)[0])

    def bits(self, v):
        """The stored bits as a host numpy array (uint16 for 2-byte floats)."""
        if isinstance(v, ssu.tensor):
            return np.asarray(v.obj).copy()
        a = np.asarray(v).copy()
        return a.view(np.uint16) if a.dtype == np.float16 else a

    def values(self, v):
        if isinstance(v, ssu.tensor):
            return bf16_to_f32(v.obj).astype(np.float64)
        return np.asarray(v).astype(np.float64)

    def copy_into(self, dst, src):
        d = dst.obj if isinstance(dst, ssu.tensor) else dst
        s = src.obj if isinstance(src, ssu.tensor) else src
        d[...] = s

    def clone(self, v):
        return self.put(BF16(bits=v.obj)) if isinstance(v, ssu.tensor) else v.copy()

    def sync(self):
        pass

    def uploaded(self):
        pass

    def run(self, fn):
        return fn()


class Device(Host):
    """torch CUDA tensors on a non-default stream for a CUDA context."""

    def __init__(self, ctx, torch):
        self.ctx = ctx
        self.torch = torch
        self.cuda_stream = torch.cuda.Stream()
        self.stream = self.cuda_stream.cuda_stream

    def put(self, v):
        t = self.torch
        if isinstance(v, BF16):
            return t.from_numpy(v.bits.view(np.int16).copy()).cuda().view(t.bfloat16)
        if isinstance(v, np.ndarray):
            return t.from_numpy(v.copy()).cuda()
        return v

    def seed(self, value):
        v = np.array([value], np.uint64).view(np.int64)
        return self.torch.from_numpy(v.copy()).cuda()

    def seed_value(self, s):
        self.sync()
        return int(s.cpu().numpy().view(np.uint64)[0])

    def bits(self, v):
        self.sync()
        t = self.torch
        if v.dtype in (t.bfloat16, t.float16):
            return v.view(t.int16).cpu().numpy().view(np.uint16)
        return v.cpu().numpy()

    def values(self, v):
        self.sync()
        return v.float().cpu().numpy().astype(np.float64)

    def copy_into(self, dst, src):
        with self.torch.cuda.stream(self.cuda_stream):
            dst.copy_(src)

    def clone(self, v):
        with self.torch.cuda.stream(self.cuda_stream):
            return v.clone()

    def sync(self):
        self.cuda_stream.synchronize()

    def uploaded(self):
        # put() copies on the default stream; the checks run on another one.
        self.torch.cuda.synchronize()

    def run(self, fn):
        with self.torch.cuda.stream(self.cuda_stream):
            r = fn()
        self.sync()
        return r


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                                                 np.ascontiguousarray(b).view(np.uint8))


def close(problems, name, got, want, rtol, atol):
    bad = ~(np.abs(got - want) <= atol + rtol * np.abs(want))  # NaN counts as bad
    if bad.any():
        problems.append(f"{name}: {int(bad.sum())} of {bad.size} elements outside "
                        f"rtol {rtol:g} / atol {atol:g}, max |diff| "
                        f"{float(np.nanmax(np.abs(got - want))):.3g}")


def bit_equal(problems, name, got, want):
    if not same_bits(got, want):
        g = np.asarray(got).reshape(-1)
        w = np.asarray(want).reshape(-1)
        n = int(np.count_nonzero(g != w)) if g.shape == w.shape else -1
        problems.append(f"{name}: not bit-identical ({n} of {w.size} elements differ)")


def both(host, dev, args):
    h, d = {k: host.put(v) for k, v in args.items()}, {k: dev.put(v) for k, v in args.items()}
    dev.uploaded()
    return h, d


# ---------------------------------------------------------------------------
# Mamba-3
# ---------------------------------------------------------------------------

def check_mamba3_step(host, dev):
    S, H, P, N, R, Bt = 6, 4, 64, 128, 4, 4
    u = rng(301)
    args = dict(
        state=u(-1, 1, S, H, P, N),
        prev_B=BF16(u(-1, 1, S, R, H, N)),
        prev_x=BF16(u(-1, 1, S, H, P)),
        A=u(-1.5, -0.5, Bt, H), dt=u(0.05, 0.5, Bt, H), trap=u(0.1, 0.9, Bt, H),
        B=BF16(u(-1, 1, Bt, R, H, N)), C=BF16(u(-1, 1, Bt, R, H, N)),
        x=BF16(u(-1, 1, Bt, H, P)), D=u(-1, 1, H), xproj=u(0.5, 1.5, R, H, P),
        z=BF16(u(-2, 2, Bt, H, P)), zproj=u(0.5, 1.5, R, H, P), outproj=u(-1, 1, R, H, P),
        out=BF16(bits=np.full((Bt, H, P), BF16_NAN, np.uint16)),
        src_index=np.array([3, -1, 0, 5], np.int32),
        dst_index=np.array([1, 2, 4, 5], np.int32),  # 2: the padded sequence's dst
        update_prev=True,
    )
    h, d = both(host, dev, args)
    before = {k: dev.bits(d[k]) for k in ("state", "prev_B", "prev_x")}
    host.ctx.mamba3_step(**h)
    plan = dev.ctx.plan_mamba3_step(**d)
    dev.run(lambda: plan.execute(stream=dev.stream, **d))
    p = []
    close(p, "out", dev.values(d["out"]), host.values(h["out"]), 1e-2, 1e-2)
    close(p, "state", dev.values(d["state"]), host.values(h["state"]), 1e-4, 1e-4)
    bit_equal(p, "prev_B", dev.bits(d["prev_B"]), host.bits(h["prev_B"]))
    bit_equal(p, "prev_x", dev.bits(d["prev_x"]), host.bits(h["prev_x"]))
    if not np.all(dev.values(d["out"])[1] == 0):
        p.append("the padded sequence's out is not exactly zero")
    for k in ("state", "prev_B", "prev_x"):
        after = dev.bits(d[k])
        for s in (0, 2, 3):  # not a destination of a live sequence
            if not same_bits(after[s], before[k][s]):
                p.append(f"{k} slot {s} changed")
        for s in (1, 4, 5):
            if same_bits(after[s], before[k][s]):
                p.append(f"{k} slot {s} was not stored")
    return p, f"plan {plan.algorithm_name}"


def angle_dist(a, b):
    d = np.mod(a - b, 2 * np.pi)
    return np.minimum(d, 2 * np.pi - d)


def check_mamba3_rotary(host, dev):
    S, H, N, R, Bt = 6, 4, 128, 4, 4
    Sa = N // 2
    u = rng(302)
    nan = lambda: BF16(bits=np.full((Bt, R, H, N), BF16_NAN, np.uint16))
    args = dict(
        angle_state=u(0, 6.28, S, H, Sa), angle_rate=u(-3, 3, Bt, H, Sa),
        dt=u(0.05, 1.0, Bt, H),
        q=BF16(u(-1, 1, Bt, R, H, N)), k=BF16(u(-1, 1, Bt, R, H, N)),
        q_bias=u(-0.5, 0.5, R, H, N), k_bias=u(-0.5, 0.5, R, H, N),
        q_out=nan(), k_out=nan(),
        src_index=np.array([2, -1, 4, 1], np.int64),
        dst_index=np.array([0, 3, 4, -1], np.int64),  # b = 3 stores no angles
        halved=False,
    )
    h, d = both(host, dev, args)
    before = dev.bits(d["angle_state"])
    host.ctx.mamba3_rotary(**h)
    plan = dev.ctx.plan_mamba3_rotary(**d)
    dev.run(lambda: plan.execute(stream=dev.stream, **d))
    p = []
    for k in ("q_out", "k_out"):
        got = dev.values(d[k])
        close(p, k, got, host.values(h[k]), 1e-2, 1e-2)
        if not np.all(got[1] == 0):
            p.append(f"the padded sequence's {k} is not exactly zero")
    got, want = dev.values(d["angle_state"]), host.values(h["angle_state"])
    dist = angle_dist(got, want)
    if not np.all(dist <= 1e-5):
        p.append(f"angle_state: {int(np.count_nonzero(~(dist <= 1e-5)))} angles differ by "
                 f"more than 1e-5 (max {float(np.nanmax(dist)):.3g})")
    if not np.all((got >= 0) & (got <= np.float32(2 * np.pi))):
        p.append("angle_state outside [0, 2*pi]")
    after = dev.bits(d["angle_state"])
    for s in (1, 2, 3, 5):
        if not same_bits(after[s], before[s]):
            p.append(f"angle_state slot {s} changed")
    return p, f"plan {plan.algorithm_name}"


# ---------------------------------------------------------------------------
# Selective update: stochastic rounding and int16
# ---------------------------------------------------------------------------

def update_inputs(seed, S=6, H=4, P=64, N=128, G=2, Bt=4, T=None, act=None):
    """Model-like update inputs; act = BF16 gives bf16 activations."""
    r = np.random.default_rng(seed)
    lead = (Bt, T) if T is not None else (Bt,)
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    a = dict(state=f(S, H, P, N), x=f(*lead, H, P), B=f(*lead, G, N), C=f(*lead, G, N),
             z=f(*lead, H, P))
    a["dt"] = (r.random((*lead, H)) * 0.5 - 0.25).astype(np.float32)
    a["A"] = -(r.random(H) + 0.5).astype(np.float32)
    a["D"] = f(H)
    a["dt_bias"] = (r.random(H) - 4.0).astype(np.float32)
    a["out"] = np.zeros_like(a["x"])
    a["dt_softplus"] = True
    if act is BF16:
        for k in ("x", "B", "C", "z", "out"):
            a[k] = BF16(a[k])
    return a


def check_sr(host, dev, state_dtype, token_dst=False):
    if token_dst:
        a = update_inputs(402, Bt=3, T=2)
        a["src_index"] = np.array([[4, 0], [-1, 0], [1, 0]], np.int32)
        a["dst_index"] = np.array([[0, 4], [2, 3], [5, -1]], np.int32)
    else:
        a = update_inputs(401 if state_dtype == "f16" else 403,
                          act=BF16 if state_dtype == "bf16" else None)
        a["src_index"] = np.array([5, -1, 2, 0], np.int32)
        a["dst_index"] = np.array([1, 3, 2, 4], np.int32)  # 2 in place
    if state_dtype == "f16":
        a["state"] = a["state"].astype(np.float16)
    else:
        a["state"] = BF16(a["state"])
    a["rounding_rounds"] = 7
    h, d = both(host, dev, a)
    h0, d0 = host.clone(h["state"]), dev.clone(d["state"])

    def cpu_bits(seed):
        host.copy_into(h["state"], h0)
        host.ctx.update(**{**h, "rounding_seed": host.seed(seed)})
        return host.bits(h["state"])

    # The device seed is read when the update runs: one bound update, the
    # seed advanced on the device between two runs (as a replayed graph).
    dseed = dev.seed(SEED)
    dev.uploaded()
    dargs = {**d, "rounding_seed": dseed}
    call = dev.run(lambda: dev.ctx.plan_update(**dargs).bind(stream=dev.stream, **dargs))
    algo = call.plan.algorithm_name
    dev.run(call)
    first = dev.bits(d["state"])
    p = []
    want1 = cpu_bits(SEED)
    bit_equal(p, f"{state_dtype} state, seed s", first, want1)
    dev.run(lambda: dev.ctx.advance_seed(dseed, 1, stream=dev.stream))
    got_seed = dev.seed_value(dseed)
    if got_seed != SEED + 1:
        p.append(f"advance_seed: device seed {got_seed:#x}, want {SEED + 1:#x}")
    dev.run(lambda: dev.copy_into(d["state"], d0))
    dev.run(call)
    second = dev.bits(d["state"])
    if same_bits(second, first):
        p.append("the advanced seed gave the same bits")
    bit_equal(p, f"{state_dtype} state, seed s+1", second, cpu_bits(SEED + 1))
    # The seed matters only where something is stored; make sure it mattered.
    rows = [1, 4] if not token_dst else [0, 2, 4, 5]
    if same_bits(want1[rows], cpu_bits(SEED + 1)[rows]):
        p.append("the CPU backend gave identical bits for two seeds")
    return p, f"plan {algo}"


def quantize(v):
    """Rows of the last axis to int16 codes and f32 scales (ssu.h's store
    rule, for initial pools only: the checks compare the backends)."""
    v = np.asarray(v, np.float32)
    amax = np.max(np.abs(v), axis=-1)
    enc = np.where(amax == 0, np.float32(1),
                   np.float32(32767) / np.where(amax == 0, 1, amax)).astype(np.float32)
    q = np.rint(np.clip(v * enc[..., None], -32767, 32767)).astype(np.int16)
    return q, (np.float32(1) / enc).astype(np.float32)


def check_int16(host, dev, intermediate=False):
    if intermediate:
        a = update_inputs(502, S=5, Bt=2, T=3)
        a["src_index"] = np.array([3, 1], np.int32)
        a["intermediate_states"] = np.zeros((5, 3, 4, 64, 128), np.int16)
        a["intermediate_scales"] = np.full((5, 3, 4, 64), np.nan, np.float32)
    else:
        a = update_inputs(501)
        a["src_index"] = np.array([5, -1, 2, 0], np.int32)
        a["dst_index"] = np.array([1, 3, 2, 4], np.int32)
    a["state"], a["state_scale"] = quantize(a["state"])
    h, d = both(host, dev, a)
    host.ctx.update(**h)
    plan = dev.ctx.plan_update(**d)
    dev.run(lambda: plan.execute(stream=dev.stream, **d))
    p = []
    names = ["state", "state_scale"] + (["intermediate_states", "intermediate_scales"]
                                        if intermediate else [])
    for k in names:
        bit_equal(p, k, dev.bits(d[k]), host.bits(h[k]))
    close(p, "out", dev.values(d["out"]), host.values(h["out"]), 2e-4, 2e-4)
    if not intermediate and not np.all(dev.values(d["out"])[1] == 0):
        p.append("the padded sequence's out is not exactly zero")
    if same_bits(host.bits(h["state"]), a["state"]):
        p.append("the CPU backend stored nothing")
    return p, f"plan {plan.algorithm_name}"


def check_seed_uint64(host, dev):
    t = getattr(dev, "torch", None)
    if t is None:
        s = np.array([2**64 - 2], np.uint64)
        dev.ctx.advance_seed(s, 5)
        return ([] if int(s[0]) == 3 else [f"seed {int(s[0])}, want 3"]), "numpy uint64"
    if not hasattr(t, "uint64"):
        return None, f"torch {t.__version__} has no uint64"
    try:
        s = t.tensor([-2], dtype=t.int64, device="cuda").view(t.uint64)
        s.__dlpack__()
    except Exception as e:
        return None, f"torch cannot export a uint64 tensor: {type(e).__name__}: {e}"
    dev.run(lambda: dev.ctx.advance_seed(s, 5, stream=dev.stream))
    got = int(s.view(t.int64).cpu().numpy().view(np.uint64)[0])
    return ([] if got == 3 else [f"seed {got}, want 3"]), "torch.uint64, 2^64-2 + 5"


CHECKS = {
    "mamba3_step[f32 state, bf16 in, z+outproj, update_prev, pad]": check_mamba3_step,
    "mamba3_rotary[bf16 q/k, interleaved, pad]": check_mamba3_rotary,
    "sr_f16[f32 in, seed + advance_seed]": lambda h, d: check_sr(h, d, "f16"),
    "sr_bf16[bf16 in, seed + advance_seed]": lambda h, d: check_sr(h, d, "bf16"),
    "sr_f16_token_dst[T=2, per-token dst]": lambda h, d: check_sr(h, d, "f16", True),
    "int16[state_scale, src/dst, pad]": lambda h, d: check_int16(h, d),
    "int16_intermediate[T=3, intermediate_scales]": lambda h, d: check_int16(h, d, True),
    "seed_uint64[advance_seed wraps]": check_seed_uint64,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--dry-cpu", action="store_true",
                    help="a second CPU context in place of the GPU (checks this script)")
    opt = ap.parse_args()
    if opt.dry_cpu:
        dev = Host(ssu.Context("cpu", num_threads=1))
        device = "CPU (dry run)"
    else:
        try:
            import torch
        except ImportError:
            print("gpu_check_formats: no torch")
            return 77
        if not torch.cuda.is_available():
            print("gpu_check_formats: torch sees no CUDA device")
            return 77
        try:
            ctx = ssu.Context("cuda", device=torch.cuda.current_device())
        except ssu.SsuError as e:
            print(f"gpu_check_formats: no CUDA backend: {e}")
            return 77
        dev = Device(ctx, torch)
        device = ctx.device_name
    host = Host(ssu.Context("cpu"))
    print(f"library {ssu.library_path} {ssu.version_string()}; device: {device}")
    results = {}
    for name, check in CHECKS.items():
        try:
            problems, note = check(host, dev)
        except Exception as e:  # report every check, fail at the end
            problems, note = [f"{type(e).__name__}: {e}"], ""
        if problems is None:
            print(f"SKIP {name} ({note})")
            results[name] = {"status": "SKIP", "note": note}
            continue
        status = "FAIL" if problems else "PASS"
        results[name] = {"status": status, "note": note, "problems": problems}
        print(f"{status} {name}" + (f" ({note})" if note else "") +
              "".join(f"\n       {q}" for q in problems))
    failed = [k for k, v in results.items() if v["status"] == "FAIL"]
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump({"device": device, "results": results}, f, indent=1)
    print(f"gpu_check_formats: {len(results) - len(failed)} passed or skipped, "
          f"{len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
