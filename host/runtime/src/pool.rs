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
//! data pipeline or to pin down a benchmark. (The Keras MLP benchmark step
//! on a 2-core VM: 10.5 ms with 2 threads, 11.1 ms with 3 and
//! 15.5 ms with 1, three alternating rounds each.)
//!
//! ## One worker per CPU, bound to it
//!
//! When the pool has exactly one worker per CPU the process may run on (the
//! default on Linux), each worker is bound to its own CPU
//! (`worker_cpus`). On the 2-core development VM a worker woken for a
//! product often stayed queued behind the executor thread on *its* CPU
//! while the other CPU sat idle: the first product of a Keras MLP step
//! (128·784·512, 1.6 ms on both cores) took up to 3.8 ms, mean 2.2, and a
//! system-wide `perf` showed the other CPU halted through the slow ones.
//! (Why the scheduler left it idle we did not establish; an idle virtual
//! CPU is halted, and may look preempted to the wake-up path.) A bound
//! worker can only run on its CPU, so waking it wakes that CPU. Since one
//! of the workers shares the caller's CPU, a call then wakes every worker
//! ([`for_each_chunk_mut`]), and products split into several blocks per
//! thread
//! (`matmul::SPLIT_BLOCKS_PER_THREAD`) so that whichever thread runs takes
//! the next block. Together (neither helps alone) the MLP step went from
//! 10.48 to 10.02 ms, median of six alternating rounds (against the CPU
//! device: 1.00 to 0.95); the small CNN's did not get slower (11.07 to
//! 10.79 ms). A pool of any other size is not bound.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Environment variable that overrides the number of compute threads.
pub const THREADS_ENV: &str = "TFWASM_COMPUTE_THREADS";

/// The compute pool, built on first use. `None` if the threads could not be
/// spawned; work then runs on the calling thread (see [`install`]).
fn pool() -> Option<&'static rayon::ThreadPool> {
    compute_pool().map(|compute| &compute.pool)
}

/// Whether the pool's workers are bound one per CPU ([`worker_cpus`]).
fn bound() -> bool {
    compute_pool().is_some_and(|compute| compute.bound)
}

/// The rayon pool and whether its workers are bound to CPUs.
struct ComputePool {
    pool: rayon::ThreadPool,
    bound: bool,
}

fn compute_pool() -> Option<&'static ComputePool> {
    static POOL: OnceLock<Option<ComputePool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = configured_threads(std::env::var(THREADS_ENV).ok().as_deref(), default_threads());
        let cpus = worker_cpus(threads, allowed_cpus());
        let bound = cpus.is_some();
        match rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|index| format!("tfwasm-compute-{index}"))
            .start_handler(move |index| {
                if let Some(cpu) = cpus.as_ref().and_then(|cpus| cpus.get(index)) {
                    bind_current_thread(*cpu);
                }
            })
            .build()
        {
            Ok(pool) => {
                tracing::debug!("tfwasm: compute pool with {threads} threads (bound to CPUs: {bound})");
                Some(ComputePool { pool, bound })
            }
            Err(error) => {
                tracing::warn!("tfwasm: cannot start {threads} compute threads ({error}); kernels run single-threaded");
                None
            }
        }
    })
    .as_ref()
}

/// The CPU each worker is bound to: the CPUs the process may run on, one
/// per worker, when there are exactly as many as workers (and more than
/// one); otherwise none. A pool sized otherwise (by [`THREADS_ENV`], or a
/// CPU quota that `available_parallelism` honours) shares its CPUs as the
/// kernel sees fit.
fn worker_cpus(threads: usize, allowed: Option<Vec<usize>>) -> Option<Vec<usize>> {
    allowed.filter(|allowed| threads > 1 && allowed.len() == threads)
}

/// The CPUs the calling thread may run on, in order (its affinity mask,
/// which it inherits from the process); `None` where that is not known.
#[cfg(target_os = "linux")]
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: `cpu_set_t` is plain bits, valid zeroed; `sched_getaffinity`
    // writes at most `size_of::<cpu_set_t>()` bytes into it, and pid 0 is
    // the calling thread.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    // SAFETY: `set` is initialised and every index is below CPU_SETSIZE.
    Some((0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect())
}

#[cfg(not(target_os = "linux"))]
fn allowed_cpus() -> Option<Vec<usize>> {
    None
}

/// Binds the calling thread to `cpu`. A failure (a CPU taken away since the
/// mask was read) leaves the thread unbound, which is only slower.
#[cfg(target_os = "linux")]
fn bind_current_thread(cpu: usize) {
    // SAFETY: as in `allowed_cpus`; `cpu` < CPU_SETSIZE, since it came from
    // that mask; `sched_setaffinity` only reads the set.
    let failed = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
    };
    if failed {
        tracing::debug!("tfwasm: cannot bind a compute thread to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
}

#[cfg(not(target_os = "linux"))]
fn bind_current_thread(_cpu: usize) {}

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
            tracing::warn!(
                "tfwasm: {THREADS_ENV}={value:?} is not a positive integer; using {default} compute threads"
            );
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
        Some(pool) => {
            // Counted as queued while it runs: rayon splits it into jobs of
            // its own, which lingering helpers must not keep workers from.
            QUEUED.fetch_add(1, Ordering::SeqCst);
            let _running = Uncount;
            pool.install(work)
        }
        None => work(),
    }
}

/// Takes one off [`QUEUED`] when dropped (also on unwind).
struct Uncount;

impl Drop for Uncount {
    fn drop(&mut self) {
        QUEUED.fetch_sub(1, Ordering::SeqCst);
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
            spawn_counted(pool, work);
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
/// done) computes too: it starts at once, needs one worker fewer (unless
/// the workers are bound to CPUs, see the module docs), and only
/// waits if a worker is still inside its last chunk. Chunks are handed out
/// one at a time, so a worker that wakes late simply takes fewer. On a
/// two-core machine this cut the voluntary context switches of a Keras MLP
/// step by 20–25%.
///
/// The caller never waits for a helper that has not started, and never runs
/// unrelated pool jobs while it waits. Helpers are plain pool jobs: when the
/// workers are busy with deferred kernels (a convolution can take milliseconds)
/// a helper starts late or after the caller has taken every chunk, and then
/// does nothing. A rayon scope would instead wait for every helper job to
/// run, and a worker waiting in a scope runs other queued jobs on its own
/// stack: a Keras MLP step's timeline showed a 20 µs `BiasAddGrad` taking
/// 1.6 ms on the executor thread, and one product finishing only after a
/// second, unrelated product had run inside its wait.
///
/// A helper that runs out of chunks stays on its worker for a while and
/// joins the next call opened meanwhile ([`LINGER`]): a sleeping worker
/// wakes slowly on a virtual machine.
pub fn for_each_chunk_mut<T, F>(out: &mut [T], chunk_len: usize, work: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync,
{
    let chunk_len = chunk_len.max(1);
    let len = out.len();
    let count = len.div_ceil(chunk_len);
    let pool = match pool() {
        Some(pool) if count > 1 && pool.current_num_threads() > 1 => pool,
        _ => return out.chunks_mut(chunk_len).enumerate().for_each(|(index, chunk)| work(index, chunk)),
    };
    let base = SharedOut(out.as_mut_ptr());
    let run = move |index: usize| {
        let start = index * chunk_len;
        // SAFETY: `Chunks::claim` hands out each index below `count` once,
        // so the chunks are disjoint and inside `out`; `out` is borrowed
        // mutably for this whole call, and no chunk runs after it returns
        // (`Chunks::close`).
        let chunk = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), chunk_len.min(len - start)) };
        work(index, chunk);
    };
    let task: &(dyn Fn(usize) + Sync) = &run;
    // SAFETY: only the lifetime is erased. A helper calls `task` only while
    // counted active in `Chunks::help`, and `Chunks::close` (run below, also
    // when the caller's own chunk panics) keeps any helper from becoming
    // active and waits until none is; `run` lives until after that.
    let task: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(task) };
    let chunks = Arc::new(Chunks::new(count, task));
    let generation = Lingering::publish(&chunks);
    // Bound workers: one shares the caller's CPU and cannot add to it, but
    // which one the pool wakes first is not ours to choose, so wake them all.
    let workers = pool.current_num_threads();
    let helpers = if bound() { workers.min(count) } else { (workers - 1).min(count - 1) };
    for _ in 0..helpers {
        let chunks = chunks.clone();
        spawn_counted(pool, move || {
            chunks.help();
            drop(chunks);
            Lingering::linger();
        });
    }
    let closing = Closing(&chunks, generation);
    while let Some(index) = chunks.claim() {
        run(index);
    }
    drop(closing);
    let panic = chunks.state.lock().panic.take();
    if let Some(panic) = panic {
        std::panic::resume_unwind(panic);
    }
}

/// Like [`for_each_chunk_mut`] over two outputs cut into the same number of
/// chunks: `work(index, a_chunk, b_chunk)` (a kernel with two outputs, such
/// as a loss and its gradient).
///
/// # Panics
/// If the two outputs do not have the same number of chunks.
pub fn for_each_chunk_pair_mut<A, B, F>(a: &mut [A], a_chunk: usize, b: &mut [B], b_chunk: usize, work: F)
where
    A: Send,
    B: Send,
    F: Fn(usize, &mut [A], &mut [B]) + Sync,
{
    let (a_chunk, b_chunk) = (a_chunk.max(1), b_chunk.max(1));
    let count = a.len().div_ceil(a_chunk);
    assert_eq!(count, b.len().div_ceil(b_chunk), "both outputs have the same number of chunks");
    let (a_len, b_len) = (a.len(), b.len());
    let (a_base, b_base) = (SharedOut(a.as_mut_ptr()), SharedOut(b.as_mut_ptr()));
    for_each_index(count, |index| {
        let (a_start, b_start) = (index * a_chunk, index * b_chunk);
        // SAFETY: `for_each_index` runs each index below `count` once, so
        // the chunks of each output are disjoint and inside it; both are
        // borrowed mutably for this whole call, which returns only after
        // every index has run.
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(a_base.get().add(a_start), a_chunk.min(a_len - a_start)),
                std::slice::from_raw_parts_mut(b_base.get().add(b_start), b_chunk.min(b_len - b_start)),
            )
        };
        work(index, a, b);
    });
}

/// An output pointer shared by the threads that write disjoint parts of it:
/// the chunks of one [`for_each_chunk_mut`] call.
/// Making one is safe; every write through [`SharedOut::get`] is an
/// `unsafe` block that must show its part is disjoint and alive.
struct SharedOut<T>(*mut T);

// Not derived: a derive would require `T: Copy`.
impl<T> Clone for SharedOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedOut<T> {}

// SAFETY: the pointer is only written through in `unsafe` blocks whose
// callers give each thread a disjoint part of a `&mut [T]` (`T: Send`) that
// outlives them (see `for_each_chunk_mut`).
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    /// The address. A method (not `.0`) so closures capture the whole value.
    fn get(self) -> *mut T {
        self.0
    }
}

/// The chunks of one [`for_each_chunk_mut`] call, shared with its helpers.
struct Chunks {
    next: AtomicUsize,
    count: usize,
    /// The call's work; called only through [`Chunks::help`] (see there).
    task: &'static (dyn Fn(usize) + Sync),
    state: Mutex<Helpers>,
    left: Condvar,
}

#[derive(Default)]
struct Helpers {
    /// Set when the caller has taken its last chunk: no helper enters after.
    closed: bool,
    /// Helpers inside `Chunks::help`, past the `closed` check.
    active: usize,
    /// The first panic of a helper's chunk, re-raised on the caller.
    panic: Option<Box<dyn Any + Send>>,
}

impl Chunks {
    fn new(count: usize, task: &'static (dyn Fn(usize) + Sync)) -> Self {
        Chunks { next: AtomicUsize::new(0), count, task, state: Mutex::default(), left: Condvar::new() }
    }

    /// Whether every chunk has been claimed.
    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.count
    }

    /// The next unclaimed chunk, once each.
    fn claim(&self) -> Option<usize> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        (index < self.count).then_some(index)
    }

    /// A helper job: computes chunks until none is left, unless the call is
    /// already over. `task` (whose lifetime was erased) is called only here,
    /// while this helper is counted active, and never once the call closed.
    fn help(&self) {
        let task = self.task;
        {
            let mut state = self.state.lock();
            if state.closed {
                return;
            }
            state.active += 1;
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while let Some(index) = self.claim() {
                task(index);
            }
        }));
        let mut state = self.state.lock();
        if let Err(panic) = outcome {
            // Nobody takes another chunk; the caller re-raises this.
            self.next.store(self.count, Ordering::Relaxed);
            state.panic.get_or_insert(panic);
        }
        state.active -= 1;
        if state.active == 0 {
            self.left.notify_all();
        }
    }

    /// Ends the call: no helper enters from now on, and this returns once
    /// every helper that entered has left. Their writes happen before the
    /// return (both sides hold `state`).
    fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        while state.active > 0 {
            self.left.wait(&mut state);
        }
    }
}

/// Closes the call when dropped, also while the caller's own chunk unwinds,
/// and withdraws it from [`Lingering`] (the `usize` is its generation there).
struct Closing<'a>(&'a Chunks, usize);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.next.store(self.0.count, Ordering::Relaxed);
        }
        self.0.close();
        Lingering::withdraw(self.1);
    }
}

/// Pool jobs spawned through this module that have not started yet, plus
/// [`install`] calls still running (rayon splits those into jobs of its
/// own). A lingering helper gives its worker back to the pool as soon as
/// this is above zero.
static QUEUED: AtomicUsize = AtomicUsize::new(0);

/// Spawns `work` on `pool`, counted in [`QUEUED`] until it starts.
fn spawn_counted(pool: &rayon::ThreadPool, work: impl FnOnce() + Send + 'static) {
    QUEUED.fetch_add(1, Ordering::SeqCst);
    pool.spawn(move || {
        QUEUED.fetch_sub(1, Ordering::SeqCst);
        work();
    });
}

/// How long a helper that ran out of chunks stays awake for the next call.
///
/// A sleeping worker takes long to wake on a virtual machine: on the 2-core
/// development VM a helper of an eager 1M-element `Log` started a mean 309 µs
/// after it was spawned, in a call that lasted 1.7 ms, while the caller
/// computed alone. Eager ops on large tensors follow each other a few
/// hundred µs apart (the Python between them), so a helper that waits that
/// long, yielding its core to any thread that wants it, joins the next call
/// at once. TensorFlow's own intra-op pool (Eigen) spins likewise.
const LINGER: Duration = Duration::from_micros(500);

/// The most recent [`for_each_chunk_mut`] call, open to helpers that linger.
struct Lingering;

static OPEN: Mutex<Option<(usize, Arc<Chunks>)>> = Mutex::new(None);
/// Bumped on every publish, so a lingering helper polls one atomic and locks
/// [`OPEN`] only when there is something new.
static GENERATION: AtomicUsize = AtomicUsize::new(0);

impl Lingering {
    /// Makes `chunks` the open call; returns its generation.
    fn publish(chunks: &Arc<Chunks>) -> usize {
        let mut open = OPEN.lock();
        let generation = GENERATION.fetch_add(1, Ordering::SeqCst) + 1;
        *open = Some((generation, chunks.clone()));
        generation
    }

    /// Forgets the call of `generation` if it is still the open one (a call
    /// nested in a chunk may have replaced it).
    fn withdraw(generation: usize) {
        let mut open = OPEN.lock();
        if open.as_ref().is_some_and(|(g, _)| *g == generation) {
            *open = None;
        }
    }

    /// Stays on the worker for up to [`LINGER`], helping any call opened
    /// meanwhile, unless other pool work is waiting.
    fn linger() {
        let mut seen = GENERATION.load(Ordering::SeqCst);
        let mut until = Instant::now() + LINGER;
        while QUEUED.load(Ordering::SeqCst) == 0 {
            let now = GENERATION.load(Ordering::SeqCst);
            if now != seen {
                seen = now;
                let open = OPEN.lock().as_ref().map(|(_, chunks)| chunks.clone());
                if let Some(chunks) = open.filter(|chunks| !chunks.exhausted()) {
                    chunks.help();
                    until = Instant::now() + LINGER;
                    continue;
                }
            }
            if Instant::now() >= until {
                return;
            }
            std::thread::yield_now();
        }
    }
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
    fn the_caller_does_every_chunk_while_the_workers_are_busy() {
        // Every worker is inside a long job (as during a deferred convolution):
        // the call must finish on the calling thread alone, not wait for a
        // helper job that cannot start until the workers are free.
        if threads() < 2 {
            return;
        }
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let blocked = Arc::new(Mutex::new(blocked));
        let (started, workers_busy) = std::sync::mpsc::channel::<()>();
        for _ in 0..threads() {
            let (blocked, started) = (blocked.clone(), started.clone());
            let busy = move || {
                started.send(()).unwrap();
                let _ = blocked.lock().recv();
            };
            assert!(spawn(busy).is_ok());
        }
        // Only the first worker to start holds the receiver's lock; the rest
        // wait on it, so all are busy once each has started.
        for _ in 0..threads() {
            workers_busy.recv_timeout(std::time::Duration::from_secs(60)).expect("a worker starts its job");
        }
        let (finished, call_done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = vec![0usize; 64];
            for_each_chunk_mut(&mut out, 4, |index, chunk| chunk.fill(index + 1));
            finished.send(out).unwrap();
        });
        let outcome = call_done.recv_timeout(std::time::Duration::from_secs(60));
        for _ in 0..threads() {
            release.send(()).unwrap();
        }
        let out = outcome.expect("the call finished while every worker was busy");
        assert!(out.iter().enumerate().all(|(i, &v)| v == i / 4 + 1));
    }

    #[test]
    fn nested_calls_from_workers_visit_every_chunk() {
        // A deferred kernel calls from a worker, and a chunk may call again.
        let sums = install(|| {
            let mut outer = vec![0usize; 16];
            for_each_chunk_mut(&mut outer, 1, |index, slot| {
                let mut inner = vec![0usize; 100];
                for_each_chunk_mut(&mut inner, 7, |i, chunk| chunk.fill(i + index));
                slot[0] = inner.iter().sum();
            });
            outer
        });
        let want = |index: usize| (0..100).map(|e| e / 7 + index).sum::<usize>();
        assert!(sums.iter().enumerate().all(|(index, &sum)| sum == want(index)));
    }

    #[test]
    fn back_to_back_calls_from_several_threads_visit_every_chunk_once() {
        // Helpers that finish linger and join whichever call is open next,
        // also one made by another thread; each chunk still runs once, on
        // the call that owns it.
        let callers: Vec<_> = (0..4)
            .map(|caller| {
                std::thread::spawn(move || {
                    for round in 0..200 {
                        let mut out = vec![usize::MAX; 61];
                        for_each_chunk_mut(&mut out, 4, |index, chunk| {
                            for (offset, value) in chunk.iter_mut().enumerate() {
                                assert_eq!(*value, usize::MAX, "element visited twice");
                                *value = caller * 1_000_000 + round * 1000 + index * 4 + offset;
                            }
                        });
                        let want = |i: usize| caller * 1_000_000 + round * 1000 + i;
                        assert!(out.iter().enumerate().all(|(i, &v)| v == want(i)), "caller {caller}, round {round}");
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().expect("every call visits its own chunks");
        }
    }

    #[test]
    fn pairs_of_outputs_are_cut_alike() {
        let (mut loss, mut grad) = (vec![0usize; 10], vec![0usize; 30]);
        for_each_chunk_pair_mut(&mut loss, 3, &mut grad, 9, |index, l, g| {
            l.fill(index);
            g.fill(index * 10);
        });
        assert_eq!(loss, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
        assert!(grad.iter().enumerate().all(|(i, &v)| v == i / 9 * 10));
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
    fn workers_are_bound_only_when_there_is_one_per_cpu() {
        assert_eq!(worker_cpus(2, Some(vec![0, 1])), Some(vec![0, 1]));
        assert_eq!(worker_cpus(2, Some(vec![3, 5])), Some(vec![3, 5]));
        assert_eq!(worker_cpus(3, Some(vec![0, 1])), None);
        assert_eq!(worker_cpus(2, Some(vec![0, 1, 2])), None);
        assert_eq!(worker_cpus(1, Some(vec![4])), None);
        assert_eq!(worker_cpus(2, None), None);
    }

    /// Each worker reports the CPUs it may run on: one each, all different,
    /// together the process's, when the pool is bound; else the process's.
    #[cfg(target_os = "linux")]
    #[test]
    fn bound_workers_each_run_on_a_cpu_of_their_own() {
        let Some(pool) = pool() else { return };
        let allowed = allowed_cpus().expect("the affinity mask of a Linux thread");
        let expect_bound = worker_cpus(pool.current_num_threads(), Some(allowed.clone())).is_some();
        assert_eq!(bound(), expect_bound);
        let mut masks = pool.broadcast(|_| allowed_cpus().expect("a worker's affinity mask"));
        if expect_bound {
            assert!(masks.iter().all(|mask| mask.len() == 1), "{masks:?}");
            masks.sort();
            assert_eq!(masks.concat(), allowed);
        } else {
            assert!(masks.iter().all(|mask| *mask == allowed), "{masks:?} vs {allowed:?}");
        }
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
