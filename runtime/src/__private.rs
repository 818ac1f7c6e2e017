//! Support for generated code, re-exported as `gpu_scope::__private`. Not public API: the
//! macros' expansions call only what is here (and `::core`).
//!
//! Nothing here may show up under this path in a user's compile errors: what generated code
//! requires of user types is required through public traits (`Tensors`), std ones (`From`,
//! `TryFrom`), or the traits the crate root re-exports for rustc to name (`MaxPeak`,
//! `ScopeName`, `ErrorReturn`, `EscapeInto`), each with its own message.
use crate::lifecycle::OpenScope;
use crate::{policy, Error};
use std::rc::Rc;
use std::sync::Arc;

pub use crate::fn_name::FnName;
pub use crate::future::{Finish, ScopeFuture};
pub use crate::options::{EscapePolicy, ReleasePolicy, ScopeOptions};
pub use crate::tensors::{StorageSet, Tensors};
pub use tch::Device;

/// The scope of `#[gpu_scope]` and `scope!`. It decides, from the scope's options, what a
/// failure to enter and an escape do; generated code only routes the `Err` of the `try_`
/// calls, which only `on_escape = error` returns.
///
/// Not `Send`, as a [`Scope`](crate::Scope) is not: a block's scope held across an `.await`
/// that `scope!` could not see (in a macro's own expansion, such as `tokio::join!`) makes the
/// task's future not `Send`, so `tokio::spawn` refuses it rather than let it leave its thread.
#[derive(Debug)]
pub struct ScopeGuard {
    scope: Option<OpenScope>,
    _not_send:
        std::marker::PhantomData<*const crate::scope::ScopeBlockOpenAcrossAwaitUseGpuScopeAsyncFn>,
}

impl ScopeGuard {
    fn new(scope: Option<OpenScope>) -> ScopeGuard {
        ScopeGuard {
            scope,
            _not_send: std::marker::PhantomData,
        }
    }

    /// Enters; if that fails, panics or warns (per the policy) and runs the code unscoped.
    #[track_caller]
    pub fn enter(opts: ScopeOptions) -> ScopeGuard {
        match OpenScope::enter(opts.clone()) {
            Ok(scope) => ScopeGuard::new(Some(scope)),
            Err(e) => {
                let _ = policy::bad_input(&opts, e);
                ScopeGuard::new(None)
            }
        }
    }

    /// Enters; `Err` if that fails under `on_escape = error`.
    #[track_caller]
    pub fn try_enter(opts: ScopeOptions) -> Result<ScopeGuard, Error> {
        match OpenScope::enter(opts.clone()) {
            Ok(scope) => Ok(ScopeGuard::new(Some(scope))),
            Err(e) => policy::bad_input(&opts, e).map(|()| ScopeGuard::new(None)),
        }
    }

    /// Checks the scope and applies its escape policy (panic, warn, ignore).
    #[track_caller]
    pub fn exit(self, kept: StorageSet) {
        let _ = self.try_exit(kept);
    }

    /// Checks the scope; `Err` on an escape under `on_escape = error`.
    #[track_caller]
    pub fn try_exit(mut self, kept: StorageSet) -> Result<(), Error> {
        match self.scope.take() {
            Some(mut scope) => scope.finish(&kept, true).map(drop),
            None => Ok(()),
        }
    }
}

/// A value for a path never taken in the expansions (an async body's declared return type, an
/// owned receiver's move, `scope!`'s block beside it): a call, where a diverging expression
/// would need a lint allowed.
pub fn never<T>() -> T {
    unreachable!("gpu-scope: a path never taken")
}

/// Runs the body of a `#[gpu_scope]` function, given as a closure so that its `return` and `?`
/// end the body, not the function, and the scope sees what it returns.
#[inline(always)]
pub fn run_body<R>(body: impl FnOnce() -> R) -> R {
    body()
}

/// Visits a value that a scoped function borrows shared (`&T`): the caller made it before the
/// scope, so tch's private modules in it hold nothing the scope made (unless reached through a
/// cell or lock, which could have been filled inside).
pub fn made_before(set: &mut StorageSet, visit: impl FnOnce(&mut StorageSet)) {
    set.made_before(true, visit)
}

/// Visits a derived value's fields on a stack grown as needed (as rustc grows its own for deep
/// syntax trees): a derived type nested deeply in a kept value, such as a long list of boxed
/// nodes, would otherwise overflow the thread's stack before its own drop would.
#[inline]
pub fn deeper(set: &mut StorageSet, visit: impl FnOnce(&mut StorageSet)) {
    stacker::maybe_grow(128 * 1024, 2 * 1024 * 1024, || visit(set))
}

/// A value handed back by a scope, wrapped for autoref specialisation: arguments of a type
/// without [`Tensors`] are skipped (and named in the report) instead of refused.
#[allow(missing_debug_implementations)]
pub struct Root<'a, T: ?Sized>(pub &'a T);

/// Chosen when the value implements [`Tensors`].
pub trait ViaTensors {
    fn __gpu_scope_visit(&self, set: &mut StorageSet);
}

impl<T: Tensors + ?Sized> ViaTensors for Root<'_, T> {
    fn __gpu_scope_visit(&self, set: &mut StorageSet) {
        self.0.visit(set)
    }
}

/// Chosen otherwise: the value is taken to hold no tensors, and the report names its type.
pub trait ViaOpaque {
    fn __gpu_scope_visit(&self, set: &mut StorageSet);
}

impl<T: ?Sized> ViaOpaque for &Root<'_, T> {
    fn __gpu_scope_visit(&self, set: &mut StorageSet) {
        set.add_opaque(std::any::type_name::<T>())
    }
}

/// A scope's value, wrapped for autoref specialisation: an `Err` whose error can be shown gets
/// the `keep_grad` hint where it says a tensor does not require grad (as a panic does).
#[allow(missing_debug_implementations)]
pub struct Returned<'a, T: ?Sized>(pub &'a T);

/// Chosen for a `Result` whose error implements `Display`.
pub trait HintErr {
    fn __gpu_scope_hint(&self);
}

impl<T, E: std::fmt::Display> HintErr for Returned<'_, Result<T, E>> {
    fn __gpu_scope_hint(&self) {
        if let Err(e) = self.0 {
            crate::grad::returned_error(e)
        }
    }
}

/// Chosen otherwise: nothing to say.
pub trait HintNone {
    fn __gpu_scope_hint(&self);
}

impl<T: ?Sized> HintNone for &Returned<'_, T> {
    fn __gpu_scope_hint(&self) {}
}

/// What `max_peak = <expr>` takes: an integer number of bytes, of any integer type. One too
/// large for `u64` is no limit; a negative one is `Err`, which the scope refuses on entry
/// ([`Error::NegativeBudget`](crate::Error::NegativeBudget)).
#[diagnostic::on_unimplemented(
    message = "`max_peak` takes an integer number of bytes or a size string (\"1.5 GiB\"), \
               not `{Self}`",
    label = "not an integer"
)]
pub trait MaxPeak {
    fn bytes(self) -> Result<u64, i128>;
}

macro_rules! budget {
    ($($t:ty),*) => {
        $(impl MaxPeak for $t {
            fn bytes(self) -> Result<u64, i128> {
                match i128::try_from(self) {
                    Ok(bytes) if bytes < 0 => Err(bytes),
                    Ok(bytes) => Ok(bytes.min(i128::from(u64::MAX)) as u64),
                    Err(_) => Ok(u64::MAX),
                }
            }
        })*
    };
}
budget!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

/// What `name = <expr>` takes: a string of any kind (`&str`, `String`, `Cow<str>`, ...), read
/// through a borrow; not a number or anything else that merely displays.
#[diagnostic::on_unimplemented(
    message = "a scope's name is a string (`&str`, `String`, `Cow<str>`), not `{Self}`: write \
               `name = \"step\"` or a string expression such as `name = format!(\"step {{i}}\")`",
    label = "not a string"
)]
pub trait ScopeName {
    fn scope_name(&self) -> String;
}

#[diagnostic::do_not_recommend]
impl<T: AsRef<str> + ?Sized> ScopeName for T {
    fn scope_name(&self) -> String {
        self.as_ref().to_owned()
    }
}

/// The return type of a function under `on_escape = error`: a `Result`, to carry the escape.
#[diagnostic::on_unimplemented(
    message = "`on_escape = error` makes the function return `Err` on an escape: it must return \
               `Result<_, E>` with `E: From<gpu_scope::Error>`, not `{Self}`",
    label = "not a `Result`"
)]
pub trait ErrorReturn {
    type Error;
    fn err(error: Self::Error) -> Self;
}

#[diagnostic::do_not_recommend]
impl<T, E> ErrorReturn for Result<T, E> {
    type Error = E;
    fn err(error: E) -> Self {
        Err(error)
    }
}

/// The error type `E` of a function under `on_escape = error`: the escape converts into it.
#[diagnostic::on_unimplemented(
    message = "`on_escape = error` returns an escape as the function's error: `{E}` must \
               implement `From<gpu_scope::Error>`",
    label = "no `From<gpu_scope::Error>` for `{E}`",
    note = "return `Result<_, gpu_scope::Error>` (or `Box<dyn std::error::Error>`, \
            `anyhow::Error`), or implement `From<gpu_scope::Error>` for your error type"
)]
pub trait EscapeInto<E> {
    fn escape_into(self) -> E;
}

#[diagnostic::do_not_recommend]
impl<E: From<Error>> EscapeInto<E> for Error {
    fn escape_into(self) -> E {
        E::from(self)
    }
}

/// An owned argument, wrapped for autoref specialisation: `(&&Owned(&arg)).__gpu_scope_share()`
/// gives a weak handle on an `Arc` or `Rc` of a [`Tensors`] type or on a `Tensor`, a
/// [`SharedUnseen`] for an `Arc` or `Rc` of another type, and [`Unshared`] for anything else.
#[allow(missing_debug_implementations)]
pub struct Owned<'a, T: ?Sized>(pub &'a T);

/// What an owned `Arc` argument still shares with the caller when the scope ends: its
/// contents, if anyone else still holds them. A weak handle, so that the body's
/// `Arc::try_unwrap` and the like behave as without the scope (`Arc::get_mut` excepted);
/// none when the argument was the only strong handle (the caller kept no other, so whoever
/// holds it at the end got it from the body).
#[allow(missing_debug_implementations)]
pub struct SharedArc<T: ?Sized>(Option<std::sync::Weak<T>>);

/// Its contents were made before the scope and, shared with the caller, cannot have been
/// replaced inside (but through a cell or lock): tch's private modules in them hold nothing
/// the scope made, as in a shared borrow.
impl<T: Tensors + ?Sized> Tensors for SharedArc<T> {
    fn visit(&self, set: &mut StorageSet) {
        if let Some(value) = self.0.as_ref().and_then(std::sync::Weak::upgrade) {
            set.made_before(true, |set| value.visit(set))
        }
    }
}

/// [`SharedArc`] for an `Rc` argument.
#[allow(missing_debug_implementations)]
pub struct SharedRc<T: ?Sized>(Option<std::rc::Weak<T>>);

/// As [`SharedArc`]'s.
impl<T: Tensors + ?Sized> Tensors for SharedRc<T> {
    fn visit(&self, set: &mut StorageSet) {
        if let Some(value) = self.0.as_ref().and_then(std::rc::Weak::upgrade) {
            set.made_before(true, |set| value.visit(set))
        }
    }
}

/// What a generic argument that is a shared borrow (`T = &U`) shares with the caller: all of
/// it, searched as a `&U` argument is.
pub(crate) struct SharedBorrow<'a, T: ?Sized>(pub &'a T);

impl<T: Tensors + ?Sized> Tensors for SharedBorrow<'_, T> {
    fn visit(&self, set: &mut StorageSet) {
        set.made_before(true, |set| self.0.visit(set))
    }
}

/// What an owned `Tensor` argument still shares with the caller when the scope ends: a
/// `shallow_clone` shares the tensor itself, a view or a `detach()` its storage, so what the
/// body grew it into (`resize_`, an `out=` operator) is the caller's. Weak references, each
/// taken only when another tensor shared it at entry (the tensor object, the storage), so that
/// the argument still dies in the body; a caller holding a view holds only the storage, not
/// what the body later sets the argument to (`set_data`) and stashes.
#[allow(missing_debug_implementations)]
pub struct SharedTensor(*mut std::ffi::c_void);

// SAFETY: a weak reference counted atomically by libtorch, read and freed on any thread.
unsafe impl Send for SharedTensor {}
// SAFETY: as above; `visit` only makes strong references from it.
unsafe impl Sync for SharedTensor {}

impl SharedTensor {
    fn new(t: &tch::Tensor) -> SharedTensor {
        let mut weak = std::ptr::null_mut();
        // SAFETY: `as_ptr` points at the live `at::Tensor` that `t` owns; a plain out-pointer.
        let status = unsafe { crate::ffi::gs_tensor_weak(t.as_ptr().cast(), &mut weak) };
        if crate::ffi::check(status).is_err() {
            weak = std::ptr::null_mut();
        }
        SharedTensor(weak)
    }
}

impl Tensors for SharedTensor {
    fn visit(&self, set: &mut StorageSet) {
        if self.0.is_null() {
            return;
        }
        let (mut tensor, mut storage) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a weak reference from `gs_tensor_weak`, not yet freed; plain out-pointers.
        let status = unsafe { crate::ffi::gs_tensor_weak_lock(self.0, &mut tensor, &mut storage) };
        let locked = crate::ffi::check(status).is_ok();
        for ptr in [tensor, storage].into_iter().filter(|p| !p.is_null()) {
            // SAFETY: a new `at::Tensor` for tch to own and free (whatever the status).
            let t = unsafe { tch::Tensor::from_ptr(ptr.cast()) };
            if locked {
                set.add_tensor(&t);
            }
        }
    }
}

impl Drop for SharedTensor {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: from `gs_tensor_weak`, freed once.
            unsafe { crate::ffi::gs_tensor_weak_free(self.0) }
        }
    }
}

impl ViaShared for &Owned<'_, tch::Tensor> {
    type Handle = SharedTensor;
    fn __gpu_scope_share(&self) -> SharedTensor {
        SharedTensor::new(self.0)
    }
}

impl ViaShared for &Owned<'_, Option<tch::Tensor>> {
    type Handle = Option<SharedTensor>;
    fn __gpu_scope_share(&self) -> Option<SharedTensor> {
        self.0.as_ref().map(SharedTensor::new)
    }
}

/// An owned `Arc` or `Rc` of a type without [`Tensors`]: named in the report.
#[derive(Debug)]
pub struct SharedUnseen(&'static str);

impl Tensors for SharedUnseen {
    fn visit(&self, set: &mut StorageSet) {
        set.add_opaque(self.0)
    }
}

/// A `&mut` passed for an owned generic argument: named in the report as not inspected.
#[derive(Debug)]
pub struct Uninspected(pub(crate) &'static str);

impl Tensors for Uninspected {
    fn visit(&self, set: &mut StorageSet) {
        set.add_uninspected(self.0)
    }
}

/// An owned argument that shares nothing with the caller: it dies inside the scope.
#[derive(Debug)]
pub struct Unshared;

impl Tensors for Unshared {
    fn visit(&self, _: &mut StorageSet) {}
}

/// Chosen for an `Arc` or `Rc` of a [`Tensors`] type.
pub trait ViaShared {
    type Handle: Tensors;
    fn __gpu_scope_share(&self) -> Self::Handle;
}

impl<T: Tensors + ?Sized> ViaShared for &Owned<'_, Arc<T>> {
    type Handle = SharedArc<T>;
    fn __gpu_scope_share(&self) -> SharedArc<T> {
        SharedArc((Arc::strong_count(self.0) > 1).then(|| Arc::downgrade(self.0)))
    }
}

impl<T: Tensors + ?Sized> ViaShared for &Owned<'_, Rc<T>> {
    type Handle = SharedRc<T>;
    fn __gpu_scope_share(&self) -> SharedRc<T> {
        SharedRc((Rc::strong_count(self.0) > 1).then(|| Rc::downgrade(self.0)))
    }
}

impl<T: Tensors + ?Sized> ViaShared for &Owned<'_, Option<Arc<T>>> {
    type Handle = Option<SharedArc<T>>;
    fn __gpu_scope_share(&self) -> Option<SharedArc<T>> {
        self.0
            .as_ref()
            .map(|a| ViaShared::__gpu_scope_share(&&Owned(a)))
    }
}

impl<T: Tensors + ?Sized> ViaShared for &Owned<'_, Option<Rc<T>>> {
    type Handle = Option<SharedRc<T>>;
    fn __gpu_scope_share(&self) -> Option<SharedRc<T>> {
        self.0
            .as_ref()
            .map(|a| ViaShared::__gpu_scope_share(&&Owned(a)))
    }
}

/// Chosen for any other type with a [`Tensors`] impl, generic arguments bound by it included:
/// what it shares is found at run time, through [`Tensors::__gpu_scope_shared`].
pub trait ViaOwnTensors<T: ?Sized> {
    fn __gpu_scope_share(&self) -> OwnShare<T>;
}

impl<T: Tensors + ?Sized> ViaOwnTensors<T> for &&Owned<'_, T> {
    fn __gpu_scope_share(&self) -> OwnShare<T> {
        OwnShare(
            self.0.__gpu_scope_shared(crate::tensors::Seal(())),
            std::marker::PhantomData,
        )
    }
}

/// The [`Share`] of an argument of type `T`: `Send` and `Sync` only where `T` is (it may hold
/// an `Rc`'s `Weak`, or a borrow of a `RefCell`), and living no longer than the borrows in `T`.
///
/// ```compile_fail,E0277
/// use gpu_scope_runtime::__private::{Owned, ViaOwnTensors as _};
/// let rc = std::rc::Rc::new(tch::Tensor::from_slice(&[1.0f32]));
/// let share = (&&Owned(&rc)).__gpu_scope_share();
/// std::thread::spawn(move || drop(share));
/// ```
/// ```compile_fail,E0597
/// use gpu_scope_runtime::__private::{Owned, ViaOwnTensors as _};
/// let share = {
///     let v = vec![tch::Tensor::from_slice(&[1.0f32])];
///     let r = &v;
///     (&&Owned(&r)).__gpu_scope_share()
/// };
/// drop(share);
/// ```
#[allow(missing_debug_implementations)]
pub struct OwnShare<T: ?Sized>(Share, std::marker::PhantomData<T>);

impl<T: ?Sized> Tensors for OwnShare<T> {
    fn visit(&self, set: &mut StorageSet) {
        self.0.visit(set)
    }
}

/// The handle [`ViaShared`] gives (or a `SharedBorrow`), with its type erased: what a
/// generic argument found to be an `Arc`, an `Rc` or a `Tensor` still shares with the caller,
/// or all that a shared borrow reaches.
#[allow(missing_debug_implementations)]
pub struct Share(Option<Erased>);

struct Erased {
    handle: *mut (),
    visit: unsafe fn(*mut (), &mut StorageSet),
    free: unsafe fn(*mut ()),
}

// SAFETY: other crates get a `Share` only inside an [`OwnShare`] of the argument's type, which
// is `Send` and `Sync` only where that type is.
unsafe impl Send for Share {}
// SAFETY: as above.
unsafe impl Sync for Share {}

impl Share {
    pub(crate) const NONE: Share = Share(None);

    /// A handle from [`ViaShared`] or a `SharedBorrow`, boxed with its type erased.
    pub(crate) fn erase<H: Tensors>(handle: H) -> Share {
        // SAFETY (both): `handle` is the `Box<H>` made below, freed once.
        unsafe fn visit<H: Tensors>(handle: *mut (), set: &mut StorageSet) {
            unsafe { (*handle.cast::<H>()).visit(set) }
        }
        unsafe fn free<H>(handle: *mut ()) {
            drop(unsafe { Box::from_raw(handle.cast::<H>()) })
        }
        let handle = Box::into_raw(Box::new(handle)).cast();
        Share(Some(Erased {
            handle,
            visit: visit::<H>,
            free: free::<H>,
        }))
    }
}

impl Tensors for Share {
    fn visit(&self, set: &mut StorageSet) {
        if let Some(e) = &self.0 {
            // SAFETY: `handle` and `visit` were made together by `Share::erase`.
            unsafe { (e.visit)(e.handle, set) }
        }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if let Some(e) = self.0.take() {
            // SAFETY: as in `visit`; taken, so freed once.
            unsafe { (e.free)(e.handle) }
        }
    }
}

/// Chosen for an `Arc` or `Rc` of another type.
pub trait ViaSharedUnseen {
    fn __gpu_scope_share(&self) -> SharedUnseen;
}

impl<T: ?Sized> ViaSharedUnseen for &&Owned<'_, Arc<T>> {
    fn __gpu_scope_share(&self) -> SharedUnseen {
        SharedUnseen(std::any::type_name::<Arc<T>>())
    }
}

impl<T: ?Sized> ViaSharedUnseen for &&Owned<'_, Rc<T>> {
    fn __gpu_scope_share(&self) -> SharedUnseen {
        SharedUnseen(std::any::type_name::<Rc<T>>())
    }
}

/// Chosen for anything else.
pub trait ViaUnshared {
    fn __gpu_scope_share(&self) -> Unshared;
}

impl<T: ?Sized> ViaUnshared for Owned<'_, T> {
    fn __gpu_scope_share(&self) -> Unshared {
        Unshared
    }
}
