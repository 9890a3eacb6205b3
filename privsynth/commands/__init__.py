"""CLI subcommands, one module each; each module defines ``register(subparsers)``."""
