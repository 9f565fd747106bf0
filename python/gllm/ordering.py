"""Running jobs: ordered on the caller's CUDA stream through gllm_stream_order_on's counters
(replies claimed later, as Jobs), or synchronously after synchronising the stream."""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _lib, errors
from .connection import Connection
from .records import JobResult, Limits, from_struct

_EAGAIN = -11


class Job:
    """A job ordered on a CUDA stream (see Client): its reply, claimed on demand."""

    def __init__(self, client: Any, runner: "JobRunner", job_id: int):
        self.client, self.id = client, job_id
        self._runner = runner
        self._result: Optional[JobResult] = None
        self._raw: Any = None                # the claimed gllm_job_result, until result()
        self._error: Optional[BaseException] = None
        self.run: List["Job"] = [self]   # the last job of a run: every job of it, in order

    def result(self) -> JobResult:
        """Waits for gllmd's reply (not for the stream) and returns the job's timings;
        raises its error, or that of an earlier ordered job of the client claimed on the
        way (replies are claimed oldest first)."""
        r = self._runner
        with r.conn.lock:
            while not self.done() and self.id in r.pending:
                r.claim(r.pending[0], True)
        if self._error is not None:
            raise self._error
        if self._result is None and self._raw is not None:
            self._result, self._raw = from_struct(self._raw, JobResult), None
        assert self._result is not None
        return self._result

    def done(self) -> bool:
        """Whether the reply has been claimed."""
        return self._result is not None or self._raw is not None or self._error is not None


class JobRunner:
    """One client's job submission: the ordered jobs whose replies are unclaimed, oldest
    first, and whether CUDA jobs are ordered on the stream at all."""

    def __init__(self, client: Any, conn: Connection, share: str):
        self._client = client                 # what Job.client names
        self.conn = conn
        self.pending: List[int] = []          # ordered jobs whose replies are unclaimed
        self._jobs: Dict[int, Job] = {}       # their Jobs, until claimed
        self._share = share
        self.enabled = True
        self._max_inflight: Optional[int] = None

    @property
    def ordered(self) -> bool:
        """Whether jobs on CUDA tensors are ordered on the stream (GPU-side waits and
        signals): gllmd shares CUDA memory and the caller has not turned it off."""
        return self._share == "cuda_vmm_fd" and self.enabled

    def run(self, jobs: Sequence[Tuple[str, Any]], any_cuda: bool, stream: Any) -> Any:
        """Runs jobs (C function name, params) in order: ordered on the stream as one run
        (the first waits for the stream, the last signals it) when they touch CUDA tensors
        and gllmd can order them; else synchronously, after synchronising the stream.
        Returns the last job's Job or JobResult."""
        if any_cuda and self.ordered:
            return self._ordered_run(jobs, stream)
        if stream is not None and hasattr(stream, "synchronize"):
            stream.synchronize()
        elif any_cuda:
            import torch
            torch.cuda.current_stream().synchronize()
        res = None
        for name, params in jobs:
            res = _lib.sized(_lib.GllmJobResult)
            self.conn.call(name, ctypes.byref(params), ctypes.byref(res))
        return from_struct(res, JobResult)

    @staticmethod
    def _stream_handle(stream: Any) -> Any:
        import torch
        s = stream if stream is not None else torch.cuda.current_stream()
        return s, s.cuda_stream

    def _ordered_run(self, jobs: Sequence[Tuple[str, Any]], stream: Any) -> Job:
        lib = _lib.lib()
        s, handle = self._stream_handle(stream)
        conn = self.conn
        with conn.lock:
            self.reap(block=False)
            # gllmd refuses a job past max_inflight (BUSY) without writing its signal: the
            # stream would wait for ever. Stay within it.
            if self._max_inflight is None:      # hello's: fixed per connection
                lim = _lib.sized(_lib.GllmLimits)
                conn.call("gllm_client_limits", ctypes.byref(lim))
                self._max_inflight = from_struct(lim, Limits).max_inflight
            room = self._max_inflight - len(jobs)
            while self.pending and len(self.pending) > room:
                self.claim(self.pending[0], True)
            wait, signal = _lib.GllmCounter(), _lib.GllmCounter()
            conn.clear_message()
            # The run's device is its stream's: the wait's counter goes in that device's
            # memory, which its GPU polls faster than an arena.
            dev = getattr(getattr(s, "device", None), "index", None)
            conn.check("gllm_stream_order_on", lib.gllm_stream_order_on(
                conn.handle, handle, -1 if dev is None else int(dev), ctypes.byref(wait),
                ctypes.byref(signal)))
            jobs[0][1].wait = wait
            jobs[-1][1].signal = signal
            job = ctypes.c_uint64()
            run: List[Job] = []
            for name, params in jobs:
                r = getattr(lib, name + "_submit")(conn.handle, ctypes.byref(params),
                                                   ctypes.byref(job))
                if r < 0:
                    # the stream waits for the run's signal: nothing will write it now
                    lib.gllm_counter_write(ctypes.byref(signal))
                    conn.check(name, r)
                j = Job(self._client, self, job.value)
                run.append(j)
                self.pending.append(j.id)
                self._jobs[j.id] = j
            run[-1].run = run
            return run[-1]

    def claim(self, job_id: int, block: bool) -> bool:
        """Claims one job's reply into its Job; False while it runs (block=False)."""
        lib = _lib.lib()
        res = _lib.sized(_lib.GllmJobResult)
        fn = lib.gllm_job_wait if block else lib.gllm_job_poll
        r = fn(self.conn.handle, job_id, ctypes.byref(res))
        if r == _EAGAIN and not block:   # still running
            return False
        self.pending.remove(job_id)
        j = self._jobs.pop(job_id, None)
        if r < 0:
            err = errors.from_code(r, "job", self.conn.last_message())
            if j is not None:
                j._error = err
            raise err
        if j is not None:
            j._raw = res           # made into a JobResult when asked for
        return True

    def reap(self, block: bool) -> None:
        """Claims finished ordered jobs, oldest first (a connection's jobs on a device finish
        in order); block: at least the oldest. Raises the first failure found."""
        first = True
        while self.pending:
            if not self.claim(self.pending[0], block and first):
                return
            first = False

    def synchronize(self) -> None:
        """Claims every ordered job's reply (not the stream's work); raises the first error."""
        with self.conn.lock:
            while self.pending:
                self.claim(self.pending[0], True)

    def drain(self) -> None:
        """Claims every reply, dropping errors: before disconnecting, since a stream may
        still wait on the library's counters, which disconnecting frees. Their errors were
        the caller's to claim."""
        with self.conn.lock:
            while self.pending:
                try:
                    self.claim(self.pending[0], True)
                except errors.Error:
                    pass
