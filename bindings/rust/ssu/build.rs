//! Embeds an rpath to the libssu found by ssu-sys into this crate's test
//! binaries, so that `cargo test` runs without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SSU_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_SSU_LIB_DIR") {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
    }
}
