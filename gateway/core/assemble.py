"""Stream assembly: backend chunks in, what each choice may say out. Pure, no I/O.

This is where the gateway refuses to trust the backend, for every backend contract:

- bytes are decoded incrementally, so a UTF-8 character split across two responses is never
  surfaced as U+FFFD (invalid bytes still are, as every decoder must);
- stop strings are enforced here: a tail that could still become a stop string is held back until
  it resolves, so no chunk ever shows part of a matched stop string, and the caller is told to
  cancel the backend once every choice is done;
- the finish reason is the real one, and usage is the backend's token counts (input counts are
  repeated per response, output counts are deltas).

The per-token path allocates one small tuple per event; no pydantic, no logging.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from gateway.backend.types import GenerationChunk
from gateway.core.detokenize import IncrementalDetokenizer
from gateway.core.generation_plan import Detokenizing, ReasoningPlan, ToolPlan
from gateway.core.logprobs import chat_logprobs, completion_logprobs
from gateway.core.reasoning import ReasoningReader
from gateway.core.toolcalls import ToolCallOut, ToolCallReader
from gateway.errors import BackendError


class ChoiceEvent(NamedTuple):
    """What one choice says in response to one backend chunk."""

    index: int  # type: ignore[assignment]  # shadows tuple.index, which nothing here calls
    text: str
    finish_reason: str | None
    logprobs: Any
    """The backend's entries (a list), then (``RequestAssembler``) the OpenAI object (a dict)."""
    tool_calls: tuple[ToolCallOut, ...] | None = None
    """Calls the choice completed with this chunk (tool calling only: ``core/toolcalls.py``)."""
    reasoning: str = ""
    """Reasoning the choice said with this chunk (reasoning models only: ``core/reasoning.py``);
    ``text`` is then the answer alone."""


_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int | None = None
    """Of the completion tokens, the reasoning's; None: the model's output is not split."""
    cached_tokens: int | None = None
    """Of the prompt tokens, those the engine reused from its KV cache; None: it did not say."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage


def find_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """The stop string that completes first in ``text``: (position, stop).

    "First" means the earliest *end*, ties going to the earliest start: that is the stop a
    token-by-token engine would have hit first, and it makes the result independent of how the
    text was chunked (the earliest *start* is not: "bc" inside "abcd" ends before "abcd" does).
    """
    best: tuple[int, int, str] | None = None
    for stop in stops:
        position = text.find(stop)
        if position == -1:
            continue
        candidate = (position + len(stop), position, stop)
        if best is None or candidate[:2] < best[:2]:
            best = candidate
    return None if best is None else (best[1], best[2])


def partial_stop_length(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


class ChoiceAssembler:
    """One sequence's state: UTF-8 decoder, held-back tail, finish reason, token count."""

    __slots__ = (
        "_decoder",
        "_held",
        "_partial",
        "_stops",
        "_include_stop",
        "finish_reason",
        "stop_sequence",
        "completion_tokens",
    )

    def __init__(self, stops: Sequence[str], include_stop: bool) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = False
        """Whether the decoder holds the first bytes of a character split between responses."""
        self._held = ""
        self._stops = tuple(s for s in stops if s)
        self._include_stop = include_stop
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None
        """The stop string that ended the sequence (Anthropic's ``stop_sequence`` names it); None
        when it ended any other way."""
        self.completion_tokens = 0

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def feed(self, data: bytes, finish_reason: str | None) -> str:
        """Text that is now safe to emit; sets ``finish_reason`` when the sequence ends."""
        if self.finish_reason is not None:
            return ""
        ending = finish_reason is not None
        # Bytes that end in ASCII and follow a whole character decode alone exactly as the
        # incremental decoder would decode them (this check and ``bytes.decode``: half its cost);
        # a split or invalid character goes to the decoder.
        if not self._partial and data[-1:] < b"\x80":
            try:
                text = data.decode()
            except UnicodeDecodeError:
                text = self._decode(data, ending)
        else:
            text = self._decode(data, ending)
        if not self._stops:
            if ending:
                self.finish_reason = finish_reason
            return text
        text = self._held + text
        found = find_stop(text, self._stops)
        if found is not None:
            position, stop = found
            self._held = ""
            self.finish_reason = "stop"
            self.stop_sequence = stop
            return text[: position + len(stop)] if self._include_stop else text[:position]
        if ending:
            self._held = ""
            self.finish_reason = finish_reason
            return text
        keep = partial_stop_length(text, self._stops)
        if keep:
            self._held = text[-keep:]
            return text[:-keep]
        self._held = ""
        return text

    def _decode(self, data: bytes, ending: bool) -> str:
        text = self._decoder.decode(data, ending)
        self._partial = bool(self._decoder.getstate()[0])
        return text

    def finish(self, reason: str) -> str:
        """End the sequence now (the backend's stream ended without saying why)."""
        if self.finish_reason is not None:
            return ""
        text = self._held + self._decoder.decode(b"", True)
        self._held = ""
        self.finish_reason = reason
        return text


def _inconsistent(chunk: GenerationChunk) -> str:
    """The error for a response whose outputs disagree on the number of sequences. Pairing them
    anyway would put text at the wrong choice or invent a finish reason for a sequence the
    response does not carry (what Triton's vLLM backend sends for ``n`` > 1 when not streaming)."""
    sizes = [f"{len(chunk.text)} text_output", f"{len(chunk.finish_reason)} finish_reason"]
    if chunk.num_output_tokens is not None:
        sizes.append(f"{len(chunk.num_output_tokens)} num_output_tokens")
    if chunk.logprobs is not None:
        sizes.append(f"{len(chunk.logprobs)} logprobs")
    return f"the backend's response is inconsistent: {', '.join(sizes)} elements (one per sequence expected)"


class GenerationAssembler:
    """All choices of one request. ``feed`` a chunk, get the events to send."""

    def __init__(
        self,
        n: int,
        *,
        stops: Sequence[str] = (),
        include_stop: bool = False,
        max_tokens: int | None = None,
    ) -> None:
        self.choices = [ChoiceAssembler(stops, include_stop) for _ in range(n)]
        self.prompt_tokens = 0
        self.cached_tokens: int | None = None
        self._max_tokens = max_tokens

    @property
    def done(self) -> bool:
        choices = self.choices
        if len(choices) == 1:  # asked twice per token: skip the generator for the usual n = 1
            return choices[0].finish_reason is not None
        return all(choice.done for choice in choices)

    @property
    def usage(self) -> Usage:
        return Usage(
            self.prompt_tokens, sum(c.completion_tokens for c in self.choices), cached_tokens=self.cached_tokens
        )

    def feed(self, chunk: GenerationChunk) -> list[ChoiceEvent]:
        # One unpacking instead of a NamedTuple property per field: this runs per token.
        texts, reasons, num_input_tokens, counts, entries, final, _, cached = chunk
        if cached is not None:
            self.cached_tokens = cached
        if num_input_tokens is not None:
            self.prompt_tokens = num_input_tokens
        choices = self.choices
        sequences = len(texts)
        if sequences > len(choices):
            raise BackendError(f"the backend returned {sequences} sequences, {len(choices)} were asked for")
        if (
            len(reasons) != sequences
            or (counts is not None and len(counts) != sequences)
            or (entries is not None and len(entries) != sequences)
        ):
            raise BackendError(_inconsistent(chunk))
        events: list[ChoiceEvent] = []
        for index, data in enumerate(texts):
            choice = choices[index]
            if choice.finish_reason is not None:
                continue
            if counts is not None:
                choice.completion_tokens += counts[index]
            reason = reasons[index]
            if reason == "abort":
                raise BackendError("the backend aborted the request")
            text = choice.feed(data, reason)
            logprobs = entries[index] if entries is not None else None
            finish_reason: str | None = choice.finish_reason  # (``feed`` may have set it)
            if text or finish_reason is not None or logprobs:
                # ``tuple.__new__`` with every field: the NamedTuple's ``__new__`` is a Python frame
                events.append(_new_tuple(ChoiceEvent, (index, text, finish_reason, logprobs, None, "")))
        if final:
            events.extend(self.close())
        return events

    def close(self) -> list[ChoiceEvent]:
        """The backend's stream ended: end every choice still open, with the reason we can infer."""
        events = []
        for index, choice in enumerate(self.choices):
            if choice.done:
                continue
            capped = self._max_tokens is not None and choice.completion_tokens >= self._max_tokens
            text = choice.finish("length" if capped else "stop")
            events.append(ChoiceEvent(index, text, choice.finish_reason, None))
        return events


class TokenCountingAssembler(GenerationAssembler):
    """A ``GenerationAssembler`` for what some TensorRT-LLM layouts answer, kept apart so that a
    plain stream's per-token path does none of it: token ids, detokenized here (one
    ``IncrementalDetokenizer`` per sequence, which also names logprob entries' tokens), and/or no
    token counts, so a sequence's tokens are counted from its text once it ends (``count_text``)."""

    def __init__(
        self,
        n: int,
        *,
        stops: Sequence[str] = (),
        include_stop: bool = False,
        max_tokens: int | None = None,
        detokenizers: Sequence[IncrementalDetokenizer] | None = None,
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        super().__init__(n, stops=stops, include_stop=include_stop, max_tokens=max_tokens)
        self._detokenizers = detokenizers
        self._count_text = count_text
        self._generated: list[list[bytes]] = [[] for _ in range(n)]
        """Each sequence's text so far, for ``count_text``."""
        self._counted = [False] * n
        """Whether a sequence's tokens are counted: by the backend, or once from its text."""

    def feed(self, chunk: GenerationChunk) -> list[ChoiceEvent]:
        detokenizers = self._detokenizers
        if chunk.token_ids is not None and detokenizers is not None:
            texts = tuple(d.feed(ids).encode() for d, ids in zip(detokenizers, chunk.token_ids, strict=False))
            entries = chunk.logprobs
            if entries is not None:
                entries = tuple(d.name_tokens(e) for d, e in zip(detokenizers, entries, strict=False))
            chunk = chunk._replace(text=texts, logprobs=entries)
        if self._count_text is not None:
            counts = chunk.num_output_tokens
            for index, data in enumerate(chunk.text[: len(self.choices)]):
                if counts is not None and index < len(counts):
                    self._counted[index] = True  # the backend's counts stand
                elif not self.choices[index].done:
                    self._generated[index].append(data)
        events = super().feed(chunk)
        for index, choice in enumerate(self.choices):
            if choice.done:
                self._count(index)
        return events

    def close(self) -> list[ChoiceEvent]:
        events = []
        for index, choice in enumerate(self.choices):
            if choice.done:
                continue
            if self._detokenizers is not None:  # what the last ids left undecided
                rest = self._detokenizers[index].finish().encode()
                self._generated[index].append(rest)
                text = choice.feed(rest, None) if rest else ""
                if text or choice.done:
                    events.append(ChoiceEvent(index, text, choice.finish_reason, None))
            self._count(index)
        events.extend(super().close())
        return coalesce(events)

    def _count(self, index: int) -> None:
        if self._count_text is None or self._counted[index]:
            return
        self._counted[index] = True
        parts = self._generated[index]
        if parts:
            self.choices[index].completion_tokens = self._count_text(b"".join(parts).decode("utf-8", "replace"))
            parts.clear()


def coalesce(events: list[ChoiceEvent]) -> list[ChoiceEvent]:
    """Join consecutive text of the same choice into one event (one chunk on the wire). Events
    carrying logprobs are kept apart, since their per-token entries must stay aligned."""
    if len(events) < 2:
        return events
    out: list[ChoiceEvent] = []
    where: dict[int, int] = {}
    for event in events:
        at = where.get(event.index)
        if at is not None:
            previous = out[at]
            if (
                previous.finish_reason is None
                and previous.logprobs is None
                and event.logprobs is None
                and previous.tool_calls is None
                and event.tool_calls is None
                and not (previous.text and event.reasoning)  # reasoning never follows answer text
            ):
                out[at] = ChoiceEvent(
                    event.index,
                    previous.text + event.text,
                    event.finish_reason,
                    None,
                    None,
                    previous.reasoning + event.reasoning,
                )
                continue
        where[event.index] = len(out)
        out.append(event)
    return out


class RequestAssembler:
    """All choices of one request, each from its own single-sequence backend generation (the
    plan's requests, in choice order: prompt × n + i). Logprobs are mapped to OpenAI's shape only
    when they were asked for; usage counts each prompt once, however many choices it has."""

    def __init__(
        self,
        *,
        n: int,
        chat: bool,
        top_logprobs: int | None,
        max_tokens: Sequence[int],
        prompt_tokens: Sequence[int | None] = (),
        stops: Sequence[str] = (),
        include_stop: bool = False,
        echo: Sequence[str] | None = None,
        tools: ToolPlan | None = None,
        reasoning: ReasoningPlan | None = None,
        token_ids: bool = False,
        detokenize: Detokenizing | None = None,
        prompt_ids: Sequence[Sequence[int]] = (),
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        """``max_tokens``, ``prompt_tokens`` and ``echo`` are per prompt; ``tools``: read each
        choice's text for tool calls; ``reasoning``: split it into reasoning and answer first;
        ``token_ids``: name logprob tokens ``token_id:<id>``."""
        self.n = n
        self.chat = chat
        self.top = top_logprobs
        self.token_ids = token_ids
        self.assemblers: list[GenerationAssembler] = [
            GenerationAssembler(1, stops=stops, include_stop=include_stop, max_tokens=m)
            if detokenize is None and count_text is None
            else TokenCountingAssembler(
                1,
                stops=stops,
                include_stop=include_stop,
                max_tokens=m,
                detokenizers=None
                if detokenize is None
                else [
                    IncrementalDetokenizer(
                        detokenize.tokenizer,
                        prompt_ids[p * n + i] if prompt_ids else (),
                        skip_special_tokens=detokenize.skip_special_tokens,
                    )
                ],
                count_text=count_text,
            )
            for p, m in enumerate(max_tokens)
            for i in range(n)
        ]
        self._lone = self.assemblers[0].choices[0] if len(self.assemblers) == 1 else None
        """The one choice of a request with one (``done`` is asked per token)."""
        for prompt, counted in enumerate(prompt_tokens):
            for assembler in self.assemblers[prompt * n : (prompt + 1) * n]:
                assembler.prompt_tokens = counted or 0  # the backend's own count replaces it when sent
        # legacy logprobs' text_offset: where each choice's next token starts (after an echoed
        # prompt), counted in the tokens' own text as vLLM counts it (see ``_globalize``)
        self.offsets = [len(echo[p]) if echo else 0 for p in range(len(max_tokens)) for _ in range(n)]
        self.readers = [ToolCallReader(tools) for _ in self.assemblers] if tools is not None else None
        self.thinkers = [ReasoningReader(reasoning) for _ in self.assemblers] if reasoning is not None else None
        self._rewrite = top_logprobs is not None or tools is not None or reasoning is not None
        """Whether events need ``_globalize`` beyond their choice index."""

    @property
    def done(self) -> bool:
        lone = self._lone
        if lone is not None:
            return lone.finish_reason is not None
        return all(a.done for a in self.assemblers)

    @property
    def usage(self) -> Usage:
        assemblers = self.assemblers
        thinkers = self.thinkers
        reasoning = None if thinkers is None else sum(t.tokens for t in thinkers)
        if len(assemblers) == 1:
            usage = assemblers[0].usage
            return (
                usage
                if reasoning is None
                else Usage(usage.prompt_tokens, usage.completion_tokens, reasoning, usage.cached_tokens)
            )
        # Each of a prompt's n generations reports the same prompt: count it once (as vLLM and
        # OpenAI do for n > 1), from whichever generation has reported it so far.
        n = self.n
        prompt = sum(max(a.prompt_tokens for a in assemblers[p : p + n]) for p in range(0, len(assemblers), n))
        cached = [a.cached_tokens for a in assemblers if a.cached_tokens is not None]
        return Usage(
            prompt,
            sum(a.choices[0].completion_tokens for a in assemblers),
            reasoning,
            sum(cached) if len(cached) == len(assemblers) else None,
        )

    @property
    def finish_reasons(self) -> list[str | None]:
        reasons = [a.choices[0].finish_reason for a in self.assemblers]
        if self.readers is None:
            return reasons
        return [reader.finish_reason(reason) for reader, reason in zip(self.readers, reasons, strict=True)]

    @property
    def stop_sequences(self) -> list[str | None]:
        """Per choice, the stop string that ended it (None: it ended another way, or not yet)."""
        return [a.choices[0].stop_sequence for a in self.assemblers]

    @property
    def choice_completion_tokens(self) -> list[int]:
        """Completion tokens per choice so far (streams with continuous usage split a step's
        tokens among the chunks that carry them)."""
        return [a.choices[0].completion_tokens for a in self.assemblers]

    def lone_feed(self) -> tuple[Callable[[GenerationChunk], list[ChoiceEvent]], ChoiceAssembler] | None:
        """For a request of one choice whose events need no rewriting (no logprobs, tools or
        reasoning): its generation's ``feed`` and its choice, which ``feed`` and ``done`` would
        reach through this level on every token. None otherwise."""
        lone = self._lone
        if lone is None or self._rewrite:
            return None
        return self.assemblers[0].feed, lone

    def feed(self, position: int, chunk: GenerationChunk) -> list[ChoiceEvent]:
        """Events for a chunk of the generation at ``position``, which is its choice's index."""
        if not self._rewrite:
            events = self.assemblers[position].feed(chunk)
            return events if position == 0 else self._globalize(position, events)  # the common case first
        choice = self.assemblers[position].choices[0]
        before = choice.completion_tokens
        events = self.assemblers[position].feed(chunk)
        return self._globalize(position, events, choice.completion_tokens - before)

    def close(self) -> list[ChoiceEvent]:
        out: list[ChoiceEvent] = []
        for position, assembler in enumerate(self.assemblers):
            out.extend(self._globalize(position, assembler.close()))
        return out

    def _globalize(self, index: int, events: list[ChoiceEvent], added: int = 0) -> list[ChoiceEvent]:
        """The events of choice ``index`` as it reports them: logprobs in OpenAI's shape, then
        its text split into reasoning and answer, then calls read out of the answer. ``added``:
        the completion tokens the events' backend response added."""
        out = []
        for event in events:  # each generation has one sequence: its events are choice ``index``'s
            logprobs: Any = None
            if self.top is not None:
                if self.chat:
                    logprobs = {"content": chat_logprobs(event.logprobs, self.top, self.token_ids)}
                else:
                    logprobs = completion_logprobs(event.logprobs, self.top, self.offsets[index], self.token_ids)
                    # Advance by the tokens just reported, not by the text: the two differ where
                    # a token ends inside a UTF-8 character (its token is "", and the U+FFFD or
                    # the held-back bytes land in a later chunk's text) or text is held back for
                    # a stop string. Non-streamed offsets are counted in tokens alone, so this
                    # keeps streamed offsets equal to them, as vLLM's server does.
                    tokens = logprobs["tokens"]
                    if tokens:
                        self.offsets[index] = logprobs["text_offset"][-1] + len(tokens[-1])
            text, reasoning = event.text, ""
            if self.thinkers is not None:
                reasoning, text = self.thinkers[index].read(text, event.finish_reason is not None, added)
                added = 0  # a response's tokens are counted once, with its first event
            if self.readers is None:
                if text or reasoning or event.finish_reason is not None or logprobs is not None:
                    out.append(ChoiceEvent(index, text, event.finish_reason, logprobs, None, reasoning))
                continue
            text, calls, finish_reason = self.readers[index].read(text, event.finish_reason)
            if text or reasoning or calls or finish_reason is not None or logprobs is not None:
                out.append(ChoiceEvent(index, text, finish_reason, logprobs, calls, reasoning))
        return out
