//! `#[derive(Tensors)]` on structs and enums.
mod common;
use common::{floats, strict};
use gpu_scope::{scope, StorageSet, Tensors};
use std::marker;
use tch::nn::{self, Module};
use tch::{Device, Tensor};

#[derive(Tensors)]
struct Named {
    a: Tensor,
    b: Vec<Tensor>,
    #[tensors(skip)]
    label: std::rc::Rc<str>,
}

#[derive(Tensors)]
struct Tuple(Tensor, Option<Tensor>);

#[derive(Tensors)]
struct Unit;

#[derive(Tensors)]
struct Generic<T> {
    inner: T,
}

#[derive(Tensors)]
struct Flags {
    a: Tensor,
    #[tensors(skip = true)]
    b: Tensor,
    #[tensors(skip = false)]
    c: Tensor,
}

/// A variant marked `skip` holds nothing the scope should keep (here: a cache it may drop).
#[derive(Tensors)]
enum Slot {
    #[tensors(skip)]
    Stale(Tensor),
    Live(Tensor),
}

#[derive(Tensors)]
enum Either {
    One(Tensor),
    Two { x: Tensor, y: Tensor },
    Nothing,
}

#[derive(Debug, Tensors)]
struct Mlp {
    l1: nn::Linear,
    l2: nn::Linear,
    norm: nn::LayerNorm,
}

fn count<T: Tensors>(v: &T) -> usize {
    let mut s = StorageSet::new();
    v.visit(&mut s);
    s.len()
}

#[test]
fn fields_are_found_and_skips_skipped() {
    let n = Named {
        a: floats(1),
        b: vec![floats(1), floats(1)],
        label: "x".into(),
    };
    assert_eq!(count(&n), 3);
    assert_eq!(&*n.label, "x");
    assert_eq!(count(&Tuple(floats(1), None)), 1);
    assert_eq!(count(&Unit), 0);
    assert_eq!(
        count(&Generic {
            inner: (floats(1), floats(1))
        }),
        2
    );
    assert_eq!(
        count(&Either::Two {
            x: floats(1),
            y: floats(1)
        }),
        2
    );
    assert_eq!(count(&Either::One(floats(1))), 1);
    assert_eq!(count(&Either::Nothing), 0);
}

#[test]
fn skip_takes_a_bool_and_goes_on_variants() {
    let flags = Flags {
        a: floats(1),
        b: floats(1),
        c: floats(1),
    };
    assert_eq!(count(&flags), 2);
    assert_eq!(flags.b.size(), [1]);
    let stale = Slot::Stale(floats(1));
    assert_eq!(count(&stale), 0);
    assert!(matches!(stale, Slot::Stale(t) if t.size() == [1]));
    assert_eq!(count(&Slot::Live(floats(1))), 1);
}

#[test]
fn a_model_of_nn_layers_is_kept() {
    let (model, report) = scope(strict("model"), || {
        let vs = nn::VarStore::new(Device::Cpu);
        let p = vs.root();
        Mlp {
            l1: nn::linear(&p / "l1", 8, 8, Default::default()),
            l2: nn::linear(&p / "l2", 8, 2, Default::default()),
            norm: nn::layer_norm(&p / "norm", vec![8], Default::default()),
        }
    })
    .unwrap();
    assert_eq!(report.kept, 4 * (64 + 8 + 16 + 2 + 8 + 8));
    let x = Tensor::ones([1, 8], (tch::Kind::Float, Device::Cpu));
    assert_eq!(
        model
            .l2
            .forward(&model.norm.forward(&model.l1.forward(&x)))
            .size(),
        [1, 2]
    );
}

/// A type parameter that only skipped fields (or a skipped variant) use needs no `Tensors`.
#[derive(Tensors)]
struct Tagged<T, M> {
    t: T,
    #[tensors(skip)]
    meta: M,
}

#[derive(Tensors)]
enum Cached<T, K> {
    Hit(T),
    #[tensors(skip)]
    Miss(K),
}

#[test]
fn parameters_only_skipped_fields_use_are_not_bounded() {
    let file = std::fs::File::open(file!()).unwrap();
    let tagged = Tagged {
        t: floats(1),
        meta: file,
    };
    assert_eq!(count(&tagged), 1);
    assert!(tagged.meta.metadata().is_ok());
    assert_eq!(count(&Cached::<Tensor, std::fs::File>::Hit(floats(1))), 1);
    let miss = Cached::<Tensor, std::fs::File>::Miss(std::fs::File::open(file!()).unwrap());
    assert_eq!(count(&miss), 0);
}

macro_rules! list {
    ($t:ty) => { Vec<$t> };
}

/// A field whose type is a macro call: its parameters are bounded (the derive cannot read it).
#[derive(Tensors)]
struct ByMacro<T> {
    items: list!(T),
}

#[test]
fn a_field_typed_by_a_macro_is_visited() {
    assert_eq!(
        count(&ByMacro {
            items: vec![floats(1), floats(1)]
        }),
        2
    );
}

/// A `PhantomData` field holds nothing: the derive skips it, and asks nothing of the type
/// parameter it names (`Typed<Meters>` with `Meters` not `Tensors`), however it is spelled.
#[derive(Tensors)]
struct Typed<U> {
    value: Tensor,
    unit: std::marker::PhantomData<U>,
    tag: marker::PhantomData<U>,
}

struct Meters;

#[test]
fn a_phantom_data_field_holds_nothing_and_bounds_nothing() {
    let (typed, report) = scope(strict("phantom"), || Typed::<Meters> {
        value: floats(4),
        unit: std::marker::PhantomData,
        tag: marker::PhantomData,
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, common::block(16), "{report}");
    drop(typed.value);
}

mod user {
    /// A type of the user's that happens to be called `PhantomData`, and holds a tensor.
    #[derive(gpu_scope::Tensors)]
    pub struct PhantomData(pub tch::Tensor);
}

#[derive(Tensors)]
struct Holder {
    inner: user::PhantomData,
}

#[test]
fn only_the_standard_phantom_data_is_skipped() {
    let (holder, report) = scope(strict("not phantom"), || Holder {
        inner: user::PhantomData(floats(8)),
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kept, common::block(32), "{report}");
    drop(holder.inner.0);
}

/// A field typed by an associated type bounds that type, not the parameter (`B::Weight:
/// Tensors`, also written `<B as Backend>::Weight`, not `B: Tensors`), and a map's key type
/// needs nothing: the derive asks what the
/// fields need.
trait Backend {
    type Weight;
}

struct Tch;

impl Backend for Tch {
    type Weight = Tensor;
}

#[derive(Tensors)]
struct Layer<B: Backend> {
    w: B::Weight,
    qualified: <B as Backend>::Weight,
}

#[derive(Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u32);

#[derive(Tensors)]
struct Cache<K: std::hash::Hash + Eq + Ord, S = std::hash::RandomState> {
    by_hash: std::collections::HashMap<K, Tensor, S>,
    in_order: std::collections::BTreeMap<K, Vec<Tensor>>,
    by_module: std::collections::btree_map::BTreeMap<K, Tensor>,
}

/// What else the std impls do not search needs nothing: a `Result`'s error type, a
/// `HashSet`'s hasher, a `PhantomData` inside another type; a `std::cell::Cell` needs what
/// its impl does (`Cell<C>: Tensors`, that is `C: Copy`), which the struct need not write.
/// A bare `Cell` is taken for a type of one's own (an RNN's cell), whose parameters are bounded.
#[derive(Tensors)]
struct Unsearched<E, S, C, U> {
    outcome: Result<Tensor, E>,
    handles: std::collections::HashSet<u64, S>,
    counter: std::cell::Cell<C>,
    units: Vec<std::marker::PhantomData<U>>,
}

mod rnn {
    /// A type of one's own named `Cell`, holding tensors.
    #[derive(gpu_scope::Tensors)]
    pub struct Cell<T> {
        pub w: T,
    }
}
use rnn::Cell;

#[derive(Tensors)]
struct Rnn<T> {
    cell: Cell<T>,
}

/// `Copy`, without `Tensors`.
#[derive(Clone, Copy)]
struct Stride(#[allow(dead_code)] u8);

#[test]
fn associated_types_and_map_keys_are_bounded_as_the_fields_need() {
    let (layer, report) = scope(strict("associated"), || Layer::<Tch> {
        w: floats(4),
        qualified: floats(4),
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(count(&layer), 2);
    let (cache, report) = scope(strict("keys"), || Cache::<Key> {
        by_hash: [(Key(1), floats(2))].into(),
        in_order: [(Key(2), vec![floats(2), floats(2)])].into(),
        by_module: [(Key(3), floats(2))].into(),
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(count(&cache), 4);
    // None of `Meters` (no `Tensors`) is searched: the `Ok` tensor is, the `Err` is not.
    type Loose = Unsearched<Meters, std::hash::RandomState, Stride, Meters>;
    let (loose, report) = scope(strict("unsearched"), || Loose {
        outcome: Ok(floats(4)),
        handles: Default::default(),
        counter: std::cell::Cell::new(Stride(1)),
        units: vec![std::marker::PhantomData],
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(count(&loose), 1);
    let (rnn, report) = scope(strict("own cell"), || Rnn {
        cell: Cell { w: floats(4) },
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(count(&rnn), 1);
}

/// The std types a model's struct holds beside its tensors (sets, cells, atomics, ranges,
/// numbers, a condition variable, C strings, layer configurations) derive without
/// `#[tensors(skip)]`.
#[derive(Tensors)]
struct Bookkeeping {
    seen: std::collections::HashSet<u64>,
    ordered: std::collections::BTreeSet<String>,
    steps: std::cell::Cell<u32>,
    calls: std::sync::atomic::AtomicUsize,
    window: std::ops::Range<usize>,
    span: std::ops::RangeInclusive<i64>,
    batch: std::num::NonZeroUsize,
    linear: nn::LinearConfig,
    conv: nn::ConvConfig,
    rnn: nn::RNNConfig,
    padding: nn::PaddingMode,
    gain: nn::init::NonLinearity,
    from: std::ops::RangeFrom<usize>,
    to: std::ops::RangeTo<usize>,
    to_inclusive: std::ops::RangeToInclusive<usize>,
    all: std::ops::RangeFull,
    wrapping: std::num::Wrapping<u32>,
    saturating: std::num::Saturating<u32>,
    ready: std::sync::Condvar,
    tag: std::ffi::CString,
    weights: Vec<Tensor>,
}

#[test]
fn std_bookkeeping_types_hold_nothing() {
    let (book, report) = scope(strict("bookkeeping"), || Bookkeeping {
        seen: [1, 2].into(),
        ordered: ["a".to_owned()].into(),
        steps: std::cell::Cell::new(3),
        calls: 4.into(),
        window: 0..8,
        span: -1..=1,
        batch: std::num::NonZeroUsize::new(8).unwrap(),
        linear: Default::default(),
        conv: Default::default(),
        rnn: Default::default(),
        padding: nn::PaddingMode::Zeros,
        gain: nn::init::NonLinearity::ReLU,
        from: 1..,
        to: ..2,
        to_inclusive: ..=2,
        all: ..,
        wrapping: std::num::Wrapping(1),
        saturating: std::num::Saturating(1),
        ready: std::sync::Condvar::new(),
        tag: c"layer".to_owned(),
        weights: vec![floats(2)],
    })
    .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(count(&book), 1);
}

/// A node of a singly linked list, unlinked one node at a time when dropped (the derived
/// drop of a long list would itself overflow a small stack).
#[derive(Tensors)]
struct Link {
    value: Tensor,
    next: Option<Box<Link>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(mut link) = next {
            next = link.next.take();
        }
    }
}

/// Each level of a derived type is visited on a stack grown as needed: a list far longer than
/// a small thread stack holds frames for is kept whole (it overflowed before).
#[test]
fn a_long_list_of_derived_nodes_is_kept_on_a_small_stack() {
    const NODES: u64 = 20_000;
    let kept = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let (_list, report) = scope(strict("list"), || {
                let mut head: Option<Box<Link>> = None;
                for _ in 0..NODES {
                    let value = floats(1);
                    head = Some(Box::new(Link { value, next: head }));
                }
                head
            })
            .unwrap();
            common::on(&report).kept
        })
        .unwrap()
        .join()
        .expect("the visit does not overflow the thread's stack");
    assert_eq!(kept, NODES * common::block(4));
}

/// A layer kept as a trait object: with `Tensors` a supertrait of its trait, a `dyn` value
/// is searched through the concrete type's impl (the compile error's note says so).
trait DynLayer: Module + Tensors {}

#[derive(Debug, Tensors)]
struct Scale(Tensor);

impl Module for Scale {
    fn forward(&self, x: &Tensor) -> Tensor {
        x * &self.0
    }
}

impl DynLayer for Scale {}

#[derive(Tensors)]
struct Stack {
    layers: Vec<Box<dyn DynLayer>>,
}

#[test]
fn a_dyn_layer_whose_trait_has_tensors_is_kept() {
    let (stack, r) = scope(strict("dyn layers"), || Stack {
        layers: vec![Box::new(Scale(floats(3))), Box::new(Scale(floats(5)))],
    })
    .unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.kept, common::block(3 * 4) + common::block(5 * 4), "{r}");
    assert_eq!(stack.layers[1].forward(&floats(5)).size(), [5]);
}
