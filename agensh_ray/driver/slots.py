"""The run's agent slots, reserved all at once, for `Run` (mixed in).

On a cluster that declares `agent_slot`, every WorkerActor's slots (and the memory its agents need) are
one Ray placement group: a bundle per host, spread over the nodes, created before any host starts. Ray
reserves a placement group whole or not at all, so runs sharing a cluster (an experiment's cells started
together, or several users) never each seat part of their workers and then wait on one another: a run whose
slots are not free waits for them (`--queue`, a progress line every 10 s) or, without `--queue`, is refused
once another run took them between the capacity check and the reservation. When a node is lost, Ray places
its bundles again where there is room and the hosts in them restart there; with no room they wait, and the
progress line says they are queued (driver/health.py). A local run (no `agent_slot`) reserves nothing.
"""

from __future__ import annotations

import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from agensh_ray.errors import CapacityError
from agensh_ray.placement import slot_bundles

RESERVE_WAIT_S = 60.0
"""Without --queue: how long a run waits for slots that were free at its capacity check (another run starting
at the same moment may hold them until its end)."""
SAY_EVERY_S = 10.0


class Slots:
    slot_group = None

    def _reserve_slots(self, sizes: list[int]) -> bool:
        """Reserve one bundle per host (`sizes`: each host's workers); False if interrupted while waiting."""
        if self._slots is None:
            return True
        need = sum(sizes)
        self.slot_group = placement_group(slot_bundles(self.cfg, sizes), strategy="SPREAD",
                                          name=f"slots-{self.run_id}")
        t0 = next_say = time.time()
        while not self.slot_group.wait(timeout_seconds=1):
            if self.interrupts.requested:
                return False
            waited = time.time() - t0
            if not self.cfg.queue and waited > RESERVE_WAIT_S:
                self._release_slots()
                raise CapacityError(f"{need} agent slots were free at the start but another run took them: waited "
                                    f"{waited:.0f} s; pass --queue to wait for them, or lower --workers")
            if time.time() >= next_say:
                free = ray.available_resources().get("agent_slot", 0.0)
                self.say(f"waiting for {need} agent slots ({free:g} free of {self._slots:g}; other runs hold the "
                         f"rest): this run starts when they are free ({waited:.0f} s so far)")
                next_say = time.time() + SAY_EVERY_S
        waited = time.time() - t0
        self.say(f"{need} agent slots reserved for {len(sizes)} WorkerActors"
                 + (f" after {waited:.0f} s" if waited >= 2 else ""))
        return True

    def _release_slots(self) -> None:
        if self.slot_group is not None:
            try:
                remove_placement_group(self.slot_group)
            except Exception:  # Ray is going away: the group goes with the driver's job
                pass
            self.slot_group = None
