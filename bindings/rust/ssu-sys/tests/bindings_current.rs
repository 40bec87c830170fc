//! Fails when src/bindings.rs differs from a fresh bindgen run on
//! include/ssu.h. Needs bindgen and rustfmt; without them the test fails
//! too, unless SSU_SKIP_BINDGEN_CHECK=1 says that skipping is intended.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn committed_bindings_match_header() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let script = root.join("tools/regen-rust-bindings.sh");
    if std::env::var("SSU_SKIP_BINDGEN_CHECK").as_deref() == Ok("1") {
        eprintln!("SSU_SKIP_BINDGEN_CHECK=1: not comparing the bindings with the header");
        return;
    }
    let out = Command::new("bash")
        .arg(&script)
        .arg("--check")
        .output()
        .expect("running tools/regen-rust-bindings.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bindings.rs is not current (exit {:?}):\n{stderr}\n\
         (exit 2 means bindgen/rustfmt are missing; set SSU_SKIP_BINDGEN_CHECK=1 to skip)",
        out.status.code()
    );
}

#[test]
fn initializers_set_struct_size() {
    use ssu_sys::*;
    assert_eq!(ssu_update_args_init().struct_size as usize, std::mem::size_of::<ssu_update_args_t>());
    assert_eq!(ssu_update_args_init().pad_slot_id, -1);
    assert_eq!(ssu_state_pool_init().struct_size as usize, std::mem::size_of::<ssu_state_pool_t>());
    assert_eq!(ssu_status_family(SSU_ERROR_BAD_SHAPE), 1);
    assert_eq!(
        ssu_mamba3_step_args_init().struct_size as usize,
        std::mem::size_of::<ssu_mamba3_step_args_t>()
    );
    assert_eq!(ssu_mamba3_step_args_init().pad_slot_id, -1);
    assert_eq!(
        ssu_mamba3_rotary_args_init().struct_size as usize,
        std::mem::size_of::<ssu_mamba3_rotary_args_t>()
    );
    assert_eq!(ssu_mamba3_rotary_args_init().pad_slot_id, -1);
    assert!(ssu_update_args_init().rounding_seed.is_null());
    assert_eq!(ssu_replay_ring_init().struct_size as usize, std::mem::size_of::<ssu_replay_ring_t>());
    assert_eq!(ssu_replay_args_init().struct_size as usize, std::mem::size_of::<ssu_replay_args_t>());
    assert_eq!(ssu_replay_args_init().pad_slot_id, -1);
    assert!(ssu_replay_args_init().ring.is_null());
    assert_eq!(
        ssu_replay_flush_args_init().struct_size as usize,
        std::mem::size_of::<ssu_replay_flush_args_t>()
    );
    assert_eq!(ssu_replay_flush_args_init().pad_slot_id, -1);
}

/// The library's own sizeof() of every struct equals the one bindgen saw.
#[test]
fn struct_sizes_match_library() {
    use ssu_sys::*;
    use std::mem::size_of;
    let want = [
        (SSU_STRUCT_TENSOR, size_of::<ssu_tensor_t>()),
        (SSU_STRUCT_STATE_POOL, size_of::<ssu_state_pool_t>()),
        (SSU_STRUCT_CONTEXT_OPTIONS, size_of::<ssu_context_options_t>()),
        (SSU_STRUCT_PLAN_OPTIONS, size_of::<ssu_plan_options_t>()),
        (SSU_STRUCT_PLAN_INFO, size_of::<ssu_plan_info_t>()),
        (SSU_STRUCT_UPDATE_ARGS, size_of::<ssu_update_args_t>()),
        (SSU_STRUCT_MAMBA3_STEP_ARGS, size_of::<ssu_mamba3_step_args_t>()),
        (SSU_STRUCT_MAMBA3_ROTARY_ARGS, size_of::<ssu_mamba3_rotary_args_t>()),
        (SSU_STRUCT_REPLAY_RING, size_of::<ssu_replay_ring_t>()),
        (SSU_STRUCT_REPLAY_ARGS, size_of::<ssu_replay_args_t>()),
        (SSU_STRUCT_REPLAY_FLUSH_ARGS, size_of::<ssu_replay_flush_args_t>()),
    ];
    for (id, size) in want {
        assert_eq!(unsafe { ssu_struct_size(id) }, size, "struct id {id}");
    }
    assert_eq!(unsafe { ssu_struct_size(99) }, 0);
}

#[test]
fn links_and_reports_version() {
    let v = unsafe { ssu_sys::ssu_version() };
    assert_eq!(v / 100, ssu_sys::SSU_VERSION as u32 / 100, "library major.minor differs from the header");
    let s = unsafe { std::ffi::CStr::from_ptr(ssu_sys::ssu_version_string()) };
    assert!(!s.to_bytes().is_empty());
}
