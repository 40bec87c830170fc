//! The Mamba-3 decode step and rotary step on the CPU backend, against a
//! float64 reference of the formulas in ssu.h.

use ssu::{Backend, Context, Mamba3RotaryArgs, Mamba3StepArgs, Tensor, TensorMut};
use std::f64::consts::PI;

/// Deterministic values (splitmix64).
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn sym(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f64 / 8_388_608.0 - 1.0) as f32
    }
    /// Uniform in [lo, hi).
    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| lo + (self.sym() * 0.5 + 0.5) * (hi - lo)).collect()
    }
}

fn dims(d: &[usize]) -> Vec<i64> {
    d.iter().map(|&v| v as i64).collect()
}

fn close(got: &[f32], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= atol + rtol * w.abs(), "{what}[{i}]: got {g}, want {w}");
    }
}

fn silu(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

const S: usize = 5;
const H: usize = 2;
const P: usize = 16;
const N: usize = 16;
const R: usize = 2;

struct Step {
    state: Vec<f32>,
    prev_b: Vec<f32>,
    prev_x: Vec<f32>,
    a: Vec<f32>,
    dt: Vec<f32>,
    trap: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    x: Vec<f32>,
    d: Vec<f32>,
    xproj: Vec<f32>,
    z: Vec<f32>,
    zproj: Vec<f32>,
    outproj: Vec<f32>,
}

fn step_inputs(bt: usize, seed: u64) -> Step {
    let mut r = Rng(seed);
    Step {
        state: r.vec(S * H * P * N, -1.0, 1.0),
        prev_b: r.vec(S * R * H * N, -1.0, 1.0),
        prev_x: r.vec(S * H * P, -1.0, 1.0),
        a: r.vec(bt * H, -1.5, -0.5),
        dt: r.vec(bt * H, 0.05, 0.5),
        trap: r.vec(bt * H, 0.1, 0.9),
        b: r.vec(bt * R * H * N, -1.0, 1.0),
        c: r.vec(bt * R * H * N, -1.0, 1.0),
        x: r.vec(bt * H * P, -1.0, 1.0),
        d: r.vec(H, -1.0, 1.0),
        xproj: r.vec(R * H * P, 0.5, 1.5),
        z: r.vec(bt * H * P, -2.0, 2.0),
        zproj: r.vec(R * H * P, 0.5, 1.5),
        outproj: r.vec(R * H * P, -1.0, 1.0),
    }
}

/// (state, prev_B, prev_x, out) after one step, as float64.
fn step_reference(
    i: &Step, src: &[i32], dst: &[i32], with_outproj: bool, with_z: bool, update_prev: bool,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let bt = src.len();
    let f = |v: &[f32]| v.iter().map(|&e| e as f64).collect::<Vec<f64>>();
    let (mut st, mut pb, mut px) = (f(&i.state), f(&i.prev_b), f(&i.prev_x));
    let out_len = if with_outproj { bt * H * P } else { bt * R * H * P };
    let mut out = vec![0f64; out_len];
    for b in 0..bt {
        if src[b] < 0 {
            continue;
        }
        let (s, d) = (src[b] as usize, dst[b] as usize);
        for h in 0..H {
            let a = i.a[b * H + h] as f64;
            let dt = i.dt[b * H + h] as f64;
            let trap = i.trap[b * H + h] as f64;
            let alpha = (a * dt).exp();
            let gamma = trap * dt;
            let beta = (1.0 - trap) * dt * alpha;
            for p in 0..P {
                let x = i.x[(b * H + h) * P + p] as f64;
                let xprev = i.prev_x[(s * H + h) * P + p] as f64;
                let mut row = [0f64; N];
                for (n, hn) in row.iter_mut().enumerate() {
                    let mut v = alpha * i.state[((s * H + h) * P + p) * N + n] as f64;
                    for r in 0..R {
                        let xp = i.xproj[(r * H + h) * P + p] as f64;
                        let bv = i.b[((b * R + r) * H + h) * N + n] as f64;
                        let bp = i.prev_b[((s * R + r) * H + h) * N + n] as f64;
                        v += xp * (gamma * x * bv + beta * xprev * bp);
                    }
                    *hn = v;
                }
                let mut total = 0f64;
                for r in 0..R {
                    let xp = i.xproj[(r * H + h) * P + p] as f64;
                    let mut y: f64 =
                        (0..N).map(|n| row[n] * i.c[((b * R + r) * H + h) * N + n] as f64).sum();
                    y += i.d[h] as f64 * x * xp;
                    if with_outproj {
                        if with_z {
                            y *= silu(i.z[(b * H + h) * P + p] as f64 * i.zproj[(r * H + h) * P + p] as f64);
                        }
                        total += y * i.outproj[(r * H + h) * P + p] as f64;
                    } else {
                        out[((b * R + r) * H + h) * P + p] = y;
                    }
                }
                if with_outproj {
                    out[(b * H + h) * P + p] = total;
                }
                st[((d * H + h) * P + p) * N..][..N].copy_from_slice(&row);
            }
        }
        if update_prev {
            for r in 0..R {
                for h in 0..H {
                    for n in 0..N {
                        pb[((d * R + r) * H + h) * N + n] = i.b[((b * R + r) * H + h) * N + n] as f64;
                    }
                }
            }
            for e in 0..H * P {
                px[d * H * P + e] = i.x[b * H * P + e] as f64;
            }
        }
    }
    (st, pb, px, out)
}

fn run_step(with_outproj: bool, with_z: bool, update_prev: bool, seed: u64) {
    let ctx = Context::new(Backend::Cpu, 0, 2).unwrap();
    let bt = 3;
    let i = step_inputs(bt, seed);
    let src = [3i32, -1, 0];
    let dst = [1i32, -1, 4];
    let (want_st, want_pb, want_px, want_out) = step_reference(&i, &src, &dst, with_outproj, with_z, update_prev);
    let (mut st, mut pb, mut px) = (i.state.clone(), i.prev_b.clone(), i.prev_x.clone());
    let out_shape = if with_outproj { dims(&[bt, H, P]) } else { dims(&[bt, R, H, P]) };
    let mut out = vec![f32::NAN; out_shape.iter().product::<i64>() as usize];
    {
        let mut args = Mamba3StepArgs::new(
            TensorMut::new(&mut st, &dims(&[S, H, P, N])).unwrap(),
            TensorMut::new(&mut pb, &dims(&[S, R, H, N])).unwrap(),
            TensorMut::new(&mut px, &dims(&[S, H, P])).unwrap(),
            Tensor::new(&i.a, &dims(&[bt, H])).unwrap(),
            Tensor::new(&i.dt, &dims(&[bt, H])).unwrap(),
            Tensor::new(&i.trap, &dims(&[bt, H])).unwrap(),
            Tensor::new(&i.b, &dims(&[bt, R, H, N])).unwrap(),
            Tensor::new(&i.c, &dims(&[bt, R, H, N])).unwrap(),
            Tensor::new(&i.x, &dims(&[bt, H, P])).unwrap(),
            Tensor::new(&i.xproj, &dims(&[R, H, P])).unwrap(),
            TensorMut::new(&mut out, &out_shape).unwrap(),
        )
        .d(Tensor::new(&i.d, &dims(&[H])).unwrap())
        .src_index(Tensor::new(&src, &[bt as i64]).unwrap())
        .dst_index(Tensor::new(&dst, &[bt as i64]).unwrap())
        .update_prev(update_prev);
        if with_outproj {
            args = args.outproj(Tensor::new(&i.outproj, &dims(&[R, H, P])).unwrap());
        }
        if with_z {
            args = args.z(
                Tensor::new(&i.z, &dims(&[bt, H, P])).unwrap(),
                Tensor::new(&i.zproj, &dims(&[R, H, P])).unwrap(),
            );
        }
        let plan = ctx.plan_mamba3_step(&args, None).expect("plan the Mamba-3 step");
        assert_eq!(plan.info().unwrap().backend, Backend::Cpu);
        plan.execute(&mut args).expect("run the Mamba-3 step");
    }
    close(&st, &want_st, 1e-4, 1e-4, "state");
    close(&out, &want_out, 1e-4, 1e-4, "out");
    close(&pb, &want_pb, 0.0, 0.0, "prev_B");
    close(&px, &want_px, 0.0, 0.0, "prev_x");
    // The padded sequence: zero outputs.
    let per_seq = out.len() / bt;
    assert!(out[per_seq..2 * per_seq].iter().all(|&v| v == 0.0));
    // Slots that are no destination are bit-identical.
    for s in [0usize, 2, 3] {
        let r = s * H * P * N..(s + 1) * H * P * N;
        assert!(st[r.clone()].iter().zip(&i.state[r]).all(|(a, b)| a.to_bits() == b.to_bits()), "slot {s}");
    }
}

#[test]
fn mamba3_step_per_rank_outputs() {
    run_step(false, false, false, 1);
}

#[test]
fn mamba3_step_outproj_gate_and_prev_update() {
    run_step(true, true, true, 2);
}

#[test]
fn mamba3_step_outproj_without_gate() {
    run_step(true, false, true, 3);
}

#[test]
fn mamba3_plan_mismatch_and_errors() {
    let ctx = Context::new(Backend::Cpu, 0, 1).unwrap();
    let bt = 1;
    let i = step_inputs(bt, 4);
    let (mut st, mut pb, mut px) = (i.state.clone(), i.prev_b.clone(), i.prev_x.clone());
    let mut out = vec![0f32; bt * R * H * P];
    // z without outproj is refused.
    let args = Mamba3StepArgs::new(
        TensorMut::new(&mut st, &dims(&[S, H, P, N])).unwrap(),
        TensorMut::new(&mut pb, &dims(&[S, R, H, N])).unwrap(),
        TensorMut::new(&mut px, &dims(&[S, H, P])).unwrap(),
        Tensor::new(&i.a, &dims(&[bt, H])).unwrap(),
        Tensor::new(&i.dt, &dims(&[bt, H])).unwrap(),
        Tensor::new(&i.trap, &dims(&[bt, H])).unwrap(),
        Tensor::new(&i.b, &dims(&[bt, R, H, N])).unwrap(),
        Tensor::new(&i.c, &dims(&[bt, R, H, N])).unwrap(),
        Tensor::new(&i.x, &dims(&[bt, H, P])).unwrap(),
        Tensor::new(&i.xproj, &dims(&[R, H, P])).unwrap(),
        TensorMut::new(&mut out, &dims(&[bt, R, H, P])).unwrap(),
    )
    .z(Tensor::new(&i.z, &dims(&[bt, H, P])).unwrap(), Tensor::new(&i.zproj, &dims(&[R, H, P])).unwrap());
    let err = ctx.plan_mamba3_step(&args, None).err().expect("z without outproj");
    assert_eq!(err.family(), 1, "{err}");
    assert!(!err.message().is_empty());
}

// ---------------------------------------------------------------------------
// Rotary
// ---------------------------------------------------------------------------

fn wrap(t: f64) -> f64 {
    t.rem_euclid(2.0 * PI)
}

/// Distance of two angles on the circle.
fn angle_dist(a: f64, b: f64) -> f64 {
    let d = wrap(a - b);
    d.min(2.0 * PI - d)
}

fn run_rotary(halved: bool, sa: usize, in_place: bool, seed: u64) {
    let ctx = Context::new(Backend::Cpu, 0, 2).unwrap();
    let bt = 3;
    let mut r = Rng(seed);
    let angle0 = r.vec(S * H * sa, 0.0, 6.28);
    let rate = r.vec(bt * H * sa, -3.0, 3.0);
    let dt = r.vec(bt * H, 0.05, 1.0);
    let q = r.vec(bt * R * H * N, -1.0, 1.0);
    let k = r.vec(bt * R * H * N, -1.0, 1.0);
    let q_bias = r.vec(R * H * N, -0.5, 0.5);
    let k_bias = r.vec(R * H * N, -0.5, 0.5);
    let src = [2i64, -1, 4];
    let dst = [0i64, -1, 4];

    // Reference.
    let mut want_angle: Vec<f64> = angle0.iter().map(|&v| v as f64).collect();
    let mut want_q = vec![0f64; q.len()];
    let mut want_k = vec![0f64; k.len()];
    for b in 0..bt {
        if src[b] < 0 {
            continue;
        }
        let (s, d) = (src[b] as usize, dst[b] as usize);
        for h in 0..H {
            let theta: Vec<f64> = (0..sa)
                .map(|i| {
                    wrap(angle0[(s * H + h) * sa + i] as f64
                        + (rate[(b * H + h) * sa + i] as f64).tanh() * PI * dt[b * H + h] as f64)
                })
                .collect();
            want_angle[(d * H + h) * sa..][..sa].copy_from_slice(&theta);
            for rr in 0..R {
                for (src_v, bias, dstv) in [(&q, &q_bias, &mut want_q), (&k, &k_bias, &mut want_k)] {
                    let base = ((b * R + rr) * H + h) * N;
                    let mut v: Vec<f64> =
                        (0..N).map(|n| src_v[base + n] as f64 + bias[(rr * H + h) * N + n] as f64).collect();
                    for (i, &t) in theta.iter().enumerate() {
                        let (a, c) = if halved { (i, i + N / 2) } else { (2 * i, 2 * i + 1) };
                        let (va, vc) = (v[a], v[c]);
                        v[a] = va * t.cos() - vc * t.sin();
                        v[c] = va * t.sin() + vc * t.cos();
                    }
                    dstv[base..base + N].copy_from_slice(&v);
                }
            }
        }
    }

    let mut angle = angle0.clone();
    let (mut q_io, mut k_io) = (q.clone(), k.clone());
    let mut q_out = vec![f32::NAN; q.len()];
    let mut k_out = vec![f32::NAN; k.len()];
    {
        let qk = dims(&[bt, R, H, N]);
        let angle_t = TensorMut::new(&mut angle, &dims(&[S, H, sa])).unwrap();
        let rate_t = Tensor::new(&rate, &dims(&[bt, H, sa])).unwrap();
        let dt_t = Tensor::new(&dt, &dims(&[bt, H])).unwrap();
        let mut args = if in_place {
            Mamba3RotaryArgs::in_place(
                angle_t,
                rate_t,
                dt_t,
                TensorMut::new(&mut q_io, &qk).unwrap(),
                TensorMut::new(&mut k_io, &qk).unwrap(),
            )
        } else {
            Mamba3RotaryArgs::new(
                angle_t,
                rate_t,
                dt_t,
                Tensor::new(&q, &qk).unwrap(),
                Tensor::new(&k, &qk).unwrap(),
                TensorMut::new(&mut q_out, &qk).unwrap(),
                TensorMut::new(&mut k_out, &qk).unwrap(),
            )
        }
        .q_bias(Tensor::new(&q_bias, &dims(&[R, H, N])).unwrap())
        .k_bias(Tensor::new(&k_bias, &dims(&[R, H, N])).unwrap())
        .src_index(Tensor::new(&src, &[bt as i64]).unwrap())
        .dst_index(Tensor::new(&dst, &[bt as i64]).unwrap())
        .halved(halved);
        let plan = ctx.plan_mamba3_rotary(&args, None).expect("plan the rotary step");
        plan.execute(&mut args).expect("run the rotary step");
    }
    let (got_q, got_k) = if in_place { (q_io, k_io) } else { (q_out, k_out) };
    close(&got_q, &want_q, 1e-4, 1e-4, "q_out");
    close(&got_k, &want_k, 1e-4, 1e-4, "k_out");
    for (idx, (&g, &w)) in angle.iter().zip(&want_angle).enumerate() {
        assert!((0.0..(2.0 * PI) as f32).contains(&g) || g == (2.0 * PI) as f32, "angle[{idx}]={g} not reduced");
        assert!(angle_dist(g as f64, w) <= 1e-4, "angle[{idx}]: got {g}, want {w}");
    }
    // Slots 1, 2 and 3 are no destination: untouched.
    for s in [1usize, 2, 3] {
        let rg = s * H * sa..(s + 1) * H * sa;
        assert!(angle[rg.clone()].iter().zip(&angle0[rg]).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn mamba3_rotary_interleaved_all_pairs() {
    run_rotary(false, N / 2, false, 10);
}

#[test]
fn mamba3_rotary_halved_partial_in_place() {
    run_rotary(true, N / 4, true, 11);
}
