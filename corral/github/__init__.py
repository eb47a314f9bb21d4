"""corral's side of GitHub: the REST client (JIT configs, runners, jobs) and webhook handling."""
