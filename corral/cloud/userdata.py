"""Cloud-init user data: the script a runner VM runs at first boot, rendered from a replaceable template.

Templates use `string.Template` syntax (`${jit_config}`, `${runner_name}`, `${pool}`, `${labels}`,
`${runner_download_url}`; `$$` for a literal dollar), which keeps shell scripts readable: shell's own
`$VAR` needs doubling, nothing else does. The rendered text carries the JIT config, so it is only ever
handed to the cloud; corral never logs or stores it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from string import Template

DEFAULT_RUNNER_DOWNLOAD_URL = (
    "https://github.com/actions/runner/releases/download/v2.329.0/actions-runner-linux-x64-2.329.0.tar.gz"
)
NOVA_USER_DATA_LIMIT = 65_535
"""Nova refuses user data above 64 KiB (base64-encoded); checked here so the error names the template."""


class UserDataError(ValueError):
    """The template cannot be rendered (unknown placeholder) or the result is too big for Nova."""


def default_template() -> str:
    return resources.files("corral.cloud").joinpath("templates/runner.sh").read_text()


def load_template(path: Path | None) -> Template:
    text = default_template() if path is None else path.read_text()
    template = Template(text)
    if not template.is_valid():
        raise UserDataError(f"user data template {path or 'default'}: invalid placeholder (use $$ for $)")
    return template


def render_user_data(
    template: Template,
    *,
    jit_config: str,
    runner_name: str,
    pool: str,
    labels: list[str],
    runner_download_url: str = DEFAULT_RUNNER_DOWNLOAD_URL,
) -> str:
    try:
        text = template.substitute(
            jit_config=jit_config,
            runner_name=runner_name,
            pool=pool,
            labels=",".join(labels),
            runner_download_url=runner_download_url,
        )
    except KeyError as exc:
        raise UserDataError(f"user data template uses unknown placeholder ${{{exc.args[0]}}}") from None
    if len(text.encode()) * 4 // 3 > NOVA_USER_DATA_LIMIT:
        raise UserDataError("rendered user data is larger than Nova's 64 KiB limit; shorten the template")
    return text
