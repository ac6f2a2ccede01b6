"""`python -m mmpool_cli` runs the CLI."""

from mmpool_cli.cli import main

raise SystemExit(main())
