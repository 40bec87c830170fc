"""Contexts, plans and bound updates."""

import ctypes
import weakref

from . import _lib
from ._tensor import describe, tensor

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
# The library's algorithm names (ssu_plan_info_t.algorithm_name).
_ALGORITHMS = {"auto": _lib.ALGORITHM_AUTO, "cpu_rows": _lib.ALGORITHM_CPU_ROWS,
               "cuda_simple": _lib.ALGORITHM_CUDA_SIMPLE,
               "cuda_pipelined": _lib.ALGORITHM_CUDA_PIPELINED,
               "cuda_replay": _lib.ALGORITHM_CUDA_REPLAY}

class _Op:
    """One kind of operation: its C argument struct, where each keyword
    argument goes, which tensors the library writes, and its entry points."""

    def __init__(self, kind, what, struct, tensor_fields, pool_fields, written, flag_args,
                 int_args, create, execute, ring_fields=()):
        self.kind = kind
        self.what = what
        self.struct = struct
        self.written = frozenset(written)
        self.flag_args = flag_args            # keyword -> flag bit
        self.int_args = frozenset(int_args)   # plain integer fields
        self.create = create
        self.execute_name = execute
        self.has_ring = hasattr(struct, "ring")
        self.has_seed = hasattr(struct, "rounding_seed")
        # Where each tensor lives: (which struct, byte offset), the struct
        # being "pool" (ssu_state_pool_t), "ring" (ssu_replay_ring_t; keyword
        # -> field in ring_fields) or "args" (`struct`).
        self.where = dict([(n, ("pool", getattr(_lib.ssu_state_pool_t, n).offset))
                           for n in pool_fields]
                          + [(n, ("ring", getattr(_lib.ssu_replay_ring_t, f).offset))
                             for n, f in ring_fields]
                          + [(n, ("args", getattr(struct, n).offset)) for n in tensor_fields])


_UPDATE = _Op(
    "update", "update", _lib.ssu_update_args_t,
    _lib.UPDATE_TENSOR_FIELDS + ("intermediate_scales",), ("state", "state_scale"),
    ("state", "state_scale", "out", "intermediate_states", "intermediate_scales"),
    {"dt_softplus": _lib.UPDATE_DT_SOFTPLUS,
     "disable_state_update": _lib.UPDATE_DISABLE_STATE_UPDATE},
    ("pad_slot_id", "max_tokens", "rounding_rounds"),
    "ssu_plan_create_update", "ssu_plan_execute_update")

_MAMBA3_STEP = _Op(
    "mamba3_step", "Mamba-3 step", _lib.ssu_mamba3_step_args_t,
    _lib.MAMBA3_STEP_TENSOR_FIELDS, ("state", "prev_B", "prev_x"),
    ("state", "prev_B", "prev_x", "out"),
    {"update_prev": _lib.MAMBA3_UPDATE_PREV},
    ("pad_slot_id",),
    "ssu_plan_create_mamba3_step", "ssu_plan_execute_mamba3_step")

_MAMBA3_ROTARY = _Op(
    "mamba3_rotary", "Mamba-3 rotary", _lib.ssu_mamba3_rotary_args_t,
    _lib.MAMBA3_ROTARY_TENSOR_FIELDS, ("angle_state",),
    ("angle_state", "q_out", "k_out"),
    {"halved": _lib.MAMBA3_ROTARY_HALVED},
    ("pad_slot_id",),
    "ssu_plan_create_mamba3_rotary", "ssu_plan_execute_mamba3_rotary")


# Replay keywords of the ring (ssu_replay_ring_t): its x, B and dt are
# prefixed so that they do not collide with the step's own x, B and dt.
_RING_FIELDS = (("ring_x", "x"), ("ring_B", "B"), ("ring_dt", "dt"),
                ("committed", "committed"), ("pending", "pending"))
_RING_NAMES = tuple(n for n, _ in _RING_FIELDS)

_REPLAY = _Op(
    "replay", "replay", _lib.ssu_replay_args_t,
    _lib.REPLAY_TENSOR_FIELDS, ("state", "state_scale"),
    ("state", "state_scale", "out") + _RING_NAMES,
    {"dt_softplus": _lib.UPDATE_DT_SOFTPLUS,
     "disable_state_update": _lib.UPDATE_DISABLE_STATE_UPDATE},
    ("pad_slot_id", "max_tokens", "rounding_rounds"),
    "ssu_plan_create_replay", "ssu_plan_execute_replay", _RING_FIELDS)

_REPLAY_FLUSH = _Op(
    "replay_flush", "replay flush", _lib.ssu_replay_flush_args_t,
    _lib.REPLAY_FLUSH_TENSOR_FIELDS, ("state", "state_scale"),
    ("state", "state_scale", "committed", "pending"),
    {},
    ("pad_slot_id", "rounding_rounds"),
    None, "ssu_plan_execute_replay_flush", _RING_FIELDS)


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

    def plan_update(self, algorithm="auto", pdl=False, **args):
        """Validates the arguments of an update and creates a Plan for
        updates of their kind (see ssu.h: everything but data pointers,
        strides, the batch size and the pool's slot count is fixed).
        ``algorithm`` is "auto" or pins one by name ("cpu_rows",
        "cuda_simple", "cuda_pipelined") or by its code; a pinned algorithm
        that cannot run this update, or a code the library does not know,
        raises SsuError with status 202 (algorithm not available).
        ``pdl=True`` sets SSU_PLAN_PDL: on sm_90 GPUs the plan's kernels
        launch with programmatic dependent launch (ssu.h)."""
        return Plan(self, args, algorithm, _UPDATE, pdl)

    def plan_mamba3_step(self, algorithm="auto", **args):
        """Validates the arguments of a Mamba-3 decode step and creates a
        Plan for steps of their kind (ssu_mamba3_step_args_t)."""
        return Plan(self, args, algorithm, _MAMBA3_STEP)

    def plan_mamba3_rotary(self, algorithm="auto", **args):
        """Validates the arguments of a Mamba-3 rotary step and creates a
        Plan for rotary steps of their kind (ssu_mamba3_rotary_args_t)."""
        return Plan(self, args, algorithm, _MAMBA3_ROTARY)

    def plan_replay(self, algorithm="auto", pdl=False, **args):
        """Validates the arguments of a replay (checkpointed decode) step and
        creates a Plan for replay steps of their kind (ssu_replay_args_t):
        the update's keywords (``state`` is the checkpoint pool; no
        ``dst_index``, intermediate states or ``num_accepted_tokens``), the
        ring as ``ring_x (S, L, H, P)``, ``ring_B (S, L, G, N)``,
        ``ring_dt (S, L, H)`` f32 (``(S, L, H, P)`` for a per-channel step
        size), ``committed`` and ``pending (S,)`` int32, and optionally
        ``num_accepted (Bt,)`` (speculative decoding). Run steps with
        Plan.execute() or Plan.bind(), flushes with Plan.flush() or
        Plan.bind_flush(). Experimental like the C API."""
        return Plan(self, args, algorithm, _REPLAY, pdl)

    def _once(self, op, stream, args):
        plan = Plan(self, args, "auto", op)
        try:
            plan.execute(stream=stream, **args)
        finally:
            plan.close()

    def update(self, stream=0, **args):
        """Plans and runs one update. A serving loop should keep the Plan
        (or a BoundUpdate) instead: planning validates everything again."""
        self._once(_UPDATE, stream, args)

    def mamba3_step(self, stream=0, **args):
        """Plans and runs one Mamba-3 step (see update())."""
        self._once(_MAMBA3_STEP, stream, args)

    def mamba3_rotary(self, stream=0, **args):
        """Plans and runs one Mamba-3 rotary step (see update())."""
        self._once(_MAMBA3_ROTARY, stream, args)

    def replay(self, stream=0, **args):
        """Plans and runs one replay step (see update() and plan_replay())."""
        self._once(_REPLAY, stream, args)

    def advance_seed(self, seed, increment=1, stream=0):
        """Adds `increment` (wrapping) to the uint64 in `seed`, a one-element
        uint64 (or int64) array in the context's memory (host for the CPU,
        which updates it before returning; device for CUDA, where this is
        one kernel launch on `stream` that a CUDA graph can capture)."""
        s = _stream_int(stream)
        keep = []
        ptr = _seed_pointer(self, seed, "seed", True, s, keep)
        _check(_L.ssu_advance_seed(self.handle, ptr, int(increment) & 0xFFFFFFFFFFFFFFFF, s))


def advance_seed(context, seed, increment=1, stream=0):
    """ssu_advance_seed: see Context.advance_seed."""
    context.advance_seed(seed, increment, stream)


def plan_replay(context, algorithm="auto", pdl=False, **args):
    """ssu_plan_create_replay: see Context.plan_replay."""
    return context.plan_replay(algorithm, pdl, **args)


def execute_replay(plan, stream=0, **args):
    """ssu_plan_execute_replay: runs a replay step with a replay plan (as
    Plan.execute)."""
    if plan.kind != "replay":
        raise TypeError(f"execute_replay needs a replay plan; this plan runs {plan.kind}")
    plan.execute(stream, **args)


def replay_flush(plan, stream=0, **args):
    """ssu_plan_execute_replay_flush: see Plan.flush."""
    plan.flush(stream, **args)


def _check_device(ctx, name, where):
    if where is None:
        return
    kind, dev = where
    backend = ctx.backend
    if backend == "cpu" and kind == "cuda":
        raise ValueError(f"{name} is in CUDA memory but the context runs on the CPU")
    if backend == "cuda" and kind == "cpu":
        raise ValueError(f"{name} is in host memory but the context runs on CUDA")
    if backend == "cuda" and kind == "cuda" and dev is not None and dev != ctx.device:
        raise ValueError(f"{name} is on CUDA device {dev} but the context uses "
                         f"device {ctx.device}")


def _seed_pointer(ctx, value, what, writable, stream, keep):
    """The address of a one-element 64-bit array (a rounding seed)."""
    if isinstance(value, int) or value is None:
        raise TypeError(f"{what} must be a one-element uint64 array (the library reads and "
                        f"advances it in memory), not {type(value).__name__}")
    t = _lib.ssu_tensor_t()
    try:
        where = describe(tensor(value, "i64") if type(value) is not tensor else value,
                         t, 0, what, writable, stream, keep)
    except TypeError as e:
        raise TypeError(f"{what} must hold one 64-bit integer (uint64 or int64): {e}") from None
    if t.dtype != _lib.DTYPE_I64:
        raise TypeError(f"{what} must hold 64-bit integers (uint64 or int64)")
    count = 1
    for d in range(t.ndim):
        count *= t.shape[d]
    if count != 1:
        raise ValueError(f"{what} must have exactly one element, got shape "
                         f"{tuple(t.shape[:t.ndim])}")
    _check_device(ctx, what, where)
    return t.data


class _Args:
    """The C argument structs for one set of Python arguments, plus the
    objects that must stay alive while the library reads them."""

    __slots__ = ("ctx", "op", "pool", "ring", "args", "keep", "stream", "ref")

    def __init__(self, ctx, kwargs, stream, op=_UPDATE):
        self.ctx = ctx
        self.op = op
        self.pool = _lib.ssu_state_pool_t(struct_size=ctypes.sizeof(_lib.ssu_state_pool_t))
        self.args = op.struct(struct_size=ctypes.sizeof(op.struct), pad_slot_id=-1)
        self.args.pool = ctypes.pointer(self.pool)
        self.ring = None
        if op.has_ring:
            self.ring = _lib.ssu_replay_ring_t(struct_size=ctypes.sizeof(_lib.ssu_replay_ring_t))
            self.args.ring = ctypes.pointer(self.ring)
        self.keep = {}
        self.stream = stream
        self.ref = ctypes.byref(self.args)
        self.set(kwargs)

    def set(self, kwargs):
        a = self.args
        op = self.op
        for name, value in kwargs.items():
            bit = op.flag_args.get(name)
            if bit is not None:
                a.flags = (a.flags | bit) if value else (a.flags & ~bit)
                continue
            if name in op.int_args:
                setattr(a, name, int(value))
                continue
            if name == "flags":
                a.flags = int(value)
                continue
            if name == "error_word":
                self._set_error_word(value)
                continue
            if name == "rounding_seed" and op.has_seed:
                self._set_seed(value)
                continue
            try:
                struct, off = op.where[name]
            except KeyError:
                raise TypeError(f"unknown {op.what} argument {name!r}") from None
            keep = []
            where = describe(value, self.struct(struct), off, name, name in op.written,
                             self.stream, keep)
            _check_device(self.ctx, name, where)
            self.keep[name] = keep

    def struct(self, which):
        """The C struct a tensor lives in: "pool", "ring" or "args"."""
        return self.pool if which == "pool" else self.ring if which == "ring" else self.args

    def _set_seed(self, value):
        if value is None:
            self.args.rounding_seed = None
            self.keep.pop("rounding_seed", None)
            return
        keep = []
        self.args.rounding_seed = _seed_pointer(self.ctx, value, "rounding_seed", False,
                                                self.stream, keep)
        self.keep["rounding_seed"] = keep

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


class Plan(_Handle):
    """A validated configuration of one operation: create it with
    Context.plan_update(), plan_mamba3_step(), plan_mamba3_rotary() or
    plan_replay(). ``kind`` names the operation ("update", "mamba3_step",
    "mamba3_rotary", "replay")."""

    def __init__(self, ctx, args, algorithm="auto", op=_UPDATE, pdl=False):
        if op.has_ring and not _lib.has_replay:
            raise SsuError(_lib.ERROR_NOT_SUPPORTED,
                           f"{_lib.lib_path} has no replay entry points (ssu_plan_create_replay); "
                           f"the library predates the replay API")
        self.context = ctx
        self._op = op
        self.kind = op.kind
        self._execute = getattr(_L, op.execute_name)
        if isinstance(algorithm, str):
            try:
                algorithm = _ALGORITHMS[algorithm.lower()]
            except KeyError:
                raise ValueError(f"unknown algorithm {algorithm!r}; use one of "
                                 f"{', '.join(_ALGORITHMS)}") from None
        opts = _lib.ssu_plan_options_t(struct_size=ctypes.sizeof(_lib.ssu_plan_options_t),
                                       algorithm=algorithm,
                                       flags=_lib.PLAN_PDL if pdl else 0)
        built = _Args(ctx, args, 0, op)
        handle = ctypes.c_void_p()
        _check(getattr(_L, op.create)(ctx.handle, built.ref, ctypes.byref(opts),
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
        return f"ssu.Plan({self.kind}, {self.backend}, {self.algorithm_name})"

    def execute(self, stream=0, **args):
        """Runs the operation on `args` (which must fit the plan) on `stream`
        (CPU: synchronously). Raises SsuError on failure."""
        s = _stream_int(stream)
        built = _Args(self.context, args, s, self._op)
        _check(self._execute(self.handle, built.ref, s))

    def bind(self, stream=0, **args):
        """Describes `args` once and returns a BoundUpdate whose call runs
        the plan on them with nothing left to convert."""
        return BoundUpdate(self, args, _stream_int(stream))

    def _flush_op(self):
        if self._op is not _REPLAY:
            raise TypeError(f"a replay flush needs a replay plan (Context.plan_replay); "
                            f"this plan runs {self.kind}")
        return _REPLAY_FLUSH

    def flush(self, stream=0, **args):
        """Replay plans: folds the rings of the slots in ``src_index (K,)``
        into their checkpoints and zeroes their counters
        (ssu_plan_execute_replay_flush). Keywords: ``state`` (and
        ``state_scale``), the ring (``ring_x``, ``ring_B``, ``ring_dt``,
        ``committed``, ``pending``), ``A`` and ``src_index`` as for the plan;
        optional ``num_accepted (K,)``, ``pad_slot_id``, ``rounding_seed`` /
        ``rounding_rounds`` (exactly when the plan rounds stochastically)
        and ``error_word``."""
        op = self._flush_op()
        s = _stream_int(stream)
        built = _Args(self.context, args, s, op)
        _check(_L.ssu_plan_execute_replay_flush(self.handle, built.ref, s))

    def bind_flush(self, stream=0, **args):
        """Replay plans: flush() with its arguments described once (see
        bind())."""
        return BoundUpdate(self, args, _stream_int(stream), self._flush_op())


class BoundUpdate:
    """A plan (of any operation, or a replay plan's flush) with its
    argument struct built once: calling it costs one ctypes call. The
    described arrays stay referenced (alive) by this object. Replace arrays
    with set(), or only their data pointers with set_data_ptr() (same
    shapes, strides and dtypes; e.g. the next step's tensors from a
    preallocated ring, or tensor.data_ptr())."""

    __slots__ = ("plan", "_args", "_execute", "_handle", "_ref", "_stream", "_ptrs")

    def __init__(self, plan, args, stream, op=None):
        op = plan._op if op is None else op
        self.plan = plan
        self._args = _Args(plan.context, args, stream, op)
        self._execute = getattr(_L, op.execute_name)
        self._handle = plan.handle
        self._ref = self._args.ref
        self._stream = stream
        # One c_void_p view per data field, made once: a swap is one store.
        self._ptrs = {
            name: ctypes.c_void_p.from_buffer(self._args.struct(which), off)
            for name, (which, off) in op.where.items()}
        for name in ("rounding_seed", "error_word"):
            if hasattr(op.struct, name):
                self._ptrs[name] = ctypes.c_void_p.from_buffer(
                    self._args.args, getattr(op.struct, name).offset)

    def __call__(self, stream=None):
        """Runs the operation; `stream` defaults to the one given to bind()."""
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
        stride and dtype; rounding_seed and error_word take addresses too.
        The caller keeps the memory alive."""
        views = self._ptrs
        for name, ptr in ptrs.items():
            views[name].value = ptr
