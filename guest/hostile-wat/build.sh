#!/usr/bin/env bash
# Builds the hand-written WAT guests of the hostile suite, one component per
# attack: target/wasm32-wasip2/guest/hostile/<kind>.wasm (under
# $CARGO_TARGET_DIR when it is set), <kind> being the .wat file's name.
#
#   bash guest/hostile-wat/build.sh
#
# A file that starts (after its comments) with `(component` is a component
# in the text format, parsed as it is. Any other file is a core module that
# becomes a component of the world its leading comments name:
#
#   ;; world: NAME            a world of wit/hostile.wit, which imports or lacks
#                             something (default: tfwasm:device's `device`)
#   ;; device-version: X.Y.Z  the `device` world of tfwasm:device at version
#                             X.Y.Z: a guest built for another host
#
# Needs wasm-tools (host/scripts/guest-tools.sh installs it).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

if [[ -f "$root/host/scripts/guest-tools.sh" ]]; then
    bash "$root/host/scripts/guest-tools.sh" wasm-tools
fi
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! command -v wasm-tools >/dev/null 2>&1; then
    echo "error: wasm-tools is not installed (bash host/scripts/guest-tools.sh wasm-tools)" >&2
    exit 1
fi

target=${CARGO_TARGET_DIR:-$root/target}
[[ "$target" == /* ]] || target="$PWD/$target"
out="$target/wasm32-wasip2/guest/hostile"
mkdir -p "$out"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The hostile worlds, with tfwasm:device as one more dependency.
mkdir -p "$work/hostile/deps/device"
cp "$here"/wit/*.wit "$work/hostile/"
cp "$here"/wit/deps/*.wit "$work/hostile/deps/"
cp "$root"/wit/device/*.wit "$work/hostile/deps/device/"

# The value of the leading comment `;; KEY: value` of file $2, if any.
directive() {
    sed -n "s/^;; $1: *//p" "$2" | head -n 1
}

built=0
for wat in "$here"/*.wat; do
    kind=$(basename "$wat" .wat)
    if grep -v -e '^[[:space:]]*;;' -e '^[[:space:]]*$' "$wat" | head -n 1 | grep -q '^(component'; then
        wasm-tools parse "$wat" -o "$out/$kind.wasm"
    else
        world=$(directive world "$wat")
        version=$(directive device-version "$wat")
        wasm-tools parse "$wat" -o "$work/$kind.core.wasm"
        if [[ -n "$world" ]]; then
            wit=("$work/hostile" --world "$world")
        elif [[ -n "$version" ]]; then
            mkdir -p "$work/device-$version"
            sed "s/^package tfwasm:device@[0-9.]*;/package tfwasm:device@$version;/" \
                "$root/wit/device/device.wit" >"$work/device-$version/device.wit"
            wit=("$work/device-$version" --world device)
        else
            wit=("$root/wit/device" --world device)
        fi
        wasm-tools component embed "${wit[@]}" "$work/$kind.core.wasm" -o "$work/$kind.embedded.wasm"
        wasm-tools component new "$work/$kind.embedded.wasm" -o "$out/$kind.wasm"
    fi
    built=$((built + 1))
done
echo "hostile WAT guests: $built components in $out"
