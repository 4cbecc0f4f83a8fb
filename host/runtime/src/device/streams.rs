//! Host-side stream queues: where the work the guest ordered actually runs.
//!
//! Each TensorFlow stream is a [`StreamQueue`] with one worker thread that
//! runs jobs in ticket order. A job starts only once every dependency
//! (`(queue, seq)`) has completed. Dependencies always name work submitted
//! earlier (the device checks tickets before they get here), so waits form
//! no cycle and a queue always drains.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Jobs enqueued on any stream of the process that have not run yet.
static OUTSTANDING: AtomicU64 = AtomicU64::new(0);

/// False when no stream of the process has work queued or running: the
/// common case when a kernel starts, checked without a lock. (A job
/// enqueued before a kernel's inputs were handed to it is counted: TF's
/// executor orders the two.)
pub fn any_outstanding() -> bool {
    OUTSTANDING.load(Ordering::SeqCst) != 0
}

/// One piece of work: a copy, a fill, a callback or a marker.
pub type WorkFn = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Called after a job ran, with `(seq, finished-at ns, outcome)`; it must
/// publish the completion (see [`StreamQueue::mark_completed`]).
pub type CompletionFn = Box<dyn Fn(&StreamQueue, u64, u64, Result<(), String>) + Send + Sync>;

struct Job {
    seq: u64,
    after: Vec<(Arc<StreamQueue>, u64)>,
    work: WorkFn,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    /// First failure on this stream.
    error: Option<String>,
    closing: bool,
}

pub struct StreamQueue {
    /// Host-wide unique id, for logs.
    pub id: u64,
    state: Mutex<QueueState>,
    /// Highest seq enqueued, and highest seq completed (jobs complete in
    /// seq order). Written only under `state`, so they change together with
    /// the jobs and the condvar's waiters see them; read without it, because
    /// the device checks every ticket and polls every event against them,
    /// and taking `state` for that made those calls queue behind the
    /// stream's own worker (a `record_event` right after a copy waited
    /// ~40 µs on average for the worker that had just been woken for it).
    submitted: AtomicU64,
    completed: AtomicU64,
    /// Wakes threads waiting for a completion ([`StreamQueue::wait_for`]).
    changed: Condvar,
    /// Wakes the worker: a job was enqueued, or the queue is closing. Apart
    /// from `changed` because work run inline also completes: sharing one
    /// condvar woke the idle worker for every inline copy and marker, a
    /// context switch and a contended `state` lock per `.numpy()`.
    work_ready: Condvar,
    on_complete: CompletionFn,
}

impl StreamQueue {
    /// Creates the queue and starts its worker thread.
    pub fn start(id: u64, on_complete: CompletionFn) -> std::io::Result<Arc<StreamQueue>> {
        let queue = Arc::new(StreamQueue {
            id,
            state: Mutex::default(),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            changed: Condvar::new(),
            work_ready: Condvar::new(),
            on_complete,
        });
        let weak = Arc::downgrade(&queue);
        std::thread::Builder::new().name(format!("tfwasm-stream-{id}")).spawn(move || run(weak))?;
        Ok(queue)
    }

    /// Appends a job. `seq` must exceed every earlier seq of this queue.
    pub fn enqueue(&self, seq: u64, after: Vec<(Arc<StreamQueue>, u64)>, work: WorkFn) {
        let mut state = self.state.lock();
        debug_assert!(seq > self.submitted(), "tickets are validated before enqueue");
        self.submitted.store(seq, Ordering::Release);
        OUTSTANDING.fetch_add(1, Ordering::SeqCst);
        state.jobs.push_back(Job { seq, after, work });
        self.work_ready.notify_one();
    }

    /// Runs `work` as `seq` on the calling thread, now, if that is when the
    /// worker would run it: nothing queued or running on this stream and
    /// every dependency complete. Returns `(finished-at ns, outcome)`, to be
    /// published like a worker's completion (the caller holds the lock the
    /// completion hook takes), or hands `work` back to be enqueued.
    ///
    /// Handing a small copy to the worker costs two thread wake-ups (the
    /// worker's, then whoever waits on the completion), tens of µs each on
    /// a loaded two-core VM, for work that takes a few µs. The caller must
    /// be the only one ordering work on this stream (the device's guest
    /// lock), so no later seq can overtake this one.
    pub fn run_if_idle(
        &self,
        seq: u64,
        after: &[(Arc<StreamQueue>, u64)],
        work: WorkFn,
    ) -> Result<(u64, Result<(), String>), WorkFn> {
        {
            let state = self.state.lock();
            let submitted = self.submitted();
            let idle = state.jobs.is_empty() && self.completed() == submitted && !state.closing;
            if !idle || seq <= submitted || after.iter().any(|(queue, seq)| queue.completed() < *seq) {
                return Err(work);
            }
            self.submitted.store(seq, Ordering::Release);
        }
        Ok(self.run_work(seq, work))
    }

    /// Runs one work item; a panic is its failure. Returns `(finished-at
    /// ns, outcome)`.
    fn run_work(&self, seq: u64, work: WorkFn) -> (u64, Result<(), String>) {
        let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("work item {seq} on stream {} panicked", self.id)),
        };
        (crate::sandbox::monotonic_ns(), outcome)
    }

    pub fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Acquire)
    }

    /// Acquire: the effects of the work up to the returned seq are visible.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    pub fn error(&self) -> Option<String> {
        self.state.lock().error.clone()
    }

    /// Publishes the completion of `seq`. Called by the completion hook,
    /// typically while it holds the device's guest lock so the guest and the
    /// host change their view of the stream together.
    pub fn mark_completed(&self, seq: u64, outcome: Result<(), String>) {
        let mut state = self.state.lock();
        self.completed.fetch_max(seq, Ordering::Release);
        if let Err(message) = outcome {
            state.error.get_or_insert(message);
        }
        self.changed.notify_all();
    }

    /// Blocks until `seq` has completed (or the queue is shutting down).
    pub fn wait_for(&self, seq: u64) {
        let mut state = self.state.lock();
        while self.completed() < seq && !state.closing {
            self.changed.wait_for(&mut state, Duration::from_millis(100));
        }
    }

    /// Blocks until everything submitted so far has completed.
    pub fn drain(&self) {
        let target = self.submitted();
        self.wait_for(target);
    }

    /// Stops the worker after the queued work has run.
    pub fn close(&self) {
        self.drain();
        let mut state = self.state.lock();
        state.closing = true;
        self.changed.notify_all();
        self.work_ready.notify_one();
    }
}

fn run(queue: Weak<StreamQueue>) {
    loop {
        let Some(queue) = queue.upgrade() else { return };
        let job = {
            let mut state = queue.state.lock();
            loop {
                if let Some(job) = state.jobs.pop_front() {
                    break Some(job);
                }
                if state.closing {
                    break None;
                }
                // Wake periodically so a dropped queue lets the thread exit.
                if queue.work_ready.wait_for(&mut state, Duration::from_millis(200)).timed_out()
                    && Arc::strong_count(&queue) == 1
                {
                    break None;
                }
            }
        };
        let Some(job) = job else { return };
        for (other, seq) in &job.after {
            other.wait_for(*seq);
        }
        let (at_ns, outcome) = queue.run_work(job.seq, job.work);
        (queue.on_complete)(&queue, job.seq, at_ns, outcome);
        OUTSTANDING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A raw pointer that may cross to a stream thread. TensorFlow guarantees the
/// memory outlives the work (it waits on an event or callback before reuse).
#[derive(Clone, Copy)]
pub struct SendPtr(pub *mut u8);
// SAFETY: only used to carry addresses whose lifetime TensorFlow guarantees
// until the stream work completes; see the type's doc.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The address. A method (not `.0`) so closures capture the whole `SendPtr`.
    pub fn get(self) -> *mut u8 {
        self.0
    }
}

/// Copies of at least this many bytes between disjoint ranges are split
/// across the compute pool. One thread moved a 16 MiB device→host copy at
/// ~5 GB/s on the 2-core VM; the copy of `.numpy()` on a 2048² result took
/// 6.7 ms against the CPU device's 2.8 ms (which copies too, once).
pub const PARALLEL_COPY_MIN_BYTES: usize = 1 << 20;

/// Bytes per chunk of a split copy: the pool hands chunks out one at a
/// time, so a helper that starts late just takes fewer.
const COPY_CHUNK_BYTES: usize = 256 << 10;

/// `memmove(dst, src, len)` for the stream's copies: large copies between
/// disjoint ranges run on the calling thread and the compute pool together.
///
/// # Safety
///
/// `src` is readable and `dst` writable for `len` bytes, and nothing else
/// writes either range (or reads `dst`) until this returns. The ranges may
/// overlap (such a copy stays on this thread).
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    let (s, d) = (src as usize, dst as usize);
    let disjoint = s.saturating_add(len) <= d || d.saturating_add(len) <= s;
    if len < PARALLEL_COPY_MIN_BYTES || !disjoint || crate::pool::threads() < 2 {
        // SAFETY: the caller's contract; `copy` tolerates overlap.
        unsafe { std::ptr::copy(src, dst, len) };
        return;
    }
    // SAFETY: the ranges are valid for `len` bytes (caller), disjoint
    // (checked), and no one else touches them meanwhile, so a shared and an
    // exclusive slice over them may coexist for this call.
    let (src, dst) = unsafe { (std::slice::from_raw_parts(src, len), std::slice::from_raw_parts_mut(dst, len)) };
    crate::pool::for_each_chunk_mut(dst, COPY_CHUNK_BYTES, |index, chunk| {
        let start = index * COPY_CHUNK_BYTES;
        chunk.copy_from_slice(&src[start..start + chunk.len()]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn copies_move_every_byte_large_small_and_overlapping() {
        for len in
            [0, 1, 4097, PARALLEL_COPY_MIN_BYTES - 1, PARALLEL_COPY_MIN_BYTES, 3 * PARALLEL_COPY_MIN_BYTES + 12345]
        {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: both buffers hold `len` bytes and are disjoint.
            unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert!(dst == src, "{len} bytes");
        }
        // Overlapping ranges inside one buffer: memmove semantics.
        let len = 2 * PARALLEL_COPY_MIN_BYTES;
        let mut buffer: Vec<u8> = (0..len + 1000).map(|i| (i % 253) as u8).collect();
        let expect: Vec<u8> = buffer[..len].to_vec();
        // SAFETY: both ranges lie inside `buffer`.
        unsafe { copy_bytes(buffer.as_ptr(), buffer.as_mut_ptr().add(1000), len) };
        assert!(buffer[1000..] == expect[..]);
    }

    fn queue(id: u64) -> Arc<StreamQueue> {
        StreamQueue::start(id, Box::new(|q, seq, _, outcome| q.mark_completed(seq, outcome))).unwrap()
    }

    #[test]
    fn small_work_runs_inline_only_on_an_idle_stream_with_its_dependencies_done() {
        let a = queue(95);
        let b = queue(96);
        let ran = Arc::new(AtomicU64::new(0));
        let work = |ran: &Arc<AtomicU64>| -> WorkFn {
            let ran = ran.clone();
            Box::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        };
        // Idle, no dependencies: runs here, and is not complete until published.
        let (_, outcome) = b.run_if_idle(1, &[], work(&ran)).ok().expect("idle stream runs inline");
        assert_eq!((outcome, ran.load(Ordering::SeqCst), b.submitted(), b.completed()), (Ok(()), 1, 1, 0));
        // Not idle while seq 1 is unpublished.
        assert!(b.run_if_idle(2, &[], work(&ran)).is_err());
        b.mark_completed(1, Ok(()));
        // A dependency on unfinished work elsewhere: handed back.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        a.enqueue(1, vec![], Box::new(move || rx.recv().map_err(|e| e.to_string())));
        let pending = vec![(a.clone(), 1)];
        let work2 = b.run_if_idle(2, &pending, work(&ran)).expect_err("dependency not done");
        assert_eq!(b.submitted(), 1, "a refused run takes no seq");
        tx.send(()).unwrap();
        a.wait_for(1);
        assert!(b.run_if_idle(2, &pending, work2).is_ok());
        assert_eq!(ran.load(Ordering::SeqCst), 2);
        // Work queued for the worker: later work must queue behind it.
        b.mark_completed(2, Ok(()));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        b.enqueue(3, vec![], Box::new(move || rx.recv().map_err(|e| e.to_string())));
        assert!(b.run_if_idle(4, &[], work(&ran)).is_err());
        tx.send(()).unwrap();
        b.wait_for(3);
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn queued_work_is_outstanding_until_it_has_run() {
        let q = queue(90);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        q.enqueue(1, vec![], Box::new(move || rx.recv().map_err(|e| e.to_string())));
        // Other tests' queues may add to the count, never take this job out.
        assert!(any_outstanding());
        tx.send(()).unwrap();
        q.drain();
        assert_eq!(q.completed(), 1);
    }

    #[test]
    fn runs_in_order_and_respects_dependencies() {
        let a = queue(1);
        let b = queue(2);
        let log = Arc::new(Mutex::new(Vec::new()));
        let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
        a.enqueue(
            1,
            vec![],
            Box::new(move || {
                std::thread::sleep(Duration::from_millis(50));
                l1.lock().push("a1");
                Ok(())
            }),
        );
        // b1 must wait for a1 although it is queued on an idle stream.
        b.enqueue(
            1,
            vec![(a.clone(), 1)],
            Box::new(move || {
                l2.lock().push("b1");
                Ok(())
            }),
        );
        b.enqueue(
            2,
            vec![],
            Box::new(move || {
                l3.lock().push("b2");
                Err("boom".into())
            }),
        );
        b.drain();
        assert_eq!(*log.lock(), vec!["a1", "b1", "b2"]);
        assert_eq!(b.error().as_deref(), Some("boom"));
        assert_eq!(a.error(), None);
        a.close();
        b.close();
    }

    #[test]
    fn many_jobs_complete() {
        let q = queue(3);
        let counter = Arc::new(AtomicU64::new(0));
        for seq in 1..=1000 {
            let c = counter.clone();
            q.enqueue(
                seq,
                vec![],
                Box::new(move || {
                    c.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }),
            );
        }
        q.drain();
        assert_eq!(counter.load(Ordering::Relaxed), 1000);
        assert_eq!(q.completed(), 1000);
    }
}
