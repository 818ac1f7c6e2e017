// The `mut` of a `&mut` argument that the body never reassigns is linted as on a plain
// function: the scope's reborrow of the argument hides no warning.
#![deny(unused_mut)]
use tch::{Device, Kind, Tensor};

#[gpu_scope::gpu_scope]
fn fill(mut xs: &mut Vec<Tensor>) {
    xs.push(Tensor::zeros([1], (Kind::Float, Device::Cpu)));
}

fn main() {
    fill(&mut Vec::new());
}
