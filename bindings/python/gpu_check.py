#!/usr/bin/env python3
"""The Python binding on the CUDA backend with torch tensors, against the
CPU backend on the same inputs (run by tools/gpu-python-check.sh).

Each case builds inputs in numpy, runs them through the CPU backend (numpy
arrays) and through the CUDA backend (torch CUDA tensors via DLPack, on a
non-default stream), and compares outputs and pools within twice SPEC.md's
tolerances; padding, untouched slots and disabled writes must be exact.
Exits 0 when every case passes, 1 otherwise, 77 without a usable GPU.

    python3 gpu_check.py [--json FILE]
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))

import ssu  # noqa: E402
from reference import bf16_bits, bf16_to_f32  # noqa: E402


def inputs(seed, S=8, H=4, P=64, N=16, G=2, Bt=4, T=None, TT=None, per_channel=False):
    r = np.random.default_rng(seed)
    lead = (TT,) if TT is not None else ((Bt, T) if T is not None else (Bt,))
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    a = dict(state=f(S, H, P, N), x=f(*lead, H, P), B=f(*lead, G, N), C=f(*lead, G, N),
             z=f(*lead, H, P))
    hp = (H, P) if per_channel else (H,)
    a["dt"] = (r.random((*lead, *hp)) * 0.5 - 0.25).astype(np.float32)
    a["A"] = -(r.random((H, P, N) if per_channel else (H,)) + 0.5).astype(np.float32)
    a["D"] = f(*hp)
    a["dt_bias"] = (r.random(hp) - 4.0).astype(np.float32)
    a["out"] = np.zeros_like(a["x"])
    a["dt_softplus"] = True
    return a


CASES = {
    "single_token_pad_dst": lambda: {**inputs(1), "src_index": np.array([5, -1, 2, 7], np.int32),
                                     "dst_index": np.array([0, 1, 3, 4], np.int32)},
    "multi_token_2d_dst": lambda: {**inputs(2, Bt=2, T=3),
                                   "src_index": np.array([[1, 0, 0], [-1, 0, 0]], np.int64),
                                   "dst_index": np.array([[2, -1, 3], [4, 5, 6]], np.int64)},
    "num_accepted": lambda: {**inputs(3, Bt=2, T=3),
                             "src_index": np.array([[0, 1, 2], [3, 4, 5]], np.int32),
                             "num_accepted_tokens": np.array([3, 1], np.int32)},
    "varlen": lambda: {**inputs(4, Bt=3, TT=5), "cu_seqlens": np.array([0, 2, 2, 5], np.int32),
                       "max_tokens": 3, "src_index": np.array([6, 1, 3], np.int32)},
    "intermediate": lambda: {**inputs(5, Bt=2, T=2), "src_index": np.array([2, 5], np.int32),
                             "intermediate_states": np.zeros((8, 2, 4, 64, 16), np.float32)},
    "disable_state_update": lambda: {**inputs(6, Bt=3), "disable_state_update": True},
    "mamba1_per_channel": lambda: {**inputs(7, S=3, H=1, G=1, P=128, Bt=2, per_channel=True),
                                   "src_index": np.array([2, 0], np.int64)},
}


def run_case(name, a, ctx_cpu, ctx_gpu, torch, stream, bf16=False):
    cpu = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in a.items()}
    if bf16:  # bf16 state and activations: uint16 bits on the CPU, torch.bfloat16 on the GPU
        for k in ("state", "x", "B", "C", "z", "out"):
            cpu[k] = ssu.tensor(bf16_bits(a[k]), dtype="bf16")
    gpu = {}
    for k, v in a.items():
        if isinstance(v, np.ndarray):
            t = torch.from_numpy(v.copy()).cuda()
            if bf16 and k in ("state", "x", "B", "C", "z", "out"):
                t = torch.from_numpy(bf16_bits(v).view(np.int16)).cuda().view(torch.bfloat16)
            gpu[k] = t
        else:
            gpu[k] = v
    before = gpu["state"].clone()
    ctx_cpu.update(**cpu)
    with torch.cuda.stream(stream):
        plan = ctx_gpu.plan_update(**gpu)
        plan.execute(stream=stream.cuda_stream, **gpu)
    stream.synchronize()

    def host(k):
        v = cpu[k]
        return bf16_to_f32(v.obj).astype(np.float64) if isinstance(v, ssu.tensor) else v.astype(np.float64)

    def dev(k):
        return gpu[k].float().cpu().numpy().astype(np.float64)

    problems = []
    tol = {"out": (2e-2, 2e-3) if bf16 else (2e-4, 2e-4),
           "state": (2e-2, 2e-2) if bf16 else (2e-4, 2e-4),
           "intermediate_states": (2e-4, 2e-4)}
    for k in ("out", "state", "intermediate_states"):
        if k not in a:
            continue
        want, got = host(k), dev(k)
        rtol, atol = tol[k]
        bad = np.abs(got - want) > atol + rtol * np.abs(want)
        if bad.any():
            problems.append(f"{k}: {int(bad.sum())} elements differ, max |diff| "
                            f"{float(np.abs(got - want).max()):.3g}")
    # Exactness: padded sequences give zeros, pools are untouched where they must be.
    if name == "single_token_pad_dst" and not np.all(dev("out")[1] == 0):
        problems.append("padded sequence's out is not exactly zero")
    if name == "disable_state_update" and not torch.equal(gpu["state"], before):
        problems.append("pool changed with disable_state_update")
    if name == "single_token_pad_dst":
        for s in (1, 2, 5, 6, 7):
            if not torch.equal(gpu["state"][s], before[s]):
                problems.append(f"slot {s} changed")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    opt = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device")
        return 77
    try:
        ctx_gpu = ssu.Context("cuda", device=torch.cuda.current_device())
    except ssu.SsuError as e:
        print(f"gpu_check: no CUDA backend: {e}")
        return 77
    ctx_cpu = ssu.Context("cpu")
    stream = torch.cuda.Stream()
    print(f"library {ssu.library_path} {ssu.version_string()}; GPU: {ctx_gpu.device_name}")
    results = {}
    for name, make in CASES.items():
        for bf16 in (False, True):
            if bf16 and name not in ("single_token_pad_dst", "multi_token_2d_dst", "varlen"):
                continue
            label = name + ("[bf16]" if bf16 else "[f32]")
            try:
                problems = run_case(name, make(), ctx_cpu, ctx_gpu, torch, stream, bf16)
            except Exception as e:  # report every case, fail at the end
                problems = [f"{type(e).__name__}: {e}"]
            results[label] = problems
            print(f"{'ok  ' if not problems else 'FAIL'} {label}" +
                  "".join(f"\n       {p}" for p in problems))

    # An out-of-range slot on the GPU: no fault, the row is padding, and the
    # error word reports it.
    a = {**inputs(9), "src_index": np.array([0, 8, 1, 2], np.int32)}
    g = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v for k, v in a.items()}
    word = torch.zeros(1, dtype=torch.int32, device="cuda")
    ctx_gpu.update(error_word=word, **g)
    torch.cuda.synchronize()
    ok = int(word.item()) & 1 == 1 and bool((g["out"][1] == 0).all())
    results["error_word_index_bit"] = [] if ok else [f"error word {int(word.item())}"]
    print(f"{'ok  ' if ok else 'FAIL'} error_word_index_bit")

    # __cuda_array_interface__ with an explicit dtype (torch exports f32 that way).
    class CAI:
        def __init__(self, t):
            self.t, self.__cuda_array_interface__ = t, t.__cuda_array_interface__
    a = inputs(10)
    g = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v for k, v in a.items()}
    state0 = g["state"].clone()
    g2 = {k: (CAI(v) if isinstance(v, torch.Tensor) else v) for k, v in g.items()}
    g2["x"] = ssu.tensor(CAI(g["x"]), dtype="f32")
    g2["out"] = CAI(torch.zeros_like(g["out"]))
    ctx_gpu.update(**g)
    ctx_gpu.update(**{**g2, "state": CAI(state0)})
    torch.cuda.synchronize()
    ok = torch.allclose(g["out"], g2["out"].t, rtol=1e-5, atol=1e-5)
    results["cuda_array_interface"] = [] if ok else ["outputs differ from the DLPack path"]
    print(f"{'ok  ' if ok else 'FAIL'} cuda_array_interface")

    failed = [k for k, v in results.items() if v]
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump({"device": ctx_gpu.device_name, "results": results}, f, indent=1)
    print(f"gpu_check: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
