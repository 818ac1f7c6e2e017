#[derive(gpu_scope::Tensors)]
#[repr(C, packed)]
struct Packed {
    a: u8,
    b: u32,
}

fn main() {}
