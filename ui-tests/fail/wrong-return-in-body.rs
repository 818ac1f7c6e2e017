// rustc's own errors inside a wrapped body point at the user's code.
#[gpu_scope::gpu_scope]
fn width(wide: bool) -> u32 {
    if wide {
        return "eight";
    }
    4
}

fn main() {
    let _ = width(true);
}
