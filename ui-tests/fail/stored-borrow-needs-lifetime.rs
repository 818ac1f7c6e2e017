// A borrow stored through a `&mut` argument for longer than its type says: shown at that
// argument with rustc's advice, not at the attribute.
use tch::Tensor;

#[gpu_scope::gpu_scope]
fn stash<'a>(store: &mut Vec<&'a Tensor>, t: &Tensor) {
    store.push(t);
}

fn main() {}
