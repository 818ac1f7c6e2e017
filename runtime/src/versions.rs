//! The versions a bug report needs: gpu-scope's, tch's, and the running libtorch's.
use crate::ffi;
use serde::Serialize;
use std::fmt;
use std::sync::OnceLock;

/// The tch series this build of gpu-scope is for: its feature, exactly one of which is on
/// (build.rs says so otherwise). `tests/versions.rs` checks it against Cargo.lock.
#[cfg(feature = "tch-0-24")]
const TCH: &str = "0.24";
#[cfg(all(feature = "tch-0-25", not(feature = "tch-0-24")))]
const TCH: &str = "0.25";
#[cfg(all(
    feature = "tch-0-26",
    not(any(feature = "tch-0-24", feature = "tch-0-25"))
))]
const TCH: &str = "0.26";

// The tch Cargo resolved must be the one the feature names: each line names a function only
// that tch has, so a mismatch stops here (with the feature's name in the error) instead of at
// a later, less clear place. The user's `tch` requirement must match the feature. tch 0.25
// is not on crates.io (a crate using it takes it from its sources, through [patch.crates-io]),
// so there is no function of it to name here: for `tch-0-25` build.rs's libtorch check (2.12,
// which only tch 0.25 binds) stands in.
#[cfg(all(
    feature = "tch-0-24",
    not(any(feature = "tch-0-25", feature = "tch-0-26"))
))]
const _FEATURE_TCH_0_24_NEEDS_TCH_0_24: fn(&tch::Tensor, &tch::Tensor) -> tch::Tensor =
    tch::Tensor::align_as; // feature `tch-0-24` needs `tch = "0.24"`
#[cfg(all(
    feature = "tch-0-26",
    not(any(feature = "tch-0-24", feature = "tch-0-25"))
))]
const _FEATURE_TCH_0_26_NEEDS_TCH_0_26: fn(&tch::Tensor, i64) -> tch::Tensor =
    tch::Tensor::internal_philox_key_split; // feature `tch-0-26` needs `tch = "0.26"`

/// What runs: gpu-scope, the tch it was built with, and the libtorch loaded in this process.
/// Printed by the demo's first line, and part of every [`ScopeReport`](crate::ScopeReport)'s
/// JSON (`"versions"`). Displays as `gpu-scope 0.1.0, tch 0.26, libtorch 2.13.0 (CUDA 13.0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Versions {
    /// gpu-scope's version.
    pub gpu_scope: &'static str,
    /// The `tch` series gpu-scope was built for (`"0.26"`), named by its feature.
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
