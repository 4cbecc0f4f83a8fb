#!/usr/bin/env bash
# Builds the C device guest: a component exporting the WIT world
# tfwasm:device/device, written to
#   ${CARGO_TARGET_DIR:-target}/wasm32-wasip2/guest/tfwasm_c_device.wasm
#
#   bash guest/c-device/build.sh         build (nothing to do when no input changed)
#   bash guest/c-device/build.sh test    also run the unit tests (tests/unit.c) natively
#
# Steps: host/scripts/guest-tools.sh installs what is missing; `wit-bindgen c`
# generates the bindings from wit/device into the build directory (never
# committed); clang compiles for wasm32-wasi with wasi-libc for malloc and
# string functions only, and wasm-ld links a core module with no entry point;
# `wasm-tools component new` wraps it into a component. The module imports
# nothing but the world's own interfaces (no WASI), so no adapter is needed,
# and the script fails if a WASI import ever creeps in.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
run_tests=false
case "${1:-}" in
    "") ;;
    test) run_tests=true ;;
    *)
        echo "usage: bash guest/c-device/build.sh [test]" >&2
        exit 2
        ;;
esac

bash "$root/host/scripts/guest-tools.sh" wasm-tools wit-bindgen c
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

# Cargo's target directory, so this guest lands beside the Rust ones.
target_dir=${CARGO_TARGET_DIR:-$root/target}
[[ "$target_dir" == /* ]] || target_dir="$PWD/$target_dir"
build_dir="$target_dir/c-device"
out_dir="$target_dir/wasm32-wasip2/guest"
out="$out_dir/tfwasm_c_device.wasm"
mkdir -p "$build_dir" "$out_dir"

sources=("$here"/src/*.c)
# Warnings for our own code; the generated bindings get the same minus
# -Wpedantic (they cast a compound literal to its own type).
warnings=(-Wall -Wextra -Wshadow -Wstrict-prototypes -Wconversion -Wno-sign-conversion)

if $run_tests; then
    # Natively, with the sanitizers where the compiler has them.
    sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=all)
    echo 'int main(void){return 0;}' >"$build_dir/probe.c"
    clang "${sanitize[@]}" -o "$build_dir/probe" "$build_dir/probe.c" 2>/dev/null || sanitize=()
    clang -std=c11 -O1 -g "${warnings[@]}" -Wpedantic "${sanitize[@]}" -I"$here/src" \
        -o "$build_dir/unit" "$here/tests/unit.c" "$here/src/allocator.c" "$here/src/ordering.c" \
        "$here/src/settings.c" "$here/src/fault.c"
    "$build_dir/unit"
fi

# Skip the build when nothing that goes into it changed.
stamp="$build_dir/inputs.sha256"
digest=$(
    cat "${sources[@]}" "$here"/src/*.h "$root"/wit/device/*.wit "${BASH_SOURCE[0]}" | sha256sum
    clang --version | head -1
    wit-bindgen --version
    wasm-tools --version
)
if [[ -f "$out" && -f "$stamp" && "$(cat "$stamp")" == "$digest" ]]; then
    exit 0
fi

bindings="$build_dir/bindings"
rm -rf "$bindings"
if ! log=$(wit-bindgen c --world device --out-dir "$bindings" "$root/wit/device" 2>&1); then
    echo "$log" >&2
    exit 1
fi

sysroot=()
[[ -n "${WASI_SYSROOT:-}" ]] && sysroot=(--sysroot="$WASI_SYSROOT")
cflags=(--target=wasm32-wasi "${sysroot[@]}" -std=c11 -O2)
objects=()
for source in "${sources[@]}"; do
    object="$build_dir/$(basename "${source%.c}").o"
    clang "${cflags[@]}" "${warnings[@]}" -Wpedantic -I"$here/src" -I"$bindings" -c "$source" -o "$object"
    objects+=("$object")
done
clang "${cflags[@]}" "${warnings[@]}" -Wno-conversion -c "$bindings/device.c" -o "$build_dir/bindings.o"

# No crt, no entry point: a library of exports. -nodefaultlibs drops
# compiler-rt's wasm builtins (not needed without long double) and keeps
# libc for malloc, qsort and the string functions. The component-type object
# carries the world, for `component new`. The name section stays, so trap
# messages name the function.
core="$build_dir/tfwasm_c_device.core.wasm"
clang "${cflags[@]}" -nostartfiles -nodefaultlibs -Wl,--no-entry -Wl,--strip-debug \
    -o "$core" "${objects[@]}" "$build_dir/bindings.o" "$bindings/device_component_type.o" -lc

wasm-tools component new "$core" -o "$out.tmp"
# Only the world's own interfaces: host (functions) and types (types only).
imports=$(wasm-tools component wit "$out.tmp" | grep -E '^\s*import ' || true)
if grep -qv 'import tfwasm:device/' <<<"$imports"; then
    echo "error: the C guest imports more than tfwasm:device's interfaces:" >&2
    echo "$imports" >&2
    rm -f "$out.tmp"
    exit 1
fi
mv "$out.tmp" "$out"
echo "$digest" >"$stamp"
echo "built ${out#"$root"/} ($(wc -c <"$out") bytes)"
