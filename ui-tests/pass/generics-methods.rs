use gpu_scope::{gpu_scope, Tensors};
use tch::Tensor;

#[derive(Tensors)]
struct Cache<T: Tensors> {
    items: Vec<T>,
}

impl<T: Tensors> Cache<T> {
    #[gpu_scope(on_escape = panic)]
    fn push(&mut self, item: T) {
        self.items.push(item);
    }

    #[gpu_scope]
    fn first(&self) -> Option<&T> {
        self.items.first()
    }

    #[gpu_scope]
    fn into_items(self) -> Vec<T> {
        self.items
    }
}

#[gpu_scope]
fn sum<I>(values: I) -> Tensor
where
    I: IntoIterator<Item = Tensor>,
{
    values.into_iter().fold(Tensor::zeros([2], tch::kind::FLOAT_CPU), |a, b| a + b)
}

#[gpu_scope]
fn shapes(t: &impl AsRef<Tensor>) -> impl Iterator<Item = i64> {
    t.as_ref().size().into_iter()
}

/// Docs and attributes are preserved.
#[gpu_scope(name = "pub-fn", release = "64 MiB", max_peak = "1 GiB", keep_grad)]
#[inline]
pub fn documented((a, b): (u32, u32), mut c: u32) -> u32 {
    c += 1;
    a + b + c
}

fn main() {
    let mut cache = Cache { items: Vec::new() };
    cache.push(Tensor::ones([2], tch::kind::FLOAT_CPU));
    assert!(cache.first().is_some());
    assert_eq!(cache.into_items().len(), 1);
    assert_eq!(sum(vec![Tensor::ones([2], tch::kind::FLOAT_CPU)]).size(), [2]);
    assert_eq!(shapes(&Tensor::ones([3], tch::kind::FLOAT_CPU)).count(), 1);
    assert_eq!(documented((1, 2), 3), 7);
}
