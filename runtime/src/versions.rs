//! The versions a bug report needs: gpu-scope's, tch's, and the running libtorch's.
use crate::ffi;
use serde::Serialize;
use std::fmt;
use std::sync::OnceLock;

/// The tch this build of gpu-scope uses: Cargo.toml pins it exactly, so it is the one your
/// crate's `tch` resolves to (`tests/versions.rs` checks it against Cargo.lock).
const TCH: &str = "0.24.0";

/// What runs: gpu-scope, the tch it was built with, and the libtorch loaded in this process.
/// Printed by the demo's first line, and part of every [`ScopeReport`](crate::ScopeReport)'s
/// JSON (`"versions"`). Displays as `gpu-scope 0.1.0, tch 0.24.0, libtorch 2.11.0 (CUDA 13.0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Versions {
    /// gpu-scope's version.
    pub gpu_scope: &'static str,
    /// The version of the `tch` crate gpu-scope was built with.
    pub tch: &'static str,
    /// The libtorch loaded in this process, as it records its own version (`TORCH_VERSION` of
    /// its build options, what `torch.__config__.show()` prints): not the headers gpu-scope
    /// was compiled with, so a library swapped in through the loader path shows here.
    /// `"unknown"` if it does not say.
    pub libtorch: &'static str,
    /// The CUDA version that libtorch was built with (`"13.0"`), `None` for a CPU-only build.
    pub cuda: Option<&'static str>,
}

/// The versions of gpu-scope, tch and the running libtorch (asked once per process).
pub fn versions() -> Versions {
    static VERSIONS: OnceLock<Versions> = OnceLock::new();
    *VERSIONS.get_or_init(|| Versions {
        gpu_scope: env!("CARGO_PKG_VERSION"),
        tch: TCH,
        libtorch: ffi::build_option(c"TORCH_VERSION").unwrap_or("unknown"),
        cuda: ffi::build_option(c"CUDA_VERSION").filter(|v| *v != "0" && *v != "OFF"),
    })
}

impl fmt::Display for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gpu-scope {}, tch {}, libtorch {}",
            self.gpu_scope, self.tch, self.libtorch
        )?;
        match self.cuda {
            Some(cuda) => write!(f, " (CUDA {cuda})"),
            None => write!(f, " (no CUDA)"),
        }
    }
}
