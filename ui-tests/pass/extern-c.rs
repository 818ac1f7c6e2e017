// `extern "C"` functions: any policy but `panic` (the default turns into a warning there);
// `extern "C-unwind"` ones: any policy.
use gpu_scope::gpu_scope;

#[gpu_scope(on_escape = warn)]
pub extern "C" fn warn_policy(x: u32) -> u32 {
    x + 1
}

#[gpu_scope]
extern "C" fn default_policy() -> u32 {
    2
}

// A panic unwinds through `extern "C-unwind"`.
#[gpu_scope(on_escape = panic)]
extern "C-unwind" fn unwinds() -> u32 {
    3
}

fn main() {
    assert_eq!(warn_policy(1) + default_policy() + unwinds(), 7);
}
