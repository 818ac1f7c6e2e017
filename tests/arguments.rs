//! What `#[gpu_scope]` keeps of a function's arguments: every receiver passed by reference,
//! and owned `Arc`/`Rc` handles whose contents the caller still holds; not what an owned
//! argument takes with it, and never a real leak next to them.
mod common;
use common::{escaped, floats};
use gpu_scope::{
    gpu_scope, last_report, Error, EscapePolicy, HeldBy, Scope, ScopeOptions, ScopeReport, Tensors,
};
use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[derive(Tensors, Default)]
struct Model {
    cache: Mutex<Vec<Tensor>>,
    shared: Mutex<Vec<Tensor>>,
}

// The receiver forms are what is tested here.
#[allow(clippy::needless_arbitrary_self_type)]
impl Model {
    #[gpu_scope(on_escape = error)]
    fn typed_mut(self: &mut Self) -> Result<(), Error> {
        self.cache.get_mut().unwrap().push(floats(4));
        Ok(())
    }

    #[gpu_scope(on_escape = error)]
    fn typed_ref(self: &Self) -> Result<(), Error> {
        self.shared.lock().unwrap().push(floats(4));
        Ok(())
    }

    /// The body moves the receiver (`get_mut`); the scope still searches it afterwards.
    #[gpu_scope(on_escape = error)]
    fn pinned(self: Pin<&mut Self>) -> Result<(), Error> {
        self.get_mut().cache.get_mut().unwrap().push(floats(4));
        Ok(())
    }

    #[gpu_scope(on_escape = error)]
    fn pinned_ref(self: Pin<&Self>) -> Result<(), Error> {
        self.shared.lock().unwrap().push(floats(4));
        Ok(())
    }

    #[gpu_scope(on_escape = error)]
    fn arc_ref(self: &Arc<Self>) -> Result<(), Error> {
        self.shared.lock().unwrap().push(floats(4));
        Ok(())
    }

    #[gpu_scope(on_escape = error)]
    fn arc(self: Arc<Self>) -> Result<(), Error> {
        self.shared.lock().unwrap().push(floats(4));
        Ok(())
    }

    #[gpu_scope(on_escape = error)]
    fn rc(self: Rc<Self>) -> Result<(), Error> {
        self.shared.lock().unwrap().push(floats(4));
        Ok(())
    }

    /// The return value borrows from `self`, which then cannot be searched: what it returns
    /// is kept, and memory nothing else keeps is not judged here but by the enclosing scope.
    #[gpu_scope(on_escape = error)]
    fn last_mut(&mut self, leak: bool) -> Result<Option<&mut Tensor>, Error> {
        if leak {
            SINK.lock().unwrap().push(floats(2));
        }
        Ok(self.cache.get_mut().unwrap().last_mut())
    }
}

/// Owned receivers: the method owns `self`, which dies with its body like any owned argument.
#[derive(Tensors, Default, Debug)]
struct Owner {
    cache: Vec<Tensor>,
}

// The receiver forms are what is tested here.
#[allow(clippy::needless_arbitrary_self_type)]
impl Owner {
    /// The body uses one field of `self`: a closure would capture only that field, and leave
    /// the rest of `self` alive in the function until after the search.
    #[gpu_scope(on_escape = error)]
    fn consume(mut self) -> Result<Tensor, Error> {
        self.cache.push(floats(100));
        Ok(floats(1))
    }

    #[gpu_scope(on_escape = error)]
    fn consume_typed(mut self: Self) -> Result<Tensor, Error> {
        self.cache.push(floats(100));
        Ok(floats(1))
    }

    #[gpu_scope(on_escape = error)]
    fn consume_boxed(mut self: Box<Self>) -> Result<Tensor, Error> {
        self.cache.push(floats(100));
        Ok(floats(1))
    }

    #[gpu_scope(on_escape = error)]
    async fn consume_later(mut self) -> Result<Tensor, Error> {
        self.cache.push(floats(100));
        Ok(floats(1))
    }

    /// Still `self` to the body, format strings included.
    #[gpu_scope(on_escape = error)]
    fn describe(mut self) -> Result<bool, Error> {
        self.cache.push(floats(100));
        Ok(format!("{self:?}").contains("cache"))
    }
}

/// The report of a call that left nothing escaped.
fn kept_return(result: Result<Tensor, Error>) {
    let _returned = result.unwrap_or_else(|e| panic!("{e}"));
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn an_owned_receiver_dies_inside() {
    kept_return(Owner::default().consume());
    kept_return(Owner::default().consume_typed());
    kept_return(Box::new(Owner::default()).consume_boxed());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    kept_return(runtime.block_on(Owner::default().consume_later()));
    assert!(Owner::default().describe().unwrap());
    assert!(last_report().unwrap().is_clean());
}

#[test]
fn an_owned_shared_receiver_the_caller_gave_away_dies_inside() {
    kept_nothing(Arc::new(Model::default()).arc());
    kept_nothing(Rc::new(Model::default()).rc());
}

/// A `'static` reference or lifetime in the return type borrows from no argument: `self` is
/// still searched.
#[derive(Tensors, Default)]
struct Stepper {
    v: Vec<Tensor>,
}

impl Stepper {
    #[gpu_scope(on_escape = ignore)]
    fn step_static(&mut self) -> Result<Tensor, &'static str> {
        self.v.push(floats(100));
        Ok(floats(10))
    }

    #[gpu_scope(on_escape = ignore)]
    fn label(&mut self) -> Option<&'static str> {
        self.v.push(floats(100));
        Some("label")
    }

    #[gpu_scope(on_escape = error)]
    fn named(&mut self) -> Result<std::borrow::Cow<'static, str>, Error> {
        self.v.push(floats(100));
        Ok("named".into())
    }
}

#[test]
fn a_static_borrow_in_the_return_type_leaves_mut_arguments_searched() {
    let mut stepper = Stepper::default();
    let steps: [fn(&mut Stepper) -> bool; 3] = [
        |s| s.step_static().is_ok(),
        |s| s.label().is_some(),
        |s| s.named().is_ok(),
    ];
    for step in steps {
        assert!(step(&mut stepper));
        let report = last_report().unwrap();
        assert!(report.is_clean(), "{report}");
        assert!(report.kept >= 400, "{report}");
    }
    assert_eq!(stepper.v.len(), 3);
}

#[derive(Tensors, Default)]
struct Memo {
    cache: std::collections::HashMap<String, Tensor>,
}

impl Memo {
    /// A memoising getter: what it stores in `self` beside what it returns cannot be searched
    /// (the returned borrow holds `self`).
    #[gpu_scope(on_escape = panic)]
    fn get(&mut self, name: &str) -> &Tensor {
        if !self.cache.contains_key(name) {
            self.cache.insert(format!("{name}.t"), floats(8));
            self.cache.insert(name.to_owned(), floats(4));
        }
        &self.cache[name]
    }

    #[gpu_scope(on_escape = panic)]
    fn first<'a>(&self, out: &'a mut Vec<Tensor>) -> &'a Tensor {
        out.push(floats(8));
        &out[0]
    }
}

#[derive(Tensors, Default)]
struct Wrap(Vec<Tensor>);

#[gpu_scope(on_escape = error)]
fn fill_destructured(Wrap(v): &mut Wrap, leak: bool) -> Result<(), Error> {
    v.push(floats(4));
    if leak {
        SINK.lock().unwrap().push(floats(2));
    }
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn fill_shared(Model { shared, .. }: &Model) -> Result<(), Error> {
    shared.lock().unwrap().push(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = panic)]
fn fill_named<'a>(cache: Option<&'a mut Vec<Tensor>>) -> Option<&'a Tensor> {
    let cache = cache?;
    cache.push(floats(4));
    cache.first()
}

/// Matched through the reference, with `ref mut` and `ref` bindings into the caller's value.
#[allow(clippy::needless_borrowed_reference)] // the form under test
#[gpu_scope(on_escape = error)]
fn fill_through(
    &mut Wrap(ref mut v): &mut Wrap,
    &Model { ref shared, .. }: &Model,
) -> Result<(), Error> {
    v.push(floats(4));
    shared.lock().unwrap().push(floats(4));
    Ok(())
}

/// An owned argument bound `ref mut`: it dies in the scope, as any owned one.
#[gpu_scope(on_escape = error)]
fn grow_owned(ref mut v: Vec<Tensor>, Wrap(ref mut w): Wrap) -> Result<usize, Error> {
    v.push(floats(4));
    w.push(floats(4));
    Ok(v.len() + w.len())
}

#[test]
fn reference_arguments_destructured_in_the_signature_are_kept() {
    let _serial = common::serial();
    let mut wrap = Wrap::default();
    kept(fill_destructured(&mut wrap, false));
    let err = fill_destructured(&mut wrap, true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped.len(), 1, "{err}");
    SINK.lock().unwrap().clear();
    let model = Model::default();
    kept(fill_shared(&model));
    assert_eq!((wrap.0.len(), model.shared.lock().unwrap().len()), (2, 1));
    kept(fill_through(&mut wrap, &model));
    assert_eq!((wrap.0.len(), model.shared.lock().unwrap().len()), (3, 2));
    assert_eq!(grow_owned(Vec::new(), Wrap::default()).unwrap(), 2);
    let r = last_report().unwrap();
    assert!(
        r.is_clean() && r.freed == r.allocated && r.allocations == 2,
        "{r}"
    );
}

#[test]
fn mut_arguments_that_cannot_be_searched_are_named_not_inspected() {
    let mut cache = Vec::new();
    fill_named(Some(&mut cache));
    let report = last_report().unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert!(
        report.uninspected_kept[0].starts_with("`cache`"),
        "{report}"
    );
    assert_eq!(cache.len(), 1);
}

#[test]
fn a_mut_argument_the_return_value_borrows_is_named_not_inspected_not_escaped() {
    let mut memo = Memo::default();
    assert_eq!(memo.get("fc").size(), [4]);
    let report = last_report().unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.status(), "not inspected", "{report}");
    assert_eq!(report.kept, 16, "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), 32, "{report}");
    assert!(
        report
            .uninspected_kept
            .iter()
            .any(|w| w.starts_with("`self`")),
        "{report}"
    );
    let mut out = Vec::new();
    assert_eq!(memo.first(&mut out).size(), [8]);
    let report = last_report().unwrap();
    assert_eq!(report.status(), "clean", "{report}");
    assert_eq!(report.kept, 32, "{report}");
    assert!(
        report
            .uninspected_kept
            .iter()
            .any(|w| w.starts_with("`out`")),
        "{report}"
    );
    // Held, not lost: the enclosing scope judges it again, an escape unless kept there.
    let outer = || Scope::enter(ScopeOptions::new("outer").on_escape(EscapePolicy::Ignore));
    let scope = outer().unwrap();
    memo.get("fc2");
    let report = scope.exit(&()).unwrap();
    assert_eq!(report.escaped_bytes, 48, "{report}");
    let scope = outer().unwrap();
    memo.get("fc3");
    let report = scope.exit(&memo).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 48, "{report}");
}

/// A `&mut` argument whose lifetime is elided cannot be what a named lifetime of the return
/// type borrows from: it is searched, and a leak beside it is an escape.
#[gpu_scope(on_escape = error)]
fn pick<'a>(x: &'a Tensor, cache: &mut Vec<Tensor>, leak: bool) -> Result<&'a Tensor, Error> {
    cache.push(floats(3));
    if leak {
        SINK.lock().unwrap().push(floats(40));
    }
    Ok(x)
}

impl Memo {
    #[gpu_scope(on_escape = error)]
    fn pick<'a>(&mut self, x: &'a Tensor, scratch: &mut Vec<Tensor>) -> Result<&'a Tensor, Error> {
        self.cache.insert("pick".to_owned(), floats(5));
        scratch.push(floats(3));
        Ok(x)
    }

    /// Named, the receiver's lifetime may be the return's: `self` is not searched, `scratch`
    /// (elided) is.
    #[gpu_scope(on_escape = panic)]
    fn entry<'a>(&'a mut self, scratch: &mut Vec<Tensor>) -> &'a Tensor {
        scratch.push(floats(3));
        self.cache
            .entry("entry".to_owned())
            .or_insert_with(|| floats(5))
    }
}

impl Memo {
    /// `Cow<str>` without its lifetime borrows from `self` (elision), beside a named
    /// lifetime: `self` is not searched (searching it would not compile).
    #[allow(mismatched_lifetime_syntaxes)] // the elided form is the case
    #[gpu_scope(on_escape = panic)]
    fn labelled<'a>(&mut self, x: &'a Tensor) -> (&'a Tensor, std::borrow::Cow<str>) {
        self.cache.insert("label".to_owned(), floats(2));
        let label = self.cache.keys().next().unwrap();
        (x, std::borrow::Cow::Borrowed(label))
    }
}

/// The only lifetime to elide is `names`'s: `Cow<str>` borrows it.
#[allow(mismatched_lifetime_syntaxes)] // the elided form is the case
#[gpu_scope(on_escape = panic)]
fn last_name(names: &mut Vec<String>) -> Result<std::borrow::Cow<str>, fn(&str) -> usize> {
    names.push("last".to_owned());
    Ok(std::borrow::Cow::Borrowed(names.last().unwrap()))
}

#[test]
fn a_standard_borrowing_type_without_its_lifetime_is_seen_to_borrow() {
    let mut memo = Memo::default();
    let x = floats(1);
    assert_eq!(memo.labelled(&x).1, "label");
    let report = last_report().unwrap();
    assert!(report.uninspected_kept[0].starts_with("`self`"), "{report}");
    let mut names = Vec::new();
    assert_eq!(last_name(&mut names).unwrap(), "last");
    let report = last_report().unwrap();
    assert!(
        report.uninspected_kept[0].starts_with("`names`"),
        "{report}"
    );
}

#[test]
fn a_mut_argument_with_an_elided_lifetime_is_searched_beside_a_named_return() {
    let _serial = common::serial();
    let x = floats(1);
    let mut cache = Vec::new();
    assert_eq!(pick(&x, &mut cache, false).unwrap().size(), [1]);
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 12, "{report}");
    let err = pick(&x, &mut cache, true).unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.escaped_bytes, 160, "{report}");
    SINK.lock().unwrap().clear();
    let mut memo = Memo::default();
    memo.pick(&x, &mut cache).unwrap();
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 20 + 12, "{report}");
    assert_eq!(memo.entry(&mut cache).size(), [5]);
    let report = last_report().unwrap();
    assert_eq!(report.kept, 20 + 12, "{report}");
    assert_eq!(report.uninspected_kept.len(), 1, "{report}");
    assert!(report.uninspected_kept[0].starts_with("`self`"), "{report}");
    assert_eq!(cache.len(), 4);
}

/// The report of a call that must have kept what it stored, and nothing else alive.
fn kept(result: Result<(), Error>) -> ScopeReport {
    result.unwrap_or_else(|e| panic!("{e}"));
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.kept >= 16, "{report}");
    report
}

#[test]
fn every_reference_receiver_is_kept() {
    let mut model = Model::default();
    kept(model.typed_mut());
    kept(model.typed_ref());
    kept(Pin::new(&mut model).pinned());
    kept(Pin::new(&model).pinned_ref());
    let model = Arc::new(model);
    kept(model.arc_ref());
    assert_eq!(model.cache.lock().unwrap().len(), 2);
    assert_eq!(model.shared.lock().unwrap().len(), 3);
}

#[test]
fn shared_receivers_are_kept_while_the_caller_holds_them() {
    let model = Arc::new(Model::default());
    kept(Arc::clone(&model).arc());
    assert_eq!(model.shared.lock().unwrap().len(), 1);
    let model = Rc::new(Model::default());
    kept(Rc::clone(&model).rc());
    assert_eq!(model.shared.lock().unwrap().len(), 1);
}

#[test]
fn a_borrowing_return_value_is_kept_and_a_leak_beside_it_is_found() {
    let _serial = common::serial();
    let mut model = Model::default();
    model.cache.get_mut().unwrap().push(floats(1));
    assert!(model.last_mut(false).unwrap().is_some());
    let report = last_report().unwrap();
    assert_eq!(report.status(), "clean", "{report}");
    assert_eq!(report.uninspected_kept.len(), 1, "{report}");
    let scope = Scope::enter(ScopeOptions::new("outer").on_escape(EscapePolicy::Ignore)).unwrap();
    assert!(model.last_mut(true).unwrap().is_some());
    let inner = last_report().unwrap();
    assert_eq!(inner.status(), "not inspected", "{inner}");
    assert_eq!(inner.held_by(HeldBy::Uninspected), 8, "{inner}");
    let report = scope.exit(&model).unwrap();
    assert_eq!(report.escaped_bytes, 8, "{report}");
    SINK.lock().unwrap().clear();
}

#[gpu_scope(on_escape = error)]
fn fill_arc(cache: Arc<Mutex<Vec<Tensor>>>, leak: bool) -> Result<(), Error> {
    cache.lock().unwrap().push(floats(4));
    if leak {
        SINK.lock().unwrap().push(floats(2));
    }
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn fill_rc(cache: Rc<RefCell<Vec<Tensor>>>) -> Result<(), Error> {
    cache.borrow_mut().push(floats(4));
    Ok(())
}

#[test]
fn owned_handles_shared_with_the_caller_are_kept() {
    let cache = Arc::new(Mutex::new(Vec::new()));
    kept(fill_arc(Arc::clone(&cache), false));
    assert_eq!(cache.lock().unwrap().len(), 1);
    let cache = Rc::new(RefCell::new(Vec::new()));
    kept(fill_rc(Rc::clone(&cache)));
    assert_eq!(cache.borrow().len(), 1);
}

#[test]
fn a_leak_beside_a_shared_handle_is_still_found() {
    let _serial = common::serial();
    let cache = Arc::new(Mutex::new(Vec::new()));
    let err = fill_arc(Arc::clone(&cache), true).unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(cache.lock().unwrap().len(), 1);
    SINK.lock().unwrap().clear();
}

#[test]
fn a_handle_the_caller_gave_away_dies_inside() {
    kept_nothing(fill_arc(Arc::new(Mutex::new(Vec::new())), false));
}

#[gpu_scope(on_escape = error)]
fn unwrap_arc(cache: Arc<Mutex<Vec<Tensor>>>) -> Result<usize, Error> {
    // The scope's handle is weak: the body still owns the only strong reference.
    Ok(Arc::try_unwrap(cache).map_or(0, |v| v.into_inner().unwrap().len()))
}

#[test]
fn the_body_still_owns_its_arc() {
    let cache = Arc::new(Mutex::new(vec![floats(1)]));
    assert_eq!(unwrap_arc(cache).unwrap(), 1);
}

/// A scope whose allocations all died inside it.
fn kept_nothing(result: Result<(), Error>) {
    result.unwrap_or_else(|e| panic!("{e}"));
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 0, "{report}");
}

struct Opaque;

#[gpu_scope(on_escape = error)]
fn opaque_arc(config: Arc<Opaque>) -> Result<(), Error> {
    drop(config);
    Ok(())
}

#[test]
fn a_shared_handle_without_the_trait_is_named_in_the_report() {
    let config = Arc::new(Opaque);
    kept_nothing(opaque_arc(Arc::clone(&config)));
    let report = last_report().unwrap();
    assert_eq!(report.opaque_kept, ["alloc::sync::Arc<arguments::Opaque>"]);
}

/// A tch module the function borrows was made before its scope: its tensors, private to tch,
/// hide no leak (the most common inference signature).
#[gpu_scope(on_escape = error)]
fn infer(model: &nn::Sequential, x: &Tensor, leak: bool) -> Result<Tensor, Error> {
    if leak {
        SINK.lock().unwrap().push(floats(8));
    }
    Ok(model.forward(x))
}

/// A service's model, shared with each request's handler (no `VarStore` in it).
#[derive(gpu_scope::Tensors)]
struct Served {
    net: nn::Sequential,
}

/// The model comes in an owned `Rc` (or `Arc`) the caller still holds: made before the scope,
/// as a borrowed one, so its private tensors hide no leak either.
#[gpu_scope(on_escape = error)]
fn serve(model: Rc<Served>, x: &Tensor, leak: bool) -> Result<Tensor, Error> {
    if leak {
        SINK.lock().unwrap().push(floats(8));
    }
    Ok(model.net.forward(x))
}

#[test]
fn a_module_in_an_owned_shared_argument_hides_no_leak() {
    let _serial = common::serial();
    let vs = nn::VarStore::new(Device::Cpu);
    let model = Rc::new(Served {
        net: nn::seq().add(nn::linear(vs.root(), 8, 2, Default::default())),
    });
    let x = Tensor::ones([1, 8], (Kind::Float, Device::Cpu));
    let _y = serve(Rc::clone(&model), &x, false).unwrap();
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    let err = serve(Rc::clone(&model), &x, true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped.len(), 1, "{err}");
    SINK.lock().unwrap().clear();
}

/// Adds a layer to the caller's store through a path, as tch's builders do.
#[gpu_scope(on_escape = error)]
fn add_head(p: &nn::Path, vs: Option<&nn::VarStore>, leak: bool) -> Result<(), Error> {
    let _ = nn::linear(p / "head", 8, 2, Default::default());
    if leak {
        SINK.lock().unwrap().push(floats(8));
    }
    let _ = vs;
    Ok(())
}

/// The last scope made an 8x2 linear layer that it could not look into: not escaped, all of it
/// not inspected.
fn assert_layer_not_inspected(report: &gpu_scope::ScopeReport) {
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(
        report.held_by(HeldBy::Uninspected),
        4 * (8 * 2 + 2),
        "{report}"
    );
}

/// The variables made through a path are the store's, which the path keeps private: not
/// inspected rather than escaped; with the store kept too they are kept, and a leak escapes.
#[test]
fn variables_made_through_a_path_are_not_called_escaped() {
    let _serial = common::serial();
    let vs = nn::VarStore::new(Device::Cpu);
    add_head(&vs.root(), None, false).unwrap();
    assert_layer_not_inspected(&last_report().unwrap());
    let vs = nn::VarStore::new(Device::Cpu);
    add_head(&vs.root(), Some(&vs), false).unwrap();
    assert!(last_report().unwrap().is_clean());
    let err = add_head(&vs.root(), Some(&vs), true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped.len(), 1, "{err}");
    SINK.lock().unwrap().clear();
    // Another store kept (a backbone's) does not hold what the path builds in its own.
    let backbone = nn::VarStore::new(Device::Cpu);
    add_head(&vs.root(), Some(&backbone), false).unwrap();
    assert_layer_not_inspected(&last_report().unwrap());
}

/// Filled through a cell inside the scope, a module may be the scope's own: not inspected
/// rather than escaped.
#[gpu_scope(on_escape = error)]
fn build_into(slot: &RefCell<Option<nn::Sequential>>) -> Result<(), Error> {
    let vs = nn::VarStore::new(Device::Cpu);
    *slot.borrow_mut() = Some(nn::seq().add(nn::linear(vs.root(), 8, 2, Default::default())));
    Ok(())
}

#[test]
fn a_borrowed_module_hides_no_leak_and_one_filled_inside_is_not_judged() {
    let _serial = common::serial();
    let vs = nn::VarStore::new(Device::Cpu);
    let model = nn::seq().add(nn::linear(vs.root(), 8, 2, Default::default()));
    let x = Tensor::ones([1, 8], (Kind::Float, Device::Cpu));
    let _y = infer(&model, &x, false).unwrap();
    assert!(last_report().unwrap().is_clean());
    let err = infer(&model, &x, true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped.len(), 1, "{err}");
    SINK.lock().unwrap().clear();

    let slot = RefCell::new(None);
    build_into(&slot).unwrap();
    assert_layer_not_inspected(&last_report().unwrap());
}

#[gpu_scope(on_escape = error)]
fn fill_pair((x, cache): (&Tensor, &mut Vec<Tensor>)) -> Result<(), Error> {
    cache.push(x * 2);
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn fill_nested(((owned, x), cache): ((Tensor, &Tensor), &mut Vec<Tensor>)) -> Result<(), Error> {
    cache.push(x + &owned);
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn fill_first((cache, ..): (&mut Vec<Tensor>, u8, u8)) -> Result<(), Error> {
    cache.push(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn grow_ends((mut a, .., mut b): (Tensor, Tensor, Tensor), n: i64) -> Result<(), Error> {
    let _ = (a.resize_([n]), b.resize_([n]));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn grow_array([mut a, ..]: [Tensor; 3], n: i64) -> Result<(), Error> {
    let _ = a.resize_([n]);
    Ok(())
}

/// A tuple argument destructured in the signature: each element is sorted as an argument of
/// its own (a `&mut` element is searched, an owned one dies inside), with or without a `..`
/// (it was sorted whole: a `&mut` element not inspected, a shared tensor's growth escaped);
/// so is an array of a written length.
#[test]
fn elements_of_a_destructured_tuple_argument_are_arguments() {
    let (x, mut cache) = (floats(4), Vec::new());
    kept(fill_pair((&x, &mut cache)));
    kept(fill_nested(((floats(4), &x), &mut cache)));
    kept(fill_first((&mut cache, 1, 2)));
    assert_eq!(cache.len(), 3);
    let y = floats(4);
    let report = kept(grow_ends(
        (x.shallow_clone(), floats(1), y.shallow_clone()),
        16,
    ));
    assert_eq!((report.kept, x.size(), y.size()), (128, vec![16], vec![16]));
    let report = kept(grow_array([x.shallow_clone(), floats(1), floats(1)], 32));
    assert_eq!((report.kept, x.size()), (128, vec![32]));
    // What the `..` stands for dies inside, as an argument given away.
    kept_nothing(grow_ends((floats(1), floats(1), floats(1)), 16));
    kept_nothing(grow_array([floats(1), floats(1), floats(1)], 16));
}

#[gpu_scope(on_escape = error)]
fn fill_optional(out: Option<&mut Vec<Tensor>>, seen: Option<&Tensor>) -> Result<(), Error> {
    if let (Some(out), Some(seen)) = (out, seen) {
        out.push(seen * 2);
    }
    Ok(())
}

#[gpu_scope(on_escape = error)]
async fn fill_optional_later(mut out: Option<&mut Vec<Tensor>>) -> Result<(), Error> {
    if let Some(out) = out.take() {
        out.push(floats(4));
    }
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn fill_optional_shared(cache: Option<Arc<Mutex<Vec<Tensor>>>>) -> Result<(), Error> {
    if let Some(cache) = cache {
        cache.lock().unwrap().push(floats(4));
    }
    Ok(())
}

/// `Option<&mut T>`, `Option<&T>` and `Option<Arc<T>>` arguments: what the caller holds
/// through them is kept, as through the bare reference or handle.
#[test]
fn optional_borrows_and_handles_are_kept() {
    let (x, mut cache) = (floats(4), Vec::new());
    kept(fill_optional(Some(&mut cache), Some(&x)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    kept(runtime.block_on(fill_optional_later(Some(&mut cache))));
    assert_eq!(cache.len(), 2);
    let shared = Arc::new(Mutex::new(Vec::new()));
    kept(fill_optional_shared(Some(Arc::clone(&shared))));
    assert_eq!(shared.lock().unwrap().len(), 1);
    kept_nothing(fill_optional(None, None));
    kept_nothing(fill_optional_shared(None));
}

#[gpu_scope(on_escape = error)]
fn weigh(x: &Tensor, mut w: &Tensor, mut bias: Option<&Tensor>) -> Result<Tensor, Error> {
    if w.numel() == 0 {
        // A default made here and leaked (a lazily filled global would do the same).
        w = Box::leak(Box::new(floats(4) + 1));
    }
    let bias = *bias.get_or_insert_with(|| Box::leak(Box::new(floats(2))));
    Ok(x * w + bias.sum(Kind::Float))
}

#[gpu_scope(on_escape = error)]
async fn weigh_later(mut w: &Tensor) -> Result<Tensor, Error> {
    if w.numel() == 0 {
        w = Box::leak(Box::new(floats(4)));
    }
    Ok(w * 2)
}

/// A `mut` shared borrow reassigned in the body: what is searched after it is what the
/// caller passed, so what the body pointed it at instead is not kept through it.
#[test]
fn a_reassigned_shared_borrow_keeps_only_what_the_caller_passed() {
    let (x, w, bias) = (floats(4), floats(4), floats(1));
    kept(weigh(&x, &w, Some(&bias)).map(drop));
    let report = escaped(weigh(&x, &floats(0), None));
    assert_eq!(report.escaped_bytes, 24);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    kept(runtime.block_on(weigh_later(&w)).map(drop));
    let report = escaped(runtime.block_on(weigh_later(&floats(0))));
    assert_eq!(report.escaped_bytes, 16);
}

#[gpu_scope(on_escape = error)]
fn grow(mut x: Tensor, n: i64) -> Result<(), Error> {
    let _ = x.resize_([n]);
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn look(x: Tensor) -> Result<(), Error> {
    assert!(x.numel() > 0);
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn grow_optional(x: Option<Tensor>, n: i64) -> Result<(), Error> {
    if let Some(mut x) = x {
        let _ = x.resize_([n]);
    }
    Ok(())
}

/// An owned `Tensor` argument that is a `shallow_clone` shares the caller's tensor itself:
/// the storage the body grows it into is the caller's, kept; so does a view or a `detach()`,
/// which shares its storage. One the caller gave away dies inside, and what it grew into with
/// it.
#[test]
fn an_owned_tensor_the_caller_shares_is_kept() {
    let x = floats(4);
    assert_eq!(kept(grow(x.shallow_clone(), 64)).kept, 256);
    assert_eq!(x.size(), [64]);
    assert_eq!(kept(grow(x.detach(), 100)).kept, 400);
    assert_eq!(x.size(), [64], "its own sizes; the storage grew");
    let y = floats(4);
    assert_eq!(kept(grow(y.view([2, 2]), 80)).kept, 320);
    // A view whose base the caller no longer holds dies with the argument.
    let alone = {
        let base = floats(4);
        base.view([2, 2])
    };
    kept_nothing(grow(alone, 64));
    // A quantized tensor's storage, shared with a `detach()`: read as plain bytes.
    let q = floats(4).quantize_per_tensor(0.1, 0, tch::Kind::QInt8);
    kept_nothing(look(q.detach()));
    assert_eq!(kept(grow_optional(Some(x.shallow_clone()), 128)).kept, 512);
    assert_eq!(x.size(), [128]);
    kept_nothing(grow(floats(4), 64));
    kept_nothing(grow_optional(Some(floats(4)), 64));
    kept_nothing(grow_optional(None, 64));
}

static STASH: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// Gives the argument new storage of `n` floats and stashes it; grows `alias`'s storage (the
/// argument's at the call) to `grow` floats first when asked.
#[gpu_scope(on_escape = error)]
fn replace_and_stash(mut x: Tensor, n: i64, grow: Option<i64>) -> Result<(), Error> {
    let mut alias = x.detach();
    x.set_data(&Tensor::zeros([n], (Kind::Float, x.device())));
    STASH.lock().unwrap().push(x);
    if let Some(grow) = grow {
        let _ = alias.resize_([grow]);
    }
    Ok(())
}

/// A caller holding a view or a `detach()` of an owned argument shares its storage, not the
/// argument's tensor object: storage the body then sets the argument to and stashes escaped
/// (it was called kept while the stash held the argument alive), and the shared storage the
/// body grows is the caller's, kept (it was called escaped).
#[test]
fn a_caller_holding_a_view_shares_the_storage_not_the_argument() {
    let base = floats(4);
    let stashed = |report: ScopeReport| {
        let stash = std::mem::take(&mut *STASH.lock().unwrap());
        assert_ne!(stash[0].data_ptr(), base.data_ptr(), "{report}");
        (report.kept, report.escaped_bytes)
    };
    for arg in [base.view([2, 2]), base.detach(), base.narrow(0, 0, 2)] {
        let report = escaped(replace_and_stash(arg, 64, None));
        assert_eq!(stashed(report), (0, 256));
    }
    let report = escaped(replace_and_stash(base.view([2, 2]), 16, Some(1000)));
    assert_eq!(base.size(), [4], "its own sizes; the storage grew");
    assert_eq!(stashed(report), (4000, 64));
    // The tensor itself shared (a shallow clone): what it holds at the end is the caller's.
    let report = kept(replace_and_stash(base.shallow_clone(), 32, None));
    assert_eq!((report.kept, base.size()), (128, vec![32]));
    STASH.lock().unwrap().clear();
}

/// Pushes a tensor into a cache it is given by value.
trait Push {
    fn push_one(&self, t: Tensor);
}

impl Push for Arc<Mutex<Vec<Tensor>>> {
    fn push_one(&self, t: Tensor) {
        self.lock().unwrap().push(t)
    }
}

impl Push for Rc<RefCell<Vec<Tensor>>> {
    fn push_one(&self, t: Tensor) {
        self.borrow_mut().push(t)
    }
}

impl<P: Push + ?Sized> Push for &P {
    fn push_one(&self, t: Tensor) {
        (**self).push_one(t)
    }
}

impl<P: Push + ?Sized> Push for Box<P> {
    fn push_one(&self, t: Tensor) {
        (**self).push_one(t)
    }
}

#[gpu_scope(on_escape = error)]
fn push_generic<C: Push + Tensors>(cache: C) -> Result<(), Error> {
    cache.push_one(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn push_impl(cache: impl Push + Tensors) -> Result<(), Error> {
    cache.push_one(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn grow_generic<T: Tensors + Into<Tensor>>(x: T, n: i64) -> Result<(), Error> {
    let _ = x.into().resize_([n]);
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn grow_generic_optional<T: Tensors + Into<Tensor>>(x: Option<T>, n: i64) -> Result<(), Error> {
    if let Some(x) = x {
        let _ = x.into().resize_([n]);
    }
    Ok(())
}

#[allow(clippy::redundant_allocation)] // a boxed handle, as written
#[gpu_scope(on_escape = error)]
fn push_boxed(cache: Box<Arc<Mutex<Vec<Tensor>>>>) -> Result<(), Error> {
    cache.push_one(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn grow_pinned<T: Tensors + std::ops::Deref<Target = Tensor>>(
    x: Pin<T>,
    n: i64,
) -> Result<(), Error> {
    let _ = x.shallow_clone().resize_([n]);
    Ok(())
}

/// A generic or `impl Trait` argument bound by `Tensors` is looked into at run time: an `Arc`,
/// `Rc` or `shallow_clone` the caller still shares is kept as when its type is written out,
/// and one the caller gave away still dies inside, with what the body stored in it.
#[test]
fn a_generic_owned_argument_the_caller_shares_is_kept() {
    let arc = Arc::new(Mutex::new(Vec::new()));
    assert_eq!(kept(push_generic(Arc::clone(&arc))).kept, 16);
    assert_eq!(kept(push_impl(Arc::clone(&arc))).kept, 16);
    let rc = Rc::new(RefCell::new(Vec::new()));
    assert_eq!(kept(push_generic(Rc::clone(&rc))).kept, 16);
    assert_eq!((arc.lock().unwrap().len(), rc.borrow().len()), (2, 1));
    let x = floats(4);
    assert_eq!(kept(grow_generic(x.shallow_clone(), 64)).kept, 256);
    assert_eq!(x.size(), [64]);
    assert_eq!(
        kept(grow_generic_optional(Some(x.shallow_clone()), 128)).kept,
        512
    );
    assert_eq!(x.size(), [128]);
    kept_nothing(grow_generic(floats(4), 64));
    kept_nothing(push_generic(Arc::new(Mutex::new(Vec::new()))));
    arc.lock().unwrap().clear();
    // Through a box, and a shared borrow (all of it the caller's, whatever it holds).
    assert_eq!(kept(push_generic(Box::new(Arc::clone(&arc)))).kept, 16);
    assert_eq!(kept(push_boxed(Box::new(Arc::clone(&arc)))).kept, 16);
    assert_eq!(kept(push_generic(&arc)).kept, 16);
    assert_eq!(kept(push_impl(&rc)).kept, 16);
    kept_nothing(push_generic(Box::new(Arc::new(Mutex::new(Vec::new())))));
    let pinned = Box::pin(x.shallow_clone());
    assert_eq!(kept(grow_pinned(pinned, 256)).kept, 1024);
    assert_eq!(
        (arc.lock().unwrap().len(), rc.borrow().len(), x.size()),
        (3, 2, vec![256])
    );
    kept_nothing(grow_generic_optional(Some(floats(4)), 64));
}

#[gpu_scope(on_escape = error)]
fn push_pinned(cache: Pin<Arc<Mutex<Vec<Tensor>>>>) -> Result<(), Error> {
    cache.lock().unwrap().push(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn push_pinned_rc(cache: Pin<Rc<RefCell<Vec<Tensor>>>>) -> Result<(), Error> {
    cache.borrow_mut().push(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn push_pinned_borrow(cache: Pin<&Mutex<Vec<Tensor>>>) -> Result<(), Error> {
    cache.lock().unwrap().push(floats(4));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn push_pinned_generic<C: Tensors + std::ops::Deref<Target = Mutex<Vec<Tensor>>>>(
    cache: Pin<C>,
) -> Result<(), Error> {
    cache.lock().unwrap().push(floats(4));
    Ok(())
}

#[derive(Tensors)]
struct PinnedCache(Mutex<Vec<Tensor>>);

impl PinnedCache {
    #[gpu_scope(on_escape = error)]
    fn push(self: Pin<Arc<Self>>) -> Result<(), Error> {
        self.0.lock().unwrap().push(floats(4));
        Ok(())
    }
}

#[test]
fn a_pinned_argument_keeps_what_its_pointer_shares() {
    let arc = Arc::pin(Mutex::new(Vec::new()));
    assert_eq!(kept(push_pinned(Pin::clone(&arc))).kept, 16);
    assert_eq!(kept(push_pinned_generic(Pin::clone(&arc))).kept, 16);
    assert_eq!(kept(push_pinned_borrow(arc.as_ref())).kept, 16);
    let rc = Rc::pin(RefCell::new(Vec::new()));
    assert_eq!(kept(push_pinned_rc(Pin::clone(&rc))).kept, 16);
    let cache = Arc::pin(PinnedCache(Mutex::new(Vec::new())));
    assert_eq!(kept(Pin::clone(&cache).push()).kept, 16);
    assert_eq!(
        (
            arc.lock().unwrap().len(),
            rc.borrow().len(),
            cache.0.lock().unwrap().len()
        ),
        (3, 1, 1)
    );
    // The only handle, given away: whatever the body left in it is its own, and dies.
    kept_nothing(push_pinned(Arc::pin(Mutex::new(Vec::new()))));
}

/// Allocates into `SINK` when dropped: a leak made by an argument's drop.
struct Recorder;

impl Drop for Recorder {
    fn drop(&mut self) {
        SINK.lock().unwrap().push(floats(9));
    }
}

struct Pair(u8, Recorder);

#[gpu_scope(on_escape = error)]
fn unused_owned(_rec: Recorder) -> Result<(), Error> {
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn wild_owned(_: Recorder) -> Result<(), Error> {
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn destructured_owned(Pair(n, _): Pair) -> Result<u8, Error> {
    Ok(n)
}

#[test]
fn an_owned_argument_dies_inside_the_scope_even_when_the_body_does_not_use_it() {
    let _serial = common::serial();
    type Call = fn() -> Result<(), Error>;
    let calls: [(&str, Call); 3] = [
        ("unused", || unused_owned(Recorder)),
        ("wild", || wild_owned(Recorder)),
        ("destructured", || {
            destructured_owned(Pair(1, Recorder)).map(drop)
        }),
    ];
    for (what, call) in calls {
        let err = call().expect_err(what);
        assert_eq!(err.report().unwrap().escaped_bytes, 36, "{what}: {err}");
        assert_eq!(SINK.lock().unwrap().len(), 1, "{what}");
        SINK.lock().unwrap().clear();
    }
}

#[gpu_scope(on_escape = panic)]
fn with_pair(pair: (&Tensor, &mut Vec<Tensor>)) {
    pair.1.push(pair.0 * 2);
}

/// A lifetime alone says nothing of a `&mut`: a leak beside such an argument is found.
#[gpu_scope(on_escape = error)]
fn with_name(name: std::borrow::Cow<'_, str>, leak: bool) -> Result<usize, Error> {
    if leak {
        SINK.lock().unwrap().push(floats(4));
    }
    Ok(name.len())
}

/// A context that lends the caller's cache: its `&mut` is hidden from the signature.
#[derive(Tensors)]
struct Ctx<'a> {
    cache: &'a mut Vec<Tensor>,
}

#[gpu_scope(on_escape = error)]
fn fill_ctx(ctx: Ctx<'_>, n: i64) -> Result<(), Error> {
    if n > 0 {
        ctx.cache.push(floats(n));
    }
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn head_through(p: nn::Path) -> Result<(), Error> {
    nn::linear(p / "head", 8, 4, Default::default());
    Ok(())
}

/// tch's usual signature, an owned `nn::Path` with its lifetime elided: what the body builds
/// through it grows the caller's store, unsearched; the hint names the argument.
#[test]
fn an_owned_nn_path_is_named_in_the_hint() {
    let _serial = common::serial();
    let vs = nn::VarStore::new(Device::Cpu);
    let err = head_through(vs.root()).unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.escaped_bytes, (8 * 4 + 4) * 4, "{err}");
    assert_eq!(report.lending_args, ["`p: nn::Path`"], "{err}");
    assert!(
        err.to_string()
            .contains("hint: owned argument(s) `p: nn::Path`"),
        "{err}"
    );
}

#[gpu_scope(on_escape = error)]
fn each_row(x: &Tensor, mut sink: impl FnMut(Tensor)) -> Result<(), Error> {
    for row in x.unbind(0) {
        sink(&row * 2);
    }
    Ok(())
}

/// An owned closure may capture the caller's `&mut`: what the body handed it is called
/// escaped, and the hint names the closure and what to pass instead.
#[test]
fn an_owned_closure_is_named_in_the_hint_of_an_escape() {
    let mut rows = Vec::new();
    let err = each_row(&floats(2).reshape([2, 1]), |t| rows.push(t)).unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.lending_args, ["`sink: impl FnMut(Tensor)`"]);
    assert!(
        err.to_string().contains("(`out: &mut Vec<Tensor>`)"),
        "{err}"
    );
    drop(rows);
    each_row(&floats(2).reshape([2, 1]), drop).unwrap();
}

#[gpu_scope(on_escape = error)]
fn gated(
    #[cfg(test)] out: &mut Vec<Tensor>,
    #[cfg(test)] mut grown: Tensor,
    #[cfg(not(test))] absent: &mut Vec<Tensor>,
    #[cfg(test)] (a, _b): (Tensor, Tensor),
    #[cfg(test)] more: Option<&mut Vec<Tensor>>,
) -> Result<(), Error> {
    #[cfg(not(test))]
    absent.push(floats(1));
    out.push(floats(4));
    let _ = grown.resize_([50]);
    if let Some(more) = more {
        more.push(&a + 1);
    }
    Ok(())
}

#[gpu_scope(on_escape = error)]
async fn gated_later(
    #[cfg(test)] out: &mut Vec<Tensor>,
    #[cfg(not(test))] absent: Tensor,
) -> Result<(), Error> {
    out.push(floats(4));
    Ok(())
}

/// An argument under `#[cfg]` is searched, or moved into the scope, where it exists.
#[test]
fn arguments_under_cfg_are_searched_where_they_exist() {
    let (mut out, mut more) = (Vec::new(), Vec::new());
    kept(gated(
        &mut out,
        floats(1),
        (floats(1), floats(1)),
        Some(&mut more),
    ));
    assert_eq!((out.len(), more.len()), (1, 1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    kept(runtime.block_on(gated_later(&mut out)));
    assert_eq!(out.len(), 2);
}

#[derive(Debug, Tensors)]
struct Caching {
    cache: Mutex<Vec<Tensor>>,
}

impl Module for Caching {
    fn forward(&self, x: &Tensor) -> Tensor {
        self.cache.lock().unwrap().push(floats(3));
        x * 2
    }
}

#[gpu_scope(on_escape = error)]
fn infer_dyn(model: &dyn Module, x: &Tensor) -> Result<Tensor, Error> {
    Ok(model.forward(x))
}

/// A trait object is not searched through a derive on the type behind it: the hint says what
/// is (a supertrait, or a generic argument with the bound).
#[test]
fn a_trait_object_argument_gets_its_own_hint() {
    let model = Caching {
        cache: Mutex::new(Vec::new()),
    };
    let err = infer_dyn(&model, &floats(2)).unwrap_err();
    let text = err.to_string();
    assert_eq!(err.report().unwrap().escaped_bytes, 12, "{text}");
    assert!(
        text.contains("a trait object (`dyn Trait`) is searched only where"),
        "{text}"
    );
}

/// What the body stores through an owned argument that borrows from the caller cannot be
/// searched: it is called escaped, and the report's hint names the argument and what to do.
#[test]
fn an_owned_argument_that_borrows_is_named_in_the_hint_of_an_escape() {
    let _serial = common::serial();
    let mut cache = Vec::new();
    let err = fill_ctx(Ctx { cache: &mut cache }, 4).unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.escaped_bytes, 16, "{err}");
    assert_eq!(report.lending_args, ["`ctx: Ctx<'_>`"]);
    let text = err.to_string();
    assert!(
        text.contains("hint: owned argument(s) `ctx: Ctx<'_>` may borrow from the caller")
            && text.contains("(`ctx: &mut Ctx`)"),
        "{text}"
    );
    // Shown only where something escaped; `Cow`, which borrows shared, is not named.
    cache.clear();
    fill_ctx(Ctx { cache: &mut cache }, 0).unwrap();
    let report = last_report().unwrap();
    assert_eq!(report.lending_args.len(), 1);
    assert!(!report.to_string().contains("hint"), "{report}");
    assert_eq!(with_name("ab".into(), false).unwrap(), 2);
    assert!(last_report().unwrap().lending_args.is_empty());
}

#[test]
fn an_owned_argument_holding_a_mut_borrow_is_named_not_inspected_not_escaped() {
    let _serial = common::serial();
    let mut cache = Vec::new();
    let x = floats(3);
    with_pair((&x, &mut cache));
    let report = last_report().unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert!(report.uninspected_kept[0].starts_with("`pair`"), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), 12, "{report}");
    assert_eq!(cache.len(), 1);
    assert_eq!(with_name("ab".into(), false).unwrap(), 2);
    assert!(last_report().unwrap().is_clean());
    let err = with_name("ab".into(), true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped_bytes, 16, "{err}");
    SINK.lock().unwrap().clear();
}

#[gpu_scope(on_escape = error)]
fn fill_generic<C: Tensors + AsMut<Vec<Tensor>>>(mut cache: C, n: i64) -> Result<(), Error> {
    cache.as_mut().push(floats(n));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn fill_impl(mut cache: impl Tensors + AsMut<Vec<Tensor>>, n: i64) -> Result<(), Error> {
    cache.as_mut().push(floats(n));
    Ok(())
}

/// A `&mut` hidden by a type alias: the signature shows no `&mut`.
type Lent<'a> = &'a mut Vec<Tensor>;

#[gpu_scope(on_escape = error)]
fn fill_alias(cache: Lent, n: i64) -> Result<(), Error> {
    cache.push(floats(n));
    Ok(())
}

/// A `&mut` passed for an owned generic argument bound by `Tensors` (or hidden by a type
/// alias) moves into the body and cannot be searched after it: named not inspected (by its
/// type), as a `&mut` written in an owned argument's type is, not a false escape; a leak
/// beside it is not inspected either. Passed owned, the value dies in the body as any owned
/// argument does.
#[test]
fn a_mut_borrow_passed_for_a_generic_argument_is_named_not_inspected() {
    let _serial = common::serial();
    let mut cache = Vec::new();
    fill_generic(&mut cache, 3).unwrap();
    fill_impl(&mut cache, 3).unwrap();
    let report = last_report().unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert_eq!(report.held_by(HeldBy::Uninspected), 12, "{report}");
    assert!(report.uninspected_kept[0].starts_with("&mut "), "{report}");
    assert!(report.uninspected_kept[0].contains("Vec<"), "{report}");
    assert!(report
        .to_string()
        .contains("a `&mut` passed for an owned generic argument"));
    fill_alias(&mut cache, 3).unwrap();
    assert_eq!(last_report().unwrap().held_by(HeldBy::Uninspected), 12);
    assert_eq!(cache.len(), 3);
    // Passed owned, it dies in the body.
    fill_generic(Vec::new(), 3).unwrap();
    assert!(last_report().unwrap().is_clean());
}

#[gpu_scope(on_escape = error)]
fn fill_cells(cells: Vec<&RefCell<Vec<Tensor>>>, n: i64) -> Result<(), Error> {
    cells[0].borrow_mut().push(floats(n));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn fill_guard(mut guard: std::cell::RefMut<Vec<Tensor>>, n: i64) -> Result<(), Error> {
    guard.push(floats(n));
    Ok(())
}

#[gpu_scope(on_escape = error)]
fn read_all(xs: Vec<&Tensor>, leak: bool) -> Result<usize, Error> {
    if leak {
        SINK.lock().unwrap().push(floats(1));
    }
    Ok(xs.len())
}

/// An owned argument that reaches the caller's data through a shared borrow of a cell, or a
/// guard written without its lifetime, dies in the body unsearched: what the body stored
/// through it is called escaped, and the hint names it. A shared borrow of a tensor holds
/// nothing the body could store into: not named.
#[test]
fn owned_arguments_reaching_a_cell_are_named_in_the_hint() {
    let _serial = common::serial();
    let cell = RefCell::new(Vec::new());
    let err = fill_cells(vec![&cell], 2).unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.escaped_bytes, 8, "{err}");
    assert_eq!(report.lending_args, ["`cells: Vec<&RefCell<Vec<Tensor>>>`"]);
    let err = fill_guard(cell.borrow_mut(), 2).unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(
        report.lending_args,
        ["`guard: std::cell::RefMut<Vec<Tensor>>`"]
    );
    cell.borrow_mut().clear();
    let x = floats(2);
    let err = read_all(vec![&x], true).unwrap_err();
    assert!(err.report().unwrap().lending_args.is_empty(), "{err}");
    SINK.lock().unwrap().clear();
}

struct Weights {
    w: Tensor,
}

impl Weights {
    /// The returned borrow is of `self` (lifetime elision): `cache` is searched.
    #[gpu_scope(on_escape = error)]
    fn weight(&self, cache: &mut Vec<Tensor>, leak: bool) -> Result<&Tensor, Error> {
        fill_weights_cache(cache, leak);
        Ok(&self.w)
    }

    /// A pinned receiver lends the elided return lifetime as `&self` does.
    #[gpu_scope(on_escape = error)]
    fn pinned_weight(
        self: Pin<&Self>,
        cache: &mut Vec<Tensor>,
        leak: bool,
    ) -> Result<&Tensor, Error> {
        fill_weights_cache(cache, leak);
        Ok(&self.get_ref().w)
    }

    #[gpu_scope(on_escape = error)]
    fn pinned_mut_weight(
        self: Pin<&mut Self>,
        cache: &mut Vec<Tensor>,
        leak: bool,
    ) -> Result<&Tensor, Error> {
        fill_weights_cache(cache, leak);
        Ok(&self.get_mut().w)
    }
}

/// What the scoped methods above do: 8 bytes kept in `cache`, and 20 leaked if asked.
fn fill_weights_cache(cache: &mut Vec<Tensor>, leak: bool) {
    cache.push(floats(2));
    if leak {
        SINK.lock().unwrap().push(floats(5));
    }
}

#[gpu_scope(on_escape = error)]
fn double_all(xs: &mut Vec<Tensor>) -> Result<(), Error> {
    for t in xs {
        *t = &*t * 2;
    }
    Ok(())
}

#[test]
fn a_mut_argument_the_elided_return_lifetime_cannot_borrow_is_searched() {
    let _serial = common::serial();
    let weights = Weights { w: floats(1) };
    let mut cache = Vec::new();
    assert_eq!(weights.weight(&mut cache, false).unwrap().size(), [1]);
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.uninspected_kept.is_empty(), "{report}");
    assert_eq!(report.kept, 8, "{report}");
    let err = weights.weight(&mut cache, true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped_bytes, 20, "{err}");
    SINK.lock().unwrap().clear();
    // A body that moves a `&mut` argument (`for t in xs`) gets a reborrow of it.
    kept(double_all(&mut cache));
    assert_eq!(cache.len(), 2);
    let mut weights = weights;
    for leak in [false, true] {
        let before = cache.len();
        let shared = Pin::new(&weights)
            .pinned_weight(&mut cache, leak)
            .map(|w| w.size());
        let report = last_report().unwrap();
        assert_eq!(shared.is_err(), leak, "{report}");
        assert!(report.uninspected_kept.is_empty(), "{report}");
        assert_eq!(report.escaped_bytes, if leak { 20 } else { 0 }, "{report}");
        let unique = Pin::new(&mut weights)
            .pinned_mut_weight(&mut cache, leak)
            .map(|w| w.size());
        // `self` holds the returned `&mut` borrow and is not searched; `cache` is.
        let report = last_report().unwrap();
        assert!(unique.is_ok(), "{report}");
        assert_eq!(report.kept, 8, "{report}");
        assert!(
            !report.uninspected_kept.concat().contains("cache"),
            "{report}"
        );
        assert_eq!(cache.len(), before + 2);
        SINK.lock().unwrap().clear();
    }
}

/// Holds a borrow that a scoped function hands on.
#[derive(Default)]
struct Holder<'a> {
    lent: Option<&'a mut Vec<Tensor>>,
}

/// The body stores `xs` in `holder` for `'a`: `xs` cannot be searched after it (it compiles,
/// as without the attribute), and is named as not inspected.
#[gpu_scope]
fn lend<'a>(holder: &mut Holder<'a>, xs: &'a mut Vec<Tensor>) {
    xs.push(floats(2));
    holder.lent = Some(xs);
}

/// `'a` names only the arguments' own references: `xs` cannot be stored under it, and is
/// searched.
#[gpu_scope]
fn fill_with<'a>(xs: &'a mut Vec<Tensor>, like: &'a Tensor) {
    xs.push(like.copy());
}

struct Lender<'a> {
    lent: Vec<&'a mut Vec<Tensor>>,
}

impl<'a> Lender<'a> {
    /// `'a` is the `impl`'s: `Self` may hold it.
    #[gpu_scope]
    fn take(&mut self, xs: &'a mut Vec<Tensor>) {
        xs.push(floats(1));
        self.lent.push(xs);
    }
}

#[test]
fn a_mut_argument_the_body_may_store_for_its_named_lifetime_is_named_not_inspected() {
    let _serial = common::serial();
    let mut xs = Vec::new();
    let mut holder = Holder::default();
    lend(&mut holder, &mut xs);
    let report = last_report().unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert!(report.uninspected_kept[0].starts_with("`xs`"), "{report}");
    assert_eq!(holder.lent.map(|l| l.len()), Some(1));
    let mut ys = Vec::new();
    let mut lender = Lender { lent: Vec::new() };
    lender.take(&mut ys);
    let report = last_report().unwrap();
    assert!(report.uninspected_kept[0].starts_with("`xs`"), "{report}");
    assert_eq!(lender.lent.len(), 1);
    let mut zs = Vec::new();
    fill_with(&mut zs, &floats(3));
    let report = last_report().unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, 12, "{report}");
}

#[derive(Tensors, Default)]
struct Counter {
    n: usize,
    made: Vec<Tensor>,
}

impl Counter {
    fn bump(self: Pin<&mut Self>) {
        let this = self.get_mut();
        this.n += 1;
        this.made.push(floats(1));
    }

    /// `mut self` lets the body reborrow the pin (`self.as_mut()`), as without the attribute.
    #[gpu_scope(on_escape = error)]
    fn twice(mut self: Pin<&mut Self>) -> Result<(), Error> {
        self.as_mut().bump();
        self.as_mut().bump();
        Ok(())
    }

    /// `self` in a format string cannot be renamed: the receiver is used as written, and
    /// named as not inspected.
    #[gpu_scope(on_escape = error)]
    fn shown(self: Pin<&mut Self>) -> Result<String, Error> {
        let said = format!("{self:p}");
        self.bump();
        Ok(said)
    }
}

type Makes<F> = std::marker::PhantomData<F>;

/// Returns (the types of) functions that make futures: not a future itself. (The return type
/// is written out: the macro reads `Future` in it.)
#[gpu_scope]
#[allow(clippy::type_complexity)]
fn maker() -> (
    Makes<Box<dyn Fn() -> Pin<Box<dyn std::future::Future<Output = usize>>>>>,
    Makes<fn() -> Pin<Box<dyn std::future::Future<Output = usize>>>>,
) {
    Default::default()
}

#[test]
fn pinned_receivers_as_written_and_functions_that_make_futures() {
    let _serial = common::serial();
    let mut counter = Counter::default();
    Pin::new(&mut counter).twice().unwrap();
    let report = last_report().unwrap();
    assert!(report.is_clean() && report.kept == 8, "{report}");
    assert_eq!((counter.n, counter.made.len()), (2, 2));
    assert!(!Pin::new(&mut counter).shown().unwrap().is_empty());
    let report = last_report().unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert!(report.uninspected_kept[0].starts_with("`self`"), "{report}");
    assert_eq!(counter.n, 3);
    let _ = maker();
    assert!(last_report().unwrap().is_clean());
}

/// A model whose layers a `&mut` borrow iterates.
#[derive(Default, gpu_scope::Tensors)]
struct Layers {
    ts: Vec<Tensor>,
}

impl<'a> IntoIterator for &'a mut Layers {
    type Item = &'a mut Tensor;
    type IntoIter = std::slice::IterMut<'a, Tensor>;
    fn into_iter(self) -> Self::IntoIter {
        self.ts.iter_mut()
    }
}

impl Layers {
    /// Grows `self`, then moves it (`for t in self`): compiles as without the attribute, and
    /// what it grew is searched after the body.
    #[gpu_scope(on_escape = error)]
    fn double_then_grow(&mut self, leak: bool) -> Result<usize, Error> {
        self.ts.push(floats(3));
        if leak {
            SINK.lock().unwrap().push(floats(5));
        }
        let mut n = 0;
        for t in self {
            *t = &*t * 2;
            n += 1;
        }
        Ok(n)
    }

    /// `mut self: &mut Self`: the body's reborrow is as mutable as the receiver.
    #[allow(clippy::needless_arbitrary_self_type)]
    #[gpu_scope(on_escape = error)]
    async fn grow_later(mut self: &mut Self) -> Result<(), Error> {
        tokio::task::yield_now().await;
        let this = self;
        this.ts.push(floats(2));
        self = this;
        let _ = &self;
        Ok(())
    }
}

macro_rules! items {
    ($($item:item)*) => { $($item)* };
}

impl Layers {
    /// A macro call in the body that makes an item with a `self` of its own: that `self` is
    /// left as it is (the body's is renamed).
    #[gpu_scope(on_escape = error)]
    fn count_through_an_item(&mut self) -> Result<usize, Error> {
        items! {
            struct Count(usize);
            impl Count {
                fn get(&self) -> usize {
                    self.0
                }
            }
        }
        self.ts.push(floats(2));
        Ok(Count(self.ts.len()).get())
    }
}

#[test]
fn a_macro_item_in_a_mut_self_body_keeps_its_own_self() {
    let _serial = common::serial();
    let mut layers = Layers::default();
    assert_eq!(layers.count_through_an_item().unwrap(), 1);
    assert_eq!(last_report().unwrap().kept, 8);
}

#[test]
fn a_mut_self_the_body_moves_is_searched_after_it() {
    let _serial = common::serial();
    let mut layers = Layers::default();
    layers.ts.push(floats(1));
    assert_eq!(layers.double_then_grow(false).unwrap(), 2);
    let report = last_report().unwrap();
    assert_eq!((report.kept, layers.ts.len()), (4 + 12, 2), "{report}");
    let err = layers.double_then_grow(true).unwrap_err();
    assert_eq!(err.report().unwrap().escaped_bytes, 20, "{err}");
    SINK.lock().unwrap().clear();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(layers.grow_later()).unwrap();
    assert_eq!(last_report().unwrap().kept, 8);
    assert_eq!(layers.ts.len(), 4);
}

trait Fill {
    fn put(&mut self, t: Tensor);

    #[gpu_scope(on_escape = error)]
    fn fill_unbounded(&mut self) -> Result<(), Error> {
        self.put(floats(4));
        Ok(())
    }
}

trait FillBounded
where
    Self: Tensors,
{
    fn put_bounded(&mut self, t: Tensor);

    #[gpu_scope(on_escape = error)]
    fn fill_bounded(&mut self) -> Result<(), Error> {
        self.put_bounded(floats(4));
        Ok(())
    }
}

impl Fill for Wrap {
    fn put(&mut self, t: Tensor) {
        self.0.push(t)
    }
}

impl FillBounded for Wrap {
    fn put_bounded(&mut self, t: Tensor) {
        self.0.push(t)
    }
}

/// In a trait's default method `Self` is generic: its receiver is searched only under
/// `Self: Tensors` (a type that derives it is not enough), and the hint says so.
#[test]
fn a_default_methods_receiver_is_searched_under_the_self_bound() {
    let mut wrap = Wrap::default();
    let err = wrap.fill_unbounded().unwrap_err();
    let r = err.report().unwrap();
    assert_eq!(r.opaque_kept.len(), 1, "{r}");
    assert!(
        r.to_string()
            .contains("(`Self: gpu_scope::Tensors` for a receiver;"),
        "{r}"
    );
    kept(wrap.fill_bounded());
    assert_eq!(wrap.0.len(), 2);
}

#[derive(Tensors, Default)]
struct Generic<T>(Vec<Tensor>, T);

#[derive(Default)]
struct Plain;

#[gpu_scope(on_escape = error)]
fn fill_wrapped(g: &mut Generic<Plain>) -> Result<(), Error> {
    g.0.push(floats(4));
    Ok(())
}

/// A derived generic type has `Tensors` only where its type arguments do: the hint says so.
#[test]
fn a_derived_type_over_one_without_tensors_is_named_with_the_fix() {
    let err = fill_wrapped(&mut Generic::default()).unwrap_err();
    let r = err.report().unwrap();
    assert!(r.opaque_kept[0].contains("Generic<"), "{r}");
    assert!(
        r.to_string()
            .contains("and to the types it is generic over"),
        "{r}"
    );
}
