//! The `Tensors` trait: how a scope finds the storages that a kept value owns.
use crate::device::DeviceId;
use crate::ffi;
use crate::ledger::Key;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex, RwLock};

/// The storages found in kept values, plus what the search could not see into.
#[derive(Debug, Default)]
pub struct StorageSet {
    pub(crate) keys: rustc_hash::FxHashSet<Key>,
    /// A kept tensor has an autograd graph whose saved tensors cannot be listed.
    pub(crate) autograd_graph: bool,
    /// Type names of kept values that do not implement [`Tensors`].
    pub(crate) opaque: Vec<&'static str>,
}

impl StorageSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the storage of one tensor (and of its gradient, if any).
    pub fn add_tensor(&mut self, t: &tch::Tensor) {
        let (mut storage, mut nbytes, mut kind, mut index, mut flags) =
            (std::ptr::null_mut(), 0usize, 0, 0, 0);
        // SAFETY: `as_ptr` points at the live `at::Tensor` that `t` owns; the shim only reads it.
        let status = unsafe {
            ffi::gs_tensor_info(
                t.as_ptr().cast(),
                &mut storage,
                &mut nbytes,
                &mut kind,
                &mut index,
                &mut flags,
            )
        };
        if ffi::check(status).is_err() || storage.is_null() {
            return;
        }
        self.keys
            .insert((storage as usize, DeviceId::from_raw(kind, index)));
        if flags & 2 != 0 {
            self.autograd_graph = true;
        }
        if flags & 1 != 0 {
            let grad = t.grad();
            if grad.defined() {
                self.add_tensor(&grad);
            }
        }
    }

    /// Records a kept value whose type does not implement [`Tensors`].
    pub fn add_opaque(&mut self, type_name: &'static str) {
        if !self.opaque.contains(&type_name) {
            self.opaque.push(type_name);
        }
    }

    /// Adds everything that `value` owns.
    pub fn add<T: Tensors + ?Sized>(&mut self, value: &T) {
        value.visit(self);
    }

    /// How many distinct storages were found.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no storage was found.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A value that may own tensors: a scope keeps the device memory of what it hands back
/// through this trait. Derive it with `#[derive(Tensors)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not implement `gpu_scope::Tensors`",
    label = "gpu-scope cannot see which tensors this value owns",
    note = "add `#[derive(gpu_scope::Tensors)]` to the type, or mark the field `#[tensors(skip)]` if it holds no tensors"
)]
pub trait Tensors {
    /// Adds the storages this value owns to `set`.
    fn visit(&self, set: &mut StorageSet);
}

impl Tensors for tch::Tensor {
    fn visit(&self, set: &mut StorageSet) {
        set.add_tensor(self);
    }
}

impl Tensors for tch::nn::VarStore {
    fn visit(&self, set: &mut StorageSet) {
        for t in self.variables().values() {
            set.add_tensor(t);
        }
    }
}

macro_rules! leaf {
    ($($t:ty),* $(,)?) => { $(impl Tensors for $t { fn visit(&self, _: &mut StorageSet) {} })* };
}
leaf!(
    (),
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    str,
    String,
    std::time::Duration,
    tch::Device,
    tch::Kind
);

macro_rules! fields {
    ($($t:ty => [$($f:ident),*]),* $(,)?) => {
        $(impl Tensors for $t {
            fn visit(&self, set: &mut StorageSet) { $(self.$f.visit(set);)* }
        })*
    };
}
fields!(
    tch::nn::Linear => [ws, bs],
    tch::nn::Embedding => [ws],
    tch::nn::BatchNorm => [running_mean, running_var, ws, bs],
    tch::nn::LayerNorm => [ws, bs],
);

impl<ND> Tensors for tch::nn::Conv<ND> {
    fn visit(&self, set: &mut StorageSet) {
        self.ws.visit(set);
        self.bs.visit(set);
    }
}

macro_rules! deref {
    ($($t:ty),* $(,)?) => {
        $(impl<T: Tensors + ?Sized> Tensors for $t {
            fn visit(&self, set: &mut StorageSet) { (**self).visit(set) }
        })*
    };
}
deref!(&T, &mut T, Box<T>, Rc<T>, Arc<T>);

macro_rules! iter {
    ($($t:ty),* $(,)?) => {
        $(impl<T: Tensors> Tensors for $t {
            fn visit(&self, set: &mut StorageSet) { self.iter().for_each(|v| v.visit(set)) }
        })*
    };
}
iter!([T], Vec<T>, VecDeque<T>, Option<T>);

impl<T: Tensors, const N: usize> Tensors for [T; N] {
    fn visit(&self, set: &mut StorageSet) {
        self.as_slice().visit(set)
    }
}

impl<K, V: Tensors, S> Tensors for HashMap<K, V, S> {
    fn visit(&self, set: &mut StorageSet) {
        self.values().for_each(|v| v.visit(set))
    }
}

impl<K, V: Tensors> Tensors for BTreeMap<K, V> {
    fn visit(&self, set: &mut StorageSet) {
        self.values().for_each(|v| v.visit(set))
    }
}

/// Only the `Ok` value is searched: an error is not where tensors are handed back.
impl<T: Tensors, E> Tensors for Result<T, E> {
    fn visit(&self, set: &mut StorageSet) {
        if let Ok(v) = self {
            v.visit(set)
        }
    }
}

impl<T: Tensors + ?Sized> Tensors for RefCell<T> {
    fn visit(&self, set: &mut StorageSet) {
        // A value borrowed mutably right now cannot be read; its owner is the one borrowing.
        if let Ok(v) = self.try_borrow() {
            v.visit(set)
        }
    }
}

impl<T: Tensors + ?Sized> Tensors for Mutex<T> {
    fn visit(&self, set: &mut StorageSet) {
        match self.try_lock() {
            Ok(v) => v.visit(set),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().visit(set),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
    }
}

impl<T: Tensors + ?Sized> Tensors for RwLock<T> {
    fn visit(&self, set: &mut StorageSet) {
        match self.try_read() {
            Ok(v) => v.visit(set),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().visit(set),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
    }
}

macro_rules! tuple {
    ($($name:ident)+) => {
        impl<$($name: Tensors),+> Tensors for ($($name,)+) {
            #[allow(non_snake_case)]
            fn visit(&self, set: &mut StorageSet) {
                let ($($name,)+) = self;
                $($name.visit(set);)+
            }
        }
    };
}
tuple!(A);
tuple!(A B);
tuple!(A B C);
tuple!(A B C D);
tuple!(A B C D E);
tuple!(A B C D E F);
tuple!(A B C D E F G);
tuple!(A B C D E F G H);
