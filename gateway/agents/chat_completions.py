"""The `openai` agent: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
llama.cpp's server, Ollama, ...), streamed, with each session's history kept in Redis.

`GATEWAY_AGENT=openai` with `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `GATEWAY_MODEL`. The
history of a session (`<chat>#<generation>`) lives in one Redis list, bounded
(`GATEWAY_HISTORY_MESSAGES`) and expiring (`GATEWAY_HISTORY_TTL_S`), so a conversation goes
on in whichever worker process runs its next turn, and /new (a new generation) starts
empty. Between two pieces of a streamed answer the turn's cancel flag is checked; a stopped
turn closes the stream (the endpoint stops generating) and nothing is kept or sent. An
endpoint error raises, which the runner turns into an honest short failure reply.

The factory's `signature(context)` names the configuration agents are built under (endpoint,
model, a hash of the key, the system prompt); with `GATEWAY_SYSTEM_PROMPT_FILE` the prompt
is that file's text, looked at again every few seconds, so editing the file rebuilds the
agents of every worker process (the agent cache compares signatures) without a restart.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import redis

from gateway.core.errors import GatewayError
from gateway.core.media import BadMedia, Image
from gateway.core.model import AgentContext, Turn
from gateway.core.settings import Settings

logger = logging.getLogger(__name__)

PROMPT_CHECK_S = 2.0
"""How often the system prompt file is looked at again."""


class EndpointError(GatewayError):
    """The model endpoint refused or failed the request."""


@dataclass(frozen=True, slots=True)
class LlmConfig:
    base_url: str
    api_key: str
    model: str
    system_prompt: str
    history_messages: int
    history_ttl_s: int
    timeout_s: float
    prompt_file: str = ""

    @classmethod
    def from_settings(cls, s: Settings) -> LlmConfig:
        keep = s.history_messages - s.history_messages % 2  # whole exchanges: roles alternate
        return cls(s.openai_base_url, s.openai_api_key.get_secret_value().strip(), s.model,
                   s.system_prompt, keep, s.history_ttl_s, s.llm_timeout_s,
                   s.system_prompt_file)

    def __repr__(self) -> str:  # the key never prints
        return f"LlmConfig(base_url={self.base_url!r}, model={self.model!r})"


class History:
    """One session's messages in a Redis list: `{"role", "content", "mid"}` JSON items."""

    def __init__(self, client: redis.Redis, session_key: str, *, keep: int, ttl_s: int) -> None:
        self._redis = client
        self.key = f"gw:hist:{{{session_key}}}"
        self.keep = keep
        self.ttl_s = ttl_s

    def load(self) -> list[dict[str, str]]:
        if self.keep <= 0:
            return []
        return [json.loads(raw) for raw in self._redis.lrange(self.key, -self.keep, -1)]

    def add(self, earlier: list[dict[str, str]], message_id: str, question: str,
            answer: str) -> None:
        """Append one exchange, unless a crashed run of this message already did."""
        if self.keep <= 0 or any(m.get("mid") == message_id for m in earlier[-2:]):
            return
        items = [json.dumps({"role": role, "content": text, "mid": message_id},
                            ensure_ascii=False)
                 for role, text in (("user", question), ("assistant", answer))]
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.rpush(self.key, *items)
            pipe.ltrim(self.key, -self.keep, -1)
            pipe.expire(self.key, self.ttl_s)
            pipe.execute()


class ChatCompletionsAgent:
    def __init__(self, config: LlmConfig, http: httpx.Client, history: History) -> None:
        self.config = config
        self._http = http
        self.history = history

    def run(self, turn: Turn) -> Iterator[str | Image]:
        earlier = self.history.load()
        messages = [{"role": "system", "content": self.config.system_prompt},
                    *({"role": m["role"], "content": m["content"]} for m in earlier
                      if m.get("mid") != turn.message_id),  # a re-run: not its own exchange
                    {"role": "user", "content": turn.text}]
        return self._stream(turn, earlier, messages)

    def _stream(self, turn: Turn, earlier: list[dict[str, str]],
                messages: list[dict[str, str]]) -> Iterator[str | Image]:
        body = {"model": self.config.model, "messages": messages, "stream": True}
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key \
            else {}
        pieces: list[str] = []
        with self._http.stream("POST", f"{self.config.base_url}/chat/completions",
                               json=body, headers=headers) as response:
            if response.status_code >= 400:
                response.read()
                raise EndpointError(f"the model endpoint answered HTTP {response.status_code}: "
                                    f"{error_message(response)}")
            for piece in sse_pieces(response.iter_lines()):
                if turn.cancelled():
                    return  # leaving the block closes the stream: the endpoint stops
                if isinstance(piece, str):
                    pieces.append(piece)
                yield piece
        if pieces and not turn.cancelled():
            self.history.add(earlier, turn.message_id, turn.text, "".join(pieces))


def sse_pieces(lines: Iterator[str]) -> Iterator[str | Image]:
    """The text pieces of a streamed chat completion (`data: {...}` lines up to [DONE]), and
    the images it carries as data URLs (a model that draws, a tool's picture): in a delta's
    `images` (OpenRouter's shape) or among its `content` parts (`image_url`)."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
            choices = chunk.get("choices") or []
        except (ValueError, AttributeError):
            raise EndpointError("the model endpoint sent a piece that is not JSON") from None
        error = chunk.get("error")
        if error:  # vLLM and llama.cpp report a failure mid-stream this way
            detail = error.get("message") if isinstance(error, dict) else error
            raise EndpointError(f"the model endpoint failed mid-stream: {str(detail)[:200]}")
        for choice in choices:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            parts = content if isinstance(content, list) else [content]
            for part in [*parts, *(delta.get("images") or [])]:
                if isinstance(part, str) and part:
                    yield part
                elif isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]
                elif isinstance(part, dict) and (image := image_of(part)) is not None:
                    yield image


def image_of(part: dict[str, Any]) -> Image | None:
    """The picture of an `image_url` part given as a data URL; None for another part, or
    (one warning line) for an image Feishu would not take or a URL to fetch."""
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    if not isinstance(url, str):
        return None
    head, _, encoded = url.partition(",")
    if not (head.startswith("data:image/") and head.endswith(";base64")):
        logger.warning("an image the model endpoint linked to was not sent: only data URLs "
                       "are (%s)", url[:60])
        return None
    try:
        return Image(base64.b64decode(encoded, validate=True),
                     name="image." + head[len("data:image/"):-len(";base64")])
    except (ValueError, BadMedia) as error:
        logger.warning("an image from the model endpoint was not sent: %s", error)
        return None


def error_message(response: httpx.Response) -> str:
    """The endpoint's own error message if it sent one (OpenAI's error shape), else the
    start of its body."""
    try:
        error: Any = response.json().get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:200]
    except (ValueError, AttributeError):
        pass  # not JSON: the body says it
    return response.text[:200]


class PromptFile:
    """The system prompt kept in a file: read again when its size or mtime changed, looked
    at no more than every `PROMPT_CHECK_S`. An unreadable file keeps the last text read (or
    `fallback`), said once per failure in the log."""

    def __init__(self, path: str, fallback: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._text = fallback
        self._stamp: tuple[int, int] | None = None
        self._checked_at = -PROMPT_CHECK_S
        self._clock = clock
        self._guard = threading.Lock()
        self._failing = False

    def text(self) -> str:
        with self._guard:
            now = self._clock()
            if now - self._checked_at >= PROMPT_CHECK_S:
                self._checked_at = now
                self._refresh()
            return self._text

    def _refresh(self) -> None:
        try:
            info = os.stat(self.path)
            stamp = (info.st_mtime_ns, info.st_size)
            if stamp != self._stamp:
                with open(self.path, encoding="utf-8") as handle:
                    self._text = handle.read().strip()
                self._stamp = stamp
            self._failing = False
        except (OSError, UnicodeDecodeError) as error:
            if not self._failing:
                logger.warning("GATEWAY_SYSTEM_PROMPT_FILE %s cannot be read (%s); keeping the "
                               "prompt read before", self.path, error)
            self._failing = True


_shared: dict[int, tuple[LlmConfig, httpx.Client]] = {}
_building = threading.Lock()
_prompts: dict[tuple[int, str], PromptFile] = {}


def _prompt(config: LlmConfig, path: str) -> str:
    """The system prompt now: the settings' one, or the prompt file's current text."""
    if not path:
        return config.system_prompt
    key = (os.getpid(), path)
    with _building:
        source = _prompts.get(key)
        if source is None:
            source = _prompts[key] = PromptFile(path, config.system_prompt)
    return source.text()


def _process_parts(settings: Settings) -> tuple[LlmConfig, httpx.Client]:
    """The configuration read from the process's settings and one kept-alive HTTP client,
    per process (a forked pool process builds its own)."""
    pid = os.getpid()
    with _building:
        if pid not in _shared:
            timeout = httpx.Timeout(settings.llm_timeout_s, connect=10.0)
            _shared.clear()
            _shared[pid] = (LlmConfig.from_settings(settings), httpx.Client(timeout=timeout))
        return _shared[pid]


def signature_of(config: LlmConfig) -> str:
    """Which configuration an agent was built under; the key only as a hash."""
    key_hash = hashlib.sha256(config.api_key.encode()).hexdigest()
    named = "\0".join(("openai", config.base_url, config.model, key_hash, config.system_prompt))
    return hashlib.sha256(named.encode()).hexdigest()[:12]


class Factory:
    """`GATEWAY_AGENT=openai`: one agent per session, and the signature of what it is built
    under (the agent cache rebuilds agents whose signature is no longer the current one).
    Stateless: a session's history is in Redis (the process's client, from the context),
    read at each turn, so a turn another process ran never leaves an agent here out of
    date."""

    stateless = True

    def _config(self, settings: Settings) -> LlmConfig:
        config = _process_parts(settings)[0]
        return dataclasses.replace(config, system_prompt=_prompt(config, config.prompt_file))

    def signature(self, context: AgentContext) -> str:
        return signature_of(self._config(context.settings))

    def __call__(self, session_key: str, context: AgentContext) -> ChatCompletionsAgent:
        config = self._config(context.settings)
        http = _process_parts(context.settings)[1]
        history = History(context.redis, session_key, keep=config.history_messages,
                          ttl_s=config.history_ttl_s)
        return ChatCompletionsAgent(config, http, history)


factory = Factory()
