//! Lets `cargo run` find the libssu that ssu-sys linked (through pkg-config
//! or SSU_LIB_DIR) without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SSU_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_SSU_LIB_DIR") {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
    }
}
