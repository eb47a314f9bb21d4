"""corral: ephemeral, self-hosted GitHub Actions runners on OpenStack."""

__version__ = "0.1.0"
