"""Event routing: who gets which event, with which priority, the per-worker queues it lands in, and
the pump that moves it from the durable sources to the worker hosts.

    claims.py      words, STOP_WORDS and the claims index (what the `relevant` policy asks)
    fanout.py      Fanout: source events -> one list of `Event`s per host, targets as a rule
    inbox.py       HostInbox: a host's per-worker queues and per-source cursors (exactly once)
    turn_clock.py  TurnClock, Due: when a worker's host-made prompts (nudge, share, wind-down) are due
    pump.py        RouterPump: a RouterActor's loops, plain asyncio, sources and hosts injected
    sources.py     ServiceSources: the board, chat and forge as the pump reads them (long poll / polling)

The values shipped (`Event`, `Shared`, `Queued`) are in agensh_ray/wire.py, and the texts an agent
reads (`board_text`, `render`) in agensh_ray/render.py.
"""

from agensh_ray.routing.claims import STOP_WORDS, Claim, Claims, words
from agensh_ray.routing.fanout import POLICIES, Fanout
from agensh_ray.routing.inbox import HostInbox, source_of
from agensh_ray.routing.pump import RouterPump
from agensh_ray.routing.sources import ServiceSources
from agensh_ray.routing.turn_clock import Due, TurnClock
from agensh_ray.wire import HIGH, LOW, SOURCES, Event, Queued, Shared

__all__ = [
    "HIGH", "LOW", "POLICIES", "SOURCES", "STOP_WORDS",
    "Claim", "Claims", "Due", "Event", "Fanout", "HostInbox", "Queued", "RouterPump", "ServiceSources", "Shared",
    "TurnClock",
    "source_of", "words",
]
