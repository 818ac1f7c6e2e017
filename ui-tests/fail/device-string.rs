// `device` takes a `tch::Device` expression: a string (or other literal) is refused where it
// is written, with what to write instead.
#[gpu_scope::gpu_scope(device = "cuda")]
fn run() {}

fn main() {
    run();
    let _ = gpu_scope::scope!(device = "cuda:0", { 1 });
}
