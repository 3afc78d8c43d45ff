"""The store against a model (hypothesis): random puts, overwrites, deletes, flushes, eviction
rounds, restarts on the same directory and the namespace deleted and created anew, checked
after every step, and a second store on the same directory (a replica) that syncs now and then.
A block read back is always its latest value and a deleted one is never read again, across
restarts and on the replica too. Without a capacity budget every live block reads back; with
one (dropping or compacting mostly-dead segments, in the background too) a block may be
evicted, and once missing it stays missing. Carriers of tombstones are merged as soon as two
wait. CI runs a few derandomized sequences; ``--long`` runs hundreds."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from s3kv.backends import FileBackend
from s3kv.sizes import KiB, MiB
from s3kv.store import eviction
from s3kv.store.store import BlockStore
from tests.store.helpers import block, open_store

NS = "model"
KEYS = [f"k{i}".encode() for i in range(4)]
OVER: dict[str, Any] = {"segment_size": 2 * MiB, "part_size": 2 * MiB,
                        "max_block_size": 512 * KiB, "seal_after": 30, "compact_threshold": 0.5}


class StoreModel(RuleBasedStateMachine):
    """No capacity budget: nothing live is ever given up."""

    over: dict[str, Any] = {}

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.root = Path(tempfile.mkdtemp(prefix="s3kv-model-"))
        self.latest: dict[bytes, bytes | None] = {}  # None: deleted, or seen evicted
        self.lossy = bool(self.over.get("capacity"))  # rounds run in the background too
        self.n = 0
        self.store = self.run(self._open())
        self.run(self.store.create_namespace(NS))
        self.replica = self.run(self._open(node_id="replica"))
        self.replica_gone: set[bytes] = set()  # seen evicted through the replica

    def run(self, aw: Any) -> Any:
        return self.loop.run_until_complete(aw)

    async def _open(self, **more: Any) -> BlockStore:
        backend = await FileBackend(self.root).open()
        return await open_store(backend, **OVER, **self.over, **more)

    @staticmethod
    async def _close(store: BlockStore) -> None:
        await store.close()
        await store.backend.close()

    @rule(k=st.sampled_from(KEYS), size=st.sampled_from([4 * KiB, 96 * KiB, 400 * KiB]))
    def put(self, k: bytes, size: int) -> None:
        self.n += 1
        data = block(self.n, size)
        self.run(self.store.put(NS, k, data))
        self.latest[k] = data
        self.replica_gone.discard(k)

    @rule(k=st.sampled_from(KEYS))
    def delete(self, k: bytes) -> None:
        self.run(self.store.delete(NS, k))
        self.latest[k] = None

    @rule()
    def bucket_anew(self) -> None:
        """Every key deleted, the namespace deleted and created again under its name: it is
        empty, on the replica after its sync too, and no restart brings an old block back."""
        for k in KEYS:
            self.run(self.store.delete(NS, k))
        self.run(self.store.delete_namespace(NS))
        self.run(self.store.create_namespace(NS))
        self.latest = dict.fromkeys(KEYS)

    @rule()
    def flush(self) -> None:
        self.run(self.store.flush())

    @rule()
    def evict(self) -> None:
        self.run(self.store.evict_now())

    @rule()
    def restart(self) -> None:
        self.run(self._close(self.store))
        self.store = self.run(self._open())

    @rule()
    def replica_syncs(self) -> None:
        """What the first store sealed, the replica serves after its sync: the same values."""
        self.run(self.store.flush())
        self.run(self.replica.recovery_sync())
        for k, want in self.latest.items():
            got = self.run(self.replica.get(NS, k))
            if want is None or k in self.replica_gone:
                assert got is None, f"{k!r} was deleted or evicted, yet the replica reads it"
            elif got is None and self.lossy:
                self.replica_gone.add(k)
            else:
                assert got is not None and bytes(got) == want, f"the replica reads {k!r} wrong"

    @invariant()
    def reads_match(self) -> None:
        for k, want in self.latest.items():
            got = self.run(self.store.get(NS, k))
            if want is None:
                assert got is None, f"{k!r} was deleted or evicted, yet reads back"
            elif got is None and self.lossy:
                self.latest[k] = None  # evicted: it must stay gone
            else:
                assert got is not None and bytes(got) == want, f"{k!r} reads back wrong"
        listed, _ = self.run(self.store.list_blocks(NS))
        assert {m.key for m in listed} == {  # type: ignore[union-attr]
            k for k, v in self.latest.items() if v is not None}

    def teardown(self) -> None:
        try:
            self.run(self._close(self.store))
            self.run(self._close(self.replica))
        finally:
            self.loop.close()
            shutil.rmtree(self.root, ignore_errors=True)


class DroppingModel(StoreModel):
    """A capacity budget of a few segments; mostly-dead segments are dropped."""

    over = {"capacity": 5 * MiB, "compact_mode": "drop"}


class CompactingModel(StoreModel):
    """The same, compacting mostly-dead segments (their blocks read since written stay)."""

    over = {"capacity": 5 * MiB, "compact_mode": "compact"}


@pytest.mark.parametrize("machine", [StoreModel, DroppingModel, CompactingModel],
                         ids=["lossless", "drop", "compact"])
def test_store_against_a_model(machine: type[StoreModel], long_run: bool,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eviction, "MERGE_CARRIERS", 1)  # carriers merged as soon as two wait
    run_state_machine_as_test(machine, settings=settings(
        max_examples=300 if long_run else 60, stateful_step_count=40, deadline=None,
        derandomize=not long_run, database=None, suppress_health_check=list(HealthCheck)))
