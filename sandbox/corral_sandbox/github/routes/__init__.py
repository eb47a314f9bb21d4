"""The REST endpoints, one module per area; each exposes `register(router, state)`."""
