// A borrow stored through a `&mut` argument or receiver for longer than its type says: shown at
// that argument or receiver with rustc's advice, not at the attribute.
use tch::Tensor;

#[gpu_scope::gpu_scope]
fn stash<'a>(store: &mut Vec<&'a Tensor>, t: &Tensor) {
    store.push(t);
}

struct Refs<'a> {
    refs: Vec<&'a Tensor>,
}

impl<'a> Refs<'a> {
    #[gpu_scope::gpu_scope]
    fn remember(&mut self, t: &Tensor) {
        self.refs.push(t);
    }
}

fn main() {}
