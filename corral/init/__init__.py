"""`corral init`: a starter corral.yaml from what the cloud and the GitHub App already hold.

The modules each do one thing: `cloud` lists what the OpenStack project offers, `github` turns the App's
installations into scopes, `choose` applies the rules that pick where the choice is unambiguous, `prompt`
asks the person at the terminal (or names the flag to pass when nobody is there), `webhook` finds or makes
the webhook secret's file, `render` writes the YAML with its comments, and `run` puts them together,
validates the result with corral's own loader and hands it to `corral doctor`.
"""

from corral.init.errors import InitError
from corral.init.run import InitOptions, run_init

__all__ = ["InitError", "InitOptions", "run_init"]
