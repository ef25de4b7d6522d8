"""Tool-call parsers: a model's text in, content and complete tool calls out. Pure, no I/O.

One parser per choice, fed the choice's decoded text in whatever pieces the backend produced.
Formats (``registry.PARSERS``): ``hermes``, ``llama3_json``, ``mistral``, ``pythonic``,
``qwen3_coder``, ``glm45``, ``deepseek_v3``, ``deepseek_v31``, ``deepseek_v32``, ``kimi_k2``,
``openai``, and the two shapes structured outputs force (``forced_named``, ``forced_required``).
A model's parser is configured or detected from its chat template (``registry.detect_parser``).

Choices made here, and why:

- **Calls stream, nothing is taken back.** A call opens as soon as its markup names an offered
  tool, and its arguments go out as they are read, in the gateway's one JSON spelling (keys once
  whole, string characters as decoded, other values once they end: ``argstream.py``, and the
  typed formats' own readers), so the deltas of a call join exactly to its final ``arguments``.
  Markup that turns out malformed before a call opened is returned as content exactly as the
  model wrote it; after a call opened, the call ends with what was already sent (docs/API.md,
  "Tool calling", says per format where a call opens).
- **Hold only what could be markup.** Text is held back only while it could still start a
  marker (``<tool_`` at the end of a piece) or belongs to an open block; everything else is
  returned at once. Markup never leaks into content however the text is split, and the content
  and calls are the same for every split of the same text (tested with hypothesis, and at every
  split position).
- **Never lose text.** Malformed markup comes back verbatim; text after a call is content. Only
  whitespace around calls is dropped: before the first call (held while nothing else came), and
  between or after calls.
- **One spelling of arguments.** ``json.dumps(obj, ensure_ascii=False)`` of the parsed object,
  whatever the model wrote, so streamed fragments and the assembled answer agree.
- **Cheap per token.** Once a parser knows no call can start (plain text for the formats whose
  calls open the output), or holds nothing and the piece has no marker character, ``feed``
  returns the piece itself: one membership test, no copy (``python -m bench micro`` times it).
"""

from gateway.tools.registry import PARSERS, ParserSpec, detect_parser, make_parser
from gateway.tools.types import ParsedCall, ToolCallParser

__all__ = ["PARSERS", "ParsedCall", "ParserSpec", "ToolCallParser", "detect_parser", "make_parser"]
