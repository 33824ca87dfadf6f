"""Each attack test of tests/producers/test_signed_log.py must fail with the check that
refuses its attack removed. This removes one check of projector/authorship.py at a time,
runs the tests that attack it (both logs; Kafka from KAFKA_BOOTSTRAP_SERVERS / REDIS_URL),
prints the outcome, and restores the file. Run: .venv/bin/python scripts/mutate_authorship.py
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET = ROOT / "projector" / "authorship.py"
RAISE = "        raise AuthorshipError(\n"

# name: (the check's text, what replaces it, the tests' -k expression)
MUTATIONS = {
    "forged actor": ("        if record.actor != signer:\n", "        if False:\n", "forged_actor"),
    "forged names": (
        "        if isinstance(value, str) and value in others:\n",
        "        if False:\n",
        "forged_speaker",
    ),
    "revoked key": (
        "        if agent.revoked_seq is not None:\n"
        + "    "
        + RAISE
        + '                f"signed by',
        "        if False:\n" + "    " + RAISE + '                f"signed by',
        "revoked_key",
    ),
    "replay": (
        "        found = known.get(record.id)\n",
        "        found = None\n",
        "test_a_replayed_signed_record",
    ),
    "signature": (
        "        _public_key(public_key).verify(signature, text)\n",
        "        pass\n",
        "new_id or badly_signed",
    ),
    "what it may append": (
        "        if kind not in agent.may:\n",
        "        if False:\n",
        "beyond_what",
    ),
    "unsigned": (
        "    if signer is None:\n" + RAISE + '            f"{_kind',
        "    if False:\n" + RAISE + '            f"{_kind',
        "unsigned_record_on",
    ),
    "non-admin": (
        "    if signer not in auth.admins:\n" + RAISE + '            f"{record.type}',
        "    if False:\n" + RAISE + '            f"{record.type}',
        "non_admin",
    ),
}


def main() -> int:
    original = TARGET.read_text()
    python = str(ROOT / ".venv" / "bin" / "python")
    test_file = "tests/producers/test_signed_log.py"
    try:
        for name, (old, new, tests) in MUTATIONS.items():
            if original.count(old) != 1:
                print(f"{name}: the check's text is not found once")
                return 2
            TARGET.write_text(original.replace(old, new))
            done = subprocess.run(
                [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, "-k", tests],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            print(f"{name} removed -> {done.stdout.strip().splitlines()[-1]}")
    finally:
        TARGET.write_text(original)
    return 0


if __name__ == "__main__":
    sys.exit(main())
