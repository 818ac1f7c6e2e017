// A `keep_grad` expression must be a `bool`: the error is at the expression.
#[gpu_scope::gpu_scope(keep_grad = layers + 1)]
fn run(layers: u32) {}

fn main() {
    run(2);
}
