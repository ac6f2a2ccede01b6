"""The pure core: exact sizes, result models and the plan. No typer, rich or torch."""
