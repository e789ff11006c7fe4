"""`python -m rolecall` runs the CLI."""
from rolecall.cli import app

app()
