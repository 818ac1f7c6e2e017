//! An argument's lint attributes hold for it inside the scope too: the body's rebinding of an
//! owned argument (its binding and its `mut`) is checked under them.
#![deny(unused_variables, unused_mut, unfulfilled_lint_expectations)]

#[gpu_scope::gpu_scope]
fn attributed(#[allow(unused_variables)] x: u32, y: u32) -> u32 {
    y
}

#[gpu_scope::gpu_scope]
fn owned(#[allow(unused_variables)] t: tch::Tensor) -> u32 {
    1
}

#[gpu_scope::gpu_scope]
fn muted(#[allow(unused_mut)] mut v: Vec<u32>) -> usize {
    v.len()
}

#[gpu_scope::gpu_scope]
fn expected(#[expect(unused_variables)] x: u32) -> u32 {
    2
}

fn main() {
    assert_eq!(attributed(1, 2), 2);
    assert_eq!(owned(tch::Tensor::from(1.0)), 1);
    assert_eq!(muted(vec![1]), 1);
    assert_eq!(expected(1), 2);
}
