// A `max_peak` expression of a type that is not an integer (an argument, a computed float, an
// `Option`) is refused at the expression, naming the trait `max_peak` takes, not a generated
// path.
#[gpu_scope::gpu_scope(max_peak = limit)]
fn from_text(limit: &str) -> usize {
    limit.len()
}

fn main() {
    from_text("1 GiB");
    let scale = 2.0_f64;
    gpu_scope::scope!(max_peak = scale * 1024.0, {});
    let maybe: Option<u64> = Some(1024);
    gpu_scope::scope!(max_peak = maybe, {});
}
