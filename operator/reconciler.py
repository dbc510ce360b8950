"""The reconcile loop: workers that take job keys from the work queue (workqueue.py), decide and apply.

Watch events (handlers.py) fill the cache and enqueue the job they concern; a worker takes a key
(one reconciliation per key at a time) and asks lifecycle.decide what to do; a task of that job's
own then writes the status first and posts its Events, then creates or deletes the workload, while
the worker takes the next key: a job's writes, seconds each on a loaded API server, never hold back
another job's decision. Blocking API calls run in threads. Gang
reservations live in admission.Reservations, the progress timer in progress.ProgressPoller, the
reads of every rank's health in watchdog.Watchdog, and what is remembered of each job in one JobState.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from longctx_trainer.contract.topology import tabled_nodes

from . import metrics, policy, reasons
from .admission import (
    Admission,
    GangRequest,
    NodeMatches,
    Reservations,
    admission_backoff,
    admit_gang,
    scheduling_for,
    still_fits,
)
from .annotations import pod_annotations
from .api.spec import LongContextJob, LongContextJobSpec
from .api.status import PENDING, SUCCEEDED, LongContextJobStatus
from .cache import Cache, Key
from .config import OperatorConfig
from .echo import unechoed_placements, without_unechoed_create
from .kube import Kube, NotOwned
from .lifecycle.decide import decide
from .lifecycle.decision import BROKEN_GANG_GRACE_SECONDS, CreateWorkload, Decision, DeleteWorkload
from .lifecycle.planning import planning_due
from .names import PLACEMENT_ANNOTATION, config_map_name, workload_name
from .observe import MISSING, WorkloadObservation, ended, observe_workload
from .occupancy import OtherPods
from .placement import PlacementTables, config_map_table, placement_wanted, placements_due, topology_levels
from .planner import PlanError
from .progress import ProgressPoller
from .render import render_workload
from .render.workload import node_selector, tolerations
from .resolve import resolve_layout
from .statuswrite import write_delay
from .watchdog import Watchdog
from .workqueue import WorkQueue

log = logging.getLogger("longctx.operator")
RESERVATION_SECONDS = 30.0
RESYNC_SECONDS = 60.0
# Pod and Job events of one job come in bursts (a gang of pods changes together): one
# reconciliation this long after the first event sees them all and writes the status once.
COALESCE_SECONDS = 0.3
ERROR_RETRY_MAX_SECONDS = 60.0


def stop_pods(pods: list[dict], action: DeleteWorkload) -> list[tuple[str, str, int]]:
    """(name, uid, grace seconds) of the generation's pods that `action` stops sooner than their
    grace period: those on a lost node at once, every other one of a broken gang within
    BROKEN_GANG_GRACE_SECONDS; pods already deleted with no grace are left alone."""
    stops = []
    for pod in pods:
        meta = pod["metadata"]
        if meta["name"] in action.lost_pods:
            stops.append((meta["name"], meta["uid"], 0))
        elif action.broken:
            stops.append((meta["name"], meta["uid"], BROKEN_GANG_GRACE_SECONDS))
    return stops


def status_patch(old: dict, new: LongContextJobStatus) -> dict:
    """Merge patch from `old` to `new`, leaving status.progress to the progress timer, except when
    the job has succeeded (no more reads: the lifecycle completes what the reads capped)."""
    final = new.phase == SUCCEEDED and new.progress is not None
    body = new.model_dump(by_alias=True, exclude_none=True, exclude=None if final else {"progress"})
    for removed in set(old) - set(body) - {"progress"}:
        body[removed] = None
    if final:
        for removed in set(old.get("progress") or {}) - set(body["progress"]):
            body["progress"][removed] = None
    return body


def refusal(error: ApiException | NotOwned) -> str:
    """Why a workload object could not be created, for the job's status."""
    if isinstance(error, NotOwned):
        return f"creating the workload failed: {error}"
    return f"creating the workload failed: {error.status} {error.reason}: {(error.body or '')[:500]}".rstrip(": ")


Write = Callable[[], Awaitable[float | None]]
"""A decision's writes (status, workload, Events); they return the seconds until the next reconciliation."""


async def _nothing() -> None:
    return None


async def _raise(error: Exception) -> None:
    raise error


class AdmissionDue(Exception):
    """decide asked for a builtin admission verdict that is not counted yet (counted off the loop)."""


def retry_delay(failures: int) -> float:
    """Exponential backoff of a job whose reconciliations keep failing: 1 s doubling to 60 s."""
    return min(ERROR_RETRY_MAX_SECONDS, 2.0 ** (failures - 1))


def add_pod_annotations(job: dict, extra: dict[str, str]) -> dict:
    """The rendered Job with the job's allowed pod annotations added; the fabric's own win."""
    meta = job["spec"]["template"]["metadata"]
    meta["annotations"] = {**extra, **meta.get("annotations", {})}
    return job


def api_threads(config: OperatorConfig) -> int:
    """Threads for the blocking API calls, the most that run at once (the writes of every job
    decided, the progress reads and Events queue for them): three creates per worker's decision
    and a few more (the client keeps as many connections open)."""
    return 3 * config.workers + 4


@dataclass
class JobState:
    """What the operator remembers of one job between reconciliations (dropped with the job)."""

    failures: int = 0
    """Consecutive failed reconciliations, for the backoff."""
    create_error: str | None = None
    """Why the API server refused the last create; the next decision reports it."""
    name_taken: bool = False
    """That refusal is for good: a child's name belongs to an object this job does not own."""
    admission: Admission | None = None
    """The last builtin admission verdict: a fit is used once, a refusal stands until admission_due."""
    admission_due: float = 0.0
    """time.monotonic() from which the gang is counted again (admission.admission_backoff)."""
    admission_refusals: int = 0
    """Refused counts in a row, for that backoff."""
    waiting_since: float | None = None
    """First refused admission of the coming generation (the admission-wait metric)."""
    events: asyncio.Task | None = None
    """The last Event-posting task: the next Events wait for it, so their order is the story."""
    created: tuple[int, float] | None = None
    """The generation whose workload this operator created last, and when (time.monotonic()),
    until the watch shows it (echo.without_unechoed_create)."""
    placed: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Pod uid -> the placement written and when, until the watch shows it (echo.unechoed_placements)."""
    tabled: tuple[int, frozenset[str]] | None = None
    """A generation and the nodes its ConfigMap's placement table holds: their pods get no annotation."""
    unwritten_since: float | None = None
    """time.monotonic() when a decided change of status.workers alone was first left unwritten
    (statuswrite.write_delay); None when the status written is the one decided."""
    parsed: tuple[str, LongContextJob, LongContextJobStatus] | None = None
    """The job's resourceVersion and its spec and status as validated at that version: a decision
    on an unchanged object (most follow its pods' events) reuses them (the models are frozen)."""
    written_version: str | None = None
    """The resourceVersion of the job as this reconciler's last status write left it: its watch
    event (the echo) carries nothing that was not decided on, so it is not decided again."""


class Reconciler:
    def __init__(self, kube: Kube, config: OperatorConfig, other_pods: OtherPods | None = None):
        """`other_pods`: the pods builtin admission counts besides the jobs' own (none by default)."""
        self.kube, self.config = kube, config
        self.other_pods = other_pods or OtherPods([], time.monotonic)
        self._event_at: dict[Key, float] = {}  # first watch event not yet decided on (RECONCILE_LATENCY)
        self.cache = Cache()
        self.phases = metrics.PhaseCounts()
        self.queue = WorkQueue()
        self.workers = config.workers
        self.nodes_visible = config.read_nodes
        self.progress_interval = config.progress_interval_seconds
        self.reservations = Reservations(RESERVATION_SECONDS, time.monotonic)
        self.jobs: dict[Key, JobState] = {}  # what the operator remembers of each job between reconciles
        self._tasks: list[asyncio.Task] = []
        self._writes: set[asyncio.Task] = set()  # decisions' writes under way, one per job at most
        self._threads = ThreadPoolExecutor(max_workers=api_threads(config), thread_name_prefix="kube")
        # Builtin admission reads every node and lists the other pods (occupancy.py): one thread,
        # off the event loop, one count at a time.
        self._admission_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="admission")
        self.node_matches = NodeMatches()  # the admission thread's
        self.placement_tables = PlacementTables()  # the admission thread's
        self.awaiting_nodes: dict[str, set[Key]] = {}
        """Node -> the jobs with a pod bound to it whose placement waits for the node's labels."""
        self.progress = ProgressPoller(self.cache, kube, self._call, config)
        self.watchdog = Watchdog(self.cache, config, self.queue.add)

    # -- events from the watch streams -------------------------------------------------------
    def job_event(self, obj: dict, deleted: bool) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        old = self.cache.jobs_of.get(key)
        if old is not None and old["metadata"].get("generation") != obj["metadata"].get("generation"):
            self._state(key).admission = None  # a new spec: a standing refusal was about the old one
        self.cache.put_job(obj, deleted)
        if deleted:
            self.phases.forget(key)
            self.reservations.forget(key)
            self.progress.forget(key)
            self.watchdog.forget(key)
            self.jobs.pop(key, None)
            self._event_at.pop(key, None)
            metrics.forget_job(*key)
        else:
            self._count_phase(key)
            metrics.track_job(*key)
            state = self._state(key)
            version = obj["metadata"].get("resourceVersion")
            if version is not None and version == state.written_version:
                return  # the echo of our own status write; any other write has a version of its own
            observed = (obj.get("status") or {}).get("observedGeneration")
            if state.failures and observed == obj["metadata"].get("generation"):
                return  # a failing job whose spec has not changed since: its backoff retries, not this event
            self._event(key)
            self.queue.add(key)

    def workload_event(self, obj: dict, deleted: bool) -> None:
        if (key := self.cache.put_workload(obj, deleted)) is not None:
            self._event(key)
            self.queue.add_after(key, COALESCE_SECONDS)

    def kueue_workload_event(self, obj: dict, deleted: bool) -> None:
        if (key := self.cache.put_kueue_workload(obj, deleted)) is not None:
            self.queue.add_after(key, COALESCE_SECONDS)

    def pod_event(self, obj: dict, deleted: bool) -> None:
        key = self.cache.put_pod(obj, deleted)
        if key is not None:
            self._event(key)
            self.queue.add_after(key, COALESCE_SECONDS)
        if deleted or ended(obj):
            self.wake_pending()  # GPUs may have been freed

    def _event(self, key: Key) -> None:
        self._event_at.setdefault(key, time.monotonic())

    def node_event(self, obj: dict, deleted: bool) -> None:
        if self.cache.put_node(obj, deleted):
            self.wake_pending()  # a node came, went, or changed its GPUs, taints, labels or readiness
            for key in self.awaiting_nodes.pop(obj["metadata"]["name"], ()):
                self.queue.add(key)  # its pods' placement can be written now

    def wake_pending(self) -> None:
        """Re-checks the jobs waiting for builtin admission (GPUs may have been freed) whose last
        refusal has stood its backoff."""
        now = time.monotonic()
        for key, obj in self.cache.jobs_of.items():
            status = obj.get("status") or {}
            state = self._state(key)
            if (
                status.get("phase") in (None, PENDING)
                and not status.get("currentWorkload")
                and not state.failures
                and state.admission_due <= now
            ):
                self.queue.add(key)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        self._tasks.append(asyncio.create_task(self.progress.run()))
        self._tasks.append(asyncio.create_task(self.watchdog.run()))

    async def stop(self) -> None:
        """Cancels the workers, the writes and the Event posts (best effort: an Event task left
        running would call into the thread pool after its shutdown), then stops the threads."""
        events = [state.events for state in self.jobs.values() if state.events is not None]
        tasks = [*self._tasks, *self._writes, *events]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._admission_thread.shutdown(wait=False, cancel_futures=True)
        self.other_pods.stop()
        self.progress.stop()
        self.watchdog.stop()

    async def _call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn, *args)

    async def _worker(self) -> None:
        """Decides for one key after another; each decision's writes go to a task of the job's own
        (the key stays taken until they end), so a worker never waits on the API server. At most one
        such task per job: the API calls themselves are bounded by the thread pool."""
        while True:
            key = await self.queue.get()
            started = time.perf_counter()
            try:
                write = await self._decide(key)
            except Exception as error:  # noqa: BLE001 - one job's failure must not stop the worker
                write = functools.partial(_raise, error)
            task = asyncio.create_task(self._finish(key, write, started))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def _finish(self, key: Key, write: Write, started: float) -> None:
        """Runs a decision's writes, then releases the key: requeued after the decision's delay, or
        after the failure backoff."""
        try:
            requeue = await write()
            self._state(key).failures = 0
            metrics.RECONCILES.labels(result="ok").inc()
        except Exception:  # noqa: BLE001 - one job's failure must not stop the others
            state = self._state(key)
            state.failures += 1
            requeue = retry_delay(state.failures)
            log.exception("reconciling %s/%s failed; retrying in %.0fs", *key, requeue)
            metrics.RECONCILES.labels(result="error").inc()
        finally:
            self.queue.done(key)
            metrics.RECONCILE_DURATION.observe(time.perf_counter() - started)
        if requeue is not None:
            self.queue.add_after(key, requeue)

    def _admission(self, key: Key) -> Admission:
        """The verdict decide asks for: the counted one (AdmissionDue when there is none to use)."""
        if not self.nodes_visible:
            return Admission(
                False,
                reasons.NODES_NOT_READABLE,
                "builtin admission counts free GPUs on nodes, which this "
                "operator may not read (namespace-scoped RBAC): use scheduling.admission kueue or none",
            )
        state = self._state(key)
        verdict = state.admission
        if verdict is None or (not verdict.fits and time.monotonic() >= state.admission_due):
            raise AdmissionDue
        if verdict.fits:
            state.admission = None  # a fit admits one generation
        return verdict

    async def _count_admission(self, key: Key, spec: LongContextJobSpec) -> None:
        """Counts whether the gang fits, in the admission thread over a snapshot of the cache. The
        caller decides and reserves without awaiting in between; a fit counted while other gangs
        reserved nodes is counted again unless enough free nodes are left (admission.still_fits)."""
        gpus = spec.resources.gpus_per_node if not spec.on_cpu else 0
        request = GangRequest(
            pods=spec.resources.nodes,
            gpus_per_pod=gpus,
            node_selector=node_selector(spec),
            tolerations=tolerations(spec),
        )
        loop = asyncio.get_running_loop()
        while True:
            reserved_before = self.reservations.reserved_total
            reserved = self.reservations.held_by_others(
                key, lambda other, generation: len(self.cache.generation_pods(other, generation))
            )
            nodes, pods = list(self.cache.nodes.values()), list(self.cache.pods.values())
            others = await loop.run_in_executor(self._admission_thread, self.other_pods.current)
            verdict = await loop.run_in_executor(
                self._admission_thread,
                functools.partial(
                    admit_gang, request, nodes, pods + others.waiting, reserved, others.used, self.node_matches
                ),
            )
            if not verdict.fits or still_fits(verdict, request, self.reservations.reserved_total - reserved_before):
                break
        state = self._state(key)
        state.admission = verdict
        if verdict.fits:
            state.admission_refusals, state.admission_due = 0, 0.0
        else:
            state.admission_refusals += 1
            state.admission_due = time.monotonic() + admission_backoff(state.admission_refusals)

    async def reconcile(self, key: Key) -> float | None:
        """One reconciliation: the decision, then its writes; seconds until the next one, or None."""
        return await (await self._decide(key))()

    async def _decide(self, key: Key) -> Write:
        """The decision for the job as cached (counting builtin admission when it asks), accounted
        at once; returns its writes, which return the seconds until the next reconciliation."""
        since = self._event_at.pop(key, None)
        obj = self.cache.jobs_of.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return _nothing  # children go with the owner (garbage collector)
        state = self._state(key)
        version = obj["metadata"].get("resourceVersion")
        if version is not None and state.parsed is not None and state.parsed[0] == version:
            _, job, status = state.parsed
        else:
            try:
                job = LongContextJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec")})
                status = LongContextJobStatus.model_validate(obj.get("status") or {})
            except ValidationError as e:
                log.error("%s/%s does not parse: %s", *key, e)
                return _nothing
            state.parsed = (version, job, status) if version is not None else None
        generation = status.workload_generation
        observed = MISSING
        if generation:
            workload = self.cache.owned_workload(key, generation)  # only a Job this job created
            if workload is not None:
                state.created = None  # seen
                observed = observe_workload(
                    workload,
                    self.cache.generation_pods(key, generation),
                    self.cache.generation_kueue_workload(key, generation),
                )
            elif state.create_error is not None:
                observed = WorkloadObservation(
                    exists=False, create_error=state.create_error, name_taken=state.name_taken
                )
        annotations = pod_annotations(obj["metadata"].get("annotations") or {}, self.config)
        spec, admission_error = scheduling_for(job.spec, self.config)
        job = job.model_copy(update={"spec": spec})
        settings_error = policy.refusal(spec, self.config)
        network_error = self.config.network_allow_list.refusal(key[0], spec.network)
        if planning_due(status, obj["metadata"].get("generation", 1)):  # in a thread: decide() finds it
            with contextlib.suppress(PlanError):  # which the decision records
                await self._call(resolve_layout, spec)
        asked: list[bool] = []

        def next_step() -> Decision:
            asked.clear()
            return decide(
                key[1],
                spec,
                obj["metadata"].get("generation", 1),
                status,
                observed,
                datetime.now(UTC),
                lambda: asked.append(True) or self._admission(key),
                pod_annotations_error=annotations.error,
                admission_error=admission_error,
                settings_error=settings_error,
                network_error=network_error,
                health=self.watchdog.verdict(key),
            )

        try:
            decision = next_step()
        except AdmissionDue:
            await self._count_admission(key, spec)
            decision = next_step()  # no await from the count to the reservation (_account)
        if observed is MISSING:
            decision = without_unechoed_create(decision, state.created, time.monotonic())
        if since is not None:
            metrics.RECONCILE_LATENCY.observe(time.monotonic() - since)
        self._account(key, job, status, decision)
        requeue = decision.requeue_after
        if asked and state.admission is not None:  # a refusal stands its backoff
            requeue = max(requeue or 0.0, state.admission_due - time.monotonic())
        delay = write_delay(status, decision, state.unwritten_since, time.monotonic())
        if delay:  # the counts alone changed: written with what follows, by this time at the latest
            state.unwritten_since = state.unwritten_since if state.unwritten_since is not None else time.monotonic()
            requeue = delay if requeue is None else min(requeue, delay)
        else:
            state.unwritten_since = None

        async def write() -> float:
            await self._apply(key, obj, job, decision, annotations.values, write_status=delay == 0.0)
            if generation and placement_wanted(spec, self.config):
                await self._place(key, spec, generation)
            return min(requeue, RESYNC_SECONDS) if requeue is not None else RESYNC_SECONDS

        return write

    def _account(self, key: Key, job: LongContextJob, old: LongContextJobStatus, decision: Decision) -> None:
        new = decision.status
        if new.restarts > old.restarts:
            metrics.GANG_RESTARTS.labels(*key).inc(new.restarts - old.restarts)
        state = self._state(key)
        if new.phase == PENDING and new.current_workload is None and state.waiting_since is None:
            state.waiting_since = time.monotonic()
        for action in decision.actions:
            if isinstance(action, CreateWorkload) and action.generation != old.workload_generation:
                state.create_error, state.name_taken = None, False  # an earlier generation's refusal
                self.reservations.reserve(key, job.spec.resources.nodes, action.generation)
                waited = time.monotonic() - (state.waiting_since or time.monotonic())
                state.waiting_since = None
                metrics.ADMISSION_WAIT.observe(waited)

    async def _apply(
        self,
        key: Key,
        obj: dict,
        job: LongContextJob,
        decision: Decision,
        extra_pod_annotations: dict[str, str],
        write_status: bool,
    ) -> None:
        """Writes the decided status when `write_status` (statuswrite.write_delay), then applies
        the actions and posts the Events."""
        namespace, name = key
        if write_status:
            patch = status_patch(obj.get("status") or {}, decision.status)
            updated = await self._call(self.kube.patch_status, namespace, name, patch)
            self.cache.put_job(updated, deleted=False)
            self._state(key).written_version = updated["metadata"].get("resourceVersion")
            self._count_phase(key)  # before the actions: the gauge never lags the status written
            obj = updated
        try:
            for action in decision.actions:
                if isinstance(action, CreateWorkload):
                    await self._create(key, obj, job, action, extra_pod_annotations)
                elif isinstance(action, DeleteWorkload):
                    await self._call(
                        self.kube.delete_job, namespace, workload_name(name, action.generation), action.uid
                    )
                    for pod_name, uid, grace in stop_pods(self.cache.generation_pods(key, action.generation), action):
                        await self._call(self.kube.delete_pod, namespace, pod_name, uid, grace)
        finally:
            # Posted after the actions, so they never delay a create; they tell the status just
            # written, even if an action failed.
            if decision.events:
                self._post_events(key, obj, decision.events)

    async def _create(
        self, key: Key, owner: dict, job: LongContextJob, action: CreateWorkload, pod_annotations: dict[str, str]
    ) -> None:
        """Service, ConfigMap and Job at once (one round trip): every create is create-or-get, so a
        partial failure is completed by the retry."""
        workload = render_workload(job, action.layout, action.generation, self.config)
        add_pod_annotations(workload.job, pod_annotations)
        tabled = None
        if placement_wanted(job.spec, self.config):  # in the admission thread: it walks every cached node
            tabled = await asyncio.get_running_loop().run_in_executor(
                self._admission_thread,
                self.placement_tables.add,
                workload.config_map,
                workload.job["spec"]["template"],
                dict(self.cache.nodes),
                topology_levels(job.spec, self.config),
            )
        results = await asyncio.gather(
            *(self._call(self.kube.create_owned, o, owner) for o in workload.objects), return_exceptions=True
        )
        for result in results:
            if isinstance(result, (ApiException, NotOwned)):
                state = self._state(key)
                state.create_error = refusal(result)  # the next decision reports it
                state.name_taken = isinstance(result, NotOwned) and not result.transient  # ... and fails the job
                raise result  # retried by the worker, with backoff
            if isinstance(result, BaseException):
                raise result
        state = self._state(key)
        state.create_error, state.name_taken = None, False
        state.created = (action.generation, time.monotonic())
        state.tabled = (action.generation, tabled or frozenset())

    async def _place(self, key: Key, spec: LongContextJobSpec, generation: int) -> None:
        """Writes the placement annotation onto the generation's bound pods that lack their node's
        (placement.py); a pod whose node is not cached yet is placed when the node arrives. A
        refused write is logged: that rank orders its ring by its pod's labels after its wait."""
        pods = self.cache.generation_pods(key, generation)
        state = self._state(key)
        if state.tabled is None or state.tabled[0] != generation:  # created before this operator started
            state.tabled = (generation, await self._tabled_nodes(key))
        due, unknown = placements_due(pods, self.cache.nodes, topology_levels(spec, self.config), state.tabled[1])
        for node in unknown:
            self.awaiting_nodes.setdefault(node, set()).add(key)
        now = time.monotonic()
        due, state.placed = unechoed_placements(due, state.placed, now)
        results = await asyncio.gather(
            *(self._call(self.kube.annotate_pod, key[0], p.name, p.uid, PLACEMENT_ANNOTATION, p.value) for p in due),
            return_exceptions=True,
        )
        for placement, result in zip(due, results, strict=True):
            if isinstance(result, ApiException):
                log.warning("%s/%s: placement of pod %s not written: %s", *key, placement.name, result.reason)
            elif isinstance(result, BaseException):
                raise result
            else:
                state.placed[placement.uid] = (placement.value, now)

    async def _tabled_nodes(self, key: Key) -> frozenset[str]:
        """The nodes of the placement table in the job's ConfigMap (its current generation's), read
        once; none where it has no readable table (its pods then get the annotation)."""
        namespace, name = key
        try:
            config_map = await self._call(self.kube.read_config_map, namespace, config_map_name(name))
        except ApiException as e:
            log.warning("%s/%s: placement table not read: %s", *key, e.reason)
            return frozenset()
        return tabled_nodes(config_map_table(config_map))

    def _post_events(self, key: Key, owner: dict, events) -> None:
        """Posts Events in the background, after the job's earlier ones (their order is the story)."""
        state = self._state(key)
        previous = state.events

        async def post() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            for event in events:
                try:
                    await self._call(self.kube.post_event, owner, event.type, event.reason, event.message)
                except ApiException as e:  # e.g. the namespace is being deleted: the status has it all
                    log.warning("%s/%s: event %s not posted: %s", *key, event.reason, e.reason)

        state.events = asyncio.create_task(post())

    async def events_posted(self) -> None:
        """Waits for every Event posted so far (tests; the operator never needs to)."""
        await asyncio.gather(*(state.events for state in self.jobs.values() if state.events is not None))

    def _count_phase(self, key: Key) -> None:
        """The phase gauge follows the job's cached status (the newest of watched and written)."""
        self.phases.see(key, ((self.cache.jobs_of.get(key) or {}).get("status") or {}).get("phase"))

    def _state(self, key: Key) -> JobState:
        return self.jobs.setdefault(key, JobState())
