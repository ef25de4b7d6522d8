"""Priority bands by name: the Inference Extension's criticalities as vLLM priorities.

A priority is vLLM's: an integer, lower runs first (``standard`` is vLLM's default, 0). The names
are what the ``x-gateway-priority`` header and the key file may say instead of a number; a leaf,
so the key file, planning and the core read one table.
"""

from __future__ import annotations

CRITICAL, STANDARD, SHEDDABLE = -1, 0, 1
BAND_NAMES = {"critical": CRITICAL, "standard": STANDARD, "sheddable": SHEDDABLE}

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
"""vLLM's ``priority`` is a C int in its scheduler; the gateway keeps to the same range."""


def parse_band(value: object) -> int:
    """A priority from a number or a name (case-insensitive); ``ValueError`` says what is allowed."""
    if isinstance(value, bool):
        raise ValueError(f"a priority is an integer or one of {sorted(BAND_NAMES)}, not {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if text in BAND_NAMES:
            return BAND_NAMES[text]
        try:
            number = int(text)
        except ValueError:
            raise ValueError(f"a priority is an integer or one of {sorted(BAND_NAMES)}, not {value!r}") from None
    else:
        raise ValueError(f"a priority is an integer or one of {sorted(BAND_NAMES)}, not {value!r}")
    if not INT32_MIN <= number <= INT32_MAX:
        raise ValueError(f"a priority must be between {INT32_MIN} and {INT32_MAX}, not {number}")
    return number
