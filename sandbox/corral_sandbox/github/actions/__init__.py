"""GitHub's runner scale-set protocol: the Actions service that `actions/scaleset` and ARC's listener speak.

What a manager does, and where the sandbox serves it (`{gh}` is the sandbox's GitHub URL):

1. `POST {gh}[/api/v3]/{orgs/O | repos/O/R | enterprises/E}/actions/runners/registration-token` (REST, PAT
   or installation token) -> a registration token, remembered for an hour.
2. `POST {gh}[/api/v3]/actions/runner-registration`, `Authorization: RemoteAuth <registration token>`,
   `{"url": "{gh}/O[/R] | {gh}/enterprises/E", "runner_event": "register"}` -> 201 `{"url": "{gh}/_actions/
   <tenant>/", "token_schema": "OAuthAccessToken", "token": <admin JWT>}` (`routes_registration`).
3. Under that service URL, with `Authorization: Bearer <admin JWT>` and `?api-version=6.0-preview`: runner
   groups, scale sets, JIT configs, runners and message sessions (`routes_admin`).
4. The session's `messageQueueUrl`, `{gh}/_actions/broker/scalesets/message`, long-polled with the session's
   queue token; `DELETE {messageQueueUrl}/{messageId}` acknowledges (`routes_broker`); `POST .../acquirejobs`
   with the queue token acquires jobs where GitHub wants them acquired (Enterprise Server).

Jobs queued through the control API whose labels all belong to a scale set go to that set (`jobs`): its
listener hears `JobAssigned` (or `JobAvailable` first), `JobStarted` and `JobCompleted`; the workflow_job
webhooks are sent as for any job. A server booted with a scale set's JIT config becomes a runner of that set
through the world's usual bridge.

Timings and switches are `ActionsSettings` (`settings`): per sandbox (`Sandbox(actions=...)`) and at run time
through `PUT /_sandbox/scalesets/settings`. Faults: `scaleset_ack_drop_rate` and `scaleset_pickup_stall_rate`
in `PUT /_sandbox/faults` (world), and the acts in `sandbox/corral_sandbox/control_scalesets.py` (evict a session,
expire tokens, delete a scale set). What GitHub's answers look like, and which were seen rather than chosen,
is in `errors`.
"""
