// The user's body keeps its own lint levels: the macro adds no `unsafe` block around it.
#![deny(unsafe_op_in_unsafe_fn)]

#[gpu_scope::gpu_scope]
unsafe fn read(p: *const u32) -> u32 {
    *p
}

fn main() {
    let x = 1;
    let _ = unsafe { read(&x) };
}
