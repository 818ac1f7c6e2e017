//! Attribution modes: off, escapes are still found and sized, only the operator and tensor
//! shape are missing; on, they return; on-leak (the default in release builds), a place in the
//! code is attributed from the scope after its first leak. (Its own test binary: the switch is
//! process-wide; one test, so that the modes do not race.)
mod common;

use common::{assert_one_escape, escaped, floats, strict};
use gpu_scope::{
    attribution, operator_attribution, set_attribution, set_operator_attribution, Attribution,
    Scope,
};
use std::sync::Mutex;
use tch::Tensor;

static CACHE: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// One place in the code, reached from any thread; leaks when asked to.
fn at_shared_place(leak: bool) -> Result<gpu_scope::ScopeReport, gpu_scope::Error> {
    let scope = Scope::enter(strict("shared place")).unwrap();
    if leak {
        CACHE.lock().unwrap().push(floats(16));
    }
    scope.exit(&())
}

fn leak_one() -> gpu_scope::ScopeReport {
    let scope = Scope::enter(strict("leak")).unwrap();
    CACHE.lock().unwrap().push(floats(256));
    escaped(scope.exit(&()))
}

#[test]
fn attribution_can_be_switched_off_and_on() {
    // The build's default: on with debug assertions, on-leak without.
    let default = if cfg!(debug_assertions) {
        Attribution::Always
    } else {
        Attribution::OnLeak
    };
    // Unless the environment chose another.
    if std::env::var_os("GPU_SCOPE_OPERATORS").is_none() {
        assert_eq!(attribution(), default, "the build's default");
        assert_eq!(operator_attribution(), cfg!(debug_assertions));
    }
    // From on, whatever the build: the steps below switch from there.
    set_attribution(Attribution::Always);
    assert_one_escape(&leak_one(), 256);
    assert_eq!(leak_one().escaped[0].operator, Some("aten::zeros"));

    set_operator_attribution(false);
    let report = leak_one();
    assert_eq!(report.escaped.len(), 1, "{report}");
    let e = &report.escaped[0];
    assert_eq!(
        (e.bytes, e.operator, e.dtype),
        (1024, None, None),
        "{report}"
    );
    assert!(e.shape.is_none());
    assert!(report.to_string().contains("1.00 KiB"), "{report}");
    // The hint says that attribution is off, not what the next scope would do under on-leak.
    assert!(
        report.to_string().contains("attribution is off"),
        "{report}"
    );

    set_operator_attribution(true);
    assert_one_escape(&leak_one(), 256);

    set_attribution(Attribution::OnLeak);
    let leak_here = || {
        let scope = Scope::enter(strict("on-leak")).unwrap();
        CACHE.lock().unwrap().push(floats(64));
        escaped(scope.exit(&()))
    };
    let first = leak_here();
    assert!(
        !first.attributed && first.escaped[0].operator.is_none(),
        "{first}"
    );
    assert!(
        first
            .to_string()
            .contains("next scope here names operators"),
        "{first}"
    );
    let second = leak_here();
    assert!(second.attributed, "{second}");
    assert_eq!(
        second.escaped[0].shape.as_deref(),
        Some(&[64][..]),
        "{second}"
    );
    let elsewhere = leak_one();
    assert!(
        !elsewhere.attributed,
        "other places stay unattributed: {elsewhere}"
    );

    // A thread remembers its answer for a place; a leak there on another thread still turns
    // attribution on for the place's next scope on it.
    let turn = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let other = s.spawn(|| {
            let before = at_shared_place(false).unwrap();
            turn.wait();
            turn.wait();
            (before, at_shared_place(false).unwrap())
        });
        turn.wait();
        let leak = escaped(at_shared_place(true));
        assert!(!leak.attributed, "the place's first leak: {leak}");
        turn.wait();
        let (before, after) = other.join().unwrap();
        assert!(!before.attributed, "before the place leaked: {before}");
        assert!(
            after.attributed,
            "after it leaked on another thread: {after}"
        );
    });
    CACHE.lock().unwrap().clear();
}
