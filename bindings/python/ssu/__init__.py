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
"""

from . import _lib
from ._api import BoundUpdate, Context, Plan, SsuError
from ._tensor import dtype_code, tensor

__all__ = ["Context", "Plan", "BoundUpdate", "SsuError", "tensor", "dtype_code",
           "version", "version_string", "library_path", "status_string"]
__version__ = "0.2.0"

library_path = _lib.lib_path


def version():
    """The loaded library's version code (MAJOR*10000 + MINOR*100 + PATCH)."""
    return _lib.lib.ssu_version()


def version_string():
    return _lib.lib.ssu_version_string().decode()


def status_string(status):
    """The library's text for a status code."""
    return _lib.lib.ssu_status_string(int(status)).decode()
