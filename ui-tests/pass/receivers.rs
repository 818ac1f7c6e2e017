// Every receiver form. Each method that stores a tensor in `self` passes only if `self` is
// kept (the default escape policy panics in debug builds).
use gpu_scope::{gpu_scope, Tensors};
use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use tch::Tensor;

fn floats(n: i64) -> Tensor {
    Tensor::zeros([n], tch::kind::FLOAT_CPU)
}

#[derive(Tensors, Default)]
struct Cache {
    items: Vec<Tensor>,
    shared: Mutex<Vec<Tensor>>,
    local: RefCell<Vec<Tensor>>,
}

impl Cache {
    #[gpu_scope]
    fn by_value(self) -> usize {
        self.items.len()
    }

    #[gpu_scope]
    fn by_mut_value(mut self) -> Self {
        self.items.push(floats(1));
        self
    }

    #[gpu_scope]
    fn by_ref(&self) {
        self.shared.lock().unwrap().push(floats(1));
    }

    #[gpu_scope]
    fn by_mut(&mut self) {
        self.items.push(floats(1));
    }

    #[gpu_scope]
    fn typed_ref(self: &Self) {
        self.local.borrow_mut().push(floats(1));
    }

    #[gpu_scope]
    fn typed_mut(self: &mut Self) {
        self.items.push(floats(1));
    }

    #[gpu_scope]
    fn boxed(self: Box<Self>) -> usize {
        self.items.len()
    }

    // The body moves `self` (`get_mut`); the scope still searches it afterwards.
    #[gpu_scope]
    fn pinned(self: Pin<&mut Self>) {
        self.get_mut().items.push(floats(1));
    }

    #[gpu_scope]
    fn pinned_ref(self: Pin<&Self>) {
        self.shared.lock().unwrap().push(floats(1));
    }

    #[gpu_scope]
    fn arc(self: Arc<Self>) {
        self.shared.lock().unwrap().push(floats(1));
    }

    #[gpu_scope]
    fn arc_ref(self: &Arc<Self>) {
        self.shared.lock().unwrap().push(floats(1));
    }

    #[gpu_scope]
    fn rc(self: Rc<Self>) {
        self.local.borrow_mut().push(floats(1));
    }

    // The return value borrows from `self`, so `self` cannot be searched after the body: the
    // returned tensor is kept, and the method allocates nothing else that stays.
    #[gpu_scope]
    fn last_mut(&mut self) -> Option<&mut Tensor> {
        self.items.last_mut()
    }

    #[gpu_scope]
    fn named_lifetime<'a>(&'a mut self, other: &'a Tensor) -> &'a Tensor {
        self.items.first().unwrap_or(other)
    }
}

fn main() {
    let mut cache = Cache::default();
    cache.by_mut();
    cache.typed_mut();
    cache.by_ref();
    cache.typed_ref();
    Pin::new(&mut cache).pinned();
    Pin::new(&cache).pinned_ref();
    assert!(cache.last_mut().is_some());
    let other = floats(1);
    let _ = cache.named_lifetime(&other);
    let cache = cache.by_mut_value();
    assert_eq!(cache.items.len(), 4);
    let arc = Arc::new(cache);
    arc.arc_ref();
    Arc::clone(&arc).arc();
    assert_eq!(arc.shared.lock().unwrap().len(), 4);
    let cache = Arc::try_unwrap(arc).ok().unwrap();
    let rc = Rc::new(Cache::default());
    Rc::clone(&rc).rc();
    assert_eq!(rc.local.borrow().len(), 1);
    assert_eq!(Box::new(Cache::default()).boxed(), 0);
    assert_eq!(cache.by_value(), 4);
}
