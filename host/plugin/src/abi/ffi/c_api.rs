//! The one function of `tensorflow/c/c_api.h` the plugin calls. It lives in
//! `libtensorflow_cc.so.2` in every supported TensorFlow.

use std::ffi::c_char;

extern "C" {
    /// TensorFlow's version, e.g. `2.21.0` or `2.22.0-dev20260905`: a
    /// static NUL-terminated string.
    pub fn TF_Version() -> *const c_char;
}
