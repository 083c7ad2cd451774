"""One module per CLI command: each exposes ``configure(parser)`` and ``main(args) -> int``."""
