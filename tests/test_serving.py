"""The daemon's late-bound handle on its IPC server (:mod:`memd.ipc.serving`): empty until
the server listens, then that server, bound once."""

from __future__ import annotations

from functools import partial

import anyio
import pytest

from memd.ipc.server import Server, run_server
from memd.ipc.serving import Serving, run_serving
from tests.ipc_support import FRAME_LIMIT, methods, short_dir

pytestmark = pytest.mark.anyio


async def test_the_handle_holds_the_server_once_it_listens() -> None:
    assert Serving().server is None
    serving = Serving()
    with short_dir() as folder:
        path = folder / "memd.sock"
        serve = partial(
            run_server, path, methods(), max_frame_bytes=FRAME_LIMIT, request_timeout=10.0
        )
        async with anyio.create_task_group() as tg:
            server: Server = await tg.start(run_serving, serving, serve)
            assert serving.server is server and path.is_socket()  # listening when bound
            with pytest.raises(RuntimeError, match="served already"):
                serving.bind(server)
            tg.cancel_scope.cancel()
        assert serving.server is server and not path.exists()
