#!/usr/bin/env bash
# `make test`: start the real Kafka and Redis, run ruff and pytest against them, and always
# stop the stack afterwards, exiting with pytest's (or ruff's) exit code.
# Extra arguments go to pytest. MEMSTREAM_KEEP_STACK=1 leaves the stack up for another run.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

# The web view's browser tests drive Debian's chromium (tests/queryd/ui): install it when
# missing, quietly; nothing happens when it is there.
if ! command -v chromium >/dev/null 2>&1; then
    echo "installing chromium for the browser tests (apt-get)"
    SUDO=""
    [[ "$(id -u)" != "0" ]] && SUDO="sudo"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } \
        >/dev/null || { echo "error: could not install chromium (apt-get install chromium)" >&2; exit 1; }
fi

stack_down() {
    if [[ "${MEMSTREAM_KEEP_STACK:-}" != "1" ]]; then
        "$BIN/memstream" stack down || echo "warning: memstream stack down failed" >&2
    fi
}
trap stack_down EXIT

"$BIN/memstream" stack up || exit $?
set -a
# shellcheck disable=SC1091
. .stack/env
set +a
echo "KAFKA_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS REDIS_URL=$REDIS_URL"

"$BIN/ruff" check . || exit $?
"$BIN/ruff" format --check . || exit $?
"$BIN/mypy" || exit $?
"$BIN/python" -m pytest "$@"
exit $?
