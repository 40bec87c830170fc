#!/usr/bin/env python3
"""A serving-style decode loop over a libssu state pool (Python version).

Requests join and leave BATCH batch entries over STEPS steps; each request
owns a pool slot while it runs, and idle entries are padding (slot -1).
Inputs come from splitmix64, so the C, C++, Rust and Python versions of
this program (examples/README.md) feed the library bit-identical data and
print the same FNV-1a checksum of the final pool.

    python3 decode_loop.py [steps]
    SSU_BACKEND=cuda python3 decode_loop.py    # torch CUDA tensors
"""

import os
import sys
import time

import numpy as np

import ssu

SLOTS, BATCH, H, P, N, G, MAX_LEN = 16, 8, 8, 64, 16, 1, 24
SEED = 0x5EED
GAMMA = 0x9E3779B97F4A7C15
MASK = (1 << 64) - 1
SLOT_ELEMS = H * P * N


class SplitMix64:
    """splitmix64; the k-th output depends only on seed + k * GAMMA, so
    blocks of outputs are computed at once with numpy."""

    def __init__(self, seed):
        self.state = seed

    def next_u64(self):
        self.state = (self.state + GAMMA) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def sym(self, n, scale=1.0):
        """n values in [-1, 1) * scale as float32 (exact on a 2^-23 grid)."""
        k = np.arange(1, n + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            z = np.uint64(self.state) + k * np.uint64(GAMMA)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        self.state = (self.state + n * GAMMA) & MASK
        v = (z >> np.uint64(40)).astype(np.float64) / 8388608.0 - 1.0
        return (v * scale).astype(np.float32)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & MASK
    return h


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    backend = os.environ.get("SSU_BACKEND", "cpu")
    if backend not in ("cpu", "cuda"):
        sys.exit("decode_loop: SSU_BACKEND must be cpu or cuda")
    rng = SplitMix64(SEED)

    # Layer parameters: A in [-2, -1), dt_bias in [-4, -3), D in [-1, 1).
    A = (-1.0 - (rng.sym(H).astype(np.float64) + 1.0) * 0.5).astype(np.float32)
    dt_bias = (-4.0 + (rng.sym(H).astype(np.float64) + 1.0) * 0.5).astype(np.float32)
    D = rng.sym(H)

    pool = np.zeros((SLOTS, H, P, N), dtype=np.float32)
    if backend == "cuda":
        import torch
        dev = lambda a: torch.from_numpy(a).cuda()
        d_pool, d_A, d_D, d_bias = dev(pool), dev(A), dev(D), dev(dt_bias)
        d_x = torch.empty((BATCH, H, P), device="cuda")
        d_z, d_out = torch.empty_like(d_x), torch.empty_like(d_x)
        d_dt = torch.empty((BATCH, H), device="cuda")
        d_B = torch.empty((BATCH, G, N), device="cuda")
        d_C = torch.empty_like(d_B)
        d_slots = torch.empty((BATCH,), dtype=torch.int32, device="cuda")
        sync = torch.cuda.synchronize
        stream = torch.cuda.current_stream().cuda_stream
    else:
        d_pool, d_A, d_D, d_bias = pool, A, D, dt_bias
        d_x = np.zeros((BATCH, H, P), dtype=np.float32)
        d_z, d_out = np.zeros_like(d_x), np.zeros_like(d_x)
        d_dt = np.zeros((BATCH, H), dtype=np.float32)
        d_B = np.zeros((BATCH, G, N), dtype=np.float32)
        d_C = np.zeros_like(d_B)
        d_slots = np.zeros(BATCH, dtype=np.int32)
        sync = lambda: None
        stream = 0

    ctx = ssu.Context(backend)
    args = dict(state=d_pool, x=d_x, z=d_z, out=d_out, dt=d_dt, B=d_B, C=d_C, A=d_A, D=d_D,
                dt_bias=d_bias, src_index=d_slots, dt_softplus=True)
    plan = ctx.plan_update(**args)
    # The buffers never move, so the call is described once.
    step_call = plan.bind(stream=stream, **args)

    active = [False] * BATCH
    slot_of = [0] * BATCH
    remaining = [0] * BATCH
    used = [False] * SLOTS
    tokens, busy = 0, 0.0
    for _ in range(steps):
        for e in range(BATCH):  # finished requests leave
            if active[e] and remaining[e] == 0:
                used[slot_of[e]] = False
                active[e] = False
        for e in range(BATCH):  # new requests join idle entries
            if active[e] or rng.next_u64() % 4 == 0:
                continue
            s = used.index(False)
            used[s] = True
            slot_of[e] = s
            remaining[e] = 1 + rng.next_u64() % MAX_LEN
            active[e] = True
            init = rng.sym(SLOT_ELEMS, 0.5).reshape(H, P, N)  # the prefill's state
            if backend == "cuda":
                d_pool[s].copy_(torch.from_numpy(init))
            else:
                pool[s] = init
        slots = np.array([slot_of[e] if active[e] else -1 for e in range(BATCH)], dtype=np.int32)
        x = rng.sym(BATCH * H * P).reshape(BATCH, H, P)
        dt = rng.sym(BATCH * H, 0.5).reshape(BATCH, H)
        B = rng.sym(BATCH * G * N).reshape(BATCH, G, N)
        C = rng.sym(BATCH * G * N).reshape(BATCH, G, N)
        z = rng.sym(BATCH * H * P).reshape(BATCH, H, P)
        for dst, src in ((d_slots, slots), (d_x, x), (d_dt, dt), (d_B, B), (d_C, C), (d_z, z)):
            if backend == "cuda":
                dst.copy_(torch.from_numpy(src))
            else:
                dst[...] = src

        t0 = time.perf_counter()
        step_call()
        sync()
        busy += time.perf_counter() - t0
        for e in range(BATCH):
            if active[e]:
                remaining[e] -= 1
                tokens += 1

    final = d_pool.cpu().numpy() if backend == "cuda" else pool
    print(f"ssu decode example (Python): backend {backend} [{ctx.device_name}], "
          f"{steps} steps, {tokens} tokens")
    print(f"throughput: {tokens / busy if busy else 0:.0f} tokens/s "
          f"({1e6 * busy / steps if steps else 0:.2f} us/step)")
    print(f"state checksum: 0x{fnv1a64(final.tobytes()):016x}")


if __name__ == "__main__":
    main()
