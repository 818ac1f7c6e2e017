//! `memory_stats(Device::Cpu)` and `reset_peak(Device::Cpu)`: the CPU blocks allocated inside
//! scopes and still alive, and their peak (alone in its process: the counters are global).
use gpu_scope::{memory_stats, reset_peak, scope, ScopeOptions};
use tch::{Device, Kind, Tensor};

fn cpu_floats(n: i64) -> Tensor {
    Tensor::zeros([n], (Kind::Float, Device::Cpu))
}

#[test]
fn cpu_stats_count_live_scoped_blocks_and_their_peak() {
    let outside = cpu_floats(10_000);
    let before = memory_stats(Device::Cpu).unwrap();
    assert_eq!(before.allocated, 0, "outside scopes nothing is counted");
    let ((), _) = scope(ScopeOptions::new("outer"), || {
        let (kept, _) = scope(ScopeOptions::new("inner"), || {
            drop(cpu_floats(1000));
            cpu_floats(250)
        })
        .unwrap();
        let now = memory_stats(Device::Cpu).unwrap();
        assert_eq!(
            now.allocated, 1000,
            "the kept block, handed to the outer scope"
        );
        assert_eq!(now.reserved, now.allocated);
        assert_eq!(now.releasable, 0);
        assert!(now.peak >= 4000, "the dropped block was live once: {now:?}");
        reset_peak(Device::Cpu).unwrap();
        assert_eq!(memory_stats(Device::Cpu).unwrap().peak, 1000);
        let more = cpu_floats(500);
        drop(more);
        assert_eq!(memory_stats(Device::Cpu).unwrap().peak, 3000);
        drop(kept);
        assert_eq!(memory_stats(Device::Cpu).unwrap().allocated, 0);
    })
    .unwrap();
    assert_eq!(memory_stats(Device::Cpu).unwrap().allocated, 0);
    drop(outside);

    // Counted per allocating thread (by its number modulo 16): a block freed on another
    // thread is taken off its own thread's count, and the peak of threads that allocated one
    // after the other is the sum of their highest (never below the true peak, 4000 here).
    reset_peak(Device::Cpu).unwrap();
    let in_scope = |n| {
        scope(ScopeOptions::new("worker"), || cpu_floats(n))
            .unwrap()
            .0
    };
    let made = std::thread::spawn(move || in_scope(1000)).join().unwrap();
    let stats = memory_stats(Device::Cpu).unwrap();
    assert_eq!((stats.allocated, stats.peak), (4000, 4000));
    drop(made);
    assert_eq!(
        memory_stats(Device::Cpu).unwrap().allocated,
        0,
        "freed here"
    );
    drop(std::thread::spawn(move || in_scope(500)).join().unwrap());
    let stats = memory_stats(Device::Cpu).unwrap();
    assert_eq!((stats.allocated, stats.peak), (0, 6000));
    reset_peak(Device::Cpu).unwrap();
    assert_eq!(memory_stats(Device::Cpu).unwrap().peak, 0);

    // Sixteen counters, by thread number: twenty threads one after another, 1000 B each, sum
    // to at most sixteen of them, and never below the true peak.
    for _ in 0..20 {
        drop(std::thread::spawn(move || in_scope(250)).join().unwrap());
    }
    let peak = memory_stats(Device::Cpu).unwrap().peak;
    assert!((1000..=16_000).contains(&peak), "{peak}");
}
