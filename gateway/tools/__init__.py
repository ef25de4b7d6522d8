"""Tool-call parsers: a model's text in, content and complete tool calls out. Pure, no I/O.

One parser per choice, fed the choice's decoded text in whatever pieces the backend produced.
Formats (``registry.PARSERS``): ``hermes``, ``llama3_json``, ``mistral``, ``pythonic``,
``qwen3_coder``, ``glm45``, ``deepseek_v31``, ``kimi_k2``, and the two shapes structured outputs
force (``forced_named``, ``forced_required``). A model's parser is
configured or detected from its chat template (``registry.detect_parser``).

Choices made here, and why:

- **Complete calls only.** A call is returned when its block is complete and valid, never as
  half-parsed arguments. A block that turns out malformed (invalid JSON, no name, a name the
  request did not offer, arguments that are not an object, cut off at the end) is then returned
  as content exactly as the model wrote it, with nothing already streamed to take back. The
  cost is that a call's arguments reach the client in one piece when the block closes, which
  for a tool call (it cannot run before its arguments are whole) loses nothing.
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
