"""The supervisor of `run`'s tasks: a task that ends on its own stops the process loudly; the first
stop signal drains, the second exits at once."""

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
class _Supervised:
    name: str
    drains: bool
    stop: Callable[[], object] | None


class Supervisor:
    """The one owner of serve()'s tasks and of the stop signals.

    - A task that ends on its own (an exception, or a return) stops everything: one error line,
      every other task cancelled, exit 1.
    - The first SIGTERM or SIGINT sets ``draining``. Tasks started with ``drains=True`` (the tap)
      finish their in-flight work and return; the others (the metrics server, the poller) keep
      serving until then and are stopped after: exit 0.
    - A second signal cancels everything at once: exit 1.
    """

    def __init__(self) -> None:
        self.draining = asyncio.Event()
        self._abort = asyncio.Event()
        self._tasks: dict[asyncio.Task[None], _Supervised] = {}

    def start(
        self,
        name: str,
        coroutine: Coroutine[Any, Any, None],
        *,
        drains: bool = False,
        stop: Callable[[], object] | None = None,
    ) -> None:
        """Run ``coroutine``; ``stop`` asks it to end once draining is over (default: cancel)."""
        task = asyncio.create_task(_no_system_exit(coroutine), name=name)
        self._tasks[task] = _Supervised(name, drains, stop)

    def on_signal(self) -> None:
        if self.draining.is_set():
            log.warning("second stop signal: exiting now")
            self._abort.set()
        else:
            log.info("stopping")
            self.draining.set()

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
        failed = await self._watch(self.draining, lambda: False)
        if failed is None:
            failed = await self._watch(self._abort, self._drained)
        if failed is not None:
            self._report(failed)
            return EXIT_FAILED
        if self._abort.is_set():
            return EXIT_FAILED
        await self._stop_the_rest()
        log.info("stopped")
        return EXIT_OK

    async def _watch(
        self, until: asyncio.Event, done: Callable[[], bool]
    ) -> asyncio.Task[None] | None:
        """Wait for ``until`` or ``done()``; return the first task that ended when it should not."""
        waiter = asyncio.ensure_future(until.wait())
        try:
            while not until.is_set() and not done():
                running = {task for task in self._tasks if not task.done()}
                finished, _ = await asyncio.wait(
                    {*running, waiter}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in running & finished:
                    if not self._ended_as_planned(task):
                        return task
            return None
        finally:
            waiter.cancel()

    def _ended_as_planned(self, task: asyncio.Task[None]) -> bool:
        return (
            self.draining.is_set()
            and self._tasks[task].drains
            and not task.cancelled()
            and task.exception() is None
        )

    def _drained(self) -> bool:
        return all(task.done() for task, spec in self._tasks.items() if spec.drains)

    async def _stop_the_rest(self) -> None:
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

    def _report(self, task: asyncio.Task[None]) -> None:
        """One error line (JSON, on stderr) saying which task ended and why."""
        name = self._tasks[task].name
        error = None if task.cancelled() else task.exception()
        extra = {"task": name}
        if error is None:
            log.error("%s stopped unexpectedly; exiting", name, extra=extra)
        elif isinstance(error, OSError):  # a taken port, a refused bind: no traceback needed
            log.error("%s failed; exiting: %s", name, error, extra=extra)
        else:
            log.error(
                "%s failed; exiting: %s: %s",
                name,
                type(error).__name__,
                error,
                extra=extra,
                exc_info=error,
            )


async def _no_system_exit(coroutine: Coroutine[Any, Any, None]) -> None:
    """A library's ``sys.exit`` inside a task would escape the event loop; make it a failure."""
    try:
        await coroutine
    except SystemExit as exc:
        raise RuntimeError(f"exited with status {exc.code}") from None
