"""Subcommands. Each module defines NAME, HELP, ORDER, add_arguments(parser) and main(args) -> int."""
