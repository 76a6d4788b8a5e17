"""Trials on Dask workers: a cluster of N worker processes on this machine, or an existing scheduler.

Only the process running the study talks to Ax and writes the database; a worker only trains
(`pipeline.search.trial.run_trial`) and sends the outcome back, so SQLite never sees two writers. Workers report when a
trial starts and each epoch as Dask events, which come back here as the study's progress events.
"""
from __future__ import annotations

import os
import queue
import signal
import socket
import time
from pathlib import Path
from typing import Any

from pipeline.config import DEFAULT_TRIALS_PER_GPU, WORKER_MEMORY_GIB
from pipeline.errors import ServerLost, UserError
from pipeline.search.trial import InProcessRunner, OnEvent, Outcome, TrialEpoch, TrialHandedBack, TrialJob, \
    TrialRunner, TrialRunning, trial_outcome

EVENTS = "robust-tune-trials"  # the Dask event topic workers report progress on


MAX_TRIALS_PER_GPU = 32
# Trials proposed beyond the ones training, waiting on the cluster for the next free worker: the search proposes
# while trials train, and a worker that ends a trial starts the next at once instead of waiting for Ax.
AHEAD = 1
# How many times one trial goes back to the cluster because its worker closed, before it counts as interrupted: a
# trial that makes every worker it runs on close (out of memory, say) is not handed round forever.
HAND_BACKS = 3

# Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in a worker's environment (to hand freed memory back to the
# system). Setting it at all turns off glibc's dynamic mmap threshold, so every tensor above 128 KiB is a fresh
# mmap, page-faulted in and unmapped again: a small-CNN trial trained at half speed on a worker (and in this
# process too, when started with it: docs/design/worker-speed.md). Workers keep glibc's defaults instead.
WORKER_MALLOC = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def max_workers(device: str, trials_per_gpu: int) -> tuple[int, str]:
    """The most local workers worth starting, and why: one per core, or `trials_per_gpu` per GPU."""
    import torch

    gpus = torch.cuda.device_count() if device != "cpu" else 0
    if gpus:
        return gpus * trials_per_gpu, f"{gpus} GPU(s) times --trials-per-gpu {trials_per_gpu}"
    cores = usable_cores()
    return cores, f"one trial per CPU core, and this machine has {cores}; use --scheduler for a larger cluster"


def default_workers(device: str = "auto", trials_per_gpu: int = DEFAULT_TRIALS_PER_GPU) -> tuple[int, str]:
    """How many trials train at once when --workers is not given, and why: `trials_per_gpu` per GPU; else one per
    CPU core, at most one per WORKER_MEMORY_GIB of free memory (each worker holds its own copy of the data)."""
    import psutil
    import torch

    gpus = torch.cuda.device_count() if device != "cpu" else 0
    if gpus:
        return gpus * trials_per_gpu, f"{trials_per_gpu} trial(s) on each of {gpus} GPU(s)"
    cores = usable_cores()
    by_memory = max(1, int(psutil.virtual_memory().available / 2**30 // WORKER_MEMORY_GIB))
    if by_memory < cores:
        return by_memory, f"one per {WORKER_MEMORY_GIB} GiB of free memory ({cores} cores)"
    return cores, f"one per CPU core ({cores})"


def check_options(workers: int | None, scheduler: str | None, trials_per_gpu: int, device: str = "auto",
                  oversubscribe: bool = False) -> None:
    """Refuse bad parallel options in one line, before anything is loaded or stored; more local workers than
    the machine runs at once only with `oversubscribe` (a benchmark of trials sharing the device)."""
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be 1 or more, not {workers} (1 trains in this process, one trial at a time)")
    if not 1 <= trials_per_gpu <= MAX_TRIALS_PER_GPU:
        raise UserError(f"--trials-per-gpu must be between 1 and {MAX_TRIALS_PER_GPU}, not {trials_per_gpu} "
                        "(more trials than that do not fit one GPU's memory)")
    if workers is not None and scheduler:
        raise UserError("give --workers (a cluster on this machine) or --scheduler (an existing one), not both")
    if scheduler is not None:
        from distributed.comm import parse_address, parse_host_port

        try:
            protocol, location = parse_address(scheduler, strict=True)
            host, port = parse_host_port(location)
            if protocol not in ("tcp", "tls", "ws", "wss", "ucx") or not host or not port:
                raise ValueError
        except (ValueError, TypeError):
            raise UserError(f"malformed Dask scheduler address {scheduler!r}: expected PROTOCOL://HOST:PORT, "
                            "e.g. tcp://10.0.0.5:8786") from None
    if workers is not None and not scheduler and not oversubscribe:
        most, why = max_workers(device, trials_per_gpu)
        if workers > most:
            raise UserError(f"--workers must be at most {most}, not {workers} ({why})")


def check_scheduler_reachable(scheduler: str, timeout: float = 10.0) -> None:
    """Refuse a Dask scheduler that accepts no connection, before a study is created or locked for it: a
    plain TCP connection to its address (the Dask handshake follows when trials start)."""
    from distributed.comm import parse_address, parse_host_port

    protocol, location = parse_address(scheduler, strict=True)
    if protocol not in ("tcp", "tls", "ws", "wss"):
        return  # other transports are reached only through Dask
    host, port = parse_host_port(location)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise UserError(f"cannot reach the Dask scheduler at {scheduler}: {error.strerror or error}; "
                        "nothing was stored") from None


def worker_devices(workers: int, gpus: int) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES per local worker: the GPUs in turn, so that every GPU gets a worker before any gets a
    second (--workers 4 on 4 GPUs: one each, whatever --trials-per-gpu allows); None without GPUs."""
    return [str(i % gpus) if gpus else None for i in range(workers)]


def train_on_worker(job: TrialJob) -> Outcome:
    """The task a worker runs: one trial, reported as it starts and after each epoch."""
    from distributed import get_worker

    from pipeline.training.trainer import EpochEnd

    worker, study = get_worker(), job.study.name
    worker.log_event(EVENTS, {"trial": job.trial_index, "study": study, "name": str(worker.name),
                              "started": time.time()})

    def progress(event: Any) -> None:
        if isinstance(event, EpochEnd):
            worker.log_event(EVENTS, {"trial": job.trial_index, "study": study, "epoch": event.epoch,
                                      "epochs": event.epochs})

    return trial_outcome(job, progress)


def worker_logging(log_file: str) -> dict[str, Any]:
    """Local workers' logging (Dask's `logging` config, set in their environment before they start): their
    libraries' warnings and errors go to the study's log file, never the terminal, where a worker left behind by
    a killed process would otherwise print its scheduler's loss as a traceback."""
    handler = {"class": "logging.FileHandler", "filename": str(Path(log_file).resolve()), "formatter": "worker"}
    return {"version": 1, "disable_existing_loggers": False, "handlers": {"file": handler},
            "formatters": {"worker": {"format": "%(asctime)s %(levelname)s %(name)s (a worker): %(message)s"}},
            "loggers": {name: {"level": "WARNING", "handlers": ["file"], "propagate": False}
                        for name in ("distributed", "tornado")}}


def local_cluster(workers: int, device: str) -> Any:
    """A cluster of `workers` worker processes on this machine, one thread each, named 0..N-1: what
    LocalCluster builds, with each worker's own environment (its GPU; the libraries' share of the cores; torch
    computes each trial on the trial's own thread count, which the trainer sets)."""
    import torch
    from distributed import Nanny, Scheduler, SpecCluster

    threads = str(max(1, (os.cpu_count() or 1) // workers))
    gpus = torch.cuda.device_count() if device != "cpu" else 0
    specs = {}
    for name, gpu in enumerate(worker_devices(workers, gpus)):
        env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads} | ({"CUDA_VISIBLE_DEVICES": gpu} if gpu else {})
        specs[name] = {"cls": Nanny, "options": {"nthreads": 1, "name": name, "env": env, "host": "127.0.0.1"}}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None, "host": "127.0.0.1"}}
    return SpecCluster(workers=specs, scheduler=scheduler,
                       silence_logs=False)


def trial_runner(workers: int | None = None, scheduler: str | None = None,
                 trials_per_gpu: int = DEFAULT_TRIALS_PER_GPU, device: str = "auto",
                 log_file: str = "runs/robust-tune.log", oversubscribe: bool = False) -> TrialRunner:
    """Where a study's trials train: the cluster at `scheduler`; else a local Dask cluster of `workers` processes
    (default: `default_workers`); this process where that is one. Bad options are a UserError here, before anything
    is loaded or stored."""
    check_options(workers, scheduler, trials_per_gpu, device, oversubscribe)
    if scheduler:
        check_scheduler_reachable(scheduler)
        return DaskRunner(device, log_file, None, scheduler)
    workers = workers or default_workers(device, trials_per_gpu)[0]
    if workers == 1:
        return InProcessRunner()
    return DaskRunner(device, log_file, workers)


class DaskRunner:
    """Up to `capacity` trials at once on Dask workers, and `ahead` more waiting for the first free one: submit one,
    wait until some end. On an existing scheduler the capacity follows the workers that join and leave; the trial
    of a worker that leaves cleanly goes back to the scheduler, which sends it to another, where it trains again from
    its start (Dask does so by itself within its allowed failures, 3 by default; `hand_back` where it allows none)."""

    ahead = AHEAD

    def __init__(self, device: str, log_file: str, workers: int | None = None, scheduler: str | None = None) -> None:
        self.device, self.log_file = device, log_file
        self.workers, self.scheduler = workers or 0, scheduler  # with a scheduler, its workers: none of ours
        self.futures: dict[Any, TrialJob] = {}  # future -> its job
        self.events: queue.Queue = queue.Queue()  # filled by Dask's thread, emptied by the study loop
        self.threads = 0  # a scheduler's workers' threads when last asked
        self.filled_at = 0  # the capacity when a trial was last submitted
        self.trained_on: dict[tuple[str, int], str] = {}  # (study, trial) -> the worker it started on last
        self.handed_back: dict[tuple[str, int], int] = {}  # (study, trial) -> times it went back to the cluster
        self.client: Any = None
        self.cluster: Any = None

    @property
    def capacity(self) -> int:
        """How many trials train at once: the local cluster's workers, or the threads of the scheduler's workers now
        (at least one: a trial then waits for a worker to join); none before a scheduler is connected."""
        if self.scheduler is None:
            return self.workers
        if self.client is not None and self.client.status == "running":
            try:
                self.threads = sum(self.client.nthreads().values())
            except OSError:  # the scheduler went away: the wait says so (check_connected)
                pass
        return max(1, self.threads) if self.client is not None else 0

    def __enter__(self) -> DaskRunner:
        import dask
        from distributed import Client

        from pipeline.library_logs import quiet_libraries

        quiet_libraries(self.log_file)  # again, now that distributed has attached its own stderr handler
        # On the local cluster (its scheduler runs in this process, with this configuration) a worker that dies
        # fails its task at once (KilledWorker) instead of Dask retrying it unseen: the study marks the trial
        # interrupted and runs its parameters again, as after a killed run; an existing scheduler keeps its own
        # settings. The scheduler keeps a trial proposed ahead until a worker is free, rather than queuing it behind
        # a running one on a busy worker while another worker idles.
        dask.config.set({"distributed.scheduler.allowed-failures": 0,
                         "distributed.scheduler.worker-saturation": 1.0,
                         "distributed.nanny.pre-spawn-environ.DASK_LOGGING": repr(worker_logging(self.log_file)),
                         **WORKER_MALLOC})
        self.cluster, self.client = None, None
        if self.scheduler:
            try:
                self.client = Client(self.scheduler, timeout="20s")
            except (OSError, TimeoutError) as error:
                raise UserError(f"cannot reach the Dask scheduler at {self.scheduler}: {error}") from None
            self.client.subscribe_topic(EVENTS, lambda event: self.events.put(event[1]))
        return self  # a local cluster starts with the first trial: a study with none to run starts no process

    def start(self) -> Any:
        """The client, the local cluster started first if it is not yet."""
        if self.client is not None:
            return self.client
        from distributed import Client

        # A nanny copies its workers' environment into this process's, and an existing variable wins over the
        # config: an earlier cluster's logging (another log file) would otherwise be this one's too.
        os.environ.pop("DASK_LOGGING", None)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # workers inherit it: Ctrl-C is ours alone
        try:
            self.cluster = local_cluster(self.workers, self.device)
        finally:
            signal.signal(signal.SIGINT, previous)
        self.client = Client(self.cluster)
        self.client.subscribe_topic(EVENTS, lambda event: self.events.put(event[1]))
        # The search's own arithmetic here (Ax's model) gets the cores the workers leave: on a machine they fill,
        # one thread, so that it does not make their trials wait on oversubscribed cores.
        import torch

        self.threads_before = torch.get_num_threads()
        torch.set_num_threads(max(1, usable_cores() - self.workers))
        return self.client

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            import torch

            self.cluster.close()
            torch.set_num_threads(self.threads_before)

    def submit(self, job: TrialJob) -> None:
        client = self.start()
        self.check_connected()
        future = client.submit(train_on_worker, job, key=f"trial-{job.trial_index}-{time.time_ns()}", pure=False)
        self.futures[future] = job
        self.filled_at = self.capacity

    def check_connected(self) -> None:
        """ServerLost when the client has lost its scheduler: Dask then cancels every task it had sent, and the
        trials they ran can only run again once a scheduler is back."""
        if self.client is not None and self.client.status != "running":  # none yet: nothing sent to lose
            where = f"at {self.scheduler}" if self.scheduler else "of the local cluster"
            raise ServerLost(f"lost the Dask scheduler {where} (the client's connection to it closed)")

    def wait(self, on_event: OnEvent) -> list[Outcome]:
        """Outcomes of the trials that ended; progress events are passed on while waiting."""
        from concurrent.futures import CancelledError

        from distributed import wait
        from distributed.scheduler import KilledWorker

        while True:
            try:
                done, _ = wait(list(self.futures), timeout=0.25, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            except CancelledError:  # some were cancelled (Dask raises for them): told apart below
                done = {future for future in self.futures if future.status != "pending"}
            self._pass_on_events(on_event)
            self.check_connected()
            if done:
                break
            if self.scheduler and self.capacity > self.filled_at:  # a worker joined: room for another trial now
                return []
        outcomes = []
        for future in done:
            job = self.futures.pop(future)
            trial_index, study = job.trial_index, job.study.name
            if future.status == "finished":
                outcome = future.result()
            elif future.status == "cancelled":
                outcome = Outcome(trial_index, lost="its task was cancelled", study=study)
            elif isinstance(error := future.exception(), KilledWorker) and self.hand_back(job, error):
                continue
            elif isinstance(error, KilledWorker):
                outcome = Outcome(trial_index, lost="its worker process died", study=study)
            elif isinstance(error, UserError):
                raise error
            else:  # the task itself broke on the way (e.g. could not be unpickled on the worker)
                outcome = Outcome(trial_index, error=f"{type(error).__name__}: {error}", study=study)
            outcomes.append(outcome)
        return outcomes

    def hand_back(self, job: TrialJob, error: Any) -> bool:
        """Submit `job` again when the worker its task failed with (`error`, Dask's KilledWorker) closed rather than
        died: it logged its closing, as `dask worker` does when stopped with Ctrl-C or SIGTERM (a batch system's end
        of a job), which a scheduler that allows no failures (the local cluster's, and one set up so) counts as a
        failure. At most HAND_BACKS times a trial; whether it was submitted again."""
        worker, key = getattr(error, "last_worker", None), (job.study.name, job.trial_index)
        if worker is None or self.handed_back.get(key, 0) >= HAND_BACKS:
            return False
        try:
            events = self.client.get_events(worker.address)
        except OSError:
            return False
        if not any(isinstance(event, dict) and event.get("action") == "closing-worker" for _, event in events):
            return False
        self.handed_back[key] = self.handed_back.get(key, 0) + 1
        self.submit(job)  # the line saying so comes when it starts on another worker
        return True

    def _pass_on_events(self, on_event: OnEvent) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            if "started" in event:
                # Dask sets "worker" to its address
                key, worker = (event.get("study", ""), event["trial"]), event["name"]
                if self.trained_on.get(key, worker) != worker:  # the scheduler sent it elsewhere: its worker left
                    on_event(TrialHandedBack(event["trial"], self.trained_on[key], worker, event.get("study", "")))
                self.trained_on[key] = worker
                on_event(TrialRunning(event["trial"], worker, event.get("study", "")))
            else:
                on_event(TrialEpoch(event["trial"], event["epoch"], event["epochs"], event.get("study", "")))
