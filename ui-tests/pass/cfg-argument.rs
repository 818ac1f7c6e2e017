// An argument under `#[cfg]` that is compiled out.
use gpu_scope::gpu_scope;

#[gpu_scope]
fn width(#[cfg(any())] hidden: Vec<u8>, shown: i64) -> i64 {
    shown
}

fn main() {
    assert_eq!(width(3), 3);
}
