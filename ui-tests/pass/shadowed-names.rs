// The user's crate shadows std names and defines its own `__private`: generated code must not care.
#![allow(dead_code)]
use gpu_scope::gpu_scope;

struct Result;
struct Option;
struct Vec;
struct Box;
mod __private {
    pub struct Scope;
}
mod core {}
fn panic() {}

#[gpu_scope(on_escape = error)]
fn run(x: u32) -> ::std::result::Result<u32, gpu_scope::Error> {
    Ok(x + 1)
}

fn block() -> u32 {
    gpu_scope::scope!(name = "b", { 2 })
}

fn main() {
    assert_eq!(run(1).unwrap(), 2);
    assert_eq!(block(), 2);
}
