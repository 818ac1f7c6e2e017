// The expansions allow no lint a crate may `forbid` (an `allow` under `forbid` is an error):
// the derive (fields skipped, an empty enum), async functions, an owned receiver, an
// argument bound `ref mut`, `scope!` blocks that diverge or not, and an enum whose variant is
// imported (the derive names it `Self::`).
#![forbid(unreachable_code, unreachable_patterns, unused_variables, unused_mut)]
#![forbid(unused_qualifications)]
use gpu_scope::gpu_scope;
use tch::Tensor;
use Either::Nothing;

#[derive(gpu_scope::Tensors)]
struct Outputs {
    logits: Tensor,
    #[tensors(skip)]
    _label: String,
}

#[derive(gpu_scope::Tensors)]
struct Skipped {
    #[tensors(skip)]
    _name: String,
}

#[derive(gpu_scope::Tensors)]
enum Never {}

#[derive(gpu_scope::Tensors)]
enum Either {
    Tensor(Tensor),
    #[tensors(skip)]
    Nothing,
}

#[gpu_scope]
async fn later(x: f64) -> f64 {
    x * 2.0
}

#[gpu_scope]
fn outputs(x: &Tensor, ref mut extra: Vec<Tensor>) -> Outputs {
    extra.push(x + 1);
    Outputs {
        logits: x * 2,
        _label: String::new(),
    }
}

impl Outputs {
    #[gpu_scope]
    fn into_logits(self) -> Tensor {
        self.logits
    }
}

fn first_or_nothing(xs: &[Tensor]) -> Either {
    gpu_scope::scope!({
        if xs.is_empty() {
            return Nothing;
        }
        Either::Tensor(&xs[0] * 2)
    })
}

fn strict(x: &Tensor) -> Result<Tensor, gpu_scope::Error> {
    gpu_scope::scope!(on_escape = error, { x * 2 })
}

fn panics() -> i32 {
    gpu_scope::scope!({ panic!("always") })
}

fn main() {
    let t = Tensor::from(1.0);
    let _ = outputs(&t, vec![]).into_logits();
    drop(later(1.0));
    assert!(matches!(first_or_nothing(&[]), Nothing));
    let _ = strict(&t).unwrap();
    assert!(matches!(first_or_nothing(&[t]), Either::Tensor(_)));
    let _ = (Skipped { _name: String::new() }, panics as fn() -> i32);
    let _ = |n: &Never| -> Never { match *n {} };
}
