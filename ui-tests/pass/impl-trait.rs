// `impl Trait` arguments and returns, generic returns with their bound, elided lifetimes, and
// `?` and early `return` in each.
use gpu_scope::{gpu_scope, Tensors};
use tch::Tensor;

#[gpu_scope]
fn shapes(t: impl AsRef<Tensor>) -> impl Iterator<Item = i64> {
    t.as_ref().size().into_iter()
}

#[gpu_scope(on_escape = error)]
fn parse(text: &str) -> Result<impl std::fmt::Debug, Box<dyn std::error::Error>> {
    if text.is_empty() {
        return Ok(0);
    }
    let n: u32 = text.parse()?;
    Ok(n)
}

#[gpu_scope]
fn build<T: Tensors>(make: impl FnOnce() -> T) -> T {
    make()
}

#[gpu_scope]
fn first(items: &[Tensor]) -> Option<&Tensor> {
    items.first()
}

#[gpu_scope]
fn pick<'a>(items: &'a [Tensor], fallback: &'a Tensor) -> &'a Tensor {
    match items.last() {
        Some(t) => t,
        None => return fallback,
    }
}

#[gpu_scope]
fn tuple_and_mut_patterns((a, mut b): (u32, u32), mut c: Vec<u32>, _unused: u32) -> u32 {
    b += 1;
    c.push(a);
    b + c.len() as u32
}

// A returned closure: typed where its argument borrows, or of an owned argument.
#[gpu_scope]
fn tripler() -> impl Fn(&Tensor) -> Tensor {
    |x: &Tensor| x * 3
}

#[gpu_scope]
fn adder() -> impl Fn(i64) -> i64 {
    |x| x + 1
}

fn main() {
    let t = Tensor::zeros([3], tch::kind::FLOAT_CPU);
    assert_eq!(tripler()(&t).size(), [3]);
    assert_eq!(adder()(1), 2);
    assert_eq!(shapes(&t).count(), 1);
    assert_eq!(format!("{:?}", parse("12").unwrap()), "12");
    assert!(parse("x").is_err());
    assert_eq!(
        build(|| Tensor::ones([2], tch::kind::FLOAT_CPU)).size(),
        [2]
    );
    assert!(first(&[]).is_none());
    assert_eq!(pick(&[], &t).size(), [3]);
    assert_eq!(tuple_and_mut_patterns((1, 2), vec![], 0), 4);
}
