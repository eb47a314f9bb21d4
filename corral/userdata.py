"""Cloud-init user data: the script a runner VM runs at first boot, rendered from a replaceable template.

Templates use `string.Template` syntax (`${jit_config}`, `${runner_name}`, `${pool}`, `${labels}`,
`${runner_download_url}`, and for a pool with `cache_volumes` `${cache_volume}` and `${cache_mount}`, empty when
the server got no cache volume; `$$` for a literal dollar), which keeps shell scripts readable: shell's own
`$VAR` needs doubling, nothing else does. The rendered text carries the JIT config, so it is only ever
handed to the cloud; corral never logs or stores it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template

NOVA_USER_DATA_LIMIT = 65_535
"""Nova refuses user data whose base64 form is longer than this; checked here so the error names the template."""
PLACEHOLDERS = ("jit_config", "runner_name", "pool", "labels", "runner_download_url", "cache_volume", "cache_mount")
SAMPLE_JIT_CONFIG_LENGTH = 4_096
"""GitHub's `encoded_jit_config` is 2-3 KB of base64 (the sandbox's, ~3.8 KB); `corral config check` renders
templates with one this long, so a template that passes the check does not fail on the first real runner."""


class UserDataError(ValueError):
    """The template cannot be rendered (unknown placeholder) or the result is too big for Nova."""


def default_template() -> str:
    return resources.files("corral").joinpath("templates/runner.sh").read_text()


def base64_length(size: int) -> int:
    """Characters in the base64 form of `size` bytes, padding included: what Nova measures."""
    return 4 * ((size + 2) // 3)


def load_template(path: Path | None) -> Template:
    """The template at `path` (or the default), refused now if a render could never work."""
    text = default_template() if path is None else path.read_text()
    template = Template(text)
    name = path or "default"
    if not template.is_valid():
        raise UserDataError(f"user data template {name}: invalid placeholder (use $$ for $)")
    unknown = sorted(set(template.get_identifiers()) - set(PLACEHOLDERS))
    if unknown:
        known = ", ".join(f"${{{placeholder}}}" for placeholder in PLACEHOLDERS)
        shown = ", ".join(f"${{{placeholder}}}" for placeholder in unknown)
        raise UserDataError(f"user data template {name}: unknown placeholder {shown}; use {known} ($$ for a $)")
    return template


def render_user_data(
    template: Template,
    *,
    jit_config: str,
    runner_name: str,
    pool: str,
    labels: list[str],
    runner_download_url: str,
    cache_volume: str = "",
    cache_mount: str = "",
) -> str:
    """The user data of one runner. `cache_volume`: the Cinder id of the cache volume attached to its server
    (the guest finds its disk by it), mounted at `cache_mount`; both empty when it has none."""
    try:
        text = template.substitute(
            jit_config=jit_config,
            runner_name=runner_name,
            pool=pool,
            labels=",".join(labels),
            runner_download_url=runner_download_url,
            cache_volume=cache_volume,
            cache_mount=cache_mount,
        )
    except KeyError as exc:
        raise UserDataError(f"user data template uses unknown placeholder ${{{exc.args[0]}}}") from None
    size = len(text.encode())
    if base64_length(size) > NOVA_USER_DATA_LIMIT:
        raise UserDataError(
            f"rendered user data is {size:,} bytes, {base64_length(size):,} in base64, over Nova's limit of "
            f"{NOVA_USER_DATA_LIMIT:,}; shorten the template"
        )
    return text
