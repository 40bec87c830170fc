"""Describing caller arrays as ssu_tensor_t without copying them.

Accepted objects, tried in this order:
  * ssu.tensor(obj, dtype=...) -- any of the below with an explicit element
    type, needed for bf16 data held in 2-byte integer arrays (numpy has no
    bfloat16) and for 2-byte floats seen through __cuda_array_interface__;
  * objects with __array_interface__ (numpy arrays): host memory;
  * objects with __dlpack__ (PyTorch, CuPy, JAX, numpy >= 1.22): host or
    CUDA memory. The capsule is borrowed, not consumed: its DLManagedTensor
    is read in place, the capsule is never renamed to "used_dltensor", and
    both the capsule and the producer object are kept alive until the
    library call returns, after which the producer's deleter runs as usual
    when the capsule is collected;
  * objects with __cuda_array_interface__ (CuPy, Numba, PyTorch): CUDA
    memory.
Strides are converted from bytes to elements where a protocol gives bytes;
a byte stride that is not a multiple of the element size is rejected.
"""

import ctypes
import struct
import sys

from . import _lib

# ssu_tensor_t as one struct.pack_into: data, dtype, ndim, shape[6], strides[6].
_TENSOR = struct.Struct("=Qii6q6q")
assert _TENSOR.size == ctypes.sizeof(_lib.ssu_tensor_t)
_ZEROS = (0,) * _lib.MAX_DIMS


def _pack(buf, off, ptr, dtype, shape, strides, what):
    ndim = len(shape)
    if ndim > _lib.MAX_DIMS:
        raise ValueError(f"{what} has {ndim} dimensions; libssu takes at most {_lib.MAX_DIMS}")
    pad = _ZEROS[ndim:]
    _TENSOR.pack_into(buf, off, ptr, dtype, ndim, *shape, *pad, *strides, *pad)

# ---------------------------------------------------------------------------
# Element types
# ---------------------------------------------------------------------------

_DTYPE_BY_NAME = {
    "f32": _lib.DTYPE_F32, "float32": _lib.DTYPE_F32,
    "f16": _lib.DTYPE_F16, "float16": _lib.DTYPE_F16, "half": _lib.DTYPE_F16,
    "bf16": _lib.DTYPE_BF16, "bfloat16": _lib.DTYPE_BF16,
    "i16": _lib.DTYPE_I16, "int16": _lib.DTYPE_I16,
    "i32": _lib.DTYPE_I32, "int32": _lib.DTYPE_I32,
    "i64": _lib.DTYPE_I64, "int64": _lib.DTYPE_I64,
    "i8": _lib.DTYPE_I8, "int8": _lib.DTYPE_I8,
    # E4M3 codes: no numpy dtype, so raw uint8 arrays with dtype="f8e4m3"
    # (or torch.float8_e4m3fn / ml_dtypes.float8_e4m3fn arrays).
    "f8e4m3": _lib.DTYPE_F8E4M3, "float8_e4m3fn": _lib.DTYPE_F8E4M3,
}
_DTYPE_SIZE = {_lib.DTYPE_F32: 4, _lib.DTYPE_F16: 2, _lib.DTYPE_BF16: 2,
               _lib.DTYPE_I16: 2, _lib.DTYPE_I32: 4, _lib.DTYPE_I64: 8,
               _lib.DTYPE_I8: 1, _lib.DTYPE_F8E4M3: 1}

# typestr (array interface) -> dtype, for the unambiguous ones.
_TYPESTR = {"<f4": _lib.DTYPE_F32, "<i2": _lib.DTYPE_I16, "<i4": _lib.DTYPE_I32,
            "<i8": _lib.DTYPE_I64, "|i1": _lib.DTYPE_I8}


def dtype_code(dtype):
    """ssu dtype code of a name ("bf16"), a code, or a numpy/torch dtype."""
    if isinstance(dtype, int):
        if dtype not in _DTYPE_SIZE:
            raise ValueError(f"unknown ssu dtype code {dtype}")
        return dtype
    name = dtype if isinstance(dtype, str) else str(dtype)
    name = name.rsplit(".", 1)[-1].lower()  # "torch.bfloat16" -> "bfloat16"
    try:
        return _DTYPE_BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of f32, f16, bf16, i16, i32, i64, "
                         "i8, f8e4m3") from None


class tensor:
    """Wraps an array with an explicit element type.

    ``ssu.tensor(np_uint16_array, dtype="bf16")`` describes bf16 data held in
    a uint16 numpy array; ``ssu.tensor(cupy_array, dtype="f16")`` says which
    2-byte float a __cuda_array_interface__ object holds. The element size
    of the array must equal the dtype's size.
    """

    __slots__ = ("obj", "dtype")

    def __init__(self, obj, dtype):
        self.obj = obj
        self.dtype = dtype_code(dtype)


# ---------------------------------------------------------------------------
# DLPack
# ---------------------------------------------------------------------------

_kDLCPU, _kDLCUDA, _kDLCUDAHost, _kDLCUDAManaged = 1, 2, 3, 13
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT = 0, 1, 2, 4
_DL_FLAG_READ_ONLY, _DL_FLAG_IS_COPIED = 1, 2


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_get_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_get_name.restype = ctypes.c_char_p
_capsule_get_name.argtypes = [ctypes.py_object]

# Producer types whose __dlpack__ does not take max_version (DLPack < 1.0).
_legacy_dlpack_types = set()


def _dl_dtype(dt, override, what):
    if dt.lanes != 1:
        raise TypeError(f"{what}: vector dtypes (lanes={dt.lanes}) are not supported")
    code, bits = dt.code, dt.bits
    if override is not None:
        if bits != _DTYPE_SIZE[override] * 8:
            raise TypeError(f"{what}: dtype override of {_DTYPE_SIZE[override]} bytes "
                            f"for {bits}-bit elements")
        return override
    if code == _DL_FLOAT and bits == 32:
        return _lib.DTYPE_F32
    if code == _DL_FLOAT and bits == 16:
        return _lib.DTYPE_F16
    if code == _DL_BFLOAT and bits == 16:
        return _lib.DTYPE_BF16
    if code == _DL_INT and bits in (8, 16, 32, 64):
        return {8: _lib.DTYPE_I8, 16: _lib.DTYPE_I16, 32: _lib.DTYPE_I32, 64: _lib.DTYPE_I64}[bits]
    raise TypeError(f"{what}: DLPack dtype (code={code}, bits={bits}) is not supported by libssu")


def _from_dlpack(obj, override, buf, off, cuda_stream, writable, what, keep):
    dev_type, dev_id = obj.__dlpack_device__()
    dev_type = int(dev_type)
    if dev_type in (_kDLCPU, _kDLCUDAHost):
        kwargs = {}
    else:
        # DLPack: the producer orders its work before `stream`; None and 1
        # both mean the legacy default stream (0 is not allowed).
        kwargs = {"stream": cuda_stream if cuda_stream else None}
    typ = type(obj)
    capsule = None
    if typ not in _legacy_dlpack_types:
        try:
            capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:
            _legacy_dlpack_types.add(typ)
    if capsule is None:
        capsule = obj.__dlpack__(**kwargs)
    keep.append(capsule)
    name = _capsule_get_name(capsule)
    if name == b"dltensor_versioned":
        m = _DLManagedTensorVersioned.from_address(_capsule_get_pointer(capsule, name))
        if m.major != 1:
            raise TypeError(f"{what}: DLPack major version {m.major} is not supported")
        if writable and m.flags & _DL_FLAG_READ_ONLY:
            raise ValueError(f"{what} is written by libssu but its DLPack export is read-only")
        if writable and m.flags & _DL_FLAG_IS_COPIED:
            raise ValueError(f"{what} is written by libssu but its DLPack export is a copy")
        dl = m.dl_tensor
    elif name == b"dltensor":
        dl = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, name)).dl_tensor
    else:
        raise TypeError(f"{what}: __dlpack__ returned a capsule named {name!r}; "
                        "was it consumed already?")
    ndim = dl.ndim
    if ndim > _lib.MAX_DIMS:
        raise ValueError(f"{what} has {ndim} dimensions; libssu takes at most {_lib.MAX_DIMS}")
    shape = dl.shape[:ndim]
    strides = dl.strides[:ndim] if dl.strides else _dense_strides(shape)
    _pack(buf, off, (dl.data or 0) + dl.byte_offset, _dl_dtype(dl.dtype, override, what),
          shape, strides, what)
    kind = "cuda" if dev_type == _kDLCUDA else ("managed" if dev_type == _kDLCUDAManaged else "cpu")
    return kind, dev_id


def _dense_strides(shape):
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(shape[i], 1)
    return strides


# ---------------------------------------------------------------------------
# Array interfaces
# ---------------------------------------------------------------------------

def _from_interface(iface, override, buf, off, writable, what, cuda):
    typestr = iface["typestr"]
    itemsize = int(typestr[2:])
    if typestr[0] == ">" and itemsize > 1:
        raise TypeError(f"{what}: big-endian data is not supported")
    if override is not None:
        if _DTYPE_SIZE[override] != itemsize:
            raise TypeError(f"{what}: dtype override of {_DTYPE_SIZE[override]} bytes "
                            f"for {itemsize}-byte elements ({typestr})")
        dtype = override
    else:
        dtype = _TYPESTR.get(typestr)
        if dtype is None:
            if typestr == "<f2" and not cuda:
                dtype = _lib.DTYPE_F16  # numpy float16 is IEEE half
            elif typestr == "<f2":
                raise TypeError(
                    f"{what}: __cuda_array_interface__ cannot tell bf16 from f16; pass "
                    f"ssu.tensor(obj, dtype='bf16') or dtype='f16'")
            elif typestr in ("<u2", "<V2"):
                raise TypeError(
                    f"{what}: 2-byte {typestr} data needs an explicit dtype, e.g. "
                    f"ssu.tensor(array, dtype='bf16')")
            else:
                raise TypeError(f"{what}: element type {typestr} is not supported by libssu")
    ptr, readonly = iface["data"]
    if writable and readonly:
        raise ValueError(f"{what} is written by libssu but the array is read-only")
    shape = iface["shape"]
    bstrides = iface.get("strides")
    if bstrides is None:
        strides = _dense_strides(shape)
    else:
        strides = []
        for d, s in enumerate(bstrides):
            if s % itemsize:
                raise ValueError(f"{what}: stride {s} bytes on axis {d} is not a multiple "
                                 f"of the element size {itemsize}")
            strides.append(s // itemsize)
    if iface.get("offset"):
        ptr += iface["offset"]
    _pack(buf, off, ptr or 0, dtype, shape, strides, what)


# numpy arrays of these dtypes take the fast path (attributes only).
_NUMPY_FAST = {"<f4": (_lib.DTYPE_F32, 4), "<f2": (_lib.DTYPE_F16, 2),
               "<i2": (_lib.DTYPE_I16, 2), "<i4": (_lib.DTYPE_I32, 4),
               "<i8": (_lib.DTYPE_I64, 8)}
_ndarray = None


def _from_numpy(a, override, buf, off, writable, what):
    """numpy arrays without building __array_interface__'s dict twice."""
    dstr = a.dtype.str
    fast = _NUMPY_FAST.get(dstr)
    if fast is None or (override is not None and override != fast[0]):
        if override is None and a.dtype.name == "bfloat16":
            override = _lib.DTYPE_BF16  # ml_dtypes.bfloat16 arrays
        if override is None and a.dtype.name == "float8_e4m3fn":
            override = _lib.DTYPE_F8E4M3  # ml_dtypes.float8_e4m3fn arrays
        _from_interface(a.__array_interface__, override, buf, off, writable, what, cuda=False)
        return
    if writable and not a.flags.writeable:
        raise ValueError(f"{what} is written by libssu but the array is read-only")
    dtype, size = fast
    strides = a.strides
    strides = [s // size if s % size == 0 else _bad_stride(what, s, size) for s in strides]
    _pack(buf, off, a.__array_interface__["data"][0], dtype, a.shape, strides, what)


def _bad_stride(what, s, size):
    raise ValueError(f"{what}: stride {s} bytes is not a multiple of the element size {size}")


def describe(obj, buf, off, what, writable, cuda_stream, keep):
    """Packs the ssu_tensor_t for `obj` into `buf` at byte offset `off`;
    returns ("cpu"|"cuda"|"managed", device id), or None for an absent
    tensor (obj None). Objects that must outlive the call go to `keep`."""
    global _ndarray
    override = None
    if type(obj) is tensor:
        override = obj.dtype
        obj = obj.obj
    if obj is None:
        _pack(buf, off, 0, 0, (), (), what)
        return None
    keep.append(obj)
    if _ndarray is None and "numpy" in sys.modules:
        _ndarray = sys.modules["numpy"].ndarray
    if _ndarray is not None and isinstance(obj, _ndarray):
        _from_numpy(obj, override, buf, off, writable, what)
        return "cpu", 0
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        _from_interface(iface, override, buf, off, writable, what, cuda=False)
        return "cpu", 0
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, override, buf, off, cuda_stream, writable, what, keep)
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        _from_interface(iface, override, buf, off, writable, what, cuda=True)
        return "cuda", None
    raise TypeError(
        f"{what}: {type(obj).__name__} is not an array (no __array_interface__, "
        "__dlpack__ or __cuda_array_interface__)")
