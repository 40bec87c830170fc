"""Contexts, plans and bound updates."""

import ctypes
import weakref

from . import _lib
from ._tensor import describe

_L = _lib.lib


class SsuError(RuntimeError):
    """A failed libssu call.

    Attributes: ``status`` (the SSU_ERROR_* code), ``family`` (status // 100),
    ``status_string`` (the library's text for the code) and ``message`` (the
    library's detailed message naming the argument and values).
    """

    def __init__(self, status, message):
        self.status = int(status)
        self.family = self.status // 100
        self.status_string = _L.ssu_status_string(self.status).decode()
        self.message = message
        text = f"libssu error {self.status} ({self.status_string})"
        if message:
            text += f": {message}"
        super().__init__(text)


def _check(status):
    if status:
        raise SsuError(status, _L.ssu_last_error_message().decode(errors="replace"))


_BACKENDS = {"auto": _lib.BACKEND_AUTO, "cpu": _lib.BACKEND_CPU, "cuda": _lib.BACKEND_CUDA}
_BACKEND_NAMES = {v: k for k, v in _BACKENDS.items()}
_ALGORITHMS = {"auto": _lib.ALGORITHM_AUTO, "cpu_rows": _lib.ALGORITHM_CPU_ROWS,
               "cuda_simple": _lib.ALGORITHM_CUDA_SIMPLE, "cuda_tma": _lib.ALGORITHM_CUDA_TMA}

# Arguments of an update: the tensors the library writes, and the others.
_WRITTEN = frozenset(("state", "out", "intermediate_states"))
_OPTION_ARGS = ("dt_softplus", "disable_state_update", "pad_slot_id", "max_tokens",
                "error_word", "flags")


def _stream_int(stream):
    """Streams are integers (a CUstream / cudaStream_t value, 0 = legacy
    default); objects with .cuda_stream (torch.cuda.Stream) or .ptr (CuPy)
    are accepted too."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    raise TypeError(f"stream must be an integer CUstream, got {type(stream).__name__}")


class _Handle:
    """Lifetime plumbing shared by Context and Plan: close() once, also from
    ``with`` blocks and garbage collection."""

    _handle = None

    def close(self):
        if self._handle:
            self._destroy()
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Context(_Handle):
    """One backend on one device.

    ``Context("cpu", num_threads=0)`` or ``Context("cuda", device=0)``;
    ``"auto"`` picks CUDA when a driver and device are usable. Use as a
    context manager or call close(); plans keep their context alive.
    """

    def __init__(self, backend="auto", device=0, num_threads=0):
        if isinstance(backend, str):
            try:
                code = _BACKENDS[backend.lower()]
            except KeyError:
                raise ValueError(f"unknown backend {backend!r}; use auto, cpu or cuda") from None
        else:
            code = int(backend)
        opts = _lib.ssu_context_options_t(
            struct_size=ctypes.sizeof(_lib.ssu_context_options_t),
            backend=code, device_ordinal=device, num_threads=num_threads)
        handle = ctypes.c_void_p()
        _check(_L.ssu_context_create(ctypes.byref(opts), ctypes.byref(handle)))
        self._handle = handle.value
        b = ctypes.c_int32()
        _check(_L.ssu_context_get_backend(self._handle, ctypes.byref(b)))
        self.backend = _BACKEND_NAMES.get(b.value, str(b.value))
        self.device = device
        self._plans = weakref.WeakSet()

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("the context is closed")
        return self._handle

    @property
    def device_name(self):
        return _L.ssu_context_device_name(self.handle).decode(errors="replace")

    def _destroy(self):
        # Plans first: a context outlives every plan made from it.
        for plan in list(self._plans):
            plan.close()
        _L.ssu_context_destroy(self._handle)

    def __repr__(self):
        state = self.device_name if self._handle else "closed"
        return f"ssu.Context({self.backend!r}: {state})"

    def plan_update(self, algorithm="auto", **args):
        """Validates the arguments of an update and creates a Plan for
        updates of their kind (see ssu.h: everything but data pointers,
        strides, the batch size and the pool's slot count is fixed)."""
        return Plan(self, args, algorithm)

    def update(self, stream=0, **args):
        """Plans and runs one update. A serving loop should keep the Plan
        (or a BoundUpdate) instead: planning validates everything again."""
        plan = Plan(self, args, "auto")
        try:
            plan.execute(stream=stream, **args)
        finally:
            plan.close()


class _Args:
    """The C argument structs for one set of Python arguments, plus the
    objects that must stay alive while the library reads them."""

    __slots__ = ("ctx", "pool", "args", "keep", "stream", "ref")

    # Where each tensor lives: (which struct, byte offset).
    _WHERE = dict([("state", (True, _lib.ssu_state_pool_t.state.offset)),
                   ("state_scale", (True, _lib.ssu_state_pool_t.state_scale.offset))]
                  + [(n, (False, getattr(_lib.ssu_update_args_t, n).offset))
                     for n in _lib.UPDATE_TENSOR_FIELDS])

    def __init__(self, ctx, kwargs, stream):
        self.ctx = ctx
        self.pool = _lib.ssu_state_pool_t(struct_size=ctypes.sizeof(_lib.ssu_state_pool_t))
        self.args = _lib.ssu_update_args_t(struct_size=ctypes.sizeof(_lib.ssu_update_args_t),
                                           pad_slot_id=-1)
        self.args.pool = ctypes.pointer(self.pool)
        self.keep = {}
        self.stream = stream
        self.ref = ctypes.byref(self.args)
        self.set(kwargs)

    def set(self, kwargs):
        a = self.args
        for name, value in kwargs.items():
            if name in _OPTION_ARGS:
                if name == "dt_softplus":
                    a.flags = (a.flags | _lib.UPDATE_DT_SOFTPLUS) if value else \
                        (a.flags & ~_lib.UPDATE_DT_SOFTPLUS)
                elif name == "disable_state_update":
                    a.flags = (a.flags | _lib.UPDATE_DISABLE_STATE_UPDATE) if value else \
                        (a.flags & ~_lib.UPDATE_DISABLE_STATE_UPDATE)
                elif name == "flags":
                    a.flags = int(value)
                elif name == "error_word":
                    self._set_error_word(value)
                else:
                    setattr(a, name, int(value))
                continue
            try:
                in_pool, off = self._WHERE[name]
            except KeyError:
                raise TypeError(f"unknown update argument {name!r}") from None
            keep = []
            where = describe(value, self.pool if in_pool else a, off, name, name in _WRITTEN,
                             self.stream, keep)
            self._check_device(name, where)
            self.keep[name] = keep

    def _set_error_word(self, value):
        if value is None:
            self.args.error_word = None
            self.keep.pop("error_word", None)
            return
        if isinstance(value, int):
            self.args.error_word = value
            return
        t = _lib.ssu_tensor_t()
        keep = []
        describe(value, t, 0, "error_word", True, self.stream, keep)
        if t.dtype != _lib.DTYPE_I32:
            raise TypeError("error_word must be a 32-bit integer tensor (int32)")
        self.args.error_word = t.data
        self.keep["error_word"] = keep

    def _check_device(self, name, where):
        if where is None:
            return
        kind, dev = where
        backend = self.ctx.backend
        if backend == "cpu" and kind == "cuda":
            raise ValueError(f"{name} is in CUDA memory but the context runs on the CPU")
        if backend == "cuda" and kind == "cpu":
            raise ValueError(f"{name} is in host memory but the context runs on CUDA")
        if backend == "cuda" and kind == "cuda" and dev is not None and dev != self.ctx.device:
            raise ValueError(f"{name} is on CUDA device {dev} but the context uses "
                             f"device {self.ctx.device}")


class Plan(_Handle):
    """A validated update configuration. Create with Context.plan_update()."""

    def __init__(self, ctx, args, algorithm="auto"):
        self.context = ctx
        if isinstance(algorithm, str):
            try:
                algorithm = _ALGORITHMS[algorithm.lower()]
            except KeyError:
                raise ValueError(f"unknown algorithm {algorithm!r}; use one of "
                                 f"{', '.join(_ALGORITHMS)}") from None
        opts = _lib.ssu_plan_options_t(struct_size=ctypes.sizeof(_lib.ssu_plan_options_t),
                                       algorithm=algorithm)
        built = _Args(ctx, args, 0)
        handle = ctypes.c_void_p()
        _check(_L.ssu_plan_create_update(ctx.handle, built.ref, ctypes.byref(opts),
                                         ctypes.byref(handle)))
        self._handle = handle.value
        ctx._plans.add(self)
        info = _lib.ssu_plan_info_t(struct_size=ctypes.sizeof(_lib.ssu_plan_info_t))
        _check(_L.ssu_plan_get_info(self._handle, ctypes.byref(info)))
        self.backend = _BACKEND_NAMES.get(info.backend, str(info.backend))
        self.algorithm = info.algorithm
        self.algorithm_name = (info.algorithm_name or b"").decode()

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("the plan is closed")
        return self._handle

    def _destroy(self):
        _L.ssu_plan_destroy(self._handle)

    def __repr__(self):
        return f"ssu.Plan({self.backend}, {self.algorithm_name})"

    def execute(self, stream=0, **args):
        """Runs the update on `args` (which must fit the plan) on `stream`
        (CPU: synchronously). Raises SsuError on failure."""
        s = _stream_int(stream)
        built = _Args(self.context, args, s)
        _check(_L.ssu_plan_execute_update(self.handle, built.ref, s))

    def bind(self, stream=0, **args):
        """Describes `args` once and returns a BoundUpdate whose call runs
        the plan on them with nothing left to convert."""
        return BoundUpdate(self, args, _stream_int(stream))


class BoundUpdate:
    """A plan with its argument struct built once: calling it costs one
    ctypes call. The described arrays stay referenced (alive) by this
    object. Replace arrays with set(), or only their data pointers with
    set_data_ptr() (same shapes, strides and dtypes; e.g. the next step's
    tensors from a preallocated ring, or tensor.data_ptr())."""

    __slots__ = ("plan", "_args", "_execute", "_handle", "_ref", "_stream", "_ptrs")

    def __init__(self, plan, args, stream):
        self.plan = plan
        self._args = _Args(plan.context, args, stream)
        self._execute = _L.ssu_plan_execute_update
        self._handle = plan.handle
        self._ref = self._args.ref
        self._stream = stream
        # One c_void_p view per data field, made once: a swap is one store.
        self._ptrs = {
            name: ctypes.c_void_p.from_buffer(self._args.pool if in_pool else self._args.args, off)
            for name, (in_pool, off) in _Args._WHERE.items()}

    def __call__(self, stream=None):
        """Runs the update; `stream` defaults to the one given to bind()."""
        status = self._execute(self._handle, self._ref,
                               self._stream if stream is None else stream)
        if status:
            _check(status)

    def set(self, stream=None, **args):
        """Re-describes some arguments (arrays or options)."""
        if stream is not None:
            self._stream = self._args.stream = _stream_int(stream)
        self._args.set(args)

    def set_data_ptr(self, **ptrs):
        """Replaces only data pointers (integers), keeping every shape,
        stride and dtype. The caller keeps the memory alive."""
        views = self._ptrs
        for name, ptr in ptrs.items():
            views[name].value = ptr
