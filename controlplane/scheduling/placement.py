"""Gang placement on nodes, aware of the links between them.

A job of world size S is placed only when all S ranks fit at once (gang): the answer is a
:class:`~.types.Placement` (ordered node parts, ranks contiguous per node) or a reason to wait.
The rules, in the order they decide:

1. **Eligible nodes**: schedulable (not cordoned, draining or lost) and carrying every label of
   the job's ``node_selector``. None: the job waits with ``node_selector``.
2. **One node if it can**: a job that fits on one node goes to the node that fits it most
   tightly (fewest free slots left, then name). It uses no fabric, so its links do not matter.
3. **Otherwise the fewest nodes**: k is the smallest number of eligible nodes whose free slots
   add up to S, counting only nodes whose free fabric can carry the job's bandwidth floor (a
   job that spans nodes reserves its floor on *each* of them).
4. **Among the k-node choices**, the best by, in order: fewest degraded links between the
   chosen nodes; the fastest slowest link between them (a measured link counts at its measured
   bandwidth, an unmeasured one at the slower node's fabric); the fewest free slots left idle
   on the chosen nodes; node names. When the candidates allow at most ``EXACT_LIMIT`` k-node
   choices every choice is compared (exact); above that a local search starts from the k nodes
   with the most free slots and swaps a chosen node for a better one while that improves the
   choice (so it never returns more than k nodes, and drops a node with a degraded link when
   one swap can).
5. **Ranks**: the chosen nodes by free slots (most first, then name) take consecutive ranks,
   each as many as it has free; the first node hosts the rendezvous.

Everything is deterministic: ties end on node names.

:class:`Topology` keeps the per-node use (slots held, floors reserved by jobs that span nodes)
between calls, from the placements of the running jobs: :class:`~.quota.Ledger` owns one when
the :class:`~.types.Cluster` has nodes. :func:`place` is the one-shot form, and
:func:`links_from_ranks` turns the runtime's rank-to-rank probe results into node links.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .types import Cluster, JobRequest, Link, Node, NodePart, Placement, RunningJob, WaitCode
from .units import bandwidth

__all__ = ["EXACT_LIMIT", "RankLink", "Topology", "Unplaced", "links_from_ranks", "place"]

# Most k-node choices compared one by one; above it, the local search of rule 4.
EXACT_LIMIT = 256
# Floors are floats in bit/s; a microbit per second of rounding is not a reason to wait.
EPSILON = 1e-6
# Candidates the local search swaps in (the best by degraded links, then free slots).
SWAP_POOL = 48

Selector = tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Unplaced:
    """Why a job cannot be placed now: a stable ``code`` and a sentence for people."""

    code: WaitCode
    reason: str


class _NodeState:
    """One node's capacity and use."""

    __slots__ = ("fabric", "fabric_free", "free", "name", "node")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.name = node.name
        self.fabric = node.fabric_bps
        self.free = node.slots
        self.fabric_free = node.fabric_bps


class Topology:
    """Nodes, their links and what the running jobs hold on them (see the module docstring)."""

    def __init__(self, nodes: Sequence[Node], links: Sequence[Link] = ()) -> None:
        self.states = {n.name: _NodeState(n) for n in sorted(nodes, key=lambda n: n.name)}
        self.links: dict[tuple[str, str], Link] = {}
        self.degraded: dict[str, set[str]] = {}  # node -> nodes it has a degraded link to
        for link in links:
            if link.a in self.states and link.b in self.states:
                self.links[link.key] = link
                if link.degraded:
                    self.degraded.setdefault(link.a, set()).add(link.b)
                    self.degraded.setdefault(link.b, set()).add(link.a)
        self.holding: dict[str, tuple[Placement, float]] = {}  # job id -> (placement, floor)
        self._eligible: dict[Selector, list[_NodeState]] = {}

    @classmethod
    def of(cls, cluster: Cluster) -> Topology | None:
        """The cluster's topology, or None when it was given without nodes (one pool)."""
        return cls(cluster.nodes, cluster.links) if cluster.nodes else None

    # --- use --------------------------------------------------------------------------------

    def hold(self, job_id: str, placement: Placement, floor_bps: float) -> None:
        """Count a running job's ranks (and its floor, if it spans nodes) on its nodes."""
        self.holding[job_id] = (placement, floor_bps)
        self._change(placement, floor_bps, -1)

    def release(self, job_id: str) -> None:
        """Give back what :meth:`hold` took (nothing if the job is not held)."""
        held = self.holding.pop(job_id, None)
        if held is not None:
            self._change(*held, +1)

    def _change(self, placement: Placement, floor_bps: float, sign: int) -> None:
        spans = placement.spans
        for part in placement.parts:
            state = self.states.get(part.node)
            if state is None:
                continue  # the node left the cluster: its slots are not counted either
            state.free += sign * part.count
            if spans:
                state.fabric_free += sign * floor_bps

    def free_slots(self, node: str) -> int:
        return self.states[node].free

    def free_fabric_bps(self, node: str) -> float:
        return self.states[node].fabric_free

    def eligible(self, selector: Selector) -> list[_NodeState]:
        """Schedulable nodes carrying every label of ``selector``, by name (cached)."""
        found = self._eligible.get(selector)
        if found is None:
            wanted = dict(selector)
            found = [
                s for s in self.states.values() if s.node.schedulable and s.node.matches(wanted)
            ]
            self._eligible[selector] = found
        return found

    # --- placing ----------------------------------------------------------------------------

    def place_job(self, job: JobRequest) -> Placement | WaitCode:
        """Place ``job`` now (a placement), or say which :class:`WaitCode` stops it."""
        return self.place(job.slots, job.selector_key, job.bandwidth_floor_bps)

    def place(
        self, slots: int, selector: Selector = (), floor_bps: float = 0.0
    ) -> Placement | WaitCode:
        """Place ``slots`` ranks on nodes matching ``selector`` (module docstring, rules 1-5);
        a spanning placement reserves ``floor_bps`` on each node. Returns the placement, or
        the code of the first rule that refuses (``explain`` gives the sentence)."""
        pool = self.eligible(selector)
        if not pool:
            return WaitCode.NODE_SELECTOR
        best: _NodeState | None = None
        for state in pool:
            free = state.free
            if free >= slots and (best is None or free < best.free):
                best = state
        if best is not None:
            return self._single(best, slots)
        candidates = [s for s in pool if s.free > 0 and s.fabric_free + EPSILON >= floor_bps]
        candidates.sort(key=_by_free)
        k = _fewest(candidates, slots)
        if k is None:
            return self._refusal_code(pool, slots)
        chosen, naive = self._choose(candidates, slots, k)
        return self._spanning(chosen, naive, slots)

    def _refusal_code(self, pool: list[_NodeState], slots: int) -> WaitCode:
        """Not enough free slots at all (slots), or not on nodes with fabric room (fabric)."""
        if sum(s.free for s in pool) >= slots:
            return WaitCode.CLUSTER_BANDWIDTH
        return WaitCode.CLUSTER_SLOTS

    def explain(self, job: JobRequest) -> Unplaced | None:
        """Why ``job`` cannot be placed now (None: it can), as a code and a sentence."""
        found = self.place_job(job)
        if isinstance(found, Placement):
            return None
        return Unplaced(code=found, reason=self.why_not(job, found))

    def why_not(self, job: JobRequest, code: WaitCode) -> str:
        """The sentence for ``code``, the refusal :meth:`place_job` gave ``job`` now."""
        selector = job.selector_key
        labels = ", ".join(f"{k}={v}" for k, v in selector)
        where = f"nodes with label {labels}" if selector else "schedulable nodes"
        if code is WaitCode.NODE_SELECTOR:
            if not selector:
                return "no schedulable node (all cordoned, draining or lost)"
            matching = [s.name for s in self.states.values() if s.node.matches(dict(selector))]
            if matching:
                return f"no schedulable node with label {labels} ({_names(matching)} cordoned)"
            return f"no node with label {labels}"
        pool = self.eligible(selector)
        free = [s for s in pool if s.free > 0]
        if code is WaitCode.CLUSTER_SLOTS:
            total = sum(s.free for s in free)
            listed = _names([f"{s.name}: {s.free}" for s in sorted(free, key=_by_free)])
            return f"needs {job.slots} slots, {where} have {total} free" + (
                f" ({listed})" if free else ""
            )
        floor = bandwidth(job.bandwidth_floor_bps)
        room = [s for s in free if s.fabric_free + EPSILON >= job.bandwidth_floor_bps]
        return (
            f"needs {job.slots} slots across nodes with a {floor} floor on each; {where} "
            f"with that much fabric free have {sum(s.free for s in room)} free slots"
        )

    def _single(self, state: _NodeState, slots: int) -> Placement:
        why = (
            f"1 node: {state.name} ranks {_ranks(0, slots)}; packed, best fit "
            f"({slots} of {state.free} free slots), no fabric used"
        )
        return Placement.single(state.name, slots, why)

    def _choose(
        self, candidates: list[_NodeState], slots: int, k: int
    ) -> tuple[list[_NodeState], list[_NodeState]]:
        """Rule 4: the best k nodes, and the naive pick (the k with most free slots)."""
        naive = candidates[:k]
        # A node can be part of a k-node choice when it and the k-1 largest others hold the
        # job (candidates are sorted most free first).
        top = sum(s.free for s in candidates[: k - 1])
        last = candidates[k - 1].free
        pool = [
            s
            for i, s in enumerate(candidates)
            if s.free + (top - s.free + last if i < k - 1 else top) >= slots
        ]
        if math.comb(len(pool), k) <= EXACT_LIMIT:
            best = min(
                (c for c in itertools.combinations(pool, k) if sum(s.free for s in c) >= slots),
                key=lambda c: self._score(c, slots),
            )
            return list(best), naive
        return self._improve(naive, pool, slots), naive

    def _improve(
        self, chosen: list[_NodeState], pool: list[_NodeState], slots: int
    ) -> list[_NodeState]:
        """Local search: swap one chosen node for one other while the score improves."""
        degraded = self.degraded
        others = heapq.nsmallest(
            SWAP_POOL, pool, key=lambda s: (len(degraded.get(s.name, ())), -s.free, s.name)
        )
        score = self._score(chosen, slots)
        improved = True
        while improved:
            improved = False
            total = sum(s.free for s in chosen)
            for i, out in enumerate(chosen):
                for into in others:
                    if into in chosen or total - out.free + into.free < slots:
                        continue
                    trial = [*chosen[:i], into, *chosen[i + 1 :]]
                    trial_score = self._score(trial, slots)
                    if trial_score < score:
                        chosen, score, improved = trial, trial_score, True
                        break
                if improved:
                    break
        return chosen

    def _score(
        self, chosen: Sequence[_NodeState], slots: int
    ) -> tuple[int, float, int, tuple[str, ...]]:
        """Rule 4's order: degraded links, minus the slowest link, idle slots, names."""
        bad = 0
        slowest = math.inf
        links = self.links
        for i, x in enumerate(chosen):
            a = x.name
            for y in chosen[i + 1 :]:
                b = y.name
                link = links.get((a, b) if a < b else (b, a))
                if link is None or link.bandwidth_bps is None:
                    bps = x.fabric if x.fabric < y.fabric else y.fabric
                else:
                    bps = link.bandwidth_bps
                if link is not None and link.degraded:
                    bad += 1
                if bps < slowest:
                    slowest = bps
        idle = sum(s.free for s in chosen) - slots
        return (bad, -slowest, idle, tuple(sorted(s.name for s in chosen)))

    @staticmethod
    def _bps(x: _NodeState, y: _NodeState, link: Link | None) -> float:
        if link is not None and link.bandwidth_bps is not None:
            return link.bandwidth_bps
        return min(x.node.fabric_bps, y.node.fabric_bps)

    def _spanning(self, chosen: list[_NodeState], naive: list[_NodeState], slots: int) -> Placement:
        """Rule 5, and the sentence: the parts, then why a naive pick was skipped."""
        counts, placed = [], 0
        for state in sorted(chosen, key=_by_free):  # the most free node takes the most ranks
            count = min(state.free, slots - placed)
            counts.append((state, count))
            placed += count
        # Ranks are numbered node by node in address order, as torchrun's c10d rendezvous
        # numbers the nodes (nodes with one address keep the order above).
        order = {state.name: i for i, (state, _) in enumerate(counts)}
        counts.sort(key=lambda sc: (sc[0].node.address, order[sc[0].name]))
        parts, first = [], 0
        for state, count in counts:
            parts.append(NodePart(node=state.name, first_rank=first, count=count))
            first += count
        listed = ", ".join(f"{p.node} ranks {_ranks(p.first_rank, p.count)}" for p in parts)
        notes = ["packed"] + [self._skipped(s, chosen) for s in naive if s not in chosen][:3]
        why = f"{len(parts)} nodes: {listed}; {', '.join(notes)}"
        return Placement(parts=tuple(parts), why=why)

    def _skipped(self, state: _NodeState, chosen: list[_NodeState]) -> str:
        """Why a node with more free slots than a chosen one was left out."""
        for other in chosen:
            if other.name in self.degraded.get(state.name, ()):
                a, b = _key(state.name, other.name)
                return f"{state.name} skipped: link {a}-{b} degraded"
        bps, other_name = min((self._pair_bps(state, o), o.name) for o in chosen)
        if bps < self._slowest(chosen):
            a, b = _key(state.name, other_name)
            return f"{state.name} skipped: link {a}-{b} slower ({bandwidth(bps)})"
        return f"{state.name} skipped: fewer slots left idle without it"

    def _pair_bps(self, x: _NodeState, y: _NodeState) -> float:
        return self._bps(x, y, self.links.get(_key(x.name, y.name)))

    def _slowest(self, chosen: Sequence[_NodeState]) -> float:
        """The slowest link among ``chosen`` (inf for one node)."""
        return min(
            (self._pair_bps(x, y) for x, y in itertools.combinations(chosen, 2)), default=math.inf
        )


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def _by_free(state: _NodeState) -> tuple[int, str]:
    return (-state.free, state.name)


def _fewest(candidates: list[_NodeState], slots: int) -> int | None:
    """The fewest of ``candidates`` (sorted most free first) that hold ``slots``; None: none."""
    total = 0
    for count, state in enumerate(candidates, start=1):
        total += state.free
        if total >= slots:
            return count
    return None


def _ranks(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def _names(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def place(
    job: JobRequest,
    nodes: Sequence[Node],
    links: Sequence[Link] = (),
    running: Iterable[RunningJob] = (),
) -> Placement | Unplaced:
    """One-shot placement of ``job`` on ``nodes`` holding the placed ``running`` jobs."""
    topology = Topology(nodes, links)
    for held in running:
        if held.placement is not None:
            topology.hold(held.id, held.placement, held.bandwidth_floor_bps)
    found = topology.place_job(job)
    if isinstance(found, Placement):
        return found
    return Unplaced(code=found, reason=topology.why_not(job, found))


@dataclass(frozen=True, kw_only=True, slots=True)
class RankLink:
    """One probe result of a job: ranks ``src`` and ``dst`` of a run placed on ``placement``."""

    placement: Placement
    src: int
    dst: int
    bandwidth_bps: float | None
    degraded: bool


def links_from_ranks(samples: Iterable[RankLink]) -> tuple[Link, ...]:
    """Node links from rank-to-rank probe results (the runtime measures ranks, placement needs
    nodes). Ranks on one node say nothing about the fabric and are skipped; a node pair measured
    by several rank pairs or jobs keeps the slowest bandwidth, and is degraded if any was."""
    found: dict[tuple[str, str], tuple[float | None, bool]] = {}
    for sample in samples:
        owner = {r: p.node for p in sample.placement.parts for r in p.ranks}
        a, b = owner.get(sample.src), owner.get(sample.dst)
        if a is None or b is None or a == b:
            continue
        key = _key(a, b)
        bps, degraded = found.get(key, (None, False))
        if sample.bandwidth_bps is not None:
            bps = sample.bandwidth_bps if bps is None else min(bps, sample.bandwidth_bps)
        found[key] = (bps, degraded or sample.degraded)
    return tuple(
        Link(a=a, b=b, bandwidth_bps=bps, degraded=bad)
        for (a, b), (bps, bad) in sorted(found.items())
    )


def matching(nodes: Iterable[Node], selector: Mapping[str, str]) -> list[Node]:
    """The nodes that carry every label of ``selector``."""
    return [n for n in nodes if n.matches(selector)]
