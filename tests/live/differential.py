"""One scripted sequence of Nova calls, run with openstacksdk against any cloud, reduced to what corral can
observe: status sequences, body shapes, error shapes and messages, filter results; then servers made from
block device mappings and from an all-pairs set of pools through corral's own provider (tests/live/pools.py),
each reduced to its outcome, status, options, ports per network and volumes.

`run_script(side)` drives one cloud and returns its `Observations` (behaviour name -> a normalized, printable
value); `compare(a, b)` lines two of them up. Values are normalized so that what necessarily differs between
two clouds (ids, the run's names, timestamps) does not count, and everything else does. A behaviour one side
cannot arrange (no admin rights for a flavor or a quota) is recorded as `UNOBSERVABLE` and left out of the
comparison, with a note.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import openstack.connection
from openstack.compute.v2 import server as _server

from corral.cloud.openstack import OpenStackProvider
from corral.cloud.provider import CloudError, ServerSpec
from corral.config import VolumeConfig
from tests.live.pools import (
    NO_OPTIONS,
    NO_VOLUMES,
    POOL_FACTORS,
    PoolNames,
    all_pairs,
    describe,
    pool_metadata,
    volume_count,
)
from tests.nova_block_devices import ACCEPTED, REFUSALS, local_root, render

UNOBSERVABLE = "<not observable on this cloud>"
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ADMIN_ONLY_KEYS = frozenset({"host_status"})
"""Server fields only an admin sees (besides OS-EXT-SRV-ATTR:*): ministack's user is admin, the sandbox's
is a member, as corral's should be."""
MEMBER_VISIBLE_EXT_SRV_ATTR = frozenset({"OS-EXT-SRV-ATTR:hostname"})
"""The one OS-EXT-SRV-ATTR field a project member sees (from 2.90)."""
POLL_INTERVAL_S = 0.2
DEVICE_RE = re.compile(r"^/dev/(?:xv|v|s|h)d([a-z]+)$")
"""A disk's device name; only its letter (its place in the boot order) is the cloud's doing, the prefix is the
virt driver's (libvirt says vda, ministack's fake driver sda)."""
BATCH_SERVERS, BATCH_VOLUMES = 4, 8
"""Servers the creates section keeps at once, within a default project quota (10 instances, 10 volumes)
next to what the rest of the script holds."""
ERROR_BEHAVIOURS = (
    "create a server that cannot be placed: status",
    "status sequence of a failing server",
    "ERROR server body: top-level keys",
    "ERROR server fault keys",
    "ERROR server fault code",
    "ERROR server fault message",
    "ERROR server: values corral reads",
    "ERROR server states",
    "list filtered by status ERROR after the failure",
)
"""Everything observed about a server whose boot fails, recorded as not observable where it cannot be
arranged."""


@dataclass
class Side:
    """A cloud to run the script against, and how to arrange what needs more than a member's rights."""

    name: str
    conn: openstack.connection.Connection
    prefix: str
    """Server names of this run start with it; unique per run."""
    marker: dict[str, str]
    """Metadata put on every server, so a crashed run's servers can still be found and deleted."""
    image: str
    flavor: str
    network: str
    failing_flavor: Callable[[], AbstractContextManager[str | None]]
    """Yields a flavor id whose boot ends in ERROR with a fault while the block lasts, or None."""
    no_instance_room: Callable[[], AbstractContextManager[bool]]
    """Leaves the project no room for another instance for the block; yields False if it cannot."""
    no_port_room: Callable[[], AbstractContextManager[bool]]
    """Leaves the project no room for another port (Neutron's quota) for the block; False if it cannot."""
    provider: OpenStackProvider
    """corral's provider on this cloud, for the pools' creates."""
    installation: str
    pool: PoolNames
    volumes: bool = True
    """Whether the cloud has Cinder; without it, creates that need volumes are not observable."""
    timeout: float = 60.0
    created: list[str] = field(default_factory=list)


@dataclass
class Observations:
    values: dict[str, str] = field(default_factory=dict)

    def record(self, behaviour: str, value: Any) -> None:
        assert behaviour not in self.values, f"behaviour recorded twice: {behaviour}"
        self.values[behaviour] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@dataclass
class Comparison:
    identical: int
    total: int
    differences: list[str]
    notes: list[str]

    def lines(self) -> list[str]:
        head = f"differential: {self.identical} of {self.total} observed behaviours identical"
        return [head, *self.differences, *self.notes]


def compare(a_name: str, a: Observations, b_name: str, b: Observations) -> Comparison:
    """Every behaviour either side observed, in the script's order; none stops the comparison."""
    order = list(dict.fromkeys([*a.values, *b.values]))
    identical, differences, notes = 0, [], []
    for behaviour in order:
        left, right = a.values.get(behaviour, "<missing>"), b.values.get(behaviour, "<missing>")
        if UNOBSERVABLE in (left, right):
            notes.append(f"  not compared: {behaviour} ({a_name}: {left}; {b_name}: {right})")
            continue
        if left == right:
            identical += 1
        else:
            differences.append(f"  DIFFERENT {behaviour}: {a_name}={left} {b_name}={right}")
    return Comparison(identical, len(order) - len(notes), differences, notes)


# -- the script ------------------------------------------------------------------------------------


class Script:
    def __init__(self, side: Side) -> None:
        self.side = side
        self.compute = side.conn.compute
        self.seen = Observations()
        self.labels: dict[str, str] = {}
        self.network_names: dict[str, str] = {}
        """Network ids of the pools' networks, to their names."""
        self.version = str(_server.Server._get_microversion(self.compute))

    # -- raw calls at the negotiated microversion ----------------------------------------------------

    def call(
        self, method: str, path: str, body: Any = None, *, version: str | None = None, **params: str
    ) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"microversion": version or self.version, "raise_exc": False}
        if body is not None:
            kwargs["json"] = body
        if params:
            kwargs["params"] = params
        response = self.compute.request(path, method, **kwargs)
        try:
            payload = response.json() if response.content else None
        except ValueError:
            payload = response.text
        return int(response.status_code), payload

    def normalize(self, text: str) -> str:
        text = text.replace(self.side.prefix, "{prefix}").replace(f"'{self.side.flavor}'", "'{flavor}'")
        for name, placeholder in sorted(self.side.pool.placeholders.items(), key=lambda item: -len(item[0])):
            text = text.replace(f"'{name}'", f"'{placeholder}'").replace(f" {name} ", f" {placeholder} ")
        return UUID_RE.sub("{uuid}", text)

    def name_of(self, name: Any) -> Any:
        """A name the pool uses, as it compares between two clouds."""
        return self.side.pool.placeholders.get(name, name) if isinstance(name, str) else name

    def error(self, behaviour: str, status: int, body: Any) -> None:
        """An error as two behaviours: its shape (status, fault key, code, fields) and its message."""
        if isinstance(body, dict) and len(body) == 1:
            key, inner = next(iter(body.items()))
            if isinstance(inner, dict):
                self.seen.record(
                    f"{behaviour}: status and shape",
                    f"{status} {key}{{{','.join(sorted(inner))}}} code={inner.get('code')}",
                )
                self.seen.record(f"{behaviour}: message", self.normalize(str(inner.get("message"))))
                return
        self.seen.record(f"{behaviour}: status and shape", f"{status} {self.normalize(str(body))[:200]}")
        self.seen.record(f"{behaviour}: message", "<no fault body>")

    def show(self, server_id: str) -> tuple[int, Any]:
        return self.call("GET", f"/servers/{server_id}")

    def create_body(self, suffix: str, *, flavor: str | None = None, image: str | None = None, **extra: Any) -> Any:
        return {
            "server": {
                "name": f"{self.side.prefix}-{suffix}",
                "flavorRef": flavor or self.side.flavor,
                "imageRef": image or self.side.image,
                "networks": [{"uuid": self.side.network}],
                "metadata": {**self.side.marker, "diff-server": suffix},
                **extra,
            }
        }

    def create(
        self, suffix: str, *, flavor: str | None = None, image: str | None = None, **extra: Any
    ) -> tuple[int, Any]:
        body = self.create_body(suffix, flavor=flavor, image=image, **extra)
        status, payload = self.post_server(body)
        if status == 202:
            self.labels[str(payload["server"]["id"])] = suffix
        return status, payload

    def post_server(self, body: Any, version: str | None = None) -> tuple[int, Any]:
        """`POST /servers`; a server it makes is deleted at the end, even one the script expected refused."""
        status, payload = self.call("POST", "/servers", body, version=version)
        if status == 202:
            self.side.created.append(str(payload["server"]["id"]))
        return status, payload

    def mappings_body(self, suffix: str, mappings: Any, *, with_image: bool) -> Any:
        body = self.create_body(suffix, block_device_mapping_v2=render(mappings, self.side.image))
        if not with_image:
            del body["server"]["imageRef"]
        return body

    def statuses(self, server_ids: list[str]) -> dict[str, list[str]]:
        """Each server's status sequence (repeats collapsed) from right after create until it leaves BUILD."""
        sequences: dict[str, list[str]] = {server_id: [] for server_id in server_ids}
        pending = set(server_ids)
        deadline = time.monotonic() + self.side.timeout
        while pending:
            for server_id in sorted(pending):
                code, payload = self.show(server_id)
                status = str(payload["server"]["status"]) if code == 200 else f"HTTP {code}"
                if not sequences[server_id] or sequences[server_id][-1] != status:
                    sequences[server_id].append(status)
                if status != "BUILD":
                    pending.discard(server_id)
            if pending and time.monotonic() > deadline:
                for server_id in pending:
                    sequences[server_id].append("<timeout>")
                break
            if pending:
                time.sleep(POLL_INTERVAL_S)
        return sequences

    def ours(self, payload: Any) -> list[str]:
        """The labels of this run's servers in a listing, in listing order."""
        return [self.labels[s["id"]] for s in payload.get("servers", []) if s["id"] in self.labels]

    def body_keys(self, behaviour: str, server: dict[str, Any]) -> None:
        keys = sorted(
            key
            for key in server
            if key not in ADMIN_ONLY_KEYS
            and (not key.startswith("OS-EXT-SRV-ATTR:") or key in MEMBER_VISIBLE_EXT_SRV_ATTR)
        )
        self.seen.record(f"{behaviour}: top-level keys", keys)

    def wait_unlisted(self, server_id: str) -> bool:
        deadline = time.monotonic() + self.side.timeout
        while time.monotonic() < deadline:
            code, payload = self.call("GET", "/servers")
            if code == 200 and server_id not in {s["id"] for s in payload["servers"]}:
                return True
            time.sleep(POLL_INTERVAL_S)
        return False

    # -- the sequence ----------------------------------------------------------------------------------

    def run(self) -> Observations:
        seen = self.seen
        seen.record("negotiated compute microversion", self.version)
        missing = str(uuid.uuid4())

        # show a server that never existed
        self.error("show a missing server", *self.show(missing))

        # refusals before any server exists
        self.error("create with an unknown flavor ref", *self.create("bad-flavor", flavor="corral-diff-no-such-flavor"))
        self.error("create with an unknown image ref", *self.create("bad-image", image=missing))
        for behaviour, name in (("an empty name", ""), ("a name with a leading space", " x")):
            self.error(f"create with {behaviour}", *self.call("POST", "/servers", self.create_body("x", name=name)))
        self.error("create with an empty tag", *self.call("POST", "/servers", self.create_body("x", tags=[""])))
        refusals: list[tuple[str, dict[str, Any]]] = [
            ("an unknown network", {"networks": [{"uuid": missing}]}),
            ("a malformed network uuid", {"networks": [{"uuid": "not-a-uuid"}]}),
            ("an unknown security group", {"security_groups": [{"name": "corral-diff-no-such-group"}]}),
            ("an unknown key pair", {"key_name": "corral-diff-no-such-key"}),
            ("an unknown availability zone", {"availability_zone": "corral-diff-no-such-zone"}),
            ("user data that is not base64", {"user_data": "not base64!!"}),
            ("a metadata value too long", {"metadata": {"k": "v" * 256}}),
            ("too many metadata items", {"metadata": {f"k{i}": "v" for i in range(129)}}),
            ("too many tags", {"tags": [f"t{i}" for i in range(51)]}),
            ("an unexpected field", {"no_such_field": 1}),
        ]
        for behaviour, extra in refusals:
            self.error(f"create with {behaviour}", *self.call("POST", "/servers", self.create_body("x", **extra)))
        # block device mappings Nova refuses, and where (tests/nova_block_devices.py)
        for behaviour, mappings, with_image, version, _ in REFUSALS:
            body = self.mappings_body("bdm", mappings, with_image=with_image)
            self.error(f"create with {behaviour}", *self.post_server(body, version))
        no_source = [local_root(), {"destination_type": "volume", "uuid": missing, "volume_size": 1}]
        body = self.mappings_body("bdm", no_source, with_image=True)
        self.error("create with a mapping with a uuid but no source type", *self.post_server(body))
        code, body = self.call("GET", "/servers", **{"changes-since": "yesterday"})
        self.error("list with an invalid changes-since", code, body)
        response = self.compute.request("/servers", "GET", microversion="2.999", raise_exc=False)
        self.error("an unsupported microversion", int(response.status_code), response.json())

        # two servers that boot
        code_a, created_a = self.create("a", tags=["diff-a", "diff-common"])
        code_b, _ = self.create("b", tags=["diff-common"])
        seen.record("create: status", [code_a, code_b])
        seen.record("create response: server keys", sorted(created_a.get("server", {})) if code_a == 202 else created_a)
        ids = {label: server_id for server_id, label in self.labels.items()}
        if code_a != 202 or code_b != 202:
            return seen  # nothing below can be observed; the comparison names the difference above
        sequences = self.statuses([ids["a"], ids["b"]])
        seen.record("status sequence of a booting server", sequences[ids["a"]])
        seen.record("status sequence of a second booting server", sequences[ids["b"]])

        code, shown = self.show(ids["a"])
        server = shown["server"]
        seen.record("show an ACTIVE server: status", [code, server.get("status")])
        self.body_keys("ACTIVE server body", server)
        seen.record("ACTIVE server body: flavor keys", sorted(server.get("flavor", {})))
        image = server.get("image")
        seen.record("ACTIVE server body: image keys", sorted(image) if isinstance(image, dict) else repr(image))
        addresses = server.get("addresses", {})
        seen.record("ACTIVE server body: address networks", sorted(addresses))
        entries = [entry for network in addresses.values() for entry in network]
        seen.record("ACTIVE server body: address entry keys", sorted({key for e in entries for key in e}))
        seen.record(
            "ACTIVE server body: values corral reads",
            {
                "name": self.normalize(str(server.get("name"))),
                "tags": sorted(server.get("tags") or []),
                "metadata": server.get("metadata"),
                "vm_state": server.get("OS-EXT-STS:vm_state"),
                "task_state": server.get("OS-EXT-STS:task_state"),
                "power_state": server.get("OS-EXT-STS:power_state"),
                "security_groups": server.get("security_groups"),
                "locked": server.get("locked"),
                "fault": "fault" in server,
                "progress": server.get("progress"),
                "has hostId": bool(server.get("hostId")),
                "availability_zone": server.get("OS-EXT-AZ:availability_zone"),
                "launched": server.get("OS-SRV-USG:launched_at") is not None,
                "terminated_at": server.get("OS-SRV-USG:terminated_at"),
                "config_drive": server.get("config_drive"),
                "key_name": server.get("key_name"),
                "description": server.get("description"),
                "flavor name": server.get("flavor", {}).get("original_name"),
                "volumes_attached": server.get("os-extended-volumes:volumes_attached"),
                "server_groups": server.get("server_groups"),
                "hostname": self.normalize(str(server.get("OS-EXT-SRV-ATTR:hostname"))),
            },
        )
        code, listing = self.call("GET", "/servers/detail", name=f"^{re.escape(self.side.prefix)}-a$")
        listed = listing.get("servers", [{}])[0] if code == 200 and listing.get("servers") else {}
        self.body_keys("a server in the detailed listing", listed)
        code, listing = self.call("GET", "/servers", name=f"^{re.escape(self.side.prefix)}-a$")
        entry = listing.get("servers", [{}])[0] if code == 200 and listing.get("servers") else {}
        seen.record("a server in the plain listing: keys", sorted(entry))
        code, flavor = self.call("GET", f"/flavors/{self.side.flavor}")
        seen.record("show a flavor: keys", [code, sorted(flavor.get("flavor", {}))])
        code, limits = self.call("GET", "/limits")
        seen.record("limits: absolute keys", [code, sorted(limits.get("limits", {}).get("absolute", {}))])

        # refusals that need a server
        self.error("rename to an empty name", *self.call("PUT", f"/servers/{ids['a']}", {"server": {"name": ""}}))
        self.error("start an ACTIVE server", *self.call("POST", f"/servers/{ids['a']}/action", {"os-start": None}))
        self.error(
            "metadata: a key too long",
            *self.call("POST", f"/servers/{ids['a']}/metadata", {"metadata": {"k" * 256: "v"}}),
        )
        self.error(
            "rename to a name with a trailing space",
            *self.call("PUT", f"/servers/{ids['a']}", {"server": {"name": "x "}}),
        )
        self.error("tags: an invalid tag", *self.call("PUT", f"/servers/{ids['a']}/tags/bad,tag"))
        self.error("tags: a tag too long", *self.call("PUT", f"/servers/{ids['a']}/tags/{'t' * 61}"))
        self.error("tags: replace with an empty tag", *self.call("PUT", f"/servers/{ids['a']}/tags", {"tags": [""]}))
        self.error("list with an unknown marker", *self.call("GET", "/servers", marker=str(uuid.uuid4())))
        self.error("list with a negative limit", *self.call("GET", "/servers", limit="-1"))
        self.error(
            "create without networks",
            *self.call(
                "POST",
                "/servers",
                {"server": {"name": "x", "flavorRef": self.side.flavor, "imageRef": self.side.image}},
            ),
        )
        code, page = self.call("GET", "/servers", limit="1", name=f"^{re.escape(self.side.prefix)}-(a|b)$")
        seen.record("list one page of one: count and links", [code, len(page.get("servers", [])), sorted(page)])

        # metadata round trip: openstacksdk's calls, then the raw API
        self.compute.set_server_metadata(ids["a"], **{"diff-key": "one"})
        seen.record("metadata after openstacksdk set", self.compute.get_server_metadata(ids["a"]).metadata)
        seen.record(
            "metadata: update (POST)", self.call("POST", f"/servers/{ids['a']}/metadata", {"metadata": {"k2": "v2"}})
        )
        seen.record(
            "metadata: set one item (PUT)", self.call("PUT", f"/servers/{ids['a']}/metadata/k3", {"meta": {"k3": "v3"}})
        )
        seen.record("metadata: get one item", self.call("GET", f"/servers/{ids['a']}/metadata/k3"))
        seen.record("metadata: delete one item", self.call("DELETE", f"/servers/{ids['a']}/metadata/k3"))
        self.error("metadata: get a missing item", *self.call("GET", f"/servers/{ids['a']}/metadata/k3"))
        seen.record("metadata: get all", self.call("GET", f"/servers/{ids['a']}/metadata"))

        # tags
        seen.record("tags: add a new tag", self.call("PUT", f"/servers/{ids['b']}/tags/diff-b")[0])
        seen.record("tags: add it again", self.call("PUT", f"/servers/{ids['b']}/tags/diff-b")[0])
        seen.record("tags: check a present tag", self.call("GET", f"/servers/{ids['b']}/tags/diff-b")[0])
        self.error("tags: check a missing tag", *self.call("GET", f"/servers/{ids['b']}/tags/diff-none"))
        code, tags = self.call("GET", f"/servers/{ids['b']}/tags")
        seen.record("tags: list", [code, sorted(tags.get("tags", [])) if isinstance(tags, dict) else tags])
        self.error("tags: delete a missing tag", *self.call("DELETE", f"/servers/{ids['b']}/tags/diff-none"))

        # list filters, as label sets of this run's own servers
        prefix = re.escape(self.side.prefix)
        filters: list[tuple[str, dict[str, str]]] = [
            ("name regex", {"name": f"^{prefix}-(a|b)$"}),
            ("name regex (one)", {"name": f"{prefix}-b"}),
            ("status ACTIVE", {"status": "ACTIVE"}),
            ("status ERROR", {"status": "ERROR"}),
            ("tags", {"tags": "diff-a"}),
            ("tags (all of two)", {"tags": "diff-common,diff-b"}),
            ("tags-any", {"tags-any": "diff-a,diff-b"}),
            ("not-tags", {"not-tags": "diff-a"}),
        ]
        for label, params in filters:
            for path in ("/servers", "/servers/detail"):
                code, listing = self.call("GET", path, **params)
                seen.record(f"list {path} filtered by {label}", [code, sorted(self.ours(listing))])
        self.error("list with an invalid status filter", *self.call("GET", "/servers", status="NOT-A-STATUS"))
        self.error("list with an unknown filter", *self.call("GET", "/servers", bogus="1"))

        # a server whose boot fails: ERROR with a fault
        with self.side.failing_flavor() as failing:
            if failing is None:
                for behaviour in ERROR_BEHAVIOURS:
                    seen.record(behaviour, UNOBSERVABLE)
            else:
                code, _ = self.create("c", flavor=failing)
                seen.record("create a server that cannot be placed: status", code)
                if code == 202:
                    ids = {label: server_id for server_id, label in self.labels.items()}
                    seen.record("status sequence of a failing server", self.statuses([ids["c"]])[ids["c"]])
                    code, shown = self.show(ids["c"])
                    server = shown["server"]
                    self.body_keys("ERROR server body", server)
                    fault = server.get("fault", {})
                    seen.record("ERROR server fault keys", sorted(set(fault) - {"details"}))
                    seen.record("ERROR server fault code", fault.get("code"))
                    seen.record("ERROR server fault message", self.normalize(str(fault.get("message"))).strip())
                    seen.record(
                        "ERROR server: values corral reads",
                        {
                            "addresses": server.get("addresses"),
                            "has hostId": bool(server.get("hostId")),
                            "availability_zone": server.get("OS-EXT-AZ:availability_zone"),
                            "launched_at": server.get("OS-SRV-USG:launched_at"),
                            "security_groups": server.get("security_groups"),
                            "metadata": server.get("metadata"),
                        },
                    )
                    seen.record(
                        "ERROR server states",
                        [
                            server.get("OS-EXT-STS:vm_state"),
                            server.get("OS-EXT-STS:task_state"),
                            server.get("OS-EXT-STS:power_state"),
                        ],
                    )
                    code, listing = self.call("GET", "/servers", status="ERROR")
                    seen.record("list filtered by status ERROR after the failure", [code, sorted(self.ours(listing))])

        # quota exceeded
        with self.side.no_instance_room() as exhausted:
            if exhausted:
                self.error("create beyond the instance quota", *self.create("over-quota"))
            else:
                seen.record("create beyond the instance quota: status and shape", UNOBSERVABLE)
                seen.record("create beyond the instance quota: message", UNOBSERVABLE)
        project = self.side.conn.current_project_id
        assert project is not None, "both sides' accounts are scoped to a project"
        ports = self.side.conn.network.get_quota(project, details=True).ports
        seen.record("port quota details: fields", {key: type(value).__name__ for key, value in sorted(ports.items())})
        with self.side.no_port_room() as exhausted:
            if exhausted:
                self.error("create beyond the port quota", *self.create("over-port-quota"))
            else:
                seen.record("create beyond the port quota: status and shape", UNOBSERVABLE)
                seen.record("create beyond the port quota: message", UNOBSERVABLE)

        # delete, then the server is gone
        seen.record("delete a server: status", self.call("DELETE", f"/servers/{ids['a']}")[0])
        seen.record("deleted server leaves the listing", self.wait_unlisted(ids["a"]))
        self.error("show a deleted server", *self.show(ids["a"]))
        self.error("delete a deleted server", *self.call("DELETE", f"/servers/{ids['a']}"))
        self.error("metadata of a deleted server", *self.call("GET", f"/servers/{ids['a']}/metadata"))
        return seen

    # -- creates that boot: raw mappings, and pools through corral's provider ---------------------------

    def run_creates(self) -> None:
        """Servers made from accepted mappings and from an all-pairs set of pools, each observed as corral
        and its guests would see it, a few at a time to stay within a default project quota."""
        network = self.side.conn.network
        self.network_names = {
            found.id: str(found.name)
            for found in (
                network.find_network(name, ignore_missing=False)
                for name in (self.side.pool.network, self.side.pool.second_network)
            )
        }
        creates: list[Create] = []
        for behaviour, mappings, with_image, _ in ACCEPTED:
            body = self.mappings_body("bdm-ok", mappings, with_image=with_image)
            volumes = sum(isinstance(m, dict) and m.get("destination_type") == "volume" for m in mappings)
            creates.append(Create(f"create with {behaviour}", volumes, partial(self.post_raw, body)))
        factors = POOL_FACTORS if self.side.volumes else {**POOL_FACTORS, **NO_VOLUMES}
        for index, row in enumerate(all_pairs(factors), start=1):
            spec = self.side.pool.spec(f"{self.side.prefix}-pool{index}", row, self.pool_metadata(f"pool{index}"))
            label = f"pool {index} ({describe(row)})"
            creates.append(Create(label, volume_count(row), partial(self.post_pool, spec)))
        refused = self.side.pool.spec(f"{self.side.prefix}-refused", NO_OPTIONS, self.pool_metadata("refused"))
        refused = replace(refused, volumes=(VolumeConfig(name="disk", size_gb=1, type="corral-diff-no-such-type"),))
        creates.append(Create("pool with an unknown volume type", 1, partial(self.post_pool, refused)))
        for create in creates:
            if create.volumes and not self.side.volumes:
                self.seen.record(f"{create.label}: outcome", UNOBSERVABLE)
        for batch in batches([create for create in creates if self.side.volumes or not create.volumes]):
            self.observe_batch(batch)

    def pool_metadata(self, runner: str) -> dict[str, str]:
        return pool_metadata(self.side.installation, runner, self.side.marker)

    def post_raw(self, body: Any) -> str:
        status, payload = self.post_server(body)
        if status != 202:
            raise Refused(f"HTTP {status}: {self.normalize(json.dumps(payload, sort_keys=True))}")
        return str(payload["server"]["id"])

    def post_pool(self, spec: ServerSpec) -> str:
        server = self.side.provider.create_server(spec)
        self.side.created.append(server.id)
        return server.id

    def observe_batch(self, batch: list[Create]) -> None:
        started: dict[str, str] = {}
        for create in batch:
            try:
                started[create.label] = create.start()
            except (CloudError, Refused) as exc:
                self.seen.record(f"{create.label}: outcome", f"{type(exc).__name__}: {self.normalize(str(exc))}")
                continue
            self.seen.record(f"{create.label}: outcome", "created")
        sequences = self.statuses(list(started.values()))
        volumes: set[str] = set()
        for label, server_id in started.items():
            # The final status only: how much of BUILD a poll sees depends on how long the other creates took.
            self.seen.record(f"{label}: status", sequences[server_id][-1])
            volumes |= self.observe_server(label, server_id)
        for server_id in started.values():
            self.call("DELETE", f"/servers/{server_id}")
        gone = all([self.wait_unlisted(server_id) for server_id in started.values()])
        if started:
            labels = ", ".join(started)
            self.seen.record(f"deleted with their volumes: {labels}", gone and self.wait_volumes_gone(volumes))

    def observe_server(self, label: str, server_id: str) -> set[str]:
        """What a pool's server turned out to be; the ids of its volumes."""
        code, shown = self.show(server_id)
        server = shown.get("server", {}) if code == 200 else {}
        image = server.get("image")
        pools_image = isinstance(image, dict) and image.get("id") == self.side.image
        fault = server.get("fault") or {}
        self.seen.record(
            f"{label}: server",
            {
                "image": "the pool's image" if pools_image else image,
                "fault": self.normalize(str(fault.get("message", ""))).strip(),
                "key_name": self.name_of(server.get("key_name")),
                "availability_zone": server.get("OS-EXT-AZ:availability_zone"),
                "config_drive": server.get("config_drive"),
                "security_groups": sorted(self.name_of(group["name"]) for group in server.get("security_groups", [])),
                "address networks": sorted(self.name_of(name) for name in server.get("addresses", {})),
                "volumes_attached": len(server.get("os-extended-volumes:volumes_attached", [])),
            },
        )
        ports = Counter(
            str(self.name_of(self.network_names.get(port.network_id, port.network_id)))
            for port in self.side.conn.network.ports(device_id=server_id)
        )
        self.seen.record(f"{label}: ports per network", dict(sorted(ports.items())))
        code, listing = self.call("GET", f"/servers/{server_id}/os-volume_attachments")
        attachments = listing.get("volumeAttachments", []) if code == 200 else []
        disks = []
        for attachment in attachments:
            volume = self.side.conn.block_storage.get_volume(attachment["volumeId"])
            device = DEVICE_RE.match(str(attachment.get("device")))
            disks.append(
                {
                    "device": device.group(1) if device else attachment.get("device"),
                    "tag": attachment.get("tag"),
                    "delete_on_termination": attachment.get("delete_on_termination"),
                    "size": volume.size,
                    "type": self.name_of(volume.volume_type),
                    "bootable": volume.is_bootable,
                    "status": volume.status,
                    "name": self.normalize(volume.name or ""),
                }
            )
        self.seen.record(f"{label}: volumes", sorted(disks, key=lambda disk: str(disk["device"])))
        return {str(attachment["volumeId"]) for attachment in attachments}

    def wait_volumes_gone(self, volume_ids: set[str]) -> bool:
        """Volumes leave Cinder a little after their server leaves Nova's listing."""
        deadline = time.monotonic() + self.side.timeout
        while time.monotonic() < deadline:
            if not volume_ids & {volume.id for volume in self.side.conn.block_storage.volumes()}:
                return True
            time.sleep(POLL_INTERVAL_S)
        return False

    def cleanup(self) -> list[str]:
        """Delete what the script made; the ids still listed after waiting."""
        for server_id in self.side.created:
            self.call("DELETE", f"/servers/{server_id}")
        return [server_id for server_id in self.side.created if not self.wait_unlisted(server_id)]


class Refused(Exception):
    """A raw create the cloud did not accept, with its answer."""


@dataclass(frozen=True)
class Create:
    """One create of the creates section: what it is called, how many volumes it asks for, how to start it
    (returns the server id, raises `CloudError` or `Refused`)."""

    label: str
    volumes: int
    start: Callable[[], str]


def batches(creates: list[Create]) -> Iterator[list[Create]]:
    """Consecutive groups of at most BATCH_SERVERS servers and BATCH_VOLUMES volumes."""
    batch: list[Create] = []
    for create in creates:
        if batch and (len(batch) == BATCH_SERVERS or sum(c.volumes for c in batch) + create.volumes > BATCH_VOLUMES):
            yield batch
            batch = []
        batch.append(create)
    if batch:
        yield batch


@contextmanager
def run_script(side: Side) -> Iterator[Observations]:
    """Run the script on `side`; yields its observations, then deletes every server it made."""
    script = Script(side)
    try:
        try:
            script.run()
            script.run_creates()
            script.seen.record("the script ran to its end", "yes")
        except Exception as exc:  # recorded, so the comparison still shows everything observed until then
            stopped = f"stopped by {type(exc).__name__}: {script.normalize(str(exc))[:300]}"
            script.seen.record("the script ran to its end", stopped)
        yield script.seen
    finally:
        left = script.cleanup()
        assert not left, f"{side.name}: servers the differential could not delete: {left}"
