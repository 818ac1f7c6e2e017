//! What a scope does on a CUDA device: library workspaces and autocast's cache held on purpose,
//! block and requested sizes, reports and release per device, no synchronize without a
//! release, the profiler left alone, an allocator that reports nothing said to be "not
//! tracked". On the fake CUDA device (`bash .ci/fake-cuda`) or a real GPU; elsewhere each test
//! says why it is skipped.
mod common;

use common::{child_ok, escaped, in_child, strict};
use gpu_scope::{
    memory_stats, scope, DeviceId, DeviceReport, HeldBy, ReleasePolicy, ScopeOptions, ScopeReport,
};
use std::sync::Mutex;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

/// The CUDA devices of this process, or `None` (after saying why) when there are none.
fn cuda(needed: usize) -> Option<usize> {
    let info = gpu_scope::device_info();
    if info.devices < needed {
        println!(
            "skipped: needs {needed} CUDA device(s), this process has {} (backend `{}`)",
            info.devices, info.backend
        );
        return None;
    }
    Some(info.devices)
}

fn fake() -> bool {
    gpu_scope::device_info().backend == "fake-cuda"
}

fn floats(n: i64, device: usize) -> Tensor {
    Tensor::zeros([n], (Kind::Float, Device::Cuda(device)))
}

/// The report's row for the device libtorch names `name` (`cuda:1`).
fn row<'a>(r: &'a ScopeReport, name: &str) -> &'a DeviceReport {
    (r.devices.iter())
        .find(|d| d.device.is_some_and(|x| x.to_string() == name))
        .unwrap_or_else(|| panic!("no {name} row: {r}"))
}

#[cfg(feature = "fake-cuda")]
extern "C" {
    fn gs_fake_cuda_synchronizations() -> u64;
    fn gs_test_profiler_start(profile_memory: i32) -> i32;
    fn gs_test_profiler_stop() -> i64;
}

#[test]
fn reports_give_block_and_requested_bytes() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    let r = escaped(scope(strict("sizes"), || {
        SINK.lock().unwrap().push(floats(100, 0))
    }));
    SINK.lock().unwrap().clear();
    let e = &r.escaped[0];
    assert_eq!((e.bytes, e.requested), (512, Some(400)), "{r}");
    assert_eq!((r.escaped_bytes, r.escaped_requested), (512, 400));
    let table = r.to_string();
    assert!(table.contains("requested"), "{table}");
    assert!(table.contains("allocator blocks"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["escaped"][0]["requested"], 400);
    assert_eq!(json["escaped"][0]["bytes"], 512);
}

/// Filling factories allocate on the device only, on a GPU as on the fake device (whose fills
/// run in place, not through the CPU): the report has the device's row and no `cpu` one.
#[test]
fn filled_tensors_allocate_on_the_device_only() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    let on = (Kind::Float, Device::Cuda(0));
    let (made, r) = scope(strict("fills"), || {
        [
            Tensor::zeros([100], on),
            Tensor::ones([100], on),
            Tensor::full([100], 2.5, on),
        ]
    })
    .unwrap();
    assert_eq!(r.devices.len(), 1, "{r}");
    assert_eq!(
        (row(&r, "cuda:0").allocations, r.allocations),
        (3, 3),
        "{r}"
    );
    let read: Vec<f64> = made.iter().map(|t| t.double_value(&[99])).collect();
    assert_eq!(read, [0.0, 1.0, 2.5]);
}

/// The first matrix product of a thread makes a cuBLAS workspace that libtorch keeps: shown
/// on its own line, never an escape; a real leak beside it is still found.
#[test]
fn library_workspaces_are_held_not_escaped() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    // Workspaces belong to pooled library handles: give back those of earlier threads.
    gpu_scope::clear_workspaces().unwrap();
    std::thread::spawn(|| {
        let a = Tensor::ones([32, 32], (Kind::Float, Device::Cuda(0)));
        let (_, r) = scope(strict("first-matmul"), || drop(a.matmul(&a))).unwrap();
        let held = r.held_by(HeldBy::Workspace("cuBLAS workspace"));
        assert!(r.is_clean() && held > 0, "{r}");
        if fake() {
            assert_eq!(held, 4 << 20, "{r}");
        }
        assert!(r.to_string().contains("cuBLAS workspace"), "{r}");
        let (_, again) = scope(strict("second-matmul"), || drop(a.matmul(&a))).unwrap();
        assert_eq!(again.held_by(HeldBy::Workspace("cuBLAS workspace")), 0);
        let leak = escaped(scope(strict("leak"), || {
            SINK.lock().unwrap().push(a.matmul(&a))
        }));
        assert_eq!(leak.escaped.len(), 1, "{leak}");
        SINK.lock().unwrap().clear();
        let before = memory_stats(Device::Cuda(0)).unwrap().allocated;
        gpu_scope::clear_workspaces().unwrap();
        let after = memory_stats(Device::Cuda(0)).unwrap().allocated;
        assert!(after < before, "clear_workspaces gives them back");
        // A budget the new workspace alone goes over: the error says to make it first.
        let err = scope(strict("budget").max_peak(1 << 20), || drop(a.matmul(&a))).unwrap_err();
        assert!(matches!(err, gpu_scope::Error::OverBudget(_)), "{err}");
        assert!(
            err.to_string().contains("a library workspace made here"),
            "{err}"
        );
        // Gone again: a workspace left in a segment keeps the segment from other tests' releases.
        gpu_scope::clear_workspaces().unwrap();
    })
    .join()
    .unwrap();
}

/// Any cuBLAS product makes the thread's workspace, not only matrix products: a matrix-vector
/// product (`mv`, a 2-D by 1-D `matmul`) and a dot product too.
#[test]
fn every_cublas_product_makes_the_workspace() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    type Product = fn(&Tensor, &Tensor) -> Tensor;
    let products: [(&str, Product); 3] = [
        ("mv", |m, v| m.mv(v)),
        ("matmul 2-D by 1-D", |m, v| m.matmul(v)),
        ("dot", |_, v| v.dot(v)),
    ];
    for (name, product) in products {
        gpu_scope::clear_workspaces().unwrap();
        std::thread::spawn(move || {
            let m = Tensor::ones([8, 8], (Kind::Float, Device::Cuda(0)));
            let v = Tensor::ones([8], (Kind::Float, Device::Cuda(0)));
            let (_, r) = scope(strict("first-product"), || drop(product(&m, &v))).unwrap();
            let held = r.held_by(HeldBy::Workspace("cuBLAS workspace"));
            assert!(r.is_clean() && held > 0, "{name}: {r}");
        })
        .join()
        .unwrap();
    }
    gpu_scope::clear_workspaces().unwrap();
}

/// A workspace made in an inner scope leaves tracking there; the enclosing scope, which counted
/// its allocation, says who holds it too.
#[test]
fn an_inner_scopes_workspace_is_held_in_the_enclosing_report() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    gpu_scope::clear_workspaces().unwrap();
    std::thread::spawn(|| {
        let a = Tensor::ones([32, 32], (Kind::Float, Device::Cuda(0)));
        let (inner, outer) = scope(strict("epoch"), || {
            let (_, inner) = scope(strict("first-matmul"), || drop(a.matmul(&a))).unwrap();
            inner
        })
        .unwrap();
        let held = inner.held_by(HeldBy::Workspace("cuBLAS workspace"));
        assert!(held > 0, "{inner}");
        assert!(outer.is_clean(), "{outer}");
        assert_eq!(
            outer.held_by(HeldBy::Workspace("cuBLAS workspace")),
            held,
            "{outer}"
        );
        assert!(outer.to_string().contains("cuBLAS workspace"), "{outer}");
        gpu_scope::clear_workspaces().unwrap();
        // Given back inside the enclosing scope: freed there, held by nobody.
        let (_, outer) = scope(strict("epoch"), || {
            scope(strict("first-matmul"), || drop(a.matmul(&a))).unwrap();
            gpu_scope::clear_workspaces().unwrap();
        })
        .unwrap();
        assert_eq!(
            outer.held_by(HeldBy::Workspace("cuBLAS workspace")),
            0,
            "{outer}"
        );
        assert!(
            outer.is_clean() && outer.freed == outer.allocated,
            "{outer}"
        );
    })
    .join()
    .unwrap();
}

/// libtorch empties every device's cache at once: what a device the scope did not use gave
/// back is in the report too, on a row of its own.
#[test]
fn a_release_reports_what_every_device_gave_back() {
    let _serial = common::serial();
    if cuda(2).is_none() {
        return;
    }
    gpu_scope::empty_cache(Device::Cuda(0)).unwrap();
    // A segment of its own on cuda:1 (see below), cached after the drop.
    drop(floats(8 << 20, 1));
    assert!(memory_stats(Device::Cuda(1)).unwrap().releasable >= 32 << 20);
    let (_, r) = scope(strict("only-cuda0"), || drop(floats(8 << 20, 0))).unwrap();
    let other = row(&r, "cuda:1");
    assert!(other.cache_released >= 32 << 20, "{r}");
    assert_eq!(other.allocations, 0, "{r}");
    let rows: u64 = r.devices.iter().map(|d| d.cache_released).sum();
    assert_eq!(r.cache_released, rows, "{r}");
    assert!(r.is_clean(), "{r}");
}

/// The default release looks only at the caches of the devices the scope allocated on: a
/// request on cuda:0 (whose cache has nothing to give back) leaves cuda:1's cache as it is,
/// which another thread may keep warm on purpose, even when the request unloaded a model
/// there; `always` gives that back.
#[test]
fn the_default_release_leaves_the_cache_of_a_device_the_scope_did_not_allocate_on() {
    let _serial = common::serial();
    if cuda(2).is_none() {
        return;
    }
    gpu_scope::empty_cache(Device::Cuda(0)).unwrap();
    // Small blocks share a segment that `resident` keeps in use: nothing releasable there.
    let resident = floats(1000, 0);
    let calls = gpu_scope::__introspect::empty_cache_calls;
    for policy in [ReleasePolicy::Outermost, ReleasePolicy::Always] {
        let model = floats(8 << 20, 1);
        let before = calls();
        let (_, r) = scope(strict("request").release(policy), move || {
            drop(model);
            drop(floats(100, 0));
        })
        .unwrap();
        let releasable = memory_stats(Device::Cuda(1)).unwrap().releasable;
        if policy == ReleasePolicy::Outermost {
            assert!(!r.released && calls() == before, "{r}");
            assert!(releasable >= 32 << 20, "cuda:1's cache kept: {r}");
        } else {
            assert!(r.released, "{r}");
            assert!(row(&r, "cuda:1").cache_released >= 32 << 20, "{r}");
            assert_eq!(releasable, 0);
        }
    }
    drop(resident);
}

#[test]
fn reports_and_release_are_per_device() {
    let _serial = common::serial();
    if cuda(2).is_none() {
        return;
    }
    gpu_scope::empty_cache(Device::Cuda(0)).unwrap();
    let baseline: Vec<u64> = (0..2)
        .map(|d| memory_stats(Device::Cuda(d)).unwrap().reserved)
        .collect();
    // 32 MiB each: more than the free part of any segment an earlier test left in the cache
    // (the fake's cuBLAS workspace holds 4 MiB of a 20 MiB segment for good; a real one
    // on an H100 or H200 takes a 32 MiB segment of its own), so each block gets a
    // segment of its own, which the release gives back.
    let r = escaped(scope(strict("two-devices"), || {
        drop(floats(8 << 20, 0));
        drop(floats(8 << 20, 1));
        SINK.lock().unwrap().push(floats(10, 1));
    }));
    SINK.lock().unwrap().clear();
    let names: Vec<String> = r
        .devices
        .iter()
        .flat_map(|d| d.device)
        .map(|d| d.to_string())
        .collect();
    assert!(
        names.contains(&"cuda:0".into()) && names.contains(&"cuda:1".into()),
        "{r}"
    );
    assert_eq!(r.escaped[0].device.to_string(), "cuda:1");
    assert_eq!(row(&r, "cuda:1").escaped, 512);
    assert_eq!(row(&r, "cuda:0").escaped, 0);
    assert!(row(&r, "cuda:0").cache_released >= 32 << 20, "{r}");
    assert!(row(&r, "cuda:1").cache_released >= 32 << 20, "{r}");
    let reserved = |d| memory_stats(Device::Cuda(d)).unwrap().reserved;
    assert_eq!(reserved(0), baseline[0]);
    assert_eq!(
        reserved(1),
        baseline[1] + (2 << 20),
        "only the escaped block's small segment"
    );
    assert!(r.to_string().contains("cuda:1"));
}

/// The default release runs at the outermost exit only, only when the scope allocated on the
/// device. The check never synchronizes the device; only a release's `cudaFree` does (counted
/// on the fake device).
#[test]
fn release_and_synchronize_only_when_needed() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    let calls = gpu_scope::__introspect::empty_cache_calls;
    #[cfg(feature = "fake-cuda")]
    // SAFETY: reads a counter.
    let syncs = || unsafe { gs_fake_cuda_synchronizations() };
    #[cfg(not(feature = "fake-cuda"))]
    let syncs = || 0;
    let (c0, s0) = (calls(), syncs());
    for _ in 0..1000 {
        scope(strict("cpu-only"), || drop(common::cpu_floats(16))).unwrap();
    }
    assert_eq!(calls(), c0, "no device allocation: no emptyCache");
    assert_eq!(syncs(), s0, "no release, no synchronize");
    scope(strict("outer"), || {
        for _ in 0..1000 {
            scope(strict("inner"), || drop(floats(1024, 0))).unwrap();
        }
        assert_eq!(syncs(), s0, "nested scopes release nothing: no synchronize");
    })
    .unwrap();
    assert_eq!(calls() - c0, 1, "once, when the outermost scope ended");
    let s1 = syncs();
    if cfg!(feature = "fake-cuda") {
        assert!(s1 > s0, "the release's cudaFree synchronizes");
    }
    let (_, never) = scope(strict("never").release(ReleasePolicy::Never), || {
        drop(floats(1 << 20, 0))
    })
    .unwrap();
    assert!(!never.released && never.cache_released == 0);
    let (_, above) = scope(
        strict("above").release(ReleasePolicy::Above(1 << 30)),
        || drop(floats(1 << 20, 0)),
    )
    .unwrap();
    assert!(!above.released, "4 MiB unused is under the 1 GiB threshold");
    assert_eq!(syncs(), s1, "checked, not released: no synchronize");
    let (_, above) = scope(
        strict("above-1-MiB").release(ReleasePolicy::Above(1 << 20)),
        || drop(floats(1 << 20, 0)),
    )
    .unwrap();
    assert!(above.released, "4 MiB unused is over 1 MiB: {above}");
    assert!(above.cache_released >= 4 << 20, "{above}");
    // The macros take a policy expression too, evaluated at entry.
    let policy = ReleasePolicy::Never;
    gpu_scope::scope!(name = "never-expr", release = { policy }, {
        drop(floats(1 << 20, 0))
    });
    let never = gpu_scope::last_report().unwrap();
    assert!(!never.released && never.cache_released == 0, "{never}");
    gpu_scope::scope!(
        name = "above-expr",
        release = ReleasePolicy::Above(1 << 20),
        { drop(floats(1 << 20, 0)) }
    );
    let above = gpu_scope::last_report().unwrap();
    assert!(above.released, "4 MiB unused is over 1 MiB: {above}");
    let c1 = calls();
    scope(strict("outer"), || {
        let (_, always) = scope(strict("always").release(ReleasePolicy::Always), || {
            drop(floats(1 << 20, 0))
        })
        .unwrap();
        assert!(
            always.released,
            "nested, and released all the same: {always}"
        );
        assert!(always.cache_released >= 4 << 20, "{always}");
    })
    .unwrap();
    assert!(calls() > c1);
}

/// A scope that only frees device memory (one unloading a model) gives the cache back under
/// `always` and a size, as their docs say; the default costs nothing there.
#[test]
fn a_scope_that_only_frees_releases_under_always_and_a_size() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    for policy in [ReleasePolicy::Always, ReleasePolicy::Above(1 << 20)] {
        let model = floats(1 << 20, 0);
        let (_, r) = scope(strict("unload").release(policy), || drop(model)).unwrap();
        assert!(r.released, "{policy:?}: {r}");
        assert!(r.cache_released >= 4 << 20, "{policy:?}: {r}");
    }
    let model = floats(1 << 20, 0);
    let calls = gpu_scope::__introspect::empty_cache_calls;
    let before = calls();
    let (_, r) = scope(strict("unload-default"), || drop(model)).unwrap();
    assert!(!r.released && r.cache_released == 0, "{r}");
    assert_eq!(calls(), before);
    gpu_scope::empty_cache(Device::Cuda(0)).unwrap();
}

/// autocast caches lower-precision copies of weights; a scope inside an autocast region clears
/// that cache on exit and shows what it held, instead of calling it escaped.
#[test]
fn autocast_cache_is_not_an_escape() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    let vs = nn::VarStore::new(Device::Cuda(0));
    let layer = nn::linear(vs.root(), 64, 64, Default::default());
    let x = Tensor::ones([4, 64], (Kind::Float, Device::Cuda(0)));
    let (y, r) = tch::autocast(true, || {
        scope(strict("autocast").keep_grad_mode(true), || {
            layer.forward(&x).detach()
        })
        .unwrap()
    });
    assert_eq!(y.kind(), Kind::Half);
    assert!(r.is_clean(), "{r}");
    assert!(r.held_by(HeldBy::AutocastCache) > 0, "{r}");
    // The cleared casts were freed: counted once, as freed, not also as held.
    let row = r
        .devices
        .iter()
        .find(|d| d.device == Some(DeviceId::from(Device::Cuda(0))));
    let row = row.expect("a cuda:0 row");
    assert_eq!(row.allocated, row.freed + row.kept + row.held, "{r}");
}

/// Work carried into a scope on a thread inside an autocast region leaves casts in autocast's
/// (process-wide) cache, which the scope's exit does not clear (autocast is off on the scope's
/// own thread): the handle clears it when the work returns, so they are freed, not escaped.
#[test]
fn carried_work_in_an_autocast_region_leaves_no_casts_behind() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    let (handle_tx, handle_rx) = std::sync::mpsc::channel::<gpu_scope::ScopeHandle>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let vs = nn::VarStore::new(Device::Cuda(0));
        let layer = nn::linear(vs.root(), 64, 64, Default::default());
        let x = Tensor::ones([4, 64], (Kind::Float, Device::Cuda(0)));
        let here = handle_rx.recv().unwrap();
        tch::autocast(true, || {
            here.in_scope(|| assert_eq!(layer.forward(&x).kind(), Kind::Half));
            done_tx.send(()).unwrap();
            // The autocast region outlives the scope.
            go_rx.recv().unwrap();
        });
    });
    let result = scope(strict("carried-autocast"), || {
        handle_tx.send(gpu_scope::current().unwrap()).unwrap();
        done_rx.recv().unwrap();
    });
    go_tx.send(()).unwrap();
    worker.join().unwrap();
    let (_, r) = result.unwrap_or_else(|e| panic!("{e}"));
    assert!(r.is_clean(), "{r}");
    assert!(r.freed > 0, "{r}");
}

/// A scope ended by a panic (caught by a service that goes on serving) releases the cache
/// as one that returned does.
#[test]
fn an_outermost_scope_ended_by_a_panic_releases_the_cache() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    let calls = gpu_scope::__introspect::empty_cache_calls;
    let before = calls();
    let failed = std::panic::catch_unwind(|| {
        scope(strict("request"), || -> () {
            drop(floats(1 << 20, 0));
            panic!("the request failed");
        })
    });
    assert!(failed.is_err());
    assert_eq!(calls() - before, 1, "released once, at the unchecked end");
    assert_eq!(memory_stats(Device::Cuda(0)).unwrap().releasable, 0);
}

/// A program may end (`main` returns, or `std::process::exit`) while threads it left running
/// still end scopes whose release policy asks the device's allocator for its statistics and
/// empties its cache: once the exit has begun gpu-scope calls nothing of libtorch's
/// accelerator, whose objects the exit destroys, some of them made lazily after the program
/// started. The threads run no device operator (which would be libtorch's matter).
#[test]
fn a_program_ends_normally_while_its_threads_still_release_device_caches() {
    if in_child() {
        drop(floats(8 << 20, 0));
        for release in [ReleasePolicy::Always, ReleasePolicy::Outermost] {
            std::thread::spawn(move || loop {
                let opts = ScopeOptions::new("cpu work").release(release);
                drop(scope(opts, || drop(common::cpu_floats(10))));
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        if std::env::var("END").is_ok_and(|end| end == "exit") {
            std::process::exit(0);
        }
        return;
    }
    if cuda(1).is_none() {
        return;
    }
    let name = "a_program_ends_normally_while_its_threads_still_release_device_caches";
    for end in ["return", "exit", "return", "exit"] {
        child_ok(name, &[("END", end)]);
    }
}

/// A profiler running when a scope opens: the scope steps aside (and says so, once) rather
/// than pushing its reporter over the profiler's state, and leaves that state alone. A
/// profiler cannot start while a scope is open on the thread (libtorch refuses, cleanly): the
/// scope is unaffected and the profiler starts once the scope has ended.
#[cfg(feature = "fake-cuda")]
#[test]
fn a_running_profiler_is_never_disturbed() {
    if in_child() {
        // SAFETY: FFI probes of the fake build.
        unsafe {
            assert_eq!(gs_test_profiler_start(1), 0);
            let (_, r) = scope(strict("under-profiler"), || drop(floats(100, 0))).unwrap();
            assert_eq!(r.status(), "not tracked", "{r}");
            assert!(r.to_string().contains("profiler held"), "{r}");
            // It could not see which devices it used: the default release looks at them all.
            assert!(r.released, "{r}");
            assert_eq!(memory_stats(Device::Cuda(0)).unwrap().releasable, 0);
            let (_, again) = scope(strict("again"), || drop(floats(100, 0))).unwrap();
            assert_eq!(again.status(), "not tracked");
            assert!(
                gs_test_profiler_stop() > 0,
                "the profiler's state and events are intact"
            );

            let inner = gpu_scope::Scope::enter(strict("refuses-a-profiler")).unwrap();
            assert_eq!(
                gs_test_profiler_start(0),
                -1,
                "libtorch refuses inside a scope"
            );
            // The scope's reporter was not displaced, and the refused profiler left nothing.
            let kept = floats(10, 0);
            let r = inner.exit(&kept).unwrap();
            assert!(r.is_clean(), "{r}");
            assert_eq!(r.kept, 512);
            assert_eq!(gs_test_profiler_start(0), 0, "after the scope it starts");
            assert!(gs_test_profiler_stop() > 0);

            // Work carried to a thread where a profiler runs is not seen there: neither the
            // scope nor the one around it may say clean.
            let (_, outer) = scope(strict("outer"), || {
                let (_, r) = scope(strict("fan-out"), || {
                    let here = gpu_scope::current().unwrap();
                    std::thread::spawn(move || {
                        assert_eq!(gs_test_profiler_start(0), 0);
                        here.in_scope(|| SINK.lock().unwrap().push(floats(100, 0)));
                        gs_test_profiler_stop();
                    })
                    .join()
                    .unwrap();
                })
                .unwrap();
                assert_eq!(r.status(), "not tracked", "{r}");
            })
            .unwrap();
            assert_eq!(outer.status(), "not tracked", "{outer}");
            SINK.lock().unwrap().clear();
        }
        return;
    }
    let out = child_ok("a_running_profiler_is_never_disturbed", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("profiler holds").count(),
        1,
        "said once: {stderr}"
    );
}

/// An allocator backend that reports nothing (cudaMallocAsync, no caching) is detected: the
/// report says "not tracked" rather than "clean". cudaMallocAsync's also refuses allocator
/// trackers (as the fake does with its reports off): every scope still runs, outermost and
/// nested, the first after the device's lazy init and every later one.
#[test]
fn an_allocator_that_reports_nothing_is_not_tracked() {
    if in_child() {
        let _ = floats(1, 0);
        let blind = || {
            scope(ScopeOptions::new("blind"), || {
                SINK.lock().unwrap().push(floats(100, 0))
            })
            .unwrap()
            .1
        };
        for _ in 0..2 {
            let r = blind();
            assert!(r.escaped.is_empty());
            assert_eq!(r.status(), "not tracked", "{r}");
            assert!(!r.is_clean());
            assert!(r.to_string().contains("reports nothing"), "{r}");
        }
        let (_, outer) = scope(ScopeOptions::new("outer"), || {
            let inner = blind();
            assert_eq!(inner.status(), "not tracked", "{inner}");
        })
        .unwrap();
        assert_eq!(outer.status(), "not tracked", "{outer}");
        SINK.lock().unwrap().clear();
        // What the scope left cached is given back all the same (the fake caches while it
        // reports nothing; cudaMallocAsync's pool and no caching leave nothing releasable).
        let (_, r) = scope(ScopeOptions::new("freed"), || drop(floats(100, 0))).unwrap();
        let releasable = memory_stats(Device::Cuda(0)).unwrap().releasable;
        assert!(
            releasable == 0 && (r.released || !fake()),
            "{releasable} {r}"
        );
        return;
    }
    if cuda(1).is_none() {
        return;
    }
    let envs: &[(&str, &str)] = if fake() {
        &[("GPU_SCOPE_FAKE_CUDA_REPORTS", "0")]
    } else {
        &[
            ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),
            ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
        ]
    };
    for &env in envs {
        child_ok("an_allocator_that_reports_nothing_is_not_tracked", &[env]);
    }
}

/// Finding out whether the allocator reports (a one-byte probe) touches only a device the
/// process works on: a program on cuda:1 alone gets no memory (nor, on a GPU, a context) on
/// cuda:0 from it, whether cuda:1 holds memory or (its cache emptied, or an allocator that
/// keeps no statistics) only has a context.
#[test]
fn the_allocator_probe_leaves_unused_devices_alone() {
    if in_child() {
        let mut model = Some(floats(1 << 20, 1));
        if std::env::var_os("EMPTIED").is_some() {
            model = None;
            gpu_scope::empty_cache(Device::Cuda(1)).unwrap();
            assert_eq!(memory_stats(Device::Cuda(1)).unwrap().reserved, 0);
        }
        // Not `strict`, which warms up the test device (cuda:0).
        let opts = ScopeOptions::new("tokenize").on_escape(gpu_scope::EscapePolicy::Error);
        let (_, r) = scope(opts, || drop(common::cpu_floats(16))).unwrap();
        assert!(r.is_clean(), "{r}");
        assert_eq!(memory_stats(Device::Cuda(0)).unwrap(), Default::default());
        let cuda1 = memory_stats(Device::Cuda(1)).unwrap();
        assert!(cuda1.reserved > 0, "the probe ran, on cuda:1: {cuda1:?}");
        drop(model);
        return;
    }
    if cuda(2).is_none() {
        return;
    }
    for env in [&[][..], &[("EMPTIED", "1")][..]] {
        child_ok("the_allocator_probe_leaves_unused_devices_alone", env);
    }
}

/// Pinned host memory comes from CUDA's host allocator, which reports to nothing gpu-scope
/// hooks (the README's Limits): a pinned tensor made in a scope is not counted, and one that
/// leaks is not reported; a device leak beside it is.
#[test]
fn pinned_host_memory_is_not_seen() {
    let _serial = common::serial();
    if cuda(1).is_none() {
        return;
    }
    let host = Tensor::ones([1000], (Kind::Float, Device::Cpu));
    let r = escaped(scope(strict("pinned"), || {
        let pinned = host.pin_memory(Device::Cuda(0));
        assert!(pinned.is_pinned(Device::Cuda(0)));
        assert!(!host.is_pinned(Device::Cuda(0)));
        let mut sink = SINK.lock().unwrap();
        sink.push(pinned);
        sink.push(floats(100, 0));
    }));
    let pinned = SINK.lock().unwrap().remove(0);
    assert_eq!(pinned.sum(Kind::Float).double_value(&[]), 1000.0);
    SINK.lock().unwrap().clear();
    assert_eq!(r.escaped.len(), 1, "{r}");
    assert!(r.escaped[0].device.to_string().starts_with("cuda"), "{r}");
    // The pinned block (4 000 B) counted nowhere (the fake's zeros add a 400 B CPU staging
    // copy, freed).
    assert!(r.allocated < 4000, "{r}");
}

#[test]
fn device_ids_print_as_libtorch_names_them() {
    assert_eq!(DeviceId::from(Device::Cuda(1)).to_string(), "cuda:1");
    assert_eq!(DeviceId::from(Device::Cpu).to_string(), "cpu");
}

/// The one-byte probe that finds out whether the allocator reports waits for room: on a full
/// device (no free small block, no room for a segment) it would run the allocator out of
/// memory, which first gives back the whole cache with a synchronizing free. A scope that
/// allocated nothing there, with `release = never`, then leaves the cache and the device
/// alone.
#[cfg(feature = "fake-cuda")]
#[test]
fn the_allocator_probe_waits_for_room_on_a_full_device() {
    use gpu_scope::EscapePolicy;
    const FAKE_TOTAL: i64 = 80 << 30; // runtime/shim/fake_cuda: the fake device's memory
    let bytes = |n: i64| Tensor::f_empty([n], (Kind::Uint8, Device::Cuda(0)));
    if in_child() {
        drop(floats(1, 0));
        let cache = bytes(10 << 30).unwrap();
        let mut full = Vec::new();
        loop {
            let left = FAKE_TOTAL - memory_stats(Device::Cuda(0)).unwrap().reserved as i64;
            let n = if left >= 11 << 30 {
                10 << 30
            } else {
                left / (20 << 20) * (20 << 20)
            };
            if n < 20 << 20 {
                break;
            }
            full.push(bytes(n).unwrap());
        }
        while let Ok(t) = bytes(512) {
            full.push(t);
        }
        drop(cache);
        let before = (memory_stats(Device::Cuda(0)).unwrap(), unsafe {
            gs_fake_cuda_synchronizations()
        });
        let opts = ScopeOptions::new("cpu only")
            .on_escape(EscapePolicy::Error)
            .release(ReleasePolicy::Never);
        let (_, r) = scope(opts, || drop(common::cpu_floats(4))).unwrap();
        assert!(r.is_clean(), "{r}");
        let after = (memory_stats(Device::Cuda(0)).unwrap(), unsafe {
            gs_fake_cuda_synchronizations()
        });
        assert_eq!(after, before, "the cache given back, or a synchronize: {r}");
        return;
    }
    if cuda(1).is_none() {
        return;
    }
    child_ok("the_allocator_probe_waits_for_room_on_a_full_device", &[]);
}
