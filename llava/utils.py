"""Logging setup, serving messages and small runtime helpers.

``setup_logging`` configures the root logger once for scripts (with :class:`RankZeroFilter` so that
only the main process of a distributed run prints); ``build_logger`` gives the serving processes a
named logger that also writes to a daily-rotated file under ``LOGDIR``.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import logging.handlers
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from llava.constants import LOGDIR
from llava.plugin_api import BOOLEAN_WORDS, FALSE_WORDS, TRUE_WORDS, parse_bool  # the one boolean rule: a plugin's too

server_error_msg = "**NETWORK ERROR DUE TO HIGH TRAFFIC. PLEASE REGENERATE OR REFRESH THIS PAGE.**"

LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

# Marks the console handler installed by setup_logging, so repeated calls reuse it.
_HANDLER_MARK = "_llava_setup_logging"

_RANK_ENV_VARS = ("LOCAL_RANK", "RANK")


def _formatter() -> logging.Formatter:
    return logging.Formatter(fmt=LOG_FORMAT, datefmt=LOG_DATE_FORMAT)


def get_rank() -> int:
    """Return this process's rank from ``LOCAL_RANK`` or ``RANK`` (0 when neither is set)."""
    for name in _RANK_ENV_VARS:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"environment variable {name}={value!r} is not an integer rank") from None
    return 0


class RankZeroFilter(logging.Filter):
    """Let records through only on rank 0, so a distributed run logs once instead of once per GPU.

    Args:
        rank: This process's rank; read from ``LOCAL_RANK``/``RANK`` when ``None``.
    """

    def __init__(self, rank: int | None = None) -> None:
        super().__init__()
        self.rank = get_rank() if rank is None else rank

    def filter(self, record: logging.LogRecord) -> bool:
        return self.rank == 0


def setup_logging(level: int | str = logging.INFO, *, stream: TextIO | None = None) -> logging.Logger:
    """Configure the root logger for a script; safe to call more than once.

    The first call installs one console handler (``stream``, default stderr) carrying a
    :class:`RankZeroFilter`; later calls only change the level.

    Args:
        level: Logging level, e.g. ``logging.INFO`` or ``"DEBUG"``.
        stream: Where console records go.

    Returns:
        The root logger.

    Raises:
        ValueError: If ``level`` is not a known level name.
    """
    if isinstance(level, str):
        resolved = logging.getLevelName(level.upper())
        if not isinstance(resolved, int):
            raise ValueError(
                f"unknown logging level {level!r}; expected DEBUG, INFO, WARNING, ERROR or CRITICAL"
            )
        level = resolved
    root = logging.getLogger()
    root.setLevel(level)
    if not any(getattr(handler, _HANDLER_MARK, False) for handler in root.handlers):
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
        handler.setFormatter(_formatter())
        handler.addFilter(RankZeroFilter())
        setattr(handler, _HANDLER_MARK, True)
        root.addHandler(handler)
    return root


class _StreamToLogger:
    """File-like object that forwards complete lines written to it to a logger."""

    def __init__(self, logger: logging.Logger, level: int, terminal: TextIO) -> None:
        self.logger = logger
        self.level = level
        self.terminal = terminal
        self._pending = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.terminal, name)

    def write(self, text: str) -> int:
        lines = (self._pending + text).splitlines(keepends=True)
        self._pending = ""
        for line in lines:
            if line.endswith("\n"):
                self.logger.log(self.level, line.rstrip())
            else:
                self._pending = line
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.logger.log(self.level, self._pending.rstrip())
            self._pending = ""


def build_logger(
    logger_name: str, logger_filename: str, *, redirect_stdio: bool = False
) -> logging.Logger:
    """Return an INFO logger named ``logger_name`` that also writes to ``LOGDIR/logger_filename``.

    The file is rotated daily (UTC). Calling again with the same names adds no duplicate handler.

    Args:
        logger_name: Logger name, e.g. ``"model_worker"``.
        logger_filename: File name under ``LOGDIR``.
        redirect_stdio: Also send ``sys.stdout``/``sys.stderr`` lines to loggers named ``"stdout"``
            and ``"stderr"`` (what upstream's servers always did); off by default.
    """
    setup_logging()
    logger = logging.getLogger(logger_name)
    logger.setLevel(logging.INFO)

    os.makedirs(LOGDIR, exist_ok=True)
    filename = os.path.abspath(os.path.join(LOGDIR, logger_filename))
    has_file = any(
        isinstance(handler, logging.FileHandler) and handler.baseFilename == filename
        for handler in logger.handlers
    )
    if not has_file:
        handler = logging.handlers.TimedRotatingFileHandler(
            filename, when="D", utc=True, encoding="utf-8"
        )
        handler.setFormatter(_formatter())
        logger.addHandler(handler)

    if redirect_stdio and not isinstance(sys.stdout, _StreamToLogger):
        stdout_logger = logging.getLogger("stdout")
        stdout_logger.setLevel(logging.INFO)
        sys.stdout = _StreamToLogger(stdout_logger, logging.INFO, sys.stdout)
        stderr_logger = logging.getLogger("stderr")
        stderr_logger.setLevel(logging.ERROR)
        sys.stderr = _StreamToLogger(stderr_logger, logging.ERROR, sys.stderr)
    return logger


class UserError(ValueError):
    """Bad input from the user (a flag, a file, a folder); ``str(error)`` is one sentence meant for them.

    A ``ValueError`` subclass, so code that catches ``ValueError`` keeps working.
    """


#: Set to 1 to see the full traceback of an expected user error too.
TRACEBACK_ENV = "LLAVA_TRACEBACK"

#: Entry-point groups through which plugins (compressors, towers, language models) register into llava.
PLUGIN_ENTRY_POINT_GROUPS = ("llava.projectors", "llava.vision_towers", "llava.language_models")

_LOADED_GROUPS: set[str] = set()


def load_entry_points(group: str, what: str) -> None:
    """Import the module of every entry point in ``group`` once per process (the import registers the plugin).

    A plugin that fails to import is logged and skipped: a broken plugin must not hide the built-ins.

    Args:
        group: An entry-point group, e.g. ``"llava.projectors"``.
        what: What the group's plugins provide, for the warning (e.g. ``"projector"``).
    """
    from importlib.metadata import entry_points

    if group in _LOADED_GROUPS:
        return
    _LOADED_GROUPS.add(group)
    for entry in entry_points(group=group):
        try:
            entry.load()
        except Exception as exc:
            logging.getLogger(__name__).warning("could not load %s plugin %r (%s): %s", what, entry.name, entry.value, exc)


@functools.lru_cache(maxsize=1)
def _own_package_dirs() -> tuple[str, ...]:
    """Folders whose ValueErrors are deliberate one-sentence messages (the project's rule for bad input):
    ``llava/``, the repository's ``scripts/`` and the top-level package of every installed llava plugin."""
    from importlib.metadata import entry_points

    root = Path(__file__).resolve().parents[1]
    dirs = [root / "llava", root / "scripts"]
    for group in PLUGIN_ENTRY_POINT_GROUPS:
        for entry in entry_points(group=group):
            spec = importlib.util.find_spec(entry.value.split(":")[0].split(".")[0])
            if spec is not None and spec.submodule_search_locations:
                dirs.extend(Path(location) for location in spec.submodule_search_locations)
    return tuple(str(path.resolve()) + os.sep for path in dirs)


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` is an expected user error rather than a bug.

    A :class:`UserError` and a ``FileNotFoundError`` always are; any other ``ValueError`` is when this
    project or one of its plugins raised it (the innermost frame of its traceback is in ``llava/``,
    ``scripts/`` or an installed plugin's package), since a ValueError escaping a library is not a message written for the user.
    """
    if isinstance(error, (UserError, FileNotFoundError)):
        return True
    if not isinstance(error, ValueError):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(_own_package_dirs())


def cli_main(main: Callable[..., Any], argv: Any = None) -> int:
    """Run a command-line ``main(argv)``: a user error prints one line to stderr and exits 2.

    Bugs keep their traceback. ``LLAVA_TRACEBACK=1`` shows the traceback of user errors too.

    Returns:
        0 on success (for ``raise SystemExit(cli_main(main))``).
    """
    try:
        main(argv)
    except (ValueError, FileNotFoundError) as error:
        if not is_user_error(error) or os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "llava"
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    return 0


def disable_torch_init() -> None:
    """Skip the random initialisation of ``nn.Linear`` and ``nn.LayerNorm`` for the whole process.

    Loading pretrained weights overwrites that initialisation anyway, so skipping it makes model
    construction much faster. Undo with :func:`enable_torch_init`.
    """
    import torch.nn as nn

    for module_cls in (nn.Linear, nn.LayerNorm):
        if "_llava_reset_parameters" not in module_cls.__dict__:
            module_cls._llava_reset_parameters = module_cls.reset_parameters
            module_cls.reset_parameters = _skip_reset_parameters


def enable_torch_init() -> None:
    """Restore the default initialisation removed by :func:`disable_torch_init`."""
    import torch.nn as nn

    for module_cls in (nn.Linear, nn.LayerNorm):
        original = module_cls.__dict__.get("_llava_reset_parameters")
        if original is not None:
            module_cls.reset_parameters = original
            del module_cls._llava_reset_parameters


def _skip_reset_parameters(self: Any) -> None:
    """Stand-in for ``reset_parameters`` that leaves the freshly allocated weights untouched."""


def pretty_print_semaphore(semaphore: Any) -> str:
    """Describe an ``asyncio.Semaphore`` (or ``None``) for worker status logs."""
    if semaphore is None:
        return "None"
    return f"Semaphore(value={semaphore._value}, locked={semaphore.locked()})"


#: ``--reducer``'s help (every command that generates has the flag; :func:`add_reducer_flag`).
REDUCER_HELP = ("an in-LLM token reducer to run at its decoder layers, on any checkpoint whatever its projector: a "
                "registered reducer type (docs/PLUGINS.md; an unknown name lists the installed ones); default: none")


def add_reducer_flag(parser: Any) -> None:
    """``--reducer NAME`` on an argparse parser (no import of torch: ``--help`` stays light); the name is checked by
    :func:`llava.model.reducers.resolve_reducer` before any model loads."""
    parser.add_argument("--reducer", type=str, default=None, metavar="NAME", help=REDUCER_HELP)


__all__ = [
    "BOOLEAN_WORDS",
    "REDUCER_HELP",
    "add_reducer_flag",
    "FALSE_WORDS",
    "TRUE_WORDS",
    "TRACEBACK_ENV",
    "parse_bool",
    "RankZeroFilter",
    "UserError",
    "cli_main",
    "is_user_error",
    "build_logger",
    "disable_torch_init",
    "enable_torch_init",
    "get_rank",
    "pretty_print_semaphore",
    "server_error_msg",
    "setup_logging",
]
