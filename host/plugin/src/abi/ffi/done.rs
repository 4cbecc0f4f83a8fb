//! Owning TensorFlow's completion callback of an asynchronous kernel beyond
//! the compute call.
//!
//! `TF_NewAsyncKernelBuilder` hands our compute callback a pointer to the
//! `std::function<void()>` that TensorFlow's `ComputeAsync` received by
//! value. That object lives in TensorFlow's stack frame and dies when our
//! callback returns, so a kernel that finishes later must first *move* the
//! function out, exactly as `std::function`'s move constructor does.
//!
//! The TensorFlow 2.21 Linux wheel is built against libstdc++, whose
//! `std::function<void()>` is four words (run against the wheel by
//! `tests/python/test_deferred.py`, and visible in
//! `TF_RunAsyncOpKernelDoneCallback`, which tests word 2 and jumps through
//! word 3 with the object's address):
//!
//! | word | field | meaning |
//! | --- | --- | --- |
//! | 0–1 | `_M_functor` | the callable, or a pointer to it on the heap |
//! | 2 | `_M_manager` | clones and destroys the callable; null when empty |
//! | 3 | `_M_invoker` | calls it |
//!
//! libstdc++'s move constructor copies the four words and nulls the
//! source's manager and invoker, which leaves the source empty (its
//! destructor then does nothing). [`DoneCallback::take`] does the same.
//! Running goes through TensorFlow's own `TF_RunAsyncOpKernelDoneCallback`;
//! destroying calls the manager with its "destroy" operation, as
//! `~function` does. Other C++ standard libraries lay the object out
//! differently, so moving is compiled only for Linux with glibc (where
//! TensorFlow's wheels use libstdc++); elsewhere [`DoneCallback::take`]
//! returns `None` and kernels finish before their callback returns.
//!
//! TensorFlow 2.22 changed this without touching a header: its
//! `ComputeAsync` hands the plugin a heap copy (`new std::function`), which
//! the plugin owns, and `TF_RunAsyncOpKernelDoneCallback` runs *and
//! deletes* it. Moving it into our own box there made TensorFlow delete our
//! allocation (a double free, seen under tf-nightly). From 2.22 on the
//! callback is therefore kept as the pointer TensorFlow gave and handed back
//! to it once; that needs no knowledge of the layout.

use std::ffi::{c_int, c_void};
use std::ptr;

use super::kernels::{TF_AsyncOpKernelDoneCallback, TF_RunAsyncOpKernelDoneCallback};

/// libstdc++'s `_Any_data`: a small callable stored in place, or a pointer.
#[repr(C)]
struct AnyData([*mut c_void; 2]);

/// `_Manager_operation::__destroy_functor`.
const DESTROY_FUNCTOR: c_int = 3;

/// Our mirror of libstdc++'s `std::function<void()>`.
#[repr(C)]
struct StdFunction {
    functor: AnyData,
    manager: Option<unsafe extern "C" fn(dest: *mut AnyData, source: *const AnyData, op: c_int) -> bool>,
    invoker: Option<unsafe extern "C" fn(functor: *const AnyData)>,
}

/// TensorFlow's completion callback for one asynchronous kernel execution,
/// moved out of TensorFlow's frame. Running it tells the executor the node
/// is done; it runs exactly once, at the latest when dropped (an executor
/// waiting on a callback that never runs would hang the step).
pub struct DoneCallback {
    held: Held,
    runner: RunFn,
}

/// How a [`DoneCallback`] holds TensorFlow's `std::function`.
enum Held {
    /// Moved out of TensorFlow's frame (TensorFlow 2.21): ours to destroy
    /// after running.
    Moved(Box<StdFunction>),
    /// Given to us on TensorFlow's heap (2.22 on): running it through
    /// `TF_RunAsyncOpKernelDoneCallback` also deletes it.
    Given(ptr::NonNull<TF_AsyncOpKernelDoneCallback>),
}

/// Who owns the callback TensorFlow passes to an asynchronous kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// It lives in TensorFlow's frame until our compute callback returns.
    InFrame,
    /// It is a heap object handed to us, deleted by running it.
    Given,
}

type RunFn = unsafe extern "C" fn(*mut TF_AsyncOpKernelDoneCallback);

// SAFETY: TensorFlow's executor runs these callbacks from whichever thread
// finishes the kernel (GPU event threads do the same); the callable owns its
// captured state.
unsafe impl Send for DoneCallback {}

impl DoneCallback {
    /// Moves the callback out of `done`, leaving `done` empty, or returns
    /// `None` (leaving `done` untouched) when it cannot be moved: empty, or
    /// a platform whose C++ library we do not mirror.
    ///
    /// # Safety
    /// `done` is the pointer TensorFlow passed to the compute callback that
    /// is running now, and nothing else uses it afterwards.
    pub unsafe fn take(done: *mut TF_AsyncOpKernelDoneCallback, ownership: Ownership) -> Option<Self> {
        // SAFETY: forwarded contract.
        unsafe { Self::take_with(done, TF_RunAsyncOpKernelDoneCallback, ownership) }
    }

    /// [`take`](Self::take) with the function that runs the callback (tests
    /// run their own `std::function` lookalike without TensorFlow).
    ///
    /// # Safety
    /// As [`take`](Self::take); `run` runs a `std::function<void()>` at the
    /// address it is given.
    unsafe fn take_with(done: *mut TF_AsyncOpKernelDoneCallback, run: RunFn, ownership: Ownership) -> Option<Self> {
        let done = ptr::NonNull::new(done)?;
        if ownership == Ownership::Given {
            return Some(DoneCallback { held: Held::Given(done), runner: run });
        }
        if !cfg!(all(target_os = "linux", target_env = "gnu")) {
            return None;
        }
        let done = done.as_ptr();
        let source = done.cast::<StdFunction>();
        // SAFETY: per the contract `done` points at a live libstdc++
        // `std::function<void()>` (layout in the module docs) that we may
        // mutate; reading its four words and emptying it is what its move
        // constructor does.
        unsafe {
            if (*source).manager.is_none() || (*source).invoker.is_none() {
                return None;
            }
            let function = Box::new(ptr::read(source));
            (*source).manager = None;
            (*source).invoker = None;
            Some(DoneCallback { held: Held::Moved(function), runner: run })
        }
    }

    /// Runs the callback and releases it.
    pub fn run(self) {
        // Drop does both.
    }
}

impl Drop for DoneCallback {
    fn drop(&mut self) {
        match &mut self.held {
            Held::Moved(function) => {
                let function: *mut StdFunction = &mut **function;
                // SAFETY: `function` holds a non-empty `std::function<void()>`
                // moved out of TensorFlow's frame by `take_with`, run here
                // exactly once; then its manager destroys the callable, as
                // `~function` would, and nothing touches it again.
                unsafe {
                    (self.runner)(function.cast::<TF_AsyncOpKernelDoneCallback>());
                    if let Some(manager) = (*function).manager {
                        manager(&mut (*function).functor, &(*function).functor, DESTROY_FUNCTOR);
                    }
                }
            }
            // SAFETY: the pointer TensorFlow gave us (heap-owned, ours), run
            // exactly once; running it deletes it, and we never touch it again.
            Held::Given(done) => unsafe { (self.runner)(done.as_ptr()) },
        }
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    // A `std::function` lookalike whose callable is a heap `Arc<AtomicUsize>`
    // counting calls; the manager's destroy drops it.
    unsafe extern "C" fn invoke(functor: *const AnyData) {
        // SAFETY: word 0 holds the `Arc` pointer `lookalike` stored.
        let counter = unsafe { &*((*functor).0[0] as *const AtomicUsize) };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    unsafe extern "C" fn manage(dest: *mut AnyData, _source: *const AnyData, op: c_int) -> bool {
        assert_eq!(op, DESTROY_FUNCTOR, "only destroy is ever asked for");
        // SAFETY: word 0 holds the `Arc` pointer `lookalike` stored, released once.
        drop(unsafe { Arc::from_raw((*dest).0[0] as *const AtomicUsize) });
        true
    }

    // What TF_RunAsyncOpKernelDoneCallback does: test word 2, call word 3.
    unsafe extern "C" fn run_like_tensorflow(done: *mut TF_AsyncOpKernelDoneCallback) {
        // SAFETY: `done` is a `StdFunction` in these tests.
        let function = unsafe { &*done.cast::<StdFunction>() };
        assert!(function.manager.is_some(), "running an empty std::function");
        // SAFETY: the invoker of a non-empty lookalike.
        unsafe { (function.invoker.unwrap())(&function.functor) };
    }

    fn lookalike(counter: &Arc<AtomicUsize>) -> StdFunction {
        StdFunction {
            functor: AnyData([Arc::into_raw(counter.clone()) as *mut c_void, ptr::null_mut()]),
            manager: Some(manage),
            invoker: Some(invoke),
        }
    }

    #[test]
    fn a_moved_callback_runs_once_after_its_source_is_gone_and_is_then_destroyed() {
        let counter = Arc::new(AtomicUsize::new(0));
        let mut source = lookalike(&counter);
        // SAFETY: `source` is a live lookalike and unused afterwards.
        let done = unsafe {
            DoneCallback::take_with((&mut source as *mut StdFunction).cast(), run_like_tensorflow, Ownership::InFrame)
        }
        .expect("movable");
        assert!(source.manager.is_none() && source.invoker.is_none(), "the source is left empty");
        // Overwrite the source, as TensorFlow's frame would be reused.
        // SAFETY: `source` is a live local; all-zero words are a valid (empty) lookalike.
        unsafe { ptr::write_bytes(&mut source as *mut StdFunction, 0, 1) };
        assert_eq!(counter.load(Ordering::SeqCst), 0);
        std::thread::spawn(move || done.run()).join().unwrap();
        assert_eq!(counter.load(Ordering::SeqCst), 1, "ran exactly once");
        assert_eq!(Arc::strong_count(&counter), 1, "the callable was destroyed");
    }

    #[test]
    fn a_dropped_callback_still_runs() {
        let counter = Arc::new(AtomicUsize::new(0));
        let mut source = lookalike(&counter);
        // SAFETY: as above.
        drop(unsafe {
            DoneCallback::take_with((&mut source as *mut StdFunction).cast(), run_like_tensorflow, Ownership::InFrame)
        });
        assert_eq!(counter.load(Ordering::SeqCst), 1);
        assert_eq!(Arc::strong_count(&counter), 1);
    }

    // What TensorFlow 2.22's TF_RunAsyncOpKernelDoneCallback does with the
    // heap copy it gave: run it, then delete it (here: a Box).
    unsafe extern "C" fn run_and_delete_like_tensorflow_2_22(done: *mut TF_AsyncOpKernelDoneCallback) {
        // SAFETY: `done` is a boxed lookalike in this test, deleted once.
        let function = unsafe { Box::from_raw(done.cast::<StdFunction>()) };
        // SAFETY: the invoker of a non-empty lookalike.
        unsafe { (function.invoker.unwrap())(&function.functor) };
        // SAFETY: destroy the callable, as ~function does.
        let mut function = function;
        unsafe { (function.manager.unwrap())(&mut function.functor, &function.functor, DESTROY_FUNCTOR) };
    }

    #[test]
    fn a_given_callback_is_handed_back_once_untouched() {
        let counter = Arc::new(AtomicUsize::new(0));
        let given = Box::into_raw(Box::new(lookalike(&counter)));
        // SAFETY: `given` is a heap lookalike we hand over, as TensorFlow 2.22 does.
        let done =
            unsafe { DoneCallback::take_with(given.cast(), run_and_delete_like_tensorflow_2_22, Ownership::Given) }
                .expect("a given callback is always kept");
        assert_eq!(counter.load(Ordering::SeqCst), 0);
        std::thread::spawn(move || done.run()).join().unwrap();
        // A double free would abort the test binary before these lines.
        assert_eq!(counter.load(Ordering::SeqCst), 1, "ran exactly once");
        assert_eq!(Arc::strong_count(&counter), 1, "the callable was destroyed");
    }

    #[test]
    fn an_empty_callback_is_left_alone() {
        let mut empty = StdFunction { functor: AnyData([ptr::null_mut(); 2]), manager: None, invoker: None };
        // SAFETY: `empty` is a live (empty) lookalike.
        assert!(unsafe {
            DoneCallback::take_with((&mut empty as *mut StdFunction).cast(), run_like_tensorflow, Ownership::InFrame)
        }
        .is_none());
        // SAFETY: null is refused before any read.
        assert!(unsafe { DoneCallback::take_with(ptr::null_mut(), run_like_tensorflow, Ownership::Given) }.is_none());
    }
}
