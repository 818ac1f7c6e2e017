// Every accepted form of each option.
use gpu_scope::{gpu_scope, scope, Tensors};
use tch::Tensor;

fn floats(n: i64) -> Tensor {
    Tensor::zeros([n], tch::kind::FLOAT_CPU)
}

#[derive(Tensors)]
struct Model {
    #[tensors(skip)]
    name: String,
    cache: Vec<Tensor>,
    #[tensors(skip = true)]
    steps: usize,
    #[tensors(skip = false)]
    last: Option<Tensor>,
}

#[derive(Tensors)]
enum Message {
    #[tensors(skip)]
    Text(String),
    #[tensors(skip = false)]
    Data(Tensor),
}

impl Model {
    // A borrowed name, and a budget computed from the arguments.
    #[gpu_scope(name = self.name.as_str(), max_peak = 4 * x.numel() + 1024)]
    fn step(&mut self, x: &Tensor) -> usize {
        self.cache.push(x + 1);
        self.steps += 1;
        self.cache.len()
    }
}

// The name is copied from a borrow: the body still owns `label`.
#[gpu_scope(name = label)]
fn named_by_an_argument(label: String) -> usize {
    label.len()
}

#[gpu_scope(max_peak = 512 * 1024 * 1024)]
fn literal_budget() {}

// Over `i32::MAX`: the literals are typed `u64`.
#[gpu_scope(max_peak = 8 * 1024 * 1024 * 1024, release = "1.5 GiB")]
fn large_budget() {}

#[gpu_scope(max_peak = limit)]
fn budget_from_a_signed_integer(limit: i64) {}

#[gpu_scope(name = format!("step-{}", 1), keep_grad = true)]
fn formatted_name_with_grad() {}

#[gpu_scope(keep_grad = false, release = never, device = tch::Device::Cpu)]
fn without_grad() {}

// `keep_grad` and `release` as expressions, evaluated on entry.
struct Trainer {
    training: bool,
    policy: gpu_scope::ReleasePolicy,
}

impl Trainer {
    #[gpu_scope(keep_grad = self.training, release = self.policy)]
    fn step(&self) -> bool {
        self.training
    }
}

#[gpu_scope(keep_grad = !frozen, release = gpu_scope::ReleasePolicy::Above(1 << 30))]
fn tune(frozen: bool) -> bool {
    frozen
}

fn by_variable(policy: gpu_scope::ReleasePolicy, training: bool) -> usize {
    scope!(release = { policy }, keep_grad = training, { 1 })
}

fn blocks(model: &mut Model) -> usize {
    let x = floats(2);
    let mut cache: Vec<Tensor> = Vec::new();
    let cache_ref = &mut cache;
    // Any place expression in `keep`, and a comma after the block.
    scope!(
        name = "keep-places",
        keep = [*cache_ref, model.cache, &x],
        {
            cache_ref.push(floats(1));
            model.cache.push(floats(1));
            cache_ref.len() + model.cache.len()
        },
    )
}

// An element, a tuple field, what a borrow guard derefs to, and a `&mut` borrow.
fn more_places() -> usize {
    let list = vec![floats(1)];
    let mut pair = (floats(1), floats(1));
    let cell = std::cell::RefCell::new(vec![floats(1)]);
    scope!(keep = [list[0], pair.0, *cell.borrow(), &mut pair.1], {
        cell.borrow_mut().push(floats(1));
        cell.borrow().len()
    })
}

// A field or element of what a call returns (a getter, a borrow guard), a getter's reference
// dereferenced, and a macro.
struct Holder {
    inner: std::cell::RefCell<Inner>,
}

struct Inner {
    cache: Vec<Tensor>,
}

impl Holder {
    fn cache(&self) -> std::cell::Ref<'_, Vec<Tensor>> {
        std::cell::Ref::map(self.inner.borrow(), |i| &i.cache)
    }
}

macro_rules! cache_of {
    ($h:expr) => {
        $h.inner.borrow().cache
    };
}

fn places_behind_calls(holder: &Holder) -> usize {
    scope!(
        keep = [holder.inner.borrow().cache, holder.cache()[0], *holder.cache(), cache_of!(holder)],
        { holder.cache().len() }
    )
}

fn main() {
    let mut model = Model {
        name: "model".to_owned(),
        cache: Vec::new(),
        steps: 0,
        last: None,
    };
    assert_eq!(model.step(&floats(4)), 1);
    assert_eq!(gpu_scope::last_report().unwrap().name, "model");
    assert_eq!(named_by_an_argument("four".to_owned()), 4);
    assert_eq!(gpu_scope::last_report().unwrap().name, "four");
    literal_budget();
    large_budget();
    budget_from_a_signed_integer(1 << 20);
    formatted_name_with_grad();
    without_grad();
    let trainer = Trainer {
        training: true,
        policy: gpu_scope::ReleasePolicy::Never,
    };
    assert!(trainer.step() && !tune(false));
    assert_eq!(by_variable(gpu_scope::ReleasePolicy::Always, false), 1);
    assert_eq!(blocks(&mut model), 3);
    assert_eq!(more_places(), 2);
    let holder = Holder {
        inner: std::cell::RefCell::new(Inner {
            cache: vec![floats(1)],
        }),
    };
    assert_eq!(places_behind_calls(&holder), 1);
    assert!(model.last.is_none() && model.steps == 1);
    let _ = (Message::Text(String::new()), Message::Data(floats(1)));
}
