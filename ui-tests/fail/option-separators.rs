#[gpu_scope::gpu_scope(keep_grad(true))]
fn called() {}

#[gpu_scope::gpu_scope(name = "a",, release = never)]
fn doubled() {}

fn main() {
    called();
    doubled();
}
