"""--format sarif: a SARIF 2.1.0 log whose rules are finding codes and whose results are located."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# The part of the SARIF 2.1.0 schema (OASIS, errata01) that mmpool's logs use, with the spec's
# types, enums, minimums and closed objects, so that a misspelt or mistyped property fails here.
_CLOSED = {"type": "object", "additionalProperties": False}
SARIF_SUBSET = {
    **_CLOSED,
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string", "format": "uri"},
        "version": {"enum": ["2.1.0"]},
        "runs": {
            "type": "array",
            "items": {
                **_CLOSED,
                "required": ["tool"],
                "properties": {
                    "tool": {
                        **_CLOSED,
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                **_CLOSED,
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "version": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            **_CLOSED,
                                            "required": ["id"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "name": {"type": "string"},
                                                "shortDescription": {
                                                    **_CLOSED,
                                                    "required": ["text"],
                                                    "properties": {"text": {"type": "string"}},
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    # a SARIF property bag (3.8): the SGLang release the findings follow
                    "properties": {
                        **_CLOSED,
                        "required": ["sglangVersion", "sglangVersionChosen"],
                        "properties": {"sglangVersion": {"type": "string"}, "sglangVersionChosen": {"type": "string"}},
                    },
                    "invocations": {
                        "type": "array",
                        "items": {
                            **_CLOSED,
                            "required": ["executionSuccessful"],
                            "properties": {"executionSuccessful": {"type": "boolean"}, "exitCode": {"type": "integer"}},
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            **_CLOSED,
                            "required": ["message"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": -1},
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {
                                    **_CLOSED,
                                    "required": ["text"],
                                    "properties": {"text": {"type": "string"}},
                                },
                                "locations": {
                                    "type": "array",
                                    "items": {
                                        **_CLOSED,
                                        "properties": {
                                            "physicalLocation": {
                                                **_CLOSED,
                                                "properties": {
                                                    "artifactLocation": {
                                                        **_CLOSED,
                                                        "properties": {"uri": {"type": "string"}},
                                                    },
                                                    "region": {
                                                        **_CLOSED,
                                                        "properties": {
                                                            "startLine": {"type": "integer", "minimum": 1},
                                                            "startColumn": {"type": "integer", "minimum": 1},
                                                        },
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def _sarif(command: str, *args: str) -> tuple[int, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "mmpool_cli", command, "--format", "sarif", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.returncode, json.loads(result.stdout)


def test_validate_sarif_is_valid_and_located() -> None:
    rc, log = _sarif("validate", str(EXAMPLES / "invalid-mmpool.yaml"), str(EXAMPLES / "invalid-sglang-config.yaml"))
    assert rc == 1
    jsonschema.validate(log, SARIF_SUBSET)
    run = log["runs"][0]
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    results = run["results"]
    assert {r["ruleId"] for r in results} == set(rules)
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in results)
    unknown = next(r for r in results if r["ruleId"] == "config-unknown-key")
    physical = unknown["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"].endswith("examples/invalid-mmpool.yaml")
    assert physical["region"] == {"startLine": 4, "startColumn": 3}
    assert unknown["level"] == "error"
    assert run["invocations"][0]["exitCode"] == 1


def test_check_sarif_has_unlocated_results_for_the_launch() -> None:
    rc, log = _sarif(
        "check", "--no-probe-pidfd", "--", "python", "-m", "sglang.launch_server", "--model-path", "M", "--bogus"
    )
    assert rc == 1
    jsonschema.validate(log, SARIF_SUBSET)
    bogus = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "unrecognized-argument")
    assert "locations" not in bogus
    assert bogus["message"]["text"].startswith("argv[5]: ")
