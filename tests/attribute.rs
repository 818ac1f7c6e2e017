//! `#[gpu_scope]` on each kind of function, asserting the report it leaves.
mod common;
use common::floats;
use gpu_scope::{gpu_scope, last_report, Error, Tensors};
use std::sync::Mutex;
use tch::Tensor;

static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[gpu_scope(on_escape = error)]
fn plain(n: i64) -> Result<Tensor, Error> {
    let scratch = floats(n);
    Ok(&scratch + &floats(n))
}

#[test]
fn plain_fn_keeps_its_return_value() {
    let t = plain(10).unwrap();
    let r = last_report().unwrap();
    assert_eq!(r.name, "attribute::plain");
    assert_eq!(r.kept, 40);
    assert_eq!(r.freed, 80);
    assert_eq!(t.size(), [10]);
}

#[gpu_scope(on_escape = error)]
fn early(leak: bool) -> Result<Tensor, Error> {
    let t = floats(5);
    if leak {
        SINK.lock().unwrap().push(floats(2));
        return Ok(t);
    }
    Ok(floats(1))
}

#[test]
fn early_return_is_checked() {
    // SINK is shared: another test clearing it would free this one's leak.
    let _serial = common::serial();
    let err = early(true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped_bytes, 8);
    assert!(early(false).is_ok());
    SINK.lock().unwrap().clear();
}

#[derive(Debug)]
enum AppError {
    Parse,
    Scope(Error),
}
impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Scope(e)
    }
}

#[gpu_scope(on_escape = error)]
fn question(fail: bool) -> Result<Tensor, AppError> {
    let t = floats(4);
    if fail {
        Err(AppError::Parse)?;
    }
    std::mem::forget(floats(3));
    Ok(t)
}

#[test]
fn question_mark_and_user_error_type() {
    assert!(matches!(question(true), Err(AppError::Parse)));
    assert!(
        last_report().unwrap().is_clean(),
        "the `?` exit freed everything"
    );
    match question(false) {
        Err(AppError::Scope(e)) => assert_eq!(e.report().unwrap().escaped_bytes, 12),
        other => panic!("{other:?}"),
    }
}

/// Under `error`, a body that fails and leaks on the way out returns the escape's error in
/// place of its own (the README's promise): the leak on the error path is not lost.
#[gpu_scope(on_escape = error)]
fn fails_and_leaks() -> Result<Tensor, AppError> {
    LEAKED_ON_ERROR.lock().unwrap().push(floats(5));
    Err(AppError::Parse)
}

#[test]
fn an_escape_takes_the_place_of_the_bodys_error() {
    match fails_and_leaks() {
        Err(AppError::Scope(e)) => assert_eq!(e.report().unwrap().escaped_bytes, 20),
        other => panic!("{other:?}"),
    }
    LEAKED_ON_ERROR.lock().unwrap().clear();
}

static LEAKED_ON_ERROR: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[derive(Tensors, Default)]
struct Decoder {
    cache: Vec<Tensor>,
    #[tensors(skip)]
    steps: usize,
}

impl Decoder {
    #[gpu_scope(on_escape = error)]
    fn step(&mut self) -> Result<(), Error> {
        self.cache.push(floats(16));
        self.steps += 1;
        let _temp = floats(100);
        Ok(())
    }

    #[gpu_scope]
    fn total(&self) -> f64 {
        self.cache
            .iter()
            .map(|t| t.sum(tch::Kind::Float).double_value(&[]))
            .sum()
    }
}

impl Decoder {
    /// A macro defined in the body sees the body's `self` and arguments (they are locals
    /// declared before it).
    #[gpu_scope(on_escape = error)]
    fn step_by_macro(&mut self, n: i64) -> Result<usize, Error> {
        macro_rules! push {
            ($t:expr) => {
                self.cache.push($t)
            };
        }
        macro_rules! twice {
            () => {
                2 * n
            };
        }
        push!(floats(twice!()));
        Ok(self.cache.len())
    }
}

/// A macro that names no argument stays with the items the body opens with, before the
/// statements the scope adds (clippy would say the items after it come after statements).
#[deny(clippy::items_after_statements)]
#[gpu_scope(on_escape = error)]
fn doubled(n: i64) -> Result<Tensor, Error> {
    macro_rules! double {
        ($t:expr) => {
            $t * 2
        };
    }
    fn helper(t: Tensor) -> Tensor {
        double!(t)
    }
    Ok(helper(floats(n)))
}

#[test]
fn a_macro_defined_in_the_body_uses_self_and_the_arguments() {
    let mut d = Decoder::default();
    assert_eq!(d.step_by_macro(2).unwrap(), 1);
    let r = last_report().unwrap();
    assert_eq!((r.kept, r.escaped_bytes), (16, 0));
    assert_eq!(d.cache[0].size(), [4]);
    assert_eq!(doubled(3).unwrap().size(), [3]);
}

#[test]
fn method_with_mut_self_growing_a_cache() {
    let mut d = Decoder::default();
    for _ in 0..3 {
        d.step().unwrap();
        let r = last_report().unwrap();
        assert_eq!(r.kept, 64);
        assert_eq!(r.freed, 400);
    }
    assert_eq!(d.steps, 3);
    assert_eq!(d.total(), 0.0);
    assert_eq!(last_report().unwrap().name, "attribute::Decoder::total");
}

struct Wrap<T>(T);

trait Step {
    fn step(&self) -> i64;
}

impl<T: Copy + Into<i64>> Step for Wrap<T> {
    #[gpu_scope]
    fn step(&self) -> i64 {
        self.0.into()
    }
}

impl<T> Wrap<T> {
    #[gpu_scope]
    fn get(&self) -> usize {
        std::mem::size_of::<T>()
    }
}

/// The default name is the function's path as Rust writes it: a method's has its type (and
/// its trait), a function declared in another function's body has that function (closures
/// in between left out).
#[test]
fn default_names_are_function_paths() {
    assert_eq!(Wrap(7u8).get(), 1);
    assert_eq!(last_report().unwrap().name, "attribute::Wrap::get");
    assert_eq!(Wrap(2i32).step(), 2);
    assert_eq!(
        last_report().unwrap().name,
        "<attribute::Wrap as attribute::Step>::step"
    );
    #[gpu_scope]
    fn nested() {}
    nested();
    assert_eq!(
        last_report().unwrap().name,
        "attribute::default_names_are_function_paths::nested"
    );
    let in_closure = || {
        #[gpu_scope]
        fn helper() {}
        helper();
    };
    in_closure();
    assert_eq!(
        last_report().unwrap().name,
        "attribute::default_names_are_function_paths::helper"
    );
}

#[gpu_scope(on_escape = error)]
#[allow(clippy::multiple_bound_locations)]
fn generic<T: Tensors + Clone>(value: &T, n: i64) -> Result<(T, Tensor), Error>
where
    T: std::fmt::Debug,
{
    Ok((value.clone(), floats(n)))
}

#[test]
fn generic_fn_with_where_clause() {
    let (v, t) = generic(&7u8, 6).unwrap();
    assert_eq!((v, t.size()), (7, vec![6]));
    assert_eq!(last_report().unwrap().kept, 24);
}

#[gpu_scope(on_escape = warn)]
fn returns_impl(n: i64) -> impl std::fmt::Debug {
    floats(n)
}

#[test]
fn impl_trait_return_keeps_the_concrete_value() {
    let _v = returns_impl(3);
    assert_eq!(last_report().unwrap().kept, 12);
}

#[allow(dead_code)]
struct NoTrait(Tensor);

#[gpu_scope(on_escape = ignore)]
fn opaque(holder: &mut NoTrait, n: i64) {
    holder.0 = floats(n);
}

#[test]
fn an_argument_without_the_trait_is_opaque_and_the_report_says_so() {
    let mut holder = NoTrait(floats(1));
    opaque(&mut holder, 3);
    let r = last_report().unwrap();
    assert_eq!(
        r.escaped_bytes, 12,
        "an opaque argument is seen as holding nothing"
    );
    assert_eq!(r.opaque_kept, ["&mut attribute::NoTrait"]);
    assert!(r.to_string().contains("derive(gpu_scope::Tensors)"), "{r}");
}

#[gpu_scope(on_escape = error)]
fn reads_opaque(holder: &NoTrait) -> Result<i64, Error> {
    Ok(holder.0.numel() as i64)
}

/// A clean scope names an argument it could not search too: the hint is in the printed report,
/// not only beside an escape table.
#[test]
fn a_clean_scope_prints_the_hint_for_an_opaque_argument() {
    let holder = NoTrait(floats(1));
    assert_eq!(reads_opaque(&holder).unwrap(), 1);
    let r = last_report().unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.opaque_kept, ["&attribute::NoTrait"]);
    assert!(r.to_string().contains("derive(gpu_scope::Tensors)"), "{r}");
}

#[gpu_scope(on_escape = ignore)]
fn load_like(
    _path: &std::path::Path,
    _file: &std::ffi::OsStr,
    _since: std::time::Instant,
    n: i64,
) -> Tensor {
    SINK.lock().unwrap().push(floats(n));
    floats(1)
}

/// Paths, OS strings and clock readings hold no tensors: a model loader's `&Path` is not named
/// opaque, and the report's hint does not ask for `derive(Tensors)` on it.
#[test]
fn paths_and_times_are_arguments_without_tensors() {
    let _serial = common::serial();
    let path = std::path::PathBuf::from("model.safetensors");
    drop(load_like(
        &path,
        path.as_os_str(),
        std::time::Instant::now(),
        3,
    ));
    let r = last_report().unwrap();
    assert_eq!(r.escaped_bytes, 12, "{r}");
    assert!(r.opaque_kept.is_empty(), "{:?}", r.opaque_kept);
    assert!(!r.to_string().contains("derive(gpu_scope::Tensors)"), "{r}");
    SINK.lock().unwrap().clear();
}

#[gpu_scope(on_escape = error)]
fn takes_impl(t: impl AsRef<Tensor>) -> Result<Tensor, Error> {
    Ok(t.as_ref() + &floats(2))
}

#[test]
fn impl_trait_argument() {
    let x = floats(2);
    assert_eq!(takes_impl(&x).unwrap().size(), [2]);
}

#[gpu_scope(on_escape = error, name = "outer-fn")]
fn outer() -> Result<Tensor, Error> {
    let a = inner()?;
    Ok(&a + &a)
}

#[gpu_scope(on_escape = error)]
fn inner() -> Result<Tensor, Error> {
    Ok(floats(8))
}

#[test]
fn nested_attribute_functions() {
    let _ = outer().unwrap();
    let r = last_report().unwrap();
    assert_eq!(r.name, "outer-fn");
    assert_eq!(r.allocated, 64);
    assert_eq!(r.kept, 32);
}

#[gpu_scope(on_escape = error, max_peak = "1 KiB")]
fn budgeted(n: i64) -> Result<(), Error> {
    drop(floats(n));
    Ok(())
}

#[test]
fn budget_from_a_size_literal() {
    assert!(budgeted(256).is_ok());
    assert!(matches!(budgeted(257), Err(Error::OverBudget(_))));
}

/// Options written by a `macro_rules!` wrapper: a size string passed as a fragment arrives
/// wrapped in an invisible group and is still read as a size.
macro_rules! budgeted_by_macro {
    ($fn_name:ident, $size:literal, $release:expr) => {
        #[gpu_scope(on_escape = error, max_peak = $size, release = $release)]
        fn $fn_name(n: i64) -> Result<(), Error> {
            drop(floats(n));
            Ok(())
        }
    };
}
budgeted_by_macro!(budgeted_by_macro, "1 KiB", "1 GiB");

macro_rules! block_budget {
    ($size:expr, $n:expr) => {
        gpu_scope::scope!(on_escape = error, max_peak = $size, { drop(floats($n)) })
    };
}

#[test]
fn budget_from_a_macro_fragment() {
    assert!(budgeted_by_macro(256).is_ok());
    assert!(matches!(budgeted_by_macro(257), Err(Error::OverBudget(_))));
    assert!(block_budget!("1 KiB", 256).is_ok());
    assert!(matches!(
        block_budget!("1 KiB", 257),
        Err(Error::OverBudget(_))
    ));
    assert_eq!(last_report().unwrap().max_peak, Some(1024));
}

#[gpu_scope(on_escape = error, max_peak = limit)]
fn budgeted_at_run_time(limit: i64) -> Result<(), Error> {
    drop(floats(10));
    Ok(())
}

#[gpu_scope(on_escape = error, max_peak = limit)]
fn budgeted_wide(limit: u128) -> Result<(), Error> {
    drop(floats(10));
    Ok(())
}

#[test]
fn budget_from_an_expression() {
    assert!(budgeted_at_run_time(40).is_ok());
    assert!(budgeted_at_run_time(39).is_err());
    // A negative budget is refused on entry, with what to do (the body does not run scoped).
    let err = budgeted_at_run_time(-1).unwrap_err();
    assert!(
        matches!(err, Error::NegativeBudget { bytes: -1, .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("budgeted_at_run_time"), "{message}");
    assert!(message.contains("0 bytes or more"), "{message}");
    // One too large for `u64` is no limit.
    assert!(budgeted_wide(u128::MAX).is_ok());
    assert_eq!(last_report().unwrap().max_peak, None);
    assert!(budgeted_wide(39).is_err());
}

fn tracks_grad() -> bool {
    let w = floats(1).set_requires_grad(true);
    (&w * &w).requires_grad()
}

#[gpu_scope(keep_grad)]
fn with_grad() -> bool {
    tracks_grad()
}

#[gpu_scope]
fn without_grad() -> bool {
    tracks_grad()
}

#[test]
fn grad_mode_option() {
    assert!(with_grad());
    assert!(!without_grad());
}

#[gpu_scope(keep_grad)]
fn nested_in_a_grad_scope() -> (bool, bool) {
    (without_grad(), tracks_grad())
}

#[gpu_scope]
fn nested_in_a_no_grad_scope() -> (bool, bool) {
    (without_grad(), tracks_grad())
}

/// A scope gives back the autograd mode it found, whether it had to change it or (nested in
/// a scope that turned it off) found it off already.
#[test]
fn autograd_mode_comes_back_after_nested_scopes() {
    assert_eq!(nested_in_a_grad_scope(), (false, true));
    assert_eq!(nested_in_a_no_grad_scope(), (false, false));
    assert!(tracks_grad(), "on again outside every scope");
    tch::no_grad(|| {
        assert_eq!(nested_in_a_grad_scope(), (false, false));
        assert!(!tracks_grad(), "off again, as the caller had it");
    });
    assert!(tracks_grad());
}

#[gpu_scope(on_escape = warn)]
unsafe fn unsafe_fn(p: *const i64) -> i64 {
    // SAFETY: the caller passes a valid pointer.
    unsafe { *p }
}

#[test]
fn unsafe_fn_works() {
    let x = 5;
    assert_eq!(unsafe { unsafe_fn(&x) }, 5);
}

#[gpu_scope]
fn diverges(n: i64) -> ! {
    let _t = floats(n);
    panic!("stop")
}

#[test]
fn a_function_returning_never_ends_its_scope_unchecked_when_it_unwinds() {
    assert!(std::panic::catch_unwind(|| diverges(2)).is_err());
    assert!(!last_report().unwrap().checked);
    assert!(
        plain(1).is_ok(),
        "the thread's scopes are consistent afterwards"
    );
}

#[gpu_scope(on_escape = error, max_peak = 4 * x.numel())]
fn budget_of(x: &Tensor, n: i64) -> Result<(), Error> {
    drop(floats(n));
    Ok(())
}

#[gpu_scope(on_escape = error, max_peak = 8 * 1024 * 1024 * 1024)]
fn budget_over_i32() -> Result<Tensor, Error> {
    Ok(floats(4))
}

#[gpu_scope(on_escape = error, max_peak = 1 << 70)]
fn budget_over_u64() -> Result<Tensor, Error> {
    Ok(floats(4))
}

#[gpu_scope(on_escape = error, max_peak = (1 << 127) - 1)]
fn budget_past_i128() -> Result<Tensor, Error> {
    Ok(floats(4))
}

#[gpu_scope(on_escape = error, max_peak = 4 - 8 + (1 << 10))]
fn budget_with_a_negative_step() -> Result<Tensor, Error> {
    Ok(floats(4))
}

#[test]
fn budget_from_any_integer_expression() {
    let x = floats(256);
    assert!(budget_of(&x, 256).is_ok());
    assert!(matches!(budget_of(&x, 512), Err(Error::OverBudget(_))));
    assert!(budget_over_i32().is_ok());
    assert_eq!(last_report().unwrap().max_peak, Some(8 << 30));
    // Too large for `u64`: no limit.
    assert!(budget_over_u64().is_ok());
    assert_eq!(last_report().unwrap().max_peak, None);
    assert!(budget_past_i128().is_ok());
    assert_eq!(last_report().unwrap().max_peak, None);
    // Worked out whole, as written: no step is typed on its own.
    assert!(budget_with_a_negative_step().is_ok());
    assert_eq!(last_report().unwrap().max_peak, Some(1020));
}

struct Named {
    name: String,
}

impl Named {
    #[gpu_scope(name = self.name.as_str())]
    fn run(&self) {}
}

#[test]
fn a_name_may_borrow() {
    let named = Named {
        name: format!("step-{}", 3),
    };
    named.run();
    assert_eq!(last_report().unwrap().name, "step-3");
}

#[gpu_scope(keep_grad = true)]
fn with_grad_true() -> bool {
    tracks_grad()
}

#[gpu_scope(keep_grad = false)]
fn with_grad_false() -> bool {
    tracks_grad()
}

/// Items first: they stay before what the attribute adds, an owned argument's rebinding or
/// the guard (`cargo clippy` checks).
#[deny(clippy::items_after_statements)]
#[gpu_scope]
fn items_first(x: Tensor) -> Tensor {
    const K: i64 = 3;
    fn triple(t: Tensor) -> Tensor {
        t * K
    }
    triple(x)
}

#[deny(clippy::items_after_statements)]
#[gpu_scope]
fn never_with_items() -> ! {
    const WHY: &str = "on purpose";
    panic!("{WHY}")
}

#[test]
fn items_may_open_a_body() {
    assert_eq!(items_first(floats(2)).size(), [2]);
    assert!(std::panic::catch_unwind(|| never_with_items()).is_err());
}

/// A `bool` expression, evaluated at entry: a step that trains or only evaluates.
#[gpu_scope(keep_grad = training)]
fn with_grad_if(training: bool) -> bool {
    tracks_grad()
}

struct Trainer {
    training: bool,
}

impl Trainer {
    #[gpu_scope(keep_grad = self.training)]
    fn run(&self) -> bool {
        tracks_grad()
    }
}

#[test]
fn keep_grad_takes_a_bool() {
    assert!(with_grad_true());
    assert!(!with_grad_false());
    assert!(with_grad_if(true));
    assert!(!with_grad_if(false));
    assert!(Trainer { training: true }.run());
    assert!(!Trainer { training: false }.run());
    let training = true;
    assert!(gpu_scope::scope!(keep_grad = training, { tracks_grad() }));
    assert!(!gpu_scope::scope!(keep_grad = !training, { tracks_grad() }));
}

#[gpu_scope::gpu_scope(on_escape = ignore)]
fn scaler() -> impl Fn(&Tensor) -> Tensor {
    let w = floats(4);
    move |x: &Tensor| x * &w
}

/// As the README's Limits say: a returned closure is opaque, so the tensor it captured is
/// reported escaped and the closure is named in the report.
#[test]
fn a_returned_closure_is_named_and_its_captures_are_not_seen() {
    let f = scaler();
    let report = gpu_scope::last_report().unwrap();
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.opaque_kept.len(), 1, "{report}");
    assert_eq!(f(&floats(4)).numel(), 4);
}

/// A crate of the user's that re-exports gpu-scope, as a framework would.
mod framework {
    pub use gpu_scope as scoped;
}

/// The macros told where gpu-scope is (`crate = path`): a re-export, named from a module that
/// does not import it.
mod through_a_reexport {
    use super::common::floats;
    use super::framework::scoped;
    use tch::Tensor;

    #[derive(scoped::Tensors)]
    #[tensors(crate = crate::framework::scoped)]
    pub struct Out {
        pub t: Tensor,
    }

    #[scoped::gpu_scope(crate = crate::framework::scoped, on_escape = error)]
    pub fn kept(stash: &mut Vec<Tensor>, leak: bool) -> Result<Out, scoped::Error> {
        if leak {
            std::mem::forget(floats(3));
        }
        stash.push(floats(2));
        Ok(Out { t: floats(4) })
    }

    pub fn block() -> Result<Tensor, scoped::Error> {
        scoped::scope!(crate = "crate::framework::scoped", on_escape = error, {
            std::mem::forget(floats(5));
            floats(1)
        })
    }
}

#[test]
fn the_macros_reach_gpu_scope_through_the_path_given() {
    let mut stash = Vec::new();
    let out = through_a_reexport::kept(&mut stash, false).unwrap();
    let r = last_report().unwrap();
    assert_eq!((r.kept, out.t.size(), stash.len()), (24, vec![4], 1), "{r}");
    let Err(Error::Escaped(r)) = through_a_reexport::kept(&mut stash, true) else {
        panic!("the leak was not caught");
    };
    assert_eq!(r.escaped_bytes, 12, "{r}");
    let Err(Error::Escaped(r)) = through_a_reexport::block() else {
        panic!("the block's leak was not caught");
    };
    assert_eq!(r.escaped_bytes, 20, "{r}");
}

#[gpu_scope(on_escape = panic)]
fn compare(a: &Tensor, b: &Tensor) -> std::cmp::Ordering {
    let (a, b) = (
        (a + 1.0).sum(tch::Kind::Float),
        (b + 1.0).sum(tch::Kind::Float),
    );
    a.double_value(&[]).total_cmp(&b.double_value(&[]))
}

#[gpu_scope(on_escape = panic)]
fn bare_error(path: &str) -> std::io::Error {
    let _scratch = floats(2) * 2.0;
    std::fs::read(path).expect_err("the path does not exist")
}

/// Common std return types that hold no tensors need no impl of the user's.
#[test]
fn plain_std_return_types_are_kept_as_holding_no_tensors() {
    let (a, b) = (floats(1), floats(2));
    assert_eq!(compare(&a, &b), std::cmp::Ordering::Less);
    assert!(last_report().expect("a report").is_clean());
    let error = bare_error("/nonexistent/gpu-scope");
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
    assert!(last_report().expect("a report").is_clean());
}
