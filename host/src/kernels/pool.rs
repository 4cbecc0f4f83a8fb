//! The rayon pool every kernel computes on.
//!
//! ## Why its own pool, and why this size
//!
//! TensorFlow runs a synchronous kernel on a thread of its inter-op pool and
//! waits for `Compute` to return. Our kernels hand the work to this pool and
//! block that TensorFlow thread until it is done, so a blocked TF thread uses
//! no core while our workers run. TensorFlow's intra-op pool (Eigen) is
//! only used by TensorFlow's own CPU kernels, which run on the CPU device.
//! Sizing this pool at `available_parallelism()` therefore fills the cores
//! without stacking a second full-size pool on busy ones: when several TF
//! threads submit kernels at once their jobs share the same workers instead
//! of each fanning out to every core. (CPU-device ops running at the same
//! moment still use TensorFlow's intra-op pool; the two then share the cores
//! the way two devices of one process always do.)
//!
//! Deferred kernels (products and convolutions with large inputs, see
//! `abi::kernels::compute_kernel_async`) run as whole jobs on this pool
//! ([`spawn`]); their own parallel loops then split across the same workers.
//!
//! A dedicated pool (not rayon's global one) keeps our workers named, sized
//! by us, and out of the way of any other rayon user in the process (another
//! plugin or Python extension may configure the global pool differently).
//!
//! `TFWASM_COMPUTE_THREADS` overrides the size, e.g. to leave cores to a
//! data pipeline or to pin down a benchmark.

use std::sync::OnceLock;

/// Environment variable that overrides the number of compute threads.
pub const THREADS_ENV: &str = "TFWASM_COMPUTE_THREADS";

/// The compute pool, built on first use. `None` if the threads could not be
/// spawned; work then runs on the calling thread (see [`install`]).
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = configured_threads(std::env::var(THREADS_ENV).ok().as_deref(), default_threads());
        match rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|index| format!("tfwasm-compute-{index}"))
            .build()
        {
            Ok(pool) => {
                tracing::debug!("tfwasm: compute pool with {threads} threads");
                Some(pool)
            }
            Err(error) => {
                tracing::warn!("tfwasm: cannot start {threads} compute threads ({error}); kernels run single-threaded");
                None
            }
        }
    })
    .as_ref()
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The pool size from the environment value, or `default` when it is unset
/// or unusable (an unusable value is logged, not fatal: a typo must not
/// break a training job).
fn configured_threads(value: Option<&str>, default: usize) -> usize {
    let Some(value) = value else { return default };
    match value.trim().parse::<usize>() {
        Ok(n) if n >= 1 => n,
        _ => {
            tracing::warn!("tfwasm: {THREADS_ENV}={value:?} is not a positive integer; using {default} compute threads");
            default
        }
    }
}

/// Number of threads parallel work is split across.
pub fn threads() -> usize {
    pool().map_or(1, rayon::ThreadPool::current_num_threads)
}

/// Runs `work` inside the compute pool and waits for it: rayon parallel
/// iterators (and `gemm`'s rayon mode) called from `work` use our workers.
/// Without a pool, `work` runs on the calling thread.
pub fn install<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    match pool() {
        Some(pool) => pool.install(work),
        None => work(),
    }
}

/// Whether the calling thread is one of the pool's workers.
pub fn on_worker() -> bool {
    rayon::current_thread_index().is_some()
}

/// Runs `work` on the pool without waiting for it, or hands it back when
/// there is no pool.
pub fn spawn<F: FnOnce() + Send + 'static>(work: F) -> Result<(), F> {
    match pool() {
        Some(pool) => {
            pool.spawn(work);
            Ok(())
        }
        None => Err(work),
    }
}

/// Calls `work(index, chunk)` for every `chunk_len`-sized chunk of `out`
/// (the last may be shorter), sharing the chunks between the calling thread
/// and the pool.
///
/// Unlike [`install`] + a parallel iterator, the calling thread (usually a
/// TensorFlow executor thread that would otherwise sleep until the pool is
/// done) computes too: it starts at once, needs one worker fewer, and only
/// waits if a worker is still inside its last chunk. Chunks are handed out
/// one at a time, so a worker that wakes late simply takes fewer. On a
/// two-core machine this cut the voluntary context switches of a Keras MLP
/// step by 20–25%.
pub fn for_each_chunk_mut<T, F>(out: &mut [T], chunk_len: usize, work: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    let chunks = out.chunks_mut(chunk_len.max(1)).enumerate();
    let count = chunks.len();
    let pool = match pool() {
        Some(pool) if count > 1 && pool.current_num_threads() > 1 => pool,
        _ => return chunks.for_each(|(index, chunk)| work(index, chunk)),
    };
    let queue = parking_lot::Mutex::new(chunks);
    let drain = || loop {
        // Take the lock only to pick a chunk, never while computing it.
        let next = queue.lock().next();
        match next {
            Some((index, chunk)) => work(index, chunk),
            None => break,
        }
    };
    let helpers = (pool.current_num_threads() - 1).min(count - 1);
    pool.in_place_scope(|scope| {
        for _ in 0..helpers {
            scope.spawn(|_| drain());
        }
        drain();
    });
}

/// Calls `work(index)` for every index in `0..count`, shared between the
/// calling thread and the pool like [`for_each_chunk_mut`]. For work that
/// writes through raw pointers into disjoint parts of one buffer.
pub fn for_each_index<F>(count: usize, work: F)
where
    F: Fn(usize) + Sync,
{
    let mut indices = vec![(); count];
    for_each_chunk_mut(&mut indices, 1, |index, _| work(index));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_count_from_environment_value() {
        assert_eq!(configured_threads(None, 8), 8);
        assert_eq!(configured_threads(Some("3"), 8), 3);
        assert_eq!(configured_threads(Some(" 2 "), 8), 2);
        assert_eq!(configured_threads(Some("0"), 8), 8);
        assert_eq!(configured_threads(Some("-1"), 8), 8);
        assert_eq!(configured_threads(Some("many"), 8), 8);
    }

    #[test]
    fn every_chunk_is_visited_once_with_its_index() {
        for (len, chunk_len) in [(0, 4), (1, 4), (7, 3), (1000, 7), (64 * 1024, 4096)] {
            let mut out = vec![usize::MAX; len];
            for_each_chunk_mut(&mut out, chunk_len, |index, chunk| {
                for (offset, value) in chunk.iter_mut().enumerate() {
                    assert_eq!(*value, usize::MAX, "element visited twice");
                    *value = index * chunk_len + offset;
                }
            });
            assert!(out.iter().enumerate().all(|(i, &v)| v == i), "len {len}, chunk {chunk_len}");
        }
    }

    #[test]
    fn a_panicking_chunk_reaches_the_caller() {
        let mut out = vec![0u8; 64];
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for_each_chunk_mut(&mut out, 8, |index, _| assert_ne!(index, 5, "chunk 5 fails"));
        }));
        assert!(outcome.is_err());
    }

    #[test]
    fn install_runs_on_named_workers() {
        let name = install(|| std::thread::current().name().map(str::to_owned));
        if pool().is_some() {
            assert!(name.is_some_and(|n| n.starts_with("tfwasm-compute-")));
        }
        assert!(threads() >= 1);
    }
}
