// A borrow error in a scoped body points into the function (its body and the statement), not
// at the attribute, with rustc's own advice (`&mut self`); in an `async fn` too.
use tch::Tensor;

struct Model {
    cache: Vec<Tensor>,
}

impl Model {
    #[gpu_scope::gpu_scope]
    fn push(&self, x: &Tensor) {
        self.cache.push(x + 1);
    }

    #[gpu_scope::gpu_scope]
    async fn push_later(&self, x: &Tensor) {
        self.cache.push(x + 2);
    }
}

fn main() {
    let m = Model { cache: vec![] };
    m.push(&Tensor::from(1.0));
}
