"""Loading libssu and declaring its C structs and functions with ctypes.

The library is looked up, in order, at
  1. the path in the SSU_LIBRARY environment variable,
  2. libssu.so* inside this package's directory (where the wheel built by
     bindings/python/meson.build puts it),
  3. the system's search path (ctypes.util.find_library, then libssu.so.0).

At import the ctypes struct declarations are checked against the layout
that ssu.h 0.3 defines on 64-bit platforms (sizes and field offsets, the
same numbers the Rust bindings' bindgen layout tests assert), and the
library's version is checked against the header version these declarations
were written for (same major, at least as new): a mismatch raises ImportError instead of
letting a call read garbage.
"""

import ctypes
import ctypes.util
import glob
import os

# ---------------------------------------------------------------------------
# Constants (ssu.h)
# ---------------------------------------------------------------------------

HEADER_VERSION = (0, 3, 0)
MAX_DIMS = 6

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 100
ERROR_NULL_POINTER = 101
ERROR_BAD_RANK = 102
ERROR_BAD_SHAPE = 103
ERROR_BAD_STRIDE = 104
ERROR_BAD_DTYPE = 105
ERROR_DTYPE_MISMATCH = 106
ERROR_INDEX_OUT_OF_RANGE = 107
ERROR_SEQLEN_OUT_OF_RANGE = 108
ERROR_INCOMPATIBLE_OPTIONS = 109
ERROR_UNKNOWN_FLAG = 110
ERROR_STRUCT_SIZE = 111
ERROR_PLAN_MISMATCH = 112
ERROR_BAD_HANDLE = 113
ERROR_NOT_SUPPORTED = 200
ERROR_BACKEND_UNAVAILABLE = 201
ERROR_ALGORITHM_UNAVAILABLE = 202
ERROR_DRIVER_NOT_FOUND = 300
ERROR_DRIVER_TOO_OLD = 301
ERROR_NO_DEVICE = 302
ERROR_DEVICE_UNSUPPORTED = 303
ERROR_CUDA = 304
ERROR_OUT_OF_MEMORY = 400
ERROR_RESOURCES = 401
ERROR_INTERNAL = 500
ERROR_VERSION = 600

DTYPE_INVALID = 0
DTYPE_F32 = 1
DTYPE_F16 = 2
DTYPE_BF16 = 3
DTYPE_I16 = 4
DTYPE_I32 = 5
DTYPE_I64 = 6
DTYPE_I8 = 7       # 8-bit block-scaled state codes (with a state_scale pool)
DTYPE_F8E4M3 = 8   # OCP FP8 E4M3 state codes (with a state_scale pool)

BACKEND_AUTO = 0
BACKEND_CPU = 1
BACKEND_CUDA = 2

ALGORITHM_AUTO = 0
ALGORITHM_CPU_ROWS = 1
ALGORITHM_CUDA_SIMPLE = 2
# 3 is unused (the reserved cuda_tma until 0.2)
ALGORITHM_CUDA_PIPELINED = 4
ALGORITHM_CUDA_REPLAY = 5
PLAN_PDL = 0x1  # ssu_plan_options.flags

UPDATE_DT_SOFTPLUS = 0x1
UPDATE_DISABLE_STATE_UPDATE = 0x2

ERROR_BIT_INDEX = 0x1
ERROR_BIT_SEQLEN = 0x2
ERROR_BIT_ACCEPTED = 0x4  # replay: a num_accepted entry outside 0..pending (clamped)
ERROR_BIT_COUNTERS = 0x8  # replay: counters out of range (handled as padding)

MAMBA3_UPDATE_PREV = 0x1
MAMBA3_ROTARY_HALVED = 0x1

# ---------------------------------------------------------------------------
# Structs
# ---------------------------------------------------------------------------


class ssu_tensor_t(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
    ]


class ssu_state_pool_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("state", ssu_tensor_t),
        ("state_scale", ssu_tensor_t),
        # 0.2
        ("prev_B", ssu_tensor_t),
        ("prev_x", ssu_tensor_t),
        ("angle_state", ssu_tensor_t),
    ]


class ssu_context_options_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("device_ordinal", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
    ]


class ssu_plan_options_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("algorithm", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class ssu_plan_info_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("algorithm", ctypes.c_int32),
        ("reserved0", ctypes.c_uint32),
        ("algorithm_name", ctypes.c_char_p),
    ]


# The tensor fields of ssu_update_args_t, in declaration order.
UPDATE_TENSOR_FIELDS = (
    "x", "dt", "A", "B", "C", "D", "dt_bias", "z", "out",
    "src_index", "dst_index", "cu_seqlens", "num_accepted_tokens",
    "intermediate_states", "intermediate_index",
)


class ssu_update_args_t(ctypes.Structure):
    _fields_ = (
        [
            ("struct_size", ctypes.c_uint32),
            ("flags", ctypes.c_uint32),
            ("pad_slot_id", ctypes.c_int64),
            ("max_tokens", ctypes.c_int64),
            ("pool", ctypes.POINTER(ssu_state_pool_t)),
        ]
        + [(name, ssu_tensor_t) for name in UPDATE_TENSOR_FIELDS]
        + [("error_word", ctypes.c_void_p),
           # 0.2
           ("intermediate_scales", ssu_tensor_t),
           ("rounding_seed", ctypes.c_void_p),
           ("rounding_rounds", ctypes.c_uint32),
           ("reserved1", ctypes.c_uint32)]
    )


MAMBA3_STEP_TENSOR_FIELDS = (
    "A", "dt", "trap", "B", "C", "x", "D", "xproj", "z", "zproj", "outproj", "out",
    "src_index", "dst_index",
)


class ssu_mamba3_step_args_t(ctypes.Structure):
    _fields_ = (
        [
            ("struct_size", ctypes.c_uint32),
            ("flags", ctypes.c_uint32),
            ("pad_slot_id", ctypes.c_int64),
            ("pool", ctypes.POINTER(ssu_state_pool_t)),
        ]
        + [(name, ssu_tensor_t) for name in MAMBA3_STEP_TENSOR_FIELDS]
        + [("error_word", ctypes.c_void_p)]
    )


MAMBA3_ROTARY_TENSOR_FIELDS = (
    "angle_rate", "dt", "q", "k", "q_bias", "k_bias", "q_out", "k_out",
    "src_index", "dst_index",
)


class ssu_mamba3_rotary_args_t(ctypes.Structure):
    _fields_ = (
        [
            ("struct_size", ctypes.c_uint32),
            ("flags", ctypes.c_uint32),
            ("pad_slot_id", ctypes.c_int64),
            ("pool", ctypes.POINTER(ssu_state_pool_t)),
        ]
        + [(name, ssu_tensor_t) for name in MAMBA3_ROTARY_TENSOR_FIELDS]
        + [("error_word", ctypes.c_void_p)]
    )


class ssu_replay_ring_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("x", ssu_tensor_t),
        ("B", ssu_tensor_t),
        ("dt", ssu_tensor_t),
        ("committed", ssu_tensor_t),
        ("pending", ssu_tensor_t),
    ]


REPLAY_TENSOR_FIELDS = (
    "x", "dt", "A", "B", "C", "D", "dt_bias", "z", "out",
    "src_index", "cu_seqlens", "num_accepted",
)

# Fields after error_word shared by the replay step and flush structs.
_REPLAY_TAIL = [("rounding_seed", ctypes.c_void_p),
                ("rounding_rounds", ctypes.c_uint32),
                ("reserved1", ctypes.c_uint32)]


class ssu_replay_args_t(ctypes.Structure):
    _fields_ = (
        [
            ("struct_size", ctypes.c_uint32),
            ("flags", ctypes.c_uint32),
            ("pad_slot_id", ctypes.c_int64),
            ("max_tokens", ctypes.c_int64),
            ("pool", ctypes.POINTER(ssu_state_pool_t)),
            ("ring", ctypes.POINTER(ssu_replay_ring_t)),
        ]
        + [(name, ssu_tensor_t) for name in REPLAY_TENSOR_FIELDS]
        + [("error_word", ctypes.c_void_p)]
        + _REPLAY_TAIL
    )


REPLAY_FLUSH_TENSOR_FIELDS = ("A", "src_index", "num_accepted")


class ssu_replay_flush_args_t(ctypes.Structure):
    _fields_ = (
        [
            ("struct_size", ctypes.c_uint32),
            ("flags", ctypes.c_uint32),
            ("pad_slot_id", ctypes.c_int64),
            ("pool", ctypes.POINTER(ssu_state_pool_t)),
            ("ring", ctypes.POINTER(ssu_replay_ring_t)),
        ]
        + [(name, ssu_tensor_t) for name in REPLAY_FLUSH_TENSOR_FIELDS]
        + [("error_word", ctypes.c_void_p)]
        + _REPLAY_TAIL
    )


def _args_layout(head, tensors, tail=()):
    """Sizes and offsets of an args struct: `head` (name, offset) pairs, then
    112-byte tensors, then error_word and the (name, size) fields of `tail`."""
    offsets = dict(head)
    off = max(offsets.values()) + 8
    for name in tensors:
        offsets[name] = off
        off += 112
    offsets["error_word"] = off
    off += 8
    for name, size in tail:
        offsets[name] = off
        off += size
    return off, offsets


def _update_args_layout():
    return _args_layout(
        (("struct_size", 0), ("flags", 4), ("pad_slot_id", 8), ("max_tokens", 16), ("pool", 24)),
        UPDATE_TENSOR_FIELDS,
        (("intermediate_scales", 112), ("rounding_seed", 8), ("rounding_rounds", 4),
         ("reserved1", 4)))


_OP_HEAD = (("struct_size", 0), ("flags", 4), ("pad_slot_id", 8), ("pool", 16))
_REPLAY_TAIL_LAYOUT = (("rounding_seed", 8), ("rounding_rounds", 4), ("reserved1", 4))


# Sizes and offsets of ssu.h 0.3 (unchanged since 0.2) on LP64 platforms
# (x86-64, aarch64 Linux).
# tests/test_layout.py cross-checks these against the layout tests that
# bindgen derived from the header (bindings/rust/ssu-sys/src/bindings.rs).
EXPECTED_LAYOUT = {
    ssu_tensor_t: (112, {"data": 0, "dtype": 8, "ndim": 12, "shape": 16, "strides": 64}),
    ssu_state_pool_t: (568, {"struct_size": 0, "reserved0": 4, "state": 8, "state_scale": 120,
                             "prev_B": 232, "prev_x": 344, "angle_state": 456}),
    ssu_context_options_t: (16, {"struct_size": 0, "backend": 4, "device_ordinal": 8, "num_threads": 12}),
    ssu_plan_options_t: (12, {"struct_size": 0, "algorithm": 4, "flags": 8}),
    ssu_plan_info_t: (24, {"struct_size": 0, "backend": 4, "algorithm": 8, "reserved0": 12,
                           "algorithm_name": 16}),
    ssu_update_args_t: _update_args_layout(),
    ssu_mamba3_step_args_t: _args_layout(_OP_HEAD, MAMBA3_STEP_TENSOR_FIELDS),
    ssu_mamba3_rotary_args_t: _args_layout(_OP_HEAD, MAMBA3_ROTARY_TENSOR_FIELDS),
    ssu_replay_ring_t: (568, {"struct_size": 0, "reserved0": 4, "x": 8, "B": 120, "dt": 232,
                              "committed": 344, "pending": 456}),
    ssu_replay_args_t: _args_layout(
        (("struct_size", 0), ("flags", 4), ("pad_slot_id", 8), ("max_tokens", 16), ("pool", 24),
         ("ring", 32)),
        REPLAY_TENSOR_FIELDS, _REPLAY_TAIL_LAYOUT),
    ssu_replay_flush_args_t: _args_layout(_OP_HEAD + (("ring", 24),), REPLAY_FLUSH_TENSOR_FIELDS,
                                          _REPLAY_TAIL_LAYOUT),
}


def check_layout():
    """Raises ImportError if a ctypes struct differs from ssu.h's layout."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        raise ImportError("the ssu package supports 64-bit platforms only")
    for struct, (size, offsets) in EXPECTED_LAYOUT.items():
        if ctypes.sizeof(struct) != size:
            raise ImportError(
                f"ssu: ctypes.sizeof({struct.__name__})={ctypes.sizeof(struct)}, "
                f"but ssu.h defines {size} bytes")
        declared = [name for name, _ in struct._fields_]
        if declared != list(offsets):
            raise ImportError(f"ssu: {struct.__name__} fields {declared} differ from ssu.h")
        for name, off in offsets.items():
            got = getattr(struct, name).offset
            if got != off:
                raise ImportError(
                    f"ssu: {struct.__name__}.{name} is at offset {got}, but ssu.h puts it at {off}")


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def _candidates():
    env = os.environ.get("SSU_LIBRARY")
    if env:
        # An explicit choice is final: failing to load it is an error rather
        # than a silent fallback to some other libssu.
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libssu.so*")), key=len)
    system = ctypes.util.find_library("ssu")
    if system:
        found.append(system)
    found.append("libssu.so.0")
    return found, False


def load_library():
    names, explicit = _candidates()
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            if explicit:
                raise ImportError(f"ssu: SSU_LIBRARY={name} could not be loaded: {e}") from e
            errors.append(f"{name}: {e}")
    raise ImportError(
        "ssu: libssu could not be found; set SSU_LIBRARY to the path of libssu.so "
        "or install the library where the dynamic loader finds it ("
        + "; ".join(errors) + ")")


def declare(lib):
    """Sets argtypes/restype of every entry point; returns whether the
    library has the replay entry points."""
    vp = ctypes.c_void_p
    i32 = ctypes.c_int32
    sigs = {
        "ssu_version": ([], ctypes.c_uint32),
        "ssu_version_string": ([], ctypes.c_char_p),
        "ssu_status_string": ([i32], ctypes.c_char_p),
        "ssu_last_error_message": ([], ctypes.c_char_p),
        "ssu_dtype_size": ([i32], ctypes.c_size_t),
        "ssu_dtype_name": ([i32], ctypes.c_char_p),
        "ssu_backend_name": ([i32], ctypes.c_char_p),
        "ssu_context_create": ([ctypes.POINTER(ssu_context_options_t), ctypes.POINTER(vp)], i32),
        "ssu_context_destroy": ([vp], i32),
        "ssu_context_get_backend": ([vp, ctypes.POINTER(i32)], i32),
        "ssu_context_device_name": ([vp], ctypes.c_char_p),
        "ssu_plan_create_update": ([vp, ctypes.POINTER(ssu_update_args_t),
                                    ctypes.POINTER(ssu_plan_options_t), ctypes.POINTER(vp)], i32),
        "ssu_plan_destroy": ([vp], i32),
        "ssu_plan_get_info": ([vp, ctypes.POINTER(ssu_plan_info_t)], i32),
        "ssu_plan_execute_update": ([vp, ctypes.POINTER(ssu_update_args_t), vp], i32),
        "ssu_advance_seed": ([vp, vp, ctypes.c_uint64, vp], i32),
        "ssu_plan_create_mamba3_step": ([vp, ctypes.POINTER(ssu_mamba3_step_args_t),
                                         ctypes.POINTER(ssu_plan_options_t),
                                         ctypes.POINTER(vp)], i32),
        "ssu_plan_execute_mamba3_step": ([vp, ctypes.POINTER(ssu_mamba3_step_args_t), vp], i32),
        "ssu_plan_create_mamba3_rotary": ([vp, ctypes.POINTER(ssu_mamba3_rotary_args_t),
                                           ctypes.POINTER(ssu_plan_options_t),
                                           ctypes.POINTER(vp)], i32),
        "ssu_plan_execute_mamba3_rotary": ([vp, ctypes.POINTER(ssu_mamba3_rotary_args_t), vp],
                                           i32),
        "ssu_struct_size": ([i32], ctypes.c_size_t),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    # Replay (experimental in ssu.h 0.2): a library built before it lacks
    # these; everything else still works and planning a replay raises.
    replay = {
        "ssu_plan_create_replay": ([vp, ctypes.POINTER(ssu_replay_args_t),
                                    ctypes.POINTER(ssu_plan_options_t), ctypes.POINTER(vp)], i32),
        "ssu_plan_execute_replay": ([vp, ctypes.POINTER(ssu_replay_args_t), vp], i32),
        "ssu_plan_execute_replay_flush": ([vp, ctypes.POINTER(ssu_replay_flush_args_t), vp],
                                          i32),
    }
    have = [hasattr(lib, name) for name in replay]
    if not any(have):
        return False
    if not all(have):
        raise ImportError("ssu: the library has only some of the replay entry points")
    for name, (args, res) in replay.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    return True


# ssu_struct_size() ids (ssu.h SSU_STRUCT_*).
_STRUCT_IDS = {
    ssu_tensor_t: 1,
    ssu_state_pool_t: 2,
    ssu_context_options_t: 3,
    ssu_plan_options_t: 4,
    ssu_plan_info_t: 5,
    ssu_update_args_t: 6,
    ssu_mamba3_step_args_t: 7,
    ssu_mamba3_rotary_args_t: 8,
    ssu_replay_ring_t: 9,
    ssu_replay_args_t: 10,
    ssu_replay_flush_args_t: 11,
}
_REPLAY_STRUCTS = (ssu_replay_ring_t, ssu_replay_args_t, ssu_replay_flush_args_t)


def check_library_layout(lib, has_replay=True):
    """Raises ImportError unless the loaded library's structs fit ours.

    Extensible structs only grow, so the library's may be larger (a newer
    library) but never smaller; ssu_tensor_t is fixed and must be equal.
    The replay structs are checked when the library has replay."""
    for struct, sid in _STRUCT_IDS.items():
        if struct in _REPLAY_STRUCTS and not has_replay:
            continue
        theirs = lib.ssu_struct_size(sid)
        ours = ctypes.sizeof(struct)
        if theirs < ours or (struct is ssu_tensor_t and theirs != ours):
            raise ImportError(
                f"ssu: the library's {struct.__name__} is {theirs} bytes but this package's "
                f"is {ours}: the library and the package do not match")


check_layout()
lib, lib_path = load_library()
has_replay = declare(lib)
check_library_layout(lib, has_replay)

_lib_version = lib.ssu_version()
# Structs are only ever appended to and the library reads struct_size bytes,
# so any library of the same major version at least as new as the header
# these declarations follow is compatible.
_header_code = HEADER_VERSION[0] * 10000 + HEADER_VERSION[1] * 100
if _lib_version // 10000 != HEADER_VERSION[0] or _lib_version < _header_code:
    raise ImportError(
        f"ssu: {lib_path} is libssu {lib.ssu_version_string().decode()}, but this package "
        f"needs a {HEADER_VERSION[0]}.x library of at least "
        f"{HEADER_VERSION[0]}.{HEADER_VERSION[1]}")
