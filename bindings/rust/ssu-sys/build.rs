//! Finds libssu for linking.
//!
//! Order: `SSU_LIB_DIR` (a directory holding libssu.so), then
//! `pkg-config --libs ssu` run as a subprocess (honours PKG_CONFIG_PATH), then
//! the linker's default search path. The directory found is passed on to
//! dependent build scripts as `DEP_SSU_LIB_DIR`, so that they can embed an
//! rpath in test and example binaries (installed programs should rely on
//! the system's library path instead).

use std::env;
use std::path::Path;
use std::process::Command;

/// Passes the directory on to dependents and embeds it as an rpath in this
/// crate's own test binaries.
fn lib_dir(dir: &str) {
    println!("cargo:lib_dir={dir}");
    println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
}

fn main() {
    println!("cargo:rerun-if-env-changed=SSU_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-changed=build.rs");

    if let Ok(dir) = env::var("SSU_LIB_DIR") {
        if !Path::new(&dir).is_dir() {
            panic!("SSU_LIB_DIR={dir} is not a directory");
        }
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-lib=dylib=ssu");
        lib_dir(&dir);
        return;
    }

    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    match Command::new(&pkg_config).args(["--libs", "ssu"]).output() {
        Ok(out) if out.status.success() => {
            let flags = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut linked = false;
            for flag in flags.split_whitespace() {
                if let Some(dir) = flag.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={dir}");
                    lib_dir(dir);
                } else if let Some(lib) = flag.strip_prefix("-l") {
                    println!("cargo:rustc-link-lib=dylib={lib}");
                    linked |= lib == "ssu";
                }
            }
            if !linked {
                println!("cargo:rustc-link-lib=dylib=ssu");
            }
        }
        Ok(out) => {
            println!(
                "cargo:warning=`{pkg_config} --libs ssu` failed ({}); linking -lssu from the default search path",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            println!("cargo:rustc-link-lib=dylib=ssu");
        }
        Err(err) => {
            println!(
                "cargo:warning=could not run {pkg_config} ({err}); linking -lssu from the default search path"
            );
            println!("cargo:rustc-link-lib=dylib=ssu");
        }
    }
}
