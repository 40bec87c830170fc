//! Replay (checkpointed decode) through the safe crate on the CPU backend:
//! replay steps and a flush against the same number of plain updates.

use ssu::{
    Algorithm, Backend, Context, ReplayArgs, ReplayFlushArgs, ReplayRing, Tensor, TensorMut,
    UpdateArgs,
};

/// Deterministic values in [-1, 1) (splitmix64).
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn sym(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f64 / 8_388_608.0 - 1.0) as f32
    }
    fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| self.sym() * scale + offset).collect()
    }
}

const S: usize = 5;
const H: usize = 4;
const P: usize = 8;
const N: usize = 16;
const G: usize = 2;
const L: usize = 4;
const BT: usize = 3;

fn dims(d: &[usize]) -> Vec<i64> {
    d.iter().map(|&v| v as i64).collect()
}

/// The per-call inputs of one decode step (T = 1).
struct Step {
    x: Vec<f32>,
    dt: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    z: Vec<f32>,
}

fn step(r: &mut Rng) -> Step {
    Step {
        x: r.vec(BT * H * P, 1.0, 0.0),
        dt: r.vec(BT * H, 0.5, 0.0),
        b: r.vec(BT * G * N, 1.0, 0.0),
        c: r.vec(BT * G * N, 1.0, 0.0),
        z: r.vec(BT * H * P, 1.0, 0.0),
    }
}

/// The ring buffers of S slots with capacity L (per-head dt).
struct Ring {
    x: Vec<f32>,
    b: Vec<f32>,
    dt: Vec<f32>,
    committed: Vec<i32>,
    pending: Vec<i32>,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            x: vec![0.0; S * L * H * P],
            b: vec![0.0; S * L * G * N],
            dt: vec![0.0; S * L * H],
            committed: vec![0; S],
            pending: vec![0; S],
        }
    }
    fn view(&mut self) -> ReplayRing<'_> {
        ReplayRing::new(
            TensorMut::new(&mut self.x, &dims(&[S, L, H, P])).unwrap(),
            TensorMut::new(&mut self.b, &dims(&[S, L, G, N])).unwrap(),
            TensorMut::new(&mut self.dt, &dims(&[S, L, H])).unwrap(),
            TensorMut::new(&mut self.committed, &dims(&[S])).unwrap(),
            TensorMut::new(&mut self.pending, &dims(&[S])).unwrap(),
        )
    }
}

struct Weights {
    a: Vec<f32>,
    d: Vec<f32>,
    dt_bias: Vec<f32>,
}

fn close(got: &[f32], want: &[f32], what: &str) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-5 + 1e-4 * (w.abs() as f64);
        assert!(((g - w).abs() as f64) <= tol, "{what}[{i}]: replay {g}, plain update {w}");
    }
}

#[test]
fn replay_steps_then_flush_equal_plain_updates() {
    let ctx = Context::new(Backend::Cpu, 0, 2).expect("CPU context");
    let mut r = Rng(11);
    let state0 = r.vec(S * H * P * N, 1.0, 0.0);
    let w = Weights { a: r.vec(H, 0.5, -1.5), d: r.vec(H, 1.0, 0.0), dt_bias: r.vec(H, 0.5, -3.5) };
    // Slot 1 is never named; the second sequence is padding.
    let slots = [3i32, -1, 0];
    let steps: Vec<Step> = (0..7).map(|_| step(&mut r)).collect(); // > L: one flush inside a step

    let mut plain = state0.clone();
    let mut ckpt = state0.clone();
    let mut ring = Ring::new();
    let mut replay_plan = None;
    for (k, st) in steps.iter().enumerate() {
        let mut out_plain = vec![f32::NAN; BT * H * P];
        let mut out_replay = vec![f32::NAN; BT * H * P];
        {
            let mut args = UpdateArgs::new(
                TensorMut::new(&mut plain, &dims(&[S, H, P, N])).unwrap(),
                Tensor::new(&st.x, &dims(&[BT, H, P])).unwrap(),
                Tensor::new(&st.dt, &dims(&[BT, H])).unwrap(),
                Tensor::new(&w.a, &dims(&[H])).unwrap(),
                Tensor::new(&st.b, &dims(&[BT, G, N])).unwrap(),
                Tensor::new(&st.c, &dims(&[BT, G, N])).unwrap(),
                TensorMut::new(&mut out_plain, &dims(&[BT, H, P])).unwrap(),
            )
            .d(Tensor::new(&w.d, &dims(&[H])).unwrap())
            .dt_bias(Tensor::new(&w.dt_bias, &dims(&[H])).unwrap())
            .z(Tensor::new(&st.z, &dims(&[BT, H, P])).unwrap())
            .src_index(Tensor::new(&slots, &dims(&[BT])).unwrap())
            .dt_softplus(true);
            ctx.update(&mut args).expect("plain update");
        }
        {
            let mut args = ReplayArgs::new(
                TensorMut::new(&mut ckpt, &dims(&[S, H, P, N])).unwrap(),
                ring.view(),
                Tensor::new(&st.x, &dims(&[BT, H, P])).unwrap(),
                Tensor::new(&st.dt, &dims(&[BT, H])).unwrap(),
                Tensor::new(&w.a, &dims(&[H])).unwrap(),
                Tensor::new(&st.b, &dims(&[BT, G, N])).unwrap(),
                Tensor::new(&st.c, &dims(&[BT, G, N])).unwrap(),
                TensorMut::new(&mut out_replay, &dims(&[BT, H, P])).unwrap(),
            )
            .d(Tensor::new(&w.d, &dims(&[H])).unwrap())
            .dt_bias(Tensor::new(&w.dt_bias, &dims(&[H])).unwrap())
            .z(Tensor::new(&st.z, &dims(&[BT, H, P])).unwrap())
            .src_index(Tensor::new(&slots, &dims(&[BT])).unwrap())
            .dt_softplus(true);
            if replay_plan.is_none() {
                let plan = ctx.plan_replay(&args, None).expect("replay plan");
                let info = plan.info().unwrap();
                assert_eq!(info.backend, Backend::Cpu);
                assert!(!info.algorithm_name.is_empty());
                replay_plan = Some(plan);
            }
            replay_plan.as_ref().unwrap().execute(&mut args).expect("replay step");
        }
        close(&out_replay, &out_plain, &format!("step {k} out"));
        assert!(out_replay[H * P..2 * H * P].iter().all(|&v| v == 0.0), "padding outputs are zero");
    }
    // 7 steps with L = 4: the fifth stored a checkpoint; two entries are
    // committed since and the last token is pending.
    for s in [3usize, 0] {
        assert_eq!((ring.committed[s], ring.pending[s]), (2, 1), "slot {s} counters");
    }
    assert_eq!((ring.committed[1], ring.pending[1]), (0, 0), "untouched slot");
    assert_ne!(ckpt, plain, "the checkpoint lags behind until flushed");

    let plan = replay_plan.unwrap();
    let flush_slots = [0i64, -1, 3];
    {
        let mut args = ReplayFlushArgs::new(
            TensorMut::new(&mut ckpt, &dims(&[S, H, P, N])).unwrap(),
            ring.view(),
            Tensor::new(&w.a, &dims(&[H])).unwrap(),
            Tensor::new(&flush_slots, &[3]).unwrap(),
        );
        plan.flush(&mut args).expect("replay flush");
    }
    assert!(ring.committed.iter().chain(&ring.pending).all(|&c| c == 0), "counters zeroed");
    for (i, (&a, &b)) in ckpt.iter().zip(&plain).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "state[{i}]: flushed {a}, plain update {b}");
    }
}

#[test]
fn replay_refuses_bad_num_accepted_and_writes_nothing() {
    let ctx = Context::new(Backend::Cpu, 0, 1).expect("CPU context");
    let mut r = Rng(5);
    let mut ckpt = r.vec(S * H * P * N, 1.0, 0.0);
    let w = Weights { a: r.vec(H, 0.5, -1.5), d: vec![0.0; H], dt_bias: vec![0.0; H] };
    let st = step(&mut r);
    let slots = [0i32, 2, 4];
    let mut ring = Ring::new();
    ring.pending = vec![1; S]; // one token of the previous call pending in every slot
    let accepted = [1i32, 2, 0]; // the second sequence accepts more than it has
    let ckpt0 = ckpt.clone();
    let (ring_x0, ring_dt0) = (ring.x.clone(), ring.dt.clone());
    let mut out = vec![f32::NAN; BT * H * P];
    let err = {
        let mut args = ReplayArgs::new(
            TensorMut::new(&mut ckpt, &dims(&[S, H, P, N])).unwrap(),
            ring.view(),
            Tensor::new(&st.x, &dims(&[BT, H, P])).unwrap(),
            Tensor::new(&st.dt, &dims(&[BT, H])).unwrap(),
            Tensor::new(&w.a, &dims(&[H])).unwrap(),
            Tensor::new(&st.b, &dims(&[BT, G, N])).unwrap(),
            Tensor::new(&st.c, &dims(&[BT, G, N])).unwrap(),
            TensorMut::new(&mut out, &dims(&[BT, H, P])).unwrap(),
        )
        .src_index(Tensor::new(&slots, &dims(&[BT])).unwrap())
        .num_accepted(Tensor::new(&accepted, &dims(&[BT])).unwrap());
        let plan = ctx.plan_replay(&args, Some(Algorithm::CpuRows)).expect("replay plan");
        plan.execute(&mut args).expect_err("num_accepted > pending")
    };
    assert_eq!(err.status(), ssu::sys::SSU_ERROR_INVALID_ARGUMENT);
    assert!(err.message().contains("num_accepted[1]=2"), "{}", err.message());
    assert!(out.iter().all(|v| v.is_nan()), "outputs written");
    assert_eq!(ckpt, ckpt0, "checkpoints written");
    assert_eq!((ring.x, ring.dt), (ring_x0, ring_dt0), "ring written");
    assert_eq!((ring.committed, ring.pending), (vec![0; S], vec![1; S]), "counters written");
}
