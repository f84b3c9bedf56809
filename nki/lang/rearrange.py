"""``NkiTensor.rearrange``: einops-style split / reorder / merge of a view's dims.

A pattern is a tuple with one entry per dim: a name, or a tuple of names for a dim that is
split (source) or merged (destination). It lowers to ``reshape`` (split every source group
into its names) -> ``permute`` (into destination order) -> ``reshape`` (merge destination
groups), so every view rule of those methods applies (partition dim kept on chip, merged
dims must chain in memory) and is reported by them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nki.lang.tracer import validation

if TYPE_CHECKING:
    from nki.lang.tensor import NkiTensor


def _groups(pattern, what: str) -> list[tuple[str, ...]]:
    """One tuple of names per dim of ``pattern``."""
    if isinstance(pattern, str) or not isinstance(pattern, (tuple, list)):
        raise validation("nki_invalid_view", f"rearrange {what} must be a tuple of names or "
                         f"tuples of names, got {pattern!r}")
    out = []
    for entry in pattern:
        names = (entry,) if isinstance(entry, str) else tuple(entry)
        if not names or not all(isinstance(n, str) for n in names):
            raise validation("nki_invalid_view", f"rearrange {what} entry {entry!r} is not a "
                             "name or a non-empty tuple of names")
        out.append(names)
    return out


def _flat(groups: list[tuple[str, ...]], what: str) -> list[str]:
    names = [n for g in groups for n in g]
    if len(set(names)) != len(names):
        raise validation("nki_invalid_view", f"rearrange {what} repeats a name: {names}")
    return names


def _sizes(t: NkiTensor, src: list[tuple[str, ...]], fixed: dict[str, int]) -> dict[str, int]:
    """The size of every source name: given by ``fixed_sizes`` or, for at most one name per
    split dim, inferred from that dim's size."""
    sizes: dict[str, int] = {}
    for dim, names in enumerate(src):
        extent = t.shape[dim]
        unknown = [n for n in names if fixed.get(n, -1) == -1]
        known = 1
        for n in names:
            if n not in unknown:
                known *= int(fixed[n])
        if len(unknown) > 1 and len(names) > 1:
            raise validation("nki_invalid_view", f"rearrange: dim {dim} of {t.name!r} splits "
                             f"into {names}; give the sizes of all but one in fixed_sizes")
        if unknown:
            if known <= 0 or extent % known:
                raise validation("nki_invalid_view", f"rearrange: dim {dim} of {t.name!r} has "
                                 f"size {extent}, not divisible by {known} for {names}")
            sizes[unknown[0]] = extent // known
        elif known != extent:
            raise validation("nki_invalid_view", f"rearrange: sizes of {names} multiply to "
                             f"{known}, but dim {dim} of {t.name!r} has size {extent}")
        for n in names:
            sizes.setdefault(n, int(fixed.get(n, 0)))
    return sizes


def rearrange_view(t: NkiTensor, src_pattern, dst_pattern,
                   fixed_sizes: dict[str, int] | None = None) -> NkiTensor:
    """``t.rearrange(src, dst, fixed_sizes)`` as a reshape -> permute -> reshape chain."""
    src, dst = _groups(src_pattern, "src_pattern"), _groups(dst_pattern, "dst_pattern")
    if len(src) != t.ndim:
        raise validation("nki_invalid_view", f"rearrange src_pattern has {len(src)} entries "
                         f"for the {t.ndim} dims of {t.name!r}")
    src_names, dst_names = _flat(src, "src_pattern"), _flat(dst, "dst_pattern")
    if sorted(src_names) != sorted(dst_names):
        raise validation("nki_invalid_view", f"rearrange patterns name different dims: "
                         f"{src_names} vs {dst_names}")
    sizes = _sizes(t, src, dict(fixed_sizes or {}))
    view = t.reshape(tuple(sizes[n] for n in src_names))
    view = view.permute(tuple(src_names.index(n) for n in dst_names))
    merged = []
    for names in dst:
        n = 1
        for name in names:
            n *= sizes[name]
        merged.append(n)
    return view.reshape(tuple(merged))
