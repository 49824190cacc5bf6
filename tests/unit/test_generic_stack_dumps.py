"""The generic layer's fifth shape: a dump of a live process's stacks showing it blocked.

Nobody dumps the stacks of a process that works: py-spy's and faulthandler's dumps of a live
process are taken, by hand or by a watchdog, because it hangs. The dump is read as a hang
when a thread is blocked in a collective, or the main thread in a wait on its peers or its
children; a dump of threads doing something else says nothing. These run the generic layer
alone (no signatures).
"""

from __future__ import annotations

from support.generic import generic_scan, loud, only, text_of

from sigwatch.model import Severity

BLOCKED = "generic_blocked_stack"


def _blocked(text: str) -> dict[str, str]:
    d = only(generic_scan(text), BLOCKED)
    assert Severity.WARNING == d.severity
    return dict(d.captures)


class TestPySpyDumps:
    def test_the_main_thread_in_a_broadcast_is_a_hang(self) -> None:
        captures = _blocked(text_of('''
            Thread 835995 (active): "MainThread"
                broadcast (torch/distributed/distributed_c10d.py:1191)
                _aggregate_total_loss (deepspeed/runtime/pipe/engine.py:540)
                train_batch (deepspeed/runtime/pipe/engine.py:330)
                train (megatron/training.py:851)
                <module> (pretrain_gpt.py:239)
            '''))

        assert {"frame": "torch/distributed/distributed_c10d.py:1191 in broadcast",
                "thread": "MainThread"} == captures

    def test_a_collective_a_few_frames_below_the_innermost_counts(self) -> None:
        """The op dispatcher's ``__call__`` sits above the collective that blocks."""
        captures = _blocked(text_of('''
            Thread 59633 (active+gil): "MainThread"
                __call__ (torch/_ops.py:1209)
                all_reduce (vllm/distributed/device_communicators/symm_mem.py:148)
                all_reduce (vllm/distributed/parallel_state.py:132)
            '''))

        assert "vllm/distributed/device_communicators/symm_mem.py:148 in all_reduce" == (
            captures["frame"])

    def test_the_main_thread_joining_a_child_is_a_hang_an_idle_helper_thread_is_not(
            self) -> None:
        """An asynchronous checkpoint save waits on its writer process; the pin-memory thread
        sits in ``select`` as it always does (it is not what the dump shows)."""
        captures = _blocked(text_of('''
            Thread 36380 (idle): "MainThread"
                poll (multiprocessing/popen_fork.py:27)
                wait (multiprocessing/popen_fork.py:43)
                join (multiprocessing/process.py:149)
                save (core/dist_checkpointing/serialization.py:396)
            Thread 38606 (idle): "Thread-2 (_pin_memory_loop)"
                select (selectors.py:415)
                wait (multiprocessing/connection.py:947)
                _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:61)
            '''))

        assert {"frame": "multiprocessing/popen_fork.py:27 in poll",
                "thread": "MainThread"} == captures

    def test_a_main_thread_computing_is_not_a_hang(self) -> None:
        assert [] == loud(generic_scan(text_of('''
            Thread 835990 (active): "MainThread"
                forward (model.py:88)
                train (megatron/training.py:915)
                <module> (pretrain_gpt.py:239)
            ''')))

    def test_a_helper_thread_waiting_is_not_a_hang(self) -> None:
        """Every idle worker thread waits, in a queue or on a socket (a ``recv`` outside a
        distributed library); only the main thread's wait is the process's."""
        assert [] == loud(generic_scan(text_of('''
            Thread 40001 (idle): "ThreadPoolExecutor-0_0"
                wait (threading.py:320)
                get (queue.py:171)
                _worker (concurrent/futures/thread.py:81)
            Thread 40002 (idle): "QueueFeederThread"
                recv (multiprocessing/connection.py:250)
                _feed (multiprocessing/queues.py:231)
            Thread 40000 (active): "MainThread"
                forward (model.py:88)
            ''')))


class TestFaulthandlerDumpsOfALiveProcess:
    def test_a_watchdog_dump_with_a_thread_in_a_barrier(self) -> None:
        """``faulthandler.dump_traceback_later`` or a SIGUSR1 handler: no ``Fatal Python
        error`` line above, the process goes on (or hangs)."""
        captures = _blocked(text_of('''
            Thread 0x00007f2a7cbfd700 (most recent call first):
              File "/usr/lib/python3.10/threading.py", line 324 in wait
              File "/usr/lib/python3.10/threading.py", line 607 in wait
            Current thread 0x00007f2b1c6d5740 (most recent call first):
              File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3328 in barrier
              File "/workspace/train.py", line 212 in save_checkpoint
              File "/workspace/train.py", line 301 in main
            '''))

        assert {"frame": "/opt/venv/lib/python3.10/site-packages/torch/distributed/"
                "distributed_c10d.py:3328 in barrier", "thread": "current thread"} == captures

    def test_a_fatal_error_dump_stays_a_crash(self) -> None:
        """After ``Fatal Python error`` the same thread heads belong to the crash report."""
        found = loud(generic_scan(text_of('''
            Fatal Python error: Segmentation fault

            Current thread 0x00007f2b1c6d5740 (most recent call first):
              File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3328 in barrier
              File "/workspace/train.py", line 212 in save_checkpoint
            ''')))

        assert ["generic_native_crash"] == [d.signature for d in found]
