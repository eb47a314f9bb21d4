"""The GitHub side of the sandbox: REST API, App auth, rate limits, runners, jobs and webhooks."""
