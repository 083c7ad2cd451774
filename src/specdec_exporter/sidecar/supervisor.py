"""The supervisor of `run`'s components: after start-up only a signal ends the process. A
component that fails is restarted with a backoff and counted; the first stop signal drains, the
second exits at once."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("specdec_exporter")

EXIT_OK, EXIT_FAILED = 0, 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_TIMEOUT = 5
"""Seconds the metrics server and poller get to stop once the tap has drained."""


@dataclass(frozen=True)
class Backoff:
    """Seconds before a failed component runs again: ``first``, doubled on each failure in a
    row up to ``most``; back to ``first`` once a run lasted ``steady`` seconds."""

    first: float = 0.5
    most: float = 30.0
    steady: float = 60.0

    def after(self, previous: float | None, ran_for: float) -> float:
        if previous is None or ran_for >= self.steady:
            return self.first
        return min(previous * 2, self.most)


Starter = Callable[[], Coroutine[Any, Any, None]]
"""Makes a fresh run of a component (a coroutine can be awaited once; a restart needs another)."""


@dataclass(frozen=True)
class _Supervised:
    name: str
    run: Starter
    drains: bool
    stop: Callable[[], object] | None


class Supervisor:
    """The one owner of serve()'s components and of the stop signals.

    - A component that ends on its own (an exception, or a return) is logged (one error line
      with its traceback), counted in ``restarts`` and run again after a backoff: never the end
      of the process, and never of another component (the tap keeps forwarding whatever the
      poller does). Bind and configuration errors happen before, in start-up, with their codes.
    - The first SIGTERM or SIGINT sets ``draining``. Components started with ``drains=True``
      (the tap) finish their in-flight work and return; the others (the metrics server, the
      poller) keep serving until then and are stopped after: exit 0. A draining component that
      fails instead of returning: exit 1.
    - A second signal cancels everything at once: exit 1.
    """

    def __init__(self, backoff: Backoff = Backoff()) -> None:
        self.draining = asyncio.Event()
        self.restarts: dict[str, int] = {}
        """Restarts per component name, each created at 0 when the component is started."""
        self._backoff = backoff
        self._abort = asyncio.Event()
        self._stopping = asyncio.Event()
        self._drain_failed = False
        self._tasks: dict[asyncio.Task[None], _Supervised] = {}
        self._drain_hooks: list[Callable[[], object]] = []

    def on_drain(self, hook: Callable[[], object]) -> None:
        """Call ``hook`` when draining starts (the first stop signal)."""
        self._drain_hooks.append(hook)

    def start(
        self,
        name: str,
        run: Starter,
        *,
        drains: bool = False,
        stop: Callable[[], object] | None = None,
    ) -> None:
        """Keep ``run()`` running; ``stop`` asks it to end once draining is over (default:
        cancel)."""
        spec = _Supervised(name, run, drains, stop)
        self.restarts[name] = 0
        self._tasks[asyncio.create_task(self._keep(spec), name=name)] = spec

    def on_signal(self) -> None:
        if self.draining.is_set():
            log.warning("second stop signal: exiting now")
            self._abort.set()
        else:
            log.info("stopping")
            self.draining.set()
            for hook in self._drain_hooks:
                hook()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for number in STOP_SIGNALS:
            loop.add_signal_handler(number, self.on_signal)
        try:
            return await self._supervise()
        finally:
            for number in STOP_SIGNALS:
                loop.remove_signal_handler(number)
            await self._cancel_all()

    async def _supervise(self) -> int:
        await _first_of(self.draining.wait(), self._abort.wait())
        drained = [task for task, spec in self._tasks.items() if spec.drains]
        if drained and not self._abort.is_set():
            await _first_of(asyncio.wait(drained), self._abort.wait())
        if self._abort.is_set():
            return EXIT_FAILED
        await self._stop_the_rest()
        if self._drain_failed:
            return EXIT_FAILED
        log.info("stopped")
        return EXIT_OK

    async def _keep(self, spec: _Supervised) -> None:
        """Run ``spec`` until it ends as planned: restart it, with a backoff, whenever it ends
        otherwise. Cancellation (a second signal, or the end) is the only other way out."""
        loop = asyncio.get_running_loop()
        delay: float | None = None
        while True:
            started = loop.time()
            error: BaseException | None = None
            try:
                await _no_system_exit(spec.run())
            except asyncio.CancelledError as exc:
                current = asyncio.current_task()
                if current is None or current.cancelling():  # cancelled by us: the end
                    raise
                error = exc  # a cancellation from inside the component is its failure
            except Exception as exc:
                error = exc
            if self._stopping.is_set() or (self.draining.is_set() and spec.drains):
                if error is not None:
                    self._drain_failed = self._drain_failed or spec.drains
                    _log_failure(spec.name, error, "while stopping")
                return
            delay = self._backoff.after(delay, loop.time() - started)
            self.restarts[spec.name] += 1
            _log_failure(spec.name, error, f"restarting in {delay:g} s", restarts=self.restarts)
            # A drain that starts during the backoff leaves the tap nothing to drain; a stop
            # leaves the others nothing to serve: neither waits for the backoff to end.
            ends = self.draining if spec.drains else self._stopping
            await _first_of(asyncio.sleep(delay), ends.wait())
            if ends.is_set():
                return

    async def _stop_the_rest(self) -> None:
        self._stopping.set()
        running = [task for task in self._tasks if not task.done()]
        for task in running:
            stop = self._tasks[task].stop
            if stop is None:
                task.cancel()
            else:
                stop()
        if running:
            await asyncio.wait(running, timeout=STOP_TIMEOUT)

    async def _cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _log_failure(
    name: str, error: BaseException | None, then: str, restarts: dict[str, int] | None = None
) -> None:
    """One error line (JSON, on stderr) saying which component ended, why, and what happens."""
    extra: dict[str, object] = {"task": name}
    if restarts is not None:
        extra["restarts"] = restarts[name]
    if error is None:
        log.error("%s stopped unexpectedly; %s", name, then, extra=extra)
    elif isinstance(error, OSError):  # a refused socket call: no traceback needed
        log.error("%s failed; %s: %s", name, then, error, extra=extra)
    else:
        log.error(
            "%s failed; %s: %s: %s",
            name,
            then,
            type(error).__name__,
            error,
            extra=extra,
            exc_info=error,
        )


async def _first_of(*waits: Coroutine[Any, Any, Any]) -> None:
    """Wait until the first of ``waits`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _no_system_exit(coroutine: Coroutine[Any, Any, None]) -> None:
    """A library's ``sys.exit`` inside a task would escape the event loop; make it a failure."""
    try:
        await coroutine
    except SystemExit as exc:
        raise RuntimeError(f"exited with status {exc.code}") from None
