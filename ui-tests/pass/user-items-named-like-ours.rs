// The user's crate has its own `gpu_scope` and `__private` modules, and items named like those
// of the runtime: generated code names only `::gpu_scope::__private` and `::core`.
#![allow(dead_code)]
mod gpu_scope {
    pub mod __private {
        pub struct Guard;
        pub struct StorageSet;
        pub fn run_body() {}
    }
    pub struct Error;
}
mod __private {
    pub struct Root;
}
struct Guard;
struct StorageSet;
struct String;
fn run_body() {}

// A trait of the user's with a `visit` method for every type, in scope everywhere here.
trait Visit {
    fn visit(&self, _: &mut StorageSet) {}
}
impl<T: ?Sized> Visit for T {}

#[derive(::gpu_scope::Tensors)]
struct Model {
    weights: tch::Tensor,
}

#[::gpu_scope::gpu_scope(on_escape = error, name = std::string::String::from("run"))]
fn run(x: &u32, v: Vec<u32>) -> Result<u32, ::gpu_scope::Error> {
    Ok(*x + v.len() as u32)
}

#[::gpu_scope::gpu_scope]
fn model() -> Model {
    Model {
        weights: tch::Tensor::zeros([2], tch::kind::FLOAT_CPU),
    }
}

fn main() {
    assert_eq!(run(&1, vec![1]).unwrap(), 2);
    assert_eq!(model().weights.size(), [2]);
    let n = ::gpu_scope::scope!(on_escape = error, { 3 }).unwrap();
    assert_eq!(n, 3);
}
