//! `proto/ops/wasm-kernels.txt` is the device's kernel table as offline
//! checks of pass answers read it (`tfwasm pass run`/`check`, see
//! `tfwasm_runtime::passes::catalog`). It must list exactly what the kernels
//! crate registers. `TFWASM_BLESS=1 cargo test -p tfwasm-kernels --test
//! kernel_table` rewrites it.

use std::path::Path;

use tfwasm_kernels::registered;
use tfwasm_runtime::passes::catalog::{Kernel, KernelTable, TypeConstraint};

fn table() -> KernelTable {
    KernelTable::new(registered().iter().map(|def| {
        Kernel {
            op: def.op.to_owned(),
            types: def
                .types
                .iter()
                .map(|(attr, dtypes)| TypeConstraint {
                    attr: (*attr).to_owned(),
                    dtypes: dtypes.iter().map(|dtype| dtype.datatype() as u32).collect(),
                })
                .collect(),
        }
    }))
}

#[test]
fn the_kernel_table_snapshot_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/ops/wasm-kernels.txt");
    let text = format!(
        "# The WASM device's kernels: op, then attr=DataType numbers per type attribute.\n\
         # Written by host/kernels/tests/kernel_table.rs (TFWASM_BLESS=1); read by offline pass checks.\n{}",
        table().to_text()
    );
    if std::env::var_os("TFWASM_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        kept == text,
        "{} is not the kernels crate's registry: run TFWASM_BLESS=1 cargo test -p tfwasm-kernels --test kernel_table",
        path.display()
    );
    // What offline checks read back is the registry (kernel order aside).
    assert!(KernelTable::parse(&kept).unwrap().to_text() == table().to_text(), "the table does not read back");
}
