"""`python -m rolecall.cli` runs the CLI."""
from rolecall.cli import app

app()
