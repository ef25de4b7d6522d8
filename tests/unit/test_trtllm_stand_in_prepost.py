"""What preprocessing, postprocessing and the v0.5 ensemble compute (tests/trtllm_stand_ins/prepost.py,
v05.py), on the tiny-sp tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trtllm_stand_ins.build import ASSETS
from tests.trtllm_stand_ins.prepost import PreprocessingError, Preprocessor, postprocess
from tests.trtllm_stand_ins.tokenizer import HfTokenizer
from tests.trtllm_stand_ins.v05 import V05Error, engine_inputs, text_output


@pytest.fixture(scope="module")
def tokenizer() -> HfTokenizer:
    return HfTokenizer.load(ASSETS / "tiny-sp")


def texts(*rows: list[str]) -> np.ndarray:
    return np.array([[item.encode() for item in row] for row in rows], dtype=object)


def test_queries_are_tokenized_with_bos_and_right_padded_with_the_pad_id(tokenizer: HfTokenizer) -> None:
    out = Preprocessor(tokenizer).run(
        {
            "QUERY": texts(["the model"], ["the model streams tokens"]),
            "REQUEST_OUTPUT_LEN": np.array([[4], [4]], np.int32),
        }
    )
    short, long = tokenizer.encode("the model"), tokenizer.encode("the model streams tokens")
    assert out["INPUT_ID"].tolist() == [short + [0] * (len(long) - len(short)), long]
    assert out["REQUEST_INPUT_LEN"].tolist() == [[len(short)], [len(long)]]
    assert out["OUT_END_ID"].tolist() == [[2], [2]] and out["OUT_PAD_ID"].tolist() == [[0], [0]]
    assert out["DECODER_INPUT_ID"].tolist() == [[0], [0]] and out["REQUEST_DECODER_INPUT_LEN"].tolist() == [[1], [1]]
    assert out["STOP_WORDS_IDS"].shape == (2, 2, 0) and out["EMBEDDING_BIAS"].shape == (2, 0)
    assert "OUT_PROMPT_TABLE_EXTRA_IDS" not in out


def test_add_special_tokens_false_drops_the_bos(tokenizer: HfTokenizer) -> None:
    out = Preprocessor(tokenizer, add_special_tokens=False).run(
        {"QUERY": texts(["the model"]), "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32)}
    )
    assert out["INPUT_ID"].tolist() == [tokenizer.encode("the model", add_special_tokens=False)]


def test_words_are_tokenized_alone_so_a_bare_word_gets_the_metaspace_prefix(tokenizer: HfTokenizer) -> None:
    out = Preprocessor(tokenizer).run(
        {
            "QUERY": texts(["x"]),
            "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
            "STOP_WORDS_DICT": texts(["model", ""]),
        }
    )
    ids = tokenizer.encode("model", add_special_tokens=False)
    assert tokenizer.backend.id_to_token(ids[0]).startswith("▁")
    assert out["STOP_WORDS_IDS"][0].tolist() == [ids, [len(ids)] + [-1] * (len(ids) - 1)]


def test_request_end_and_pad_ids_win_and_bias_words_make_a_vocab_vector(tokenizer: HfTokenizer) -> None:
    out = Preprocessor(tokenizer).run(
        {
            "QUERY": texts(["x"]),
            "REQUEST_OUTPUT_LEN": np.array([[4]], np.int32),
            "END_ID": np.array([[9]], np.int32),
            "PAD_ID": np.array([[8]], np.int32),
            "EMBEDDING_BIAS_WORDS": texts(["model"]),
            "EMBEDDING_BIAS_WEIGHTS": np.array([[2.5]], np.float32),
            "PROMPT_TABLE_EXTRA_ID": np.array([[77]], np.uint64),
        }
    )
    assert out["OUT_END_ID"].tolist() == [[9]] and out["OUT_PAD_ID"].tolist() == [[8]]
    bias = out["EMBEDDING_BIAS"]
    assert bias.shape == (1, 1333) and bias[0, tokenizer.encode("model", add_special_tokens=False)].tolist() == [2.5]
    assert out["OUT_PROMPT_TABLE_EXTRA_IDS"].tolist() == [[77] * out["INPUT_ID"].shape[1]]


def test_multimodal_inputs_are_refused(tokenizer: HfTokenizer) -> None:
    with pytest.raises(PreprocessingError, match="IMAGE_URL"):
        Preprocessor(tokenizer).run(
            {"QUERY": texts(["x"]), "REQUEST_OUTPUT_LEN": np.array([[1]], np.int32), "IMAGE_URL": texts(["u"])}
        )


def test_postprocessing_decodes_each_beam_to_its_length_with_no_state(tokenizer: HfTokenizer) -> None:
    ids = tokenizer.encode("the model streams", add_special_tokens=False)
    tokens = np.array([[ids + [-1, -1]]], dtype=np.int32)
    out = postprocess(tokenizer, tokens, np.array([[len(ids)]], np.int32), skip_special_tokens=True)
    assert out.shape == (1, 1) and out[0, 0] == b"the model streams"
    first = postprocess(tokenizer, np.array([[ids[:1]]], np.int32), np.array([[1]], np.int32), True)[0, 0]
    rest = postprocess(tokenizer, np.array([[ids[1:]]], np.int32), np.array([[len(ids) - 1]], np.int32), True)[0, 0]
    assert first + rest == b"themodel streams"  # the second call dropped its leading space
    special = np.array([[[1, *ids, 2]]], np.int32)
    assert (
        postprocess(tokenizer, special, np.array([[len(ids) + 2]], np.int32), False)[0, 0]
        == b"<s> the model streams</s>"
    )


def test_the_v05_request_maps_to_tensorrt_llm_inputs(tokenizer: HfTokenizer) -> None:
    request = {
        "text_input": texts(["the model"]),
        "max_tokens": np.array([[6]], np.uint32),
        "bad_words": texts(["model,"]),
        "stop_words": texts([""]),
        "top_k": np.array([[3]], np.uint32),
        "random_seed": np.array([[5]], np.uint64),
        "min_length": np.array([[2]], np.uint32),
    }
    inputs = engine_inputs(request, tokenizer, exclude_input=False)
    assert inputs["input_ids"].tolist() == [tokenizer.encode("the model")]
    assert inputs["request_output_len"].dtype == np.int32 and inputs["request_output_len"].tolist() == [[6]]
    assert inputs["runtime_top_k"].tolist() == [[3]] and inputs["seed"].dtype == np.uint64
    assert inputs["min_tokens"].tolist() == [[2]] and inputs["end_id"].tolist() == [[2]]
    assert inputs["exclude_input_in_output"].tolist() == [[False]] and inputs["stop_words_list"].shape == (1, 2, 0)
    assert inputs["bad_words_list"][0, 0].tolist() == tokenizer.encode("model", add_special_tokens=False)
    with pytest.raises(V05Error, match="one prompt per request"):
        engine_inputs({**request, "text_input": texts(["a"], ["b"])}, tokenizer, exclude_input=False)


def test_the_v05_text_output_is_one_string_per_response(tokenizer: HfTokenizer) -> None:
    ids = tokenizer.encode("the model", add_special_tokens=False)
    out = text_output(tokenizer, np.array([[ids]], np.int32), np.array([[len(ids)]], np.int32))
    assert out.shape == (1, 1) and out[0, 0] == b"the model"
