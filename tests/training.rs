//! Training steps: the gradients that backward stores in parameters from outside the scope,
//! and the state an optimizer makes for them on its first step, are held on purpose, not
//! escaped; a real leak next to them is still found; and autograd off names `keep_grad`.
mod common;

use common::{block, child, device, escaped, floats, in_child, serial, strict};
use gpu_scope::{scope, HeldBy, Scope, ScopeOptions};
use std::sync::Mutex;
use tch::nn::{self, Module, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Reduction, Tensor};

static LEAKED: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

struct Setup {
    _vs: nn::VarStore,
    model: nn::Linear,
    opt: nn::Optimizer,
    x: Tensor,
    y: Tensor,
}

fn setup(opt: impl OptimizerConfig) -> Setup {
    let vs = nn::VarStore::new(device());
    let model = nn::linear(vs.root(), 16, 4, Default::default());
    let opt = opt.build(&vs, 1e-3).unwrap();
    let x = Tensor::randn([8, 16], (Kind::Float, device()));
    let y = Tensor::randn([8, 4], (Kind::Float, device()));
    Setup {
        _vs: vs,
        model,
        opt,
        x,
        y,
    }
}

/// Parameter bytes (blocks) of the 16 → 4 linear layer.
fn params() -> u64 {
    block(4 * 16 * 4) + block(4 * 4)
}

/// A real leak: 32 floats kept in a global.
fn leak_floats() {
    LEAKED
        .lock()
        .unwrap()
        .push(Tensor::zeros([32], (Kind::Float, device())));
}

fn train(s: &mut Setup, leak: bool) -> Result<gpu_scope::ScopeReport, gpu_scope::Error> {
    let opts = strict("train").keep_grad_mode(true);
    scope(opts, || {
        s.opt.zero_grad();
        let loss = s.model.forward(&s.x).mse_loss(&s.y, Reduction::Mean);
        s.opt.backward_step(&loss);
        if leak {
            leak_floats();
        }
    })
    .map(|(_, r)| r)
}

#[test]
fn adam_steps_are_clean_and_say_what_they_keep() {
    let mut s = setup(nn::Adam::default());
    for step in 0..3 {
        let r = train(&mut s, false).unwrap();
        assert!(r.is_clean(), "step {step}: {r}");
        assert_eq!(r.held_by(HeldBy::Gradient), params(), "step {step}: {r}");
        let state = if step == 0 { 2 * params() } else { 0 };
        assert_eq!(r.held_by(HeldBy::OptimizerState), state, "step {step}: {r}");
    }
    let table = train(&mut s, false).unwrap().to_string();
    assert!(table.contains("gradients"), "{table}");
    let says = "stored for tensors from outside the scope or for a kept optimizer: held on purpose";
    assert!(table.contains(says), "{table}");
}

/// A leak made with autograd off beside a step (a metric kept in a global) is an escape, not
/// optimizer state, though its block is the size of a gradient's: on CUDA every request up to
/// 512 B gets a 512-byte block, so sizes are compared as requested.
#[test]
fn a_small_no_grad_leak_in_a_step_is_an_escape() {
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    for step in 0..2 {
        let r = escaped(
            scope(strict("step").keep_grad_mode(true), || {
                s.opt.zero_grad();
                let loss = s.model.forward(&s.x).mse_loss(&s.y, Reduction::Mean);
                s.opt.backward_step(&loss);
                let metric = tch::no_grad(|| s.model.forward(&s.x).argmax(-1, false));
                LEAKED.lock().unwrap().push(metric);
            })
            .map(|(_, r)| r),
        );
        assert_eq!(r.escaped.len(), 1, "step {step}: {r}");
        assert_eq!(r.escaped_requested, 8 * 8, "step {step}: {r}");
        let state = if step == 0 { 2 * params() } else { 0 };
        assert_eq!(r.held_by(HeldBy::OptimizerState), state, "step {step}: {r}");
    }
    LEAKED.lock().unwrap().clear();
}

/// An epoch scope around step scopes: the gradients and optimizer state each step hands on are
/// judged again at the epoch's exit, as held on purpose.
#[test]
fn steps_nested_in_an_epoch_scope_are_clean_in_it_too() {
    let mut s = setup(nn::Adam::default());
    for epoch in 0..2 {
        let opts = strict("epoch").keep_grad_mode(true);
        let (_, r) = scope(opts, || {
            for _ in 0..2 {
                assert!(train(&mut s, false).unwrap().is_clean());
            }
        })
        .unwrap();
        assert!(r.is_clean(), "epoch {epoch}: {r}");
        assert_eq!(r.held_by(HeldBy::Gradient), params(), "epoch {epoch}: {r}");
        let state = if epoch == 0 { 2 * params() } else { 0 };
        assert_eq!(
            r.held_by(HeldBy::OptimizerState),
            state,
            "epoch {epoch}: {r}"
        );
    }
}

#[test]
fn sgd_with_momentum_and_rmsprop_are_clean() {
    for opt in [
        setup(nn::Sgd {
            momentum: 0.9,
            ..Default::default()
        }),
        setup(nn::RmsProp::default()),
        setup(nn::AdamW::default()),
    ] {
        let mut s = opt;
        for step in 0..2 {
            let r = train(&mut s, false).unwrap();
            assert!(r.is_clean(), "step {step}: {r}");
        }
    }
}

#[test]
fn a_leak_next_to_a_training_step_is_found() {
    // LEAKED is shared: another test clearing it would free this one's leak.
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    let r = escaped(train(&mut s, true));
    assert_eq!(r.escaped.len(), 1, "{r}");
    assert_eq!(r.escaped_bytes, block(128));
    assert_eq!(r.held_by(HeldBy::OptimizerState), 2 * params(), "{r}");
    LEAKED.lock().unwrap().clear();
}

/// PyTorch's order, `zero_grad` last: the gradients are freed before the check, and the
/// state the first step made (of their sizes) is held on purpose all the same; a leak beside
/// it is still found.
#[test]
fn a_step_that_zeroes_its_gradients_last_holds_its_state_on_purpose() {
    // LEAKED is shared: another test clearing it would free this one's leak.
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    let mut step = |leak: bool| {
        scope(strict("zero last").keep_grad_mode(true), || {
            let loss = s.model.forward(&s.x).mse_loss(&s.y, Reduction::Mean);
            loss.backward();
            s.opt.step();
            s.opt.zero_grad();
            if leak {
                leak_floats();
            }
        })
        .map(|(_, r)| r)
    };
    let r = step(false).unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.held_by(HeldBy::OptimizerState), 2 * params(), "{r}");
    assert_eq!(r.held_by(HeldBy::Gradient), 0, "{r}");
    let r = escaped(step(true));
    assert_eq!(r.escaped_bytes, block(128), "{r}");
    LEAKED.lock().unwrap().clear();
}

/// Only gradients that outlive their backward pass (a parameter's `.grad`) give optimizer
/// state its sizes: a leak made with autograd off that has the size of an activation's
/// gradient, which backward made and freed, is an escape.
#[test]
fn a_no_grad_leak_the_size_of_an_activation_gradient_is_an_escape() {
    // LEAKED is shared: another test clearing it would free this one's leak.
    let _serial = serial();
    let mut s = setup(nn::Sgd::default());
    let r = escaped(
        scope(strict("metric leak").keep_grad_mode(true), || {
            s.opt.zero_grad();
            let logits = s.model.forward(&s.x);
            s.opt.backward_step(&logits.mse_loss(&s.y, Reduction::Mean));
            // [8, 4]: the size of the logits' gradient, none of the parameters'.
            let probs = tch::no_grad(|| logits.softmax(-1, Kind::Float));
            LEAKED.lock().unwrap().push(probs);
        })
        .map(|(_, r)| r),
    );
    assert_eq!(r.escaped_bytes, block(128), "{r}");
    LEAKED.lock().unwrap().clear();
}

/// The same inside an epoch scope: the step scope hands the gradients' sizes on, so the epoch
/// scope's check holds the state too.
#[test]
fn an_epoch_around_steps_that_zero_their_gradients_last_is_clean() {
    let mut s = setup(nn::Adam::default());
    let (_, r) = scope(strict("epoch").keep_grad_mode(true), || {
        for _ in 0..2 {
            let (_, r) = scope(strict("zero last").keep_grad_mode(true), || {
                s.model
                    .forward(&s.x)
                    .mse_loss(&s.y, Reduction::Mean)
                    .backward();
                s.opt.step();
                s.opt.zero_grad();
            })
            .unwrap();
            assert!(r.is_clean(), "{r}");
        }
    })
    .unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.held_by(HeldBy::OptimizerState), 2 * params(), "{r}");
}

/// A backward pass in a scope of its own (gradient accumulation): clean.
fn accumulate(s: &Setup) {
    let (_, r) = scope(strict("accumulate").keep_grad_mode(true), || {
        s.model
            .forward(&s.x)
            .mse_loss(&s.y, Reduction::Mean)
            .backward();
    })
    .unwrap();
    assert!(r.is_clean(), "{r}");
}

/// Gradient accumulation: backward in scopes of its own, then a step in another scope that
/// keeps the optimizer. The state it makes on its first step has the size of the optimizer's
/// variables, and is held on purpose; a leak beside a later step is still found.
#[test]
fn a_step_whose_backward_ran_in_other_scopes_holds_its_state_on_purpose() {
    // LEAKED is shared: another test clearing it would free this one's leak.
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    for _ in 0..2 {
        accumulate(&s);
    }
    let step = Scope::enter(strict("step").keep_grad_mode(true)).unwrap();
    s.opt.step();
    let r = step.exit(&s.opt).unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.held_by(HeldBy::OptimizerState), 2 * params(), "{r}");

    let step = Scope::enter(strict("step and leak").keep_grad_mode(true)).unwrap();
    s.opt.step();
    leak_floats();
    let r = escaped(step.exit(&s.opt));
    assert_eq!(r.escaped_bytes, block(128), "{r}");
    LEAKED.lock().unwrap().clear();
}

/// Ends a scope in which an optimizer took its first step after gradient accumulation: with
/// `leak`, a leak beside the state is escaped, alone; without, the scope is clean and holds the
/// state on purpose.
#[track_caller]
fn exit_holding_state(scope: Scope, leak: bool) {
    if leak {
        leak_floats();
        let r = escaped(scope.exit(&()));
        assert_eq!(r.escaped_bytes, block(128), "{r}");
        LEAKED.lock().unwrap().clear();
    } else {
        let r = scope.exit(&()).unwrap();
        assert!(r.is_clean(), "{r}");
        assert_eq!(r.held_by(HeldBy::OptimizerState), 2 * params(), "{r}");
    }
}

/// A scope around such a step (a timing wrapper) that does not keep the optimizer itself: the
/// step's state, held on purpose by the step that kept it, is held in the wrapper too, and a
/// leak beside it is still found there.
#[test]
fn a_scope_around_a_step_that_keeps_its_optimizer_holds_its_state_too() {
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    accumulate(&s);
    for leak in [false, true] {
        let wrapper = Scope::enter(strict("wrapper").keep_grad_mode(true)).unwrap();
        let step = Scope::enter(strict("step").keep_grad_mode(true)).unwrap();
        s.opt.step();
        let r = step.exit(&s.opt).unwrap();
        assert!(r.is_clean(), "{r}");
        exit_holding_state(wrapper, leak);
    }
}

/// Gradient accumulation where the step keeps the optimizer with `keep` (the free function or
/// `Scope::keep`) rather than handing it back: its state is held on purpose all the same, and
/// a leak beside it is still found.
#[test]
fn a_step_that_keeps_its_optimizer_with_keep_holds_its_state_on_purpose() {
    let _serial = serial();
    for by_scope in [false, true] {
        let mut s = setup(nn::Adam::default());
        accumulate(&s);
        for leak in [false, true] {
            let step = Scope::enter(strict("step").keep_grad_mode(true)).unwrap();
            match by_scope {
                true => step.keep(&s.opt),
                false => gpu_scope::keep(&s.opt),
            }
            s.opt.step();
            exit_holding_state(step, leak);
        }
    }
}

/// Without the optimizer kept, a step whose backward ran elsewhere cannot tell its state from
/// a leak: the state is reported escaped (which `keep` above fixes).
#[test]
fn a_step_that_keeps_no_optimizer_reports_its_state() {
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    accumulate(&s);
    let step = Scope::enter(strict("step").keep_grad_mode(true)).unwrap();
    s.opt.step();
    let r = escaped(step.exit(&()));
    assert_eq!(r.escaped_bytes, 2 * params(), "{r}");
}

fn leak_weight_sized() {
    let weight = Tensor::zeros([4, 16], (Kind::Float, device()));
    LEAKED.lock().unwrap().push(weight);
}

/// A helper's scope under `ignore` (its default autograd off) leaks a tensor the size of a
/// parameter beside a training step: the step's scope around it still finds the escape, not
/// optimizer state (what escaped from a scope inside escapes from the scopes around it).
#[test]
fn a_lenient_helpers_leak_the_size_of_a_parameter_escapes_the_step_around_it() {
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    // The optimizer's state exists already: the step below makes none.
    assert!(train(&mut s, false).unwrap().is_clean());
    let helper = || {
        let opts = ScopeOptions::new("helper").on_escape(gpu_scope::EscapePolicy::Ignore);
        // The weight's size (4 x 16 floats), made with autograd off (the scope's default).
        let (_, r) = scope(opts, leak_weight_sized).unwrap();
        r
    };
    let r = escaped(
        scope(strict("step").keep_grad_mode(true), || {
            s.opt.zero_grad();
            let loss = s.model.forward(&s.x).mse_loss(&s.y, Reduction::Mean);
            s.opt.backward_step(&loss);
            let inner = helper();
            assert_eq!(inner.escaped_bytes, block(4 * 64), "{inner}");
        })
        .map(|(_, r)| r),
    );
    assert_eq!(r.escaped_bytes, block(4 * 64), "{r}");
    assert_eq!(r.held_by(HeldBy::OptimizerState), 0, "{r}");
    LEAKED.lock().unwrap().clear();
}

/// Backward inside a scope that left autograd off fails in libtorch; the panic names the
/// option that fixes it.
#[test]
fn autograd_off_names_keep_grad() {
    if in_child() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = nn::linear(vs.root(), 4, 1, Default::default());
        let _ = scope(ScopeOptions::new("no-grad"), || {
            let loss = model
                .forward(&Tensor::ones([2, 4], (Kind::Float, Device::Cpu)))
                .sum(Kind::Float);
            loss.backward();
        });
        return;
    }
    let out = child("autograd_off_names_keep_grad", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("does not require grad"), "{stderr}");
    assert!(stderr.contains("keep_grad"), "{stderr}");
}

#[gpu_scope::gpu_scope(name = "returns-err")]
fn backward_returning_err(model: &nn::Linear) -> Result<(), tch::TchError> {
    let x = Tensor::ones([2, 4], (Kind::Float, Device::Cpu));
    model.forward(&x).sum(Kind::Float).f_backward()
}

/// The same from an `async fn`: the hint is given inside its future, while the scope is on.
#[gpu_scope::gpu_scope(name = "returns-err-async")]
async fn backward_returning_err_async(model: &nn::Linear) -> Result<(), tch::TchError> {
    let x = Tensor::ones([2, 4], (Kind::Float, Device::Cpu));
    tokio::task::yield_now().await;
    model.forward(&x).sum(Kind::Float).f_backward()
}

/// An error with context, as anyhow's: the cause shows in its alternate form (`{:#}`) only.
struct WithContext(tch::TchError);

impl std::fmt::Display for WithContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match f.alternate() {
            true => write!(f, "training step: {}", self.0),
            false => write!(f, "training step"),
        }
    }
}

/// The error passed up through an enclosing scope, with context: the hint is printed once.
#[gpu_scope::gpu_scope(name = "epoch")]
fn epoch_returning_err(model: &nn::Linear) -> Result<(), WithContext> {
    backward_returning_err(model).map_err(WithContext)
}

/// The same error returned (`f_backward()?`) from a scoped function or a `scope!` block, not
/// a panic: the hint follows it all the same, on stderr, once however many scopes it passes
/// through; an `Err` that says something else gets none.
#[test]
fn a_returned_autograd_error_names_keep_grad() {
    if in_child() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = nn::linear(vs.root(), 4, 1, Default::default());
        assert!(epoch_returning_err(&model).is_err());
        eprintln!("-- block --");
        let r: Result<(), WithContext> = gpu_scope::scope!({
            let y = model.forward(&Tensor::ones([1, 4], (Kind::Float, Device::Cpu))) * 2;
            y.f_backward().map_err(WithContext)
        });
        assert!(r.is_err());
        eprintln!("-- async --");
        let rt = tokio::runtime::Builder::new_current_thread().build();
        assert!(rt
            .unwrap()
            .block_on(backward_returning_err_async(&model))
            .is_err());
        eprintln!("-- other --");
        let r: Result<(), String> = gpu_scope::scope!({ Err("something else".to_owned()) });
        assert!(r.is_err());
        return;
    }
    let out = child("a_returned_autograd_error_names_keep_grad", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let parts: Vec<&str> = stderr.split("-- block --").collect();
    assert_eq!(parts.len(), 2, "{stderr}");
    let (block, rest) = parts[1].split_once("-- async --").unwrap();
    let (in_async, other) = rest.split_once("-- other --").unwrap();
    for part in [parts[0], block, in_async] {
        assert_eq!(
            part.matches("gpu-scope: this ran with autograd off")
                .count(),
            1,
            "{stderr}"
        );
        assert!(part.contains("`keep_grad` option"), "{stderr}");
    }
    assert!(!other.contains("gpu-scope: "), "{stderr}");
}

/// A `keep_grad` step inside an epoch scope without it: the hint names the epoch scope, the
/// one that turned autograd off, and not the step.
#[test]
fn autograd_off_names_the_scope_that_turned_it_off() {
    let epoch = std::panic::Location::caller();
    let epoch_at = format!("{}:{}", epoch.file(), epoch.line());
    let step = std::panic::Location::caller();
    if in_child() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = nn::linear(vs.root(), 4, 1, Default::default());
        let _ = scope(ScopeOptions::new("epoch").location(epoch), || {
            let opts = ScopeOptions::new("step")
                .location(step)
                .keep_grad_mode(true);
            scope(opts, || {
                let x = Tensor::ones([2, 4], (Kind::Float, Device::Cpu));
                model.forward(&x).sum(Kind::Float).backward();
            })
        });
        return;
    }
    let out = child("autograd_off_names_the_scope_that_turned_it_off", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let hint = stderr
        .lines()
        .find(|l| l.contains("gpu-scope: this ran with autograd off"))
        .unwrap_or_else(|| panic!("no hint: {stderr}"));
    assert!(hint.contains(&format!("opened at {epoch_at} (")), "{hint}");
    assert_eq!(hint.matches("training.rs:").count(), 1, "{hint}");
}

/// Autograd turned on again inside the scope (`tch::with_grad`) where a tensor that never
/// required grad fails backward: the hint does not say it ran with autograd off.
#[test]
fn autograd_on_again_inside_is_not_called_off() {
    let at = std::panic::Location::caller();
    if in_child() {
        let _ = scope(ScopeOptions::new("on-again").location(at), || {
            tch::with_grad(|| {
                let x = Tensor::ones([2, 4], (Kind::Float, Device::Cpu));
                (x * 2).sum(Kind::Float).backward();
            })
        });
        return;
    }
    let out = child("autograd_on_again_inside_is_not_called_off", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("does not require grad"), "{stderr}");
    assert!(!stderr.contains("this ran with autograd off"), "{stderr}");
    let hint = stderr
        .lines()
        .find(|l| l.contains("gpu-scope: autograd is on here, but was turned off around it"))
        .unwrap_or_else(|| panic!("no hint: {stderr}"));
    assert!(
        hint.contains("if the tensor was computed while it was off"),
        "{hint}"
    );
    assert!(
        hint.contains(&format!("{}:{}", at.file(), at.line())),
        "{hint}"
    );
}

/// Work carried to another thread with a handle runs with the scope's autograd mode: a panic
/// there for want of autograd gets the hint too, naming the scope that turned it off.
#[test]
fn autograd_off_in_carried_work_names_the_scope() {
    let at = std::panic::Location::caller();
    let at_line = format!("{}:{}", at.file(), at.line());
    if in_child() {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = nn::linear(vs.root(), 4, 1, Default::default());
        let _ = scope(ScopeOptions::new("carried").location(at), || {
            let handle = gpu_scope::current().unwrap();
            let work = std::thread::spawn(move || {
                handle.in_scope(|| {
                    let x = Tensor::ones([2, 4], (Kind::Float, Device::Cpu));
                    model.forward(&x).sum(Kind::Float).backward();
                })
            });
            work.join().unwrap();
        });
        return;
    }
    let out = child("autograd_off_in_carried_work_names_the_scope", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("does not require grad"), "{stderr}");
    let hint = stderr
        .lines()
        .find(|l| l.contains("gpu-scope: this ran with autograd off"))
        .unwrap_or_else(|| panic!("no hint: {stderr}"));
    assert!(hint.contains(&format!("opened at {at_line} (")), "{hint}");
}

/// A kept tensor with an autograd graph made before the scope (an argument from training
/// code): the scope runs with autograd off and makes no graph, so nothing it allocated can be
/// held by one, and a leak is an escape, not `autograd graph`.
#[test]
fn a_graph_made_outside_hides_no_leak() {
    // LEAKED is shared: another test clearing it would free this one's leak.
    let _serial = serial();
    let w = Tensor::randn([8], (Kind::Float, device())).set_requires_grad(true);
    let h = &w * 2.0;
    let r = escaped(
        scope(strict("graph-outside"), || {
            let y = &h + 1.0;
            leak_floats();
            drop(y);
            &h
        })
        .map(|(_, r)| r),
    );
    assert_eq!(r.escaped.len(), 1, "{r}");
    assert_eq!(r.escaped_bytes, block(128), "{r}");
    assert_eq!(r.held_by(HeldBy::AutogradGraph), 0, "{r}");
    LEAKED.lock().unwrap().clear();
}

/// A step that trains a head on features whose graph was made before it (an encoder run
/// outside): that graph saved nothing the step made, so a leak beside the step is an escape,
/// not `autograd graph`, though the step made a graph of its own.
#[test]
fn a_graph_made_before_a_training_step_hides_no_leak_in_it() {
    // LEAKED is shared: another test clearing it would free this one's leak.
    let _serial = serial();
    let mut s = setup(nn::Adam::default());
    let encoder = Tensor::randn([16, 16], (Kind::Float, device())).set_requires_grad(true);
    let mut step = |leak: bool| {
        let feats = s.x.matmul(&encoder).tanh();
        let step = Scope::enter(strict("head step").keep_grad_mode(true)).unwrap();
        s.opt.zero_grad();
        let loss = s.model.forward(&feats).mse_loss(&s.y, Reduction::Mean);
        s.opt.backward_step(&loss);
        drop(loss);
        if leak {
            leak_floats();
        }
        // The features are the caller's: handed back, with their graph.
        step.exit(&feats)
    };
    let r = step(false).unwrap();
    assert!(r.is_clean(), "{r}");
    let r = escaped(step(true));
    assert_eq!(r.escaped_bytes, block(128), "{r}");
    assert_eq!(r.held_by(HeldBy::AutogradGraph), 0, "{r}");
    LEAKED.lock().unwrap().clear();
}

/// A scope that builds a graph and hands back a tensor that has it: what the graph saved (and
/// nothing else keeps) is held by it, not escaped (README, Limits).
#[test]
fn a_graph_made_inside_holds_what_it_saved() {
    let w = Tensor::randn([8, 8], (Kind::Float, device())).set_requires_grad(true);
    let x = Tensor::randn([4, 8], (Kind::Float, device()));
    let (out, r) = scope(strict("graph-inside").keep_grad_mode(true), || {
        // tanh saves its output for backward; sum's output is handed back.
        x.matmul(&w).tanh().sum(Kind::Float)
    })
    .unwrap();
    assert!(r.is_clean(), "{r}");
    assert!(r.held_by(HeldBy::AutogradGraph) >= block(4 * 8 * 4), "{r}");
    drop(out);
}

/// A graph made by work carried to another thread counts too: what it saved is held by it.
#[test]
fn a_graph_made_on_a_carried_thread_holds_what_it_saved() {
    let w = Tensor::randn([8, 8], (Kind::Float, device())).set_requires_grad(true);
    let x = Tensor::randn([4, 8], (Kind::Float, device()));
    let (out, r) = scope(strict("graph-carried"), || {
        let handle = gpu_scope::current().unwrap();
        let (x, w) = (x.shallow_clone(), w.shallow_clone());
        std::thread::spawn(move || {
            handle.in_scope(|| tch::with_grad(|| x.matmul(&w).tanh().sum(Kind::Float)))
        })
        .join()
        .unwrap()
    })
    .unwrap();
    assert!(r.is_clean(), "{r}");
    assert!(r.held_by(HeldBy::AutogradGraph) >= block(4 * 8 * 4), "{r}");
    drop(out);
}

/// A step whose backward only added into gradients made before the scope (gradient
/// accumulation, the optimizer not kept) holds no gradient: its optimizer's first state is
/// called escaped (README, Limits), and the report still says a backward ran and to keep the
/// optimizer, which makes it clean.
#[test]
fn state_after_accumulated_gradients_is_escaped_and_the_report_says_keep_the_optimizer() {
    let _serial = serial();
    let vs = nn::VarStore::new(device());
    let model = nn::linear(vs.root(), 16, 4, Default::default());
    let (x, y) = (floats(2 * 16).view([2, 16]), floats(2 * 4).view([2, 4]));
    let loss = |m: &nn::Linear| m.forward(&x).mse_loss(&y, Reduction::Mean);
    let mut opt = nn::Adam::default().build(&vs, 1e-3).unwrap();
    tch::with_grad(|| loss(&model).backward());
    let r = escaped(scope(strict("accumulated").keep_grad_mode(true), || {
        loss(&model).backward();
        opt.step();
    }));
    assert_eq!(r.held_by(HeldBy::Gradient), 0, "{r}");
    assert!(r.backward, "{r}");
    assert!(
        r.to_string().contains("keep the optimizer: `keep = [opt]`"),
        "{r}"
    );
    let mut opt = nn::Adam::default().build(&vs, 1e-3).unwrap();
    let r = gpu_scope::scope!(keep_grad, on_escape = error, keep = [opt], {
        loss(&model).backward();
        opt.step();
    });
    assert!(r.is_ok(), "{r:?}");
    // The step in a scope of its own, after the backward passes: its state was made with
    // autograd off in a `keep_grad` scope, and the report says to keep the optimizer too.
    let mut opt = nn::Adam::default().build(&vs, 1e-3).unwrap();
    tch::with_grad(|| loss(&model).backward());
    let r = escaped(scope(strict("step alone").keep_grad_mode(true), || {
        opt.step()
    }));
    assert!(!r.backward && r.escaped_without_grad, "{r}");
    assert!(
        r.to_string().contains("keep the optimizer: `keep = [opt]`"),
        "{r}"
    );
    // What a scope inside found escaped (made with autograd off there) is no step's state.
    let r = escaped(scope(strict("around a leak").keep_grad_mode(true), || {
        let inner = ScopeOptions::new("leaks").on_escape(gpu_scope::EscapePolicy::Ignore);
        let _ = scope(inner, || LEAKED.lock().unwrap().push(floats(4)));
    }));
    assert!(!r.escaped_without_grad, "{r}");
    LEAKED.lock().unwrap().clear();
    // No backward: no such hint beside an escape.
    let r = escaped(scope(strict("no backward"), || {
        LEAKED.lock().unwrap().push(floats(4))
    }));
    assert!(
        !r.backward && !r.escaped_without_grad && !r.to_string().contains("optimizer's state"),
        "{r}"
    );
    LEAKED.lock().unwrap().clear();
}

/// Parameters joined by `Tensor::cat` get gradients that are views of one buffer: an
/// optimizer's first-step state for them has no gradient's size, so it is called escaped
/// unless the optimizer is kept (README, Limits), and the report says to keep it.
#[test]
fn state_for_gradients_that_share_a_buffer_needs_the_optimizer_kept() {
    let _serial = serial();
    let vs = nn::VarStore::new(device());
    let p = vs.root();
    let (wq, wk) = (
        p.randn_standard("wq", &[4, 6]),
        p.randn_standard("wk", &[4, 6]),
    );
    let x = Tensor::randn([3, 6], (Kind::Float, device()));
    let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();
    let r = escaped(scope(strict("fused").keep_grad_mode(true), || {
        let w = Tensor::cat(&[&wq, &wk], 0);
        opt.backward_step(&x.matmul(&w.tr()).square().mean(Kind::Float));
    }));
    assert_eq!(
        r.escaped.len(),
        4,
        "two moments for each of two parameters: {r}"
    );
    assert!(r.held_by(HeldBy::Gradient) > 0, "{r}");
    assert!(
        r.to_string().contains("keep the optimizer: `keep = [opt]`"),
        "{r}"
    );
    let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();
    let r = gpu_scope::scope!(keep_grad, on_escape = error, keep = [opt], {
        let w = Tensor::cat(&[&wq, &wk], 0);
        opt.backward_step(&x.matmul(&w.tr()).square().mean(Kind::Float));
    });
    assert!(r.is_ok(), "{r:?}");
}

/// A scope that builds a model with `BatchNorm` and hands back only its optimizer: the
/// running statistics (buffers the optimizer does not hold, the size of the layer's weight)
/// escape, as the README says; the optimizer's variables, made here without a backward pass,
/// say nothing of state. Trained here with autograd on, the report's hint says to keep the
/// `VarStore`. Handing back the `VarStore` too keeps them.
#[test]
fn buffers_beside_an_optimizer_made_in_the_scope_escape() {
    let _serial = serial();
    let build = |keep_store: bool, train: bool| {
        scope(strict("build").keep_grad_mode(train), || {
            let vs = nn::VarStore::new(device());
            let bn = nn::batch_norm1d(vs.root(), 4, Default::default());
            let mut opt = nn::Sgd::default().build(&vs, 1e-2).unwrap();
            if train {
                let x = Tensor::randn([8, 4], (Kind::Float, device()));
                opt.backward_step(&bn.forward_t(&x, true).square().mean(Kind::Float));
            }
            (opt, keep_store.then_some(vs))
        })
    };
    for train in [false, true] {
        let r = escaped(build(false, train).map(|(_, r)| r));
        assert_eq!(r.escaped_bytes, 2 * block(4 * 4), "{r}");
        assert_eq!(r.held_by(HeldBy::OptimizerState), 0, "{r}");
        let hint = r
            .to_string()
            .contains("keep its `VarStore` for the buffers");
        assert_eq!(hint, train, "{r}");
        let (_, r) = build(true, train).unwrap();
        assert!(r.is_clean(), "{r}");
    }
}

/// A scope that builds a model whose parameters are fused by `Tensor::cat` and trains it:
/// their state has no gradient's size (the gradients are views of one buffer), but it has
/// the size of a variable of the kept optimizer, made here and trained here: held on purpose.
/// Handed back, its variables have gradients when it is searched; given to `keep` before the
/// backward pass, they have none yet, and count because a backward pass ran in the scope.
#[test]
fn a_model_built_and_trained_in_the_scope_holds_its_fused_state() {
    let _serial = serial();
    let x = Tensor::randn([3, 6], (Kind::Float, device()));
    for keep_first in [false, true] {
        let step = Scope::enter(strict("fused").keep_grad_mode(true)).unwrap();
        let vs = nn::VarStore::new(device());
        let (wq, wk) = (
            vs.root().randn_standard("wq", &[4, 6]),
            vs.root().randn_standard("wk", &[4, 6]),
        );
        let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();
        if keep_first {
            step.keep(&opt);
        }
        let w = Tensor::cat(&[&wq, &wk], 0);
        opt.backward_step(&x.matmul(&w.tr()).square().mean(Kind::Float));
        drop(w);
        let r = match keep_first {
            true => step.exit(&vs),
            false => step.exit(&(&vs, &opt)),
        };
        let r = r.unwrap();
        assert_eq!(
            r.held_by(HeldBy::OptimizerState),
            4 * block(4 * 6 * 4),
            "{r}"
        );
    }
}

#[gpu_scope::gpu_scope(keep_grad, on_escape = error)]
fn convert_and_step(
    vs: &mut nn::VarStore,
    opt: &mut nn::Optimizer,
    x: &Tensor,
) -> Result<(), gpu_scope::Error> {
    vs.double();
    let (wq, wk) = (vs.root().get("wq").unwrap(), vs.root().get("wk").unwrap());
    let w = Tensor::cat(&[&wq, &wk], 0);
    opt.backward_step(&x.matmul(&w.tr()).square().mean(Kind::Double));
    Ok(())
}

/// A step that converts the store it is given (its variables get storages made here) and
/// trains fused parameters: the optimizer, an argument, holds their state.
#[test]
fn a_step_that_converts_its_store_holds_the_state_of_fused_parameters() {
    let _serial = serial();
    let mut vs = nn::VarStore::new(device());
    let _ = (
        vs.root().randn_standard("wq", &[4, 6]),
        vs.root().randn_standard("wk", &[4, 6]),
    );
    let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();
    let x = Tensor::randn([3, 6], (Kind::Double, device()));
    convert_and_step(&mut vs, &mut opt, &x).unwrap();
}

/// A model built and stepped in a scope whose backward pass ran where the scope did not see
/// it (on a thread it was not carried to, or carried with an enclosing scope's handle): the
/// kept optimizer's variables have gradients, so its state is held, in both scopes.
#[test]
fn a_kept_optimizer_whose_backward_ran_unseen_holds_its_state() {
    let _serial = serial();
    let x = Tensor::randn([3, 6], (Kind::Float, device()));
    for carried in [false, true] {
        let outer = Scope::enter(strict("outer").keep_grad_mode(true)).unwrap();
        let pool = gpu_scope::current().unwrap();
        let step = Scope::enter(strict("step").keep_grad_mode(true)).unwrap();
        let vs = nn::VarStore::new(device());
        let model = nn::linear(vs.root(), 6, 4, Default::default());
        let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();
        let loss = model.forward(&x).square().mean(Kind::Float);
        std::thread::scope(|s| {
            s.spawn(move || match carried {
                true => pool.in_scope(|| loss.backward()),
                false => loss.backward(),
            });
        });
        opt.step();
        let state = 2 * block(4 * 6 * 4) + 2 * block(4 * 4);
        let r = step.exit(&(&vs, &opt)).unwrap();
        assert_eq!(r.held_by(HeldBy::OptimizerState), state, "{r}");
        let r = outer.exit(&(&vs, &opt)).unwrap();
        assert_eq!(r.held_by(HeldBy::OptimizerState), state, "{r}");
    }
}
