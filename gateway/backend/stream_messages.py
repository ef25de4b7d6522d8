"""One call's ``ModelStreamInferResponse`` messages → chunks, most of them without protobuf.

Every response of a call but the last is laid out alike: the same model name, version, id,
parameters (``triton_final_response``: false) and output descriptors, then one
``raw_output_contents`` record per output, the only bytes that change from one token to the next.
Parsing such a message with protobuf builds an object per descriptor and reads every name again
(7-12 µs hot, the largest single step of a token). The reader parses a call's first response with
protobuf and keeps the bytes before its raw contents (the head); a later message that starts with
the same head is read by slicing out its raw contents (about a third of the time).

Why the shortcut gives exactly what protobuf gives: a message's encoding is its fields' records
one after another, and parsing reads them in order (a repeated field's records append). A message
that is one field-2 envelope of exactly the rest's length, holding ``head`` then k field-6 records
and nothing else, therefore parses to the head's fields (those of the message protobuf parsed
when the head was learned, which held no field-6 record) and these k raw contents. Anything else
(an error message, a final response, more parameters, another layout, a truncated record) fails
a check and goes through protobuf. The tests compare both ways on real Triton streams.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from tritonclient.grpc import service_pb2

from gateway.backend.contracts.tensors import Outputs, ReadRaws, describe_outputs
from gateway.backend.types import GenerationChunk

ParseOutputs = Callable[[Outputs, Sequence[bytes], bool], GenerationChunk]
"""A backend contract's reading of one response: output descriptors, raw contents, final."""
PlanOutputs = Callable[[Outputs], ReadRaws | None]
"""A backend contract's faster reading of one layout's responses, where it has one."""

_ENVELOPE = 0x12
"""The key of ``ModelStreamInferResponse.infer_response`` (field 2, length-delimited)."""
_RAW = 0x32
"""The key of ``ModelInferResponse.raw_output_contents`` (field 6, length-delimited)."""
_LENGTH_DELIMITED = 2
_LEARNS = 3
"""Heads a call may learn: a backend whose every response differs in its head (a per-response
parameter, a shape that grows) stops paying for the attempt after this many."""

_decode = service_pb2.ModelStreamInferResponse.FromString


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it (IndexError past the end)."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise IndexError("a varint longer than ten bytes")


def _records(message: bytes) -> tuple[int, list[tuple[int, int]]] | None:
    """Where the envelope's content starts and its records' (key, offset), when the message is
    one envelope whose content is length-delimited records only (as ``ModelInferResponse``'s
    fields all are); None otherwise."""
    try:
        if message[0] != _ENVELOPE:
            return None
        length, start = _varint(message, 1)
        end = len(message)
        if start + length != end:
            return None
        records = []
        pos = start
        while pos < end:
            key, after = _varint(message, pos)
            if key & 7 != _LENGTH_DELIMITED:
                return None
            size, after = _varint(message, after)
            records.append((key, pos))
            pos = after + size
    except IndexError:
        return None
    return (start, records) if pos == end else None


class StreamReader:
    """Reads one call's messages (a fresh reader per call: the head holds the call's id)."""

    __slots__ = ("final", "_count", "_error", "_head", "_learns", "_parse", "_plan", "_read")

    def __init__(self, parse: ParseOutputs, error: Callable[[str], Exception], plan: PlanOutputs | None = None) -> None:
        self._parse = parse
        self._plan = plan
        self._error = error
        """Turns an in-stream error message into the exception the call ends with."""
        self._head: bytes | None = None
        self._read: ReadRaws | None = None
        """How the learned layout's raw contents become a chunk."""
        self._count = 0
        self._learns = _LEARNS
        self.final = False
        """Whether the call's final response has been read: the model's work for it is over."""

    def __call__(self, message: bytes) -> GenerationChunk:
        read = self._read
        if read is not None:
            raws = self.raw_contents(message)
            if raws is not None:
                return read(raws, False)
        return self._protobuf(message)

    def raw_contents(self, message: bytes) -> list[bytes] | None:
        """The raw contents of a message laid out as the learned head says, or None."""
        head = self._head
        if head is None:
            return None
        try:
            if message[0] != _ENVELOPE:
                return None
            length, pos = message[1], 2
            if length >= 0x80:  # a token's message is 128 B to 16 KiB: two bytes of length
                second = message[2]
                if second < 0x80:
                    length, pos = (length & 0x7F) | second << 7, 3
                else:
                    length, pos = _varint(message, 1)
            end = len(message)
            if pos + length != end or not message.startswith(head, pos):
                return None
            pos += len(head)
            raws = []
            for _ in range(self._count):
                if message[pos] != _RAW:
                    return None
                size = message[pos + 1]
                pos += 2
                if size >= 0x80:
                    size, pos = _varint(message, pos - 1)
                stop = pos + size
                raws.append(message[pos:stop])
                pos = stop
        except IndexError:
            return None
        return raws if pos == end else None

    def _protobuf(self, message: bytes) -> GenerationChunk:
        reply = _decode(message)
        if reply.error_message:
            raise self._error(reply.error_message)
        response = reply.infer_response
        param = response.parameters.get("triton_final_response")
        final = bool(param is not None and param.bool_param)
        if final:  # a final response always comes this way: the shortcut reads non-final ones only
            self.final = True
        outputs = describe_outputs(response)
        raws = response.raw_output_contents
        chunk = self._parse(outputs, raws, final)
        if not final and self._learns:
            self._learns -= 1
            self._learn(message, outputs, len(raws))
        return chunk

    def _learn(self, message: bytes, outputs: Outputs, count: int) -> None:
        """Keep the head of a message protobuf has just parsed: everything before its raw
        contents, when those are its last ``count`` records and no other record is one."""
        found = _records(message)
        if found is None:
            return
        start, records = found
        split = len(records) - count
        if split < 0 or any(key == _RAW for key, _ in records[:split]):
            return
        if any(key != _RAW for key, _ in records[split:]):
            return
        plan = self._plan(outputs) if self._plan is not None and count == len(outputs) else None
        self._head = message[start : records[split][1] if count else len(message)]
        self._read, self._count = plan or partial(self._parse, outputs), count
