"""The stream-ordered job path (ordering.JobRunner) against a fake library: the CPU backend
never orders jobs on a stream, so without this only a CUDA gllmd would run it. Checks the
run's counters, claiming replies oldest first, staying within max_inflight, and that a
refused submit releases the stream."""
import threading

import pytest

import gllm
from gllm import _lib, errors, ordering

pytest.importorskip("torch")         # JobRunner names the stream through torch


def _obj(ref):
    return ref._obj                   # the struct a ctypes.byref() points to


class FakeLib:
    """The library calls JobRunner makes; the rest (error names) from the real one."""

    def __init__(self, max_inflight=8, fail_submit=None, fail_job=None):
        self.real = _lib.lib()
        self.calls = []
        self.max_inflight = max_inflight
        self.fail_submit, self.fail_job = fail_submit, fail_job
        self.next_id, self.counter_value = 100, 0
        self.submitted = []           # (job id, wait value, signal value)

    def __getattr__(self, name):
        return getattr(self.real, name)

    def gllm_client_limits(self, h, ref):
        _obj(ref).max_inflight = self.max_inflight
        return 0

    def gllm_stream_order_on(self, h, stream, dev, wait_ref, signal_ref):
        self.calls.append(("order", stream, dev))
        wait, signal = _obj(wait_ref), _obj(signal_ref)
        wait.memory, wait.value = 0x10, self.counter_value + 1
        signal.memory, signal.value = 0x20, self.counter_value + 2
        self.counter_value += 2
        return 0

    def _submit(self, name, h, params_ref, job_ref):
        p = _obj(params_ref)
        if self.fail_submit == len(self.submitted):
            self.calls.append(("refused", name))
            return errors.CODES["PARAM"]
        _obj(job_ref).value = self.next_id
        self.submitted.append((self.next_id, p.wait.value, p.signal.value))
        self.calls.append(("submit", name, self.next_id))
        self.next_id += 1
        return 0

    def gllm_attention_submit(self, *a):
        return self._submit("attention", *a)

    def gllm_kv_append_submit(self, *a):
        return self._submit("kv_append", *a)

    def gllm_attention_decode_submit(self, *a):
        return self._submit("decode", *a)

    def gllm_job_wait(self, h, job, res_ref):
        self.calls.append(("wait", job))
        if job == self.fail_job:
            return errors.CODES["DTYPE"]
        _obj(res_ref).kernel_ns = job
        return 0

    def gllm_job_poll(self, h, job, res_ref):
        self.calls.append(("poll", job))
        return -11                    # still running

    def gllm_counter_write(self, ref):
        self.calls.append(("counter_write", _obj(ref).value))
        return 0


class FakeConn:
    """The Connection's calls, made on the fake library."""

    def __init__(self, lib):
        self.lib, self.lock, self.handle = lib, threading.RLock(), 0x1234

    def call(self, name, *args):
        return self.check(name, getattr(self.lib, name)(self.handle, *args))

    def check(self, name, r):
        if r < 0:
            raise errors.from_code(r, name, "the fake's message")
        return r

    def clear_message(self):
        pass

    def last_message(self):
        return "the fake's message"


class Stream:
    cuda_stream = 0xABC

    class device:
        index = 0


@pytest.fixture
def fake(monkeypatch):
    def make(**kw):
        lib = FakeLib(**kw)
        monkeypatch.setattr(_lib, "lib", lambda: lib)
        return lib, ordering.JobRunner("the client", FakeConn(lib), "cuda_vmm_fd")
    return make


def _params(n):
    return [(name, _lib.sized(_lib.GllmAttentionParams)) for name in n]


def test_a_run_waits_first_and_signals_last(fake):
    lib, runner = fake()
    assert runner.ordered
    job = runner.run(_params(["gllm_kv_append", "gllm_attention_decode"]), True, Stream())
    assert isinstance(job, gllm.Job) and job.client == "the client" and not job.done()
    assert lib.calls[0] == ("order", 0xABC, 0)
    # the first job waits for the stream's "ready", the last signals "done", no other
    assert lib.submitted == [(100, 1, 0), (101, 0, 2)]
    assert [j.id for j in job.run] == [100, 101] and runner.pending == [100, 101]
    res = job.result()                        # claims the oldest first
    assert [c for c in lib.calls if c[0] == "wait"] == [("wait", 100), ("wait", 101)]
    assert isinstance(res, gllm.JobResult) and res.kernel_ns == 101
    assert job.run[0].done() and runner.pending == []


def test_stays_within_max_inflight(fake):
    lib, runner = fake(max_inflight=2)
    first = runner.run(_params(["gllm_attention"]), True, Stream())
    runner.run(_params(["gllm_attention"]), True, Stream())
    assert runner.pending == [100, 101] and not first.done()
    # a third would pass max_inflight (gllmd refuses it without writing its signal, and
    # the stream would wait for ever): the oldest reply is claimed before it is submitted
    runner.run(_params(["gllm_attention"]), True, Stream())
    i_wait = lib.calls.index(("wait", 100))
    i_submit = lib.calls.index(("submit", "attention", 102))
    assert i_wait < i_submit and first.done() and runner.pending == [101, 102]


def test_refused_submit_releases_the_stream(fake):
    lib, runner = fake(fail_submit=1)
    with pytest.raises(gllm.ParamError):
        runner.run(_params(["gllm_kv_append", "gllm_attention_decode"]), True, Stream())
    # the stream waits for the run's signal (value 2): the runner writes it itself
    assert lib.calls[-1] == ("counter_write", 2)
    assert runner.pending == [100]            # the append went in; its reply is still owed


def test_a_failed_job_raises_from_its_result_and_later_calls(fake):
    lib, runner = fake(fail_job=100)
    bad = runner.run(_params(["gllm_attention"]), True, Stream())
    good = runner.run(_params(["gllm_attention"]), True, Stream())
    with pytest.raises(gllm.DTypeError) as e:
        good.result()                          # claims the failed one on the way
    assert e.value.message == "the fake's message"
    with pytest.raises(gllm.DTypeError):
        bad.result()
    assert good.result().kernel_ns == 101
    # drain (before disconnecting) claims everything and swallows the errors
    lib.fail_job = 102
    runner.run(_params(["gllm_attention"]), True, Stream())
    runner.drain()
    assert runner.pending == []


def test_host_ordered_when_turned_off(fake):
    lib, runner = fake()
    runner.enabled = False
    assert not runner.ordered
    synced = []

    class SyncStream(Stream):
        def synchronize(self):
            synced.append(True)
    lib.gllm_attention = lambda h, p, res: (setattr(_obj(res), "kernel_ns", 7), 0)[1]
    res = runner.run(_params(["gllm_attention"]), True, SyncStream())
    assert synced == [True] and isinstance(res, gllm.JobResult) and res.kernel_ns == 7
    assert not any(c[0] == "order" for c in lib.calls)
