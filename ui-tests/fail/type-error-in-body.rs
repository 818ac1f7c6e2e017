#[gpu_scope::gpu_scope]
fn run(x: u32) -> u32 {
    let y: u32 = "not a number";
    x + y
}

fn main() {
    run(1);
}
