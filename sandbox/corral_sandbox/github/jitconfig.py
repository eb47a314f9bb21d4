"""Just-in-time runner configurations: what `generate-jitconfig` hands out, and finding one in user data.

The real `encoded_jit_config` is base64 of a JSON object holding the three files `config.sh` would have
written (`.runner`, `.credentials`, `.credentials_rsaparams`), each itself base64 of JSON. The runner
proves itself with the RSA key in `.credentials_rsaparams`; here that key's private exponent is random
bytes the sandbox remembers, so a configuration cannot be guessed or forged, only copied.

A guest may carry the configuration verbatim (`run.sh --jitconfig ...`), inside a base64 blob (cloud-config
`write_files` with `encoding: b64`), gzip-compressed, or several layers of these; `find_secrets` digs.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import uuid
import zlib
from collections.abc import Iterator

from corral_sandbox.github.model import Runner

GZIP_MAGIC = b"\x1f\x8b"
MAX_DEPTH = 4
MAX_INFLATED = 4 * 1024 * 1024
BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{40,}={0,2}")


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def _b64json(value: object) -> str:
    return _b64(json.dumps(value, separators=(",", ":")))


def new_secret() -> str:
    """The private exponent of the runner's RSA key: 2048 random bits, base64 as .NET writes it."""
    return _b64(secrets.token_bytes(256))


def encode(runner: Runner, github_html_url: str, owner_path: str) -> str:
    """The `encoded_jit_config` for `runner`, shaped like the one GitHub returns."""
    pool_service = uuid.uuid4().hex
    client_id = str(uuid.uuid4())
    files = {
        ".runner": _b64json(
            {
                "AgentId": str(runner.id),
                "AgentName": runner.name,
                "PoolId": str(runner.group_id),
                "PoolName": "Default",
                "ServerUrl": f"https://pipelinesghubeus22.actions.githubusercontent.com/{pool_service}/",
                "GitHubUrl": f"{github_html_url}/{owner_path}",
                "WorkFolder": runner.work_folder,
            }
        ),
        ".credentials": _b64json(
            {
                "Scheme": "OAuth",
                "Data": {
                    "clientId": client_id,
                    "authorizationUrl": "https://vstoken.actions.githubusercontent.com/_apis/oauth2/token/"
                    + pool_service,
                    "requireFipsCryptography": "False",
                },
            }
        ),
        ".credentials_rsaparams": _b64json(
            {
                "d": runner.secret,
                "dp": _b64(secrets.token_bytes(128)),
                "dq": _b64(secrets.token_bytes(128)),
                "exponent": "AQAB",
                "inverseQ": _b64(secrets.token_bytes(128)),
                "modulus": _b64(secrets.token_bytes(256)),
                "p": _b64(secrets.token_bytes(128)),
                "q": _b64(secrets.token_bytes(128)),
            }
        ),
    }
    return _b64json(files)


def _decode_base64(token: bytes) -> bytes | None:
    token = token.rstrip(b"=")
    altchars = b"-_" if (b"-" in token or b"_" in token) else None
    try:
        return base64.b64decode(token + b"=" * (-len(token) % 4), altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        return None


def _inflate(data: bytes) -> bytes | None:
    try:
        inflated = zlib.decompressobj(wbits=31).decompress(data, MAX_INFLATED)
    except zlib.error:
        return None
    return inflated


def _secret_of(decoded: bytes) -> str | None:
    """The RSA secret if `decoded` is a JIT configuration document, else None."""
    if not decoded.startswith(b"{"):
        return None
    try:
        files = json.loads(decoded)
        params = json.loads(base64.b64decode(files[".credentials_rsaparams"]))
        secret = params["d"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    return secret if isinstance(secret, str) else None


def find_secrets(data: bytes, depth: int = 0) -> Iterator[str]:
    """Every JIT configuration secret carried by `data`, however it is wrapped."""
    if depth > MAX_DEPTH:
        return
    if data.startswith(GZIP_MAGIC):
        inflated = _inflate(data)
        if inflated is not None:
            yield from find_secrets(inflated, depth + 1)
        return
    for match in BASE64_RUN.finditer(data):
        decoded = _decode_base64(match.group())
        if decoded is None:
            continue
        secret = _secret_of(decoded)
        if secret is not None:
            yield secret
        else:
            yield from find_secrets(decoded, depth + 1)
