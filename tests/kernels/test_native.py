"""The compiled kernels the tests exercise are the ones users run: built where a C compiler is at hand.

The README's test command installs editable, which builds every kernel in place; a command that left
one unbuilt would quietly skip every comparison of that kernel with its Python twin.
"""

from __future__ import annotations

import os
import shutil
import sysconfig

import pytest

from mmpool_cli.kernels import native

CC = (sysconfig.get_config_var("CC") or "cc").split()[0]


@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC}): mmpool installs without its kernels")
@pytest.mark.skipif(
    os.environ.get("MMPOOL_PURE_PYTHON", "") not in ("", "0"), reason="MMPOOL_PURE_PYTHON asks for the Python code"
)
@pytest.mark.parametrize("name", ["_fastsim", "_stackdist", "_cachereplay", "_prefixreplay", "_behind", "_promptids"])
def test_each_kernel_is_built_where_a_compiler_is(name: str) -> None:
    assert native.compiled(name) is not None, (
        f"mmpool_cli.kernels.{name} is not built: install with `pip install -e .` (or run "
        "`python setup.py build_ext --inplace`) so the tests run it"
    )


def test_pure_python_is_chosen_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMPOOL_PURE_PYTHON", "1")
    names = ("_fastsim", "_stackdist", "_cachereplay", "_prefixreplay", "_behind", "_promptids")
    assert all(native.compiled(name) is None for name in names)
