// A return type that is a path but no `Result` (the macro cannot tell a type from an alias):
// refused with the option's message, at the type.
#[gpu_scope::gpu_scope(on_escape = error)]
fn run() -> tch::Tensor {
    tch::Tensor::from(1.0)
}

fn main() {
    let _ = run();
}
