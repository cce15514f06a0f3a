"""What can go wrong in a render; every message is one line that names the fix."""

from __future__ import annotations

from ..errors import McinspectError


class RenderError(McinspectError):
    """A render could not be produced."""


class UnknownFocus(RenderError, LookupError):
    """The focus names no node or request of the state."""


class DotNotFound(RenderError):
    """No Graphviz binary was found."""


class DotFailed(RenderError):
    """The Graphviz binary exited with an error."""


class DotTimeout(DotFailed):
    """The Graphviz binary ran past its time limit (and was killed)."""
