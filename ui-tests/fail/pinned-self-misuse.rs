// Misuse of a `self: Pin<&mut Self>` receiver in a scoped body: rustc's advice points at the
// receiver (`mut self`), as without the attribute.
use std::pin::Pin;

struct Fut {
    x: u32,
}

impl Fut {
    #[gpu_scope::gpu_scope]
    fn moved_twice(self: Pin<&mut Self>) -> u32 {
        let a = self;
        let b = self;
        a.x + b.x
    }

    #[gpu_scope::gpu_scope]
    fn needs_mut(self: Pin<&mut Self>) -> u32 {
        let again = self.as_mut();
        again.x
    }
}

fn main() {
    let mut f = Fut { x: 1 };
    let _ = Pin::new(&mut f).moved_twice();
    let _ = Pin::new(&mut f).needs_mut();
}
