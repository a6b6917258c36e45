"""torchrun whose workers start at once: `python -m training.launch <torchrun's arguments> -m training
<the trainer's arguments>` is torchrun (its elastic agent, rendezvous, restarts, signals and logs
unchanged), but a standalone job's workers are forked from the agent's process once it has imported
what every worker imports (torch with FSDP2 and DCP, the trainer, the model's transformers code),
instead of each starting an interpreter that imports it all again: the job's ranks pay those imports
once between them, not once each, and a worker torchrun starts again pays none.

Anything else runs as torchrun runs it: a job across nodes (its agent is the cluster's), an entrypoint
other than the trainer, and a machine with a CUDA device, where a driver that an import may have
initialized before the fork would be unusable in the workers.
"""

import os
import signal
import time

LAUNCH_START = time.time()  # before torch loads: a worker's start-up counts from here, as it would from its own

if __name__ == "__main__":
    # A stop that comes before there is a worker ends the launch at once, not once the imports are
    # done (torchrun's agent puts its own handlers in place when it starts the workers). Guarded: a
    # process that multiprocessing spawns from a worker imports this module again as its main.
    for _stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(_stop, lambda sig, _: os._exit(128 + sig))

import gc  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

from torch.distributed import run as torchrun  # noqa: E402
from torch.distributed.elastic import multiprocessing as elastic_processes  # noqa: E402
from torch.distributed.elastic.multiprocessing.api import SignalException  # noqa: E402
from torch.distributed.launcher.api import elastic_launch  # noqa: E402


class ExitCodeIsTheResult(elastic_processes.MultiprocessContext):
    """torchrun's context of workers run as a function, for workers that may end their process
    themselves: the trainer's stop paths exit from whichever thread hears the stop, with no value
    returned. A worker gone with exit 0 and nothing in its queue has succeeded (one that returned puts
    its value first, and stays until the agent has read every worker's)."""

    def _poll(self):
        for rank, process in enumerate(self._pc.processes):
            if rank not in self._return_values and process.exitcode == 0 and self._ret_vals[rank].empty():
                self._return_values[rank] = 0
        return super()._poll()


def cuda_device_visible() -> bool:
    """Whether this machine has an NVIDIA device, read from /dev: asking CUDA would initialize it."""
    return any(Path("/dev").glob("nvidia[0-9]*"))


def forks(args) -> bool:
    """Whether this job's workers are forked from the agent (the module docstring says when)."""
    return bool(args.standalone and args.module and args.training_script == "training" and not cuda_device_visible())


def worker(*argv: str) -> int:
    """A forked worker: `python -m training` from its imports on. A success is returned to torchrun's
    wrapper of the function (which hands the agent the result, then ends the process without an
    interpreter teardown); a failure ends the process at once with its code, as a worker of torchrun's
    own would."""
    from training.__main__ import start
    from training.runtime import process
    from training.runtime.elastic import exit_now

    # The agent's handlers (torchrun's: a signal raised as an exception) are not the worker's.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The first workers started with the launch; a worker torchrun starts again starts now.
    restarted = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"
    process.PROCESS_START = time.time() if restarted else LAUNCH_START
    code = start(list(argv))
    if code != 0:
        exit_now(code)
    return code


def warm_up(trainer_args: list[str]) -> None:
    """Import in the agent what each worker would (training.worker.warm_up: the model's code, the
    data cache's reader), then set it aside from the garbage collector so that the workers' pages
    stay shared with the agent's."""
    from training.runtime.arguments import parse_args
    from training.worker import warm_up as import_first_start

    import_first_start(parse_args(trainer_args).config_dir)
    gc.freeze()


def main(argv: list[str] | None = None) -> None:
    args = torchrun.parse_args(argv)
    if not forks(args):
        torchrun.run(args)
        return
    # What torchrun's own run() does for --standalone: a rendezvous on this machine, on a free port.
    args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    args.start_method = "fork"
    config, _, _ = torchrun.config_from_args(args)
    warm_up(args.training_script_args)
    elastic_processes.MultiprocessContext = ExitCodeIsTheResult  # what torchrun's start_processes builds
    try:
        elastic_launch(config=config, entrypoint=worker)(*args.training_script_args)
    except SignalException as stop:  # told to stop: the workers were stopped with it, nothing failed
        sys.exit(128 + stop.sigval)


if __name__ == "__main__":
    main(sys.argv[1:])
