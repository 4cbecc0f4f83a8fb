#!/usr/bin/env bash
# Build and install tfwasm, then run a few ops on /device:WASM:0.
#
#   bash host/scripts/demo.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# The installed wheel already loads the plugin; a second copy would only log an error and stay inert.
unset TF_PLUGGABLE_DEVICE_LIBRARY_PATH

bash host/scripts/setup.sh
printf '\n==> Demo\n'
exec .venv/bin/python host/scripts/demo.py
