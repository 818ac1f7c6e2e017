// A name written without `name =`.
#[gpu_scope::gpu_scope("train_step")]
fn step() {}

fn main() {
    step();
    let _ = gpu_scope::scope!("fill", { 1 });
}
