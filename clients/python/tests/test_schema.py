"""The Python wire types against the JSON Schema generated from the Rust types: the test fails
when either side changes without the other. (No ``from __future__ import annotations`` here:
``TypedDict`` must see ``NotRequired`` itself, not a string.)"""

import json
import os
import subprocess
from typing import Any, List, Optional

import jsonschema
import pytest
from daemon import REPO
from schema_check import Checker
from typing_extensions import NotRequired, TypedDict

from exec_server import Sandbox, start_params, wire

#: Members the Python types may carry before the daemon's schema does (a field another branch
#: is adding): absent from the schema, they pass; once there, they are checked like any other.
#: None now.
PENDING: set[str] = set()


@pytest.fixture(scope="module")
def protocol() -> dict[str, Any]:
    """What ``protocol/examples/schema.rs`` prints (or ``$EXEC_SERVER_PROTOCOL_JSON``)."""
    saved = os.environ.get("EXEC_SERVER_PROTOCOL_JSON")
    if saved:
        with open(saved, encoding="utf-8") as file:
            return json.load(file)  # type: ignore[no-any-return]
    output = subprocess.run(
        [
            "cargo",
            "run",
            "--release",
            "--quiet",
            "-p",
            "exec-server-protocol",
            "--example",
            "schema",
        ],
        cwd=REPO,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    return json.loads(output)  # type: ignore[no-any-return]


def python_messages() -> dict[str, Any]:
    """The Python type of every message, keyed as the schema keys them."""
    messages: dict[str, Any] = {"message": wire.Message}
    for name, (params, result, _) in wire.REQUESTS.items():
        messages[f"{name}.params"] = type(None) if params is None else params
        messages[f"{name}.result"] = result
    for name, params in wire.NOTIFICATIONS.items():
        messages[f"{name}.params"] = type(None) if params is None else params
    return messages


def test_the_method_table_matches(protocol: dict[str, Any]) -> None:
    assert sorted(wire.REQUESTS) == sorted(protocol["requests"])
    for name, retry in protocol["requests"].items():
        assert wire.RETRY_SAFE[name] == (retry == "safe"), name
    assert sorted(wire.NOTIFICATIONS) == sorted(protocol["notifications"])


def test_every_message_matches_its_schema(protocol: dict[str, Any]) -> None:
    schemas = protocol["messages"]
    ours = python_messages()
    assert sorted(ours) == sorted(schemas)
    errors = []
    for name, schema in sorted(schemas.items()):
        checker = Checker(schema, PENDING)
        checker.compare(ours[name], schema, name)
        errors += checker.errors
    assert not errors, "\n".join(errors)


class _Drifted(TypedDict):
    """process/read params as they would be if the Python side drifted."""

    processId: str
    afterSeq: Optional[int]  # required here, optional in the schema
    maxBytes: NotRequired[Optional[str]]  # a string here
    waitMs: NotRequired[int]  # not nullable here
    extra: NotRequired[List[int]]  # not in the schema


def test_a_drift_is_reported(protocol: dict[str, Any]) -> None:
    schema = protocol["messages"]["process/read.params"]
    checker = Checker(schema)
    checker.compare(_Drifted, schema, "read")
    joined = "\n".join(checker.errors)
    for expected in (
        "read.afterSeq: required in Python only",
        "read.maxBytes",
        "read.waitMs: only the schema allows null",
        "read.extra: in Python, not in the schema",
    ):
        assert expected in joined, joined
    assert len(checker.errors) == 4, joined


def test_sandbox_profiles_are_the_wire_form(protocol: dict[str, Any]) -> None:
    schema = protocol["messages"]["process/start.params"]
    profiles = [
        Sandbox.read_only(),
        Sandbox.workspace_write(["/srv/repo", "/srv/other"]).network(),
        Sandbox.read_only().allow_write("/srv/out").deny("/srv/out/secret").cwd("/srv"),
        Sandbox.unsandboxed(),
    ]
    for profile in profiles:
        params = start_params(["true"], cwd="/", sandbox=profile, limits={"timeoutMs": 5})
        params.pop("onRetentionFull", None)  # type: ignore[misc]
        jsonschema.validate(params, schema)
    assert Sandbox.workspace_write(["/w"]).to_wire() == {
        "permissions": {
            "type": "managed",
            "network": "restricted",
            "file_system": {
                "type": "restricted",
                "entries": [
                    {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                    {
                        "path": {"type": "special", "value": {"kind": "project_roots"}},
                        "access": "write",
                    },
                    {
                        "path": {"type": "special", "value": {"kind": "tmpdir"}},
                        "access": "write",
                        "missing_path_behavior": "skip",
                    },
                    {
                        "path": {"type": "special", "value": {"kind": "slash_tmp"}},
                        "access": "write",
                        "missing_path_behavior": "skip",
                    },
                ],
            },
        },
        "windowsSandboxLevel": "disabled",
        "policyContext": {"cwd": "file:///w", "workspaceRoots": ["file:///w"]},
    }


def test_on_retention_full_is_sent_only_when_given() -> None:
    assert "onRetentionFull" not in start_params(["true"], cwd="/")
    assert start_params(["true"], cwd="/", on_retention_full="pause")["onRetentionFull"] == "pause"  # type: ignore[typeddict-item]
