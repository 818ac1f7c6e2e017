#[derive(gpu_scope::Tensors)]
#[repr(C, packed(2))]
struct Packed {
    flag: u8,
    weight: tch::Tensor,
}

fn main() {}
