"""Values tether returns: a finished command, one piece of a process's output, a copy's
report."""

from __future__ import annotations

import subprocess
import json
from dataclasses import dataclass, field
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from ._errors import CalledProcessError


class Output(NamedTuple):
    """One chunk of a process's output, in the order the process wrote it. ``stream`` is
    ``"stdout"``, ``"stderr"``, or ``"pty"`` for a process on a terminal."""

    stream: str
    data: bytes


class HttpResponse(NamedTuple):
    """An HTTP response received on the executor: ``headers`` as ``(name, value)`` pairs in
    the order they came (names lower-cased), the whole ``body``."""

    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (any case), or ``None``."""
        name = name.lower()
        return next((value for key, value in self.headers if key == name), None)

    def json(self) -> Any:
        return json.loads(self.body)


def header_pairs(headers: Union[Mapping[str, str], Sequence[Tuple[str, str]], None]) -> List[Tuple[str, str]]:
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        return [(str(k), str(v)) for k, v in headers.items()]
    return [(str(k), str(v)) for k, v in headers]


class CompletedProcess(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """What :meth:`tether.Executor.run` returns: ``args``, ``returncode``, ``stdout`` and
    ``stderr`` (bytes, or str with ``text=True``), as ``subprocess.run`` returns them."""

    def check_returncode(self) -> None:
        """Raises :class:`tether.CalledProcessError` if the command exited non-zero."""
        if self.returncode:
            raise CalledProcessError(self.returncode, self.args, self.stdout, self.stderr)


Args = Union[str, Sequence[str]]


def argv(args: Args, shell: bool) -> List[str]:
    """The argument vector for ``args``: a string is one program (or, with ``shell=True``,
    a command line for ``/bin/sh -c``), as ``subprocess`` reads it."""
    if shell:
        if not isinstance(args, str):
            args = " ".join(args)
        return ["/bin/sh", "-c", args]
    if isinstance(args, (str, bytes)):
        return [args.decode() if isinstance(args, bytes) else args]
    return [str(arg) for arg in args]


def decoded(data: bytes, text: bool, encoding: Any, errors: Any) -> Any:
    if not (text or encoding or errors):
        return data
    return data.decode(encoding or "utf-8", errors or "strict")


@dataclass(frozen=True)
class CopyReport:
    """What ``upload`` or ``download`` copied, and what it did not. ``skipped`` names the files
    and directories of a tree that could not be read (permission denied), the first thousand;
    ``denied`` counts them all. ``special`` counts FIFOs, sockets and devices left out;
    ``metadata_not_kept``, ``links_skipped`` and ``links_followed`` what a server without
    Tether's ``fsMetadata`` (the reference) could not keep."""

    files: int = 0
    directories: int = 0
    links: int = 0
    bytes: int = 0
    skipped: List[str] = field(default_factory=list)
    denied: int = 0
    special: int = 0
    metadata_not_kept: int = 0
    links_skipped: int = 0
    links_followed: int = 0

    @property
    def whole(self) -> bool:
        """Whether everything found was copied as it was: nothing skipped or left out."""
        return not (
            self.denied
            or self.special
            or self.metadata_not_kept
            or self.links_skipped
            or self.links_followed
        )
