import faulthandler


def start(argv: list[str] | None = None) -> int:
    """One worker of the job, from its command line (`python -m training ...`, or forked by
    training.launch with the same arguments) to its exit code."""
    from training.runtime.arguments import parse_args
    from training.runtime.elastic import ElasticStop, die_with_parent

    args = parse_args(argv)  # --help and a mistyped flag answer before torch loads
    # A crash in native code (a segfault in a kernel or a collective) prints every thread's Python
    # stack to the worker's log, not only torchrun's "exitcode -11".
    faulthandler.enable()
    # Before any heavy import: an orphaned or signalled worker must never wait for torch to load.
    die_with_parent()
    stop = ElasticStop()

    from training.worker import main

    return main(args, stop=stop)


# Guarded: a process that multiprocessing starts from this one (spawn, forkserver: the reward
# functions' pool) imports the main module again, and must not start training.
if __name__ == "__main__":
    from training.runtime.elastic import exit_now

    # Everything is saved and flushed: no interpreter teardown of a large model and the distributed
    # runtime, which would only delay the restart at the new size.
    exit_now(start())
