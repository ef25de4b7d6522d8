"""The reasoning seal: what it seals opens only with its keys, for its model, unaltered."""

from __future__ import annotations

from gateway.reasoning.seal import ReasoningSeal


def test_a_sealed_text_opens_for_its_model_only() -> None:
    seal = ReasoningSeal(["one"])
    blob = seal.seal("thinking… 東京", "m")
    assert "thinking" not in blob and seal.open(blob, "m") == "thinking… 東京"
    assert seal.open(blob, "other") is None


def test_an_altered_or_foreign_blob_does_not_open() -> None:
    seal = ReasoningSeal(["one"])
    blob = seal.seal("t", "m")
    flipped = blob[:-6] + ("A" if blob[-6] != "A" else "B") + blob[-5:]
    assert seal.open(flipped, "m") is None
    assert ReasoningSeal(["two"]).open(blob, "m") is None
    assert seal.open("EuYBCkQYAiJAsig", "m") is None and seal.open("", "m") is None


def test_rotation_the_first_secret_seals_and_every_one_opens() -> None:
    old = ReasoningSeal(["old"]).seal("t", "m")
    rotated = ReasoningSeal.from_setting("new, old")
    assert rotated.open(old, "m") == "t"
    assert ReasoningSeal(["new"]).open(rotated.seal("t", "m"), "m") == "t"


def test_no_setting_draws_a_random_secret_per_seal() -> None:
    blob = ReasoningSeal.from_setting(None).seal("t", "m")
    assert ReasoningSeal.from_setting(None).open(blob, "m") is None
