// A semicolon after the value to return: shown at the return type with rustc's advice, as
// without the attribute (sync), and at the body (async).
use tch::Tensor;

#[gpu_scope::gpu_scope]
fn make(x: &Tensor) -> Tensor {
    let y = x * 2;
    y;
}

#[gpu_scope::gpu_scope]
async fn make_later(x: u32) -> u32 {
    x * 2;
}

fn main() {}
