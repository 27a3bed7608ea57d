"""One module per `kvconform` subcommand; each exposes `register(subparsers)` and `run(args) -> int`."""
