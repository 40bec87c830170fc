"""libssu for Python: the Mamba selective-state-update decode step.

A pure-Python (ctypes) binding of the libssu C library. Arrays are passed
without copies: numpy arrays (CPU backend), objects with ``__dlpack__``
(PyTorch, CuPy, JAX) and objects with ``__cuda_array_interface__``.

    import numpy as np, ssu
    ctx = ssu.Context("cpu")
    plan = ctx.plan_update(state=pool, x=x, dt=dt, A=A, B=B, C=C, out=out,
                           src_index=slots, dt_softplus=True)
    plan.execute(state=pool, x=x, dt=dt, A=A, B=B, C=C, out=out,
                 src_index=slots, dt_softplus=True)

Keyword arguments are the fields of ssu_update_args_t (see ssu.h), plus
``state`` / ``state_scale`` for the pool and ``dt_softplus`` /
``disable_state_update`` for the flags. bf16 data in numpy: pass a uint16
array as ``ssu.tensor(array, dtype="bf16")``.

The Mamba-3 decode step and rotary step follow the same pattern:
``ctx.plan_mamba3_step(state=..., prev_B=..., prev_x=..., A=..., ...)`` and
``ctx.plan_mamba3_rotary(angle_state=..., angle_rate=..., dt=..., q=..., ...)``.
Checkpointed (replay) decode, experimental like the C API:
``plan = ctx.plan_replay(state=ckpt, ring_x=..., ring_B=..., ring_dt=...,
committed=..., pending=..., x=..., ...)``, ``plan.execute(...)`` per step
and ``plan.flush(state=..., ring_x=..., ..., A=A, src_index=slots)``
(also ``ssu.plan_replay(ctx, ...)``, ``ssu.execute_replay(plan, ...)`` and
``ssu.replay_flush(plan, ...)``).
Stochastic rounding of f16/bf16 states takes ``rounding_seed``, a
one-element uint64 array the library reads when the update runs;
``ctx.advance_seed(seed, increment)`` advances it.

With torch installed, ``ssu.torch`` has the functions engines call on torch
tensors (``ssu.torch.selective_state_update(state, x, dt, A, B, C, ...)``
with mamba_ssm's, vLLM's and FlashInfer's arguments), registered as torch
custom ops. It is not imported by ``import ssu``.
"""

from . import _lib
from ._api import (BoundUpdate, Context, Plan, SsuError, advance_seed, execute_replay,
                   plan_replay, replay_flush)
from ._tensor import dtype_code, tensor

__all__ = ["Context", "Plan", "BoundUpdate", "SsuError", "tensor", "dtype_code",
           "advance_seed", "plan_replay", "execute_replay", "replay_flush", "has_replay",
           "version", "version_string", "library_path", "status_string", "struct_size"]
__version__ = "0.3.0"

library_path = _lib.lib_path
# Whether the loaded library has the replay entry points (a library built
# before them loads too; planning a replay then raises SsuError).
has_replay = _lib.has_replay


def version():
    """The loaded library's version code (MAJOR*10000 + MINOR*100 + PATCH)."""
    return _lib.lib.ssu_version()


def version_string():
    return _lib.lib.ssu_version_string().decode()


def status_string(status):
    """The library's text for a status code."""
    return _lib.lib.ssu_status_string(int(status)).decode()


def struct_size(name):
    """sizeof() of a libssu struct as the loaded library knows it, by name:
    "tensor", "state_pool", "context_options", "plan_options", "plan_info",
    "update_args", "mamba3_step_args", "mamba3_rotary_args", "replay_ring",
    "replay_args", "replay_flush_args" (0 for a library without replay)."""
    ids = {"tensor": 1, "state_pool": 2, "context_options": 3, "plan_options": 4,
           "plan_info": 5, "update_args": 6, "mamba3_step_args": 7, "mamba3_rotary_args": 8,
           "replay_ring": 9, "replay_args": 10, "replay_flush_args": 11}
    return _lib.lib.ssu_struct_size(ids[name])
