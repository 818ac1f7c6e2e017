// `keep` takes places (variables or fields); a value computed in the list is refused where it
// is written, and the places beside it are not.
use tch::Tensor;

fn main() {
    let c: Vec<Tensor> = Vec::new();
    let n = gpu_scope::scope!(keep = [c, c.len(), &c[0].size()], { 1 });
    let _ = n;
}
