#!/usr/bin/env bash
# `make test`: start the real Kafka and Redis, run ruff and pytest against them, and always
# stop the stack afterwards, exiting with pytest's (or ruff's) exit code.
# Extra arguments go to pytest. MEMSTREAM_KEEP_STACK=1 leaves the stack up for another run.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

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
