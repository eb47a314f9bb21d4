"""HTTP: the REST API, the webhook endpoint, metrics and health."""
