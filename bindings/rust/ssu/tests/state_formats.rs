//! int16 block-scaled state pools and stochastic rounding of f16 states on
//! the CPU backend.

use ssu::{Backend, Context, Tensor, TensorMut, UpdateArgs, F16};
use std::cell::Cell;

struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| lo + ((self.next_u64() >> 40) as f32 / 16_777_216.0) * (hi - lo)).collect()
    }
}

const S: usize = 4;
const H: usize = 2;
const P: usize = 8;
const N: usize = 16;
const BT: usize = 2;

fn dims(d: &[usize]) -> Vec<i64> {
    d.iter().map(|&v| v as i64).collect()
}

struct Inputs {
    state: Vec<f32>,
    x: Vec<f32>,
    dt: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

fn inputs(seed: u64) -> Inputs {
    let mut r = Rng(seed);
    Inputs {
        state: r.vec(S * H * P * N, -2.0, 2.0),
        x: r.vec(BT * H * P, -1.0, 1.0),
        dt: r.vec(BT * H, 0.05, 0.5),
        a: r.vec(H, -1.5, -0.5),
        b: r.vec(BT * N, -1.0, 1.0),
        c: r.vec(BT * N, -1.0, 1.0),
    }
}

/// One token, G = 1, per-head A, no softplus: the new rows of every source
/// slot (initial state `h0` as f64), stored back to the same slot.
fn reference(h0: &[f64], i: &Inputs, src: &[i32]) -> (Vec<f64>, Vec<f64>) {
    let mut st = h0.to_vec();
    let mut out = vec![0f64; BT * H * P];
    for (b, &s) in src.iter().enumerate() {
        let s = s as usize;
        for h in 0..H {
            let delta = i.dt[b * H + h] as f64;
            let da = (i.a[h] as f64 * delta).exp();
            for p in 0..P {
                let x = i.x[(b * H + h) * P + p] as f64;
                let mut y = 0.0;
                for n in 0..N {
                    let k = ((s * H + h) * P + p) * N + n;
                    st[k] = h0[k] * da + i.b[b * N + n] as f64 * delta * x;
                    y += st[k] * i.c[b * N + n] as f64;
                }
                out[(b * H + h) * P + p] = y;
            }
        }
    }
    (st, out)
}

/// Quantizes rows of N values as ssu.h describes for int16 pools.
fn quantize(v: &[f32]) -> (Vec<i16>, Vec<f32>) {
    let mut q = vec![0i16; v.len()];
    let mut scales = vec![0f32; v.len() / N];
    for (row, chunk) in v.chunks(N).enumerate() {
        let amax = chunk.iter().fold(0f32, |m, &e| m.max(e.abs()));
        let enc = if amax == 0.0 { 1.0 } else { 32767.0 / amax };
        for (k, &e) in chunk.iter().enumerate() {
            q[row * N + k] = (e * enc).clamp(-32767.0, 32767.0).round_ties_even() as i16;
        }
        scales[row] = 1.0 / enc;
    }
    (q, scales)
}

fn dequantize(q: &[i16], scales: &[f32]) -> Vec<f64> {
    q.iter().enumerate().map(|(k, &c)| (c as f32 * scales[k / N]) as f64).collect()
}

fn run_int16(i: &Inputs, q: &mut [i16], scales: &mut [f32], src: &[i32], out: &mut [f32], zero_step: bool) {
    let ctx = Context::new(Backend::Cpu, 0, 2).unwrap();
    let zeros_b = vec![0f32; BT * N];
    let zeros_a = vec![0f32; H];
    let (a, b) = if zero_step { (&zeros_a, &zeros_b) } else { (&i.a, &i.b) };
    let mut args = UpdateArgs::new(
        TensorMut::new(q, &dims(&[S, H, P, N])).unwrap(),
        Tensor::new(&i.x, &dims(&[BT, H, P])).unwrap(),
        Tensor::new(&i.dt, &dims(&[BT, H])).unwrap(),
        Tensor::new(a, &dims(&[H])).unwrap(),
        Tensor::new(b, &dims(&[BT, 1, N])).unwrap(),
        Tensor::new(&i.c, &dims(&[BT, 1, N])).unwrap(),
        TensorMut::new(out, &dims(&[BT, H, P])).unwrap(),
    )
    .state_scale(TensorMut::new(scales, &dims(&[S, H, P])).unwrap())
    .src_index(Tensor::new(src, &[BT as i64]).unwrap());
    let plan = ctx.plan_update(&args, None).expect("plan an int16 update");
    plan.execute(&mut args).expect("run an int16 update");
}

#[test]
fn int16_state_against_reference() {
    let i = inputs(1);
    let (mut q, mut scales) = quantize(&i.state);
    let (q0, s0) = (q.clone(), scales.clone());
    let src = [2i32, 0];
    let (want, want_out) = reference(&dequantize(&q, &scales), &i, &src);
    let mut out = vec![f32::NAN; BT * H * P];
    run_int16(&i, &mut q, &mut scales, &src, &mut out, false);
    let got = dequantize(&q, &scales);
    for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let tol = 1e-4 * w.abs() + 2.0 * scales[k / N] as f64;
        assert!((g - w).abs() <= tol, "state[{k}]: got {g}, want {w}");
    }
    for (k, (&g, &w)) in out.iter().zip(&want_out).enumerate() {
        assert!((g as f64 - w).abs() <= 1e-4 + 1e-4 * w.abs(), "out[{k}]: got {g}, want {w}");
    }
    // Every stored row uses the full code range; other slots are untouched.
    for row in 0..S * H * P {
        let slot = row / (H * P);
        let r = row * N..(row + 1) * N;
        if src.contains(&(slot as i32)) {
            let m = q[r].iter().map(|c| c.unsigned_abs()).max().unwrap();
            assert_eq!(m, 32767, "row {row}");
        } else {
            assert_eq!(&q[r.clone()], &q0[r], "row {row}");
            assert_eq!(scales[row].to_bits(), s0[row].to_bits(), "scale {row}");
        }
    }
}

#[test]
fn int16_identity_step_round_trips() {
    // A = 0 and B = 0: dA = 1 and nothing is added, so the loaded rows are
    // stored again and quantize back to the same codes.
    let i = inputs(2);
    let (mut q, mut scales) = quantize(&i.state);
    let (q0, s0) = (q.clone(), scales.clone());
    let mut out = vec![0f32; BT * H * P];
    run_int16(&i, &mut q, &mut scales, &[1, 3], &mut out, true);
    assert_eq!(q, q0);
    for (k, (&g, &w)) in scales.iter().zip(&s0).enumerate() {
        assert!(((g - w) / w).abs() <= 1e-6, "scale[{k}]: got {g}, want {w}");
    }
}

/// Runs one f16-state update from `state0`, stochastically rounded when a
/// seed is given.
fn run_f16(i: &Inputs, state0: &[F16], seed: Option<&Cell<u64>>, rounds: u32) -> Vec<F16> {
    let ctx = Context::new(Backend::Cpu, 0, 2).unwrap();
    let mut state = state0.to_vec();
    let mut out = vec![0f32; BT * H * P];
    let src = [3i32, 1];
    {
        let mut args = UpdateArgs::new(
            TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
            Tensor::new(&i.x, &dims(&[BT, H, P])).unwrap(),
            Tensor::new(&i.dt, &dims(&[BT, H])).unwrap(),
            Tensor::new(&i.a, &dims(&[H])).unwrap(),
            Tensor::new(&i.b, &dims(&[BT, 1, N])).unwrap(),
            Tensor::new(&i.c, &dims(&[BT, 1, N])).unwrap(),
            TensorMut::new(&mut out, &dims(&[BT, H, P])).unwrap(),
        )
        .src_index(Tensor::new(&src, &[BT as i64]).unwrap())
        .rounding_rounds(rounds);
        if let Some(s) = seed {
            args = args.rounding_seed(s);
        }
        ctx.update(&mut args).expect("f16 update");
    }
    state
}

/// Whether two f16 values are at most one unit in the last place apart
/// (stochastic rounding picks one of the two neighbours of the fp32 value;
/// below 2^-14 it flushes to a signed zero).
fn within_one_ulp(sr: F16, rn: F16) -> bool {
    let ord = |v: u16| if v & 0x8000 != 0 { -((v & 0x7fff) as i32) } else { v as i32 };
    if (rn.0 & 0x7c00) == 0 && (sr.0 & 0x7fff) == 0 {
        return true; // a subnormal nearest value, flushed
    }
    (ord(sr.0) - ord(rn.0)).abs() <= 1
}

#[test]
fn stochastic_rounding_f16() {
    let i = inputs(3);
    let state0: Vec<F16> = i.state.iter().map(|&v| F16::from_f32(v)).collect();
    let rn = run_f16(&i, &state0, None, 0);
    let seed = Cell::new(1234u64);
    let sr1 = run_f16(&i, &state0, Some(&seed), 0);
    let sr1_again = run_f16(&i, &state0, Some(&seed), 0);
    assert_eq!(sr1, sr1_again, "the same seed gives the same bits");
    let (mut differ_rn, mut differ_seed) = (0, 0);
    let ctx = Context::new(Backend::Cpu, 0, 1).unwrap();
    ctx.advance_seed(&seed, 7).expect("advance the seed");
    assert_eq!(seed.get(), 1241);
    let sr2 = run_f16(&i, &state0, Some(&seed), 0);
    for k in 0..rn.len() {
        assert!(within_one_ulp(sr1[k], rn[k]), "[{k}] SR {:#06x} vs RN {:#06x}", sr1[k].0, rn[k].0);
        assert!(within_one_ulp(sr2[k], rn[k]), "[{k}] SR {:#06x} vs RN {:#06x}", sr2[k].0, rn[k].0);
        differ_rn += (sr1[k] != rn[k]) as usize;
        differ_seed += (sr1[k] != sr2[k]) as usize;
    }
    // Stored rows: 2 slots of H*P*N; a fair share of them round the other way.
    assert!(differ_rn > 20, "SR equals RN almost everywhere ({differ_rn})");
    assert!(differ_seed > 20, "a new seed changed only {differ_seed} values");
    // Rows that are not stored are untouched.
    for s in [0usize, 2] {
        let r = s * H * P * N..(s + 1) * H * P * N;
        assert_eq!(&sr1[r.clone()], &state0[r]);
    }
    // The rounds count is part of the random stream.
    let sr5 = run_f16(&i, &state0, Some(&Cell::new(1234)), 5);
    assert!(sr5.iter().zip(&sr1).any(|(a, b)| a != b));
}

#[test]
fn advance_seed_wraps() {
    let ctx = Context::new(Backend::Cpu, 0, 1).unwrap();
    let seed = Cell::new(u64::MAX - 1);
    ctx.advance_seed(&seed, 3).unwrap();
    assert_eq!(seed.get(), 1);
}

#[test]
fn rounding_seed_is_refused_for_f32_states() {
    let i = inputs(4);
    let ctx = Context::new(Backend::Cpu, 0, 1).unwrap();
    let mut state = i.state.clone();
    let mut out = vec![0f32; BT * H * P];
    let seed = Cell::new(1);
    let args = UpdateArgs::new(
        TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
        Tensor::new(&i.x, &dims(&[BT, H, P])).unwrap(),
        Tensor::new(&i.dt, &dims(&[BT, H])).unwrap(),
        Tensor::new(&i.a, &dims(&[H])).unwrap(),
        Tensor::new(&i.b, &dims(&[BT, 1, N])).unwrap(),
        Tensor::new(&i.c, &dims(&[BT, 1, N])).unwrap(),
        TensorMut::new(&mut out, &dims(&[BT, H, P])).unwrap(),
    )
    .rounding_seed(&seed);
    let err = ctx.plan_update(&args, None).err().expect("a seed with an f32 state");
    assert_eq!(err.family(), 1, "{err}");
}
