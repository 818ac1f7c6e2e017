// The `keep_grad` hint looks at any returned `Err`, and compiles whatever the error type: one
// whose `Error` impl asks for `'static` in a generic function, a method of a generic impl or a
// block, one with a lifetime (written or elided), a boxed one.
use std::error::Error;
use std::fmt;

#[derive(Debug)]
struct Wrapper<E>(E);

impl<E> fmt::Display for Wrapper<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("wrapped")
    }
}

impl<E: Error + 'static> Error for Wrapper<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

#[derive(Debug)]
struct Borrowed<'a>(&'a str);

impl fmt::Display for Borrowed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl Error for Borrowed<'static> {}

#[gpu_scope::gpu_scope]
fn generic_wrap<E: Error>(e: E) -> Result<(), Wrapper<E>> {
    Err(Wrapper(e))
}

fn generic_block<E: Error>(e: E) -> Result<(), Wrapper<E>> {
    gpu_scope::scope!({ Err(Wrapper(e)) })
}

#[gpu_scope::gpu_scope]
fn borrowed<'a>(s: &'a str) -> Result<(), Borrowed<'a>> {
    Err(Borrowed(s))
}

#[gpu_scope::gpu_scope]
async fn borrowed_async<'a>(s: &'a str) -> Result<(), Borrowed<'a>> {
    Err(Borrowed(s))
}

#[gpu_scope::gpu_scope]
#[allow(unknown_lints, mismatched_lifetime_syntaxes)]
fn elided(s: &str) -> Result<(), Borrowed> {
    Err(Borrowed(s))
}

struct Holder<E>(std::marker::PhantomData<E>);

impl<E: Error> Holder<E> {
    #[gpu_scope::gpu_scope]
    fn wrap(&self, e: E) -> Result<(), Wrapper<E>> {
        Err(Wrapper(e))
    }
}

#[gpu_scope::gpu_scope]
fn boxed() -> Result<(), Box<dyn Error + Send + Sync>> {
    Err("boxed".into())
}

#[gpu_scope::gpu_scope]
fn concrete() -> Result<(), Wrapper<std::io::Error>> {
    Err(Wrapper(std::io::Error::other("io")))
}

fn main() {
    let io = || std::io::Error::other("io");
    let _ = generic_wrap(io());
    let _ = generic_block(io());
    let _ = borrowed(&String::from("x"));
    drop(borrowed_async("x"));
    let _ = elided("x");
    let _ = Holder(std::marker::PhantomData).wrap(io());
    let _ = boxed();
    let _ = concrete();
}
