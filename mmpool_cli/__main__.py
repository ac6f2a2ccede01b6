"""`python -m mmpool_cli` runs the CLI."""

from mmpool_cli.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
