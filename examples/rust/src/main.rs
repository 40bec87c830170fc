//! A serving-style decode loop over a libssu state pool (Rust version; see
//! examples/README.md).
//!
//! Requests join and leave BATCH batch entries over the steps; each request
//! owns a pool slot while it runs, and idle entries are padding (slot -1).
//! Inputs come from splitmix64, so the C, C++, Rust and Python versions feed
//! the library bit-identical data and print the same checksum of the pool.
//!
//!     cargo run --release -- [steps]
//!
//! This version runs the CPU backend; the C, C++ and Python versions also
//! run on CUDA (SSU_BACKEND=cuda).

use std::time::{Duration, Instant};

use ssu::{Backend, Context, Tensor, TensorMut, UpdateArgs};

const SLOTS: usize = 16;
const BATCH: usize = 8;
const H: usize = 8;
const P: usize = 64;
const N: usize = 16;
const G: usize = 1;
const MAX_LEN: u64 = 24;
const SLOT_ELEMS: usize = H * P * N;

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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(200);
    match std::env::var("SSU_BACKEND").as_deref() {
        Ok("cpu") | Err(_) => {}
        Ok("cuda") => return Err("the Rust example runs the CPU backend only; use the C, C++ or Python example on CUDA".into()),
        Ok(other) => return Err(format!("SSU_BACKEND must be cpu or cuda, not {other}").into()),
    }
    let mut rng = SplitMix64(0x5EED);

    // Layer parameters: A in [-2, -1), dt_bias in [-4, -3), D in [-1, 1).
    let a: Vec<f32> = (0..H).map(|_| (-1.0 - (rng.sym() + 1.0) * 0.5) as f32).collect();
    let dt_bias: Vec<f32> = (0..H).map(|_| (-4.0 + (rng.sym() + 1.0) * 0.5) as f32).collect();
    let mut d = vec![0f32; H];
    rng.fill(&mut d, 1.0);

    let mut pool = vec![0f32; SLOTS * SLOT_ELEMS];
    let mut x = vec![0f32; BATCH * H * P];
    let mut z = vec![0f32; BATCH * H * P];
    let mut out = vec![0f32; BATCH * H * P];
    let mut dt = vec![0f32; BATCH * H];
    let mut b = vec![0f32; BATCH * G * N];
    let mut c = vec![0f32; BATCH * G * N];
    let mut slots = vec![0i32; BATCH];

    let ctx = Context::new(Backend::Cpu, 0, 0)?;
    let plan = {
        let args = step_args(&mut pool, &x, &z, &mut out, &dt, &b, &c, &a, &d, &dt_bias, &slots)?;
        ctx.plan_update(&args, None)?
    };

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
            rng.fill(&mut pool[s * SLOT_ELEMS..(s + 1) * SLOT_ELEMS], 0.5); // the prefill's state
        }
        for e in 0..BATCH {
            slots[e] = if active[e] { slot_of[e] as i32 } else { -1 };
        }
        rng.fill(&mut x, 1.0);
        rng.fill(&mut dt, 0.5);
        rng.fill(&mut b, 1.0);
        rng.fill(&mut c, 1.0);
        rng.fill(&mut z, 1.0);

        let mut args = step_args(&mut pool, &x, &z, &mut out, &dt, &b, &c, &a, &d, &dt_bias, &slots)?;
        let t0 = Instant::now();
        plan.execute(&mut args)?;
        busy += t0.elapsed();

        for e in 0..BATCH {
            if active[e] {
                remaining[e] -= 1;
                tokens += 1;
            }
        }
    }

    println!(
        "ssu decode example (Rust): backend cpu [{}], {steps} steps, {tokens} tokens",
        ctx.device_name()
    );
    let secs = busy.as_secs_f64();
    println!(
        "throughput: {:.0} tokens/s ({:.2} us/step)",
        if secs > 0.0 { tokens as f64 / secs } else { 0.0 },
        if steps > 0 { 1e6 * secs / steps as f64 } else { 0.0 }
    );
    println!("state checksum: 0x{:016x}", fnv1a64(&pool));
    Ok(())
}

/// The update's arguments, borrowing this step's buffers.
#[allow(clippy::too_many_arguments)]
fn step_args<'a>(
    pool: &'a mut [f32], x: &'a [f32], z: &'a [f32], out: &'a mut [f32], dt: &'a [f32],
    b: &'a [f32], c: &'a [f32], a: &'a [f32], d: &'a [f32], dt_bias: &'a [f32], slots: &'a [i32],
) -> ssu::Result<UpdateArgs<'a>> {
    Ok(UpdateArgs::new(
        TensorMut::new(pool, &dims(&[SLOTS, H, P, N]))?,
        Tensor::new(x, &dims(&[BATCH, H, P]))?,
        Tensor::new(dt, &dims(&[BATCH, H]))?,
        Tensor::new(a, &dims(&[H]))?,
        Tensor::new(b, &dims(&[BATCH, G, N]))?,
        Tensor::new(c, &dims(&[BATCH, G, N]))?,
        TensorMut::new(out, &dims(&[BATCH, H, P]))?,
    )
    .d(Tensor::new(d, &dims(&[H]))?)
    .dt_bias(Tensor::new(dt_bias, &dims(&[H]))?)
    .z(Tensor::new(z, &dims(&[BATCH, H, P]))?)
    .src_index(Tensor::new(slots, &dims(&[BATCH]))?)
    .dt_softplus(true))
}
