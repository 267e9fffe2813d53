"""`python -m gate` runs the CLI."""

from gate.cli import main

main()
