//! The real-time path allocates nothing: a counting global allocator, armed around
//! `process` after warm-up, sees zero allocations (and zero frees) for every model in
//! every buffer size, including buffers longer than the engine's block.

use fucina_models::nam::Amp;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;

static ARMED: AtomicBool = AtomicBool::new(false);
static EVENTS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts while armed.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            EVENTS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ARMED.load(Ordering::Relaxed) {
            EVENTS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            EVENTS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn process_never_allocates_after_warm_up() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/nam");
    let input: Vec<f32> = (0..8192).map(|i| (i as f32 * 0.01).sin() * 0.5).collect();
    let mut output = vec![0.0f32; input.len()];
    for name in ["standard", "lite", "feather", "nano", "lstm-standard", "lstm-lite"] {
        let amp = Amp::open(dir.join(format!("{name}.nam"))).unwrap();
        let mut s = amp.stream(256);
        // Warm-up: first calls may initialize lazily (CPU feature detection).
        s.process(&input[..64], &mut output[..64]);
        EVENTS.store(0, Ordering::SeqCst);
        ARMED.store(true, Ordering::SeqCst);
        for bs in [1usize, 7, 32, 64, 128, 256, 512, 4096] {
            for (x, y) in input.chunks(bs).zip(output.chunks_mut(bs)).take(16) {
                s.process(x, y);
            }
        }
        s.reset();
        s.process(&input, &mut output);
        ARMED.store(false, Ordering::SeqCst);
        let n = EVENTS.load(Ordering::SeqCst);
        assert_eq!(n, 0, "{name}: {n} allocator calls inside process/reset");
    }
    // The counter works: an allocation while armed is seen.
    ARMED.store(true, Ordering::SeqCst);
    let v = std::hint::black_box(vec![1u8; 10]);
    ARMED.store(false, Ordering::SeqCst);
    drop(v);
    assert!(EVENTS.load(Ordering::SeqCst) >= 1);
}
