"""JSON ``null`` as "unset" on request fields.

OpenAI's spec marks nearly every optional request field nullable, and clients (generated ones,
LangChain, the Vercel AI SDK, hand-written JSON with every key present) send unset fields as
``null`` rather than leaving them out. ``NullMeansDefault`` drops a null before validation, so a
field sent as null is a field not sent: an optional one gets its default, decided in one place
(its declaration), and the validated model keeps plain types (``n`` is an ``int``, never None,
wherever it is read); a required one is reported missing ("'prompt' is a required property"
rather than a type error per member of its union). The OpenAPI document adds null to the optional
fields that did not take it already.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema


class NullMeansDefault(BaseModel):
    """Base of request models whose fields take ``null`` as "not sent". Costs one
    ``None in values()`` per model per request (requests are validated once, never per token)."""

    _declared: ClassVar[frozenset[str]] = frozenset()
    """This class's fields (unknown fields keep their null: they are only logged)."""
    _null_means_default: ClassVar[frozenset[str]] = frozenset()
    """Its optional fields whose default is not None: the schema adds null to these."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields = cls.model_fields
        cls._declared = frozenset(fields)
        cls._null_means_default = frozenset(
            name for name, field in fields.items() if not field.is_required() and field.default is not None
        )

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            declared = cls._declared
            return {key: value for key, value in data.items() if value is not None or key not in declared}
        return data

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler(core_schema)
        properties = handler.resolve_ref_schema(json_schema).get("properties", {})
        for name in cls._null_means_default & properties.keys():
            properties[name] = or_null(properties[name])
        return json_schema


def or_null(schema: JsonSchemaValue) -> JsonSchemaValue:
    """``schema`` that also takes null, written the way pydantic writes ``X | None`` (the title,
    description and default stay outside the ``anyOf``)."""
    annotations: JsonSchemaValue = {key: schema[key] for key in ("title", "description", "default") if key in schema}
    typed = {key: value for key, value in schema.items() if key not in annotations}
    options = typed["anyOf"] if typed.keys() == {"anyOf"} else [typed]
    return {"anyOf": [*options, {"type": "null"}], **annotations}
