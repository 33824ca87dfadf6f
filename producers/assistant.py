"""`Assistant` (seed 001): a chat wrapper whose every context is recalled and logged first."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from producers.memory import Memory
from projector.audit import MemoryState
from queryd.audit import search
from schemas.audit import Document, Message, Recall
from schemas.errors import MemstreamError

__all__ = [
    "Assistant",
    "Reply",
    "MissingAPIKeyError",
    "OPENROUTER_BASE_URL",
    "DEFAULT_SYSTEM_PROMPT",
]

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant with an audited memory. Use the recalled memory below "
    "when it is relevant; say so when it does not answer the question."
)


class MissingAPIKeyError(MemstreamError):
    """No API key was given, OPENROUTER_API_KEY is unset, and no client was injected."""


class Reply(NamedTuple):
    """The logged answer, the Recall written before the model call, and what it named."""

    message: Message
    recall: Recall
    recalled: list[Message | Document]


def _render(item: Message | Document) -> str:
    if isinstance(item, Message):
        return f"[{item.timestamp.isoformat()}] {item.speaker}: {item.content}"
    return f"[document {item.name}] {item.text}"


class Assistant:
    """Talks to any OpenAI-compatible endpoint (OpenRouter by default) over a `Memory`."""

    def __init__(
        self,
        memory: Memory,
        *,
        client: Any = None,
        api_key: str | None = None,
        base_url: str = OPENROUTER_BASE_URL,
        model: str = "openai/gpt-4o-mini",
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        name: str = "assistant",
        recall_limit: int = 5,
        recent_turns: int = 10,
    ) -> None:
        if recall_limit < 0:
            raise ValueError(f"recall_limit: expected >= 0, got {recall_limit}")
        if recent_turns < 0:
            raise ValueError(f"recent_turns: expected >= 0, got {recent_turns}")
        if client is None:
            key = api_key or os.environ.get("OPENROUTER_API_KEY")
            if not key:
                raise MissingAPIKeyError(
                    "no API key: pass api_key=, set OPENROUTER_API_KEY, or pass client="
                )
            try:
                from openai import OpenAI
            except ImportError as exc:  # the openai extra is optional
                raise ImportError(
                    "Assistant needs the 'openai' package: pip install 'memstream[openai]'"
                ) from exc
            client = OpenAI(api_key=key, base_url=base_url)
        self.memory = memory
        self.client = client
        self.model = model
        self.system_prompt = system_prompt
        self.name = name
        self.recall_limit = recall_limit
        self.recent_turns = recent_turns

    def _context(
        self, state: MemoryState, prompt: Message
    ) -> tuple[list[Message], list[Message | Document]]:
        """Recent visible turns of the session, then keyword matches not already there."""
        turns = [
            m
            for m in state.visible_messages
            if m.session_id == prompt.session_id and m.id != prompt.id
        ]
        recent = turns[-self.recent_turns :] if self.recent_turns else []
        taken = {m.id for m in recent} | {prompt.id}
        # Ask for enough to still have recall_limit after dropping what is already taken.
        found = search(state, prompt.content, limit=self.recall_limit + len(taken))
        matches = [item for item in found if item.id not in taken][: self.recall_limit]
        return recent, matches

    def reply(self, prompt: str, *, speaker: str, session_id: str | None = None) -> Reply:
        incoming = self.memory.add_message(
            Message(speaker=speaker, content=prompt, session_id=session_id, source="chat",
                    actor=speaker)
        )

        # The Recall is appended before anything leaves the machine, in the same
        # transaction as the read, so it names exactly what the prompt will hold.
        def build(state: MemoryState) -> tuple[list[Recall], tuple[list, list]]:
            recent, matches = self._context(state, incoming)
            recall = Recall(
                query=prompt,
                recalled=tuple(item.id for item in [*recent, *matches]),
                session_id=session_id,
                source="chat",
                actor=self.name,
            )
            return [recall], (recent, matches)

        stored, (recent, matches) = self.memory.transact(build)
        recall = stored[0]

        messages: list[dict[str, str]] = [{"role": "system", "content": self.system_prompt}]
        if matches:
            memory_text = "\n".join(_render(item) for item in matches)
            messages.append({"role": "system", "content": f"Recalled memory:\n{memory_text}"})
        for turn in recent:
            role = "assistant" if turn.speaker == self.name else "user"
            messages.append({"role": role, "content": turn.content})
        messages.append({"role": "user", "content": prompt})

        response = self.client.chat.completions.create(model=self.model, messages=messages)
        answer = response.choices[0].message.content or ""
        message = self.memory.add_message(
            Message(speaker=self.name, content=answer or "(empty reply)",
                    session_id=session_id, source="chat", actor=self.name)
        )
        return Reply(message=message, recall=recall, recalled=[*recent, *matches])
