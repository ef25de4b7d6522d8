"""The per-connection cache of the call's HPACK block: every block it gives decodes to the
headers it was asked for, in order, across repeats, other headers and a table-size change."""

from __future__ import annotations

import hpack

from gateway.backend.transport.h2headers import RepeatingHeadersDecoder, RepeatingHeadersEncoder, call_headers

CALL = call_headers(b"http", b"127.0.0.1:8001", b"/inference.GRPCInferenceService/ModelStreamInfer")


def decoded(decoder: hpack.Decoder, block: bytes) -> list[tuple[bytes, bytes]]:
    return [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)]


def test_repeated_blocks_are_reused_and_decode_to_the_call_headers() -> None:
    encoder, decoder = RepeatingHeadersEncoder(), hpack.Decoder()
    blocks = [encoder.encode(CALL) for _ in range(4)]
    for block in blocks:
        assert decoded(decoder, block) == CALL
    assert blocks[1] is blocks[2] is blocks[3]  # the second encode changed nothing: cached
    assert len(blocks[1]) == len(CALL)  # seven one-byte index references


def test_other_headers_and_a_table_size_change_are_encoded_in_full() -> None:
    encoder, decoder = RepeatingHeadersEncoder(), hpack.Decoder()
    other = [*CALL[:2], (b":path", b"/inference.GRPCInferenceService/ServerReady"), *CALL[3:]]
    sequence = [CALL, CALL, other, CALL, CALL]
    for headers in sequence:
        assert decoded(decoder, encoder.encode(headers)) == headers
    encoder.header_table_size = 0  # the server's SETTINGS: the next block must say so
    block = encoder.encode(CALL)
    assert decoded(decoder, block) == CALL
    assert len(decoder.header_table.dynamic_entries) == 0  # the size update reached the decoder
    for _ in range(3):
        assert decoded(decoder, encoder.encode(CALL)) == CALL


def test_the_decoder_answers_repeats_from_its_cache_and_always_as_a_plain_decoder_does() -> None:
    """Triton's response headers and OK trailers repeat on every call; what the cache answers
    must be what a plain decoder would, across blocks that add to the table, evict from it, and
    a table-size change."""
    encoder, plain, cached = hpack.Encoder(), hpack.Decoder(), RepeatingHeadersDecoder()
    response = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    ok = [(b"grpc-status", b"0")]
    sequence = [response, ok, response, ok, response]
    sequence += [[(b"x-big-%d" % i, b"v" * 900)] for i in range(6)]  # 4 KiB table: evicts
    sequence += [response, ok, response, ok]
    blocks = [encoder.encode(headers) for headers in sequence]
    encoder.header_table_size = 0
    blocks += [encoder.encode(response), encoder.encode(response), encoder.encode(ok)]
    answers = []
    for block in blocks:
        answer = cached.decode_block(block)
        assert answer == decoded(plain, block)
        answers.append(answer)
    assert answers[2] is answers[4]  # the same bytes with the table unchanged: not decoded again
