//! A serving-style decode loop over a libssu state pool (Rust version; see
//! examples/README.md).
//!
//! Requests join and leave BATCH batch entries over the steps; each request
//! owns a pool slot while it runs, and idle entries are padding (slot -1).
//! Inputs come from splitmix64, so the C, C++, Rust and Python versions feed
//! the library bit-identical data and print the same checksum of the pool.
//!
//!     cargo run --release -- [steps]          SSU_BACKEND=cuda cargo run --release
//!
//! With SSU_BACKEND=cuda the buffers live in device memory, allocated through
//! the CUDA driver API opened with dlopen (no CUDA headers, libraries or
//! crates needed at build time), exactly as the C version does.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use ssu::{Backend, Context, Element, Tensor, TensorMut, UpdateArgs};

const SLOTS: usize = 16;
const BATCH: usize = 8;
const H: usize = 8;
const P: usize = 64;
const N: usize = 16;
const G: usize = 1;
const MAX_LEN: u64 = 24;
const SLOT_ELEMS: usize = H * P * N;

// ---- deterministic inputs ---------------------------------------------------

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A value in [-1, 1) on a 2^-23 grid: exact in f32 and f64.
    fn sym(&mut self) -> f64 {
        (self.next() >> 40) as f64 / 8_388_608.0 - 1.0
    }
    fn fill(&mut self, v: &mut [f32], scale: f64) {
        for e in v {
            *e = (self.sym() * scale) as f32;
        }
    }
}

fn fnv1a64(data: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in data {
        for b in v.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

fn dims(d: &[usize]) -> Vec<i64> {
    d.iter().map(|&v| v as i64).collect()
}

fn dense_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

type Error = Box<dyn std::error::Error>;

// ---- memory: host, or CUDA device memory through the driver API ------------

/// The few CUDA driver entry points the example needs, found with dlopen and
/// dlsym in libcuda.so.1 (no link against CUDA).
mod cuda {
    use std::ffi::{c_void, CStr, CString};
    use std::os::raw::{c_char, c_int, c_uint};

    // In libc since glibc 2.34 (before that, libdl, which Rust's std links
    // on linux-gnu anyway).
    extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        fn dlerror() -> *mut c_char;
    }
    const RTLD_NOW: c_int = 2;

    /// `CUresult`: 0 is success.
    type CuResult = c_int;
    /// `CUdeviceptr` (unsigned long long on 64-bit hosts).
    pub type DevicePtr = u64;

    pub struct Driver {
        mem_alloc: unsafe extern "C" fn(*mut DevicePtr, usize) -> CuResult,
        memcpy_htod: unsafe extern "C" fn(DevicePtr, *const c_void, usize) -> CuResult,
        memcpy_dtoh: unsafe extern "C" fn(*mut c_void, DevicePtr, usize) -> CuResult,
        mem_free: unsafe extern "C" fn(DevicePtr) -> CuResult,
        ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    }

    fn last_dl_error() -> String {
        // SAFETY: dlerror returns NULL or a NUL-terminated message.
        let msg = unsafe { dlerror() };
        if msg.is_null() {
            String::new()
        } else {
            format!(" ({})", unsafe { CStr::from_ptr(msg) }.to_string_lossy())
        }
    }

    /// Looks up `name` and reinterprets it as the function pointer type `F`.
    ///
    /// # Safety
    /// `F` must be an `extern "C" fn` type matching the symbol's signature.
    unsafe fn load<F: Copy>(lib: *mut c_void, name: &str) -> Result<F, String> {
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        let c_name = CString::new(name).expect("a symbol name without NUL");
        let sym = dlsym(lib, c_name.as_ptr());
        if sym.is_null() {
            return Err(format!("libcuda.so.1 lacks the driver API entry point {name}{}", last_dl_error()));
        }
        Ok(std::mem::transmute_copy::<*mut c_void, F>(&sym))
    }

    impl Driver {
        /// Opens the driver and makes device 0's primary context (the one
        /// libssu retains) current on this thread.
        pub fn init() -> Result<Driver, String> {
            // SAFETY: each symbol is given its documented driver API type.
            unsafe {
                let lib_name = CString::new("libcuda.so.1").expect("a name without NUL");
                let lib = dlopen(lib_name.as_ptr(), RTLD_NOW);
                if lib.is_null() {
                    return Err(format!("SSU_BACKEND=cuda but libcuda.so.1 cannot be loaded{}", last_dl_error()));
                }
                let cu_init: unsafe extern "C" fn(c_uint) -> CuResult = load(lib, "cuInit")?;
                let device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult = load(lib, "cuDeviceGet")?;
                let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult =
                    load(lib, "cuDevicePrimaryCtxRetain")?;
                let set_current: unsafe extern "C" fn(*mut c_void) -> CuResult = load(lib, "cuCtxSetCurrent")?;
                let driver = Driver {
                    mem_alloc: load(lib, "cuMemAlloc_v2")?,
                    memcpy_htod: load(lib, "cuMemcpyHtoD_v2")?,
                    memcpy_dtoh: load(lib, "cuMemcpyDtoH_v2")?,
                    mem_free: load(lib, "cuMemFree_v2")?,
                    ctx_synchronize: load(lib, "cuCtxSynchronize")?,
                };
                let mut dev: c_int = 0;
                let mut ctx: *mut c_void = std::ptr::null_mut();
                if cu_init(0) != 0
                    || device_get(&mut dev, 0) != 0
                    || retain(&mut ctx, dev) != 0
                    || set_current(ctx) != 0
                {
                    return Err("cannot make CUDA device 0's primary context current".into());
                }
                Ok(driver)
            }
        }

        pub fn alloc(&self, bytes: usize) -> Result<DevicePtr, String> {
            let mut p: DevicePtr = 0;
            match unsafe { (self.mem_alloc)(&mut p, bytes) } {
                0 => Ok(p),
                r => Err(format!("cuMemAlloc failed (CUresult {r})")),
            }
        }

        /// # Safety
        /// `dst` must be a device allocation of at least `bytes` bytes and
        /// `src` must address `bytes` readable bytes.
        pub unsafe fn htod(&self, dst: DevicePtr, src: *const c_void, bytes: usize) -> Result<(), String> {
            match (self.memcpy_htod)(dst, src, bytes) {
                0 => Ok(()),
                r => Err(format!("cuMemcpyHtoD failed (CUresult {r})")),
            }
        }

        /// # Safety
        /// `src` must be a device allocation of at least `bytes` bytes and
        /// `dst` must address `bytes` writable bytes.
        pub unsafe fn dtoh(&self, dst: *mut c_void, src: DevicePtr, bytes: usize) -> Result<(), String> {
            match (self.memcpy_dtoh)(dst, src, bytes) {
                0 => Ok(()),
                r => Err(format!("cuMemcpyDtoH failed (CUresult {r})")),
            }
        }

        pub fn free(&self, p: DevicePtr) {
            unsafe { (self.mem_free)(p) };
        }

        pub fn synchronize(&self) -> Result<(), String> {
            match unsafe { (self.ctx_synchronize)() } {
                0 => Ok(()),
                r => Err(format!("cuCtxSynchronize failed (CUresult {r})")),
            }
        }
    }
}

/// A buffer with a host copy and, on CUDA, a device copy (zeroed on both).
struct Buffer<'d, T: Element + Default> {
    host: Vec<T>,
    dev: cuda::DevicePtr,
    cu: Option<&'d cuda::Driver>,
}

impl<'d, T: Element + Default> Buffer<'d, T> {
    fn new(len: usize, cu: Option<&'d cuda::Driver>) -> Result<Self, Error> {
        let mut b = Buffer { host: vec![T::default(); len], dev: 0, cu };
        if let Some(cu) = cu {
            b.dev = cu.alloc(b.bytes())?;
            b.upload(0..len)?;
        }
        Ok(b)
    }

    fn bytes(&self) -> usize {
        std::mem::size_of_val(self.host.as_slice())
    }

    /// Copies host elements `range` to the device (nothing on the CPU).
    fn upload(&self, range: std::ops::Range<usize>) -> Result<(), Error> {
        if let Some(cu) = self.cu {
            let src = &self.host[range.clone()];
            let offset = (range.start * std::mem::size_of::<T>()) as u64;
            // SAFETY: the device copy has as many elements as the host copy.
            unsafe { cu.htod(self.dev + offset, src.as_ptr().cast(), std::mem::size_of_val(src))? };
        }
        Ok(())
    }

    fn upload_all(&self) -> Result<(), Error> {
        self.upload(0..self.host.len())
    }

    /// Copies the device copy back into the host copy (nothing on the CPU).
    fn download(&mut self) -> Result<(), Error> {
        if let Some(cu) = self.cu {
            let bytes = self.bytes();
            // SAFETY: as in upload.
            unsafe { cu.dtoh(self.host.as_mut_ptr().cast(), self.dev, bytes)? };
        }
        Ok(())
    }

    /// A dense read-only view: the host copy, or the device copy on CUDA.
    fn view(&self, shape: &[usize]) -> ssu::Result<Tensor<'_>> {
        let shape = dims(shape);
        assert_eq!(shape.iter().product::<i64>() as usize, self.host.len());
        match self.cu {
            None => Tensor::new(&self.host, &shape),
            // SAFETY: the device copy holds every element of the dense shape
            // and outlives the view (it is freed when `self` drops).
            Some(_) => unsafe {
                Tensor::from_raw(self.dev as usize as *const c_void, T::DTYPE, &shape, &dense_strides(&shape))
            },
        }
    }

    /// A dense writable view: the host copy, or the device copy on CUDA.
    fn view_mut(&mut self, shape: &[usize]) -> ssu::Result<TensorMut<'_>> {
        let shape = dims(shape);
        assert_eq!(shape.iter().product::<i64>() as usize, self.host.len());
        match self.cu {
            None => TensorMut::new(&mut self.host, &shape),
            // SAFETY: as in view; `&mut self` keeps other views away.
            Some(_) => unsafe {
                TensorMut::from_raw(self.dev as usize as *mut c_void, T::DTYPE, &shape, &dense_strides(&shape))
            },
        }
    }
}

impl<T: Element + Default> Drop for Buffer<'_, T> {
    fn drop(&mut self) {
        if let Some(cu) = self.cu {
            cu.free(self.dev);
        }
    }
}

/// Every buffer of the loop.
struct Buffers<'d> {
    pool: Buffer<'d, f32>,
    x: Buffer<'d, f32>,
    z: Buffer<'d, f32>,
    out: Buffer<'d, f32>,
    dt: Buffer<'d, f32>,
    b: Buffer<'d, f32>,
    c: Buffer<'d, f32>,
    a: Buffer<'d, f32>,
    d: Buffer<'d, f32>,
    dt_bias: Buffer<'d, f32>,
    slots: Buffer<'d, i32>,
}

impl<'d> Buffers<'d> {
    fn new(cu: Option<&'d cuda::Driver>) -> Result<Self, Error> {
        Ok(Buffers {
            pool: Buffer::new(SLOTS * SLOT_ELEMS, cu)?,
            x: Buffer::new(BATCH * H * P, cu)?,
            z: Buffer::new(BATCH * H * P, cu)?,
            out: Buffer::new(BATCH * H * P, cu)?,
            dt: Buffer::new(BATCH * H, cu)?,
            b: Buffer::new(BATCH * G * N, cu)?,
            c: Buffer::new(BATCH * G * N, cu)?,
            a: Buffer::new(H, cu)?,
            d: Buffer::new(H, cu)?,
            dt_bias: Buffer::new(H, cu)?,
            slots: Buffer::new(BATCH, cu)?,
        })
    }

    /// The update's arguments, viewing this step's buffers.
    fn args(&mut self) -> ssu::Result<UpdateArgs<'_>> {
        Ok(UpdateArgs::new(
            self.pool.view_mut(&[SLOTS, H, P, N])?,
            self.x.view(&[BATCH, H, P])?,
            self.dt.view(&[BATCH, H])?,
            self.a.view(&[H])?,
            self.b.view(&[BATCH, G, N])?,
            self.c.view(&[BATCH, G, N])?,
            self.out.view_mut(&[BATCH, H, P])?,
        )
        .d(self.d.view(&[H])?)
        .dt_bias(self.dt_bias.view(&[H])?)
        .z(self.z.view(&[BATCH, H, P])?)
        .src_index(self.slots.view(&[BATCH])?)
        .dt_softplus(true))
    }
}

// ---- the loop ---------------------------------------------------------------

fn main() {
    if let Err(e) = run() {
        eprintln!("decode_loop: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Error> {
    let steps: usize = match std::env::args().nth(1) {
        Some(s) => s.parse().map_err(|_| format!("steps must be a non-negative integer, not {s:?}"))?,
        None => 200,
    };
    let use_cuda = match std::env::var("SSU_BACKEND").as_deref() {
        Ok("cpu") | Err(_) => false,
        Ok("cuda") => true,
        Ok(other) => return Err(format!("SSU_BACKEND must be cpu or cuda, not {other:?}").into()),
    };
    let driver = if use_cuda { Some(cuda::Driver::init()?) } else { None };
    let cu = driver.as_ref();
    let mut rng = SplitMix64(0x5EED);

    // Declared before the context and plan, so dropped (freed) after them.
    let mut buf = Buffers::new(cu)?;

    // Layer parameters: A in [-2, -1), dt_bias in [-4, -3), D in [-1, 1).
    for v in buf.a.host.iter_mut() {
        *v = (-1.0 - (rng.sym() + 1.0) * 0.5) as f32;
    }
    for v in buf.dt_bias.host.iter_mut() {
        *v = (-4.0 + (rng.sym() + 1.0) * 0.5) as f32;
    }
    rng.fill(&mut buf.d.host, 1.0);
    buf.a.upload_all()?;
    buf.d.upload_all()?;
    buf.dt_bias.upload_all()?;

    let ctx = Context::new(if use_cuda { Backend::Cuda } else { Backend::Cpu }, 0, 0)?;
    let plan = ctx.plan_update(&buf.args()?, None)?;

    let mut active = [false; BATCH];
    let mut used = [false; SLOTS];
    let mut slot_of = [0usize; BATCH];
    let mut remaining = [0u64; BATCH];
    let mut tokens = 0u64;
    let mut busy = Duration::ZERO;
    for _ in 0..steps {
        for e in 0..BATCH {
            // finished requests leave
            if active[e] && remaining[e] == 0 {
                used[slot_of[e]] = false;
                active[e] = false;
            }
        }
        for e in 0..BATCH {
            // new requests join idle entries
            if active[e] || rng.next() % 4 == 0 {
                continue;
            }
            let s = used.iter().position(|&u| !u).expect("SLOTS > BATCH");
            used[s] = true;
            slot_of[e] = s;
            remaining[e] = 1 + rng.next() % MAX_LEN;
            active[e] = true;
            let slot = s * SLOT_ELEMS..(s + 1) * SLOT_ELEMS;
            rng.fill(&mut buf.pool.host[slot.clone()], 0.5); // the prefill's state
            buf.pool.upload(slot)?;
        }
        for e in 0..BATCH {
            buf.slots.host[e] = if active[e] { slot_of[e] as i32 } else { -1 };
        }
        rng.fill(&mut buf.x.host, 1.0);
        rng.fill(&mut buf.dt.host, 0.5);
        rng.fill(&mut buf.b.host, 1.0);
        rng.fill(&mut buf.c.host, 1.0);
        rng.fill(&mut buf.z.host, 1.0);
        buf.slots.upload_all()?;
        buf.x.upload_all()?;
        buf.dt.upload_all()?;
        buf.b.upload_all()?;
        buf.c.upload_all()?;
        buf.z.upload_all()?;

        let mut args = buf.args()?;
        let t0 = Instant::now();
        plan.execute(&mut args)?; // the legacy default stream, as in C
        if let Some(cu) = cu {
            cu.synchronize()?;
        }
        busy += t0.elapsed();

        for e in 0..BATCH {
            if active[e] {
                remaining[e] -= 1;
                tokens += 1;
            }
        }
    }
    buf.pool.download()?;

    println!(
        "ssu decode example (Rust): backend {} [{}], {steps} steps, {tokens} tokens",
        if use_cuda { "cuda" } else { "cpu" },
        ctx.device_name()
    );
    let secs = busy.as_secs_f64();
    println!(
        "throughput: {:.0} tokens/s ({:.2} us/step)",
        if secs > 0.0 { tokens as f64 / secs } else { 0.0 },
        if steps > 0 { 1e6 * secs / steps as f64 } else { 0.0 }
    );
    println!("state checksum: 0x{:016x}", fnv1a64(&buf.pool.host));
    Ok(())
}
