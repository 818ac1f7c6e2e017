// An owned argument nothing uses is linted as on a plain function: the scope moves it in (its
// drop runs inside) without hiding the warning.
#![deny(unused_variables)]
use tch::{Device, Kind, Tensor};

#[gpu_scope::gpu_scope]
fn ignore(input: Tensor) -> Tensor {
    Tensor::zeros([1], (Kind::Float, Device::Cpu))
}

// Used by the options only: no warning.
#[gpu_scope::gpu_scope(name = label.as_str())]
fn named(label: String) {}

fn main() {
    let _ = ignore(Tensor::zeros([1], (Kind::Float, Device::Cpu)));
    named("n".to_owned());
}
