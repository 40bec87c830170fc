//! Safe Rust interface to libssu: the Mamba "selective state update" decode
//! step over slot-addressed state pools, on the CPU or a CUDA device.
//!
//! ```no_run
//! use ssu::{Context, Backend, Tensor, TensorMut, UpdateArgs};
//! # fn main() -> ssu::Result<()> {
//! let ctx = Context::new(Backend::Cpu, 0, 0)?;
//! let (s, h, p, n, bt) = (4, 2, 8, 16, 2);
//! let mut state = vec![0f32; s * h * p * n];
//! let x = vec![0.5f32; bt * h * p];
//! let dt = vec![0.1f32; bt * h];
//! let a = vec![-1f32; h];
//! let b = vec![1f32; bt * n];
//! let c = vec![1f32; bt * n];
//! let slots = [3i32, -1]; // the second sequence is padding
//! let mut out = vec![0f32; bt * h * p];
//! let dims = |d: &[usize]| d.iter().map(|&v| v as i64).collect::<Vec<_>>();
//! let mut args = UpdateArgs::new(
//!     TensorMut::new(&mut state, &dims(&[s, h, p, n]))?,
//!     Tensor::new(&x, &dims(&[bt, h, p]))?,
//!     Tensor::new(&dt, &dims(&[bt, h]))?,
//!     Tensor::new(&a, &dims(&[h]))?,
//!     Tensor::new(&b, &dims(&[bt, 1, n]))?,
//!     Tensor::new(&c, &dims(&[bt, 1, n]))?,
//!     TensorMut::new(&mut out, &dims(&[bt, h, p]))?,
//! )
//! .src_index(Tensor::new(&slots, &[2])?);
//! let plan = ctx.plan_update(&args, None)?;
//! plan.execute(&mut args)?;
//! # Ok(()) }
//! ```
//!
//! Handles are destroyed on drop; a [`Plan`] borrows its [`Context`], so the
//! context outlives its plans. Descriptors borrow the slices they describe
//! for as long as the [`UpdateArgs`] that holds them lives; descriptors of
//! raw (e.g. device) pointers are made with `unsafe` constructors.
//!
//! The Mamba-3 step ([`Mamba3StepArgs`], [`Mamba3RotaryArgs`]) and the
//! checkpointed (replay) decode ([`ReplayArgs`], [`ReplayFlushArgs`],
//! [`ReplayRing`]; experimental like the C API) follow the same pattern.

use std::ffi::{c_void, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::c_char;

pub use ssu_sys as sys;

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// A failed libssu call: the status code and the library's message.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    status: i32,
    message: String,
}

/// `std::result::Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Builds an error from a status and this thread's last libssu message.
    fn from_last(status: i32) -> Error {
        let message = unsafe { cstr(sys::ssu_last_error_message()) }.to_owned();
        Error { status, message }
    }

    /// An error raised by this crate before calling the library.
    fn new(status: i32, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The `SSU_ERROR_*` status code.
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The status family (1 invalid argument, 2 not supported, 3 driver,
    /// 4 resources, 5 internal, 6 version).
    pub fn family(&self) -> i32 {
        sys::ssu_status_family(self.status)
    }

    /// The library's static text for the status, e.g. "bad shape".
    pub fn status_string(&self) -> &'static str {
        status_string(self.status)
    }

    /// The detailed message naming the offending argument and values.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "libssu error {} ({})", self.status, self.status_string())?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

fn check(status: sys::ssu_status_t) -> Result<()> {
    if status == sys::SSU_SUCCESS {
        Ok(())
    } else {
        Err(Error::from_last(status))
    }
}

/// # Safety
/// `p` must be NULL or a NUL-terminated string that lives for 'static.
unsafe fn cstr(p: *const c_char) -> &'static str {
    if p.is_null() {
        ""
    } else {
        CStr::from_ptr(p).to_str().unwrap_or("(non-UTF-8 text)")
    }
}

/// The library's static text for a status code.
pub fn status_string(status: i32) -> &'static str {
    unsafe { cstr(sys::ssu_status_string(status)) }
}

/// The loaded library's version, encoded as MAJOR*10000 + MINOR*100 + PATCH.
pub fn version() -> u32 {
    unsafe { sys::ssu_version() }
}

/// The loaded library's version as text, e.g. "0.1.0".
pub fn version_string() -> &'static str {
    unsafe { cstr(sys::ssu_version_string()) }
}

// ---------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------

/// Element types of tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    Bf16,
    I16,
    I32,
    I64,
    /// int8 codes of a block-scaled state (with its f32 row scales).
    I8,
    /// OCP FP8 E4M3 codes of a block-scaled state (with its f32 row scales).
    F8E4M3,
}

impl DType {
    /// The `SSU_DTYPE_*` value.
    pub fn raw(self) -> sys::ssu_dtype_t {
        match self {
            DType::F32 => sys::SSU_DTYPE_F32,
            DType::F16 => sys::SSU_DTYPE_F16,
            DType::Bf16 => sys::SSU_DTYPE_BF16,
            DType::I16 => sys::SSU_DTYPE_I16,
            DType::I32 => sys::SSU_DTYPE_I32,
            DType::I64 => sys::SSU_DTYPE_I64,
            DType::I8 => sys::SSU_DTYPE_I8,
            DType::F8E4M3 => sys::SSU_DTYPE_F8E4M3,
        }
    }

    /// Bytes per element, as the library reports it.
    pub fn size(self) -> usize {
        unsafe { sys::ssu_dtype_size(self.raw()) }
    }

    /// The library's name for the dtype ("f32", "bf16", ...).
    pub fn name(self) -> &'static str {
        unsafe { cstr(sys::ssu_dtype_name(self.raw())) }
    }
}

/// IEEE binary16 bits. Conversions round to nearest even.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

/// bfloat16 bits. Conversions round to nearest even.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

impl Bf16 {
    pub fn from_f32(v: f32) -> Bf16 {
        let bits = v.to_bits();
        if v.is_nan() {
            return Bf16(((bits >> 16) as u16) | 0x0040);
        }
        let round = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(round) >> 16) as u16)
    }
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl F16 {
    pub fn from_f32(v: f32) -> F16 {
        let bits = v.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let abs = bits & 0x7fff_ffff;
        if abs > 0x7f80_0000 {
            return F16(sign | 0x7e00); // NaN stays a quiet NaN
        }
        if abs >= 0x477f_f000 {
            return F16(sign | 0x7c00); // >= 65520 rounds to Inf (Inf stays Inf)
        }
        let round = |mant: u32, rem: u32, half: u32| -> u32 {
            if rem > half || (rem == half && (mant & 1) == 1) {
                mant + 1
            } else {
                mant
            }
        };
        if abs < 0x3880_0000 {
            // Below 2^-14: a subnormal half (units of 2^-24) or zero.
            if abs < 0x3300_0000 {
                return F16(sign); // <= 2^-25 rounds to zero (ties to even)
            }
            let exp = abs >> 23;
            let m = (abs & 0x7f_ffff) | 0x80_0000;
            let shift = 126 - exp; // 14..=24
            let mant = round(m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1));
            return F16(sign | mant as u16);
        }
        let r = abs - (112 << 23); // rebias the exponent from 127 to 15
        let mant = round(r >> 13, r & 0x1fff, 0x1000); // a carry may reach Inf
        F16(sign | mant as u16)
    }
    pub fn to_f32(self) -> f32 {
        let sign = ((self.0 & 0x8000) as u32) << 16;
        let exp = ((self.0 >> 10) & 0x1f) as u32;
        let mant = (self.0 & 0x3ff) as u32;
        if exp == 0 {
            let v = mant as f32 * (1.0 / 16_777_216.0); // exact: mant * 2^-24
            return if sign != 0 { -v } else { v };
        }
        let bits = if exp == 0x1f {
            sign | 0x7f80_0000 | (mant << 13)
        } else {
            sign | ((exp + 112) << 23) | (mant << 13)
        };
        f32::from_bits(bits)
    }
}

/// Element types that can back a tensor descriptor.
///
/// # Safety
/// `DTYPE` must describe the in-memory representation of `Self` exactly.
pub unsafe trait Element: Copy {
    const DTYPE: DType;
}
unsafe impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
unsafe impl Element for F16 {
    const DTYPE: DType = DType::F16;
}
unsafe impl Element for Bf16 {
    const DTYPE: DType = DType::Bf16;
}
unsafe impl Element for i16 {
    const DTYPE: DType = DType::I16;
}
unsafe impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
unsafe impl Element for i64 {
    const DTYPE: DType = DType::I64;
}

// ---------------------------------------------------------------------------
// Tensor descriptors
// ---------------------------------------------------------------------------

const MAX_DIMS: usize = sys::SSU_MAX_DIMS as usize;

fn invalid(message: String) -> Error {
    Error::new(sys::SSU_ERROR_INVALID_ARGUMENT, message)
}

fn dense_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1));
    }
    strides
}

fn raw_tensor(data: *mut c_void, dtype: DType, shape: &[i64], strides: &[i64]) -> Result<sys::ssu_tensor_t> {
    if shape.len() > MAX_DIMS {
        return Err(Error::new(
            sys::SSU_ERROR_BAD_RANK,
            format!("{} dimensions given; at most {MAX_DIMS} are supported", shape.len()),
        ));
    }
    if strides.len() != shape.len() {
        return Err(invalid(format!("{} strides given for {} dimensions", strides.len(), shape.len())));
    }
    let mut t = sys::ssu_tensor_empty();
    t.data = data;
    t.dtype = dtype.raw();
    t.ndim = shape.len() as i32;
    t.shape[..shape.len()].copy_from_slice(shape);
    t.strides[..strides.len()].copy_from_slice(strides);
    Ok(t)
}

/// Checks that every element addressed by (shape, strides) lies inside a
/// slice of `len` elements. Negative strides are refused here (the library
/// rejects them as well).
fn check_bounds(len: usize, shape: &[i64], strides: &[i64]) -> Result<()> {
    let mut last: i64 = 0;
    for (d, (&n, &s)) in shape.iter().zip(strides).enumerate() {
        if n < 0 {
            return Err(Error::new(sys::SSU_ERROR_BAD_SHAPE, format!("shape[{d}]={n} is negative")));
        }
        if n == 0 {
            return Ok(()); // an empty tensor addresses nothing
        }
        if s < 0 {
            return Err(Error::new(sys::SSU_ERROR_BAD_STRIDE, format!("strides[{d}]={s} is negative")));
        }
        last = (n - 1)
            .checked_mul(s)
            .and_then(|v| v.checked_add(last))
            .ok_or_else(|| invalid(format!("shape {shape:?} with strides {strides:?} overflows")))?;
    }
    if last as u128 >= len as u128 {
        return Err(invalid(format!(
            "shape {shape:?} with strides {strides:?} reaches element {last} of a slice of {len}"
        )));
    }
    Ok(())
}

/// A read-only strided view: host memory borrowed from a slice, or raw
/// memory (e.g. on a CUDA device) described by an unsafe constructor.
#[derive(Clone, Copy)]
pub struct Tensor<'a> {
    raw: sys::ssu_tensor_t,
    _borrow: PhantomData<&'a ()>,
}

/// A writable strided view (state pools, outputs, intermediate buffers).
pub struct TensorMut<'a> {
    raw: sys::ssu_tensor_t,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> Tensor<'a> {
    /// A dense (row-major) view of `data` with `shape`.
    pub fn new<T: Element>(data: &'a [T], shape: &[i64]) -> Result<Self> {
        Self::strided(data, shape, &dense_strides(shape))
    }

    /// A view of `data` with `shape` and element `strides` (0 broadcasts).
    pub fn strided<T: Element>(data: &'a [T], shape: &[i64], strides: &[i64]) -> Result<Self> {
        let raw = raw_tensor(data.as_ptr() as *mut c_void, T::DTYPE, shape, strides)?;
        check_bounds(data.len(), shape, strides)?;
        Ok(Tensor { raw, _borrow: PhantomData })
    }

    /// A view of raw memory, e.g. a CUDA device pointer.
    ///
    /// # Safety
    /// `data` must address every element of (shape, strides) of `dtype` on
    /// the device of the context it is used with, stay valid while the
    /// tensor is used, and (CUDA) until the work is complete on the stream.
    pub unsafe fn from_raw(data: *const c_void, dtype: DType, shape: &[i64], strides: &[i64]) -> Result<Self> {
        let raw = raw_tensor(data as *mut c_void, dtype, shape, strides)?;
        Ok(Tensor { raw, _borrow: PhantomData })
    }

    /// The C descriptor.
    pub fn as_raw(&self) -> &sys::ssu_tensor_t {
        &self.raw
    }
}

impl<'a> TensorMut<'a> {
    /// A dense (row-major) writable view of `data` with `shape`.
    pub fn new<T: Element>(data: &'a mut [T], shape: &[i64]) -> Result<Self> {
        Self::strided(data, shape, &dense_strides(shape))
    }

    /// A writable view with element `strides`.
    pub fn strided<T: Element>(data: &'a mut [T], shape: &[i64], strides: &[i64]) -> Result<Self> {
        let raw = raw_tensor(data.as_mut_ptr() as *mut c_void, T::DTYPE, shape, strides)?;
        check_bounds(data.len(), shape, strides)?;
        Ok(TensorMut { raw, _borrow: PhantomData })
    }

    /// A writable view of raw memory, e.g. a CUDA device pointer.
    ///
    /// # Safety
    /// As [`Tensor::from_raw`], and nothing else may access the memory while
    /// the library writes it.
    pub unsafe fn from_raw(data: *mut c_void, dtype: DType, shape: &[i64], strides: &[i64]) -> Result<Self> {
        let raw = raw_tensor(data, dtype, shape, strides)?;
        Ok(TensorMut { raw, _borrow: PhantomData })
    }

    /// The C descriptor.
    pub fn as_raw(&self) -> &sys::ssu_tensor_t {
        &self.raw
    }
}

// ---------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------

/// Backends a context can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// CUDA if a driver and device are usable, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

impl Backend {
    fn raw(self) -> sys::ssu_backend_t {
        match self {
            Backend::Auto => sys::SSU_BACKEND_AUTO,
            Backend::Cpu => sys::SSU_BACKEND_CPU,
            Backend::Cuda => sys::SSU_BACKEND_CUDA,
        }
    }
    fn from_raw(raw: sys::ssu_backend_t) -> Backend {
        match raw {
            sys::SSU_BACKEND_CPU => Backend::Cpu,
            sys::SSU_BACKEND_CUDA => Backend::Cuda,
            _ => Backend::Auto,
        }
    }
    /// The library's name ("cpu", "cuda", "auto").
    pub fn name(self) -> &'static str {
        unsafe { cstr(sys::ssu_backend_name(self.raw())) }
    }
}

/// One backend on one device; destroyed on drop.
pub struct Context {
    raw: sys::ssu_context_t,
}

// Contexts are immutable after creation and usable from any thread.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Context {
    /// Creates a context. `device_ordinal` must be 0 for the CPU;
    /// `num_threads` 0 uses every hardware thread (CPU backend).
    pub fn new(backend: Backend, device_ordinal: i32, num_threads: i32) -> Result<Context> {
        let mut opts = sys::ssu_context_options_init();
        opts.backend = backend.raw();
        opts.device_ordinal = device_ordinal;
        opts.num_threads = num_threads;
        let mut raw: sys::ssu_context_t = std::ptr::null_mut();
        check(unsafe { sys::ssu_context_create(&opts, &mut raw) })?;
        Ok(Context { raw })
    }

    /// The backend this context runs (never `Auto`).
    pub fn backend(&self) -> Result<Backend> {
        let mut b: sys::ssu_backend_t = 0;
        check(unsafe { sys::ssu_context_get_backend(self.raw, &mut b) })?;
        Ok(Backend::from_raw(b))
    }

    /// A description of the device, e.g. "cpu (2 threads)".
    pub fn device_name(&self) -> &str {
        unsafe { cstr(sys::ssu_context_device_name(self.raw)) }
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::ssu_context_t {
        self.raw
    }

    /// Validates `args` and creates a plan for updates of their kind.
    pub fn plan_update(&self, args: &UpdateArgs<'_>, algorithm: Option<Algorithm>) -> Result<Plan<'_>> {
        let opts = plan_options(algorithm);
        let c_args = args.c_args();
        let mut raw: sys::ssu_plan_t = std::ptr::null_mut();
        check(unsafe { sys::ssu_plan_create_update(self.raw, &c_args.args, &opts, &mut raw) })?;
        Ok(Plan { raw: RawPlan(raw), _ctx: PhantomData })
    }

    /// Validates `args` and creates a plan for Mamba-3 decode steps of
    /// their kind.
    pub fn plan_mamba3_step(
        &self,
        args: &Mamba3StepArgs<'_>,
        algorithm: Option<Algorithm>,
    ) -> Result<Mamba3StepPlan<'_>> {
        let opts = plan_options(algorithm);
        let pool = Box::new(args.pool);
        let mut c = args.args;
        c.pool = &*pool;
        let mut raw: sys::ssu_plan_t = std::ptr::null_mut();
        check(unsafe { sys::ssu_plan_create_mamba3_step(self.raw, &c, &opts, &mut raw) })?;
        Ok(Mamba3StepPlan { raw: RawPlan(raw), _ctx: PhantomData })
    }

    /// Validates `args` and creates a plan for Mamba-3 rotary steps of
    /// their kind.
    pub fn plan_mamba3_rotary(
        &self,
        args: &Mamba3RotaryArgs<'_>,
        algorithm: Option<Algorithm>,
    ) -> Result<Mamba3RotaryPlan<'_>> {
        let opts = plan_options(algorithm);
        let pool = Box::new(args.pool);
        let mut c = args.args;
        c.pool = &*pool;
        let mut raw: sys::ssu_plan_t = std::ptr::null_mut();
        check(unsafe { sys::ssu_plan_create_mamba3_rotary(self.raw, &c, &opts, &mut raw) })?;
        Ok(Mamba3RotaryPlan { raw: RawPlan(raw), _ctx: PhantomData })
    }

    /// Validates `args` and creates a plan for replay (checkpointed decode)
    /// steps of their kind; the plan also runs replay flushes
    /// ([`ReplayPlan::flush`]).
    pub fn plan_replay(&self, args: &ReplayArgs<'_>, algorithm: Option<Algorithm>) -> Result<ReplayPlan<'_>> {
        let opts = plan_options(algorithm);
        let c = args.c_args();
        let mut raw: sys::ssu_plan_t = std::ptr::null_mut();
        check(unsafe { sys::ssu_plan_create_replay(self.raw, &c.args, &opts, &mut raw) })?;
        Ok(ReplayPlan { raw: RawPlan(raw), _ctx: PhantomData })
    }

    /// Plans and runs one Mamba-3 step (see [`Context::update`]).
    pub fn mamba3_step(&self, args: &mut Mamba3StepArgs<'_>) -> Result<()> {
        self.plan_mamba3_step(args, None)?.execute(args)
    }

    /// Plans and runs one Mamba-3 rotary step (see [`Context::update`]).
    pub fn mamba3_rotary(&self, args: &mut Mamba3RotaryArgs<'_>) -> Result<()> {
        self.plan_mamba3_rotary(args, None)?.execute(args)
    }

    /// Adds `increment` (wrapping) to a host seed, as read by updates given
    /// it through [`UpdateArgs::rounding_seed`]. CPU contexts only: a CUDA
    /// context needs a device word ([`Context::advance_seed_raw`]).
    pub fn advance_seed(&self, seed: &std::cell::Cell<u64>, increment: u64) -> Result<()> {
        if self.backend()? != Backend::Cpu {
            return Err(invalid(
                "advance_seed takes a host seed, but this context runs on CUDA; \
                 use advance_seed_raw with a device pointer"
                    .to_string(),
            ));
        }
        check(unsafe { sys::ssu_advance_seed(self.raw, seed.as_ptr(), increment, std::ptr::null_mut()) })
    }

    /// Adds `increment` to the uint64 at `seed` in `stream`'s order (CUDA:
    /// one kernel launch, capturable into a graph; CPU: before returning).
    ///
    /// # Safety
    /// `seed` must be a valid uint64 in the context's memory space (device
    /// memory for CUDA, host memory for the CPU) until the work completes.
    pub unsafe fn advance_seed_raw(&self, seed: *mut u64, increment: u64, stream: Stream) -> Result<()> {
        check(sys::ssu_advance_seed(self.raw, seed, increment, stream.0))
    }

    /// Plans and runs one update (synchronously on the CPU, on the legacy
    /// default stream on CUDA). Serving loops should keep a [`Plan`].
    pub fn update(&self, args: &mut UpdateArgs<'_>) -> Result<()> {
        self.plan_update(args, None)?.execute(args)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe {
            sys::ssu_context_destroy(self.raw);
        }
    }
}

// ---------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------

/// Algorithms a plan can pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    CpuRows,
    CudaSimple,
    /// CUDA: persistent blocks with a two-stage shared-memory ring for the
    /// update's single-token forms (and up to 8 tokens) and the Mamba-3
    /// step; the CUDA backend's AUTO picks it there.
    CudaPipelined,
    /// CUDA: the replay kernels, the only CUDA algorithm of a replay plan
    /// ([`Context::plan_replay`]).
    CudaReplay,
    /// A value this crate does not know.
    Other(i32),
}

impl Algorithm {
    fn raw(self) -> sys::ssu_algorithm_t {
        match self {
            Algorithm::CpuRows => sys::SSU_ALGORITHM_CPU_ROWS,
            Algorithm::CudaSimple => sys::SSU_ALGORITHM_CUDA_SIMPLE,
            Algorithm::CudaPipelined => sys::SSU_ALGORITHM_CUDA_PIPELINED,
            Algorithm::CudaReplay => sys::SSU_ALGORITHM_CUDA_REPLAY,
            Algorithm::Other(v) => v,
        }
    }
    fn from_raw(raw: sys::ssu_algorithm_t) -> Algorithm {
        match raw {
            sys::SSU_ALGORITHM_CPU_ROWS => Algorithm::CpuRows,
            sys::SSU_ALGORITHM_CUDA_SIMPLE => Algorithm::CudaSimple,
            sys::SSU_ALGORITHM_CUDA_PIPELINED => Algorithm::CudaPipelined,
            sys::SSU_ALGORITHM_CUDA_REPLAY => Algorithm::CudaReplay,
            v => Algorithm::Other(v),
        }
    }
}

/// What a plan runs.
#[derive(Clone, Copy, Debug)]
pub struct PlanInfo {
    pub backend: Backend,
    pub algorithm: Algorithm,
    pub algorithm_name: &'static str,
}

/// A CUDA stream handle (`CUstream` / `cudaStream_t`).
#[derive(Clone, Copy, Debug)]
pub struct Stream(sys::ssu_stream_t);

impl Stream {
    /// The legacy default stream.
    pub const DEFAULT: Stream = Stream(std::ptr::null_mut());

    /// Wraps a raw `CUstream`.
    ///
    /// # Safety
    /// `stream` must be a valid stream of the context's device (or NULL)
    /// for as long as it is used.
    pub unsafe fn from_raw(stream: *mut c_void) -> Stream {
        Stream(stream as sys::ssu_stream_t)
    }
}

/// The owned plan handle shared by every plan type: destroyed on drop.
struct RawPlan(sys::ssu_plan_t);

impl RawPlan {
    fn info(&self) -> Result<PlanInfo> {
        let mut info = sys::ssu_plan_info_init();
        check(unsafe { sys::ssu_plan_get_info(self.0, &mut info) })?;
        Ok(PlanInfo {
            backend: Backend::from_raw(info.backend),
            algorithm: Algorithm::from_raw(info.algorithm),
            algorithm_name: unsafe { cstr(info.algorithm_name) },
        })
    }
}

impl Drop for RawPlan {
    fn drop(&mut self) {
        unsafe {
            sys::ssu_plan_destroy(self.0);
        }
    }
}

fn plan_options(algorithm: Option<Algorithm>) -> sys::ssu_plan_options_t {
    let mut opts = sys::ssu_plan_options_init();
    opts.algorithm = algorithm.map_or(sys::SSU_ALGORITHM_AUTO, Algorithm::raw);
    opts
}

/// A validated, immutable update configuration; destroyed on drop.
pub struct Plan<'ctx> {
    raw: RawPlan,
    _ctx: PhantomData<&'ctx Context>,
}

unsafe impl Send for Plan<'_> {}
unsafe impl Sync for Plan<'_> {}

impl Plan<'_> {
    /// Backend and algorithm of the plan.
    pub fn info(&self) -> Result<PlanInfo> {
        self.raw.info()
    }

    /// Runs the update on `args` (which must fit the plan) on the legacy
    /// default stream. The CPU backend runs it synchronously.
    pub fn execute(&self, args: &mut UpdateArgs<'_>) -> Result<()> {
        self.execute_on(args, Stream::DEFAULT)
    }

    /// Runs the update on a CUDA stream (asynchronously). The borrowed host
    /// slices in `args` must not be used by a CUDA backend; device memory
    /// given through `from_raw` must stay valid until the stream is done.
    pub fn execute_on(&self, args: &mut UpdateArgs<'_>, stream: Stream) -> Result<()> {
        let c_args = args.c_args();
        check(unsafe { sys::ssu_plan_execute_update(self.raw.0, &c_args.args, stream.0) })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::ssu_plan_t {
        self.raw.0
    }
}

/// A validated Mamba-3 decode-step configuration; destroyed on drop.
pub struct Mamba3StepPlan<'ctx> {
    raw: RawPlan,
    _ctx: PhantomData<&'ctx Context>,
}

unsafe impl Send for Mamba3StepPlan<'_> {}
unsafe impl Sync for Mamba3StepPlan<'_> {}

impl Mamba3StepPlan<'_> {
    /// Backend and algorithm of the plan.
    pub fn info(&self) -> Result<PlanInfo> {
        self.raw.info()
    }

    /// Runs the step on `args` (which must fit the plan) on the legacy
    /// default stream; synchronously on the CPU.
    pub fn execute(&self, args: &mut Mamba3StepArgs<'_>) -> Result<()> {
        self.execute_on(args, Stream::DEFAULT)
    }

    /// Runs the step on a CUDA stream (see [`Plan::execute_on`]).
    pub fn execute_on(&self, args: &mut Mamba3StepArgs<'_>, stream: Stream) -> Result<()> {
        let pool = Box::new(args.pool);
        let mut c = args.args;
        c.pool = &*pool;
        check(unsafe { sys::ssu_plan_execute_mamba3_step(self.raw.0, &c, stream.0) })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::ssu_plan_t {
        self.raw.0
    }
}

/// A validated Mamba-3 rotary-step configuration; destroyed on drop.
pub struct Mamba3RotaryPlan<'ctx> {
    raw: RawPlan,
    _ctx: PhantomData<&'ctx Context>,
}

unsafe impl Send for Mamba3RotaryPlan<'_> {}
unsafe impl Sync for Mamba3RotaryPlan<'_> {}

impl Mamba3RotaryPlan<'_> {
    /// Backend and algorithm of the plan.
    pub fn info(&self) -> Result<PlanInfo> {
        self.raw.info()
    }

    /// Runs the rotary step on `args` (which must fit the plan) on the
    /// legacy default stream; synchronously on the CPU.
    pub fn execute(&self, args: &mut Mamba3RotaryArgs<'_>) -> Result<()> {
        self.execute_on(args, Stream::DEFAULT)
    }

    /// Runs the rotary step on a CUDA stream (see [`Plan::execute_on`]).
    pub fn execute_on(&self, args: &mut Mamba3RotaryArgs<'_>, stream: Stream) -> Result<()> {
        let pool = Box::new(args.pool);
        let mut c = args.args;
        c.pool = &*pool;
        check(unsafe { sys::ssu_plan_execute_mamba3_rotary(self.raw.0, &c, stream.0) })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::ssu_plan_t {
        self.raw.0
    }
}

/// A validated replay (checkpointed decode) configuration: runs replay
/// steps and replay flushes of its kind; destroyed on drop.
pub struct ReplayPlan<'ctx> {
    raw: RawPlan,
    _ctx: PhantomData<&'ctx Context>,
}

unsafe impl Send for ReplayPlan<'_> {}
unsafe impl Sync for ReplayPlan<'_> {}

impl ReplayPlan<'_> {
    /// Backend and algorithm of the plan.
    pub fn info(&self) -> Result<PlanInfo> {
        self.raw.info()
    }

    /// Runs a replay step on `args` (which must fit the plan) on the legacy
    /// default stream; synchronously on the CPU. Nothing is written when it
    /// fails (the CPU backend checks the counters and `num_accepted` first).
    pub fn execute(&self, args: &mut ReplayArgs<'_>) -> Result<()> {
        self.execute_on(args, Stream::DEFAULT)
    }

    /// Runs a replay step on a CUDA stream (see [`Plan::execute_on`]).
    pub fn execute_on(&self, args: &mut ReplayArgs<'_>, stream: Stream) -> Result<()> {
        let c = args.c_args();
        check(unsafe { sys::ssu_plan_execute_replay(self.raw.0, &c.args, stream.0) })
    }

    /// Folds the rings of the listed slots into their checkpoints and zeroes
    /// their counters, on the legacy default stream.
    pub fn flush(&self, args: &mut ReplayFlushArgs<'_>) -> Result<()> {
        self.flush_on(args, Stream::DEFAULT)
    }

    /// Runs a replay flush on a CUDA stream (see [`Plan::execute_on`]).
    pub fn flush_on(&self, args: &mut ReplayFlushArgs<'_>, stream: Stream) -> Result<()> {
        let pool = Box::new(args.pool);
        let ring = Box::new(args.ring);
        let mut c = args.args;
        c.pool = &*pool;
        c.ring = &*ring;
        check(unsafe { sys::ssu_plan_execute_replay_flush(self.raw.0, &c, stream.0) })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::ssu_plan_t {
        self.raw.0
    }
}

// ---------------------------------------------------------------------------
// Update arguments
// ---------------------------------------------------------------------------

/// The arguments of a selective state update (see `ssu_update_args_t` in
/// ssu.h for shapes and forms). Required tensors are given to [`new`];
/// optional ones and flags are added with the builder methods.
///
/// [`new`]: UpdateArgs::new
pub struct UpdateArgs<'a> {
    pool: sys::ssu_state_pool_t,
    args: sys::ssu_update_args_t,
    _borrow: PhantomData<&'a mut ()>,
}

/// The C structs with the pool pointer set; lives on the caller's stack for
/// the duration of one library call.
struct CArgs {
    #[allow(dead_code)]
    pool: Box<sys::ssu_state_pool_t>,
    args: sys::ssu_update_args_t,
}

impl<'a> UpdateArgs<'a> {
    /// The required tensors: the state pool `(S, H, P, N)`, x, dt, A, B, C
    /// and out.
    pub fn new(
        state: TensorMut<'a>,
        x: Tensor<'a>,
        dt: Tensor<'a>,
        a: Tensor<'a>,
        b: Tensor<'a>,
        c: Tensor<'a>,
        out: TensorMut<'a>,
    ) -> UpdateArgs<'a> {
        let mut pool = sys::ssu_state_pool_init();
        pool.state = state.raw;
        let mut args = sys::ssu_update_args_init();
        args.x = x.raw;
        args.dt = dt.raw;
        args.A = a.raw;
        args.B = b.raw;
        args.C = c.raw;
        args.out = out.raw;
        UpdateArgs { pool, args, _borrow: PhantomData }
    }

    fn c_args(&self) -> CArgs {
        // The pool struct is boxed so that its address is stable while the
        // library reads it, without making UpdateArgs self-referential.
        let pool = Box::new(self.pool);
        let mut args = self.args;
        args.pool = &*pool;
        CArgs { pool, args }
    }

    /// Skip connection weight D: `(H,)` or `(H, P)`.
    pub fn d(mut self, t: Tensor<'a>) -> Self {
        self.args.D = t.raw;
        self
    }
    /// dt bias: `(H,)` or `(H, P)`.
    pub fn dt_bias(mut self, t: Tensor<'a>) -> Self {
        self.args.dt_bias = t.raw;
        self
    }
    /// Gate z, shaped like x.
    pub fn z(mut self, t: Tensor<'a>) -> Self {
        self.args.z = t.raw;
        self
    }
    /// Source slot indices `(Bt,)` or `(Bt, T)`, int32 or int64.
    pub fn src_index(mut self, t: Tensor<'a>) -> Self {
        self.args.src_index = t.raw;
        self
    }
    /// Destination slot indices `(Bt,)` or `(Bt, T)`.
    pub fn dst_index(mut self, t: Tensor<'a>) -> Self {
        self.args.dst_index = t.raw;
        self
    }
    /// Varlen form: `cu_seqlens (Bt+1,)` and the longest allowed length.
    pub fn varlen(mut self, cu_seqlens: Tensor<'a>, max_tokens: i64) -> Self {
        self.args.cu_seqlens = cu_seqlens.raw;
        self.args.max_tokens = max_tokens;
        self
    }
    /// Accepted token counts `(Bt,)` (needs a 2-D src index).
    pub fn num_accepted_tokens(mut self, t: Tensor<'a>) -> Self {
        self.args.num_accepted_tokens = t.raw;
        self
    }
    /// Per-token state buffer `(I, T, H, P, N)` and its optional index `(Bt,)`.
    pub fn intermediate_states(mut self, states: TensorMut<'a>, index: Option<Tensor<'a>>) -> Self {
        self.args.intermediate_states = states.raw;
        if let Some(i) = index {
            self.args.intermediate_index = i.raw;
        }
        self
    }
    /// The decode scales `(S, H, P)` f32 of an int16 state pool: required
    /// with an i16 `state`, refused otherwise. Every store rewrites the
    /// stored rows' scales.
    pub fn state_scale(mut self, t: TensorMut<'a>) -> Self {
        self.pool.state_scale = t.raw;
        self
    }
    /// The scales `(I, T, H, P)` f32 of an int16 intermediate buffer
    /// (required with an i16 state and intermediate states).
    pub fn intermediate_scales(mut self, t: TensorMut<'a>) -> Self {
        self.args.intermediate_scales = t.raw;
        self
    }
    /// Stochastic rounding of f16 / bf16 state stores with this host seed
    /// (CPU backend), read when the update runs: advance it between calls
    /// with [`Context::advance_seed`].
    pub fn rounding_seed(mut self, seed: &'a std::cell::Cell<u64>) -> Self {
        self.args.rounding_seed = seed.as_ptr();
        self
    }
    /// Stochastic rounding with a seed in raw memory (a device word for
    /// the CUDA backend), read when the kernel runs.
    ///
    /// # Safety
    /// `seed` must stay valid until the work that reads it is complete.
    pub unsafe fn rounding_seed_raw(mut self, seed: *const u64) -> Self {
        self.args.rounding_seed = seed;
        self
    }
    /// Philox rounds of stochastic rounding, 1..=32 (0, the default, means 10).
    pub fn rounding_rounds(mut self, rounds: u32) -> Self {
        self.args.rounding_rounds = rounds;
        self
    }
    /// dt = softplus(dt + dt_bias).
    pub fn dt_softplus(mut self, on: bool) -> Self {
        self.set_flag(sys::SSU_UPDATE_DT_SOFTPLUS as u32, on);
        self
    }
    /// Never write the state pool.
    pub fn disable_state_update(mut self, on: bool) -> Self {
        self.set_flag(sys::SSU_UPDATE_DISABLE_STATE_UPDATE as u32, on);
        self
    }
    /// An additional slot value that marks padding (default -1).
    pub fn pad_slot_id(mut self, id: i64) -> Self {
        self.args.pad_slot_id = id;
        self
    }
    /// A device word the CUDA backend ORs `SSU_ERROR_BIT_*` into.
    ///
    /// # Safety
    /// `word` must be a device pointer valid until the work completes.
    pub unsafe fn error_word(mut self, word: *mut u32) -> Self {
        self.args.error_word = word;
        self
    }
    /// Raw flag bits (for flags this crate does not name yet).
    pub fn flags(mut self, flags: u32) -> Self {
        self.args.flags = flags;
        self
    }

    fn set_flag(&mut self, bit: u32, on: bool) {
        set_bit(&mut self.args.flags, bit, on);
    }
}

fn set_bit(flags: &mut u32, bit: u32, on: bool) {
    if on {
        *flags |= bit;
    } else {
        *flags &= !bit;
    }
}

// ---------------------------------------------------------------------------
// Mamba-3 step arguments
// ---------------------------------------------------------------------------

/// The arguments of a Mamba-3 decode step (see `ssu_mamba3_step_args_t` in
/// ssu.h): pools `state (S, H, P, N)`, `prev_B (S, R, H, N)`,
/// `prev_x (S, H, P)`; per call `A, dt, trap (Bt, H)`, `B, C (Bt, R, H, N)`,
/// `x (Bt, H, P)`, `xproj (R, H, P)` and `out` (`(Bt, H, P)` with
/// `outproj`, `(Bt, R, H, P)` without).
pub struct Mamba3StepArgs<'a> {
    pool: sys::ssu_state_pool_t,
    args: sys::ssu_mamba3_step_args_t,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> Mamba3StepArgs<'a> {
    /// The required pools and tensors.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        state: TensorMut<'a>,
        prev_b: TensorMut<'a>,
        prev_x: TensorMut<'a>,
        a: Tensor<'a>,
        dt: Tensor<'a>,
        trap: Tensor<'a>,
        b: Tensor<'a>,
        c: Tensor<'a>,
        x: Tensor<'a>,
        xproj: Tensor<'a>,
        out: TensorMut<'a>,
    ) -> Mamba3StepArgs<'a> {
        let mut pool = sys::ssu_state_pool_init();
        pool.state = state.raw;
        pool.prev_B = prev_b.raw;
        pool.prev_x = prev_x.raw;
        let mut args = sys::ssu_mamba3_step_args_init();
        args.A = a.raw;
        args.dt = dt.raw;
        args.trap = trap.raw;
        args.B = b.raw;
        args.C = c.raw;
        args.x = x.raw;
        args.xproj = xproj.raw;
        args.out = out.raw;
        Mamba3StepArgs { pool, args, _borrow: PhantomData }
    }
    /// Skip weight D `(H,)`.
    pub fn d(mut self, t: Tensor<'a>) -> Self {
        self.args.D = t.raw;
        self
    }
    /// Gate z `(Bt, H, P)` with its projection `zproj (R, H, P)`; needs
    /// [`outproj`](Self::outproj).
    pub fn z(mut self, z: Tensor<'a>, zproj: Tensor<'a>) -> Self {
        self.args.z = z.raw;
        self.args.zproj = zproj.raw;
        self
    }
    /// Output projection `(R, H, P)`: sums the ranks into `out (Bt, H, P)`.
    pub fn outproj(mut self, t: Tensor<'a>) -> Self {
        self.args.outproj = t.raw;
        self
    }
    /// Source slots `(Bt,)`, int32 or int64 (absent: slot b).
    pub fn src_index(mut self, t: Tensor<'a>) -> Self {
        self.args.src_index = t.raw;
        self
    }
    /// Destination slots `(Bt,)` (absent: the source slots).
    pub fn dst_index(mut self, t: Tensor<'a>) -> Self {
        self.args.dst_index = t.raw;
        self
    }
    /// Store this step's B and x to `prev_B` / `prev_x` of the dst slots.
    pub fn update_prev(mut self, on: bool) -> Self {
        set_bit(&mut self.args.flags, sys::SSU_MAMBA3_UPDATE_PREV as u32, on);
        self
    }
    /// An additional slot value that marks padding (default -1).
    pub fn pad_slot_id(mut self, id: i64) -> Self {
        self.args.pad_slot_id = id;
        self
    }
    /// A device word the CUDA backend ORs `SSU_ERROR_BIT_*` into.
    ///
    /// # Safety
    /// `word` must be a device pointer valid until the work completes.
    pub unsafe fn error_word(mut self, word: *mut u32) -> Self {
        self.args.error_word = word;
        self
    }
    /// Raw flag bits.
    pub fn flags(mut self, flags: u32) -> Self {
        self.args.flags = flags;
        self
    }
}

// ---------------------------------------------------------------------------
// Mamba-3 rotary arguments
// ---------------------------------------------------------------------------

/// The arguments of a Mamba-3 rotary step (see `ssu_mamba3_rotary_args_t`
/// in ssu.h): the pool `angle_state (S, H, Sa)` f32, `angle_rate (Bt, H, Sa)`,
/// `dt (Bt, H)`, `q, k (Bt, R, H, N)` and the outputs `q_out`, `k_out`.
pub struct Mamba3RotaryArgs<'a> {
    pool: sys::ssu_state_pool_t,
    args: sys::ssu_mamba3_rotary_args_t,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> Mamba3RotaryArgs<'a> {
    /// Rotates `q`, `k` into separate outputs `q_out`, `k_out`.
    pub fn new(
        angle_state: TensorMut<'a>,
        angle_rate: Tensor<'a>,
        dt: Tensor<'a>,
        q: Tensor<'a>,
        k: Tensor<'a>,
        q_out: TensorMut<'a>,
        k_out: TensorMut<'a>,
    ) -> Mamba3RotaryArgs<'a> {
        let mut pool = sys::ssu_state_pool_init();
        pool.angle_state = angle_state.raw;
        let mut args = sys::ssu_mamba3_rotary_args_init();
        args.angle_rate = angle_rate.raw;
        args.dt = dt.raw;
        args.q = q.raw;
        args.k = k.raw;
        args.q_out = q_out.raw;
        args.k_out = k_out.raw;
        Mamba3RotaryArgs { pool, args, _borrow: PhantomData }
    }
    /// Rotates `q` and `k` in place.
    pub fn in_place(
        angle_state: TensorMut<'a>,
        angle_rate: Tensor<'a>,
        dt: Tensor<'a>,
        q: TensorMut<'a>,
        k: TensorMut<'a>,
    ) -> Mamba3RotaryArgs<'a> {
        let (qr, kr) = (q.raw, k.raw);
        let mut pool = sys::ssu_state_pool_init();
        pool.angle_state = angle_state.raw;
        let mut args = sys::ssu_mamba3_rotary_args_init();
        args.angle_rate = angle_rate.raw;
        args.dt = dt.raw;
        args.q = qr;
        args.k = kr;
        args.q_out = qr;
        args.k_out = kr;
        Mamba3RotaryArgs { pool, args, _borrow: PhantomData }
    }
    /// Bias `(R, H, N)` added to q before the rotation.
    pub fn q_bias(mut self, t: Tensor<'a>) -> Self {
        self.args.q_bias = t.raw;
        self
    }
    /// Bias `(R, H, N)` added to k before the rotation.
    pub fn k_bias(mut self, t: Tensor<'a>) -> Self {
        self.args.k_bias = t.raw;
        self
    }
    /// Rotate the pairs `(i, i + N/2)` (MIMO convention) instead of
    /// `(2i, 2i + 1)`.
    pub fn halved(mut self, on: bool) -> Self {
        set_bit(&mut self.args.flags, sys::SSU_MAMBA3_ROTARY_HALVED as u32, on);
        self
    }
    /// Source slots `(Bt,)`, int32 or int64 (absent: slot b).
    pub fn src_index(mut self, t: Tensor<'a>) -> Self {
        self.args.src_index = t.raw;
        self
    }
    /// Destination slots `(Bt,)` (absent: the source slots).
    pub fn dst_index(mut self, t: Tensor<'a>) -> Self {
        self.args.dst_index = t.raw;
        self
    }
    /// An additional slot value that marks padding (default -1).
    pub fn pad_slot_id(mut self, id: i64) -> Self {
        self.args.pad_slot_id = id;
        self
    }
    /// A device word the CUDA backend ORs `SSU_ERROR_BIT_*` into.
    ///
    /// # Safety
    /// `word` must be a device pointer valid until the work completes.
    pub unsafe fn error_word(mut self, word: *mut u32) -> Self {
        self.args.error_word = word;
        self
    }
    /// Raw flag bits.
    pub fn flags(mut self, flags: u32) -> Self {
        self.args.flags = flags;
        self
    }
}

// ---------------------------------------------------------------------------
// Replay (checkpointed decode) arguments
// ---------------------------------------------------------------------------

/// The ring buffers and counters of a replay pool (see `ssu_replay_ring_t`
/// in ssu.h): `x (S, L, H, P)` and `B (S, L, G, N)` of the input dtype,
/// `dt (S, L, H)` f32 (`(S, L, H, P)` when the step size is per channel),
/// `committed` and `pending (S,)` i32, both 0 for a fresh slot.
pub struct ReplayRing<'a> {
    raw: sys::ssu_replay_ring_t,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> ReplayRing<'a> {
    /// The ring tensors; L is `x`'s second axis.
    pub fn new(
        x: TensorMut<'a>,
        b: TensorMut<'a>,
        dt: TensorMut<'a>,
        committed: TensorMut<'a>,
        pending: TensorMut<'a>,
    ) -> ReplayRing<'a> {
        let mut raw = sys::ssu_replay_ring_init();
        raw.x = x.raw;
        raw.B = b.raw;
        raw.dt = dt.raw;
        raw.committed = committed.raw;
        raw.pending = pending.raw;
        ReplayRing { raw, _borrow: PhantomData }
    }

    /// The C descriptor.
    pub fn as_raw(&self) -> &sys::ssu_replay_ring_t {
        &self.raw
    }
}

/// The arguments of a replay step (see `ssu_replay_args_t` in ssu.h): the
/// update's tensors in their single-token, multi-token or varlen form
/// (`T <= L`), the checkpoint pool and its ring. Required tensors are given
/// to [`new`](ReplayArgs::new); optional ones and flags are added with the
/// builder methods.
pub struct ReplayArgs<'a> {
    pool: sys::ssu_state_pool_t,
    ring: sys::ssu_replay_ring_t,
    args: sys::ssu_replay_args_t,
    _borrow: PhantomData<&'a mut ()>,
}

/// The C structs with the pool and ring pointers set; lives on the caller's
/// stack for the duration of one library call.
struct CReplayArgs {
    #[allow(dead_code)]
    pool: Box<sys::ssu_state_pool_t>,
    #[allow(dead_code)]
    ring: Box<sys::ssu_replay_ring_t>,
    args: sys::ssu_replay_args_t,
}

impl<'a> ReplayArgs<'a> {
    /// The required tensors: the checkpoint pool `(S, H, P, N)`, its ring,
    /// x, dt, A, B, C and out.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        state: TensorMut<'a>,
        ring: ReplayRing<'a>,
        x: Tensor<'a>,
        dt: Tensor<'a>,
        a: Tensor<'a>,
        b: Tensor<'a>,
        c: Tensor<'a>,
        out: TensorMut<'a>,
    ) -> ReplayArgs<'a> {
        let mut pool = sys::ssu_state_pool_init();
        pool.state = state.raw;
        let mut args = sys::ssu_replay_args_init();
        args.x = x.raw;
        args.dt = dt.raw;
        args.A = a.raw;
        args.B = b.raw;
        args.C = c.raw;
        args.out = out.raw;
        ReplayArgs { pool, ring: ring.raw, args, _borrow: PhantomData }
    }

    fn c_args(&self) -> CReplayArgs {
        // Boxed so that the addresses are stable while the library reads
        // them (see UpdateArgs::c_args).
        let pool = Box::new(self.pool);
        let ring = Box::new(self.ring);
        let mut args = self.args;
        args.pool = &*pool;
        args.ring = &*ring;
        CReplayArgs { pool, ring, args }
    }

    /// Skip connection weight D: `(H,)` or `(H, P)`.
    pub fn d(mut self, t: Tensor<'a>) -> Self {
        self.args.D = t.raw;
        self
    }
    /// dt bias: `(H,)` or `(H, P)` (a per-channel bias needs a per-channel
    /// dt ring).
    pub fn dt_bias(mut self, t: Tensor<'a>) -> Self {
        self.args.dt_bias = t.raw;
        self
    }
    /// Gate z, shaped like x.
    pub fn z(mut self, t: Tensor<'a>) -> Self {
        self.args.z = t.raw;
        self
    }
    /// Slots `(Bt,)`, int32 or int64 (absent: slot b). Padding entries
    /// touch nothing of their slot and get zero outputs.
    pub fn src_index(mut self, t: Tensor<'a>) -> Self {
        self.args.src_index = t.raw;
        self
    }
    /// Varlen form: `cu_seqlens (Bt+1,)` and the longest allowed length.
    pub fn varlen(mut self, cu_seqlens: Tensor<'a>, max_tokens: i64) -> Self {
        self.args.cu_seqlens = cu_seqlens.raw;
        self.args.max_tokens = max_tokens;
        self
    }
    /// How many of the previous call's pending tokens each sequence keeps
    /// `(Bt,)`, int32 or int64 (speculative decoding); absent: all of them.
    pub fn num_accepted(mut self, t: Tensor<'a>) -> Self {
        self.args.num_accepted = t.raw;
        self
    }
    /// The decode scales `(S, H, P)` f32 of an int16 checkpoint pool.
    pub fn state_scale(mut self, t: TensorMut<'a>) -> Self {
        self.pool.state_scale = t.raw;
        self
    }
    /// Stochastic rounding of f16 / bf16 checkpoint stores with this host
    /// seed (CPU backend), read when the step runs.
    pub fn rounding_seed(mut self, seed: &'a std::cell::Cell<u64>) -> Self {
        self.args.rounding_seed = seed.as_ptr();
        self
    }
    /// Stochastic rounding with a seed in raw memory (a device word for
    /// the CUDA backend), read when the kernel runs.
    ///
    /// # Safety
    /// `seed` must stay valid until the work that reads it is complete.
    pub unsafe fn rounding_seed_raw(mut self, seed: *const u64) -> Self {
        self.args.rounding_seed = seed;
        self
    }
    /// Philox rounds of stochastic rounding, 1..=32 (0, the default, means 10).
    pub fn rounding_rounds(mut self, rounds: u32) -> Self {
        self.args.rounding_rounds = rounds;
        self
    }
    /// dt = softplus(dt + dt_bias).
    pub fn dt_softplus(mut self, on: bool) -> Self {
        set_bit(&mut self.args.flags, sys::SSU_UPDATE_DT_SOFTPLUS as u32, on);
        self
    }
    /// Write only the outputs: no flush, no append, counters untouched.
    pub fn disable_state_update(mut self, on: bool) -> Self {
        set_bit(&mut self.args.flags, sys::SSU_UPDATE_DISABLE_STATE_UPDATE as u32, on);
        self
    }
    /// An additional slot value that marks padding (default -1).
    pub fn pad_slot_id(mut self, id: i64) -> Self {
        self.args.pad_slot_id = id;
        self
    }
    /// A device word the CUDA backend ORs `SSU_ERROR_BIT_*` into
    /// (`SSU_ERROR_BIT_ACCEPTED`, `SSU_ERROR_BIT_COUNTERS` among them).
    ///
    /// # Safety
    /// `word` must be a device pointer valid until the work completes.
    pub unsafe fn error_word(mut self, word: *mut u32) -> Self {
        self.args.error_word = word;
        self
    }
    /// Raw flag bits.
    pub fn flags(mut self, flags: u32) -> Self {
        self.args.flags = flags;
        self
    }
}

/// The arguments of a replay flush (see `ssu_replay_flush_args_t` in
/// ssu.h): for each listed slot, commit (all pending tokens, or
/// `num_accepted`), store the logical state to the checkpoint, zero the
/// counters. Pool and ring as for the plan; `A` as for the plan.
pub struct ReplayFlushArgs<'a> {
    pool: sys::ssu_state_pool_t,
    ring: sys::ssu_replay_ring_t,
    args: sys::ssu_replay_flush_args_t,
    _borrow: PhantomData<&'a mut ()>,
}

impl<'a> ReplayFlushArgs<'a> {
    /// The checkpoint pool `(S, H, P, N)`, its ring, A, and the slots to
    /// flush `src_index (K,)` int32 or int64 (padding entries are skipped).
    pub fn new(
        state: TensorMut<'a>,
        ring: ReplayRing<'a>,
        a: Tensor<'a>,
        src_index: Tensor<'a>,
    ) -> ReplayFlushArgs<'a> {
        let mut pool = sys::ssu_state_pool_init();
        pool.state = state.raw;
        let mut args = sys::ssu_replay_flush_args_init();
        args.A = a.raw;
        args.src_index = src_index.raw;
        ReplayFlushArgs { pool, ring: ring.raw, args, _borrow: PhantomData }
    }
    /// How many pending tokens each listed slot keeps `(K,)`; absent: all.
    pub fn num_accepted(mut self, t: Tensor<'a>) -> Self {
        self.args.num_accepted = t.raw;
        self
    }
    /// The decode scales `(S, H, P)` f32 of an int16 checkpoint pool.
    pub fn state_scale(mut self, t: TensorMut<'a>) -> Self {
        self.pool.state_scale = t.raw;
        self
    }
    /// The host seed of a plan that rounds stochastically (CPU backend);
    /// required exactly when the plan does.
    pub fn rounding_seed(mut self, seed: &'a std::cell::Cell<u64>) -> Self {
        self.args.rounding_seed = seed.as_ptr();
        self
    }
    /// A seed in raw memory (a device word for the CUDA backend).
    ///
    /// # Safety
    /// `seed` must stay valid until the work that reads it is complete.
    pub unsafe fn rounding_seed_raw(mut self, seed: *const u64) -> Self {
        self.args.rounding_seed = seed;
        self
    }
    /// Philox rounds, as given to the plan (0 means 10).
    pub fn rounding_rounds(mut self, rounds: u32) -> Self {
        self.args.rounding_rounds = rounds;
        self
    }
    /// An additional slot value that marks padding (default -1).
    pub fn pad_slot_id(mut self, id: i64) -> Self {
        self.args.pad_slot_id = id;
        self
    }
    /// A device word the CUDA backend ORs `SSU_ERROR_BIT_*` into.
    ///
    /// # Safety
    /// `word` must be a device pointer valid until the work completes.
    pub unsafe fn error_word(mut self, word: *mut u32) -> Self {
        self.args.error_word = word;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_codes_round_trip() {
        let known = [
            (Algorithm::CpuRows, sys::SSU_ALGORITHM_CPU_ROWS),
            (Algorithm::CudaSimple, sys::SSU_ALGORITHM_CUDA_SIMPLE),
            (Algorithm::CudaPipelined, sys::SSU_ALGORITHM_CUDA_PIPELINED),
            (Algorithm::CudaReplay, sys::SSU_ALGORITHM_CUDA_REPLAY),
        ];
        for (alg, raw) in known {
            assert_eq!(alg.raw(), raw, "{alg:?}");
            assert_eq!(Algorithm::from_raw(raw), alg, "{raw}");
        }
        assert_eq!(sys::SSU_ALGORITHM_CUDA_PIPELINED, 4);
        assert_eq!(sys::SSU_ALGORITHM_CUDA_REPLAY, 5);
        // 3 (cuda_tma until 0.2) is no algorithm now.
        assert_eq!(Algorithm::from_raw(3), Algorithm::Other(3));
        assert_eq!(Algorithm::from_raw(1000), Algorithm::Other(1000));
        assert_eq!(Algorithm::Other(1000).raw(), 1000);
        assert_eq!(plan_options(None).algorithm, sys::SSU_ALGORITHM_AUTO);
        assert_eq!(
            plan_options(Some(Algorithm::CudaPipelined)).algorithm,
            sys::SSU_ALGORITHM_CUDA_PIPELINED
        );
    }
}
