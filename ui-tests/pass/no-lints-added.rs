// The expansions add no lint of their own to the user's code, under `deny(warnings)`: a
// one-expression body (`unused_braces` if wrapped in a block of ours), and `scope!` blocks that
// never end normally (the check after them would be `unreachable_code`).
#![deny(warnings)]
use gpu_scope::gpu_scope;
use tch::Tensor;

#[gpu_scope]
fn one(x: &Tensor) -> Tensor {
    x * 2
}

#[gpu_scope(on_escape = error)]
fn fallible(x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
    Ok(x + 1)
}

#[gpu_scope]
async fn later(x: f64) -> f64 {
    x * 2.0
}

#[gpu_scope]
fn unit(x: &Tensor) {
    drop(x * 2)
}

#[gpu_scope]
fn stop(message: &str) -> ! {
    panic!("{message}")
}

#[gpu_scope]
fn optional(
    out: Option<&mut Vec<Tensor>>,
    _left: Option<&mut Vec<Tensor>>,
    (x, v): (&Tensor, &mut Vec<Tensor>),
) {
    if let Some(out) = out {
        out.push(x * 2);
    }
    v.push(x + 1);
}

/// An optional `&'a mut` stored where it must live on: moved into the body, not reborrowed.
struct Holder<'a> {
    out: Option<&'a mut Vec<Tensor>>,
}

impl<'a> Holder<'a> {
    #[gpu_scope]
    fn set(&mut self, out: Option<&'a mut Vec<Tensor>>) {
        self.out = out;
    }
}

#[gpu_scope]
fn stash<'a>(out: Option<&'a mut Vec<Tensor>>, keep: &mut Vec<&'a mut Vec<Tensor>>) {
    if let Some(v) = out {
        keep.push(v);
    }
}

fn returns_early() -> i32 {
    gpu_scope::scope!({
        return 3;
    })
}

fn returns_early_or_fails() -> Result<i32, gpu_scope::Error> {
    gpu_scope::scope!(on_escape = error, {
        return Ok(4);
    })
}

// A block that always leaves, as a statement: nothing gives its value a type.
fn returns_early_in_a_statement(n: u32) -> Result<u32, ()> {
    if n == 0 {
        gpu_scope::scope!({ return Ok(1) });
    }
    Ok(n)
}

fn continues_in_a_statement(items: &[u32]) -> u32 {
    for _ in items {
        gpu_scope::scope!({
            let _ = 1;
            continue;
        });
    }
    0
}

fn breaks_out() -> Tensor {
    loop {
        gpu_scope::scope!({
            break Tensor::from(2.0);
        })
    }
}

pub struct Point {
    pub x: i64,
}

/// `x` named only as a field: the reborrow of the `&mut` argument `x` is not its own warning.
#[gpu_scope]
fn field_only(p: &Point, x: &mut Vec<Tensor>) -> i64 {
    p.x
}

fn main() {
    assert_eq!(field_only(&Point { x: 1 }, &mut vec![]), 1);
    assert_eq!((returns_early(), returns_early_or_fails().unwrap()), (3, 4));
    let _ = breaks_out();
    assert_eq!(returns_early_in_a_statement(0), Ok(1));
    assert_eq!(continues_in_a_statement(&[1, 2]), 0);
    let t = Tensor::from(1.0);
    let _ = (one(&t), fallible(&t).unwrap());
    drop(later(1.0));
    unit(&t);
    let (mut a, mut b) = (vec![], vec![]);
    optional(Some(&mut a), None, (&t, &mut b));
    let mut holder = Holder { out: None };
    holder.set(Some(&mut a));
    assert!(holder.out.is_some());
    let mut kept = vec![];
    stash(Some(&mut b), &mut kept);
    assert_eq!(kept.len(), 1);
    let _ = stop as fn(&str) -> !;
}
