#![doc = include_str!("../README.md")]

/// Runs a function in a scope: everything it allocates through libtorch is tracked; when it
/// returns, what it hands back is kept, everything else is dropped, and whatever is still
/// alive has escaped and is acted on by the escape policy.
///
/// Works on free functions and methods with any receiver, generic functions, `impl Trait`
/// arguments and returns, `unsafe fn` (the body keeps its own lint levels), `async fn` (the
/// scope is re-entered on every poll, on whichever thread polls; the future is `Send` when
/// the body's is), `extern "C"` functions and functions returning `!`. The signature,
/// attributes, docs and visibility stay as written. `?` and early `return` end the scope and
/// are checked like the end of the body.
///
/// # What is kept
///
/// - The return value. Its type must implement [`Tensors`](trait@Tensors): a compile error
///   otherwise, at the return type (for a generic `T`, add the bound `T: gpu_scope::Tensors`).
///   An `impl Trait` return type cannot carry that bound: its value is kept through `Tensors`
///   where its concrete type implements it, and otherwise named in the report (`opaque_kept`)
///   and taken to hold no tensors.
/// - Every argument and receiver passed by reference (`&self`, `&mut self`, `self: &Self`,
///   `self: Pin<&mut Self>`, `self: &Arc<Self>`, `x: &T`, `x: &mut T`): what the method
///   stored in them is not an escape. A type without `Tensors` is named in the report. A
///   `&mut` argument is not searched when the return type may borrow from it (a reference,
///   a lifetime or `impl Trait` in it): what the function returns is still kept.
/// - Owned `Arc` and `Rc` arguments (`cache: Arc<Mutex<Vec<Tensor>>>`, `self: Arc<Self>`):
///   what the caller still holds through them. The scope holds a weak handle only, so
///   `Arc::try_unwrap` in the body works as without it (`Arc::get_mut` sees the handle).
/// - Other owned arguments move into the body and die with it.
///
/// # Options
///
/// - `name = "..."`: the scope's name in reports (default: `module::function`). Any
///   expression that gives a `&str` or `String` works too, borrowed ones included
///   (`name = self.name.as_str()`): the name is copied.
/// - `on_escape = panic | warn | error | ignore`: what an escape (or a `max_peak` overrun)
///   does. Default: `panic` with debug assertions, `warn` without; the `GPU_SCOPE_ON_ESCAPE`
///   environment variable overrides the default. With `error` the function must return
///   `Result<_, E>` with `E: From<gpu_scope::Error>` (checked at compile time), and returns
///   `Err` instead. An `extern "C"` function cannot take `panic`; where the default would be
///   `panic`, it warns.
/// - `release = outermost | always | never | "<size>"`: when to hand the caching allocator's
///   unused blocks back (`emptyCache`): when the thread's outermost scope ends (default),
///   at every exit, never, or when more than `<size>` is cached unused.
/// - `max_peak = "<size>"`, or an expression in bytes of any integer type
///   (`max_peak = 512 * 1024 * 1024`, `max_peak = 4 * x.numel()`, `max_peak = self.budget`):
///   the scope fails like an escape if its peak of live bytes went over it. A negative
///   literal is a compile error; a negative value at run time is a budget of zero bytes.
/// - `keep_grad` (or `keep_grad = true | false`): keep the caller's autograd mode; by default
///   a scope runs with gradients off.
/// - `device = <expr>`: a `tch::Device` the scope is about, checked to exist on entry.
///
/// Sizes are a number, fractions allowed (`"1.5 GiB"`), and a unit: `B`, `KiB`, `MiB`,
/// `GiB`, `TiB` (powers of 1024) or `kB`, `KB`, `MB`, `GB`, `TB` (powers of 1000); without
/// a unit, bytes (`"4096"`).
///
/// # Examples
///
/// A method that grows a cache in `self` and returns a tensor; an escape is an `Err`:
///
/// ```
/// use gpu_scope::{gpu_scope, Error, Tensors};
/// use tch::{Device, Kind, Tensor};
///
/// #[derive(Tensors, Default)]
/// struct Decoder {
///     cache: Vec<Tensor>,
///     #[tensors(skip)]
///     steps: usize,
/// }
///
/// impl Decoder {
///     #[gpu_scope(name = "decode", on_escape = error, max_peak = "64 MiB")]
///     fn step(&mut self, x: &Tensor) -> Result<Tensor, Error> {
///         let state = x * 2;
///         self.cache.push(state.shallow_clone());
///         self.steps += 1;
///         Ok(state + 1)
///     }
/// }
///
/// let mut decoder = Decoder::default();
/// let x = Tensor::ones([4], (Kind::Float, Device::Cpu));
/// let y = decoder.step(&x)?;
/// let report = gpu_scope::last_report().unwrap();
/// assert_eq!((report.name.as_ref(), report.escaped.len()), ("decode", 0));
/// # drop(y);
/// # Ok::<(), Error>(())
/// ```
///
/// Options computed from the arguments, and an escape caught:
///
/// ```
/// use gpu_scope::{gpu_scope, Error};
/// use std::sync::Mutex;
/// use tch::{Device, Kind, Tensor};
///
/// static LEAKED: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
///
/// struct Layer {
///     name: String,
///     width: i64,
/// }
///
/// impl Layer {
///     #[gpu_scope(name = self.name.as_str(), max_peak = 4 * self.width * 1024, keep_grad = false)]
///     fn forward(&self, x: &Tensor) -> Tensor {
///         x.relu()
///     }
///
///     #[gpu_scope(on_escape = error)]
///     fn leaky(&self) -> Result<(), Error> {
///         LEAKED.lock().unwrap().push(Tensor::zeros([self.width], (Kind::Float, Device::Cpu)));
///         Ok(())
///     }
/// }
///
/// let layer = Layer { name: "relu".to_owned(), width: 8 };
/// let _y = layer.forward(&Tensor::ones([8], (Kind::Float, Device::Cpu)));
/// assert_eq!(gpu_scope::last_report().unwrap().name, "relu");
/// let err = layer.leaky().unwrap_err();
/// assert_eq!(err.report().unwrap().escaped_bytes, 32);
/// # LEAKED.lock().unwrap().clear();
/// ```
pub use gpu_scope_macros::gpu_scope;

/// A scope around a block inside a function: `scope!({ ... })` or `scope!(options, { ... })`
/// (a comma may follow the block). Rust keeps attribute and function-like macros in one
/// namespace, hence the different name; options go before the block.
///
/// The block's value is kept, and so is each entry of `keep`; the type of each must
/// implement [`Tensors`](trait@Tensors) (a compile error otherwise, naming the type that
/// lacks it). `?`, `return` and `break` leave the block without a check, handing what is
/// still alive to the enclosing scope. `.await` cannot be used inside: put
/// [`#[gpu_scope]`](macro@gpu_scope) on an `async fn` instead.
///
/// # Options
///
/// Those of [`#[gpu_scope]`](macro@gpu_scope) (the default name is `file:line`), and:
///
/// - `keep = [place, ...]`: values from outside the block to keep, as any place expression
///   (`cache`, `self.cache`, `*cache_ref`, `&x`); each is borrowed after the block.
///
/// With `on_escape = error` the macro evaluates to `Result<T, gpu_scope::Error>`, `T` being
/// the block's type: `Err` when something escaped, or when the scope could not be entered
/// (then the block does not run). Handle it with `?` or `.unwrap()`.
///
/// # Examples
///
/// ```
/// use gpu_scope::scope;
/// use tch::{Device, Kind, Tensor};
///
/// let mut cache: Vec<Tensor> = Vec::new();
/// let len = scope!(name = "fill", keep = [cache], {
///     cache.push(Tensor::zeros([8], (Kind::Float, Device::Cpu)));
///     cache.len()
/// });
/// assert_eq!(len, 1);
///
/// let sum = scope!(on_escape = error, release = never, {
///     let ones = Tensor::ones([4], (Kind::Float, Device::Cpu));
///     ones.sum(Kind::Float)
/// })?;
/// assert_eq!(sum.double_value(&[]), 4.0);
/// # Ok::<(), gpu_scope::Error>(())
/// ```
pub use gpu_scope_macros::scope;

/// Derives [`Tensors`](trait@Tensors) for a struct or an enum: a value owns the tensors of
/// its fields, which must each implement `Tensors` (a compile error otherwise, at the
/// field). Type parameters get the bound `Tensors`. Not for unions.
///
/// `#[tensors(skip)]` (or `#[tensors(skip = true | false)]`) on a field or an enum variant
/// leaves it out: a field that holds no tensors, or whose tensors a scope should not keep.
/// Any other `tensors` attribute, or one on the type itself, is an error.
///
/// ```
/// use gpu_scope::Tensors;
/// use tch::{nn, Tensor};
///
/// #[derive(Tensors)]
/// struct Model {
///     encoder: nn::Linear,
///     cache: Vec<Tensor>,
///     #[tensors(skip)]
///     name: String,
/// }
///
/// #[derive(Tensors)]
/// enum Slot {
///     Live(Tensor),
///     #[tensors(skip)]
///     Evicted(Tensor),
///     Empty,
/// }
/// ```
pub use gpu_scope_macros::Tensors;
pub use gpu_scope_runtime::{
    attribution, clear_workspaces, current, device_info, empty_cache, keep, keep_forever,
    last_report, memory_stats, operator_attribution, reset_peak, scope, set_attribution,
    set_operator_attribution, Attribution, Bytes, Carried, DeviceId, DeviceInfo, DeviceReport,
    Error, Escape, EscapePolicy, Held, HeldBy, MemoryStats, ReleasePolicy, Scope, ScopeHandle,
    ScopeOptions, ScopeReport, StorageSet, Tensors, Untracked, BACKTRACE_ENV, ESCAPE_POLICY_ENV,
    OPERATORS_ENV,
};

/// Everything generated code needs, under paths the user cannot shadow. Not public API.
#[doc(hidden)]
pub use gpu_scope_runtime::__private;

/// gpu-scope's own bookkeeping, for its tests. Not public API.
#[doc(hidden)]
pub use gpu_scope_runtime::__introspect;
