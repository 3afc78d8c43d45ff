"""A read gives the version the index held when it was asked for, whatever happens to the key
before its bytes come: the S3 GET answers with the headers of the version it looked up (ETag,
size, metadata) and must send that version's bytes. Ranged GETs once read the key again
when their shared read started, so an overwrite in between sent another version's bytes under
the first one's ETag and Content-Range (found by S3 clients overwriting an object while
others read ranges of it: 55 mixed answers in 40 s)."""

from __future__ import annotations

from s3kv.backends.base import Backend
from s3kv.sizes import KiB
from s3kv.wire.body import Pieces, joined
from tests.store.helpers import block, open_store

NS = "kvns"
K = b"obj"


def _bytes(got: Pieces | None) -> bytes | None:
    return None if got is None else bytes(joined(got))


async def test_a_read_gives_the_version_indexed_when_it_was_asked(backend: Backend) -> None:
    store = await open_store(backend, seal_after=30)
    v1, v2, v3 = block(1, 64 * KiB), block(2, 48 * KiB), block(3, 80 * KiB)
    try:
        await store.create_namespace(NS)
        for sealed in (False, True):
            await store.put(NS, K, v1)
            if sealed:
                await store.flush()
            ranged = store.read(NS, K, span=1000)  # a ranged GET's read of v1
            whole = store.read(NS, K)
            await store.put(NS, K, v2)  # written again before the bytes come
            later = store.read(NS, K, span=1000)  # asked after: v2
            await store.put(NS, K, v3)
            gone = store.read(NS, K, span=10)
            await store.delete(NS, K)  # deleted before its bytes come: still v3's read
            assert _bytes(await ranged) == v1, sealed
            assert _bytes(await whole) == v1, sealed
            assert _bytes(await later) == v2, sealed
            assert _bytes(await gone) == v3, sealed
            assert await store.read(NS, K, span=10) is None
    finally:
        await store.close()
