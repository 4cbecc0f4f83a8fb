//! Every `#[repr(C)]` mirror of `tfwasm::abi::ffi` against the C headers that
//! ship in the installed TensorFlow wheel: `stream_executor.h`,
//! `grappler.h` with the `tf_buffer.h` and `tf_datatype.h` it includes,
//! `pluggable_profiler.h`, and `c_api.h` (`TF_StringView`).
//!
//! One table (the `layouts!` invocation below) names each struct and its
//! fields in header order. From it the test writes a C program that prints
//! `offsetof`, `sizeof` and alignment of every field, each struct's size and
//! its `*_STRUCT_SIZE` macro (for the structs that have one), plus the enum and version constants; compiles it
//! with `cc` against the wheel's include directory; runs it; and compares
//! every number with what rustc computed for our mirrors.
//!
//! Headers: `$TFWASM_TF_INCLUDE`, else
//! `.venv/lib/python3*/site-packages/tensorflow/include` (made by
//! `host/scripts/setup.sh`). Without them the test fails: it never skips.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use tfwasm::abi::ffi::grappler::*;
use tfwasm::abi::ffi::kernels::{self, TF_DataType, TF_StringView};
use tfwasm::abi::ffi::profiler::*;
use tfwasm::abi::ffi::status::{self, TF_Code};
use tfwasm::abi::ffi::stream_executor::*;

const HEADERS: [&str; 4] = [
    "tensorflow/c/experimental/stream_executor/stream_executor.h",
    "tensorflow/c/experimental/grappler/grappler.h",
    "tensorflow/c/experimental/pluggable_profiler/pluggable_profiler.h",
    "tensorflow/c/c_api.h",
];

struct StructLayout {
    name: &'static str,
    /// The header's `TF_OFFSET_OF_END` macro, compared with `struct_size()`;
    /// `None` for a struct without `struct_size` (`TF_Buffer`).
    size_macro: Option<&'static str>,
    struct_size: Option<usize>,
    size: usize,
    align: usize,
    fields: Vec<FieldLayout>,
}

struct FieldLayout {
    rust: &'static str,
    c: &'static str,
    offset: usize,
    size: usize,
    align: usize,
}

/// Size and alignment of a field's type, from a projection that is never called.
fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}
fn field_align<T, F>(_: impl Fn(&T) -> &F) -> usize {
    align_of::<F>()
}

macro_rules! c_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $c:literal) => {
        $c
    };
}

/// The size macro and `struct_size()` of a row, if it names a macro.
macro_rules! struct_size {
    ($ty:ident) => {
        (None::<&'static str>, None::<usize>)
    };
    ($ty:ident $size_macro:ident) => {
        (Some(stringify!($size_macro)), Some($ty::struct_size()))
    };
}

/// `Struct / STRUCT_SIZE_MACRO { field, field as "c_name", ... }`, fields in
/// header order; `Struct { ... }` for a struct without `struct_size`.
macro_rules! layouts {
    ($( $ty:ident $(/ $size_macro:ident)? { $( $field:ident $(as $c:literal)? ),+ $(,)? } )+) => {
        fn layouts() -> Vec<StructLayout> {
            vec![$(
                StructLayout {
                    name: stringify!($ty),
                    size_macro: struct_size!($ty $($size_macro)?).0,
                    struct_size: struct_size!($ty $($size_macro)?).1,
                    size: size_of::<$ty>(),
                    align: align_of::<$ty>(),
                    fields: vec![$(
                        FieldLayout {
                            rust: stringify!($field),
                            c: c_name!($field $($c)?),
                            offset: offset_of!($ty, $field),
                            size: field_size(|s: &$ty| &s.$field),
                            align: field_align(|s: &$ty| &s.$field),
                        },
                    )+],
                },
            )+]
        }
    };
}

// The table. SE 0.0.1, `stream_executor.h` of TensorFlow 2.21.
layouts! {
    SP_TimerFns / SP_TIMER_FNS_STRUCT_SIZE { struct_size, ext, nanoseconds }
    SP_AllocatorStats / SP_ALLOCATORSTATS_STRUCT_SIZE {
        struct_size, num_allocs, bytes_in_use, peak_bytes_in_use, largest_alloc_size,
        has_bytes_limit, bytes_limit, bytes_reserved, peak_bytes_reserved,
        has_bytes_reservable_limit, bytes_reservable_limit, largest_free_block_bytes,
    }
    SP_DeviceMemoryBase / SP_DEVICE_MEMORY_BASE_STRUCT_SIZE { struct_size, ext, opaque, size, payload }
    SP_Device / SP_DEVICE_STRUCT_SIZE {
        struct_size, ext, ordinal, device_handle, hardware_name, device_vendor, pci_bus_id,
    }
    SE_CreateDeviceParams / SE_CREATE_DEVICE_PARAMS_STRUCT_SIZE { struct_size, ext, ordinal, device }
    SP_DeviceFns / SP_DEVICE_FNS_STRUCT_SIZE {
        struct_size, ext, get_numa_node, get_memory_bandwidth, get_gflops,
    }
    SE_CreateDeviceFnsParams / SE_CREATE_DEVICE_FNS_PARAMS_STRUCT_SIZE { struct_size, ext, device_fns }
    SP_StreamExecutor / SP_STREAMEXECUTOR_STRUCT_SIZE {
        struct_size, ext,
        allocate, deallocate, host_memory_allocate, host_memory_deallocate,
        unified_memory_allocate, unified_memory_deallocate, get_allocator_stats,
        device_memory_usage,
        create_stream, destroy_stream, create_stream_dependency, get_stream_status,
        create_event, destroy_event, get_event_status, record_event, wait_for_event,
        create_timer, destroy_timer, start_timer, stop_timer,
        memcpy_dtoh, memcpy_htod, memcpy_dtod, sync_memcpy_dtoh, sync_memcpy_htod,
        sync_memcpy_dtod,
        block_host_for_event, block_host_until_done, synchronize_all_activity,
        mem_zero, memset, memset32, host_callback,
    }
    SE_CreateStreamExecutorParams / SE_CREATE_STREAM_EXECUTOR_PARAMS_STRUCT_SIZE {
        struct_size, ext, stream_executor,
    }
    SP_Platform / SP_PLATFORM_STRUCT_SIZE {
        struct_size, ext, name, type_ as "type",
        supports_unified_memory, use_bfc_allocator, force_memory_growth,
    }
    SP_PlatformFns / SP_PLATFORM_FNS_STRUCT_SIZE {
        struct_size, ext, get_device_count, create_device, destroy_device,
        create_device_fns, destroy_device_fns, create_stream_executor,
        destroy_stream_executor, create_timer_fns, destroy_timer_fns,
    }
    SE_PlatformRegistrationParams / SE_PLATFORM_REGISTRATION_PARAMS_STRUCT_SIZE {
        struct_size, ext, major_version, minor_version, patch_version,
        platform, platform_fns, destroy_platform, destroy_platform_fns,
    }
    // GO 0.0.1, `grappler.h` and `tf_buffer.h` of TensorFlow 2.21.
    TF_Buffer { data, length, data_deallocator }
    TP_OptimizerConfigs / TP_OPTIMIZER_CONFIGS_STRUCT_SIZE {
        struct_size, ext, disable_model_pruning, implementation_selector,
        function_optimization, common_subgraph_elimination, arithmetic_optimization,
        debug_stripper, constant_folding, shape_optimization, auto_mixed_precision,
        auto_mixed_precision_onednn_bfloat16, auto_mixed_precision_mkl,
        pin_to_host_optimization, layout_optimizer, remapping, loop_optimization,
        dependency_optimization, auto_parallel, memory_optimization,
        scoped_allocator_optimization,
    }
    TP_Optimizer / TP_OPTIMIZER_STRUCT_SIZE { struct_size, ext, create_func, optimize_func, destroy_func }
    TP_OptimizerRegistrationParams / TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE {
        struct_size, ext, major_version, minor_version, patch_version,
        device_type, optimizer_configs, optimizer,
    }
    // TP 0.0.1, `pluggable_profiler.h` of TensorFlow 2.21.
    TP_Profiler / TP_PROFILER_STRUCT_SIZE { struct_size, ext, device_type }
    TP_ProfilerFns / TP_PROFILER_FNS_STRUCT_SIZE { struct_size, ext, start, stop, collect_data_xspace }
    TF_ProfilerRegistrationParams / TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE {
        struct_size, ext, major_version, minor_version, patch_version,
        profiler, profiler_fns, destroy_profiler, destroy_profiler_fns,
    }
    // `c_api.h`: how kernels.h returns a node's name.
    TF_StringView { data, len }
}

/// Integer constants and scalar type sizes: (C expression, our value).
fn constants() -> Vec<(&'static str, i64)> {
    use SE_EventStatus::*;
    let mut constants = vec![
        ("SE_MAJOR", SE_MAJOR as i64),
        ("SE_MINOR", SE_MINOR as i64),
        ("SE_PATCH", SE_PATCH as i64),
        ("SE_EVENT_UNKNOWN", SE_EVENT_UNKNOWN as i64),
        ("SE_EVENT_ERROR", SE_EVENT_ERROR as i64),
        ("SE_EVENT_PENDING", SE_EVENT_PENDING as i64),
        ("SE_EVENT_COMPLETE", SE_EVENT_COMPLETE as i64),
        ("sizeof(SE_EventStatus)", size_of::<SE_EventStatus>() as i64),
        ("sizeof(TF_Bool)", size_of::<TF_Bool>() as i64),
        ("sizeof(TF_Code)", size_of::<TF_Code>() as i64),
        ("GO_MAJOR", GO_MAJOR as i64),
        ("GO_MINOR", GO_MINOR as i64),
        ("GO_PATCH", GO_PATCH as i64),
        ("TP_MAJOR", TP_MAJOR as i64),
        ("TP_MINOR", TP_MINOR as i64),
        ("TP_PATCH", TP_PATCH as i64),
        ("TF_TriState_Default", TF_TriState::TF_TriState_Default as i64),
        ("TF_TriState_Off", TF_TriState::TF_TriState_Off as i64),
        ("TF_TriState_On", TF_TriState::TF_TriState_On as i64),
        ("sizeof(TF_TriState)", size_of::<TF_TriState>() as i64),
        ("sizeof(TF_DataType)", size_of::<TF_DataType>() as i64),
    ];
    constants.extend(
        [
            ("TF_FLOAT", kernels::TF_FLOAT),
            ("TF_DOUBLE", kernels::TF_DOUBLE),
            ("TF_INT32", kernels::TF_INT32),
            ("TF_UINT8", kernels::TF_UINT8),
            ("TF_INT64", kernels::TF_INT64),
            ("TF_BOOL", kernels::TF_BOOL),
            ("TF_BFLOAT16", kernels::TF_BFLOAT16),
            ("TF_HALF", kernels::TF_HALF),
            ("TF_UINT64", kernels::TF_UINT64),
        ]
        .map(|(name, dtype)| (name, dtype as i64)),
    );
    constants.extend(
        [
            ("TF_OK", status::TF_OK),
            ("TF_CANCELLED", status::TF_CANCELLED),
            ("TF_UNKNOWN", status::TF_UNKNOWN),
            ("TF_INVALID_ARGUMENT", status::TF_INVALID_ARGUMENT),
            ("TF_DEADLINE_EXCEEDED", status::TF_DEADLINE_EXCEEDED),
            ("TF_NOT_FOUND", status::TF_NOT_FOUND),
            ("TF_ALREADY_EXISTS", status::TF_ALREADY_EXISTS),
            ("TF_PERMISSION_DENIED", status::TF_PERMISSION_DENIED),
            ("TF_RESOURCE_EXHAUSTED", status::TF_RESOURCE_EXHAUSTED),
            ("TF_FAILED_PRECONDITION", status::TF_FAILED_PRECONDITION),
            ("TF_ABORTED", status::TF_ABORTED),
            ("TF_OUT_OF_RANGE", status::TF_OUT_OF_RANGE),
            ("TF_UNIMPLEMENTED", status::TF_UNIMPLEMENTED),
            ("TF_INTERNAL", status::TF_INTERNAL),
            ("TF_UNAVAILABLE", status::TF_UNAVAILABLE),
            ("TF_DATA_LOSS", status::TF_DATA_LOSS),
            ("TF_UNAUTHENTICATED", status::TF_UNAUTHENTICATED),
        ]
        .map(|(name, code)| (name, code as i64)),
    );
    constants
}

/// Every number to compare: (C expression, what rustc says).
fn probes() -> Vec<(String, i64)> {
    let mut probes = Vec::new();
    for s in layouts() {
        let ty = s.name;
        probes.push((format!("sizeof({ty})"), s.size as i64));
        probes.push((format!("__alignof__({ty})"), s.align as i64));
        if let (Some(size_macro), Some(struct_size)) = (s.size_macro, s.struct_size) {
            probes.push((size_macro.to_string(), struct_size as i64));
        }
        for f in &s.fields {
            let member = format!("((({ty} *)0)->{})", f.c);
            probes.push((format!("offsetof({ty}, {})", f.c), f.offset as i64));
            probes.push((format!("sizeof{member}"), f.size as i64));
            probes.push((format!("__alignof__{member}"), f.align as i64));
        }
    }
    probes.extend(constants().into_iter().map(|(expr, value)| (expr.to_string(), value)));
    probes
}

fn include_dir() -> PathBuf {
    const HINT: &str = "run `bash host/scripts/setup.sh` to install TensorFlow into .venv, \
                        or set TFWASM_TF_INCLUDE to a wheel's tensorflow/include directory";
    let dir = match std::env::var_os("TFWASM_TF_INCLUDE") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let lib = crate::support::workspace().join(".venv/lib");
            let python = std::fs::read_dir(&lib).ok().and_then(|entries| {
                entries.filter_map(|entry| entry.ok().map(|entry| entry.path())).find(|path| {
                    let name = path.file_name().unwrap_or_default().to_string_lossy();
                    name.starts_with("python3") && path.join("site-packages/tensorflow/include").is_dir()
                })
            });
            match python {
                Some(python) => python.join("site-packages/tensorflow/include"),
                None => panic!("no TensorFlow headers under {}: {HINT}", lib.display()),
            }
        }
    };
    for header in HEADERS {
        assert!(dir.join(header).is_file(), "no {header} under {}: {HINT}", dir.display());
    }
    dir
}

/// Compiles and runs the generated C program once; maps each C expression to its value.
fn c_values() -> &'static BTreeMap<String, i64> {
    static VALUES: OnceLock<BTreeMap<String, i64>> = OnceLock::new();
    VALUES.get_or_init(|| {
        let include = include_dir();
        let mut source = String::from("#include <stddef.h>\n#include <stdio.h>\n");
        for header in HEADERS {
            writeln!(source, "#include \"{header}\"").unwrap();
        }
        source.push_str("\nint main(void) {\n");
        for (expr, _) in probes() {
            writeln!(source, "  printf(\"%lld\\n\", (long long)({expr}));").unwrap();
        }
        source.push_str("  return 0;\n}\n");

        let dir = std::env::temp_dir().join(format!("tfwasm-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c_file, exe) = (dir.join("layout.c"), dir.join("layout"));
        std::fs::write(&c_file, &source).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let compiled = Command::new(&cc)
            .arg("-I")
            .arg(&include)
            .arg(&c_file)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` (set CC): {e}"));
        assert!(
            compiled.status.success(),
            "{cc} failed on the layout probe against {}:\n{}",
            include.display(),
            String::from_utf8_lossy(&compiled.stderr)
        );
        let ran = Command::new(&exe).output().expect("run the layout probe");
        assert!(ran.status.success(), "the layout probe failed: {:?}", ran.status);
        let _ = std::fs::remove_dir_all(&dir);

        let stdout = String::from_utf8(ran.stdout).unwrap();
        let values: Vec<i64> = stdout.lines().map(|line| line.parse().unwrap()).collect();
        let exprs = probes().into_iter().map(|(expr, _)| expr);
        assert_eq!(values.len(), exprs.len(), "the layout probe printed the wrong number of lines");
        exprs.zip(values).collect()
    })
}

fn mismatches(probes: impl IntoIterator<Item = (String, i64)>) -> Vec<String> {
    let c = c_values();
    probes
        .into_iter()
        .filter(|(expr, rust)| c[expr] != *rust)
        .map(|(expr, rust)| format!("{expr}: C {} vs Rust {rust}", c[&expr]))
        .collect()
}

/// Whether the headers are a newer TensorFlow's than the one the mirrors
/// are of (`bash tests/run.sh --tf nightly` sets `TFWASM_TF=nightly`).
/// There a struct may have grown fields appended after the ones the plugin
/// mirrors (2.22 appends `create_stream_with_options` to
/// `SP_StreamExecutor`): TensorFlow reads only what the `struct_size` we
/// report covers, and we read only our prefix of its structs. Every field
/// we mirror must still sit where the header puts it.
fn newer_headers() -> bool {
    std::env::var("TFWASM_TF").as_deref() == Ok("nightly")
}

#[test]
fn struct_sizes_offsets_and_struct_size_macros_match_the_headers() {
    let constants: Vec<_> = constants().into_iter().map(|(expr, _)| expr.to_string()).collect();
    let c = c_values();
    let (appended, wrong): (Vec<_>, Vec<_>) =
        mismatches(probes().into_iter().filter(|(expr, _)| !constants.contains(expr))).into_iter().partition(|line| {
            let expr = line.split(':').next().unwrap_or_default();
            let whole_struct = (expr.starts_with("sizeof(") && !expr.contains("->")) || expr.ends_with("_STRUCT_SIZE");
            let rust: i64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(i64::MAX);
            newer_headers() && whole_struct && c[expr] > rust
        });
    for line in &appended {
        eprintln!("newer headers append fields the plugin leaves unset: {line}");
    }
    assert!(wrong.is_empty(), "#[repr(C)] mirrors differ from the TensorFlow headers:\n  {}", wrong.join("\n  "));
}

#[test]
fn enum_status_and_version_constants_match_the_headers() {
    let wrong = mismatches(constants().into_iter().map(|(expr, value)| (expr.to_string(), value)));
    assert!(wrong.is_empty(), "constants differ from the TensorFlow headers:\n  {}", wrong.join("\n  "));
}

/// The table must list every field: consecutive fields leave no gap beyond
/// alignment padding, and the last one ends where the struct's padding starts.
/// (The other tests prove these numbers equal the C ones.)
#[test]
fn the_table_lists_every_field() {
    let round_up = |n: usize, align: usize| n.div_ceil(align) * align;
    for s in layouts() {
        let mut end = 0;
        for f in &s.fields {
            assert_eq!(
                f.offset,
                round_up(end, f.align),
                "{}: `{}` does not follow the previous field: the table misses a field or is out of header order",
                s.name,
                f.rust
            );
            end = f.offset + f.size;
        }
        assert_eq!(s.size, round_up(end, s.align), "{}: a field is missing from the layout table at the end", s.name);
        if let Some(struct_size) = s.struct_size {
            assert_eq!(struct_size, end, "{}::struct_size() must end at its last field", s.name);
        }
    }
}
