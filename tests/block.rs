//! `gpu_scope::scope!` around a block.
mod common;
use common::floats;
use gpu_scope::{last_report, scope};
use tch::Tensor;

#[test]
fn value_is_kept() {
    let t = scope!({
        let a = floats(4);
        &a + &a
    });
    assert_eq!(t.size(), [4]);
    let r = last_report().unwrap();
    assert_eq!(r.kept, 16);
    assert!(r.name.starts_with("tests/block.rs:"), "{}", r.name);
}

#[test]
fn options_and_outer_bindings_kept() {
    let mut cache: Vec<Tensor> = Vec::new();
    let n = scope!(name = "push", on_escape = error, keep = [cache], {
        cache.push(floats(3));
        cache.len()
    })
    .unwrap();
    assert_eq!(n, 1);
    let r = last_report().unwrap();
    assert_eq!((&*r.name, r.kept), ("push", 12));
}

#[test]
fn escape_caught_with_error_policy() {
    let mut outer: Vec<Tensor> = Vec::new();
    let err = scope!(on_escape = error, {
        outer.push(floats(6));
    })
    .unwrap_err();
    assert_eq!(err.report().unwrap().escaped_bytes, 24);
}

fn fallible(fail: bool) -> Result<Tensor, String> {
    let kept = floats(2);
    let t = scope!(on_escape = error, {
        let t = floats(9);
        if fail {
            Err("stop".to_owned())?;
        }
        t
    })
    .map_err(|e| e.to_string())?;
    drop(kept);
    Ok(t)
}

#[test]
fn question_mark_ends_the_block_without_a_check() {
    assert_eq!(fallible(true).unwrap_err(), "stop");
    let r = last_report().unwrap();
    assert!(!r.checked, "{r}");
    assert!(fallible(false).is_ok());
}

#[test]
fn break_hands_live_blocks_to_the_enclosing_scope() {
    let (_t, outer) = gpu_scope::scope(common::strict("outer"), || {
        let mut found = None;
        for i in 0..3 {
            let t = floats(5);
            scope!({
                if i == 1 {
                    found = Some(t.shallow_clone());
                    break;
                }
            });
        }
        found.unwrap()
    })
    .unwrap();
    assert!(outer.is_clean(), "{outer}");
}

#[test]
fn a_comma_after_the_block() {
    let t = scope!(name = "comma", { floats(2) },);
    assert_eq!(t.size(), [2]);
    assert_eq!(last_report().unwrap().name, "comma");
}

struct Holder {
    cache: Vec<Tensor>,
}

#[test]
fn keep_takes_place_expressions() {
    let mut holder = Holder { cache: Vec::new() };
    let extra = floats(2);
    let n = scope!(on_escape = error, keep = [holder.cache, &extra], {
        holder.cache.push(floats(3));
        holder.cache.len()
    })
    .unwrap();
    assert_eq!(n, 1);
    assert!(last_report().unwrap().is_clean());
}

/// A block that always panics (a `todo!()` placeholder) compiles where nothing pins its type,
/// and its scope ends unchecked: what it made and left alive goes to the enclosing scope,
/// which judges it.
#[test]
fn a_block_that_always_panics_ends_its_scope_unchecked() {
    let mut cache = Vec::new();
    let result = gpu_scope::scope(common::strict("outer"), || {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope!(name = "placeholder", {
                cache.push(floats(4));
                todo!()
            });
        }));
        assert!(caught.is_err());
        let inner = last_report().unwrap();
        assert_eq!(inner.name, "placeholder");
        assert!(!inner.checked, "{inner}");
        assert_eq!(inner.kept, common::block(16), "{inner}");
    });
    let outer = common::escaped(result);
    assert_eq!(outer.escaped_bytes, common::block(16), "{outer}");
    assert_eq!(cache.len(), 1);
}

/// A block's value whose type is known only where the block is used (`collect`, `Default`,
/// `into`, a nested block that panics) is taken as the code around it says (this file did not
/// compile when the `keep_grad` hint's look took such a value for a `Result`).
#[test]
fn a_value_typed_by_the_code_around_the_block() {
    let squares: Vec<Tensor> = scope!({ (1..4).map(|n| floats(n) * 2).collect() });
    assert_eq!(squares.len(), 3);
    assert!(last_report().unwrap().is_clean());
    let zero: i64 = scope!({ Default::default() });
    let size: u64 = scope!({ 7u32.into() });
    assert_eq!((zero, size), (0, 7));
    let nested = std::panic::catch_unwind(|| -> i32 { scope!({ scope!({ panic!("inner") }) }) });
    assert!(nested.is_err());
}

fn lookup(hit: bool) -> Option<Tensor> {
    let t = scope!(name = "lookup", {
        'miss: {
            if hit {
                break 'miss;
            }
            return None;
        }
        // Compiled out here: the block goes on to its value.
        #[cfg(not(test))]
        return None;
        floats(2)
    });
    Some(t)
}

/// What leaves a block only sometimes (a `break` to a label inside may skip it) or not at
/// all (under `#[cfg]`) is not taken for its end: the value is kept.
#[test]
fn a_block_that_may_go_on_keeps_its_value() {
    assert!(lookup(false).is_none());
    assert_eq!(lookup(true).unwrap().size(), [2]);
    let r = last_report().unwrap();
    assert!(r.is_clean() && r.kept == 8, "{r}");
    let t = scope!(name = "validated", {
        'check: {
            if r.kept == 8 {
                break 'check;
            }
            panic!("invalid input");
        }
        #[cfg(not(test))]
        unimplemented!("this build cannot do it");
        floats(2)
    });
    assert_eq!(t.size(), [2]);
    assert!(last_report().unwrap().is_clean());
}

/// Under `error` too, what the options' expressions borrow is given back before the block
/// runs.
#[test]
fn options_borrow_nothing_while_the_block_runs() {
    let runs = std::cell::RefCell::new((String::from("counted"), 0));
    let lock = std::sync::Mutex::new(1024_u64);
    let t = scope!(
        name = runs.borrow().0.as_str(),
        max_peak = *lock.lock().unwrap(),
        on_escape = error,
        {
            runs.borrow_mut().1 += 1;
            *lock.lock().unwrap() += 1;
            floats(2)
        }
    )
    .unwrap();
    assert_eq!((t.size(), runs.borrow().1), (vec![2], 1));
    assert_eq!(last_report().unwrap().name, "counted");
}

/// A block whose last statement is a panic under `#[cfg]` ends in a panic where it is compiled
/// in: its scope ends unchecked, as for any panic.
#[test]
fn a_block_ending_in_a_panic_under_cfg() {
    let ended = std::panic::catch_unwind(|| {
        scope!(name = "cfg-panic", {
            let _t = floats(2);
            #[cfg(test)]
            panic!("not in this build");
        })
    });
    assert!(ended.is_err());
    assert!(!last_report().unwrap().checked);
}
