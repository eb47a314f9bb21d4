"""How GitHub renders its objects, for REST responses and webhook payloads alike.

The shapes follow GitHub's published webhook schemas and the OpenAPI description githubkit is generated
from, field for field: a consumer that reads `repository.owner.login` or `workflow_job.runner_group_name`
here reads the same key in production. `Urls` carries the API root of the request being answered, so an
Enterprise Server client (under `/api/v3`) is handed URLs it can follow.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from corral_sandbox.github.clock import isoformat
from corral_sandbox.github.model import (
    Account,
    Installation,
    Job,
    Repository,
    Runner,
    RunnerLabel,
    WorkflowRun,
)

APP_PERMISSIONS = {
    "actions": "read",
    "administration": "write",
    "metadata": "read",
    "organization_self_hosted_runners": "write",
}
APP_EVENTS = ["workflow_job"]
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Urls:
    """The API root (`http://host:port` or `.../api/v3`) and the web root objects link to."""

    api: str
    html: str


@dataclass(frozen=True)
class AppIdentity:
    id: int
    slug: str
    client_id: str
    owner: Account


def ts(moment: datetime | None) -> str | None:
    return isoformat(moment)


def sha(seed: str) -> str:
    """A stable, realistic-looking 40-hex commit SHA."""
    return hashlib.sha1(seed.encode(), usedforsecurity=False).hexdigest()


def user(account: Account, urls: Urls) -> dict[str, Any]:
    """The `user` object (owners, senders, installation accounts)."""
    api = f"{urls.api}/users/{account.login}"
    return {
        "login": account.login,
        "id": account.id,
        "node_id": account.node_id,
        "avatar_url": f"https://avatars.githubusercontent.com/u/{account.id}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"{urls.html}/{account.login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": account.type,
        "site_admin": False,
    }


def organization(account: Account, urls: Urls) -> dict[str, Any]:
    api = f"{urls.api}/orgs/{account.login}"
    return {
        "login": account.login,
        "id": account.id,
        "node_id": account.node_id,
        "url": api,
        "html_url": f"{urls.html}/{account.login}",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events",
        "hooks_url": f"{api}/hooks",
        "issues_url": f"{api}/issues",
        "members_url": f"{api}/members{{/member}}",
        "public_members_url": f"{api}/public_members{{/member}}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{account.id}?v=4",
        "description": None,
    }


def repository(repo: Repository, urls: Urls) -> dict[str, Any]:
    """The full repository object webhooks carry (a superset of the REST `minimal-repository`)."""
    api = f"{urls.api}/repos/{repo.full_name}"
    html = f"{urls.html}/{repo.full_name}"
    host = urls.html.split("://", 1)[-1]
    created = ts(repo.created_at)
    return {
        "id": repo.id,
        "node_id": repo.node_id,
        "name": repo.name,
        "full_name": repo.full_name,
        "private": True,
        "owner": user(repo.owner, urls),
        "html_url": html,
        "description": None,
        "fork": False,
        "url": api,
        "forks_url": f"{api}/forks",
        "keys_url": f"{api}/keys{{/key_id}}",
        "collaborators_url": f"{api}/collaborators{{/collaborator}}",
        "teams_url": f"{api}/teams",
        "hooks_url": f"{api}/hooks",
        "issue_events_url": f"{api}/issues/events{{/number}}",
        "events_url": f"{api}/events",
        "assignees_url": f"{api}/assignees{{/user}}",
        "branches_url": f"{api}/branches{{/branch}}",
        "tags_url": f"{api}/tags",
        "blobs_url": f"{api}/git/blobs{{/sha}}",
        "git_tags_url": f"{api}/git/tags{{/sha}}",
        "git_refs_url": f"{api}/git/refs{{/sha}}",
        "trees_url": f"{api}/git/trees{{/sha}}",
        "statuses_url": f"{api}/statuses/{{sha}}",
        "languages_url": f"{api}/languages",
        "stargazers_url": f"{api}/stargazers",
        "contributors_url": f"{api}/contributors",
        "subscribers_url": f"{api}/subscribers",
        "subscription_url": f"{api}/subscription",
        "commits_url": f"{api}/commits{{/sha}}",
        "git_commits_url": f"{api}/git/commits{{/sha}}",
        "comments_url": f"{api}/comments{{/number}}",
        "issue_comment_url": f"{api}/issues/comments{{/number}}",
        "contents_url": f"{api}/contents/{{+path}}",
        "compare_url": f"{api}/compare/{{base}}...{{head}}",
        "merges_url": f"{api}/merges",
        "archive_url": f"{api}/{{archive_format}}{{/ref}}",
        "downloads_url": f"{api}/downloads",
        "issues_url": f"{api}/issues{{/number}}",
        "pulls_url": f"{api}/pulls{{/number}}",
        "milestones_url": f"{api}/milestones{{/number}}",
        "notifications_url": f"{api}/notifications{{?since,all,participating}}",
        "labels_url": f"{api}/labels{{/name}}",
        "releases_url": f"{api}/releases{{/id}}",
        "deployments_url": f"{api}/deployments",
        "created_at": created,
        "updated_at": created,
        "pushed_at": created,
        "git_url": f"git://{host}/{repo.full_name}.git",
        "ssh_url": f"git@{host.split(':', 1)[0]}:{repo.full_name}.git",
        "clone_url": f"{html}.git",
        "svn_url": html,
        "homepage": None,
        "size": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": None,
        "has_issues": True,
        "has_projects": True,
        "has_downloads": True,
        "has_wiki": False,
        "has_pages": False,
        "has_discussions": False,
        "forks_count": 0,
        "mirror_url": None,
        "archived": False,
        "disabled": False,
        "open_issues_count": 0,
        "license": None,
        "allow_forking": False,
        "is_template": False,
        "web_commit_signoff_required": False,
        "topics": [],
        "visibility": "private",
        "forks": 0,
        "open_issues": 0,
        "watchers": 0,
        "default_branch": "main",
        "custom_properties": {},
    }


def installation_lite(installation: Installation) -> dict[str, Any]:
    return {"id": installation.id, "node_id": installation.node_id}


def installation(installation: Installation, app: AppIdentity, urls: Urls) -> dict[str, Any]:
    """`GET /app/installations/...`: the app installed on every repository of one account."""
    account = installation.account
    settings = "organizations/" + account.login + "/" if account.type == "Organization" else ""
    return {
        "id": installation.id,
        "client_id": app.client_id,
        "account": user(account, urls),
        "repository_selection": "all",
        "access_tokens_url": f"{urls.api}/app/installations/{installation.id}/access_tokens",
        "repositories_url": f"{urls.api}/installation/repositories",
        "html_url": f"{urls.html}/{settings}settings/installations/{installation.id}",
        "app_id": app.id,
        "app_slug": app.slug,
        "target_id": account.id,
        "target_type": account.type,
        "permissions": dict(installation.permissions),
        "events": list(installation.events),
        "created_at": ts(installation.created_at),
        "updated_at": ts(installation.created_at),
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
        "suspended_by": None,
        "suspended_at": None,
    }


def app(identity: AppIdentity, installations_count: int, urls: Urls) -> dict[str, Any]:
    """`GET /app`: the authenticated GitHub App."""
    return {
        "id": identity.id,
        "slug": identity.slug,
        "node_id": f"A_kwDO{identity.id:08X}",
        "client_id": identity.client_id,
        "owner": user(identity.owner, urls),
        "name": identity.slug,
        "description": "Ephemeral self-hosted runners on OpenStack",
        "external_url": f"{urls.html}/{identity.owner.login}",
        "html_url": f"{urls.html}/apps/{identity.slug}",
        "created_at": ts(EPOCH),
        "updated_at": ts(EPOCH),
        "permissions": APP_PERMISSIONS,
        "events": APP_EVENTS,
        "installations_count": installations_count,
    }


def runner_label(label: RunnerLabel) -> dict[str, Any]:
    return {"id": label.id, "name": label.name, "type": label.type}


def runner(r: Runner) -> dict[str, Any]:
    return {
        "id": r.id,
        "name": r.name,
        "os": r.os,
        "status": r.status,
        "busy": r.busy,
        "ephemeral": True,
        "runner_group_id": r.group_id,
        "labels": [runner_label(label) for label in r.labels],
    }


def runner_group(group_id: int, name: str, runners_url: str) -> dict[str, Any]:
    return {
        "id": group_id,
        "name": name,
        "visibility": "all",
        "default": True,
        "runners_url": runners_url,
        "inherited": False,
        "allows_public_repositories": False,
        "restricted_to_workflows": False,
        "selected_workflows": [],
        "workflow_restrictions_read_only": False,
    }


def _steps(job: Job) -> list[dict[str, Any]]:
    """The steps a job shows: none while queued, `Set up job` running, then all three completed."""
    if job.status == "queued" or job.started_at is None:
        return []
    started = ts(job.started_at)
    if job.status == "in_progress":
        return [
            {
                "name": "Set up job",
                "status": "in_progress",
                "conclusion": None,
                "number": 1,
                "started_at": started,
                "completed_at": None,
            }
        ]
    done = ts(job.completed_at)
    return [
        {
            "name": name,
            "status": "completed",
            "conclusion": conclusion,
            "number": number,
            "started_at": started,
            "completed_at": done,
        }
        for number, (name, conclusion) in enumerate(
            (("Set up job", "success"), ("Run workload", job.conclusion), ("Complete job", "success")),
            start=1,
        )
    ]


def workflow_job(job: Job, urls: Urls) -> dict[str, Any]:
    """The `workflow_job` object of webhooks, which is also what `GET .../actions/jobs/{id}` returns."""
    repo_api = f"{urls.api}/repos/{job.repo.full_name}"
    return {
        "id": job.id,
        "run_id": job.run.id,
        "workflow_name": job.run.name,
        "head_branch": "main",
        "run_url": f"{repo_api}/actions/runs/{job.run.id}",
        "run_attempt": job.run_attempt,
        "node_id": f"CR_kwDO{job.id:010X}",
        "head_sha": job.run.head_sha,
        "url": f"{repo_api}/actions/jobs/{job.id}",
        "html_url": f"{urls.html}/{job.repo.full_name}/actions/runs/{job.run.id}/job/{job.id}",
        "status": job.status,
        "conclusion": job.conclusion,
        "created_at": ts(job.created_at),
        # GitHub reports `started_at` = `created_at` until a runner picks the job up.
        "started_at": ts(job.started_at or job.created_at),
        "completed_at": ts(job.completed_at),
        "name": job.name,
        "steps": _steps(job),
        "check_run_url": f"{repo_api}/check-runs/{job.id}",
        "labels": list(job.labels),
        "runner_id": job.runner_id,
        "runner_name": job.runner_name,
        "runner_group_id": job.runner_group_id,
        "runner_group_name": job.runner_group_name,
    }


def workflow_run(run: WorkflowRun, actor: Account, urls: Urls) -> dict[str, Any]:
    repo = run.repo
    repo_api = f"{urls.api}/repos/{repo.full_name}"
    run_api = f"{repo_api}/actions/runs/{run.id}"
    workflow_id = 100_000 + sum(map(ord, run.name))
    path = ".github/workflows/" + run.name.lower().replace(" ", "-") + ".yml"
    repository_json = repository(repo, urls)
    commit_author = {"name": actor.login, "email": f"{actor.id}+{actor.login}@users.noreply.github.com"}
    return {
        "id": run.id,
        "name": run.name,
        "node_id": f"WFR_kwLO{run.id:010X}",
        "head_branch": "main",
        "head_sha": run.head_sha,
        "path": path,
        "display_title": run.name,
        "run_number": run.run_number,
        "event": "push",
        "status": run.status,
        "conclusion": run.conclusion,
        "workflow_id": workflow_id,
        "check_suite_id": run.id + 7,
        "check_suite_node_id": f"CS_kwDO{run.id + 7:010X}",
        "url": run_api,
        "html_url": f"{urls.html}/{repo.full_name}/actions/runs/{run.id}",
        "pull_requests": [],
        "created_at": ts(run.created_at),
        "updated_at": ts(run.updated_at),
        "actor": user(actor, urls),
        "triggering_actor": user(actor, urls),
        "run_attempt": run.run_attempt,
        "referenced_workflows": [],
        "run_started_at": ts(run.run_started_at or run.created_at),
        "jobs_url": f"{run_api}/jobs",
        "logs_url": f"{run_api}/logs",
        "check_suite_url": f"{repo_api}/check-suites/{run.id + 7}",
        "artifacts_url": f"{run_api}/artifacts",
        "cancel_url": f"{run_api}/cancel",
        "rerun_url": f"{run_api}/rerun",
        "previous_attempt_url": None,
        "workflow_url": f"{repo_api}/actions/workflows/{workflow_id}",
        "head_commit": {
            "id": run.head_sha,
            "tree_id": sha(f"tree-{run.head_sha}"),
            "message": f"Trigger {run.name}",
            "timestamp": ts(run.created_at),
            "author": commit_author,
            "committer": commit_author,
        },
        "repository": repository_json,
        "head_repository": repository_json,
    }


def ping(hook_id: int, app_identity: AppIdentity, url: str, created: datetime, urls: Urls) -> dict[str, Any]:
    """The `ping` GitHub sends when an app's webhook is set up."""
    return {
        "zen": "Design for failure.",
        "hook_id": hook_id,
        "hook": {
            "type": "App",
            "id": hook_id,
            "name": "web",
            "active": True,
            "events": APP_EVENTS,
            "config": {"content_type": "json", "insecure_ssl": "0", "url": url},
            "updated_at": ts(created),
            "created_at": ts(created),
            "app_id": app_identity.id,
            "deliveries_url": f"{urls.api}/app/hook/deliveries",
        },
        "sender": user(app_identity.owner, urls),
    }
