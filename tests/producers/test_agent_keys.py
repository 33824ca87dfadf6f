"""The agent keyring a service signs with (queryd's `--agent-keys`): a file is used only
as the key of the agent it is named for, checked as every key file is, and re-read when
it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from producers.keys.agent_keys import AgentKeyring, agent_key_file
from producers.logs.signing_key import SigningKeyError, init_key


def test_a_keyring_gives_each_agent_its_own_key_and_notices_a_new_one(tmp_path: Path) -> None:
    ring = AgentKeyring(tmp_path)
    assert agent_key_file(tmp_path, "agent:alice").name == "agent_alice.key"
    assert ring.signer("agent:alice") is None  # no file: none
    first = init_key(agent_key_file(tmp_path, "agent:alice"), "agent:alice")
    assert ring.signer("agent:alice").verifier == first.verifier  # type: ignore[union-attr]
    # replaced on disk (a new key for alice): the next call reads it
    agent_key_file(tmp_path, "agent:alice").unlink()
    second = init_key(agent_key_file(tmp_path, "agent:alice"), "agent:alice")
    assert second.verifier != first.verifier
    assert ring.signer("agent:alice").verifier == second.verifier  # type: ignore[union-attr]


def test_a_keyring_refuses_another_agents_key_and_a_readable_file(tmp_path: Path) -> None:
    ring = AgentKeyring(tmp_path)
    bob = init_key(tmp_path / "bob.key", "agent:bob")
    file = agent_key_file(tmp_path, "agent:carol")
    file.write_text(bob.text() + "\n")
    os.chmod(file, 0o600)
    with pytest.raises(SigningKeyError, match="holds the key of 'agent:bob', not of agent"):
        ring.signer("agent:carol")
    init_key(agent_key_file(tmp_path, "agent:dan"), "agent:dan")
    os.chmod(agent_key_file(tmp_path, "agent:dan"), 0o644)
    with pytest.raises(SigningKeyError, match="readable by others"):
        ring.signer("agent:dan")
    agent_key_file(tmp_path, "agent:erin").write_text("not a key\n")
    os.chmod(agent_key_file(tmp_path, "agent:erin"), 0o600)
    with pytest.raises(SigningKeyError, match="agent_erin.key"):
        ring.signer("agent:erin")
