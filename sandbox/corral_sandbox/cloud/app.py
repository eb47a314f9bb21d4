"""The OpenStack side of the sandbox as one FastAPI app on one port, laid out as DevStack lays it out:
Keystone at `/identity`, Nova at `/compute`, Glance at `/image`, Neutron at `/network`, Cinder at `/volume`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Request, Response

from corral_sandbox.cloud.cinder import build_cinder_router
from corral_sandbox.cloud.errors import ApiError, render
from corral_sandbox.cloud.glance import build_glance_router
from corral_sandbox.cloud.keystone import build_keystone_router
from corral_sandbox.cloud.neutron import build_neutron_router
from corral_sandbox.cloud.nova_resources import build_nova_resources_router, build_nova_versions_router
from corral_sandbox.cloud.nova_servers import build_server_router
from corral_sandbox.cloud.service import version_headers

if TYPE_CHECKING:
    from corral_sandbox.cloud.state import CloudState
    from corral_sandbox.world import World

SERVICE_OF_PREFIX = (
    ("/identity", "identity"),
    ("/compute", "compute"),
    ("/image", "image"),
    ("/network", "network"),
    ("/volume", "volume"),
)


def service_of(path: str) -> str:
    for prefix, service in SERVICE_OF_PREFIX:
        if path.startswith(prefix):
            return service
    return "compute"


def build_openstack_app(world: World, cloud: CloudState) -> FastAPI:
    """One of the world's clouds, served on its own port with its own Keystone, as a second region or a
    second provider would be."""
    app = FastAPI(title="corral sandbox: OpenStack", openapi_url=None, docs_url=None, redoc_url=None)
    app.router.redirect_slashes = False
    for router in (
        build_keystone_router(world, cloud),
        build_nova_versions_router(world, cloud),
        build_server_router(world, cloud),
        build_nova_resources_router(world, cloud),
        build_glance_router(world, cloud),
        build_neutron_router(world, cloud),
        build_cinder_router(world, cloud),
    ):
        app.include_router(router)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> Response:
        response = render(service_of(request.url.path), error)
        if error.status != 400 or not error.message.startswith("API Version String"):
            response.headers.update(version_headers(request))
        return response

    return app
