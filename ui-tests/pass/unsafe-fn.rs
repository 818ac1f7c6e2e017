// `#[gpu_scope] unsafe fn` adds no `unsafe` block of its own: the user's lint levels hold.
#![deny(unsafe_op_in_unsafe_fn)]
use gpu_scope::gpu_scope;

/// # Safety
/// `p` must point at a live `u32`.
#[gpu_scope]
unsafe fn read(p: *const u32) -> u32 {
    // SAFETY: as the caller promised.
    unsafe { *p }
}

mod lenient {
    #![allow(unsafe_op_in_unsafe_fn)]

    /// # Safety
    /// `p` must point at a live `u32`.
    #[gpu_scope::gpu_scope]
    pub unsafe fn read(p: *const u32) -> u32 {
        *p
    }
}

fn main() {
    let x = 7;
    assert_eq!(unsafe { read(&x) + lenient::read(&x) }, 14);
}
