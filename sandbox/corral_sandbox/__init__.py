"""A loopback OpenStack and GitHub that the real openstacksdk and githubkit talk to over HTTP.

Tests, the demo and benchmarks run corral against this world; see `server.Sandbox`.
"""
