"""`corral token create|list|revoke`: API tokens, managed directly in the database."""

from __future__ import annotations

import argparse
import sys

from corral.commands.database import add_database_arguments, open_store
from corral.commands.output import emit
from corral.store import tokens
from corral.store.tokens import SCOPES


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser("token", help="create, list and revoke API tokens")
    add_database_arguments(parser)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a token; it is printed once and stored hashed")
    create.add_argument("--name", required=True, help="who or what uses it, e.g. grafana")
    create.add_argument("--scope", choices=SCOPES, default="read", help="read (default), admin or metrics")
    create.set_defaults(handler=_create)
    listing = actions.add_parser("list", help="list tokens (never their values)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)
    revoke = actions.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    revoke.set_defaults(handler=_revoke)
    for action in (create, listing, revoke):
        add_database_arguments(action, repeated=True)


def _create(args: argparse.Namespace) -> int:
    store = open_store(args, "token")
    if store is None:
        return 2
    token, text = store.run_blocking(tokens.create, args.name, args.scope)
    store.close()
    print(f"created token {token.id} ({token.scope}) for {token.name}; it is shown only now:", file=sys.stderr)
    print(text)
    return 0


def _list(args: argparse.Namespace) -> int:
    store = open_store(args, "token")
    if store is None:
        return 2
    rows = [
        {
            "id": token.id,
            "name": token.name,
            "scope": token.scope,
            "created_at": token.created_at.isoformat(timespec="seconds"),
            "last_used_at": token.last_used_at.isoformat(timespec="seconds") if token.last_used_at else None,
            "revoked_at": token.revoked_at.isoformat(timespec="seconds") if token.revoked_at else None,
        }
        for token in store.run_blocking(tokens.listing)
    ]
    store.close()
    print(emit(rows, ["id", "name", "scope", "created_at", "last_used_at", "revoked_at"], args.json))
    return 0


def _revoke(args: argparse.Namespace) -> int:
    store = open_store(args, "token")
    if store is None:
        return 2
    revoked = store.run_blocking(tokens.revoke, args.id)
    store.close()
    if not revoked:
        print(f"no live token {args.id}", file=sys.stderr)
        return 1
    print(f"revoked {args.id}")
    return 0
