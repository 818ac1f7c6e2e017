#[gpu_scope::gpu_scope(keep = [cache])]
fn run(cache: &mut Vec<tch::Tensor>) {
    cache.clear();
}

fn main() {
    run(&mut Vec::new());
}
