//! The safe crate on the CPU backend, against a float64 reference.

use ssu::{Algorithm, Backend, Bf16, Context, DType, Tensor, TensorMut, UpdateArgs, F16};

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

const S: usize = 6;
const H: usize = 4;
const P: usize = 8;
const N: usize = 16;

fn softplus(v: f64) -> f64 {
    if v > 20.0 {
        v
    } else {
        v.exp().ln_1p()
    }
}

/// Reference: one token per sequence, per-head A/dt/D/dt_bias, G = 1,
/// softplus, optional gate z. Returns (expected state, expected out).
#[allow(clippy::too_many_arguments)]
fn reference(
    state: &[f32], x: &[f32], dt: &[f32], a: &[f32], b: &[f32], c: &[f32], d: &[f32],
    dt_bias: &[f32], z: &[f32], src: &[i32], dst: &[i32],
) -> (Vec<f64>, Vec<f64>) {
    let bt = src.len();
    let mut st: Vec<f64> = state.iter().map(|&v| v as f64).collect();
    let mut out = vec![0f64; bt * H * P];
    for bi in 0..bt {
        if src[bi] < 0 {
            continue;
        }
        let (s, dd) = (src[bi] as usize, dst[bi] as usize);
        for h in 0..H {
            let delta = softplus(dt[bi * H + h] as f64 + dt_bias[h] as f64);
            let da = (a[h] as f64 * delta).exp();
            for p in 0..P {
                let xv = x[(bi * H + h) * P + p] as f64;
                let mut y = 0f64;
                let mut row = [0f64; N];
                for n in 0..N {
                    let old = state[((s * H + h) * P + p) * N + n] as f64;
                    let hn = old * da + b[bi * N + n] as f64 * delta * xv;
                    row[n] = hn;
                    y += hn * c[bi * N + n] as f64;
                }
                y += d[h] as f64 * xv;
                let zv = z[(bi * H + h) * P + p] as f64;
                y *= zv / (1.0 + (-zv).exp());
                out[(bi * H + h) * P + p] = y;
                for n in 0..N {
                    st[((dd * H + h) * P + p) * N + n] = row[n];
                }
            }
        }
    }
    (st, out)
}

fn close(got: &[f32], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

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
    d: Vec<f32>,
    dt_bias: Vec<f32>,
    z: Vec<f32>,
}

fn inputs(bt: usize, seed: u64) -> Inputs {
    let mut r = Rng(seed);
    Inputs {
        state: r.vec(S * H * P * N, 1.0, 0.0),
        x: r.vec(bt * H * P, 1.0, 0.0),
        dt: r.vec(bt * H, 0.5, 0.0),
        a: r.vec(H, 0.5, -1.5),
        b: r.vec(bt * N, 1.0, 0.0),
        c: r.vec(bt * N, 1.0, 0.0),
        d: r.vec(H, 1.0, 0.0),
        dt_bias: r.vec(H, 0.5, -3.5),
        z: r.vec(bt * H * P, 1.0, 0.0),
    }
}

#[test]
fn version_and_names() {
    assert_eq!(ssu::version() / 100, ssu::sys::SSU_VERSION as u32 / 100);
    assert!(!ssu::version_string().is_empty());
    assert_eq!(DType::Bf16.size(), 2);
    assert_eq!(DType::I64.size(), 8);
    assert_eq!(DType::F32.name(), "f32");
    assert_eq!(Backend::Cpu.name(), "cpu");
}

#[test]
fn single_token_with_padding_and_dst() {
    let ctx = Context::new(Backend::Cpu, 0, 2).expect("CPU context");
    assert_eq!(ctx.backend().unwrap(), Backend::Cpu);
    assert!(!ctx.device_name().is_empty());

    let bt = 3;
    let inp = inputs(bt, 7);
    let src = [4i32, -1, 1];
    let dst = [2i32, -1, 0];
    let (want_state, want_out) = reference(
        &inp.state, &inp.x, &inp.dt, &inp.a, &inp.b, &inp.c, &inp.d, &inp.dt_bias, &inp.z, &src, &dst,
    );
    let mut state = inp.state.clone();
    let mut out = vec![f32::NAN; bt * H * P];
    {
        let mut args = UpdateArgs::new(
            TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
            Tensor::new(&inp.x, &dims(&[bt, H, P])).unwrap(),
            Tensor::new(&inp.dt, &dims(&[bt, H])).unwrap(),
            Tensor::new(&inp.a, &dims(&[H])).unwrap(),
            Tensor::new(&inp.b, &dims(&[bt, 1, N])).unwrap(),
            Tensor::new(&inp.c, &dims(&[bt, 1, N])).unwrap(),
            TensorMut::new(&mut out, &dims(&[bt, H, P])).unwrap(),
        )
        .d(Tensor::new(&inp.d, &dims(&[H])).unwrap())
        .dt_bias(Tensor::new(&inp.dt_bias, &dims(&[H])).unwrap())
        .z(Tensor::new(&inp.z, &dims(&[bt, H, P])).unwrap())
        .src_index(Tensor::new(&src, &[3]).unwrap())
        .dst_index(Tensor::new(&dst, &[3]).unwrap())
        .dt_softplus(true);
        let plan = ctx.plan_update(&args, None).expect("plan");
        let info = plan.info().unwrap();
        assert_eq!(info.backend, Backend::Cpu);
        assert!(!info.algorithm_name.is_empty());
        plan.execute(&mut args).expect("execute");
    }
    close(&state, &want_state, 1e-4, 1e-4, "state");
    close(&out, &want_out, 1e-4, 1e-4, "out");
    // The padded sequence's outputs are exactly zero.
    assert!(out[H * P..2 * H * P].iter().all(|&v| v == 0.0));
    // Slots that are not destinations are bit-identical.
    for s in [1usize, 3, 4, 5] {
        let r = s * H * P * N..(s + 1) * H * P * N;
        assert!(state[r.clone()].iter().zip(&inp.state[r]).all(|(a, b)| a.to_bits() == b.to_bits()), "slot {s}");
    }
}

#[test]
fn pinned_algorithms_on_the_cpu() {
    let ctx = Context::new(Backend::Cpu, 0, 1).unwrap();
    let bt = 2;
    let inp = inputs(bt, 13);
    let mut state = inp.state.clone();
    let mut out = vec![0f32; bt * H * P];
    let args = UpdateArgs::new(
        TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
        Tensor::new(&inp.x, &dims(&[bt, H, P])).unwrap(),
        Tensor::new(&inp.dt, &dims(&[bt, H])).unwrap(),
        Tensor::new(&inp.a, &dims(&[H])).unwrap(),
        Tensor::new(&inp.b, &dims(&[bt, 1, N])).unwrap(),
        Tensor::new(&inp.c, &dims(&[bt, 1, N])).unwrap(),
        TensorMut::new(&mut out, &dims(&[bt, H, P])).unwrap(),
    );
    let plan = ctx.plan_update(&args, Some(Algorithm::CpuRows)).expect("cpu_rows");
    let info = plan.info().unwrap();
    assert_eq!(info.algorithm, Algorithm::CpuRows);
    assert_eq!(info.algorithm_name, "cpu_rows");
    // The CUDA algorithms are refused by the CPU backend, each by its own code.
    for alg in [Algorithm::CudaSimple, Algorithm::CudaPipelined] {
        let err = ctx.plan_update(&args, Some(alg)).err().expect("a CUDA algorithm on the CPU");
        assert_eq!(err.status(), ssu::sys::SSU_ERROR_ALGORITHM_UNAVAILABLE, "{alg:?}: {err}");
    }
    // 3 was cuda_tma until 0.2; the library refuses it like any unknown value.
    for raw in [3, 99] {
        let err = ctx.plan_update(&args, Some(Algorithm::Other(raw))).err().expect("unknown");
        assert_eq!(err.status(), ssu::sys::SSU_ERROR_ALGORITHM_UNAVAILABLE, "{raw}: {err}");
        assert!(err.to_string().contains(&format!("algorithm={raw} is not an algorithm")), "{err}");
    }
    let err = ctx.plan_update(&args, Some(Algorithm::CudaPipelined)).err().unwrap();
    assert!(err.to_string().contains("cuda_pipelined"), "{err}");
}

#[test]
fn disable_state_update_leaves_pool_bit_identical() {
    let ctx = Context::new(Backend::Cpu, 0, 1).unwrap();
    let bt = 2;
    let inp = inputs(bt, 11);
    let src = [0i64, 5];
    let mut state = inp.state.clone();
    let mut out = vec![0f32; bt * H * P];
    let mut args = UpdateArgs::new(
        TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
        Tensor::new(&inp.x, &dims(&[bt, H, P])).unwrap(),
        Tensor::new(&inp.dt, &dims(&[bt, H])).unwrap(),
        Tensor::new(&inp.a, &dims(&[H])).unwrap(),
        Tensor::new(&inp.b, &dims(&[bt, 1, N])).unwrap(),
        Tensor::new(&inp.c, &dims(&[bt, 1, N])).unwrap(),
        TensorMut::new(&mut out, &dims(&[bt, H, P])).unwrap(),
    )
    .src_index(Tensor::new(&src, &[2]).unwrap())
    .disable_state_update(true);
    ctx.update(&mut args).unwrap();
    drop(args);
    assert!(state.iter().zip(&inp.state).all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(out.iter().any(|&v| v != 0.0));
}

#[test]
fn bf16_state_pool() {
    let ctx = Context::new(Backend::Cpu, 0, 0).unwrap();
    let bt = 2;
    let inp = inputs(bt, 3);
    let src = [1i32, 3];
    // Round the state to bf16 first so the reference sees the same input.
    let state16: Vec<Bf16> = inp.state.iter().map(|&v| Bf16::from_f32(v)).collect();
    let state_in: Vec<f32> = state16.iter().map(|v| v.to_f32()).collect();
    let zeros = vec![0f32; H];
    let ones = vec![10f32; bt * H * P]; // silu(10) ~ 1: a gate that barely changes y
    let (want_state, _) = reference(
        &state_in, &inp.x, &inp.dt, &inp.a, &inp.b, &inp.c, &zeros, &inp.dt_bias, &ones, &src, &src,
    );
    let mut state = state16.clone();
    let mut out = vec![0f32; bt * H * P];
    let mut args = UpdateArgs::new(
        TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
        Tensor::new(&inp.x, &dims(&[bt, H, P])).unwrap(),
        Tensor::new(&inp.dt, &dims(&[bt, H])).unwrap(),
        Tensor::new(&inp.a, &dims(&[H])).unwrap(),
        Tensor::new(&inp.b, &dims(&[bt, 1, N])).unwrap(),
        Tensor::new(&inp.c, &dims(&[bt, 1, N])).unwrap(),
        TensorMut::new(&mut out, &dims(&[bt, H, P])).unwrap(),
    )
    .dt_bias(Tensor::new(&inp.dt_bias, &dims(&[H])).unwrap())
    .z(Tensor::new(&ones, &dims(&[bt, H, P])).unwrap())
    .src_index(Tensor::new(&src, &[2]).unwrap())
    .dt_softplus(true);
    ctx.update(&mut args).unwrap();
    drop(args);
    let got: Vec<f32> = state.iter().map(|v| v.to_f32()).collect();
    close(&got, &want_state, 1e-2, 1e-2, "bf16 state");
}

#[test]
fn error_carries_status_and_message() {
    let ctx = Context::new(Backend::Cpu, 0, 1).unwrap();
    let bt = 2;
    let inp = inputs(bt, 5);
    let mut state = inp.state.clone();
    let mut out = vec![0f32; bt * H * P];
    // x claims P-1 columns: the library must reject the shape.
    let args = UpdateArgs::new(
        TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
        Tensor::strided(&inp.x, &dims(&[bt, H, P - 1]), &dims(&[H * P, P, 1])).unwrap(),
        Tensor::new(&inp.dt, &dims(&[bt, H])).unwrap(),
        Tensor::new(&inp.a, &dims(&[H])).unwrap(),
        Tensor::new(&inp.b, &dims(&[bt, 1, N])).unwrap(),
        Tensor::new(&inp.c, &dims(&[bt, 1, N])).unwrap(),
        TensorMut::new(&mut out, &dims(&[bt, H, P])).unwrap(),
    );
    let err = ctx.plan_update(&args, None).err().expect("a shape error");
    assert_eq!(err.family(), 1, "{err}");
    assert!(!err.message().is_empty(), "{err}");
    assert!(err.to_string().contains(err.message()));

    // An out-of-range slot is rejected before anything is written.
    drop(args);
    let src = [0i32, S as i32];
    let before = state.clone();
    let mut args = UpdateArgs::new(
        TensorMut::new(&mut state, &dims(&[S, H, P, N])).unwrap(),
        Tensor::new(&inp.x, &dims(&[bt, H, P])).unwrap(),
        Tensor::new(&inp.dt, &dims(&[bt, H])).unwrap(),
        Tensor::new(&inp.a, &dims(&[H])).unwrap(),
        Tensor::new(&inp.b, &dims(&[bt, 1, N])).unwrap(),
        Tensor::new(&inp.c, &dims(&[bt, 1, N])).unwrap(),
        TensorMut::new(&mut out, &dims(&[bt, H, P])).unwrap(),
    )
    .src_index(Tensor::new(&src, &[2]).unwrap());
    let err = ctx.update(&mut args).err().expect("an index error");
    assert_eq!(err.status(), ssu::sys::SSU_ERROR_INDEX_OUT_OF_RANGE, "{err}");
    drop(args);
    assert!(state.iter().zip(&before).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn descriptors_check_slice_bounds() {
    let v = vec![0f32; 10];
    assert!(Tensor::new(&v, &[2, 5]).is_ok());
    assert!(Tensor::new(&v, &[3, 4]).is_err());
    assert!(Tensor::strided(&v, &[4, 3], &[3, 1]).is_err()); // reaches element 11
    assert!(Tensor::strided(&v, &[4, 3], &[0, 1]).is_ok()); // broadcast rows
    assert!(Tensor::strided(&v, &[2], &[-1]).is_err());
    assert!(Tensor::new(&v, &[1, 1, 1, 1, 1, 1, 10]).is_err());
}

#[test]
fn half_conversions_round_trip() {
    for bits in 0..=u16::MAX {
        let h = F16(bits);
        let f = h.to_f32();
        if f.is_nan() {
            assert!(F16::from_f32(f).to_f32().is_nan());
        } else {
            assert_eq!(F16::from_f32(f).0, bits, "f16 {bits:#06x}");
        }
        let b = Bf16(bits);
        let g = b.to_f32();
        if g.is_nan() {
            assert!(Bf16::from_f32(g).to_f32().is_nan());
        } else {
            assert_eq!(Bf16::from_f32(g).0, bits, "bf16 {bits:#06x}");
        }
    }
    // Ties round to even; overflow goes to Inf.
    assert_eq!(F16::from_f32(1.0 + 1.0 / 2048.0).0, 0x3c00);
    assert_eq!(F16::from_f32(1.0 + 3.0 / 2048.0).0, 0x3c02);
    assert_eq!(F16::from_f32(65520.0).0, 0x7c00);
    assert_eq!(F16::from_f32(65519.0).0, 0x7bff);
    assert_eq!(F16::from_f32(5.960_464_5e-8).0, 0x0001); // 2^-24
    assert_eq!(Bf16::from_f32(1.0 + 1.0 / 256.0).0, 0x3f80);
    assert_eq!(Bf16::from_f32(1.0 + 3.0 / 256.0).0, 0x3f82);
}
