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
    /// Highest seq enqueued.
    submitted: u64,
    /// Highest seq completed (jobs complete in seq order).
    completed: u64,
    /// First failure on this stream.
    error: Option<String>,
    closing: bool,
}

pub struct StreamQueue {
    /// Host-wide unique id, for logs.
    pub id: u64,
    state: Mutex<QueueState>,
    changed: Condvar,
    on_complete: CompletionFn,
}

impl StreamQueue {
    /// Creates the queue and starts its worker thread.
    pub fn start(id: u64, on_complete: CompletionFn) -> std::io::Result<Arc<StreamQueue>> {
        let queue = Arc::new(StreamQueue { id, state: Mutex::default(), changed: Condvar::new(), on_complete });
        let weak = Arc::downgrade(&queue);
        std::thread::Builder::new().name(format!("tfwasm-stream-{id}")).spawn(move || run(weak))?;
        Ok(queue)
    }

    /// Appends a job. `seq` must exceed every earlier seq of this queue.
    pub fn enqueue(&self, seq: u64, after: Vec<(Arc<StreamQueue>, u64)>, work: WorkFn) {
        let mut state = self.state.lock();
        debug_assert!(seq > state.submitted, "tickets are validated before enqueue");
        state.submitted = seq;
        OUTSTANDING.fetch_add(1, Ordering::SeqCst);
        state.jobs.push_back(Job { seq, after, work });
        self.changed.notify_all();
    }

    pub fn submitted(&self) -> u64 {
        self.state.lock().submitted
    }

    pub fn completed(&self) -> u64 {
        self.state.lock().completed
    }

    pub fn error(&self) -> Option<String> {
        self.state.lock().error.clone()
    }

    /// Publishes the completion of `seq`. Called by the completion hook,
    /// typically while it holds the device's guest lock so the guest and the
    /// host change their view of the stream together.
    pub fn mark_completed(&self, seq: u64, outcome: Result<(), String>) {
        let mut state = self.state.lock();
        state.completed = state.completed.max(seq);
        if let Err(message) = outcome {
            state.error.get_or_insert(message);
        }
        self.changed.notify_all();
    }

    /// Blocks until `seq` has completed (or the queue is shutting down).
    pub fn wait_for(&self, seq: u64) {
        let mut state = self.state.lock();
        while state.completed < seq && !state.closing {
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
                if queue.changed.wait_for(&mut state, Duration::from_millis(200)).timed_out() && Arc::strong_count(&queue) == 1 {
                    break None;
                }
            }
        };
        let Some(job) = job else { return };
        for (other, seq) in &job.after {
            other.wait_for(*seq);
        }
        let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job.work)) {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("work item {} on stream {} panicked", job.seq, queue.id)),
        };
        let at_ns = crate::sandbox::monotonic_ns();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn queue(id: u64) -> Arc<StreamQueue> {
        StreamQueue::start(id, Box::new(|q, seq, _, outcome| q.mark_completed(seq, outcome))).unwrap()
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
        a.enqueue(1, vec![], Box::new(move || {
            std::thread::sleep(Duration::from_millis(50));
            l1.lock().push("a1");
            Ok(())
        }));
        // b1 must wait for a1 although it is queued on an idle stream.
        b.enqueue(1, vec![(a.clone(), 1)], Box::new(move || {
            l2.lock().push("b1");
            Ok(())
        }));
        b.enqueue(2, vec![], Box::new(move || {
            l3.lock().push("b2");
            Err("boom".into())
        }));
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
            q.enqueue(seq, vec![], Box::new(move || {
                c.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }));
        }
        q.drain();
        assert_eq!(counter.load(Ordering::Relaxed), 1000);
        assert_eq!(q.completed(), 1000);
    }
}
