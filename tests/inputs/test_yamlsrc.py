"""Located YAML under hostile input: linear locating, bounded aliases, huge integers, non-regular files."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mmpool_cli.core.findings import Finding
from mmpool_cli.engines.sglang.env_vars import read_launch_env
from mmpool_cli.engines.sglang.files import validate_file
from mmpool_cli.inputs.filebytes import MAX_FILE_BYTES, read_stdin
from mmpool_cli.inputs.yamlsrc import MAX_ALIAS_NODES, MAX_DEPTH, load, parse_text

NO_ENV = read_launch_env({})


def _bomb(levels: int, fanout: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * fanout) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fanout) + "]")
    return "\n".join(lines) + "\n"


def test_locating_is_linear_in_the_number_of_keys(tmp_path: Path) -> None:
    # 100 000 keys: quadratic locating (every key scanning every node) takes hours; linear takes seconds.
    path = tmp_path / "many.yaml"
    path.write_text("".join(f"unknown-key-{i}: {i}\n" for i in range(100_000)))
    code = (
        "import sys; from mmpool_cli.engines.sglang.files import validate_file; "
        "from mmpool_cli.engines.sglang.env_vars import read_launch_env; "
        "r = validate_file(sys.argv[1], read_launch_env({})); print(len(r.findings), *(f.location for f in r.findings))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120, check=True
    )
    count, *locations = done.stdout.split()
    assert int(count) >= 100_000
    assert f"{path}:100000:1" in locations


def test_a_located_key_is_its_last_occurrence() -> None:
    src = parse_text("f.yaml", "a: 1\nb:\n  c: [x, y]\n")
    assert src.where(("b", "c", 1)) == "f.yaml:3:10"
    assert src.where(("b",), key=True) == "f.yaml:2:1"
    assert src.where(("nope", "deeper")) == "f.yaml:1:1"


@pytest.mark.parametrize("kind", ["sglang", "mmpool"])
def test_an_alias_bomb_is_a_located_finding(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "bomb.yaml"
    text = _bomb(6)  # 9^7 = 4.8 million values once the aliases are expanded
    path.write_text(("pool: {size: 1GiB}\n" if kind == "mmpool" else "") + text)
    result = validate_file(str(path), NO_ENV)
    found = [f for f in result.findings if f.code == "yaml-alias-expansion"]
    assert len(found) == 1, result.findings
    line = 6 if kind == "sglang" else 7  # the first value whose aliases expand past the bound
    assert found[0].location == f"{path}:{line}:5"
    assert f"{MAX_ALIAS_NODES:,}" in found[0].message


def test_aliases_within_the_bound_are_read() -> None:
    src = parse_text("f.yaml", "base: &b {tp-size: 2}\nother: *b\n" + _bomb(3))
    assert src.findings == []
    assert src.data["other"] == {"tp-size": 2}


@pytest.mark.parametrize("text", ["tp-size: &a {b: *a}\n", "a: &a [1, *a]\n", "pool: &p {size: 1GiB, x: *p}\n"])
def test_a_value_that_contains_itself_is_a_finding(text: str) -> None:
    src = parse_text("f.yaml", text)
    assert [f.code for f in src.findings] == ["yaml-recursive-alias"]
    assert src.findings[0].location == "f.yaml:1:" + str(text.index("&") + 1)


def test_a_recursive_alias_in_an_sglang_config_is_no_internal_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("tp-size: &a {b: *a}\n")
    assert [f.code for f in validate_file(str(path), NO_ENV).findings] == ["yaml-recursive-alias"]


@pytest.mark.parametrize(("kind", "prefix"), [("sglang", "tp-size: "), ("mmpool", "pool:\n  tokenizer_workers: ")])
def test_an_integer_beyond_pythons_digit_limit_is_a_located_finding(tmp_path: Path, kind: str, prefix: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(prefix + "9" * 4_400 + "\n")
    result = validate_file(str(path), NO_ENV)
    assert [f.code for f in result.findings] == ["yaml-int-too-long"]
    finding = result.findings[0]
    assert finding.location == f"{path}:{prefix.count(chr(10)) + 1}:{len(prefix.split(chr(10))[-1]) + 1}"
    assert "set_int_max_str_digits" not in finding.message
    assert "4,400 digits" in finding.message
    assert len(finding.message) < 400


def test_stdin_is_read_up_to_the_limit_only() -> None:
    class Endless:
        served = 0

        def read(self, n: int = -1) -> bytes:
            assert n is not None and n >= 0, "stdin read without a bound"
            self.served += n
            return b"#" * n

    stream = Endless()
    raw = read_stdin(stream)
    assert stream.served <= MAX_FILE_BYTES + 1
    src = load("-", raw)
    assert [f.code for f in src.findings] == ["file-too-large"]


def test_validate_stdin_refuses_a_huge_input(run_line) -> None:
    result = run_line(["mmpool", "validate", "-"], input=b"#" * (MAX_FILE_BYTES + 10))
    assert result.exit_code == 1
    assert "file-too-large" in result.stdout


def _without_blocking(target, *args):
    """Run ``target`` in a thread; fail (after unblocking it) if it is still waiting after 10 s."""
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", target(*args)), daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        fd = os.open(args[0], os.O_WRONLY | os.O_NONBLOCK)  # a writer that leaves at once unblocks the reader
        os.close(fd)
        thread.join(10)
        pytest.fail(f"{target.__name__}({args[0]}) blocked on a FIFO")
    return box["value"]


def test_a_fifo_as_a_config_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    result = _without_blocking(validate_file, str(fifo), NO_ENV)
    assert [f.code for f in result.findings] == ["file-not-regular"]
    assert "FIFO" in result.findings[0].message


def test_a_fifo_as_an_env_file_is_refused_without_blocking(tmp_path: Path) -> None:
    from mmpool_cli.inputs.dotenv import read_env_file

    fifo = tmp_path / "pool.env"
    os.mkfifo(fifo)
    values, findings = _without_blocking(read_env_file, str(fifo))
    assert values == {}
    assert [f.code for f in findings] == ["file-not-regular"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_is_refused_unread() -> None:
    assert [f.code for f in load("/dev/zero").findings] == ["file-not-regular"]


def test_a_directory_is_still_named(tmp_path: Path) -> None:
    finding = load(str(tmp_path)).findings[0]
    assert (finding.code, finding.message) == ("file-unreadable", "this is a directory, not a file")


@pytest.mark.parametrize(
    "value",
    ["[" * 150 + "]" * 150, "{a: " * 150 + "1" + "}" * 150, "[" * 999 + "]" * 999],
    ids=["list", "map", "libyaml-limit"],
)
@pytest.mark.parametrize("kind", ["sglang", "mmpool"])
def test_deep_nesting_is_a_located_finding(tmp_path: Path, value: str, kind: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(("pool: {size: 1GiB}\n" if kind == "mmpool" else "") + "tp-size: " + value + "\n")
    result = validate_file(str(path), NO_ENV)  # an internal error (RecursionError) before
    assert [f.code for f in result.findings] == ["yaml-too-deep"]
    line = 2 if kind == "mmpool" else 1
    assert result.findings[0].location.startswith(f"{path}:{line}:")
    assert f"{MAX_DEPTH}" in result.findings[0].message


def test_nesting_within_the_bound_is_read() -> None:
    src = parse_text("f.yaml", "tp-size: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")
    assert src.findings == []


def test_aliases_that_nest_deep_are_caught_too() -> None:
    text = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, MAX_DEPTH + 5))
    assert [f.code for f in parse_text("f.yaml", text).findings] == ["yaml-too-deep"]


def _silent_pipe(first: bytes) -> tuple[int, int]:
    """A pipe holding ``first`` whose write end stays open (the writer that never says more)."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, first)
    return read_fd, write_fd


def test_a_silent_stdin_pipe_is_a_finding_after_the_idle_timeout() -> None:
    read_fd, write_fd = _silent_pipe(b"pool:\n  size: 1GiB\n")
    try:
        with os.fdopen(read_fd, "rb") as stream:
            got = read_stdin(stream, idle_timeout=0.3)
    finally:
        os.close(write_fd)
    assert isinstance(got, Finding), got
    assert got.code == "file-unreadable"
    assert got.location == "-"
    assert "no data for 0.3 s after 19 bytes" in got.message
    assert "--idle-timeout" in got.message
    src = load("-", got)
    assert [f.code for f in src.findings] == ["file-unreadable"]


def test_a_pipe_that_ends_is_read_whole() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"pool: {size: 1GiB}\n")
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as stream:
        assert read_stdin(stream, idle_timeout=5) == b"pool: {size: 1GiB}\n"


def test_validate_dash_on_a_silent_pipe_ends_with_the_finding() -> None:
    read_fd, write_fd = _silent_pipe(b"")
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mmpool_cli", "validate", "-", "--idle-timeout", "0.5", "--no-process-env"],
            stdin=read_fd,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1"},
            cwd=root,
        )
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert done.returncode == 1, done.stderr
    assert "no data for 0.5 s" in done.stdout


@pytest.mark.parametrize("value", ["0", "-1", "nan", "2000000"])
def test_validate_idle_timeout_has_simulates_bounds(run_line, value: str) -> None:
    result = run_line(["mmpool", "validate", "-", "--idle-timeout", value], input=b"")
    assert result.exit_code == 2
    assert "--idle-timeout" in result.stderr


def test_a_duplicate_key_has_the_one_message_traces_use_too() -> None:
    from mmpool_cli.core.excerpt import duplicate_key

    src = parse_text("c.yaml", "tp-size: 1\ntp-size: 2\n")
    assert [(f.code, f.message, f.location) for f in src.findings] == [
        ("yaml-duplicate-key", duplicate_key("tp-size", "on line 1"), "c.yaml:2:1")
    ]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('[pool]\nsize = "1GiB"\ntokenizer_workers = 4\n', "yaml-syntax"),
        ("tp-size = 8\n", "root-not-mapping"),
        ('# a comment\n[server]\n"tp-size" = 8\n', "yaml-syntax"),
    ],
)
def test_toml_is_said_to_be_toml_not_yaml(text: str, code: str) -> None:
    src = parse_text("sglang.toml", text)
    assert [f.code for f in src.findings] == [code]
    message = src.findings[0].message
    assert "not YAML" in message
    assert "TOML" in message
    assert "document start" not in message


def test_yaml_errors_that_are_not_toml_keep_their_words() -> None:
    src = parse_text("c.yaml", "a: [1, 2\n")
    assert [f.code for f in src.findings] == ["yaml-syntax"]
    assert "TOML" not in src.findings[0].message


@pytest.mark.parametrize("key", ["k" * 1_000_000, "k" * 1030, '"' + "k" * 1030 + '"'])
def test_a_key_past_1024_characters_names_the_limit(key: str) -> None:
    src = parse_text("c.yaml", f"{key}: 1\n")
    assert [f.code for f in src.findings] == ["yaml-syntax"]
    message = src.findings[0].message
    assert "1024 characters" in message
    assert f"{len(key):,}" in message
    assert "mapping values are not allowed" not in message
    assert len(message) < 300


def test_a_key_of_1024_characters_is_still_read() -> None:
    assert parse_text("c.yaml", "k" * 1000 + ": 1\n").data == {"k" * 1000: 1}
