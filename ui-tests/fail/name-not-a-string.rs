// A scope's name is a string: a literal of another kind is refused where it is written, and an
// expression that is not a string (a number that merely displays) fails on its type.
use gpu_scope::gpu_scope;

#[gpu_scope(name = 42)]
fn literal() {}

#[gpu_scope(name = id)]
fn expression(id: u32) {}

fn main() {
    literal();
    expression(1);
    let _ = gpu_scope::scope!(name = "x" { 1 });
}
