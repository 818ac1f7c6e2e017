//! Every way memory can leave a scope unkept is caught, with the right bytes.
mod common;
use common::{assert_one_escape, escaped, floats, strict};
use gpu_scope::scope;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Mutex;
use tch::Tensor;

static GLOBAL: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL: RefCell<Vec<Tensor>> = const { RefCell::new(Vec::new()) };
}

#[test]
fn global_static() {
    let report = escaped(scope(strict("global"), || {
        GLOBAL.lock().unwrap().push(floats(100))
    }));
    assert_one_escape(&report, 100);
    GLOBAL.lock().unwrap().clear();
}

#[test]
fn thread_local_collection() {
    let report = escaped(scope(strict("tls"), || {
        LOCAL.with(|l| l.borrow_mut().push(floats(30)))
    }));
    assert_one_escape(&report, 30);
}

#[test]
fn leaked_box() {
    let report = escaped(scope(strict("leak"), || {
        Box::leak(Box::new(floats(40)));
    }));
    assert_one_escape(&report, 40);
}

#[test]
fn forgotten() {
    let report = escaped(scope(strict("forget"), || std::mem::forget(floats(50))));
    assert_one_escape(&report, 50);
}

#[test]
fn rc_cycle() {
    struct Node {
        _t: Tensor,
        next: RefCell<Option<Rc<Node>>>,
    }
    let report = escaped(scope(strict("cycle"), || {
        let a = Rc::new(Node {
            _t: floats(60),
            next: RefCell::new(None),
        });
        *a.next.borrow_mut() = Some(a.clone());
    }));
    assert_one_escape(&report, 60);
}

#[test]
fn outer_vec_captured_by_closure() {
    let mut outer = Vec::new();
    let report = escaped(scope(strict("captured"), || outer.push(floats(70))));
    assert_one_escape(&report, 70);
    assert_eq!(outer.len(), 1, "the scope never frees what escaped");
}

#[test]
fn sent_to_a_thread_that_keeps_it() {
    let (tx, rx) = std::sync::mpsc::channel::<Tensor>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let keeper = std::thread::spawn(move || {
        let kept: Vec<Tensor> = rx.iter().collect();
        done_rx.recv().unwrap();
        kept.len()
    });
    let report = escaped(scope(strict("channel"), || tx.send(floats(80)).unwrap()));
    assert_one_escape(&report, 80);
    drop(tx);
    done_tx.send(()).unwrap();
    assert_eq!(keeper.join().unwrap(), 1);
}

type Cache = std::sync::Arc<Mutex<Vec<Tensor>>>;

static STASH: Mutex<Vec<Cache>> = Mutex::new(Vec::new());

#[gpu_scope::gpu_scope(on_escape = error)]
fn stash(cache: Cache) -> Result<(), gpu_scope::Error> {
    cache.lock().unwrap().push(floats(25));
    STASH.lock().unwrap().push(cache);
    Ok(())
}

/// An owned `Arc` argument is searched for what the caller still holds through it: when the
/// caller passed its only handle, the body's global stash holds what it filled.
#[test]
fn an_arc_the_caller_gave_away_and_the_body_stashed() {
    let _serial = common::serial();
    let report = escaped(stash(Cache::default()));
    assert_one_escape(&report, 25);
    STASH.lock().unwrap().clear();
    let cache = Cache::default();
    stash(std::sync::Arc::clone(&cache)).unwrap();
    assert_eq!(cache.lock().unwrap().len(), 1);
    STASH.lock().unwrap().clear();
}
