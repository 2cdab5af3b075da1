"""RouterActor with Ray: a real BoardActor and ChatActor, light host actors that
hold a real HostInbox, and a SIGKILL of a router in the middle of a stream. Every
test ends with no failed delivery: the routers' retry and the hosts' dedup would
hide a host that raises on every call (the RouterPump itself: test_router_pump.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict

import pytest
import ray

from agensh_ray.actors.board import get_or_create_board
from agensh_ray.actors.chat import ChatActor
from agensh_ray.actors.router import RouterActor
from agensh_ray.models import BoardEntry, BoardEntryIn
from agensh_ray.routing import HostInbox
from tests.support import wait_for

pytestmark = pytest.mark.ray


@ray.remote(num_cpus=0)
class InboxHost:
    """A WorkerActor stand-in: the real HostInbox, no agents. `take` plays the agents: it hands
    over what is queued, as a worker's tool call or turn start would."""

    def __init__(self, workers: list[str], slow_s: float = 0.0):
        self.inbox = HostInbox(workers)
        self.slow_s = slow_s
        self.calls = 0

    def deliver(self, events, cursors) -> int:
        self.calls += 1
        time.sleep(self.slow_s)  # a lagging host: its cursor trails, so a restarted router replays to the others
        return self.inbox.accept(events, cursors)

    def cursors(self) -> dict[str, int]:
        return dict(self.inbox.cursors)

    def take(self, urgent_only: bool) -> list[tuple[str, str, str]]:
        return [(q.worker_id, q.event_id, q.priority) for w in self.inbox.workers
                for q in self.inbox.take(w, urgent_only)]

    def stats(self) -> dict:
        return {"calls": self.calls, "duplicates": self.inbox.duplicates, "cursors": dict(self.inbox.cursors)}


@ray.remote(num_cpus=0)
class NoForge:
    """Stand-in for ForgeActor (which starts a git HTTP server): the router only calls events_since."""

    def events_since(self, cursor: int, limit: int = 1000) -> list:
        return []


@pytest.fixture
def services(ray_session, tmp_path):
    tag = uuid.uuid4().hex[:8]
    board = get_or_create_board(f"board-{tag}", str(tmp_path / "board.jsonl"))
    chat = ChatActor.options(name=f"chat-{tag}").remote(str(tmp_path / "chat"), str(tmp_path), "test")
    forge = NoForge.options(name=f"forge-{tag}").remote()
    made = [chat, forge]
    yield tag, board, chat, made
    for a in made:
        ray.kill(a, no_restart=True)
    board.kill()


def start(tag, chat, made, policy: str, hosts_n=4, per_host=4, routers_n=2):
    hosts = {f"h{i}": [f"w{i}{k}" for k in range(per_host)] for i in range(hosts_n)}
    ray.get([chat.add_user.remote(w) for ws in hosts.values() for w in ws])
    handles = {}
    for h, ws in hosts.items():
        handles[h] = InboxHost.options(name=f"{tag}-{h}").remote(ws, 0.05 if h == "h0" else 0.0)
        made.append(handles[h])
    slices = [{h: (f"{tag}-{h}", hosts[h]) for h in list(hosts)[r::routers_n]} for r in range(routers_n)]
    routers = [
        RouterActor.options(name=f"{tag}-router{r}").remote(
            f"r{r}", s, f"board-{tag}", f"chat-{tag}", f"forge-{tag}", policy, 0.5)
        for r, s in enumerate(slices)
    ]
    made.extend(routers)
    pids = ray.get([r.ensure_started.remote() for r in routers], timeout=60)
    return hosts, handles, routers, pids


def assert_no_failed_delivery(routers) -> None:
    """Every deliver call of every router succeeded (a router restarted by a SIGKILL counts from its restart)."""
    statuses = ray.get([r.status.remote() for r in routers])
    assert [s["failed_deliveries"] for s in statuses] == [0] * len(routers), statuses
    assert all(s["calls"] > 0 for s in statuses), statuses


def test_sigkill_router_mid_stream_every_event_exactly_once(services):
    tag, board, chat, made = services
    hosts, handles, routers, pids = start(tag, chat, made, "all")
    workers = [w for ws in hosts.values() for w in ws]
    acked_board: list[BoardEntry] = []
    acked_dms: list = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def board_writer(k: int) -> None:
        i = 0
        try:
            while not stop.is_set():
                w = workers[(k * 7 + i) % len(workers)]
                batch = [BoardEntryIn(type="FACT", text=f"{w} finding {k}.{i}.{j}", worker_id=w) for j in range(1 + i % 3)]
                acked_board.extend(r for r in board.write_batch(batch))
                i += 1
                time.sleep(0.01)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def dm_writer() -> None:
        i = 0
        try:
            while not stop.is_set():
                a, b = workers[i % len(workers)], workers[(i * 5 + 3) % len(workers)]
                if a != b:
                    acked_dms.append(ray.get(chat.dm.remote(a, b, f"dm {i}")))
                i += 1
                time.sleep(0.01)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    got: dict[str, Counter] = defaultdict(Counter)
    priorities: dict[tuple[str, str], str] = {}

    def drain(urgent_only: bool) -> None:
        for items in ray.get([h.take.remote(urgent_only) for h in handles.values()]):
            for w, eid, prio in items:
                got[w][eid] += 1
                priorities[(w, eid)] = prio

    threads = [threading.Thread(target=board_writer, args=(k,), daemon=True) for k in range(2)]
    threads.append(threading.Thread(target=dm_writer, daemon=True))
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked_board) >= 100 and len(acked_dms) >= 20, 20, "the writers' first events")
        drain(urgent_only=True)
        os.kill(pids[0], signal.SIGKILL)
        n_board = len(acked_board)
        for k in range(6):  # agents keep taking while the router is down and coming back
            wait_for(lambda: len(acked_board) >= n_board + 40 * (k + 1), 20, f"{40 * (k + 1)} more board writes")
            drain(urgent_only=k % 2 == 0)
        new_pid = ray.get(routers[0].ensure_started.remote(), timeout=60)
        assert new_pid != pids[0]
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=20)
    assert not errors, errors
    last_board, last_chat = board.last_seq(), ray.get(chat.last_seq.remote())
    wait_for(lambda: all(
        c["board"] >= last_board and c["chat"] >= last_chat
        for c in ray.get([h.cursors.remote() for h in handles.values()])
    ), 30, "the routers to catch up")
    drain(urgent_only=False)

    expected: dict[str, Counter] = defaultdict(Counter)
    for e in acked_board:
        assert isinstance(e, BoardEntry), e
        for w in workers:
            if w != e.worker_id:
                expected[w][e.event_id] += 1
    for m in acked_dms:
        expected[m.to][m.event_id] += 1
    for w in workers:
        missing = set(expected[w]) - set(got[w])
        assert not missing, (w, sorted(missing)[:5])
        assert got[w] == expected[w], (w, [k for k, n in got[w].items() if n != 1][:5])
    assert all(p == "high" for p in priorities.values())
    # batching: fewer host calls than events (the lagging host gets a few large batches)
    stats = ray.get([h.stats.remote() for h in handles.values()])
    assert stats[0]["calls"] < len(acked_board) + len(acked_dms), stats
    assert_no_failed_delivery(routers)


def test_restarted_router_rebuilds_claims_for_relevant_policy(services):
    tag, board, chat, made = services
    hosts, handles, routers, pids = start(tag, chat, made, "relevant", hosts_n=2, per_host=2, routers_n=1)
    board.write(BoardEntryIn(type="CLAIM", text="tac: textkit/commands/tac.py", worker_id="w00"))
    last = board.write(BoardEntryIn(type="FACT", text="the reference is a zipapp", worker_id="w10"))
    wait_for(lambda: all(ray.get(h.cursors.remote())["board"] >= last.seq for h in handles.values()), 20,
             "the hosts to get the claim")
    ray.get([h.take.remote(False) for h in handles.values()])
    os.kill(pids[0], signal.SIGKILL)
    assert ray.get(routers[0].ensure_started.remote(), timeout=60) != pids[0]
    hot = board.write(BoardEntryIn(type="OBSERVED", text="tac drops a missing final newline", worker_id="w11"))
    wait_for(lambda: all(ray.get(h.cursors.remote())["board"] >= hot.seq for h in handles.values()), 20,
             "the hosts to get the entry")
    items = {(w, p) for h in handles.values() for w, eid, p in ray.get(h.take.remote(False)) if eid == hot.event_id}
    assert items == {("w00", "high"), ("w01", "low"), ("w10", "low")}
    assert_no_failed_delivery(routers)
