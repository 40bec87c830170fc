"""libssu as torch operations: the decode-step functions serving engines call.

    import ssu.torch as ssut
    out = ssut.selective_state_update(state, x, dt, A, B, C, D=D, z=z,
                                      dt_bias=dt_bias, dt_softplus=True,
                                      state_batch_indices=slots)

Tensors are used where they are (CPU tensors run on the CPU backend, CUDA
tensors on the CUDA backend of their device, on the current torch stream);
nothing is copied. Each function is also a ``torch.library`` custom op
(``torch.ops.ssu.*``) with its written arguments declared as mutated and a
fake implementation, so it works inside ``torch.compile(fullgraph=True)`` and
CUDA-graph capture. Outside of tracing the functions call the library
directly, without the dispatcher, to keep the host cost of a call small.

Per call, the work is a check that the arguments are those the previous
call's prebuilt argument struct describes (the options, which tensors are
given, and every tensor's type, dtype, device, shape and strides, the
tensors in one C++ check of torch's), the store of each tensor's data
pointer into the struct and the library call: one call into the package's
C extension (ssu._fastcall), or, where that is not built or SSU_TORCH_PURE=1
is set, the same steps in Python ending in one ctypes call. Other arguments
go to a lookup of the struct keyed by all of those; a miss there (a new
batch size, a new layout) builds the struct and, if needed, a libssu plan;
plans are cached per shape without the batch and slot axes, per dtypes,
flags, layouts and device, so a new batch size reuses its plan. Build the
entries of every batch size a CUDA graph will capture in a warm-up call
before capturing, as for any torch code that sets up state on first use.

Importing this module needs torch; the rest of the package does not.
"""

import ctypes
import os
import re
import textwrap
import threading

import torch

from . import _api, _lib
from ._api import SsuError
from ._tensor import _pack

__all__ = ["selective_state_update", "mamba3_step", "mamba3_rotary", "replay", "replay_flush",
           "clear_cache", "set_cpu_threads", "SsuError"]

_L = _lib.lib
_Tensor = torch.Tensor

_DTYPES = {torch.float32: _lib.DTYPE_F32, torch.float16: _lib.DTYPE_F16,
           torch.bfloat16: _lib.DTYPE_BF16, torch.int16: _lib.DTYPE_I16,
           torch.int32: _lib.DTYPE_I32, torch.int64: _lib.DTYPE_I64,
           torch.uint64: _lib.DTYPE_I64, torch.int8: _lib.DTYPE_I8}
# E4M3 codes (OCP FP8, torch's float8_e4m3fn) for the 8-bit block-scaled
# state; older torch builds have no such dtype.
if hasattr(torch, "float8_e4m3fn"):
    _DTYPES[torch.float8_e4m3fn] = _lib.DTYPE_F8E4M3

# ---------------------------------------------------------------------------
# Contexts and streams
# ---------------------------------------------------------------------------

_contexts = {}
_cpu_threads = 0


def _context(device):
    """The libssu context of a torch device index (-1: the CPU)."""
    ctx = _contexts.get(device)
    if ctx is None:
        ctx = (_api.Context("cpu", num_threads=_cpu_threads) if device < 0
               else _api.Context("cuda", device=device))
        _contexts[device] = ctx
    return ctx


def set_cpu_threads(num_threads):
    """Worker threads of the CPU backend that runs CPU tensors, the caller
    included (0, the default: every hardware thread; 1: the calling thread
    only, the cheapest for tiny decode batches). Drops every cached plan."""
    global _cpu_threads
    clear_cache()
    old = _contexts.pop(-1, None)
    if old is not None:
        old.close()
    _cpu_threads = int(num_threads)


try:
    # An integer handle without building a torch.cuda.Stream object: the
    # public way costs more than the rest of a call.
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - torch without CUDA support
    def _raw_stream(device):
        return torch.cuda.current_stream(device).cuda_stream


def _load_fastcall():
    """ssu._fastcall, the entries' per-call path in C (ssu/_fastcall.c), or
    None: not built (the package used from the source tree, an interpreter
    other than the wheel's) or turned off with SSU_TORCH_PURE=1."""
    if os.environ.get("SSU_TORCH_PURE", "") not in ("", "0"):
        return None
    try:
        from . import _fastcall
    except ImportError:
        return None
    return _fastcall


_fastcall = _load_fastcall()
_fast = _fastcall is not None  # whether entries built from now on use it


def _use_fastcall(enabled):
    """Makes the entries built from now on use the C path (True) or the
    Python one (False), drops the cached ones, and returns the previous
    setting (for tests of both paths)."""
    global _fast
    if enabled and _fastcall is None:
        raise RuntimeError("ssu._fastcall is not available (not built, or SSU_TORCH_PURE=1)")
    previous, _fast = _fast, bool(enabled)
    clear_cache()
    return previous


# ---------------------------------------------------------------------------
# Operations: where each argument goes in the C structs
# ---------------------------------------------------------------------------

class _Operation:
    """One libssu operation as the torch functions see it.

    ``tensors`` lists the tensor arguments in call order as
    (name, struct, field, axes): struct is "pool", "ring" or "args", field
    the libssu field it describes, and axes, for the Mamba-1 layout without
    a head axis, how many trailing axes follow the head axis that is
    inserted (None: the tensor keeps its shape). The pointer arguments
    (the rounding seed) follow as (name, field). ``flags`` maps keyword ->
    flag bit, ``ints`` keyword -> integer field.
    """

    def __init__(self, name, struct, create, execute, tensors, pointers=(), flags=None,
                 ints=None, scalars=(), params=(), required=(), mamba1_layout=False,
                 flush_of=None):
        self.name = name
        self.required = frozenset(required)  # tensors that are never None
        self.mamba1_layout = mamba1_layout   # takes 3-D Mamba-1 tensors
        self.scalar_names = scalars  # keywords of the scalar options, in call order
        self.params = frozenset(params)  # fields without a batch axis
        self.struct = struct
        self.create = getattr(_L, create) if create else None
        self.execute_fn = execute
        # The address of the execute function, which ssu._fastcall calls.
        self.execute_address = ctypes.cast(getattr(_L, execute), ctypes.c_void_p).value
        self.tensors = tensors
        self.pointers = pointers
        self.flags = flags or {}
        self.ints = ints or {}
        self.flush_of = flush_of
        self.entries = {}   # full key -> _Entry
        self.plans = {}     # plan key -> plan handle
        self.renames = {}
        for name_, _, field, _ in tensors:
            if name_ != field:
                self.renames[field] = name_
        for name_, field in pointers:
            if name_ != field:
                self.renames[field] = name_
        for name_, field in self.ints.items():
            if name_ != field:
                self.renames[field] = name_
        self.renames["pool.state_scale"] = "state_scale"
        self.renames["pool.state"] = "state"
        self._rename_re = re.compile(
            r"\b(" + "|".join(sorted(map(re.escape, self.renames), key=len, reverse=True))
            + r")\b") if self.renames else None

    def message(self, text):
        """The library's message in this function's argument names."""
        if self._rename_re is None:
            return text
        return self._rename_re.sub(lambda m: self.renames[m.group(1)], text)


class _Entry:
    """A prebuilt argument struct (structs, which `call` stores the data
    pointers into) and the plan it runs with.

    `call` stores the pointers and runs. `guarded(check, miss, then)` makes
    a function of every argument of the operation that first checks that
    they are what the struct describes (`check` tests the tensors that
    `present` picks) and hands anything else to `miss`."""

    __slots__ = ("plan", "structs", "call", "present", "guarded", "check")


def _insert_head(shape, strides, axes):
    """shape/strides with a size-1 head axis before the last `axes` axes."""
    pos = len(shape) - axes
    stride = shape[pos] * strides[pos] if pos < len(shape) else 1
    return shape[:pos] + (1,) + shape[pos:], strides[:pos] + (stride,) + strides[pos:]


def _dtype_code(t, name, op):
    code = _DTYPES.get(t.dtype)
    if code is None:
        raise TypeError(f"ssu.torch.{op.name}: {name} has dtype {t.dtype}, which libssu does "
                        f"not take (float32, float16, bfloat16, int16, int8, float8_e4m3fn, "
                        f"int32, int64)")
    return code


def _build(op, tensors, pointers, scalars, key):
    """The cold path: describes every argument into fresh C structs, finds or
    creates the plan, and caches the result under `key`."""
    args = op.struct(struct_size=ctypes.sizeof(op.struct), pad_slot_id=-1)
    pool = _lib.ssu_state_pool_t(struct_size=ctypes.sizeof(_lib.ssu_state_pool_t))
    args.pool = ctypes.pointer(pool)
    structs = {"args": args, "pool": pool}
    if hasattr(op.struct, "ring"):
        ring = _lib.ssu_replay_ring_t(struct_size=ctypes.sizeof(_lib.ssu_replay_ring_t))
        args.ring = ctypes.pointer(ring)
        structs["ring"] = ring

    # The Mamba-1 layout without a head axis: a 3-D state pool.
    mamba1 = op.mamba1_layout and tensors[0].dim() == 3
    device = None
    first = None
    plan_key = [scalars, mamba1]
    descs = {}
    slots = []
    for i, ((name, where, field, axes), t) in enumerate(zip(op.tensors, tensors)):
        if t is None:
            plan_key.append(None)
            continue
        dev = t.get_device()
        if device is None:
            device, first = dev, name
        elif dev != device:
            raise ValueError(f"ssu.torch.{op.name}: {name} is on {t.device} but {first} is on "
                             f"{_device_name(device)}")
        shape, strides = tuple(t.shape), tuple(t.stride())
        if mamba1 and axes is not None:
            shape, strides = _insert_head(shape, strides, axes)
        code = _dtype_code(t, name, op)
        container = structs[where]
        off = getattr(type(container), field).offset
        _pack(container, off, t.data_ptr(), code, shape, strides, name)
        slots.append((i, ctypes.c_void_p.from_buffer(container, off)))
        # The plan fixes everything but the data pointers, the strides and
        # the batch and slot counts (the leading axis of every tensor but
        # the per-head parameters); which strides are 0 selects a layout.
        lead = 0 if field in op.params else 1
        descs[name] = (code, shape[lead:], tuple(s == 0 for s in strides))
        plan_key.append(descs[name])
    for j, ((name, field), p) in enumerate(zip(op.pointers, pointers)):
        if p is None:
            plan_key.append(None)
            continue
        if p.get_device() != device:
            raise ValueError(f"ssu.torch.{op.name}: {name} is on {p.device} but {first} is on "
                             f"{_device_name(device)}")
        if p.dtype not in (torch.int64, torch.uint64) or p.numel() != 1:
            raise TypeError(f"ssu.torch.{op.name}: {name} must be a one-element int64 or uint64 "
                            f"tensor (the library reads it when the operation runs)")
        view = ctypes.c_void_p.from_buffer(args, getattr(op.struct, field).offset)
        view.value = p.data_ptr()
        slots.append((len(op.tensors) + j, view))
        descs[name] = True
        plan_key.append(True)
    for kw, value in zip(op.scalar_names, scalars):
        bit = op.flags.get(kw)
        if bit is not None:
            if value:
                args.flags |= bit
        else:
            setattr(args, op.ints[kw], int(value))

    if device is None:
        raise ValueError(f"ssu.torch.{op.name}: no tensor arguments")
    ctx = _context(device)
    plan_key.append(device)
    plan_key = tuple(plan_key)
    ref = ctypes.byref(args)
    if op.flush_of is not None:
        # A flush runs with the plan of the replay steps on the same pools.
        plan = _flush_plans.get(_flush_key(descs, device))
        if plan is None:
            raise ValueError(
                f"ssu.torch.{op.name}: no replay step has run on pools, rings and A of these "
                f"shapes, dtypes and layouts yet; a flush uses the plan of those steps")
    else:
        plan = op.plans.get(plan_key)
        if plan is None:
            plan = _create_plan(op, ctx, ref, mamba1)
            op.plans[plan_key] = plan
            if op.name == "replay":
                _flush_plans[_flush_key(descs, device)] = plan
    e = _Entry()
    e.plan = plan
    e.structs = structs
    if _fast:
        c = _fastcall.Entry(
            len(op.tensors) + len(op.pointers), tuple(i for i, _ in slots),
            tuple(ctypes.addressof(view) for _, view in slots), tuple(scalars),
            op.execute_address, plan, ctypes.addressof(args), device if device >= 0 else None,
            _raw_stream, _raise, op, mamba1, (structs, slots))
        e.call, e.present, e.guarded = c.call, c.present, c.guarded
    else:
        e.call, e.present, e.guarded = _entry_functions(
            op, slots, scalars, _gil_holding(op.execute_fn), plan, ctypes.addressof(args),
            device, mamba1)
    e.check = None
    if len(op.entries) >= 4096:  # a runaway of layouts: start over
        op.entries.clear()
    op.entries[key] = e
    return e


# execute(plan, args, stream) called with the GIL held, which saves the
# release and reacquire of a plain ctypes call and costs nothing on the CUDA
# backend, whose execute only launches. (What keeps two threads that share
# a cached argument struct apart is the entry's lock, see _entry_functions:
# the interpreter may switch threads between the stores of the pointers.
# ssu._fastcall calls it with the GIL held too, and needs no lock.)
_EXECUTE = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def _gil_holding(name):
    return _EXECUTE((name, _L))


def _device_name(device):
    return "cpu" if device < 0 else f"cuda:{device}"


# Replay plans by what a flush shares with the steps (see _flush_key).
_flush_plans = {}
_FLUSH_SHARED = ("state", "state_scale", "ring_x", "ring_B", "ring_dt", "committed", "pending",
                 "A", "rand_seed")


def _flush_key(descs, device):
    return tuple(descs.get(name) for name in _FLUSH_SHARED) + (device,)


def _create_plan(op, ctx, ref, mamba1):
    handle = ctypes.c_void_p()
    status = op.create(ctx.handle, ref, None, ctypes.byref(handle))
    if status:
        _raise(op, status, mamba1)
    return handle.value


def _raise(op, status, mamba1=False):
    text = op.message(_L.ssu_last_error_message().decode(errors="replace"))
    if mamba1:
        text += (" (3-D Mamba-1 tensors are passed to libssu with a head axis of size 1: "
                 "state (S, 1, D, N), x (Bt, 1, D), A (1, D, N), B (Bt, 1, N), D (1, D))")
    raise SsuError(status, f"ssu.torch.{op.name}: {text}")


def _tuple(names):
    """Python source of a tuple of the named variables."""
    return "(" + "".join(name + ", " for name in names) + ")"


def _hot_path(op):
    """The keyed lookup of an operation, written out for its arguments: look
    up the prebuilt struct by the options and every tensor's dtype, shape,
    strides and device, build it on a miss, make it the entry that the next
    call tries first (_adopt), store the data pointers, call. (The device
    of every tensor is in the key because a struct built for CUDA memory
    must never receive a host pointer: the cold path refuses mixed devices
    with an error, a kernel would fault.)
    Spelled out rather than looped, because at a few microseconds per call
    every attribute read and loop step shows."""
    tensors = [name for name, *_ in op.tensors]
    pointers = [name for name, _ in op.pointers]
    arguments = ", ".join(tensors + pointers)
    params = ", ".join(tensors + pointers + list(op.scalar_names))
    key = [_tuple(op.scalar_names)]
    for name in tensors:
        layout = f"{name}.dtype, {name}.shape, {name}.stride(), {name}.get_device()"
        key.append(layout if name in op.required else f"None if {name} is None else ({layout})")
    for name in pointers:
        key.append(f"None if {name} is None else ({name}.dtype, {name}.shape, {name}.get_device())")
    source = (
        f"def lookup({params}):\n"
        f"    key = ({', '.join(key)})\n"
        f"    e = entries.get(key)\n"
        f"    if e is None:\n"
        f"        e = build(op, {_tuple(tensors)}, {_tuple(pointers)}, "
        f"{_tuple(op.scalar_names)}, key)\n"
        # (Without a working _guard, every call comes here and there is
        # nothing to adopt.)
        + (f"    adopt(op, e, e.present({arguments}))\n" if _guards else "")
        + f"    e.call({arguments})\n")
    scope = {"entries": op.entries, "build": _build, "op": op, "adopt": _adopt}
    exec(compile(source, f"<ssu.torch {op.name}>", "exec"), scope)
    return scope["lookup"]


try:
    # dynamo's C++ check of tensors against those it was made from: Python
    # type, dispatch keys, dtype, device, requires_grad, sizes and strides,
    # for a list of tensors in one call. About 75 ns a tensor, where reading
    # dtype, shape, strides and device from Python costs 300.
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - torch without dynamo
    _TensorGuards = None


def _guard(tensors):
    """A function of as many arguments as `tensors` that tells whether they
    are tensors like them (type, dtype, device, shape, strides)."""
    # The constructor reads both keywords whether given or not (torch 2.15
    # crashes without them), so they are always passed.
    return _TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check


def _guards_work():
    """Whether _guard behaves as the entries need, on this torch: it is not
    a public API, and without it every call takes the keyed lookup."""
    if _TensorGuards is None:
        return False
    try:
        a = torch.zeros(2, 3)
        check = _guard((a, a[:, :1]))
        return (check(torch.ones(2, 3), torch.ones(2, 3)[:, 1:2]) is True
                and check(a, torch.zeros(2, 1)) is False           # strides
                and check(a, a[:1, :1]) is False                   # shape
                and check(a.double(), a[:, :1]) is False           # dtype
                and check(a, None) is False
                and check(torch.nn.Parameter(a), a[:, :1]) is False)  # type
    except Exception:  # pragma: no cover - a torch whose API differs
        return False


_guards = _guards_work()


def _adopt(op, e, present):
    """Makes `e` the entry that the operation's next call tries first
    (op.run), with a check that accepts `present`, this call's arguments
    that the struct describes, and the entry tried first before it the
    second try; a call that finds its struct second makes that entry the
    first. So two layouts that take turns (two models, or two kinds of
    layer) each find their struct without the keyed lookup, and a switch
    back to the previous layout costs one failed check.
    An entry's check is made anew only when it has none or when it is one
    of the two that were tried: the lookup found it by dtypes, shapes,
    strides and devices, so its check failed on what the key leaves out
    (dispatch keys, requires_grad, the tensor type). Any other entry
    keeps its check; if that fails, the entry is tried first next call,
    fails, and then gets a new one."""
    if not _guards:
        return
    if e.check is None or e is op.first or e is op.second:
        try:
            e.check = _guard(present)
        except Exception:  # not plain tensors: every call looks up
            op.run, op.first, op.second = op.lookup, None, None
            return
    if op.first is not e:
        op.first, op.second = e, op.first
    other = op.second
    if other is None:
        op.run = e.guarded(e.check, op.lookup, None)
        return
    # What a call that the second try finds sets (see guarded): the
    # operation's run, first and second entry, the two swapped.
    e_first, other_first = [None, e, other], [None, other, e]
    e_first[0] = e.guarded(e.check, other.guarded(other.check, op.lookup, other_first), None)
    other_first[0] = other.guarded(other.check, e.guarded(e.check, op.lookup, e_first), None)
    op.run = e_first[0]


def _entry_functions(op, present, scalars, execute, plan, ref, device, mamba1):
    """The functions of an entry (see _Entry) in Python, written out for the
    operation's arguments (ssu._fastcall.Entry has the same three in C, and
    is used instead where it is built). `call` stores each present
    argument's data pointer (`present`: (argument index, c_void_p view into
    a struct) pairs), then runs the execute call on the device's current
    stream.
    `guarded(check, miss, then)` makes the function that first tests the
    arguments absent from the struct for None, the options for this
    struct's values (`scalars`) and the present arguments with `check`,
    calls `miss` with them if that fails, else (given `then`, the
    operation's run, first and second entry) sets those and runs."""
    names = [name for name, *_ in op.tensors] + [name for name, _ in op.pointers]
    given = [names[i] for i, _ in present]
    absent = [name for name in names if name not in given]
    everything = ", ".join(names + list(op.scalar_names))
    stream = "stream(device)" if device >= 0 else "0"
    # The stores and the call hold the entry's lock: threads that share an
    # entry share its struct, and the interpreter may switch threads
    # between two stores, which would run one thread's call with another
    # thread's pointers.
    body = ("acquire()\n"
            "try:\n"
            + "".join(f"    v{k}.value = {name}.data_ptr()\n" for k, name in enumerate(given))
            + f"    status = execute(plan, ref, {stream})\n"
            "finally:\n"
            "    release()\n"
            "if status:\n"
            "    fail(op, status, mamba1)\n")
    test = " and ".join([f"{name} is None" for name in absent]
                        + [f"{name} == s{k}" for k, name in enumerate(op.scalar_names)]
                        + [f"check({', '.join(given)})"])
    # The views v0, v1, ... are names of the entry's own scope rather than
    # cells of a closure: guarded() makes a function on every lookup, at a
    # cost that grows with the closure.
    source = (f"def call({', '.join(names)}):\n"
              + textwrap.indent(body, " " * 4) +
              f"def present({', '.join(names)}):\n"
              f"    return {_tuple(given)}\n"
              f"def guarded(check, miss, then):\n"
              f"    if then is None:\n"
              f"        def run({everything}):\n"
              f"            if not ({test}):\n"
              f"                return miss({everything})\n"
              + textwrap.indent(body, " " * 12) +
              f"        return run\n"
              f"    def promote({everything}):\n"
              f"        if not ({test}):\n"
              f"            return miss({everything})\n"
              f"        op.run, op.first, op.second = then\n"
              + textwrap.indent(body, " " * 8) +
              f"    return promote\n")
    lock = threading.Lock()
    scope = {"execute": execute, "plan": plan, "ref": ref, "device": device, "op": op,
             "mamba1": mamba1, "stream": _raw_stream, "fail": _raise,
             "acquire": lock.acquire, "release": lock.release}
    scope.update((f"s{k}", value) for k, value in enumerate(scalars))
    scope.update((f"v{k}", view) for k, (_, view) in enumerate(present))
    exec(compile(source, f"<ssu.torch {op.name} call>", "exec"), scope)
    return scope["call"], scope["present"], scope["guarded"]


# ---------------------------------------------------------------------------
# The operations
# ---------------------------------------------------------------------------

# The engines' names of the source and destination slot indices.
_SLOTS = (("state_batch_indices", "args", "src_index", None),
          ("dst_state_batch_indices", "args", "dst_index", None))

_SSU = _Operation(
    "selective_state_update", _lib.ssu_update_args_t,
    "ssu_plan_create_update", "ssu_plan_execute_update",
    tensors=(
        ("state", "pool", "state", 2),
        ("x", "args", "x", 1),
        ("dt", "args", "dt", 1),
        ("A", "args", "A", 2),
        ("B", "args", "B", 1),
        ("C", "args", "C", 1),
        ("D", "args", "D", 1),
        ("z", "args", "z", 1),
        ("dt_bias", "args", "dt_bias", 1),
        ("out", "args", "out", 1),
    ) + _SLOTS + (
        ("cu_seqlens", "args", "cu_seqlens", None),
        ("num_accepted_tokens", "args", "num_accepted_tokens", None),
        ("intermediate_states_buffer", "args", "intermediate_states", 2),
        ("intermediate_state_indices", "args", "intermediate_index", None),
        ("state_scale", "pool", "state_scale", 1),
        ("intermediate_state_scales", "args", "intermediate_scales", 1),
    ),
    pointers=(("rand_seed", "rounding_seed"),),
    flags={"dt_softplus": _lib.UPDATE_DT_SOFTPLUS,
           "disable_state_update": _lib.UPDATE_DISABLE_STATE_UPDATE},
    ints={"pad_slot_id": "pad_slot_id", "max_seqlen": "max_tokens",
          "philox_rounds": "rounding_rounds"},
    scalars=("dt_softplus", "disable_state_update", "pad_slot_id", "max_seqlen",
             "philox_rounds"),
    params=("A", "D", "dt_bias"),
    required=("state", "x", "dt", "A", "B", "C", "out"),
    mamba1_layout=True)

def _same_names(where, *names):
    """Tensor arguments named like the libssu fields they describe, in the
    struct `where`, without a Mamba-1 layout."""
    return tuple((name, where, name, None) for name in names)


_RING = (("ring_x", "ring", "x", None), ("ring_B", "ring", "B", None),
         ("ring_dt", "ring", "dt", None), ("committed", "ring", "committed", None),
         ("pending", "ring", "pending", None))

_REPLAY = _Operation(
    "replay", _lib.ssu_replay_args_t,
    "ssu_plan_create_replay", "ssu_plan_execute_replay",
    tensors=_same_names("pool", "state", "state_scale") + _RING
    + _same_names("args", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out") + (
        ("state_batch_indices", "args", "src_index", None),
        ("cu_seqlens", "args", "cu_seqlens", None),
        ("num_accepted_tokens", "args", "num_accepted", None),
    ),
    pointers=(("rand_seed", "rounding_seed"),),
    flags=_SSU.flags,
    ints=_SSU.ints,
    scalars=_SSU.scalar_names,
    params=("A", "D", "dt_bias"),
    required=("state", "ring_x", "ring_B", "ring_dt", "committed", "pending", "x", "dt", "A",
              "B", "C", "out"))

_REPLAY_FLUSH = _Operation(
    "replay_flush", _lib.ssu_replay_flush_args_t, None, "ssu_plan_execute_replay_flush",
    tensors=_same_names("pool", "state", "state_scale") + _RING + _same_names("args", "A") + (
        ("slots", "args", "src_index", None),
        ("num_accepted_tokens", "args", "num_accepted", None),
    ),
    pointers=(("rand_seed", "rounding_seed"),),
    ints={"pad_slot_id": "pad_slot_id", "philox_rounds": "rounding_rounds"},
    scalars=("pad_slot_id", "philox_rounds"),
    params=("A",), flush_of=_REPLAY,
    required=("state", "ring_x", "ring_B", "ring_dt", "committed", "pending", "A", "slots"))

_MAMBA3_STEP = _Operation(
    "mamba3_step", _lib.ssu_mamba3_step_args_t,
    "ssu_plan_create_mamba3_step", "ssu_plan_execute_mamba3_step",
    tensors=_same_names("pool", "state", "prev_B", "prev_x")
    + _same_names("args", "A", "dt", "trap", "B", "C", "x", "xproj", "out", "D", "z", "zproj",
                  "outproj") + (
    ) + _SLOTS,
    flags={"update_prev": _lib.MAMBA3_UPDATE_PREV},
    ints={"pad_slot_id": "pad_slot_id"},
    scalars=("update_prev", "pad_slot_id"),
    params=("D", "xproj", "zproj", "outproj"),
    required=("state", "prev_B", "prev_x", "A", "dt", "trap", "B", "C", "x", "xproj", "out"))

_MAMBA3_ROTARY = _Operation(
    "mamba3_rotary", _lib.ssu_mamba3_rotary_args_t,
    "ssu_plan_create_mamba3_rotary", "ssu_plan_execute_mamba3_rotary",
    tensors=_same_names("pool", "angle_state")
    + _same_names("args", "angle_rate", "dt", "q", "k", "q_out", "k_out", "q_bias", "k_bias") + (
    ) + _SLOTS,
    flags={"halved": _lib.MAMBA3_ROTARY_HALVED},
    ints={"pad_slot_id": "pad_slot_id"},
    scalars=("halved", "pad_slot_id"),
    params=("q_bias", "k_bias"),
    required=("angle_state", "angle_rate", "dt", "q", "k", "q_out", "k_out"))


def clear_cache():
    """Drops the cached argument structs and destroys the cached plans (the
    contexts stay). Not while a CUDA graph that runs them may still be
    launched with new work: the graphs keep their kernels' arguments, but a
    later call would build everything again."""
    for op in (_SSU, _REPLAY, _REPLAY_FLUSH, _MAMBA3_STEP, _MAMBA3_ROTARY):
        # The entries it held run plans destroyed below.
        op.run, op.first, op.second = op.lookup, None, None
        op.entries.clear()
        for handle in op.plans.values():
            _L.ssu_plan_destroy(handle)
        op.plans.clear()
    _flush_plans.clear()


for _op in (_SSU, _REPLAY, _REPLAY_FLUSH, _MAMBA3_STEP, _MAMBA3_ROTARY):
    _op.lookup = _op.run = _hot_path(_op)
    _op.first = _op.second = None  # the entries op.run tries (see _adopt)
del _op


# ---------------------------------------------------------------------------
# Custom ops (torch.ops.ssu.*) for tracing: torch.compile, export, fake tensors
# ---------------------------------------------------------------------------

def _annotate(fn, optional, ints=(), bools=()):
    """Type annotations for torch.library's schema inference: every argument
    is a Tensor unless named in `optional` (Tensor?), `ints` or `bools`."""
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount]
    fn.__annotations__ = {
        n: (bool if n in bools else int if n in ints
            else _Optional[_Tensor] if n in optional else _Tensor) for n in names}
    fn.__annotations__["return"] = None
    return fn


from typing import Optional as _Optional  # noqa: E402


# The ops are defined with torch.library.Library and one Python kernel for
# CPU and CUDA tensors rather than with torch.library.custom_op, which puts
# Python autograd and ADInplaceOrView layers (and its own wrapper) in front
# of the kernel: each is a dispatcher round trip with every argument boxed,
# 14 of the 22.5 us a call took through the dispatcher on the CPU test
# machine. Without an autograd kernel the dispatcher's own (C++) fallback
# serves the Autograd key; the ops have no derivative either way.
_LIB = torch.library.Library("ssu", "DEF")


def _define_op(operation, mutates, ints=(), bools=()):
    """Registers torch.ops.ssu.<name>: its arguments are the operation's
    tensors (Tensor, or Tensor? unless required), pointers (Tensor?) and
    options, `mutates` are declared as written (Tensor(a!)); the kernel
    runs the operation's per-call function and then bumps the version
    counters of the written tensors, as torch's in-place ops (and
    custom_op's ADInplaceOrView layer) do. Returns the op's overload."""
    names = [name for name, *_ in operation.tensors] + [name for name, _ in operation.pointers]
    everything = ", ".join(names + list(operation.scalar_names))
    written = [name for name in names if name in mutates]
    always = [name for name in written if name in operation.required]
    optional = [name for name in written if name not in operation.required]
    # (Spelled out for the usual call, where the optional written tensors
    # are absent: filtering them out costs as much as the bump.)
    source = (f"def kernel({everything}):\n"
              f"    op.run({everything})\n"
              + (f"    if {' and '.join(f'{name} is None' for name in optional)}:\n"
                 f"        bump({_tuple(always)})\n"
                 f"    else:\n"
                 f"        bump([t for t in {_tuple(written)} if t is not None])\n"
                 if optional else f"    bump({_tuple(always)})\n"))
    scope = {"op": operation, "bump": torch._C._increment_version}
    exec(compile(source, f"<ssu.torch {operation.name} kernel>", "exec"), scope)
    kernel = scope["kernel"]
    optional = [name for name, *_ in operation.tensors if name not in operation.required]
    optional += [name for name, _ in operation.pointers]
    schema = torch.library.infer_schema(_annotate(kernel, optional, ints, bools),
                                        mutates_args=mutates)
    _LIB.define(operation.name + schema)
    for key in ("CPU", "CUDA"):
        _LIB.impl(operation.name, kernel, key)
    # Every output is a mutated argument: the fake implementation has
    # nothing to compute.
    torch.library.register_fake(f"ssu::{operation.name}", _no_outputs, lib=_LIB)
    return getattr(torch.ops.ssu, operation.name).default


def _no_outputs(*args, **kwargs):
    return None


_ssu_op = _define_op(
    _SSU, ("state", "out", "intermediate_states_buffer", "state_scale",
           "intermediate_state_scales"),
    ints=("pad_slot_id", "max_seqlen", "philox_rounds"),
    bools=("dt_softplus", "disable_state_update"))

_replay_op = _define_op(
    _REPLAY, ("state", "state_scale", "ring_x", "ring_B", "ring_dt", "committed", "pending",
              "out"),
    ints=("pad_slot_id", "max_seqlen", "philox_rounds"),
    bools=("dt_softplus", "disable_state_update"))

_replay_flush_op = _define_op(
    _REPLAY_FLUSH, ("state", "state_scale", "committed", "pending"),
    ints=("pad_slot_id", "philox_rounds"))

_mamba3_step_op = _define_op(
    _MAMBA3_STEP, ("state", "prev_B", "prev_x", "out"),
    ints=("pad_slot_id",), bools=("update_prev",))

_mamba3_rotary_op = _define_op(
    _MAMBA3_ROTARY, ("angle_state", "q_out", "k_out"),
    ints=("pad_slot_id",), bools=("halved",))


# A call skips the dispatcher when its first tensor is a plain tensor and
# nothing is tracing; torch.compile, fake tensors and other subclasses go
# through the registered op. Each public function spells the test out: a
# helper function would cost as much again as the test itself. The direct
# call takes the options as given (the struct's check compares them by
# value, the cold path converts them); only the op's schema needs exact
# bools and ints, so only that branch converts them.
_compiling = torch.compiler.is_compiling


def _seed_tensor(rand_seed, like):
    """rand_seed as the one-element int64 tensor the library reads; an int
    becomes one on `like`'s device (a fill, which a CUDA graph captures)."""
    if rand_seed is None or isinstance(rand_seed, _Tensor):
        return rand_seed
    seed = int(rand_seed) & 0xFFFFFFFFFFFFFFFF
    if seed >= 1 << 63:
        seed -= 1 << 64
    return torch.full((1,), seed, dtype=torch.int64, device=like.device)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------

def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None,
                           dst_state_batch_indices=None, pad_slot_id=-1, out=None,
                           num_accepted_tokens=None, cu_seqlens=None,
                           intermediate_states_buffer=None, intermediate_state_indices=None,
                           disable_state_update=False, state_scale=None,
                           intermediate_state_scales=None, rand_seed=None, philox_rounds=10,
                           max_seqlen=None):
    """One decode step of Mamba-1 / Mamba-2 layers on a slot pool; returns out.

    The arguments of mamba_ssm's selective_state_update and of the serving
    engines' versions of it, in their layouts:
      state (S, H, P, N), or (S, D, N) for Mamba-1 without a head axis;
      x, z, out: (Bt, H, P), (Bt, T, H, P) multi-token, (TT, H, P) with
        cu_seqlens; without a head axis (Bt, D) / (Bt, T, D);
      dt: x's shape, or without P (per head); A: (H,), (H, P, N) or (D, N);
      B, C: (Bt, G, N) ((Bt, T, G, N), (TT, G, N)), or (Bt, N);
      D, dt_bias: (H,), (H, P) or (D,).
    Broadcast (stride-0) views such as A[:, None, None].expand(H, P, N) are
    read in place as per-head values. Slot indices are int32 or int64:
    state_batch_indices (Bt,) or (Bt, T); dst_state_batch_indices likewise;
    an index that is negative or equals pad_slot_id marks a padded sequence
    (zero output, no pool access). num_accepted_tokens (Bt,) picks the
    starting column of a 2-D state_batch_indices (speculative decoding).
    cu_seqlens (Bt+1,) selects the packed varlen form, with max_seqlen the
    longest sequence allowed (default: the width of a 2-D index or of the
    intermediate buffer, else TT). intermediate_states_buffer (I, T, H, P, N)
    receives the state after every token at row intermediate_state_indices[b].
    state_scale (S, H, P) float32 accompanies an int16, int8 or
    float8_e4m3fn state (and intermediate_state_scales such an intermediate
    buffer). rand_seed (an int, or a one-element int64 tensor the library
    reads when it runs) turns on stochastic rounding of f16/bf16/e4m3 state
    stores with philox_rounds rounds.
    out defaults to a new tensor like x. Raises SsuError with the library's
    message, in these argument names, for arguments it refuses.
    """
    if out is None:
        out = torch.empty_like(x)
    if cu_seqlens is None:
        max_seqlen = 0
    elif max_seqlen is None:
        for t in (state_batch_indices, dst_state_batch_indices, intermediate_states_buffer):
            if t is not None and t.dim() >= 2:
                max_seqlen = t.shape[1]
                break
        else:
            max_seqlen = x.shape[0]
    if rand_seed is None:
        philox_rounds = 0
    else:
        rand_seed = _seed_tensor(rand_seed, state)
    if type(state) is _Tensor and not _compiling():
        call = _SSU.run
    else:
        call = _ssu_op
        # The op's schema takes exact bools and ints.
        dt_softplus, disable_state_update = bool(dt_softplus), bool(disable_state_update)
        pad_slot_id, max_seqlen = int(pad_slot_id), int(max_seqlen)
        philox_rounds = int(philox_rounds)
    call(state, x, dt, A, B, C, D, z, dt_bias, out, state_batch_indices, dst_state_batch_indices,
         cu_seqlens, num_accepted_tokens, intermediate_states_buffer, intermediate_state_indices,
         state_scale, intermediate_state_scales, rand_seed,
         dt_softplus, disable_state_update, pad_slot_id, max_seqlen, philox_rounds)
    return out


def replay(state, ring_x, ring_B, ring_dt, committed, pending, x, dt, A, B, C, D=None, z=None,
           dt_bias=None, dt_softplus=False, state_batch_indices=None, pad_slot_id=-1, out=None,
           cu_seqlens=None, max_seqlen=None, num_accepted_tokens=None,
           disable_state_update=False, state_scale=None, rand_seed=None, philox_rounds=10):
    """One checkpointed (replay) decode step (experimental like libssu's
    replay API, see ssu_replay_args_t); returns out.

    state (S, H, P, N) holds the checkpoints; the ring is ring_x (S, L, H, P),
    ring_B (S, L, G, N), ring_dt (S, L, H) float32 ((S, L, H, P) for a
    per-channel step size) and the counters committed, pending (S,) int32,
    zeroed when a slot starts a request. The step's tensors are those of
    selective_state_update in libssu's layouts (with a head axis);
    num_accepted_tokens (Bt,) is how many of the previous call's tokens each
    sequence keeps.
    """
    if out is None:
        out = torch.empty_like(x)
    if cu_seqlens is None:
        max_seqlen = 0
    elif max_seqlen is None:
        max_seqlen = x.shape[0]
    if rand_seed is None:
        philox_rounds = 0
    else:
        rand_seed = _seed_tensor(rand_seed, state)
    if type(state) is _Tensor and not _compiling():
        call = _REPLAY.run
    else:
        call = _replay_op
        dt_softplus, disable_state_update = bool(dt_softplus), bool(disable_state_update)
        pad_slot_id, max_seqlen = int(pad_slot_id), int(max_seqlen)
        philox_rounds = int(philox_rounds)
    call(state, state_scale, ring_x, ring_B, ring_dt, committed, pending, x, dt, A, B, C, D, z,
         dt_bias, out, state_batch_indices, cu_seqlens, num_accepted_tokens, rand_seed,
         dt_softplus, disable_state_update, pad_slot_id, max_seqlen, philox_rounds)
    return out


def replay_flush(state, ring_x, ring_B, ring_dt, committed, pending, A, slots,
                 num_accepted_tokens=None, pad_slot_id=-1, state_scale=None, rand_seed=None,
                 philox_rounds=10):
    """Folds the rings of `slots` (K,) into their checkpoints and zeroes
    their counters (ssu_replay_flush_args_t), e.g. before a slot leaves the
    replay path. Runs with the plan of the replay steps on pools of the same
    shapes, dtypes and layouts, so a step must have run first."""
    if rand_seed is None:
        philox_rounds = 0
    else:
        rand_seed = _seed_tensor(rand_seed, state)
    if type(state) is _Tensor and not _compiling():
        call = _REPLAY_FLUSH.run
    else:
        call = _replay_flush_op
        pad_slot_id, philox_rounds = int(pad_slot_id), int(philox_rounds)
    call(state, state_scale, ring_x, ring_B, ring_dt, committed, pending, A, slots,
         num_accepted_tokens, rand_seed, pad_slot_id, philox_rounds)


def mamba3_step(state, prev_B, prev_x, A, dt, trap, B, C, x, xproj, D=None, z=None, zproj=None,
                outproj=None, state_batch_indices=None, dst_state_batch_indices=None,
                pad_slot_id=-1, update_prev=True, out=None):
    """One Mamba-3 decode step (ssu_mamba3_step_args_t); returns out, which
    defaults to a new (Bt, H, P) tensor with outproj, (Bt, R, H, P) without.

    Pools: state (S, H, P, N), prev_B (S, R, H, N), prev_x (S, H, P). Per
    call: A, dt, trap (Bt, H); B, C (Bt, R, H, N); x (Bt, H, P); xproj,
    zproj, outproj (R, H, P); D (H,); z (Bt, H, P). update_prev stores this
    step's B and x into prev_B / prev_x.
    """
    if out is None:
        out = x.new_empty(x.shape if outproj is not None else
                          (x.shape[0], B.shape[1]) + tuple(x.shape[1:]))
    if type(state) is _Tensor and not _compiling():
        call = _MAMBA3_STEP.run
    else:
        call = _mamba3_step_op
        update_prev, pad_slot_id = bool(update_prev), int(pad_slot_id)
    call(state, prev_B, prev_x, A, dt, trap, B, C, x, xproj, out, D, z, zproj, outproj,
         state_batch_indices, dst_state_batch_indices, update_prev, pad_slot_id)
    return out


def mamba3_rotary(angle_state, angle_rate, dt, q, k, q_bias=None, k_bias=None,
                  state_batch_indices=None, dst_state_batch_indices=None, pad_slot_id=-1,
                  halved=False, q_out=None, k_out=None):
    """The Mamba-3 rotary step (ssu_mamba3_rotary_args_t): rotates q (C) and
    k (B), (Bt, R, H, N), by the angles of angle_state (S, H, Sa) advanced
    by angle_rate (Bt, H, Sa) and dt (Bt, H); returns (q_out, k_out), new
    tensors unless given (pass q_out=q, k_out=k to rotate in place eagerly;
    under torch.compile give separate outputs)."""
    if q_out is None:
        q_out = torch.empty_like(q)
    if k_out is None:
        k_out = torch.empty_like(k)
    if type(angle_state) is _Tensor and not _compiling():
        call = _MAMBA3_ROTARY.run
    else:
        call = _mamba3_rotary_op
        halved, pad_slot_id = bool(halved), int(pad_slot_id)
    call(angle_state, angle_rate, dt, q, k, q_out, k_out, q_bias, k_bias, state_batch_indices,
         dst_state_batch_indices, halved, pad_slot_id)
    return q_out, k_out
