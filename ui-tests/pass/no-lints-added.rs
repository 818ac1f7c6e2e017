// The expansions add no lint of their own to the user's code, under `deny(warnings)`: a
// one-expression body (`unused_braces` if wrapped in a block of ours), and `scope!` blocks that
// never end normally (the check after them would be `unreachable_code`), and the derive and the
// attribute told where gpu-scope is by a path with a `self::` (`unused_qualifications`, which
// strict crates deny), on an `async fn` too and beside a glob import of the crate.
#![deny(warnings, unused_qualifications)]
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

mod deps {
    pub use gpu_scope as g;
}

#[derive(gpu_scope::Tensors)]
#[tensors(crate = self::deps::g)]
struct Outputs {
    logits: Tensor,
    extra: Vec<Tensor>,
}

#[gpu_scope(crate = self::deps::g)]
fn outputs(x: &Tensor) -> Outputs {
    Outputs {
        logits: x * 2,
        extra: vec![x + 1],
    }
}

#[gpu_scope(crate = self::deps::g)]
async fn outputs_later(x: &Tensor) -> Tensor {
    x * 2
}

// A glob import of the crate: the paths the attribute writes through `crate = path` are not
// the user's, however short the import makes them.
mod globbed {
    use gpu_scope::*;
    use tch::Tensor;

    #[gpu_scope(crate = gpu_scope, on_escape = error)]
    pub fn fallible(x: &Tensor) -> Result<Tensor, Error> {
        Ok(x * 2)
    }

    #[gpu_scope(crate = gpu_scope)]
    pub async fn later(x: &Tensor) -> Tensor {
        x * 2
    }
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

// A block that diverges where the macro cannot see it (a panic): what follows it is the
// macro's, and not linted as unreachable.
fn panics() -> i32 {
    gpu_scope::scope!({ panic!("always") })
}

// Blocks that always panic or end the process, where nothing pins the value's type: their
// value (`!`) is not asked to implement `Tensors`, which would depend on the never type's
// fallback (a denied lint; an error in edition 2024).
fn placeholder() {
    gpu_scope::scope!({ todo!() });
}

fn placeholder_kept(x: &Tensor) {
    let _later = gpu_scope::scope!(on_escape = error, keep = [x], { unimplemented!("later") });
}

fn panics_after(x: &Tensor) {
    gpu_scope::scope!({
        let _y = x * 2;
        panic!("{}", 1);
    });
}

fn ends_the_process() {
    gpu_scope::scope!({ std::process::exit(2) });
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
    let t = Tensor::from(1.0);
    let _ = (one(&t), fallible(&t).unwrap());
    let _ = outputs(&t).extra.len();
    let _ = gpu_scope::scope!(crate = self::deps::g, { outputs(&t) });
    drop(later(1.0));
    drop((outputs_later(&t), globbed::later(&t)));
    let _ = globbed::fallible(&t).unwrap();
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
    let _ = panics as fn() -> i32;
    let _ = (placeholder as fn(), ends_the_process as fn());
    let _ = (placeholder_kept as fn(&Tensor), panics_after as fn(&Tensor));
}
