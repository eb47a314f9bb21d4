"""Commands that work on the database directly: `corral migrate`, and the store that `token` uses."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corral.config import ConfigError, load_config
from corral.store import SchemaNotCurrent, SchemaTooNew, Store


def add_database_arguments(parser: argparse.ArgumentParser, *, repeated: bool = False) -> None:
    """`--config` and `--database-url`; `repeated` for an action's own parser, so that `corral token create
    --config c.yaml` works as well as `corral token --config c.yaml create` (an absent option there must not
    overwrite one given before the action, hence no default)."""
    default = argparse.SUPPRESS if repeated else None
    parser.add_argument("--config", type=Path, default=default, help="take database_url from this config file")
    parser.add_argument("--database-url", default=default, help="database URL (overrides the config file)")


def open_store(args: argparse.Namespace, command: str, *, migrate: bool = True) -> Store | None:
    """The migrated store named by --database-url or --config; None (after saying why) if neither works.
    `migrate=False` (a command that only reads): the schema must already be this corral's, and is not touched."""
    url = args.database_url
    if url is None and args.config is not None:
        try:
            url = load_config(args.config).database_url
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return None
    if url is None:
        print(f"corral {command}: give --config or --database-url", file=sys.stderr)
        return None
    return open_store_at(url, command, migrate=migrate)


def open_store_at(url: str, command: str, *, migrate: bool = True) -> Store | None:
    """The store at `url`, as `open_store` opens it."""
    store = Store(url)
    try:
        if migrate:
            store.migrate()
        else:
            store.check_schema()
    except (SchemaTooNew, SchemaNotCurrent) as exc:
        store.close()
        print(f"corral {command}: {exc}", file=sys.stderr)
        return None
    return store


def add_migrate_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser("migrate", help="create or upgrade the database schema")
    add_database_arguments(parser)
    parser.set_defaults(handler=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    store = open_store(args, "migrate")
    if store is None:
        return 2
    store.close()
    print("schema is up to date")
    return 0
