"""The patch set's one CLI: ``python -m tools <subcommand>`` (see ``python -m tools --help``)."""
