"""mmpool record's bootstrap: first on the command's PYTHONPATH, so every Python process beneath runs it.

It does nothing at all unless ``MMPOOL_RECORD`` is set. Then it installs the hook that wraps
SGLang's feature pools when their modules are imported, and in every case it runs the next
``sitecustomize`` on ``sys.path`` (the image's own), as OpenTelemetry's bootstrap does. Nothing it
does may raise: a failure is one line on stderr and the program runs as if mmpool were absent.
"""

import os
import sys


def _install() -> None:
    try:
        from mmpool_record import hook

        hook.install()
    except Exception as e:  # never into the program
        try:
            from mmpool_record.say import say

            say(f"the hook is not installed ({type(e).__name__}: {e})")
        except Exception:  # the package itself is broken: the line, as say would write it
            sys.stderr.write(f"mmpool record: the hook is not installed ({type(e).__name__}: {e})\n")


def _chain() -> None:
    """Import the ``sitecustomize`` this one hides: the next one on sys.path after this directory."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # Python's own site.py says the same for a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")


if os.environ.get("MMPOOL_RECORD"):
    _install()
_chain()
