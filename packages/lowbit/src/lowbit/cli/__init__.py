"""The ``lowbit`` command line: one module per subcommand, the parser in :mod:`lowbit.cli.parser`."""
