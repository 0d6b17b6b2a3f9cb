"""``lowbit`` entry point: parse, dispatch to the subcommand module, report errors in one line each.

Exit status: 0 success; 1 ``inspect`` found layout violations; 2 bad arguments or a failed command (the
message names the file, tensor or flag; file system errors such as a full or read-only disk too, in one
line without a traceback); 130 a run stopped by Ctrl-C / SIGTERM (resumable when it was
checkpointing; the message says how).
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from ..errors import LowbitError
from .huge_pages import request_huge_pages
from .parser import build_parser
from .thread_default import host_default_threads

EXIT_FAILED = 2
EXIT_STOPPED = 130

# (module, class) of every package's exception root: an error below one of these is the user's to read,
# not a crash to trace. Checked through sys.modules so that `lowbit --help` imports no package.
PACKAGE_ERROR_ROOTS = (
    ("qformats.errors", "QFormatsError"),
    ("qkernels.errors", "QKernelsError"),
    ("qalgos.errors", "QAlgosError"),
    ("qlooper.errors", "QLooperError"),
    ("qcheckpoint.errors", "CheckpointError"),
    ("qhf.errors", "QHFError"),
)

# Commands whose default thread count follows the free cores (see thread_default). Commands that write a
# checkpoint keep torch's default: a float reduction split over another thread count can change the saved
# bits, and a checkpoint must not depend on how busy the machine was when the run started.
LOAD_AWARE_COMMANDS = frozenset({"inspect", "eval", "bench"})

COMMANDS = {
    "quantize": "lowbit.cli.quantize_cmd",
    "inspect": "lowbit.cli.inspect_cmd",
    "convert": "lowbit.cli.convert_cmd",
    "eval": "lowbit.cli.eval_cmd",
    "bench": "lowbit.cli.bench_cmd",
    "quickstart": "lowbit.cli.quickstart_cmd",
}


def is_reportable(exc: BaseException) -> bool:
    """True for errors of lowbit or of any package below it (their messages name what is wrong)."""
    if isinstance(exc, LowbitError):
        return True
    for module_name, class_name in PACKAGE_ERROR_ROOTS:
        module = sys.modules.get(module_name)
        root = getattr(module, class_name, None) if module is not None else None
        if isinstance(root, type) and isinstance(exc, root):
            return True
    return False


WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, getattr(errno, "EDQUOT", -1)})


def describe_os_error(exc: OSError) -> str:
    """One line for a file system error: the file, the system's reason and, for write failures, what is needed."""
    where = f"{exc.filename}: " if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno in WRITE_ERRNOS:
        needed = "expected a writable location with enough free space; an output being saved is left as before"
        return f"{where}{reason} ({needed})"
    return f"{where}{reason}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lowbit`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    request_huge_pages()  # before torch's first tensor: it reads the switch once (lowbit.cli.huge_pages)
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    args.argv = raw
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    free_cores = args.command in LOAD_AWARE_COMMANDS
    threads = args.threads if args.threads is not None else (host_default_threads() if free_cores else None)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
        logging.getLogger("lowbit").info(
            "torch CPU threads: %d (%s)", threads, "--threads" if args.threads is not None else "free cores now"
        )
    command = importlib.import_module(COMMANDS[args.command])
    try:
        return int(command.run(args))
    except KeyboardInterrupt:
        print(f"lowbit {args.command}: interrupted; nothing was saved", file=sys.stderr)
        return EXIT_STOPPED
    except BrokenPipeError:  # the reader of our output went away (`lowbit inspect DIR | head`)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        if isinstance(exc, OSError) and not is_reportable(exc):
            print(f"lowbit {args.command}: error: {describe_os_error(exc)}", file=sys.stderr)
            return EXIT_FAILED
        if not is_reportable(exc):
            raise
        print(f"lowbit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
