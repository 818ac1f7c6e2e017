//! What a scope hands back is never reported as escaped.
mod common;
use common::{block, device, floats, on, strict};
use gpu_scope::{keep, scope, EscapePolicy, HeldBy, Scope};
use std::collections::VecDeque;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

fn clean<T>(
    result: Result<(T, gpu_scope::ScopeReport), gpu_scope::Error>,
) -> (T, gpu_scope::ScopeReport) {
    let (value, report) = result.unwrap();
    assert!(report.is_clean(), "{report}");
    (value, report)
}

#[test]
fn returned_tensor() {
    let (_t, report) = clean(scope(strict("ret"), || floats(10)));
    assert_eq!(on(&report).kept, block(40));
    assert_eq!(on(&report).allocated, block(40));
}

#[test]
fn returned_containers() {
    let (_v, report) = clean(scope(strict("tuple"), || {
        (
            floats(1),
            vec![floats(2), floats(3)],
            Some(floats(4)),
            [floats(5)],
        )
    }));
    let expected: u64 = [4, 8, 12, 16, 20].into_iter().map(block).sum();
    assert_eq!(on(&report).kept, expected);
}

#[test]
fn kept_by_hand() {
    let mut outer = Vec::new();
    let (_, report) = clean(scope(strict("keep"), || {
        let t = floats(25);
        keep(&t);
        outer.push(t);
        drop(floats(1000));
    }));
    assert_eq!(on(&report).kept, block(100));
    assert_eq!(on(&report).freed, block(4000));
}

#[test]
fn growing_mut_argument_is_a_root() {
    let mut cache: Vec<Tensor> = Vec::new();
    for step in 1..=3 {
        let guard = Scope::enter(strict("kv-cache")).unwrap();
        cache.push(floats(8));
        let report = guard.exit(&cache).unwrap();
        assert_eq!(
            on(&report).kept,
            block(32),
            "step {step}: only this step's block is new"
        );
    }
    assert_eq!(cache.len(), 3);
}

#[test]
fn views_and_in_place_ops_on_outer_tensors() {
    let mut outer = floats(100);
    let (_, report) = clean(scope(strict("views"), || {
        let _ = outer.narrow(0, 0, 10).shallow_clone();
        let _ = outer.f_add_(&floats(100)).unwrap();
        let _ = outer.view([10, 10]);
    }));
    assert_eq!(
        on(&report).allocated,
        block(400),
        "only the temporary operand is new: {report}"
    );
    assert_eq!(on(&report).freed, block(400));
}

/// A view keeps its base tensor alive, and so the storage the base was given after the view
/// was taken (`set_data`, `set_`, a `VarStore` turned to half precision): handed back, the view
/// keeps that storage too.
#[test]
fn a_view_keeps_the_storage_its_base_was_given_since() {
    let _ = clean(scope(strict("set_data"), || {
        let mut base = floats(100);
        let view = base.narrow(0, 0, 10);
        base.set_data(&floats(60));
        view
    }));
    let _ = clean(scope(strict("set_"), || {
        let mut base = floats(100);
        let view = base.narrow(0, 0, 10);
        let _ = base.set_source_tensor_(&floats(50));
        view
    }));
    // The view itself given another storage: its base's stays alive through it.
    let _ = clean(scope(strict("view set_"), || {
        let mut view = floats(100).narrow(0, 0, 10);
        let _ = view.set_source_tensor_(&floats(50));
        view
    }));
    let (_, report) = clean(scope(strict("half"), || {
        let mut vs = nn::VarStore::new(device());
        let linear = nn::linear(vs.root() / "l", 16, 8, Default::default());
        let transposed = linear.ws.tr();
        vs.half();
        transposed
    }));
    // The view's own storage (the float weight) and its base's new one (the half weight).
    assert_eq!(
        on(&report).kept,
        block(8 * 16 * 4) + block(8 * 16 * 2),
        "{report}"
    );
}

#[test]
fn outer_tensor_dropped_inside() {
    let outer = floats(10);
    let (_, report) = clean(scope(strict("drop-outer"), move || drop(outer)));
    assert_eq!(report.allocated, 0);
}

#[test]
fn var_store_built_inside_and_returned() {
    let ((vs, model), report) = clean(scope(strict("varstore"), || {
        let vs = nn::VarStore::new(device());
        let model = nn::linear(vs.root(), 16, 4, Default::default());
        let _ = model.forward(&Tensor::ones([2, 16], (tch::Kind::Float, device())));
        (vs, model)
    }));
    assert_eq!(on(&report).kept, block(4 * 16 * 4) + block(4 * 4));
    assert_eq!(vs.variables().len(), 2);
    drop(model);
}

#[test]
fn thousands_of_temporaries() {
    let (_sum, report) = clean(scope(strict("loop"), || {
        let mut acc = floats(16);
        for _ in 0..5000 {
            acc = &acc + &floats(16);
        }
        acc
    }));
    let r = on(&report);
    assert_eq!(r.kept, block(64));
    assert_eq!(r.allocated - r.freed, block(64));
    assert!(r.allocations >= 10_000);
}

/// A scope that hands back thousands of blocks (more than a frame settles one by one) names
/// exactly those it did not (largest first, as every report does), and what it handed back stays
/// usable.
#[test]
fn thousands_kept_beside_a_few_escapes() {
    let mut stash = Vec::new();
    let options = strict("many").on_escape(EscapePolicy::Ignore);
    let (kept, report) = scope(options, || {
        let mut kept = Vec::new();
        for i in 0..6000 {
            kept.push(floats(4));
            if i % 2000 == 0 {
                stash.push(floats(i + 1));
            }
        }
        kept
    })
    .unwrap();
    let sizes: Vec<u64> = report.escaped.iter().map(|e| e.bytes).collect();
    assert_eq!(sizes, [block(16004), block(8004), block(4)], "{report}");
    assert_eq!(on(&report).kept, 6000 * block(16), "{report}");
    let sums = || -> f64 {
        kept.iter()
            .map(|t| (t + 1.0).sum(tch::Kind::Float).double_value(&[]))
            .sum()
    };
    let (total, _) = clean(scope(strict("again"), sums));
    assert_eq!(total, 6000.0 * 4.0);
}

/// A long run of kept tensors (a `Vec`, a `VecDeque` wrapped around its buffer) is read in
/// batches: each kind of tensor anywhere in it is searched as one alone is, in batches whose
/// storages overflow their buffer too (sparse tensors own two or three), and a graph deep in
/// the run still holds what it saved.
#[test]
fn a_long_run_of_kept_tensors_of_every_kind() {
    let w = Tensor::randn([8, 8], (Kind::Float, device())).set_requires_grad(true);
    let x = Tensor::randn([4, 8], (Kind::Float, device()));
    let sparse = |csr| {
        let eye = Tensor::eye(4, (Kind::Float, Device::Cpu));
        match csr {
            true => eye.to_sparse_csr(None),
            false => eye.to_sparse_sparse_dim(2),
        }
    };
    // 1 200 tensors, the one at `graph` with a graph that saved a 4x8 tensor.
    let run = |graph| {
        let mut run = VecDeque::new();
        for i in 0..1200 {
            let t = match i % 4 {
                0 if Some(i) == graph => x.matmul(&w).tanh().sum(Kind::Float),
                0 => floats(4),
                1 => sparse(false),
                _ => sparse(true),
            };
            match i % 2 {
                0 => run.push_back(t),
                _ => run.push_front(t),
            }
        }
        let (front, back) = run.as_slices();
        assert!(!front.is_empty() && !back.is_empty());
        run
    };
    let mut stash = Vec::new();
    let options = strict("run").on_escape(EscapePolicy::Ignore);
    let (kept, report) = scope(options, || {
        (0..3).for_each(|i| stash.push(floats(100 * i + 7)));
        run(None)
    })
    .unwrap();
    let sizes: Vec<u64> = report.escaped.iter().map(|e| e.bytes).collect();
    assert_eq!(sizes, [block(828), block(428), block(28)], "{report}");
    // The same tensors in a `Vec`, handed on from a scope that made none of them.
    let kept: Vec<Tensor> = kept.into_iter().collect();
    let (kept, _) = clean(scope(strict("again"), || kept));
    assert_eq!(kept.len(), 1200);
    let options = strict("graph").keep_grad_mode(true);
    let (_, report) = clean(scope(options, || run(Some(700))));
    assert!(
        report.held_by(HeldBy::AutogradGraph) >= block(4 * 8 * 4),
        "{report}"
    );
}

#[test]
fn shallow_clone_shares_storage() {
    let (_c, report) = clean(scope(strict("shallow"), || {
        let t = floats(10);
        t.shallow_clone()
    }));
    assert_eq!(on(&report).kept, block(40));
}

#[test]
fn convolution_scratch_from_raw_allocate_is_seen_freed() {
    // oneDNN takes scratch buffers through `raw_allocate`/`raw_deallocate`: regression test for
    // frees on that path being missed (reported as escapes, counted as live forever).
    for _ in 0..3 {
        let (_, report) = clean(scope(strict("conv"), || {
            let vs = nn::VarStore::new(Device::Cpu);
            let conv = nn::conv2d(vs.root(), 1, 16, 3, Default::default());
            conv.forward(&Tensor::ones(
                [8, 1, 28, 28],
                (tch::Kind::Float, Device::Cpu),
            ))
        }));
        assert_eq!(report.kept, 4 * 8 * 16 * 26 * 26);
    }
}

#[test]
fn torchscript_values_and_std_cells_are_kept() {
    use std::rc::Rc;
    use std::sync::OnceLock;
    use tch::IValue;
    let (_v, report) = clean(scope(strict("ivalue"), || {
        let shared = Rc::new(floats(5));
        let once = OnceLock::new();
        once.set(floats(6)).unwrap();
        let weak = Rc::downgrade(&shared);
        let value = IValue::Tuple(vec![
            IValue::Tensor(floats(1)),
            IValue::TensorList(vec![floats(2)]),
            IValue::GenericDict(vec![
                (IValue::Int(0), IValue::Tensor(floats(3))),
                // A TorchScript dict's keys can be tensors: searched too.
                (IValue::Tensor(floats(7)), IValue::Int(1)),
            ]),
            IValue::GenericList(vec![IValue::Tensor(floats(4)), IValue::Double(1.0)]),
        ]);
        (value, shared, weak, once)
    }));
    let expected: u64 = [4, 8, 12, 16, 20, 24, 28].into_iter().map(block).sum();
    assert_eq!(on(&report).kept, expected);
}

/// tch keeps a TorchScript module's buffers and attributes private: its parameters are kept,
/// and memory nothing else keeps is reported as not inspected, never escaped.
#[test]
fn torchscript_module_is_not_called_escaped() {
    use gpu_scope::HeldBy;
    let (_module, report) = scope(strict("cmodule"), || {
        let w = Tensor::ones([4, 4], (tch::Kind::Float, Device::Cpu));
        let x = Tensor::ones([2, 4], (tch::Kind::Float, Device::Cpu));
        tch::CModule::create_by_tracing("m", "forward", &[x], &mut |xs| vec![xs[0].matmul(&w)])
            .unwrap()
    })
    .unwrap();
    assert!(report.escaped.is_empty(), "{report}");
    assert!(report.held_by(HeldBy::Uninspected) > 0, "{report}");
    assert!(report.to_string().contains("tch::CModule"), "{report}");
}

fn torchscript_model() -> tch::CModule {
    // Four parameters, and three buffers that tch keeps private. Made with PyTorch 2.11:
    // torch.jit.script(nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2)).eval()).save(path)
    tch::CModule::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/linear_bn.pt"
    ))
    .unwrap()
}

/// A TorchScript model loaded before the scope holds nothing the scope made: kept as an
/// argument, it hides no leak.
#[test]
fn a_torchscript_model_from_outside_hides_no_leak() {
    use std::sync::Mutex;
    static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    let model = torchscript_model();
    let x = Tensor::ones([3, 4], (tch::Kind::Float, Device::Cpu));
    let scope = Scope::enter(strict("model-outside")).unwrap();
    let y = model.forward_ts(&[&x]).unwrap();
    SINK.lock().unwrap().push(floats(5));
    let r = common::escaped(scope.exit(&(&model, &y)));
    assert_eq!(r.escaped_bytes, block(20), "{r}");
    assert!(r.uninspected_kept.is_empty(), "{r}");
    SINK.lock().unwrap().clear();
}

/// TorchScript optimizes a method's graph at its first call and keeps the constants it folds
/// for as long as the module lives (README, Limits): a first call inside a scope reports them
/// escaped; after one call outside scopes, the calls inside are clean.
#[test]
fn torchscript_constants_folded_at_a_first_call_outside_scopes_stay_out_of_them() {
    // A Linear, and `torch.arange(8, dtype=torch.float32) * 0.5 + 1.0` in `forward`. Made
    // with PyTorch 2.11: torch.jit.script(m.eval()).save(path)
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/folded_constant.pt"
    );
    let x = Tensor::ones([3, 4], (tch::Kind::Float, Device::Cpu));
    let cold = tch::CModule::load(path).unwrap();
    let scope = Scope::enter(strict("first call")).unwrap();
    let y = cold.forward_ts(&[&x]).unwrap();
    let r = common::escaped(scope.exit(&(&cold, &y)));
    assert!(
        r.escaped_bytes >= 32,
        "the folded constant (on the CPU): {r}"
    );
    let warm = tch::CModule::load(path).unwrap();
    drop(warm.forward_ts(&[&x]).unwrap());
    for _ in 0..3 {
        let scope = Scope::enter(strict("after a warm-up")).unwrap();
        let y = warm.forward_ts(&[&x]).unwrap();
        let r = scope.exit(&(&warm, &y)).unwrap();
        assert!(r.is_clean(), "{r}");
    }
}

/// A TorchScript method first called with autograd on (the default outside scopes) keeps
/// making graphs for its outputs inside scopes, where autograd is off: a leak beside such an
/// output counts under `autograd graph` (README, Limits), and the note says how to avoid it.
/// Warmed up under `tch::no_grad`, the leak is an escape.
#[test]
fn torchscript_warmed_up_under_no_grad_hides_no_leak() {
    use std::sync::Mutex;
    static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/folded_constant.pt"
    );
    let x = Tensor::ones([3, 4], (tch::Kind::Float, Device::Cpu));
    let leak_beside = |model: &tch::CModule| {
        let scope = Scope::enter(strict("warmed up")).unwrap();
        let y = model.forward_ts(&[&x]).unwrap();
        SINK.lock().unwrap().push(floats(5));
        scope.exit(&(model, &y))
    };
    let with_grad = tch::CModule::load(path).unwrap();
    drop(with_grad.forward_ts(&[&x]).unwrap());
    let r = leak_beside(&with_grad).unwrap();
    assert!(r.held_by(HeldBy::AutogradGraph) >= block(20), "{r}");
    assert!(r.to_string().contains("tch::no_grad"), "{r}");
    let without = tch::CModule::load(path).unwrap();
    tch::no_grad(|| drop(without.forward_ts(&[&x]).unwrap()));
    let r = common::escaped(leak_beside(&without));
    assert_eq!(r.escaped_bytes, block(20), "{r}");
    SINK.lock().unwrap().clear();
}

/// A TorchScript model loaded inside the scope and handed back: its parameters are kept, its
/// private buffers are not inspected (named), never escaped.
#[test]
fn a_torchscript_model_loaded_inside_is_not_called_escaped() {
    use gpu_scope::HeldBy;
    let (_model, r) = scope(strict("model-inside"), torchscript_model).unwrap();
    assert!(r.escaped.is_empty(), "{r}");
    assert_eq!(r.uninspected_kept, ["tch::CModule"], "{r}");
    assert!(r.held_by(HeldBy::Uninspected) > 0, "the buffers: {r}");
    assert!(r.kept >= 4 * (8 + 2 + 2 + 2), "the parameters: {r}");
}

/// A tree whose nodes point back at their parents (`Weak`), and a true `Rc` cycle: searched
/// once each, so keeping them neither overflows the stack nor misses a tensor.
#[derive(gpu_scope::Tensors)]
struct Node {
    w: Tensor,
    parent: std::cell::RefCell<std::rc::Weak<Node>>,
    children: std::cell::RefCell<Vec<std::rc::Rc<Node>>>,
    next: std::sync::Mutex<Option<std::sync::Arc<Ring>>>,
}

#[derive(gpu_scope::Tensors)]
struct Ring {
    w: Tensor,
    next: std::sync::Mutex<Option<std::sync::Arc<Ring>>>,
}

#[test]
#[allow(clippy::arc_with_non_send_sync)] // `Arc`s on purpose: their cells are locks
fn kept_values_with_reference_cycles_are_searched_once() {
    use std::rc::Rc;
    use std::sync::{Arc, Mutex};
    let node = |n| Node {
        w: floats(n),
        parent: Default::default(),
        children: Default::default(),
        next: Mutex::new(None),
    };
    let ((root, child), report) = clean(scope(strict("tree"), || {
        let root = Rc::new(node(1));
        let child = Rc::new(node(2));
        *child.parent.borrow_mut() = Rc::downgrade(&root);
        root.children.borrow_mut().push(child.clone());
        // Two rings of `Arc`s through locks, one hung on each node.
        let a = Arc::new(Ring {
            w: floats(3),
            next: Mutex::new(None),
        });
        let b = Arc::new(Ring {
            w: floats(4),
            next: Mutex::new(Some(a.clone())),
        });
        *a.next.lock().unwrap() = Some(b);
        *child.next.lock().unwrap() = Some(a.clone());
        *root.next.lock().unwrap() = Some(a);
        (root, child)
    }));
    assert_eq!(
        on(&report).kept,
        [4, 8, 12, 16].into_iter().map(block).sum::<u64>(),
        "{report}"
    );
    assert!(report.uninspected_kept.is_empty(), "{report}");
    // Break the cycles so that the test leaves nothing behind.
    root.children.borrow_mut().clear();
    *root.next.lock().unwrap() = None;
    let ring = child.next.lock().unwrap().take();
    if let Some(a) = ring {
        *a.next.lock().unwrap() = None;
    }
}

/// Nodes shared by two parents, 40 levels deep: 2^40 paths to the bottom node, each node
/// searched once (following every path would never end).
macro_rules! shared_nodes {
    ($node:ident, $ptr:ty, $new:path) => {{
        #[derive(gpu_scope::Tensors)]
        struct $node {
            _w: Tensor,
            _below: Option<($ptr, $ptr)>,
        }
        let mut node = $new($node {
            _w: floats(1),
            _below: None,
        });
        for _ in 0..40 {
            node = $new($node {
                _w: floats(1),
                _below: Some((node.clone(), node)),
            });
        }
        node
    }};
}

#[test]
fn kept_values_whose_nodes_share_nodes_are_searched_once_each() {
    use std::{rc::Rc, sync::Arc};
    let (_rc, report) = clean(scope(strict("rc"), || {
        shared_nodes!(RcNode, Rc<RcNode>, Rc::new)
    }));
    assert_eq!(on(&report).kept, 41 * block(4), "{report}");
    let (_arc, report) = clean(scope(strict("arc"), || {
        shared_nodes!(ArcNode, Arc<ArcNode>, Arc::new)
    }));
    assert_eq!(on(&report).kept, 41 * block(4), "{report}");
}

#[gpu_scope::gpu_scope(name = "iter", on_escape = ignore)]
fn tensors_to_come() -> impl Iterator<Item = Tensor> {
    vec![floats(1), floats(2)].into_iter()
}

#[test]
fn a_returned_vec_iterator_keeps_what_is_left_in_it() {
    let (mut left, report) = clean(scope(strict("into_iter"), || {
        let mut it = vec![floats(1), floats(2), floats(3)].into_iter();
        drop(it.next());
        it
    }));
    assert_eq!(on(&report).kept, block(8) + block(12), "{report}");
    assert_eq!(left.next().map(|t| t.numel()), Some(2));
    let all: Vec<Tensor> = tensors_to_come().collect();
    assert_eq!(all.len(), 2);
    assert!(gpu_scope::last_report().unwrap().is_clean());
}

/// A shared pointer and the cell it points at share an address: each is searched.
#[test]
fn returned_shared_cells() {
    use std::sync::{Arc, Mutex, RwLock};
    let (_v, report) = clean(scope(strict("cells"), || {
        (
            Arc::new(Mutex::new(vec![floats(1)])),
            std::rc::Rc::new(std::cell::RefCell::new(floats(2))),
            std::rc::Rc::new(RwLock::new(Some(floats(3)))),
            std::rc::Rc::new(std::sync::OnceLock::from(floats(4))),
        )
    }));
    let expected: u64 = [4, 8, 12, 16].into_iter().map(block).sum();
    assert_eq!(on(&report).kept, expected, "{report}");
}

/// A hand-written `visit` that wraps each item in a fresh `Rc` and lock: each temporary is
/// dropped before the next is made, often at the same address, and each is still searched.
struct Snapshots(Vec<Tensor>);

impl gpu_scope::Tensors for Snapshots {
    fn visit(&self, set: &mut gpu_scope::StorageSet) {
        for t in &self.0 {
            std::rc::Rc::new(t.shallow_clone()).visit(set);
            std::sync::Mutex::new(t.shallow_clone()).visit(set);
        }
    }
}

#[test]
fn temporaries_made_while_searching_are_each_searched() {
    let (_s, report) = clean(scope(strict("snapshots"), || {
        Snapshots(vec![floats(1), floats(2), floats(3), floats(4)])
    }));
    let expected: u64 = [4, 8, 12, 16].into_iter().map(block).sum();
    assert_eq!(on(&report).kept, expected, "{report}");
}

/// A kept set counts each storage once, whether it holds a few keys (kept in place) or more
/// (a hash set), and a scope judges by it on both sides of that line.
#[test]
fn kept_set_counts_each_storage_once() {
    use gpu_scope::StorageSet;
    for n in [1, 4, 5, 9] {
        let (kept, report) = clean(scope(strict("set"), || {
            let tensors: Vec<Tensor> = (1..=n).map(floats).collect();
            let mut set = StorageSet::new();
            for t in &tensors {
                set.add(t);
                set.add(&t.shallow_clone());
                set.add(&t.narrow(0, 0, 1));
            }
            assert_eq!(set.len(), n as usize, "{n} tensors");
            tensors
        }));
        let expected: u64 = (1..=n).map(|i| block(4 * i as u64)).sum();
        assert_eq!(on(&report).kept, expected, "{n} tensors");
        drop(kept);
    }
}

/// `Scope::keep` on an enclosing scope covers what a scope inside it made: the mark of the
/// scope further out stands, whichever was set first, and covers the scopes in between.
#[test]
fn kept_by_an_enclosing_scope_from_inside_a_nested_one() {
    for outer_first in [false, true] {
        let mut global = Vec::new();
        let outer = Scope::enter(strict("outer")).unwrap();
        let inner = Scope::enter(strict("inner")).unwrap();
        let t = floats(10);
        if outer_first {
            outer.keep(&t);
            inner.keep(&t);
        } else {
            inner.keep(&t);
            outer.keep(&t);
        }
        global.push(t.shallow_clone());
        drop(t);
        let inner = inner.exit(&()).unwrap();
        assert!(inner.is_clean(), "{inner}");
        assert_eq!(on(&inner).kept, block(40));
        let outer = outer.exit(&()).unwrap();
        assert!(outer.is_clean(), "{outer}");
        assert_eq!(on(&outer).kept, block(40));
    }
    // Marked by the inner scope only: the outer one still judges it, and may mark it after.
    for outer_marks_after in [false, true] {
        let mut global = Vec::new();
        let outer = Scope::enter(strict("outer")).unwrap();
        let inner = Scope::enter(strict("inner")).unwrap();
        let t = floats(10);
        inner.keep(&t);
        assert!(inner.exit(&()).unwrap().is_clean());
        if outer_marks_after {
            outer.keep(&t);
        }
        global.push(t);
        let outer = outer.exit(&());
        match outer_marks_after {
            true => assert!(outer.unwrap().is_clean()),
            false => assert_eq!(
                outer.unwrap_err().report().unwrap().escaped_bytes,
                block(40)
            ),
        }
    }
}

/// tch's dataset and a store's variables are searched field by field: kept exactly.
#[test]
fn a_dataset_and_a_stores_variables_are_kept() {
    let (_data, r) = clean(scope(strict("dataset"), || tch::vision::dataset::Dataset {
        train_images: floats(6),
        train_labels: floats(2),
        test_images: floats(3),
        test_labels: floats(1),
        labels: 10,
    }));
    assert_eq!(
        on(&r).kept,
        block(24) + block(8) + block(12) + block(4),
        "{r}"
    );
    let vs = nn::VarStore::new(device());
    let scope = Scope::enter(strict("variables")).unwrap();
    let _layer = nn::linear(vs.root() / "layer", 3, 2, Default::default());
    let r = scope.exit(&*vs.variables_.lock().unwrap()).unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(on(&r).kept, block(24) + block(8), "{r}");
}

/// tch's data iterators keep their tensors private: memory only they keep is not inspected,
/// never escaped; one borrowed from before the scope holds nothing the scope made.
#[test]
fn tchs_data_iterators_are_not_inspected() {
    let (_iter, r) = scope(strict("iterator"), || {
        let (xs, ys) = (floats(8), floats(8));
        tch::data::Iter2::new(&xs, &ys, 2)
    })
    .unwrap();
    assert!(r.escaped.is_empty(), "{r}");
    assert_eq!(r.uninspected_kept, ["tch::data::Iter2"], "{r}");
    assert_eq!(r.held_by(HeldBy::Uninspected), block(32) + block(32), "{r}");
    let outer = tch::data::Iter2::new(&floats(8), &floats(8), 2);
    let err = batches_leaking(&outer).unwrap_err();
    let r = err.report().expect("an escape");
    assert_eq!(r.escaped.len(), 1, "{r}");
    assert!(r.uninspected_kept.is_empty(), "{r}");
    LEAKED.lock().unwrap().clear();
}

static LEAKED: std::sync::Mutex<Vec<Tensor>> = std::sync::Mutex::new(Vec::new());

#[gpu_scope::gpu_scope(on_escape = error)]
fn batches_leaking(_iter: &tch::data::Iter2) -> Result<(), gpu_scope::Error> {
    LEAKED.lock().unwrap().push(floats(2));
    Ok(())
}

/// Guards and wrappers handed back are read through: a `Ref` or `MutexGuard` of the caller's
/// cache a function returns, a min-heap's `Reverse`, a `ManuallyDrop`.
#[test]
fn returned_guards_and_wrappers_are_searched() {
    use std::cell::RefCell;
    use std::cmp::Reverse;
    use std::mem::ManuallyDrop;
    use std::sync::{Mutex, RwLock};
    let cell = RefCell::new(Vec::new());
    let lock = Mutex::new(Vec::new());
    let rw = RwLock::new(Vec::new());
    let (guards, report) = clean(scope(strict("guards"), || {
        cell.borrow_mut().push(floats(1));
        lock.lock().unwrap().push(floats(2));
        rw.write().unwrap().push(floats(3));
        (cell.borrow(), lock.lock().unwrap(), rw.read().unwrap())
    }));
    drop(guards);
    let expected: u64 = [4, 8, 12].into_iter().map(block).sum();
    assert_eq!(on(&report).kept, expected, "{report}");
    let (mut wrapped, report) = clean(scope(strict("wrappers"), || {
        (Reverse(floats(4)), ManuallyDrop::new(floats(5)))
    }));
    assert_eq!(on(&report).kept, block(16) + block(20), "{report}");
    // SAFETY: dropped once, here.
    unsafe { ManuallyDrop::drop(&mut wrapped.1) };
}

/// A kept `VarStore` whose variables this thread holds locked (an `nn::Entry` alive at the
/// scope's end) is waited for a while, then named not inspected: the exit does not hang.
#[test]
fn a_var_store_this_thread_holds_locked_is_not_inspected() {
    let vs = nn::VarStore::new(device());
    let root = vs.root();
    let entry = root.entry("w");
    let (_, report) = scope(strict("locked store"), || {
        gpu_scope::keep(&vs);
    })
    .unwrap();
    assert_eq!(report.uninspected_kept.len(), 1, "{report}");
    assert!(report.uninspected_kept[0].contains("VarStore"), "{report}");
    drop(entry);
}

#[gpu_scope::gpu_scope(on_escape = error)]
fn first_row_of_a_zeroed_leaf() -> Result<Tensor, gpu_scope::Error> {
    let mut leaf = Tensor::zeros([3, 7], (Kind::Float, device())).set_requires_grad(true);
    let row = leaf.narrow(0, 0, 1);
    let _ = leaf.zero_();
    Ok(row)
}

/// A view made with autograd off (as in any scope) of a tensor that requires grad, whose
/// base was then changed in place: libtorch refuses to read its graph, and the view still
/// keeps its storage (it counted for nothing, and what it kept was reported escaped).
#[test]
fn a_view_of_a_leaf_changed_in_place_since() {
    let (row, report) = clean(scope(strict("view"), || {
        let mut leaf = Tensor::zeros([3, 7], (Kind::Float, device())).set_requires_grad(true);
        let row = leaf.narrow(0, 0, 1);
        let _ = leaf.zero_();
        row
    }));
    assert_eq!(on(&report).kept, block(84), "{report}");
    assert_eq!(row.size(), [1, 7]);
    let row = first_row_of_a_zeroed_leaf().unwrap();
    assert_eq!(row.size(), [1, 7]);
    let report = gpu_scope::last_report().unwrap();
    assert_eq!(on(&report).kept, block(84), "{report}");
}
