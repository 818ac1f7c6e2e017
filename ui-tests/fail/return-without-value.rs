// `return;` in a function that returns a value: told the type, at the return type.
#[gpu_scope::gpu_scope]
fn width(x: u32) -> u32 {
    if x > 3 {
        return;
    }
    x
}

fn main() {}
