// `max_peak` takes bytes: a `bool` (which would convert to 1) or a float is refused.
#[gpu_scope::gpu_scope(max_peak = true)]
fn flag() {}

fn main() {
    flag();
    gpu_scope::scope!(max_peak = 1.5, {});
}
