#!/usr/bin/env python3
"""Per-call host overhead of the Python binding.

Times, on a tiny decode problem (so that the kernel itself is negligible):
  ffi-floor   a bare ctypes call into libssu (ssu_version), the floor;
  bound       BoundUpdate(): the argument struct built once, one ctypes call;
  bound+ptrs  set_data_ptr() of the per-step tensors (x, dt, B, C, z, out)
              before each call: what a loop whose buffers move pays;
  execute     plan.execute(**arrays): every array described on every call;
  c-floor     the bound struct's execute called from the package's C extension
              (ssu._fastcall, an entry without tensors): a call with no
              per-call Python work but the call itself, the floor of the
              torch rows (the bound call's ctypes wrapping is not in them);
and, where torch is installed, the torch functions on torch tensors:
  torch       ssu.torch.selective_state_update(...) with the same 11 tensors:
              a check against the previous call's struct, data pointers,
              one ctypes call;
  torch-views the same in the layout mamba_ssm, vLLM and transformers pass:
              A, dt, D, dt_bias as stride-0 expanded views;
  torch-op    torch.ops.ssu.selective_state_update, through the dispatcher
              (what a torch.compile graph without CUDA graphs pays);
  torch-turns torch and torch-views taking turns, per call: half the calls
              fail the check against the last call's struct first (what
              two models or kinds of layer with different shapes pay).
The torch rows run on ssu.torch's default per-call path: in C (ssu._fastcall)
where the extension is built ("fastcall": true in the results), else in
Python. With the extension the same rows are timed again on the Python
path, named *_pure_us (torch_pure_us, ...).
With --backend cuda the arrays are torch CUDA tensors and the calls are
asynchronous launches; the numbers are host time per call (the GPU queue
is drained outside the timed loops), so they include libssu's own launch
path (cuLaunchKernelEx) as well as the Python side.

    python3 bench_overhead.py [--backend cpu|cuda] [--iters N] [--json FILE]
"""

import argparse
import json
import sys
import time


def best_per_call(fn, iters, sync, repeats=5):
    """Minimum over `repeats` of the mean time per call, in microseconds;
    the device queue is drained between repeats, outside the timing."""
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    sync()
    return best * 1e6


def torch_calls(torch, ssut, args, Bt, H, P, N, backend):
    """The ssu.torch timings: (name, function, calls it makes) on torch
    tensors."""
    dev = "cpu" if backend == "cpu" else "cuda"
    t = {k: (torch.as_tensor(v).to(dev) if not isinstance(v, bool) else v)
         for k, v in args.items()}
    idx = t.pop("src_index")
    flat = dict(t, state_batch_indices=idx)

    def torch_call():
        ssut.selective_state_update(**flat)

    views = dict(flat, A=t["A"][:, None, None].expand(H, P, N),
                 dt=t["dt"][:, :, None].expand(Bt, H, P), D=t["D"][:, None].expand(H, P),
                 dt_bias=t["dt_bias"][:, None].expand(H, P))

    def torch_views():
        ssut.selective_state_update(**views)

    def torch_turns():  # two calls
        ssut.selective_state_update(**flat)
        ssut.selective_state_update(**views)

    op = torch.ops.ssu.selective_state_update.default
    positional = (t["state"], t["x"], t["dt"], t["A"], t["B"], t["C"], t["D"], t["z"],
                  t["dt_bias"], t["out"], idx, None, None, None, None, None, None, None, None,
                  True, False, -1, 0, 0)

    def torch_op():
        op(*positional)

    return [("torch_us", torch_call, 1), ("torch_views_us", torch_views, 1),
            ("torch_op_us", torch_op, 1), ("torch_turns_us", torch_turns, 2)]


def c_floor(call, backend):
    """The c-floor timing: the bound call's plan and struct run by an
    ssu._fastcall entry that has no tensors (None without the extension)."""
    try:
        from ssu import _fastcall
    except ImportError:
        return None
    import ctypes
    device, stream = None, None
    if backend == "cuda":
        import torch
        device, stream = torch.cuda.current_device(), torch._C._cuda_getCurrentRawStream
    handle = call._handle
    entry = _fastcall.Entry(0, (), (), (), ctypes.cast(call._execute, ctypes.c_void_p).value,
                            getattr(handle, "value", handle), ctypes.addressof(call._args.args),
                            device, stream, None, None, False, call)
    return entry.call


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--json", help="write the results to this file")
    opt = ap.parse_args()

    import ssu
    from ssu import _lib

    Bt, H, P, N, S = 1, 1, 16, 16, 2
    try:
        import torch
        import ssu.torch as ssut
    except ImportError:
        torch = None
    if opt.backend == "cpu":
        import numpy as np
        ctx = ssu.Context("cpu", num_threads=1)
        if torch is not None:
            ssut.set_cpu_threads(1)  # like ctx: the call itself, no worker wake-ups

        def arr(*shape, dtype="float32"):
            return np.zeros(shape, dtype=dtype)
        sync = lambda: None
        stream = 0
    else:
        import torch
        ctx = ssu.Context("cuda", device=torch.cuda.current_device())

        def arr(*shape, dtype="float32"):
            return torch.zeros(shape, dtype=getattr(torch, dtype), device="cuda")
        sync = torch.cuda.synchronize
        stream = torch.cuda.current_stream().cuda_stream

    args = dict(state=arr(S, H, P, N), x=arr(Bt, H, P), dt=arr(Bt, H), A=arr(H) - 1,
                B=arr(Bt, 1, N), C=arr(Bt, 1, N), D=arr(H), dt_bias=arr(H), z=arr(Bt, H, P),
                out=arr(Bt, H, P), src_index=arr(Bt, dtype="int32"), dt_softplus=True)
    plan = ctx.plan_update(**args)
    call = plan.bind(stream=stream, **args)
    moving = ("x", "dt", "B", "C", "z", "out")
    if opt.backend == "cpu":
        ptrs = {k: args[k].ctypes.data for k in moving}
    else:
        ptrs = {k: args[k].data_ptr() for k in moving}

    def bound_ptrs():
        call.set_data_ptr(**ptrs)
        call()

    def execute():
        plan.execute(stream=stream, **args)

    version = _lib.lib.ssu_version
    results = {"backend": opt.backend, "device": ctx.device_name, "iters": opt.iters}
    timed = [("ffi_floor_us", version, 1), ("bound_us", call, 1),
             ("bound_ptrs_us", bound_ptrs, 1), ("execute_us", execute, 1)]
    floor = c_floor(call, opt.backend)
    if floor is not None:
        timed.append(("c_floor_us", floor, 1))
    if torch is not None:
        results["torch"] = torch.__version__
        results["fastcall"] = getattr(ssut, "_fast", False)
        timed += torch_calls(torch, ssut, args, Bt, H, P, N, opt.backend)
    for name, fn, calls in timed:
        fn()
        results[name] = round(best_per_call(fn, opt.iters, sync) / calls, 3)
    if torch is not None and getattr(ssut, "_fast", False):
        # The same calls on the Python path (entries built anew).
        ssut._use_fastcall(False)
        try:
            for name, fn, calls in torch_calls(torch, ssut, args, Bt, H, P, N, opt.backend):
                fn()
                name = name[:-3] + "_pure_us"
                results[name] = round(best_per_call(fn, opt.iters, sync) / calls, 3)
        finally:
            ssut._use_fastcall(True)
    for k, v in results.items():
        print(f"{k:14s} {v}")
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
