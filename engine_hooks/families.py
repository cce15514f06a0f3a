"""The hybrid model families mcinspect knows, and how each lays out its mamba state: the
embedded engine serves a tiny model of each, and a production engine's EngineInfo names its own.

A family is named by the checkpoint's architecture; its state layout says what sglang's mamba
pool holds per slot and layer (`mamba_cache.conv[i][layer, slot]`, `.temporal[layer, slot]`):
which channels the conv window concatenates and what the temporal axes are. The shapes and
dtypes themselves are read from the live pool (`EngineInfo`); the layout names their meaning.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelFamily:
    """One family of hybrid models sglang 0.5.23 serves with a mamba state cache."""

    name: str
    """What `mcinspect demo --model` takes."""
    architecture: str
    """`config.json`'s architectures[0]."""
    mixer: str
    """The linear-attention kind whose state is cached."""
    conv_channels: str
    """What the conv window's channels are, in order."""
    temporal_axes: str
    """The temporal state's axes, per slot and layer."""

    @property
    def state_layout(self) -> str:
        """One line for summaries: mixer, conv channels, temporal axes."""
        return f"{self.mixer}: conv {self.conv_channels} (channels x kernel-1), temporal {self.temporal_axes}"


QWEN3_NEXT = ModelFamily(
    name="qwen3-next",
    architecture="Qwen3NextForCausalLM",
    mixer="gated delta net",
    conv_channels="q | k | v",
    temporal_axes="[value heads, value dim, key dim]",
)
NEMOTRON_H = ModelFamily(
    name="nemotron-h",
    architecture="NemotronHForCausalLM",
    mixer="mamba2",
    conv_channels="x | B | C",
    temporal_axes="[heads, head dim, state dim]",
)
QWEN3_5 = ModelFamily(
    name="qwen3.5",
    architecture="Qwen3_5ForCausalLM",
    mixer="gated delta net",
    conv_channels="q | k | v",
    temporal_axes="[value heads, value dim, key dim]",
)

FAMILIES: dict[str, ModelFamily] = {family.name: family for family in (QWEN3_NEXT, NEMOTRON_H, QWEN3_5)}
DEFAULT_FAMILY = QWEN3_NEXT.name


class UnknownFamily(ValueError):
    """A family name mcinspect does not know; the message lists the known ones."""


def get_family(name: str) -> ModelFamily:
    """The family called `name`, or UnknownFamily."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownFamily(f"unknown model family {name!r}; choose one of {', '.join(FAMILIES)}") from None


def family_of_architecture(architecture: str) -> ModelFamily | None:
    """The family of a checkpoint architecture (None: not one mcinspect knows)."""
    return next((family for family in FAMILIES.values() if family.architecture == architecture), None)
