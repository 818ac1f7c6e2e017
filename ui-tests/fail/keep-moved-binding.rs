use tch::Tensor;

fn main() {
    let batches: Vec<Tensor> = Vec::new();
    let moved = batches;
    let n = gpu_scope::scope!(keep = [batches], { 1 });
    drop((moved, n));
}
