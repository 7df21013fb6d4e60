//! Emits an rpath to the pinned libtorch so binaries and tests run without LD_LIBRARY_PATH.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Some(libtorch) = std::env::var_os("LIBTORCH") else {
        println!("cargo:warning=LIBTORCH is not set; run ci/bootstrap first");
        return;
    };
    let lib_dir = PathBuf::from(libtorch).join("lib");
    // Resolve the .libtorch link so the rpath names the cache, not the checkout.
    let lib_dir = std::fs::canonicalize(&lib_dir).unwrap_or(lib_dir);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    println!(
        "cargo:rustc-env=SHARDLIFT_LIBTORCH_LIB_DIR={}",
        lib_dir.display()
    );
}
