"""Compares a Python wire type (TypedDict, Literal, Optional, List, Dict, Union, Any) with the
JSON Schema schemars generated for the Rust type, and lists every disagreement: members missing
on either side, required on one side only, nullable on one side only, or of another type."""

from __future__ import annotations

import typing
from typing import Any

import typing_extensions

JSON_TYPES = {str: "string", int: "integer", bool: "boolean"}
#: Schema keywords that describe rather than constrain (``format: uint64`` and the bounds of
#: integers are Rust's ranges, which Python's int does not express).
ANNOTATIONS = {
    "$schema",
    "$defs",
    "title",
    "description",
    "default",
    "format",
    "minimum",
    "maximum",
    "examples",
}


class Checker:
    def __init__(self, root: dict[str, Any], pending: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.defs = root.get("$defs", {})
        #: ``where`` paths of members the Python side has ahead of the schema (another branch
        #: adds them to the daemon); they may be missing from the schema, not differ from it.
        self.pending = pending
        self.errors: list[str] = []

    def resolve(self, schema: Any) -> Any:
        """The schema itself, not a reference, without what only annotates it."""
        while isinstance(schema, dict) and "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**self.defs[name], **rest}
        if isinstance(schema, dict):
            schema = {k: v for k, v in schema.items() if k not in ANNOTATIONS}
        return schema

    def error(self, where: str, message: str) -> None:
        self.errors.append(f"{where}: {message}")

    def compare(self, py: Any, schema: Any, where: str) -> None:
        schema = self.resolve(schema)
        if py is Any:
            if not _is_any(schema):
                self.error(where, f"Python says any value, the schema {schema}")
            return
        if _is_any(schema):
            self.error(where, f"the schema allows any value, Python says {py}")
            return
        py_nullable, py = _split_optional(py)
        schema_nullable, schema = self._split_nullable(schema)
        if py is type(None) or schema == {"type": "null"}:
            if not (py is type(None) and schema == {"type": "null"}):
                self.error(where, f"null on one side only: {py} / {schema}")
            return
        if py_nullable != schema_nullable:
            side = "Python" if py_nullable else "the schema"
            self.error(where, f"only {side} allows null")
        self.compare_value(py, schema, where)

    def _split_nullable(self, schema: Any) -> tuple[bool, Any]:
        if not isinstance(schema, dict):
            return False, schema
        kind = schema.get("type")
        if isinstance(kind, list) and "null" in kind:
            others = [k for k in kind if k != "null"]
            rest = dict(schema, type=others[0] if len(others) == 1 else others)
            if "enum" in rest:
                rest["enum"] = [v for v in rest["enum"] if v is not None]
            return True, rest
        for key in ("anyOf", "oneOf"):
            alternatives = schema.get(key)
            if alternatives:
                resolved = [self.resolve(alt) for alt in alternatives]
                nulls = [
                    alt for alt in resolved if alt == {"type": "null"} or alt.get("type") == "null"
                ]
                if nulls:
                    others = [alt for alt in resolved if alt not in nulls]
                    rest = {k: v for k, v in schema.items() if k != key}
                    if len(others) == 1:
                        return True, {**rest, **others[0]}
                    return True, {**rest, key: others}
        if "enum" in schema and None in schema["enum"]:
            return True, dict(schema, enum=[v for v in schema["enum"] if v is not None])
        return False, schema

    def compare_value(self, py: Any, schema: dict[str, Any], where: str) -> None:
        origin = typing.get_origin(py)
        if origin in (typing.Literal, typing_extensions.Literal):
            expected = _string_values(self, schema)
            if expected is None:
                self.error(where, f"Python has {py}, the schema {schema}")
            elif set(typing.get_args(py)) != expected:
                self.error(
                    where,
                    f"values differ: Python {sorted(typing.get_args(py))}, "
                    f"schema {sorted(expected)}",
                )
        elif typing_extensions.is_typeddict(py):
            self.compare_object(py, schema, where)
        elif origin is typing.Union:
            self.compare_union(list(typing.get_args(py)), schema, where)
        elif origin is list:
            if schema.get("type") != "array":
                self.error(where, f"Python has a list, the schema {schema}")
            else:
                self.compare(typing.get_args(py)[0], schema.get("items", {}), f"{where}[]")
        elif origin is dict:
            if schema.get("type") != "object" or "additionalProperties" not in schema:
                self.error(where, f"Python has a map, the schema {schema}")
            else:
                self.compare(typing.get_args(py)[1], schema["additionalProperties"], f"{where}{{}}")
        elif py in JSON_TYPES:
            if schema.get("type") != JSON_TYPES[py] or "enum" in schema or "const" in schema:
                self.error(where, f"Python has {py.__name__}, the schema {schema}")
        else:
            self.error(where, f"no rule for the Python type {py}")

    def compare_object(self, py: Any, schema: dict[str, Any], where: str) -> None:
        if schema.get("type") != "object":
            self.error(where, f"Python has an object ({py.__name__}), the schema {schema}")
            return
        hints = typing_extensions.get_type_hints(py)
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        for name in sorted(set(hints) | set(properties)):
            at = f"{where}.{name}"
            if name not in properties:
                if at not in self.pending:
                    self.error(at, "in Python, not in the schema")
                continue
            if name not in hints:
                self.error(at, "in the schema, not in Python")
                continue
            if (name in required) != (name in py.__required_keys__):
                self.error(at, f"required in {'the schema' if name in required else 'Python'} only")
            self.compare(hints[name], properties[name], at)

    def compare_union(self, alternatives: list[Any], schema: dict[str, Any], where: str) -> None:
        options = schema.get("oneOf") or schema.get("anyOf")
        if not options:
            self.error(where, f"Python has a union, the schema {schema}")
            return
        if len(options) != len(alternatives):
            self.error(
                where, f"{len(alternatives)} alternatives in Python, {len(options)} in the schema"
            )
            return
        unmatched = list(alternatives)
        for index, option in enumerate(options):
            match = next((alt for alt in unmatched if not self.trial(alt, option, where)), None)
            if match is None:
                best = min(unmatched, key=lambda alt: len(self.trial(alt, option, where)))
                self.errors.extend(self.trial(best, option, f"{where}|{index}"))
            else:
                unmatched.remove(match)

    def trial(self, py: Any, schema: Any, where: str) -> list[str]:
        probe = Checker({"$defs": self.defs}, self.pending)
        probe.compare(py, schema, where)
        return probe.errors


def _is_any(schema: Any) -> bool:
    if schema is True:
        return True
    return isinstance(schema, dict) and not (set(schema) - ANNOTATIONS)


def _string_values(checker: Checker, schema: dict[str, Any]) -> set[str] | None:
    """The values of a string enum, in any of the shapes schemars writes them."""
    if "enum" in schema:
        return set(schema["enum"])
    if "const" in schema:
        return {schema["const"]}
    options = schema.get("oneOf") or schema.get("anyOf")
    if not options:
        return None
    values: set[str] = set()
    for option in options:
        found = _string_values(checker, checker.resolve(option))
        if found is None:
            return None
        values |= found
    return values


def _split_optional(py: Any) -> tuple[bool, Any]:
    if typing.get_origin(py) is typing.Union:
        args = typing.get_args(py)
        if type(None) in args:
            others = tuple(arg for arg in args if arg is not type(None))
            if not others:
                return True, type(None)
            return True, others[0] if len(others) == 1 else typing.Union[others]  # type: ignore[return-value]
    return False, py
