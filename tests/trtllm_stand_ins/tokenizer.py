"""A Hugging Face tokenizer directory read with ``tokenizers`` alone: what the preprocessing,
postprocessing, llmapi and v0.5 stand-ins use instead of ``transformers.AutoTokenizer``.

Why not AutoTokenizer, which upstream uses: importing transformers imports torch (about 300 MB and
5-8 s per Python-backend stub on this machine), and five of the stand-ins need no torch at all.
For a ``PreTrainedTokenizerFast`` directory (tiny-sp's ``tokenizer_class``) the ids and texts are
the same: AutoTokenizer hands encoding and decoding to this very Rust tokenizer, takes the special
tokens from ``tokenizer_config.json`` and cleans up spaces only when
``clean_up_tokenization_spaces`` is set (tiny-sp: false). ``tests/unit`` checks the equivalence
against AutoTokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class TokenizerLoadError(ValueError):
    """The directory has no usable tokenizer.json / tokenizer_config.json."""


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken object."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


@dataclass
class HfTokenizer:
    """The subset of a fast HF tokenizer the stand-ins need."""

    backend: Any
    """``tokenizers.Tokenizer``."""
    eos_token: str | None
    pad_token: str | None
    bos_token: str | None
    directory: Path

    @classmethod
    def load(cls, directory: str | Path) -> HfTokenizer:
        from tokenizers import Tokenizer

        path = Path(directory)
        try:
            backend = Tokenizer.from_file(str(path / "tokenizer.json"))
            config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise TokenizerLoadError(f"cannot load the tokenizer in {path}: {exc}") from exc
        if config.get("clean_up_tokenization_spaces"):
            raise TokenizerLoadError(f"{path}: clean_up_tokenization_spaces is not supported by the stand-ins")
        return cls(
            backend=backend,
            eos_token=_token_text(config.get("eos_token")),
            pad_token=_token_text(config.get("pad_token")),
            bos_token=_token_text(config.get("bos_token")),
            directory=path,
        )

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def json(self) -> str:
        """The tokenizer as JSON (what llguidance builds its token table from)."""
        return str(self.backend.to_str())

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def first_id(self, token: str | None) -> int | None:
        """The first id of ``token`` encoded without special tokens (how preprocessing finds its
        end and pad ids)."""
        if token is None:
            return None
        ids = self.encode(token, add_special_tokens=False)
        return ids[0] if ids else None

    @property
    def end_id(self) -> int:
        end = self.first_id(self.eos_token)
        if end is None:
            raise TokenizerLoadError(f"{self.directory}: the tokenizer has no eos_token")
        return end

    @property
    def pad_id(self) -> int:
        """The pad token's id, or the end id when the tokenizer has no pad token."""
        pad = self.first_id(self.pad_token)
        return self.end_id if pad is None else pad
