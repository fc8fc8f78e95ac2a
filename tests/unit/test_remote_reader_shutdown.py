"""The worker-stage patch that lets an idle remote reader of vLLM's message
queue (a worker on a node without the engine core) leave when its queue is
shut down.

Real vLLM MessageQueues: a writer and one remote reader (ZeroMQ over TCP on
127.0.0.1), in one process; the node-level effect is checked by
tests/engine/test_serve_two_nodes.py (the headless node stops without
killing its worker)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

from vllm_bridge.patches.catalogue import REGISTRY
from vllm_bridge.patches.worker.remote_reader_shutdown import PATCH


@pytest.fixture
def queues() -> Iterator[tuple[MessageQueue, MessageQueue]]:
    REGISTRY.apply("worker")
    assert REGISTRY.records()[PATCH.name].status == "applied"
    writer = MessageQueue(n_reader=1, n_local_reader=0, connect_ip="127.0.0.1")
    # rank 1 is not among the writer's local readers: a remote reader
    reader = MessageQueue.create_from_handle(writer.export_handle(), 1)
    assert reader._is_remote_reader
    ready = threading.Thread(target=writer.wait_until_ready)
    ready.start()
    reader.wait_until_ready()
    ready.join(10)
    yield writer, reader


def idle_dequeue(reader: MessageQueue) -> tuple[threading.Thread, list]:
    """A thread that dequeues with no timeout, as a worker's busy loop
    does, and keeps what the call returned or raised."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(reader.dequeue(indefinite=True))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_message_reaches_the_remote_reader(queues):
    writer, reader = queues
    thread, outcome = idle_dequeue(reader)
    writer.enqueue({"method": "execute_model"})
    thread.join(10)
    assert outcome == [{"method": "execute_model"}]


def test_an_idle_remote_reader_leaves_when_its_queue_shuts_down(queues):
    _, reader = queues
    thread, outcome = idle_dequeue(reader)
    reader.shutdown()
    thread.join(5)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError)
    assert str(outcome[0]) == "cancelled"


def test_a_timeout_still_ends_the_wait(queues):
    _, reader = queues
    with pytest.raises(TimeoutError):
        reader.dequeue(timeout=0.3)


def test_without_the_patch_the_reader_stays_in_its_wait(queues):
    writer, reader = queues
    with REGISTRY.reverted(PATCH.name):
        thread, outcome = idle_dequeue(reader)
        reader.shutdown()
        thread.join(2)
        still_waiting = thread.is_alive()
        # release it: the next message ends vLLM's wait
        writer.enqueue("release")
        thread.join(10)
    assert still_waiting
    assert outcome == ["release"]
