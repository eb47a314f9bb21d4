"""Subcommands of `corral` that are more than a few lines: each module adds its parsers and handlers."""
