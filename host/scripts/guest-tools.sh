#!/usr/bin/env bash
# Installs what building a guest needs beyond the Rust toolchain, each tool
# only when it is missing (or, for the pinned crates, at another version).
#
#   bash host/scripts/guest-tools.sh                   all of them
#   bash host/scripts/guest-tools.sh wasm-tools        only wasm-tools (WAT guests, componentizing)
#   bash host/scripts/guest-tools.sh wasm-tools wit-bindgen c   what guest/c-device/build.sh needs
#
#   wasm-tools    `wasm-tools` from crates.io: parses and prints WAT, validates, embeds WIT,
#                 makes components
#   wit-bindgen   `wit-bindgen` (wit-bindgen-cli) from crates.io: C bindings for a WIT world
#   c             clang, wasm-ld (lld) and a wasm32-wasi libc, from apt on Debian/Ubuntu
#
# The crates go to cargo's bin directory (${CARGO_HOME:-~/.cargo}/bin), which
# callers put first on PATH. On a system without apt, install clang, lld and
# wasi-libc (or the wasi-sdk) yourself; WASI_SYSROOT names a sysroot outside
# the Debian location. Prints nothing when everything is already there.
set -euo pipefail

# Pinned: generated bindings and components then do not change under us.
WASM_TOOLS_VERSION=1.263.0
WIT_BINDGEN_VERSION=0.61.0

cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
export PATH="$cargo_bin:$PATH"

# Succeeds when `$1 --version` prints version $2.
has_version() {
    command -v "$1" >/dev/null 2>&1 && [[ "$("$1" --version 2>/dev/null)" == *" $2"* ]]
}

# cargo install CRATE@VERSION [cargo flags], unless BINARY already reports VERSION.
ensure_crate() {
    local binary=$1 crate=$2 version=$3
    shift 3
    if ! has_version "$binary" "$version"; then
        echo "guest tools: installing $crate $version (cargo install --locked)"
        cargo install --locked --quiet "$crate@$version" "$@"
    fi
}

# The wasm32-wasi libc: WASI_SYSROOT if given, else Debian's package.
has_wasi_libc() {
    if [[ -n "${WASI_SYSROOT:-}" ]]; then
        [[ -f "$WASI_SYSROOT/lib/wasm32-wasi/libc.a" ]]
    else
        [[ -f /usr/lib/wasm32-wasi/libc.a ]]
    fi
}

apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: no apt-get here: install $* (clang, lld with wasm-ld, wasi-libc or the wasi-sdk) yourself," >&2
        echo "       and set WASI_SYSROOT to the wasi-libc sysroot if it is not in /usr/lib/wasm32-wasi" >&2
        exit 1
    fi
    local sudo=()
    [[ $EUID -ne 0 ]] && sudo=(sudo)
    echo "guest tools: installing $* (apt-get)"
    # A stale package list is the usual reason an install fails: refresh it once.
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; then
        "${sudo[@]}" apt-get update -qq
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    fi
}

ensure_c() {
    local missing=()
    command -v clang >/dev/null 2>&1 || missing+=(clang)
    command -v wasm-ld >/dev/null 2>&1 || missing+=(lld)
    has_wasi_libc || missing+=(wasi-libc)
    if ((${#missing[@]})); then
        apt_install "${missing[@]}"
    fi
}

wanted=("$@")
((${#wanted[@]})) || wanted=(wasm-tools wit-bindgen c)
for tool in "${wanted[@]}"; do
    case "$tool" in
        # The subcommands guests need (parse, print, validate, dump, strip,
        # metadata, component embed/new/wit): a quarter fewer crates to build
        # than the default set, whose fuzzing and composing tools no guest
        # build uses. A full install of the same version is kept as it is.
        wasm-tools)
            ensure_crate wasm-tools wasm-tools "$WASM_TOOLS_VERSION" \
                --no-default-features --features parse,print,validate,dump,strip,metadata,component
            ;;
        wit-bindgen) ensure_crate wit-bindgen wit-bindgen-cli "$WIT_BINDGEN_VERSION" ;;
        c) ensure_c ;;
        *)
            echo "usage: bash host/scripts/guest-tools.sh [wasm-tools] [wit-bindgen] [c]" >&2
            exit 2
            ;;
    esac
done
