"""`python -m mmpool_cli` runs the CLI, through the same entry point as the ``mmpool`` command."""

from mmpool_cli.entry import run

if __name__ == "__main__":
    run()
