"""The board: typed, append-only, durable entries that every worker reads and writes (DESIGN.md, "Board").

    limits.py   BoardLimits (sizes, recent view, CLAIM TTL and rule, grep bounds) and the entry type codes
    leases.py   a claim's key and life (rule lease | legacy), ClaimBook: open claims by key and holder
    query.py    what a grep pattern means: RE2, case folding, literal prefilter, refused patterns
    columns.py  the in-memory columnar layout and search blocks
    search.py   the grep walk over the blocks, in steps
    store.py    Board: validation, numbering, durability (AppendLog), reads, recent view + delta, grep
    view.py     the recent view as a reader keeps it: apply_recent_delta, RecentView (fed by deliveries)
    service.py  BoardService: one Board served on an event loop (group commit, long poll, grep in a thread)
    client.py   BoardClient: how a process uses the board over any awaited remote

The wire forms (Row, EntryFields, Ack, RecentDelta) are in `agensh_ray.wire`; the Ray actor and
its facade are in `agensh_ray.actors.board`.
"""

from agensh_ray.board.client import BoardClient
from agensh_ray.board.columns import BLOCK
from agensh_ray.board.limits import BoardLimits
from agensh_ray.board.service import BoardService
from agensh_ray.board.store import Board, PreparedBatch
from agensh_ray.board.view import RecentView, apply_recent_delta

__all__ = [
    "BLOCK", "Board", "BoardClient", "BoardLimits", "BoardService", "PreparedBatch", "RecentView",
    "apply_recent_delta",
]
