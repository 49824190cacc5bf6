"""The generic layer's first shape: a Python traceback that ends a process, a rank or a thread.

Whatever the exception class, chained or wrapped by a launcher or an actor framework, behind
launcher prefixes: one detection that names the exception and the innermost frame of the user's
code. A traceback that ends nothing (logged at a low level, ignored, printed by a test harness,
followed by the run going on) makes none. These run the generic layer alone (no signatures), so
they show what it catches on its own.
"""

from __future__ import annotations

import pytest
from support.generic import generic_scan, loud, only, text_of

from sigwatch.model import Severity

TB = "generic_traceback"


def _captures(found: list) -> dict[str, str]:  # noqa: ANN001 - detections
    return dict(only(found, TB).captures)


class TestAnyExceptionClassEndsTheProcess:
    def test_bare_assertion_error_without_message_is_an_error_naming_its_frame(self) -> None:
        """``AssertionError`` alone on its line is the exception; the frame is the user's."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/workspace/train.py", line 12, in <module>
                assert batch.shape[0] == 64
            AssertionError
            '''))

        d = only(found, TB)
        assert Severity.ERROR == d.severity
        assert "AssertionError" == d.text
        assert {"exception": "AssertionError",
                "frame": "/workspace/train.py:12 in <module>"} == dict(d.captures)
        assert "user" == d.owner

    def test_a_bare_exception_raised_without_arguments_is_the_exception(self) -> None:
        """``raise Exception`` prints ``Exception`` alone under the frames (AutoAWQ's scale
        search); alone elsewhere the word is a heading."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/workspace/awq_quantize.py", line 26, in <module>
                model.quantize(tokenizer, quant_config=quant_config)
              File "/usr/lib/python3.10/site-packages/awq/quantize/quantizer.py", line 409, in _compute_best_scale
                raise Exception
            Exception
            '''))

        assert {"exception": "Exception", "frame": "/workspace/awq_quantize.py:26 in <module>"} \
            == _captures(found)
        assert [] == loud(generic_scan("Exception\n"))

    @pytest.mark.parametrize(("line", "cls"), [
        ("torch._C._LinAlgError: linalg.cholesky: The factorization could not be completed "
         "because the input is not positive-definite", "torch._C._LinAlgError"),
        ("numpy._core._exceptions._ArrayMemoryError: Unable to allocate 561. MiB for an array",
         "numpy._core._exceptions._ArrayMemoryError"),
    ], ids=["torch-private", "numpy-private"])
    def test_a_private_exception_class_is_still_an_exception(self, line: str, cls: str) -> None:
        """A leading underscore hides a class from imports, not from the traceback."""
        found = generic_scan(text_of(f'''
            Traceback (most recent call last):
              File "/workspace/quantize.py", line 9, in <module>
                run()
            {line}
            '''))

        assert cls == _captures(found)["exception"]

    def test_an_exception_behind_a_node_s_name_is_the_exception(self) -> None:
        """pdsh, clush and PBS's mpiexec put the node's name before each line; a word (no
        digit) before an exception is a logger's heading, not a node."""
        found = generic_scan("x3202c0s31b0n0: AssertionError: Micro batch size per gpu: 0 has "
                             "to be greater than 0\n")

        assert {"exception": "AssertionError",
                "message": "Micro batch size per gpu: 0 has to be greater than 0"} \
            == _captures(found)
        assert [] == loud(generic_scan("warning: RuntimeError: caught and retried\n"))

    def test_stop_iteration_behind_a_rank_prefix_names_the_rank(self) -> None:
        """``[rank3]:`` is cut by framing and becomes the detection's rank."""
        found = generic_scan(text_of('''
            [rank3]: Traceback (most recent call last):
            [rank3]:   File "/workspace/train.py", line 88, in <module>
            [rank3]:     main()
            [rank3]:   File "/workspace/train.py", line 80, in main
            [rank3]:     batch = next(it)
            [rank3]:   File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 631, in __next__
            [rank3]:     data = self._next_data()
            [rank3]: StopIteration: dataloader exhausted in worker 3
            '''))

        d = only(found, TB)
        assert "3" == d.rank
        assert {"exception": "StopIteration", "message": "dataloader exhausted in worker 3",
                "frame": "/workspace/train.py:80 in main"} == dict(d.captures)

    def test_key_error_and_system_exit_with_a_status_are_failures(self) -> None:
        """Classes that do not end in Error/Exception still end the process."""
        for last, cls in (("KeyError: 'lr_scheduler'", "KeyError"),
                          ("SystemExit: 1", "SystemExit")):
            found = generic_scan(text_of(f'''
                Traceback (most recent call last):
                  File "run.py", line 3, in <module>
                    main()
                {last}
                '''))

            assert cls == _captures(found)["exception"]

    def test_framework_exception_classes_are_named_with_their_module(self) -> None:
        """``hydra.errors.InstantiationException``, ``torch._dynamo.exc.BackendCompilerFailed``."""
        hydra = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/home/u/proj/train.py", line 41, in main
                model = hydra.utils.instantiate(cfg.model)
              File "/opt/venv/lib/python3.11/site-packages/hydra/_internal/instantiate/_instantiate2.py", line 226, in instantiate
                return instantiate_node(config, *args, **kwargs)
            hydra.errors.InstantiationException: Error in call to target 'models.Net':
            TypeError("__init__() got an unexpected keyword argument 'depth'")
            '''))
        dynamo = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/srv/bench.py", line 19, in <module>
                out = compiled(x)
              File "/usr/lib/python3/dist-packages/torch/_dynamo/eval_frame.py", line 451, in _fn
                return fn(*args, **kwargs)
            torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
            RuntimeError: Triton Error [CUDA]: device kernel image is invalid

            Set TORCH_LOGS="+dynamo" and TORCHDYNAMO_VERBOSE=1 for more information
            '''))

        assert {"exception": "hydra.errors.InstantiationException",
                "message": "Error in call to target 'models.Net':",
                "frame": "/home/u/proj/train.py:41 in main"} == _captures(hydra)
        assert "torch._dynamo.exc.BackendCompilerFailed" == _captures(dynamo)["exception"]
        assert "/srv/bench.py:19 in <module>" == _captures(dynamo)["frame"]

    def test_innermost_user_frame_skips_libraries_stdlib_frozen_and_launchers(self) -> None:
        """site-packages, dist-packages, the stdlib, ``<frozen ...>`` and ``bin/torchrun`` are
        not the user's code; the deepest frame that is wins."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/opt/conda/bin/torchrun", line 33, in <module>
                sys.exit(load_entry_point('torch', 'console_scripts', 'torchrun')())
              File "/data/job/src/model/loader.py", line 57, in load_shard
                return torch.load(path)
              File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 1028, in load
                with _open_file_like(f, 'rb') as opened_file:
              File "/usr/lib/python3.10/pathlib.py", line 1119, in open
                return self._accessor.open(self, mode, buffering)
              File "<frozen importlib._bootstrap>", line 1027, in _find_and_load
            FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/shard-00017.pt'
            '''))

        assert "/data/job/src/model/loader.py:57 in load_shard" == _captures(found)["frame"]

    def test_a_python_3_11_caret_line_is_part_of_the_frame(self) -> None:
        """The ``~~^~~`` markers under a source line are not the exception line."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "calc.py", line 4, in <module>
                print(1 / zero)
                      ~~^~~~~~
            ZeroDivisionError: division by zero
            '''))

        assert "ZeroDivisionError" == _captures(found)["exception"]


class TestChainsAndWrappers:
    def test_during_handling_chain_is_one_detection_naming_the_last_and_its_cause(self) -> None:
        """Two tracebacks joined by 'During handling...' are one failure."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "train.py", line 20, in load
                return cache[key]
            KeyError: 'tokenizer'

            During handling of the above exception, another exception occurred:

            Traceback (most recent call last):
              File "train.py", line 30, in <module>
                tok = load("tokenizer")
              File "train.py", line 22, in load
                raise RuntimeError("cannot load tokenizer")
            RuntimeError: cannot load tokenizer
            '''))

        d = only(found, TB)
        assert {"exception": "RuntimeError", "message": "cannot load tokenizer",
                "frame": "train.py:22 in load", "cause": "KeyError: 'tokenizer'"} == dict(
                    d.captures)
        assert ("chain", "2") in d.facts

    def test_direct_cause_chain_is_one_detection(self) -> None:
        """``raise X from Y``: one detection, the cause kept."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "data.py", line 8, in read
                raise OSError("disk gone")
            OSError: disk gone

            The above exception was the direct cause of the following exception:

            Traceback (most recent call last):
              File "data.py", line 14, in <module>
                read()
              File "data.py", line 10, in read
                raise DatasetError("shard 3 unreadable") from exc
            __main__.DatasetError: shard 3 unreadable
            '''))

        captures = _captures(found)
        assert "__main__.DatasetError" == captures["exception"]
        assert "OSError: disk gone" == captures["cause"]

    def test_torchrun_child_failed_table_names_the_childs_exception(self) -> None:
        """The table's traceback (indented after ``traceback :``) joins the ChildFailedError
        report: the child's exception and frame are named, once."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/usr/local/bin/torchrun", line 8, in <module>
                sys.exit(main())
              File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 794, in main
                run(args)
            torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
            ============================================================
            train.py FAILED
            ------------------------------------------------------------
            Failures:
              <NO_OTHER_FAILURES>
            ------------------------------------------------------------
            Root Cause (first observed failure):
            [0]:
              time      : 2024-05-02_10:11:12
              host      : node-17
              rank      : 0 (local_rank: 0)
              exitcode  : 1 (pid: 4412)
              error_file: /tmp/torchelastic_x/none_y/attempt_0/0/error.json
              traceback : Traceback (most recent call last):
                File "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper
                  return f(*args, **kwargs)
                File "/home/user/train.py", line 61, in main
                  raise ValueError(f"bad config: {cfg.name}")
              ValueError: bad config: tiny
            ============================================================
            '''))

        d = only(found, TB)
        assert {"exception": "ValueError", "message": "bad config: tiny",
                "frame": "/home/user/train.py:61 in main",
                "cause": "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
                } == dict(d.captures)

    def test_ray_task_error_names_the_remote_exception_and_frame(self) -> None:
        """``RayTaskError(ZeroDivisionError)`` is followed by the task's own frames."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/home/u/driver.py", line 12, in <module>
                ray.get(work.remote())
              File "/opt/venv/lib/python3.10/site-packages/ray/_private/worker.py", line 2547, in get
                raise value.as_instanceof_cause()
            ray.exceptions.RayTaskError(ZeroDivisionError): ray::work() (pid=5521, ip=10.0.0.4)
              File "/home/u/driver.py", line 7, in work
                return 1 / 0
            ZeroDivisionError: division by zero
            '''))

        captures = _captures(found)
        assert "ZeroDivisionError" == captures["exception"]
        assert "/home/u/driver.py:7 in work" == captures["frame"]

    def test_concurrent_futures_remote_traceback_is_one_failure(self) -> None:
        """The worker's traceback inside ``\"\"\"`` and the caller's are one report."""
        found = generic_scan(text_of('''
            concurrent.futures.process._RemoteTraceback:
            """
            Traceback (most recent call last):
              File "/usr/lib/python3.10/concurrent/futures/process.py", line 246, in _process_worker
                r = call_item.fn(*call_item.args, **call_item.kwargs)
              File "/srv/prep.py", line 9, in tokenize
                raise ValueError("empty document")
            ValueError: empty document
            """

            The above exception was the direct cause of the following exception:

            Traceback (most recent call last):
              File "/srv/prep.py", line 15, in <module>
                list(pool.map(tokenize, docs))
              File "/usr/lib/python3.10/concurrent/futures/process.py", line 575, in _chain_from_iterable_of_lists
                for element in iterable:
            ValueError: empty document
            '''))

        captures = _captures(found)
        assert "ValueError" == captures["exception"]
        assert "/srv/prep.py:15 in <module>" == captures["frame"]

    def test_multiprocessing_child_traceback_is_a_failure(self) -> None:
        """``Process SpawnProcess-1:`` then the child's traceback: the child ended."""
        found = generic_scan(text_of('''
            Process SpawnProcess-1:
            Traceback (most recent call last):
              File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap
                self.run()
              File "/app/worker.py", line 33, in run
                self.step()
            MemoryError
            '''))

        d = only(found, TB)
        assert Severity.ERROR == d.severity
        assert ("frame", "/app/worker.py:33 in run") in d.captures

    def test_exception_in_thread_is_a_warning_titled_for_a_thread(self) -> None:
        """A thread died; the process may go on: a warning."""
        found = generic_scan(text_of('''
            Exception in thread Thread-3 (prefetch):
            Traceback (most recent call last):
              File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
                self.run()
              File "/app/prefetch.py", line 21, in run
                item = self.queue.get(timeout=5)
            queue.Empty
            '''))

        d = only(found, TB)
        assert Severity.WARNING == d.severity
        assert "Python Thread Died On An Uncaught Exception" == d.title


class TestPrefixesAndInterleaving:
    def test_launcher_prefixes_are_read_through(self) -> None:
        """torchrun --tee, srun --label, Open MPI tags, Ray workers: the same traceback."""
        body = ['Traceback (most recent call last):',
                '  File "/job/train.py", line 5, in <module>',
                '    step()',
                'RuntimeError: loss exploded']
        for prefix in ("[default0]:", "0: ", "[1,3]<stderr>:", "(RayTrainWorker pid=8812) "):
            found = generic_scan("".join(f"{prefix}{line}\n" for line in body))

            assert "RuntimeError" == _captures(found)["exception"], prefix

    def test_interleaved_ranks_are_read_apart(self) -> None:
        """Two ranks printing tracebacks line by line into one file: each is read whole."""
        found = generic_scan(text_of('''
            [rank0]: Traceback (most recent call last):
            [rank1]: Traceback (most recent call last):
            [rank0]:   File "/job/train.py", line 40, in forward
            [rank1]:   File "/job/data.py", line 12, in __getitem__
            [rank0]:     y = self.head(x)
            [rank1]:     img = decode(buf)
            [rank1]: OSError: image file is truncated
            [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
            '''))

        by_rank = {d.rank: dict(d.captures) for d in found if d.signature == TB}
        assert {"0": ("torch.OutOfMemoryError", "/job/train.py:40 in forward"),
                "1": ("OSError", "/job/data.py:12 in __getitem__")} == {
                    r: (c["exception"], c["frame"]) for r, c in by_rank.items()}

    def test_an_unknown_envelope_before_every_line_is_learnt_from_the_first(self) -> None:
        """A workflow tool's ``<time> [step (pid n)] [id]`` before each line is cut."""
        found = generic_scan(text_of('''
            2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee] Traceback (most recent call last):
            2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee]   File "/flow/train.py", line 79, in save
            2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee]     torch.save(state, path)
            2023-04-29 06:01:12.978 [177/train/578 (pid 28936)] [09c561ee] OSError: [Errno 28] No space left on device
            '''))

        captures = _captures(found)
        assert ("OSError", "/flow/train.py:79 in save") == (captures["exception"],
                                                             captures["frame"])

    def test_the_envelope_is_learnt_from_a_first_frame_when_the_header_was_cut(self) -> None:
        """A logger that re-logs a worker's traceback line by line (vLLM's ``ERROR MM-DD
        HH:MM:SS [file.py:N]``), its header cut off: the frames start the traceback."""
        found = generic_scan(text_of('''
            ERROR 04-21 20:40:51 [engine.py:140]   File "/srv/lmcache/cache_engine.py", line 183, in retrieve
            ERROR 04-21 20:40:51 [engine.py:140]     memory_obj = self.storage_manager.get(key)
            ERROR 04-21 20:40:51 [engine.py:140]   File "/srv/lmcache/storage_manager.py", line 236, in get
            ERROR 04-21 20:40:51 [engine.py:140]     memory_obj = backend.get_blocking(key)
            ERROR 04-21 20:40:51 [engine.py:140] ConnectionResetError: [Errno 104] Connection reset by peer
            '''))

        captures = _captures(found)
        assert ("ConnectionResetError", "/srv/lmcache/storage_manager.py:236 in get") == (
            captures["exception"], captures["frame"])

    def test_headless_frames_a_logger_relogs_at_error_level_are_a_cut_traceback(self) -> None:
        """Frames alone may be a native stack printed the Python way; frames a logger writes at
        ERROR, cut before their exception, are a failure's traceback."""
        found = generic_scan(text_of('''
            (RayWorkerWrapper pid=1148) ERROR 07-14 08:10:43 worker_base.py:148]   File "/venv/vllm/worker/worker.py", line 114, in init_device
            (RayWorkerWrapper pid=1148) ERROR 07-14 08:10:43 worker_base.py:148]     init_worker_distributed_environment(self.parallel_config)
            (RayWorkerWrapper pid=1148) ERROR 07-14 08:10:43 worker_base.py:148]   File "/venv/vllm/distributed/parallel_state.py", line 191, in initialize_model_parallel
            (RayWorkerWrapper pid=1148) ERROR 07-14 08:10:43 worker_base.py:148]     _TP_PYNCCL_COMMUNICATOR = PyNcclCommunicator(
            '''))

        cut = only(found, TB)
        assert "cut_traceback" == dict(cut.labels)["shape"]

    def test_headless_frames_without_an_error_envelope_stay_quiet(self) -> None:
        found = generic_scan(text_of('''
            INFO 07-14 08:10:43 worker_base.py:148]   File "/venv/vllm/worker/worker.py", line 114, in init_device
            INFO 07-14 08:10:43 worker_base.py:148]     init_worker_distributed_environment(self.parallel_config)
            '''))

        assert [] == [d for d in found if d.signature == TB]

    @pytest.mark.parametrize("stamp", ["2022-11-08T12:29:36.521461192Z", "2023-12-03 14:56:00"])
    def test_a_time_stamp_alone_before_every_line_is_cut(self, stamp: str) -> None:
        """Docker's ``--timestamps`` and log viewers' exports put only a stamp and a blank
        before each line, with or without the traceback's own indentation."""
        lines = ["Traceback (most recent call last):",
                 '  File "/srv/runner.py", line 139, in method',
                 "    return self.func(obj)",
                 "onnxruntime.RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION"]
        for indented in (True, False):
            text = "".join(f"{stamp} {line if indented else line.strip()}\n" for line in lines)

            captures = _captures(generic_scan(text))

            assert ("onnxruntime.RuntimeException", "/srv/runner.py:139 in method") == (
                captures["exception"], captures["frame"]), indented

    def test_a_stamped_traceback_whose_header_was_cut_off_is_read(self) -> None:
        found = generic_scan(text_of('''
            2022-11-08T12:29:36.521466675Z   File "/srv/runner.py", line 139, in method
            2022-11-08T12:29:36.521470680Z     return self.func(obj)
            2022-11-08T12:29:36.521487662Z onnxruntime.RuntimeException: [ONNXRuntimeError] : 6
            '''))

        assert "onnxruntime.RuntimeException" == _captures(found)["exception"]

    def test_a_traceback_whose_header_was_cut_off_is_still_read(self) -> None:
        """A pasted or truncated log that starts in the middle of the frames."""
        found = generic_scan(text_of('''
            site-packages/torch/autograd/__init__.py", line 90, in backward
                allow_unreachable=True)  # allow_unreachable flag
            RuntimeError: CUDA error: an illegal memory access was encountered
            '''))

        assert "RuntimeError" == _captures(found)["exception"]

    def test_an_exception_line_printed_alone_is_a_failure(self) -> None:
        """The last line of a traceback whose frames were not kept (log tail, paste)."""
        found = generic_scan("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out "
                             "of memory while trying to allocate 4770354232 bytes.\n")

        assert "jaxlib.xla_extension.XlaRuntimeError" == _captures(found)["exception"]

    def test_a_class_from_an_exceptions_module_printed_alone_is_a_failure(self) -> None:
        """Its name does not end in Error, its module says what it is (microsoft/dion #23)."""
        found = generic_scan("torch._dynamo.exc.FailOnRecompileLimitHit: recompile_limit "
                             "reached with fullgraph=True.\n")

        assert "torch._dynamo.exc.FailOnRecompileLimitHit" == _captures(found)["exception"]

    def test_a_qualified_name_without_a_message_or_outside_such_a_module_is_not(self) -> None:
        assert [] == loud(generic_scan(text_of('''
            torch._dynamo.exc.Unsupported:
            model.layers.MixtureOfExperts: 8 experts, top-2
            ''')))


class TestTracebacksThatEndNothing:
    def test_a_traceback_logged_at_warning_then_the_run_goes_on_is_quiet(self) -> None:
        """``logger.warning(..., exc_info=True)``: the writer said it is not an error."""
        found = generic_scan(text_of('''
            2024-03-02 10:00:01,100 - urllib3.connectionpool - WARNING - Retrying after connection broken
            Traceback (most recent call last):
              File "/opt/venv/lib/python3.10/site-packages/urllib3/connectionpool.py", line 703, in urlopen
                httplib_response = self._make_request(
            ConnectionResetError: [Errno 104] Connection reset by peer
            step 1201 | loss 2.314 | 0.41 s/it
            '''))

        assert [] == loud(found)

    def test_after_an_info_record_that_reports_a_success_the_traceback_is_the_processs(
            self) -> None:
        """A record that says something succeeded is not the message of a logged exception:
        the traceback after it ends the process (the Neuron compiler's wrapper, then a crash)."""
        found = generic_scan(text_of('''
            2023-05-04 19:31:29.000758: INFO ||NCC_WRAPPER||: Exiting with a successfully compiled graph
            Traceback (most recent call last):
              File "/root/sd_2_1_inf.py", line 152, in compile_model
                decoder_neuron = torch_neuronx.trace(
            RuntimeError: neuronx-cc failed with -9
            '''))

        assert "RuntimeError" == dict(only(found, TB).captures)["exception"]

    def test_after_an_info_record_that_reports_a_success_and_a_failure_it_stays_quiet(
            self) -> None:
        """The same record naming a failure may be the message of the exception it logs."""
        found = generic_scan(text_of('''
            I0512 08:11:02.000123 140233 io.py:88] Upload completed with a failed part, retrying:
            Traceback (most recent call last):
              File "/app/io.py", line 40, in upload
                put(part)
            ConnectionResetError: [Errno 104] Connection reset by peer
            '''))

        assert [] == loud(found)

    def test_a_traceback_printed_by_multiprocessings_finalizers_is_quiet(self) -> None:
        """``multiprocessing.util._run_finalizers`` prints what a finalizer raised at exit and
        goes on: the run had ended (here with MLPerf's success status)."""
        found = generic_scan(text_of('''
            :::MLLOG {"key": "status", "value": "success"}
            Traceback (most recent call last):
              File "/usr/lib/python3.10/multiprocessing/util.py", line 300, in _run_finalizers
                finalizer()
              File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 87, in _cleanup
                sem_unlink(name)
            FileNotFoundError: [Errno 2] No such file or directory
            '''))

        assert [] == loud(found)

    def test_the_same_exception_from_the_users_code_is_reported(self) -> None:
        """Only the printing caller is passed over, not the exception class."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/app/train.py", line 30, in <module>
                cleanup()
              File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 87, in _cleanup
                sem_unlink(name)
            FileNotFoundError: [Errno 2] No such file or directory
            '''))

        assert "FileNotFoundError" == dict(only(found, TB).captures)["exception"]

    def test_a_traceback_logged_at_info_by_glog_is_quiet(self) -> None:
        """absl's ``I0101 ...`` record just before the traceback is a low level."""
        found = generic_scan(text_of('''
            I0512 08:11:02.000123 140233 checkpoints.py:88] Falling back to the previous checkpoint:
            Traceback (most recent call last):
              File "/app/ckpt.py", line 40, in restore
                state = load(latest)
            FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/step_900'
            '''))

        assert [] == loud(found)

    def test_exception_ignored_in_a_destructor_is_quiet(self) -> None:
        """``Exception ignored in:``: the interpreter says nothing was affected."""
        found = generic_scan(text_of('''
            Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f2b8c1d3a60>
            Traceback (most recent call last):
              File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1479, in __del__
                self._shutdown_workers()
            AttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_workers_status'
            '''))

        assert [] == loud(found)

    def test_pytest_printing_tracebacks_of_passing_tests_is_quiet(self) -> None:
        """Captured output of tests under a pytest session is the harness's, not a crash."""
        found = generic_scan(text_of('''
            ============================= test session starts ==============================
            platform linux -- Python 3.11.7, pytest-8.2.0, pluggy-1.5.0
            collected 3 items

            tests/test_retry.py ...                                                  [100%]

            ==================================== PASSES ====================================
            ______________________________ test_gives_up_after_3 ____________________________
            ----------------------------- Captured stderr call -----------------------------
            Traceback (most recent call last):
              File "/src/retry.py", line 14, in call
                return fn()
            TimeoutError: upstream did not answer
            ============================== 3 passed in 0.12s ===============================
            '''))

        assert [] == loud(found)

    def test_unittest_printing_a_traceback_then_ok_is_quiet(self) -> None:
        """A test that logs a traceback and passes (``... ok``)."""
        found = generic_scan(text_of('''
            test_reconnect (tests.test_client.TestClient.test_reconnect) ... Traceback (most recent call last):
              File "/src/client.py", line 30, in send
                self.sock.sendall(data)
            BrokenPipeError: [Errno 32] Broken pipe
            ok

            ----------------------------------------------------------------------
            Ran 1 test in 0.004s

            OK
            '''))

        assert [] == loud(found)

    def test_a_retry_that_succeeds_is_quiet(self) -> None:
        """The lines after the traceback say the process went on."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/app/upload.py", line 22, in push
                resp = session.put(url, data=blob)
            requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))
            Upload failed, retrying in 5 s (attempt 2/5)
            epoch 3 step 4100 loss 1.873 lr 2.0e-04
            '''))

        assert [] == loud(found)

    def test_progress_then_a_launcher_failure_still_ends_the_process(self) -> None:
        """Buffered stdout flushed after the traceback is not the run going on when the
        launcher then reports the failure."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "train.py", line 99, in <module>
                main()
            ValueError: shapes (64,) and (32,) not aligned
            step 310 loss 2.10
            ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 77) of binary: /usr/bin/python3
            '''))

        assert "ValueError" == _captures(found)["exception"]

    def test_keyboard_interrupt_and_exit_status_zero_are_quiet(self) -> None:
        """Ctrl-C by hand and ``sys.exit(0)`` end the process without a failure."""
        for last in ("KeyboardInterrupt", "SystemExit: 0", "SystemExit"):
            found = generic_scan(text_of(f'''
                Traceback (most recent call last):
                  File "train.py", line 12, in <module>
                    time.sleep(10)
                {last}
                '''))

            assert [] == loud(found), last

    def test_a_traceback_cut_before_its_exception_line_then_more_output_is_quiet(self) -> None:
        """No exception line, and the rank's output went on: nothing says anything ended."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "train.py", line 10, in <module>
                import foo
              (traceback printed for debugging only)
            '''))

        assert [] == loud(found)


class TestATracebackWhoseOutputStopsInsideItsFrames:
    """A process killed or hung while printing its traceback (or a log cut there) leaves frames
    and no exception line: a warning that names where it stopped."""

    CUT = text_of('''
        [W228 18:45:15.741177013 socket.cpp:487] [c10d] waitForInput: socket timed out after 900000ms
        Traceback (most recent call last):
          File "/workspace/train.py", line 52, in <module>
            main(args)
          File "/workspace/train.py", line 46, in main
            dist.init_process_group("nccl")
          File "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", line 79, in wrapper
            return func(*args, **kwargs)
        ''')

    def test_the_stream_ending_inside_the_frames_is_a_warning_naming_both_frames(self) -> None:
        """The innermost frame is where it was raised; the user's frame is what to read."""
        found = generic_scan(self.CUT)

        d = only(found, TB)
        assert Severity.WARNING == d.severity
        assert "return func(*args, **kwargs)" == d.text.strip()
        assert ("cut_traceback" == dict(d.labels)["shape"])
        assert {"frame": "/workspace/train.py:46 in main",
                "innermost": ("/opt/conda/lib/python3.10/site-packages/torch/distributed/"
                              "c10d_logger.py:79 in wrapper")} == dict(d.captures)

    def test_the_daemon_reports_it_when_the_hold_passes_with_no_more_output(self) -> None:
        """A tail that stays open: no line for the hold is the output having stopped."""
        assert [] == loud(generic_scan(self.CUT, close=False))

        found = generic_scan(self.CUT, close=False, wait=60.0)

        assert "/workspace/train.py:46 in main" == dict(only(found, TB).captures)["frame"]

    def test_a_traceback_printed_slowly_is_not_cut_while_its_lines_keep_coming(self) -> None:
        """Each line 4 s after the last (the hold is 10 s): one error, no cut warning."""
        text = self.CUT + "torch.distributed.DistStoreError: timed out\n"
        lines = [len(line) + 1 for line in text.splitlines()]

        found = generic_scan(text, pieces=lines, gap=4.0)

        assert ["traceback"] == [dict(d.labels)["shape"] for d in loud(found)]

    def test_read_in_pieces_it_is_the_same_detection(self) -> None:
        found = generic_scan(self.CUT, pieces=(7, 31, 2))

        assert "/workspace/train.py:46 in main" == dict(only(found, TB).captures)["frame"]

    def test_with_its_exception_line_it_is_the_usual_error(self) -> None:
        found = generic_scan(self.CUT + "torch.distributed.DistStoreError: timed out\n")

        d = only(found, TB)
        assert Severity.ERROR == d.severity
        assert "traceback" == dict(d.labels)["shape"]

    STACK = text_of('''
          File "/opt/conda/lib/python3.10/site-packages/torch/distributed/utils.py", line 144, in _p_assert
            traceback.print_stack()
        Expects `BACKWARD_PRE` or `BACKWARD_POST` state but got HandleTrainingState.FORWARD
        ''')

    def test_after_a_stack_printed_without_its_header_the_cut_traceback_is_read(self) -> None:
        """``traceback.print_stack()`` prints frames and no header: the traceback with its
        header after them is read on its own, and cut, it is the warning."""
        found = generic_scan(self.STACK + self.CUT)

        d = only(found, TB)
        assert ("cut_traceback", "/workspace/train.py:46 in main") == (
            dict(d.labels)["shape"], dict(d.captures)["frame"])

    def test_after_a_printed_stack_a_whole_traceback_is_its_exception(self) -> None:
        found = generic_scan(self.STACK + self.CUT
                             + "torch.distributed.DistStoreError: timed out\n")

        d = only(found, TB)
        assert (Severity.ERROR, "torch.distributed.DistStoreError") == (
            d.severity, dict(d.captures)["exception"])

    def test_a_test_harness_printing_a_cut_traceback_stays_quiet(self) -> None:
        found = generic_scan("============================= test session starts "
                             "==============================\n" + self.CUT)

        assert [] == loud(found)


class TestKeysAndRepeats:
    def test_the_same_failure_on_every_rank_is_reported_once(self) -> None:
        """Ids in the message are masked in the key: eight ranks, one detection."""
        text = "".join(
            f"[rank{r}]: Traceback (most recent call last):\n"
            f'[rank{r}]:   File "/job/train.py", line 50, in step\n'
            f"[rank{r}]:     dist.all_reduce(t)\n"
            f"[rank{r}]: torch.distributed.DistBackendError: NCCL communicator was aborted "
            f"on rank {r}.\n" for r in range(8))

        found = generic_scan(text)

        assert 1 == len([d for d in found if d.signature == TB])

    def test_different_frames_are_different_failures(self) -> None:
        """The key holds the user's frame: the same exception from two places is two."""
        text = "".join(
            "Traceback (most recent call last):\n"
            f'  File "/job/{name}.py", line 5, in run\n'
            "    go()\n"
            "KeyError: 'a'\n" for name in ("train", "eval"))

        found = generic_scan(text)

        assert 2 == len([d for d in found if d.signature == TB])


def test_a_base_exception_printed_alone_is_a_failure() -> None:
    """``raise Exception("...")`` ends with ``Exception: ...``."""
    found = generic_scan("Exception: checkpoint shard 7 missing\n")

    assert "Exception" == _captures(found)["exception"]


class TestTracebacksAsPagesAndShippersPrintThem:
    """Frames without their indentation, a traceback on one line, markup around an exception
    line: the structure is still a traceback."""

    def test_frames_printed_at_column_0_with_their_source_lines_are_read(self) -> None:
        """A page or a log shipper dropped the indentation: frame, source, carets, at column 0,
        deeper than the noise a traceback tolerates."""
        frames = "".join(
            f'File "/srv/app/layer{i}.py", line {10 + i}, in step{i}\n'
            f"return step{i + 1}(batch)\n^^^^^^^^^^^^^^^^^\n" for i in range(9))
        found = generic_scan('Traceback (most recent call last):\n' + frames
                             + "ValueError: shapes (4, 3) and (2,) not aligned\n")

        d = only(found, TB)
        assert {"exception": "ValueError", "message": "shapes (4, 3) and (2,) not aligned",
                "frame": "/srv/app/layer8.py:18 in step8"} == dict(d.captures)
        assert "Traceback (most recent call last):" == d.context[0]  # one reading, not pieces

    def test_a_traceback_flattened_onto_one_line_names_its_exception_and_frame(self) -> None:
        """Newlines (and the path's quotes) lost: frames, source and exception on one line."""
        found = generic_scan(
            'Traceback (most recent call last): File "/job/train.py", line 88, in <module> '
            "main() File /job/model.py, line 12, in forward out = self.proj(x) "
            "RuntimeError: CUDA error: device-side assert triggered\n")

        assert {"exception": "RuntimeError",
                "message": "CUDA error: device-side assert triggered",
                "frame": "/job/model.py:12 in forward"} == _captures(found)

    def test_a_sentence_naming_a_file_and_an_error_is_not_a_flattened_traceback(self) -> None:
        """It must start as a traceback does (its header or a frame)."""
        found = generic_scan('see File "/job/train.py", line 88, in main: ValueError: x is '
                             "deprecated, please update\n")

        assert [] == [d for d in found if d.signature == TB]

    def test_an_exception_line_wrapped_in_markdown_bold_is_a_failure(self) -> None:
        """``**pkg.FooError: message**`` as an issue's author highlighted it."""
        found = generic_scan("**torch.distributed.DistBackendError: [3] is setting up NCCL "
                             "communicator but store->get('0') got error: Socket Timeout**\n")

        captures = _captures(found)
        assert "torch.distributed.DistBackendError" == captures["exception"]
        assert captures["message"].endswith("Socket Timeout")

    def test_torch_multiprocessing_terminating_the_other_children_says_the_run_ended(
            self) -> None:
        """Its ``Terminating process N via signal SIGTERM`` fan-out is the evidence."""
        found = generic_scan(text_of('''
            torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited
            W0719 18:42:55.168000 1315 torch/multiprocessing/spawn.py:145] Terminating process 25364 via signal SIGTERM
            '''))

        facts = dict(only(found, TB).facts)
        assert "Terminating process 25364 via signal SIGTERM" in facts["ended"]


class TestWhoPrintedTheTraceback:
    """A record just before a traceback says a logger printed it, unless it cannot have."""

    def test_a_native_warning_before_a_traceback_did_not_print_it(self) -> None:
        """c10's ``[W file.cpp:N]`` comes from C++: the traceback after it is uncaught."""
        found = generic_scan(text_of('''
            [W compiler_depend.ts:51] Warning: Version: is invalid. (function operator())
            Traceback (most recent call last):
              File "/job/run.py", line 3, in <module>
                x = torch.randn(3).npu()
            RuntimeError: NPU function error: c10_npu::SetDevice(device_id_)
            '''))

        assert "RuntimeError" == _captures(found)["exception"]

    def test_a_chain_that_reached_module_level_after_a_warning_ended_the_process(
            self) -> None:
        """The chain's last traceback runs from ``<module>``: nothing caught it, whatever the
        warning before it said; cut before its own exception line, it is named by the one it
        was raised from."""
        found = generic_scan(text_of('''
            WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'n1' has failed to shutdown the rendezvous 'r1' due to an error of type RendezvousConnectionError.
            Traceback (most recent call last):
              File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 113, in _call_store
                return getattr(self._store, store_op)(*args, **kwargs)
            RuntimeError: Connection reset by peer

            The above exception was the direct cause of the following exception:

            Traceback (most recent call last):
              File "/opt/conda/bin/torchrun", line 33, in <module>
                sys.exit(load_entry_point('torch==2.0.1', 'console_scripts', 'torchrun')())
            '''))

        assert {"exception": "RuntimeError",
                "message": "Connection reset by peer"} == _captures(found)

    def test_a_chain_caught_below_module_level_after_a_warning_stays_quiet(self) -> None:
        """``logger.warning(..., exc_info=True)`` in a function: its chain starts there."""
        found = generic_scan(text_of('''
            WARNING:ckpt:could not restore, starting fresh
            Traceback (most recent call last):
              File "/job/ckpt.py", line 40, in restore
                state = load(latest)
            FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/step_900'

            The above exception was the direct cause of the following exception:

            Traceback (most recent call last):
              File "/job/ckpt.py", line 52, in maybe_restore
                restore()
            ckpt.RestoreError: no checkpoint
            '''))

        assert [] == loud(found)

    def test_a_single_traceback_from_module_level_after_a_warning_stays_quiet(self) -> None:
        """A module-level ``except`` that logged an optional import: not a chain, quiet."""
        found = generic_scan(text_of('''
            WARNING:train:apex not available, using torch amp
            Traceback (most recent call last):
              File "/job/train.py", line 5, in <module>
                import apex
            ModuleNotFoundError: No module named 'apex'
            '''))

        assert [] == loud(found)


class TestAProgressRecordDoesNotClaimTheTracebackAfterIt:
    """A record just before a traceback claims it (its ``exc_info``) only if it could be the
    message of a logged exception: a progress or metrics record that names no failure is the
    run's last step, and the traceback after it is the interpreter's, which ended the run."""

    @pytest.mark.parametrize("record", [
        "[2019-06-20 15:29:11,657] [INFO] epoch 0: iter 530, total_loss=25.726513 "
        "reg_loss=6.941636 learning rate =5.000000e-04 (25.5 examples/sec)",
        "2024-01-01 12:00:00,000 - trainer - INFO - step 100 loss 2.31 lr 1e-4",
        "INFO:root:Epoch 3 | loss: 0.123 | acc: 0.91",
        "I0512 08:11:02.000123 140233 train.py:88] step=1200 loss=1.93 grad_norm=0.41",
    ], ids=["bracketed", "dashes", "colons", "absl"])
    def test_a_stop_iteration_after_a_metrics_record_is_a_failure(self, record: str) -> None:
        found = generic_scan(record + "\n" + text_of('''
            Traceback (most recent call last):
              File "train.py", line 8, in <module>
                trainer.train()
              File "/job/trainer.py", line 405, in _train
                examples = next(train_ds)
            StopIteration
            '''))

        d = only(found, TB)
        assert Severity.ERROR == d.severity
        assert "/job/trainer.py:405 in _train" == dict(d.captures)["frame"]

    @pytest.mark.parametrize("record", [
        "2024-01-01 12:00:00,000 - trainer - WARNING - step=1200 failed to save, loss=1.93",
        "INFO:root:Exception while evaluating batch=3 rank=0:",
        "WARNING:train:could not read shard 17, skipping (retries: 3, left: 2)",
    ], ids=["failed", "exception", "could-not"])
    def test_a_record_naming_a_failure_still_claims_the_traceback(self, record: str) -> None:
        """With numbers in it or not, a record that names a failure is the message of
        ``logger.warning(..., exc_info=True)``: quiet as before."""
        found = generic_scan(record + "\n" + text_of('''
            Traceback (most recent call last):
              File "/job/trainer.py", line 405, in _train
                examples = next(train_ds)
            StopIteration
            '''))

        assert [] == loud(found)


class TestWhichRecordClaimsTheTracebackAfterIt:
    """An info or debug record claims the traceback after it (its ``exc_info``) only when it
    could be a logged exception's message: it names a failure, a retry or a fallback, or hands
    on with a colon. A plain statement is the run's last record before the interpreter printed
    the traceback that ended it."""

    TB = text_of('''
        Traceback (most recent call last):
          File "tools/train.py", line 114, in <module>
            main(config, device, logger, vdl_writer)
          File "/home/ubuntu/PaddleOCR/tools/program.py", line 197, in train
            preds = model(images)
        OSError: (External) CUDNN error(8), CUDNN_STATUS_EXECUTION_FAILED.
        ''')

    @pytest.mark.parametrize("record", [
        "[2020/12/25 06:45:37] root INFO: During the training process, after the 0th "
        "iteration, an evaluation is run every 2000 iterations",
        "2024-01-01 12:00:00,000 - trainer - DEBUG - building the validation loader",
        "2023-05-04 19:31:29.000758: INFO ||NCC_WRAPPER||: Exiting with a successfully "
        "compiled graph",
    ], ids=["statement", "debug", "success"])
    def test_after_a_plain_info_record_the_traceback_is_the_processs(self, record: str) -> None:
        found = generic_scan(record + "\n" + self.TB)

        assert "OSError" == _captures(found)["exception"]

    @pytest.mark.parametrize("record", [
        "2024-01-01 12:00:00,000 - io - INFO - Upload of part 3 did not go through, retrying",
        "2024-01-01 12:00:00,000 - io - DEBUG - details of the last attempt:",
        "2024-01-01 12:00:00,000 - loader - INFO - Skipping shard 17 ...",
        "2024-01-01 12:00:00,000 - loader - INFO - Falling back to the CPU decoder",
    ], ids=["retrying", "colon", "skipping", "fallback"])
    def test_an_info_record_handing_an_exception_on_claims_it(self, record: str) -> None:
        assert [] == loud(generic_scan(record + "\n" + self.TB))

    def test_a_warning_from_another_file_does_not_claim_a_cut_traceback_of_the_script(
            self) -> None:
        """torch's spawn warns that it terminates the other children, then the parent prints
        the script's traceback (here cut): the warning was written by ``spawn.py``, not by an
        ``except`` at the script's top level."""
        found = generic_scan(text_of('''
            W0518 23:49:02.056000 114389 site-packages/torch/multiprocessing/spawn.py:169] Terminating process 114472 via signal SIGTERM
            Traceback (most recent call last):
              File "/root/sam3/train/train.py", line 338, in <module>
                main(args)
              File "/root/miniconda3/lib/python3.12/site-packages/torch/multiprocessing/spawn.py", line 296, in start_processes
                while not context.join():
            '''))

        assert "/root/sam3/train/train.py:338 in <module>" == _captures(found)["frame"]

    def test_a_warning_written_by_the_script_itself_still_claims_its_traceback(self) -> None:
        found = generic_scan(text_of('''
            W0518 23:49:02.056000 114389 train.py:12] could not reach the tracker
            Traceback (most recent call last):
              File "/root/sam3/train/train.py", line 10, in <module>
                tracker.connect()
            ConnectionRefusedError: [Errno 111] Connection refused
            '''))

        assert [] == loud(found)

    def test_an_empty_exception_message_under_its_frames_is_the_exception(self) -> None:
        """torch's spawn raises ``Exception(msg)`` with an empty message when a child died
        without a traceback: ``Exception:`` alone ends the traceback."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "train.py", line 8, in main
                cli_main()
              File "/venv/lib/python3.8/site-packages/torch/multiprocessing/spawn.py", line 118, in join
                raise Exception(msg)
            Exception:
            '''))

        d = only(found, TB)
        assert (Severity.ERROR, "Exception") == (d.severity, dict(d.captures)["exception"])

    def test_exception_alone_as_a_heading_is_not_an_exception(self) -> None:
        assert [] == loud(generic_scan("Exception:\n  none raised in this test run\n"))


class TestTracebacksOfNotebooksAndOfPaddlesCore:
    """IPython's own form (Jupyter, Colab) and Paddle's ``C++ Traceback``, cut off before
    their last line as pages and killed processes leave them: a cut traceback's warning."""

    def test_an_ipython_traceback_cut_off_names_its_class_and_frame(self) -> None:
        found = generic_scan(text_of('''
            ---------------------------------------------------------------------------

            RuntimeError                              Traceback (most recent call last)

            <ipython-input-11-159e26e6ebc2> in <module>()
                  1 trainer = DefaultTrainer(cfg)
                  2 trainer.resume_or_load(resume=False)
            ----> 3 trainer.train()

            13 frames

            /usr/local/lib/python3.6/dist-packages/detectron2/engine/defaults.py in train(self)
                411             OrderedDict of results, if evaluation is enabled. Otherwise None.
                412         """
            --> 413         super().train(self.start_iter, self.max_iter)
            '''))

        d = only(found, TB)
        assert (Severity.WARNING, "cut_traceback") == (d.severity, dict(d.labels)["shape"])
        assert {"frame": "<ipython-input-11-159e26e6ebc2>:3 in <module>",
                "innermost": "/usr/local/lib/python3.6/dist-packages/detectron2/engine/"
                             "defaults.py:413 in train",
                "exception": "RuntimeError"} == dict(d.captures)

    def test_a_whole_ipython_traceback_is_the_usual_error(self) -> None:
        found = generic_scan(text_of('''
            RuntimeError                              Traceback (most recent call last)
            Cell In[3], line 2
                  1 model = build()
            ----> 2 train(model)

            File /content/train.py:41, in train(model)
                 40 for batch in loader:
            ---> 41     loss = model(batch)

            RuntimeError: CUDA error: device-side assert triggered
            '''))

        d = only(found, TB)
        assert (Severity.ERROR, "RuntimeError") == (d.severity, dict(d.captures)["exception"])

    def test_a_keyboard_interrupt_in_a_notebook_is_quiet(self) -> None:
        found = generic_scan(text_of('''
            KeyboardInterrupt                         Traceback (most recent call last)
            /content/train.py in train(model)
                 40 for batch in loader:
            ---> 41     loss = model(batch)
            '''))

        assert [] == loud(found)

    def test_paddles_cpp_traceback_cut_off_names_its_innermost_function(self) -> None:
        found = generic_scan(text_of('''
            [06/14 18:43:16] ppdet.utils.checkpoint INFO: Save checkpoint: output/yolov3

            --------------------------------------
            C++ Traceback (most recent call last):
            --------------------------------------
            0   std::thread::_State_impl<std::thread::_Invoker<std::tuple<ThreadPool::ThreadPool(unsigned long)::{lambda()#1}> > >::_M_run()
            1   paddle::framework::details::FastThreadedSSAGraphExecutor::RunOpSync(paddle::framework::details::OpHandleBase*)
            2   paddle::framework::OperatorWithKernel::RunImpl(paddle::framework::Scope const&, paddle::platform::Place const&) const
            '''))

        d = only(found, TB)
        assert Severity.WARNING == d.severity
        assert ("paddle::framework::OperatorWithKernel::RunImpl(paddle::framework::Scope "
                "const&, paddle::platform::Place const&) const") == dict(d.captures)["frame"]

    def test_paddles_cpp_traceback_with_its_summary_ends_in_the_error(self) -> None:
        found = generic_scan(text_of('''
            --------------------------------------
            C++ Traceback (most recent call last):
            --------------------------------------
            0   paddle::framework::SignalHandle(char const*, int)
            1   paddle::platform::GetCurrentTraceBackString[abi:cxx11]()

            ----------------------
            Error Message Summary:
            ----------------------
            FatalError: `Segmentation fault` is detected by the operating system.
            '''))

        assert "FatalError" == dict(only(found, TB).captures)["exception"]


class TestTracebacksBehindTagsAndBars:
    """Two forms met in batch b17: a bare process tag before every line, and a header glued
    to the end of a progress bar."""

    def test_a_bare_process_tag_before_every_line_is_the_tracebacks_envelope(self) -> None:
        """DeePMD under Horovod: ``[1] `` before each line of rank 1's traceback."""
        found = generic_scan(text_of('''
            [1] DEEPMD rank:1  INFO    receive global variables from task#0
            [1] Traceback (most recent call last):
            [1]   File "/envs/deepmd/lib/python3.10/site-packages/tensorflow/python/client/session.py", line 1377, in _do_call
            [1]     return fn(*args)
            [1] tensorflow.python.framework.errors_impl.UnknownError: ncclCommInitRank failed: unhandled cuda error
            '''))

        assert {"exception": "tensorflow.python.framework.errors_impl.UnknownError",
                "message": "ncclCommInitRank failed: unhandled cuda error"}.items() <= (
            _captures(found).items())

    def test_a_header_glued_to_a_progress_bars_end_starts_the_traceback(self) -> None:
        """Cut before its exception (as the page left it), only its header makes it one."""
        found = generic_scan(text_of('''
              0%|          | 0/2395 [00:00<?, ?it/s]Traceback (most recent call last):
              File "/workspace/train.py", line 40, in <module>
                trainer.train()
            '''))

        d = only(found, TB)
        assert ("cut_traceback", "/workspace/train.py:40 in <module>") == (
            dict(d.labels)["shape"], dict(d.captures)["frame"])

    def test_a_record_announcing_work_with_an_ellipsis_does_not_claim_the_traceback(
            self) -> None:
        """``statistics will be calculated...`` says what the run does next, not that it
        logs an exception; the traceback after it ended the run."""
        found = generic_scan(text_of('''
            INFO:root:statistics will be calculated...
            Traceback (most recent call last):
              File "/workspace/train.py", line 40, in <module>
                stats = dataset.get_statistics()
            KeyError: 'energy_U0'
            '''))

        assert "KeyError" == _captures(found)["exception"]
