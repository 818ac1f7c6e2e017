//! The `Tensors` trait: how a scope finds the storages that a kept value owns.
use crate::device::DeviceId;
use crate::ffi;
use crate::ledger::Key;
use std::borrow::Cow;
use std::cell::{Ref, RefCell, RefMut};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, LinkedList, VecDeque};
use std::num::{Saturating, Wrapping};
use std::ops::{RangeFrom, RangeTo, RangeToInclusive};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

/// How long a scope's exit waits for a kept `Mutex` or `RwLock` that another thread holds
/// before reporting it as not inspected.
const LOCK_WAIT: Duration = Duration::from_millis(50);

/// The storages found in kept values, plus what the search could not see into.
#[derive(Debug, Default)]
pub struct StorageSet {
    pub(crate) keys: Keys,
    /// A kept tensor has an autograd graph whose saved tensors cannot be listed.
    pub(crate) autograd_graph: bool,
    /// Of the kept tensors' graphs: each thread that made one and its newest node's number.
    graphs: smallvec::SmallVec<[(u64, u64); 1]>,
    /// Type names of kept arguments that do not implement [`Tensors`].
    pub(crate) opaque: Vec<&'static str>,
    /// Kept values that could not be inspected (locked elsewhere, or private to tch).
    pub(crate) uninspected: Vec<&'static str>,
    /// Owned arguments of a scoped function whose type borrows from the caller.
    pub(crate) lending: Vec<&'static str>,
    /// Kept tch modules whose tensors tch keeps private (covered when their VarStore is kept).
    pub(crate) private_modules: Vec<&'static str>,
    /// Kept values with private tensors beside listed ones (a TorchScript module's buffers
    /// and attributes beside its parameters), with one listed storage: not inspected only in
    /// a scope that made that storage, and so built the value.
    pub(crate) private_beside: Vec<(&'static str, Key)>,
    pub(crate) var_store: bool,
    /// The addresses of the kept `VarStore`s: a kept `nn::Path` into one of them is covered.
    var_stores: Vec<usize>,
    /// The kept `nn::Path`s, as the words they are made of (one is their `VarStore`'s address).
    paths: Vec<[usize; PATH_WORDS]>,
    /// Visiting a value made before the scope (a shared borrow of a scoped function): its
    /// private modules hold nothing the scope made.
    made_before: bool,
    /// Storage and byte size of each variable of a kept optimizer, and whether it has a
    /// gradient (a backward pass reached it, seen or not): the state an optimizer makes for a
    /// variable has its size.
    pub(crate) optimized: rustc_hash::FxHashSet<(Key, u64, bool)>,
    /// The shared pointers and cells being searched right now, from the kept value down to
    /// here (address, type name, `made_before`): one reached again inside itself is a
    /// reference cycle. Also the shared pointers searched already that something else points
    /// at too (a node two others share): each is searched once, not once per path to it. (A
    /// set of all those searched would wrongly skip a temporary that a hand-written `visit`
    /// makes where an earlier one was freed; a pointer shared with another holder stays
    /// alive, and so keeps its address, while the value is searched.)
    searching: rustc_hash::FxHashSet<(usize, usize, bool)>,
}

impl Drop for StorageSet {
    fn drop(&mut self) {
        crate::ledger::spare::give(std::mem::take(&mut self.keys.many));
    }
}

/// The storage keys found. A scope usually hands back a few tensors: up to `FEW` keys are
/// kept in place and searched in order, with no hashing and no buffer; more go to a hash set
/// (a spare one of this thread's, see `ledger::spare`), and past `MANY` to one set per
/// ledger shard: a large frame's close walks the ledger a shard at a time, and then asks
/// the set of that shard only, small enough to stay in cache.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    few: smallvec::SmallVec<[Key; Keys::FEW]>,
    many: rustc_hash::FxHashSet<Key>,
    by_shard: Vec<rustc_hash::FxHashSet<Key>>,
}

impl Keys {
    const FEW: usize = 4;
    const MANY: usize = 4096;

    pub(crate) fn insert(&mut self, key: Key) {
        if !self.by_shard.is_empty() {
            self.by_shard[crate::ledger::shard_of(key)].insert(key);
        } else if !self.many.is_empty() {
            if self.many.insert(key) && self.many.len() > Self::MANY {
                self.shard();
            }
        } else if !self.few.contains(&key) {
            if self.few.len() < Self::FEW {
                self.few.push(key);
            } else {
                self.spill(key);
            }
        }
    }

    #[cold]
    fn spill(&mut self, key: Key) {
        crate::ledger::spare::refill(&mut self.many);
        self.many.extend(self.few.drain(..));
        self.many.insert(key);
    }

    #[cold]
    fn shard(&mut self) {
        self.by_shard = vec![Default::default(); crate::ledger::SHARDS];
        for key in self.many.drain() {
            self.by_shard[crate::ledger::shard_of(key)].insert(key);
        }
    }

    pub(crate) fn contains(&self, key: &Key) -> bool {
        if !self.by_shard.is_empty() {
            return self.by_shard[crate::ledger::shard_of(*key)].contains(key);
        }
        match self.many.is_empty() {
            true => self.few.contains(key),
            false => self.many.contains(key),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Key> + '_ {
        let sharded = self.by_shard.iter().flat_map(|set| set.iter());
        self.few.iter().chain(self.many.iter()).chain(sharded)
    }

    fn len(&self) -> usize {
        let sharded: usize = self.by_shard.iter().map(|set| set.len()).sum();
        self.few.len() + self.many.len() + sharded
    }
}

impl StorageSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the storages one tensor owns, whatever its layout (dense, sparse, MKLDNN), and
    /// those of its gradient if it is a leaf that has one.
    pub fn add_tensor(&mut self, t: &tch::Tensor) {
        self.add_tensor_key(t);
    }

    /// [`add_tensor`](Self::add_tensor), returning one of the storages it found.
    fn add_tensor_key(&mut self, t: &tch::Tensor) -> Option<Key> {
        self.add_run::<1, 8>(std::slice::from_ref(t))
    }

    /// [`add_tensor`](Self::add_tensor) for each tensor of a run, which the shim reads ahead.
    /// (A short run gets small buffers: they are filled in at every call.)
    pub(crate) fn add_tensors(&mut self, ts: &[tch::Tensor]) {
        if ts.len() <= 8 {
            self.add_run::<8, 16>(ts);
            return;
        }
        for run in ts.chunks(256) {
            self.add_run::<256, 512>(run);
        }
    }

    /// Adds the storages of up to `N` tensors, found in one call to the shim (`S` of them on the
    /// stack, more on the heap), and returns one of them.
    fn add_run<const N: usize, const S: usize>(&mut self, ts: &[tch::Tensor]) -> Option<Key> {
        let ts = &ts[..ts.len().min(N)];
        let mut tensors = [std::ptr::null(); N];
        tensors
            .iter_mut()
            .zip(ts)
            .for_each(|(p, t)| *p = t.as_ptr().cast());
        let none = ffi::Storage {
            ptr: std::ptr::null(),
            dev_type: 0,
            dev_index: 0,
        };
        let (mut found, mut more) = ([none; S], Vec::new());
        let (mut n, mut flags) = (0usize, [0; N]);
        let mut call = |out: &mut [ffi::Storage], n: &mut usize| {
            // SAFETY: each of the first `ts.len()` (at most `N`) pointers points at the live
            // `at::Tensor` that a tensor of `ts` owns; the shim only reads them, writes at most
            // `out.len()` storages and one flag per tensor.
            let status = unsafe {
                ffi::gs_tensor_storages(
                    tensors.as_ptr(),
                    ts.len(),
                    out.as_mut_ptr(),
                    out.len(),
                    n,
                    flags.as_mut_ptr(),
                )
            };
            ffi::check(status).is_ok()
        };
        let mut ok = call(&mut found, &mut n);
        if ok && n > found.len() {
            more.resize(n, none);
            ok = call(&mut more, &mut n);
        }
        if !ok {
            // One tensor the shim could not read: the others are still added, and what only
            // that one keeps is not inspected rather than escaped.
            return match ts.len() {
                1 => {
                    // Unless it was made before the scope (a borrowed argument): then it holds
                    // nothing the scope made.
                    if !self.made_before {
                        self.add_uninspected("tch::Tensor (libtorch raised an error reading it)");
                    }
                    None
                }
                _ => ts
                    .iter()
                    .fold(None, |key, t| self.add_tensor_key(t).or(key)),
            };
        }
        let storages = if more.is_empty() {
            &found[..n]
        } else {
            &more[..n.min(more.len())]
        };
        let key = |s: &ffi::Storage| (s.ptr as usize, DeviceId::from_raw(s.dev_type, s.dev_index));
        storages.iter().for_each(|s| self.keys.insert(key(s)));
        for (t, _) in ts
            .iter()
            .zip(flags)
            .filter(|(_, f)| f & ffi::TENSOR_HAS_GRAPH != 0)
        {
            self.autograd_graph = true;
            // Unread, it counts as made last.
            let (thread, node) = ffi::tensor_graph(t).unwrap_or((0, u64::MAX));
            match self.graphs.iter_mut().find(|(t, _)| *t == thread) {
                Some((_, newest)) => *newest = node.max(*newest),
                None => self.graphs.push((thread, node)),
            }
        }
        storages.first().map(key)
    }

    /// Whether a kept tensor's graph may hold what a scope allocated: it has one that was not
    /// made before `since` (a thread and its count of autograd nodes when the scope was entered
    /// there; `None` when unknown). A graph made before the scope saved nothing the scope made.
    pub(crate) fn graph_since(&self, since: Option<(u64, u64)>) -> bool {
        match since {
            Some((thread, nodes)) => self.graphs.iter().any(|&(t, n)| t != thread || n >= nodes),
            None => self.autograd_graph,
        }
    }

    /// Records a kept value whose tensors are partly private, with `listed`, one of those that
    /// could be listed; without one it is not inspected.
    fn add_private_beside(&mut self, what: &'static str, listed: Option<Key>) {
        match listed {
            Some(key) => self.private_beside.push((what, key)),
            None => self.add_uninspected(what),
        }
    }

    /// Records that a kept value could not be inspected (a lock held elsewhere, a tch type
    /// that keeps its tensors private): memory that nothing else keeps is then reported as not
    /// inspected instead of escaped.
    pub fn add_uninspected(&mut self, what: &'static str) {
        if !self.uninspected.contains(&what) {
            self.uninspected.push(what);
        }
    }

    /// Records an owned argument whose type borrows from the caller (`ctx: Ctx<'_>`): what the
    /// body stored through it cannot be searched, and a report with escapes names it.
    #[doc(hidden)]
    pub fn add_lending(&mut self, what: &'static str) {
        self.lending.push(what);
    }

    /// Records a kept argument whose type does not implement [`Tensors`].
    #[doc(hidden)]
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
        self.keys.len() == 0
    }

    /// The kept values that could not be looked into, for a scope that made `made_here` (see
    /// `private_beside`); empty when there are none.
    #[inline]
    pub(crate) fn blind_to(&self, made_here: impl Fn(Key) -> bool) -> Vec<&'static str> {
        if self.uninspected.is_empty()
            && self.private_modules.is_empty()
            && self.private_beside.is_empty()
            && self.paths.is_empty()
        {
            return Vec::new();
        }
        let mut names = self.uninspected.clone();
        if !self.var_store {
            names.extend(&self.private_modules);
        }
        // A path into a store that is not kept (the caller's second store, beside a kept one).
        let covered = |words: &[usize; PATH_WORDS]| {
            words.iter().any(|w| self.var_stores.contains(w))
                || (self.var_store && self.var_stores.is_empty())
        };
        if self.paths.iter().any(|p| !covered(p)) && !names.contains(&PATH) {
            names.push(PATH);
        }
        names.extend(
            self.private_beside
                .iter()
                .filter(|(_, key)| made_here(*key))
                .map(|(what, _)| *what),
        );
        names
    }

    /// Runs `visit` on the value at `at` (what a shared pointer points at, or a cell) unless
    /// it is being searched already, further up: a kept tree whose nodes point back at their
    /// parents is searched, not followed round forever. With `once` (a shared pointer with
    /// other holders) it is not searched again afterwards either: a value whose nodes share
    /// nodes is searched in time linear in its nodes, not in its paths.
    fn unless_searching<Via: ?Sized, T: ?Sized>(
        &mut self,
        at: *const T,
        once: bool,
        visit: impl FnOnce(&mut Self),
    ) {
        // The type it is reached through tells apart a value and its first field, or a cell
        // and the `Arc` that points at it, which share an address.
        let name = std::any::type_name::<Via>();
        let key = (
            at.cast::<()>() as usize,
            name.as_ptr() as usize,
            self.made_before,
        );
        if self.searching.insert(key) {
            visit(self);
            if !once {
                self.searching.remove(&key);
            }
        }
    }

    /// Runs `visit` with `made_before` set to `on`, and restores it.
    pub(crate) fn made_before(&mut self, on: bool, visit: impl FnOnce(&mut Self)) {
        let was = std::mem::replace(&mut self.made_before, on);
        visit(self);
        self.made_before = was;
    }

    fn add_private_module(&mut self, name: &'static str) {
        if !self.made_before && !self.private_modules.contains(&name) {
            self.private_modules.push(name);
        }
    }

    /// A kept `nn::Path`: covered only where its own `VarStore` is kept too.
    fn add_path(&mut self, path: &tch::nn::Path<'_>) {
        match path_words(path) {
            Some(words) if !self.paths.contains(&words) => self.paths.push(words),
            Some(_) => {}
            None => self.add_private_module(PATH),
        }
    }
}

const PATH: &str = "tch::nn::Path";

/// Words in a `tch::nn::Path`: its `Vec` of names, its group, its `VarStore` reference.
const PATH_WORDS: usize = 5;

/// The words a `nn::Path` is made of, one of them the address of its `VarStore` (a private
/// field of tch's, with no accessor): `None` where its size is not that of the known fields,
/// and it is then taken as covered by any kept `VarStore`.
fn path_words(path: &tch::nn::Path<'_>) -> Option<[usize; PATH_WORDS]> {
    if size_of::<tch::nn::Path<'_>>() != PATH_WORDS * size_of::<usize>() {
        return None;
    }
    // SAFETY: the value is as large as five words and is made of word-sized fields (a `Vec`,
    // a `usize`, a reference), all initialised, with no padding; read as plain words.
    Some(unsafe { std::ptr::read_unaligned(path as *const _ as *const [usize; PATH_WORDS]) })
}

/// A value that may own tensors: a scope keeps the device memory of what it hands back
/// through this trait. Derive it with `#[derive(Tensors)]`; implemented for tch's tensors,
/// stores, modules, optimizers and the other types the README lists (not every model of
/// `tch::vision`: wrap one in a type of yours that derives it, or keep its `VarStore`), and
/// for the std containers.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not implement `gpu_scope::Tensors`",
    label = "gpu-scope cannot see which tensors this value holds",
    note = "for your own type, add `#[derive(gpu_scope::Tensors)]` (mark fields that hold no tensors `#[tensors(skip)]`); for a foreign type, wrap it in a newtype that derives it, or keep its tensors with `gpu_scope::keep(&tensor)`; for a generic `T`, add the bound `T: gpu_scope::Tensors`; a future (an `async` block) is no value to keep: put `#[gpu_scope]` on an `async fn` instead; a closure cannot be looked into, nor a `dyn` trait object unless `Tensors` is a supertrait of its trait (`trait Layer: Module + gpu_scope::Tensors`): return a named type that derives it, holding what the closure captures, with a method in place of the call"
)]
pub trait Tensors {
    /// Adds the storages this value owns to `set`.
    fn visit(&self, set: &mut StorageSet);

    /// Adds the storages of each value of `items` to `set`: what a slice, an array, a `Vec` or
    /// a `VecDeque` of them visits. The default visits each in turn; a run of `tch::Tensor`s is
    /// read ahead, which a scope that hands back thousands of tensors gains from.
    fn visit_slice(items: &[Self], set: &mut StorageSet)
    where
        Self: Sized,
    {
        items.iter().for_each(|v| v.visit(set))
    }

    /// What an owned argument of this type still shares with the caller when it is an `Arc`,
    /// an `Rc` or a `Tensor` (or an `Option`, `Box`, `Pin` or `Cow` of one), or all it reaches
    /// when it is a shared borrow: how a `#[gpu_scope]` function finds that through a generic
    /// or `impl Trait` argument's `Tensors` bound. Sealed: only this crate can implement or
    /// call it (its `Share` may hold a borrow whose lifetime it no longer names).
    #[doc(hidden)]
    fn __gpu_scope_shared(&self, _: Seal) -> crate::__private::Share {
        crate::__private::Share::NONE
    }
}

pub(crate) use seal::Seal;
mod seal {
    /// What [`Tensors::__gpu_scope_shared`](super::Tensors::__gpu_scope_shared) takes: public,
    /// in a private module, so that other crates can neither name nor make it.
    #[derive(Clone, Copy, Debug)]
    pub struct Seal(pub(crate) ());
}

impl Tensors for tch::Tensor {
    fn visit(&self, set: &mut StorageSet) {
        set.add_tensor(self);
    }

    fn __gpu_scope_shared(&self, _: Seal) -> crate::__private::Share {
        use crate::__private::{Owned, Share, ViaShared};
        Share::erase(ViaShared::__gpu_scope_share(&&Owned(self)))
    }

    fn visit_slice(items: &[Self], set: &mut StorageSet) {
        set.add_tensors(items);
    }
}

impl Tensors for tch::nn::VarStore {
    fn visit(&self, set: &mut StorageSet) {
        // As a kept `Mutex` is: waited for a while if held (by another thread, or by an
        // `nn::Entry` of this one, which would never let go), then named as not inspected.
        set.var_stores.push(self as *const Self as usize);
        visit_locked(self, set, || try_lock(&self.variables_))
    }
}

/// A `VarStore`'s variables (its `variables_`): kept as the store is.
impl Tensors for tch::nn::Variables {
    fn visit(&self, set: &mut StorageSet) {
        set.var_store = true;
        // Every variable, trainable or not (`trainable_variables` shares their tensors).
        for t in self.named_variables.values() {
            set.add_tensor(t);
        }
    }
}

/// tch keeps these data types' tensors private: a scope cannot list them. Kept, memory nothing
/// else keeps is reported as not inspected rather than escaped; one the scope did not make
/// (borrowed shared) holds nothing the scope made.
macro_rules! private_data {
    ($($t:ty),* $(,)?) => {
        $(impl Tensors for $t {
            fn visit(&self, set: &mut StorageSet) {
                if !set.made_before {
                    set.add_uninspected(std::any::type_name::<$t>());
                }
            }
        })*
    };
}
private_data!(
    tch::data::Iter2,
    tch::data::TextData,
    tch::data::TextDataIter
);

/// The parameters and their gradients (tch lends out only the trainable variables: its store's
/// buffers are kept by keeping the `VarStore`). The optimizer's own state (Adam's moments,
/// momentum buffers) is private to libtorch; a scope recognises it when it is made (see the
/// README).
impl Tensors for tch::nn::Optimizer {
    fn visit(&self, set: &mut StorageSet) {
        for t in self.trainable_variables() {
            if let Some(key) = set.add_tensor_key(&t) {
                let bytes = t.numel() as u64 * t.kind().elt_size_in_bytes() as u64;
                set.optimized.insert((key, bytes, t.grad().defined()));
            }
        }
    }
}

/// tch keeps these modules' tensors private: a scope cannot list them. They are the variables
/// of the `VarStore` the module was built from, so keeping that `VarStore` keeps them; without
/// it, memory nothing else keeps is reported as not inspected rather than escaped. Which
/// `VarStore` that was cannot be told: any kept one counts (see the README's Limits).
macro_rules! private_module {
    ($($t:ty),* $(,)?) => {
        $(impl Tensors for $t {
            fn visit(&self, set: &mut StorageSet) {
                set.add_private_module(std::any::type_name::<$t>());
            }
        })*
    };
}
private_module!(
    tch::nn::Sequential,
    tch::nn::SequentialT,
    tch::nn::LSTM,
    tch::nn::GRU,
    tch::nn::Func<'_>,
    tch::nn::FuncT<'_>,
);

/// Where modules are built: the variables a body makes through it go to a `VarStore` that the
/// path keeps private. Keeping that `VarStore` keeps them; without it, memory nothing else
/// keeps is reported as not inspected rather than escaped, for a path made before the scope
/// too (its store grows through it).
impl Tensors for tch::nn::Path<'_> {
    fn visit(&self, set: &mut StorageSet) {
        set.made_before(false, |set| set.add_path(self));
    }
}

/// A TorchScript module: its parameters are listed; tch keeps its buffers and attributes
/// private. A module made in the scope (its parameters were) may hold more of the scope's
/// memory: there memory nothing else keeps is reported as not inspected rather than escaped.
/// A module from outside the scope holds nothing the scope made unless stored into it.
impl Tensors for tch::CModule {
    fn visit(&self, set: &mut StorageSet) {
        let mut listed = None;
        for (_, t) in self.named_parameters().unwrap_or_default() {
            listed = set.add_tensor_key(&t).or(listed);
        }
        set.add_private_beside("tch::CModule", listed);
    }
}

/// Its parameters are variables of the `VarStore` it was loaded into (keep that to check
/// them); tch keeps the module itself private, so memory nothing else keeps is reported as not
/// inspected rather than escaped.
impl Tensors for tch::TrainableCModule {
    fn visit(&self, set: &mut StorageSet) {
        set.add_uninspected("tch::TrainableCModule");
    }
}

/// The tensors of a TorchScript value, however nested; an object's attributes are private to
/// tch (not inspected).
impl Tensors for tch::IValue {
    fn visit(&self, set: &mut StorageSet) {
        use tch::IValue as V;
        match self {
            V::Tensor(t) => set.add_tensor(t),
            V::TensorList(ts) => ts.visit(set),
            V::Tuple(vs) | V::GenericList(vs) => vs.visit(set),
            V::GenericDict(pairs) => pairs.iter().for_each(|(k, v)| {
                k.visit(set);
                v.visit(set);
            }),
            V::Object(_) => set.add_uninspected("tch::jit::Object"),
            _ => {}
        }
    }
}

impl Tensors for tch::jit::Object {
    fn visit(&self, set: &mut StorageSet) {
        set.add_uninspected("tch::jit::Object");
    }
}

impl<T: ?Sized> Tensors for std::marker::PhantomData<T> {
    fn visit(&self, _: &mut StorageSet) {}
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
    std::path::Path,
    std::path::PathBuf,
    std::ffi::OsStr,
    std::ffi::OsString,
    std::ffi::CStr,
    std::ffi::CString,
    Duration,
    Instant,
    std::time::SystemTime,
    std::cmp::Ordering,
    std::any::TypeId,
    // Errors returned bare: taken to hold no tensors (an error is not where tensors are handed
    // back, as for `Result`'s `Err`).
    std::fmt::Error,
    std::io::Error,
    tch::TchError,
    tch::Device,
    tch::Kind,
    tch::Layout,
    tch::Reduction,
    tch::Scalar,
    tch::nn::Id,
    tch::nn::Sgd,
    tch::nn::Adam,
    tch::nn::AdamW,
    tch::nn::RmsProp,
    // libtorch's optimizer keeps its parameters and state private: the parameters are the
    // caller's, and its state is recognised when it is made (as for `nn::Optimizer`).
    tch::COptimizer,
    crate::DeviceId,
    crate::ScopeHandle,
    crate::ScopeReport,
    crate::MemoryStats,
    // Layer configurations: sizes and flags, no tensors.
    tch::nn::Init,
    tch::nn::LinearConfig,
    tch::nn::EmbeddingConfig,
    tch::nn::BatchNormConfig,
    tch::nn::LayerNormConfig,
    tch::nn::GroupNormConfig,
    tch::nn::RNNConfig,
    tch::nn::PaddingMode,
    tch::nn::init::FanInOut,
    tch::nn::init::NormalOrUniform,
    tch::nn::init::NonLinearity,
    std::ops::RangeFull,
    // Counters, numbers and what threads wait on.
    std::sync::Condvar,
    std::sync::Barrier,
    std::sync::atomic::AtomicBool,
    std::sync::atomic::AtomicU8,
    std::sync::atomic::AtomicU16,
    std::sync::atomic::AtomicU32,
    std::sync::atomic::AtomicU64,
    std::sync::atomic::AtomicUsize,
    std::sync::atomic::AtomicI8,
    std::sync::atomic::AtomicI16,
    std::sync::atomic::AtomicI32,
    std::sync::atomic::AtomicI64,
    std::sync::atomic::AtomicIsize,
    std::num::NonZeroU8,
    std::num::NonZeroU16,
    std::num::NonZeroU32,
    std::num::NonZeroU64,
    std::num::NonZeroU128,
    std::num::NonZeroUsize,
    std::num::NonZeroI8,
    std::num::NonZeroI16,
    std::num::NonZeroI32,
    std::num::NonZeroI64,
    std::num::NonZeroI128,
    std::num::NonZeroIsize,
);

impl<ND> Tensors for tch::nn::ConvConfigND<ND> {
    fn visit(&self, _: &mut StorageSet) {}
}

impl<ND> Tensors for tch::nn::ConvTransposeConfigND<ND> {
    fn visit(&self, _: &mut StorageSet) {}
}

/// A `Cell` of a `Copy` value, which owns no tensor (a tensor is not `Copy`): not searched,
/// so a reference to a tensor in it (`Cell<Option<&Tensor>>`) keeps nothing.
impl<T: Copy> Tensors for std::cell::Cell<T> {
    fn visit(&self, _: &mut StorageSet) {}
}

impl<T: Tensors> Tensors for std::ops::Range<T> {
    fn visit(&self, set: &mut StorageSet) {
        self.start.visit(set);
        self.end.visit(set);
    }
}

impl<T: Tensors> Tensors for std::ops::RangeInclusive<T> {
    fn visit(&self, set: &mut StorageSet) {
        self.start().visit(set);
        self.end().visit(set);
    }
}

/// The bounds of the other ranges (`a..`, `..b`, `..=b`) and a wrapping or saturating number.
macro_rules! through_field {
    ($($t:ident . $field:tt),* $(,)?) => {$(
        impl<T: Tensors> Tensors for $t<T> {
            fn visit(&self, set: &mut StorageSet) {
                self.$field.visit(set);
            }
        }
    )*};
}
through_field!(
    RangeFrom.start,
    RangeTo.end,
    RangeToInclusive.end,
    Wrapping.0,
    Saturating.0
);

macro_rules! fields {
    ($($t:ty => [$($f:ident),*]),* $(,)?) => {
        $(impl Tensors for $t {
            fn visit(&self, set: &mut StorageSet) { $(self.$f.visit(set);)* }
        })*
    };
}
fields!(
    tch::vision::dataset::Dataset => [train_images, train_labels, test_images, test_labels],
    tch::nn::Linear => [ws, bs],
    tch::nn::Embedding => [ws],
    tch::nn::BatchNorm => [running_mean, running_var, ws, bs],
    tch::nn::LayerNorm => [ws, bs],
    tch::nn::GroupNorm => [ws, bs],
);

impl<ND> Tensors for tch::nn::Conv<ND> {
    fn visit(&self, set: &mut StorageSet) {
        self.ws.visit(set);
        self.bs.visit(set);
    }
}

impl<ND> Tensors for tch::nn::ConvTransposeND<ND> {
    fn visit(&self, set: &mut StorageSet) {
        self.ws.visit(set);
        self.bs.visit(set);
    }
}

impl Tensors for tch::nn::LSTMState {
    fn visit(&self, set: &mut StorageSet) {
        (self.0).0.visit(set);
        (self.0).1.visit(set);
    }
}

impl Tensors for tch::nn::GRUState {
    fn visit(&self, set: &mut StorageSet) {
        self.0.visit(set);
    }
}

/// The methods of a pointer or wrapper that is its pointee to a scope (`Box`, `Cow`,
/// `ManuallyDrop`).
macro_rules! through_deref {
    () => {
        fn visit(&self, set: &mut StorageSet) {
            (**self).visit(set)
        }

        fn __gpu_scope_shared(&self, seal: Seal) -> crate::__private::Share {
            (**self).__gpu_scope_shared(seal)
        }
    };
}

impl<T: Tensors + ?Sized> Tensors for &mut T {
    fn visit(&self, set: &mut StorageSet) {
        (**self).visit(set)
    }

    /// A `&mut` passed as a generic argument moves into the body, which may store through
    /// it; the caller's value cannot be reached after it (not even by a reborrow, as a `&mut`
    /// argument written in the signature is): not inspected, as an owned argument with a
    /// `&mut` written in its type is.
    fn __gpu_scope_shared(&self, _: Seal) -> crate::__private::Share {
        let lent = crate::__private::Uninspected(std::any::type_name::<&mut T>());
        crate::__private::Share::erase(lent)
    }
}

impl<T: Tensors + ?Sized> Tensors for Box<T> {
    through_deref!();
}

impl<T: Tensors + ?Sized> Tensors for &T {
    fn visit(&self, set: &mut StorageSet) {
        (**self).visit(set)
    }

    /// A shared borrow passed as a generic argument is the caller's, as a `&T` argument is.
    fn __gpu_scope_shared(&self, _: Seal) -> crate::__private::Share {
        crate::__private::Share::erase(crate::__private::SharedBorrow(*self))
    }
}

macro_rules! shared {
    ($($t:ident),* $(,)?) => {
        $(impl<T: Tensors + ?Sized> Tensors for $t<T> {
            fn visit(&self, set: &mut StorageSet) {
                let shared = $t::strong_count(self) > 1;
                set.unless_searching::<Self, T>($t::as_ptr(self), shared, |set| (**self).visit(set))
            }

            fn __gpu_scope_shared(&self, _: Seal) -> crate::__private::Share {
                use crate::__private::{Owned, Share, ViaShared};
                Share::erase(ViaShared::__gpu_scope_share(&&Owned(self)))
            }
        })*
    };
}
shared!(Rc, Arc);

/// A pinned pointer is visited through its pointee and shares what its pointer does: a
/// `Pin<Arc<T>>` what an `Arc<T>` does.
impl<P: Tensors + std::ops::Deref<Target: Tensors>> Tensors for Pin<P> {
    fn visit(&self, set: &mut StorageSet) {
        (**self).visit(set)
    }

    fn __gpu_scope_shared(&self, seal: Seal) -> crate::__private::Share {
        // SAFETY: `Pin<P>` is `repr(transparent)` over `P`, which the standard library does
        // not lend out. Only this crate can implement `__gpu_scope_shared` (sealed by `Seal`),
        // and its impls only read through the pointer (a `Share` holds a `Weak` or a shared
        // borrow of the pointee), so nothing moves the pinned value.
        let pointer = unsafe { &*(self as *const Pin<P>).cast::<P>() };
        pointer.__gpu_scope_shared(seal)
    }
}

impl<T: Tensors + ToOwned + ?Sized> Tensors for Cow<'_, T>
where
    T::Owned: Tensors,
{
    through_deref!();
}

macro_rules! iter {
    ($($t:ty),* $(,)?) => {
        $(impl<T: Tensors> Tensors for $t {
            fn visit(&self, set: &mut StorageSet) { self.iter().for_each(|v| v.visit(set)) }
        })*
    };
}
iter!(LinkedList<T>, BinaryHeap<T>, BTreeSet<T>);

impl<T: Tensors> Tensors for Option<T> {
    fn visit(&self, set: &mut StorageSet) {
        self.iter().for_each(|v| v.visit(set))
    }

    fn __gpu_scope_shared(&self, seal: Seal) -> crate::__private::Share {
        self.as_ref().map_or(crate::__private::Share::NONE, |v| {
            v.__gpu_scope_shared(seal)
        })
    }
}

impl<T: Tensors, S> Tensors for HashSet<T, S> {
    fn visit(&self, set: &mut StorageSet) {
        self.iter().for_each(|v| v.visit(set))
    }
}

impl<T: Tensors> Tensors for [T] {
    fn visit(&self, set: &mut StorageSet) {
        T::visit_slice(self, set)
    }
}

impl<T: Tensors> Tensors for Vec<T> {
    fn visit(&self, set: &mut StorageSet) {
        T::visit_slice(self, set)
    }
}

impl<T: Tensors> Tensors for VecDeque<T> {
    fn visit(&self, set: &mut StorageSet) {
        let (front, back) = self.as_slices();
        T::visit_slice(front, set);
        T::visit_slice(back, set);
    }
}

/// A cell or lock can be filled through a shared borrow: its contents may be the scope's own
/// even when the cell was made before it.
impl<T: Tensors> Tensors for std::sync::OnceLock<T> {
    fn visit(&self, set: &mut StorageSet) {
        set.unless_searching::<Self, Self>(self, false, |set| {
            set.made_before(false, |set| self.get().visit(set))
        })
    }
}

impl<T: Tensors> Tensors for std::cell::OnceCell<T> {
    fn visit(&self, set: &mut StorageSet) {
        set.unless_searching::<Self, Self>(self, false, |set| {
            set.made_before(false, |set| self.get().visit(set))
        })
    }
}

/// What the weak pointer still points at, if anything.
impl<T: Tensors + ?Sized> Tensors for std::rc::Weak<T> {
    fn visit(&self, set: &mut StorageSet) {
        if let Some(value) = self.upgrade() {
            value.visit(set)
        }
    }
}

/// What the weak pointer still points at, if anything.
impl<T: Tensors + ?Sized> Tensors for std::sync::Weak<T> {
    fn visit(&self, set: &mut StorageSet) {
        if let Some(value) = self.upgrade() {
            value.visit(set)
        }
    }
}

/// What is left to iterate (a function that returns `vec.into_iter()`).
impl<T: Tensors> Tensors for std::vec::IntoIter<T> {
    fn visit(&self, set: &mut StorageSet) {
        self.as_slice().visit(set)
    }
}

impl<T: Tensors, const N: usize> Tensors for [T; N] {
    fn visit(&self, set: &mut StorageSet) {
        self.as_slice().visit(set)
    }
}

/// The values: a key type need not implement `Tensors`, and a key's tensors are not searched.
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

/// Only the `Ok` value is searched, at any depth: an error is not where tensors are handed
/// back (and its type need not implement `Tensors`).
impl<T: Tensors, E> Tensors for Result<T, E> {
    fn visit(&self, set: &mut StorageSet) {
        if let Ok(v) = self {
            v.visit(set)
        }
    }
}

impl<T: Tensors + ?Sized> Tensors for RefCell<T> {
    fn visit(&self, set: &mut StorageSet) {
        // Borrowed mutably right now: by this thread, further up the stack, which cannot be
        // waited for.
        set.unless_searching::<Self, Self>(self, false, |set| match self.try_borrow() {
            Ok(v) => set.made_before(false, |set| v.visit(set)),
            Err(_) => set.add_uninspected(std::any::type_name::<Self>()),
        })
    }
}

/// Tries `attempt` until it gives a value or `LOCK_WAIT` has passed.
fn wait_for<G>(mut attempt: impl FnMut() -> Option<G>) -> Option<G> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        if let Some(g) = attempt() {
            return Some(g);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Searches what a lock guards (unless it is being searched already, further up), after
/// waiting for it; a lock held elsewhere is named as not inspected.
fn visit_locked<L: ?Sized, G: std::ops::Deref<Target: Tensors>>(
    lock: &L,
    set: &mut StorageSet,
    attempt: impl FnMut() -> Option<G>,
) {
    set.unless_searching::<L, L>(lock, false, |set| match wait_for(attempt) {
        Some(v) => set.made_before(false, |set| v.visit(set)),
        None => set.add_uninspected(std::any::type_name::<L>()),
    })
}

/// A guard or borrow handed back (`-> Ref<'_, Vec<Tensor>>`): what it reaches, read through it.
macro_rules! guard {
    ($($t:ident),* $(,)?) => {
        $(impl<T: Tensors + ?Sized> Tensors for $t<'_, T> {
            fn visit(&self, set: &mut StorageSet) {
                (**self).visit(set)
            }
        })*
    };
}
guard!(Ref, RefMut, MutexGuard, RwLockReadGuard, RwLockWriteGuard);

impl<T: Tensors> Tensors for std::cmp::Reverse<T> {
    fn visit(&self, set: &mut StorageSet) {
        self.0.visit(set)
    }
}

impl<T: Tensors + ?Sized> Tensors for std::mem::ManuallyDrop<T> {
    through_deref!();
}

/// The guard, if the lock is free now (poisoned or not).
fn try_lock<T: ?Sized>(lock: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match lock.try_lock() {
        Ok(v) => Some(v),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl<T: Tensors + ?Sized> Tensors for Mutex<T> {
    fn visit(&self, set: &mut StorageSet) {
        visit_locked(self, set, || try_lock(self))
    }
}

impl<T: Tensors + ?Sized> Tensors for RwLock<T> {
    fn visit(&self, set: &mut StorageSet) {
        visit_locked(self, set, || match self.try_read() {
            Ok(v) => Some(v),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        })
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
tuple!(A B C D E F G H I);
tuple!(A B C D E F G H I J);
tuple!(A B C D E F G H I J K);
tuple!(A B C D E F G H I J K L);

#[cfg(test)]
mod tests {
    use super::*;

    /// Past `MANY` keys the set is split by ledger shard: every key is still found once,
    /// and nothing else is.
    #[test]
    fn a_large_key_set_finds_each_key_once() {
        let device = DeviceId::from_raw(0, -1);
        let key = |n: usize| (0x10_0000 + n * 64, device);
        let n = 3 * Keys::MANY;
        let mut keys = Keys::default();
        for i in 0..n {
            keys.insert(key(i));
            keys.insert(key(i / 2));
        }
        assert!(!keys.by_shard.is_empty(), "split");
        assert_eq!(keys.len(), n);
        assert!((0..n).all(|i| keys.contains(&key(i))));
        assert!(!keys.contains(&key(n)));
        let mut seen: Vec<Key> = keys.iter().copied().collect();
        assert_eq!(seen.len(), n);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), n, "each key once");
    }
}
