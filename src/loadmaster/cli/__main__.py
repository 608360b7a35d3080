"""``python -m loadmaster.cli``: the same as the ``loadmaster`` command."""

from loadmaster.cli import main

main()
