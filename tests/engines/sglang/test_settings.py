"""The pool settings table is the one declaration: the request, the CLI, configs and launches agree with it."""

from __future__ import annotations

import dataclasses

import typer.main

from mmpool_cli.cli import app
from mmpool_cli.core.units import parse_size
from mmpool_cli.engines.sglang import args, mmpool_config
from mmpool_cli.engines.sglang.models import PlanRequest
from mmpool_cli.engines.sglang.settings import SETTINGS

REQUEST_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PlanRequest)}


def test_every_setting_is_a_request_field_with_the_tables_default() -> None:
    for s in SETTINGS:
        assert s.subject in REQUEST_DEFAULTS, s.subject
        if s.default is not None:
            assert REQUEST_DEFAULTS[s.subject] == s.default, s.subject


def test_the_cli_declares_each_settings_flags_with_the_tables_default() -> None:
    plan = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    by_flags = {tuple(p.opts): p for p in plan.params if getattr(p, "opts", None) and p.opts[0].startswith("--")}
    for s in SETTINGS:
        option = by_flags[s.flags]
        default = option.default
        if s.subject in ("vmm_granularity",):
            default = parse_size(default)
        if s.subject == "feature_sizes":
            default = tuple(default or ())
        if s.subject == "transport":  # unset: the table's default planned, and said to be SGLang's opt-in
            assert default is None
            default = s.default
        if s.subject in ("budget", "context_bytes"):
            assert default is None, s.subject
        else:
            assert default == s.default, s.subject


def test_config_keys_and_launch_destinations_exist() -> None:
    schema = mmpool_config.json_schema()
    for s in SETTINGS:
        if s.config is not None:
            section, key = s.config
            assert key in schema["$defs"][schema["properties"][section]["$ref"].rsplit("/", 1)[1]]["properties"], s
        if s.dest is not None:
            assert s.dest in args.BY_DEST and s.sglang_flag in args.BY_DEST[s.dest].names, s
