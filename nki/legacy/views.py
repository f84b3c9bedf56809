"""Legacy views that are not a plain index of one tensor: run-time starts read from a
1-element tile (``t[i_p, idx[0, j] + i_f]``), operand masks (``t[i_f < 64]``) and block
tensors whose blocks the kernel placed apart (spec §1.7, §1.9, §2 ``nki.compiler``)."""

from __future__ import annotations

from nki.lang.tensor import NkiTensor
from nki.lang.tracer import validation
from nki.legacy.index import DynIndex, IndexExpr, Predicate
from nki.legacy.pending import value
from nki.legacy.tile import BlockTensor, LegacyTile, _unsupported, as_legacy, legacy_index


def dynamic_index(t: NkiTensor, key: tuple, dyn: list[int]) -> NkiTensor:
    """``t[i_p, idx[0, j] + i_f]``: the static view moved at run time by the value of a
    1-element tile times the indexed dim's stride (a register load; the current dialect's
    ``.ap(scalar_offset=)``). One run-time index per view, on a free dim on chip."""
    from nki.lang.common import Call
    from nki.lang.control import scalar_register

    if len(dyn) > 1 or (t.on_chip and dyn[0] == 0):
        raise validation("err_indirect_indices_free_dim", f"indexing {t.name!r}: one run-time "
                         "index per access, on a free dim of an on-chip tile")
    d = dyn[0]
    k = key[d]
    tile, static = (k.tile, k.expr) if isinstance(k, DynIndex) else (k, 0)
    tile = value(tile)
    if isinstance(static, int) and any(isinstance(x, IndexExpr) for x in key):
        static = IndexExpr(static, (), ())
    view = legacy_index(t, key[:d] + (static,) + key[d + 1:])
    reg = scalar_register(Call(f"{t.name}[]"), tile)
    out = view._new(view._dims, off=reg.nki_affine() * t.strides[d] + view._off)
    return as_legacy(out)


def masked_operand(t: NkiTensor, pred: Predicate) -> NkiTensor:
    """``t[i_f < 64]``: operand masking (spec §1.9), the view of the rectangle of ``t``'s
    iteration space that the predicate keeps."""
    from nki.legacy.mask import rectangle, shrink

    rect = rectangle(pred, t.shape, "operand mask")
    if rect is None:
        raise validation("err_unsupported_expression_in_mask", f"the operand mask {pred!r} "
                         f"keeps no element of {t.name!r} {t.shape}")
    view = as_legacy(shrink(t, rect, t.shape, "operand", "operand mask"))
    if view is t:
        view = LegacyTile(t._decl, t._dtype, t._part, t._off, t._dims, t._ind)
    view._omask = (t.shape, rect)
    return view


class PlacedBlocks(BlockTensor):
    """A block tensor whose blocks the kernel placed apart (``ncc.sbuf.mod_alloc`` with
    fewer physical tiles than blocks, or an allocation function): one placed tile per block
    index, so blocks that share bytes alias as they do on hardware."""

    def __init__(self, tiles: dict[tuple[int, ...], LegacyTile]):
        first = next(iter(tiles.values()))
        super().__init__(first, len(next(iter(tiles))))
        self.tiles = tiles
        self.blocks = tuple(max(i[k] for i in tiles) + 1 for k in range(self.nblock))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.blocks + self.base.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _block(self, key: tuple) -> tuple[NkiTensor, tuple]:
        key = key if isinstance(key, tuple) else (key,)
        blocks, rest = key[:self.nblock], key[self.nblock:]
        if any(not hasattr(b, "__index__") or isinstance(b, bool) for b in blocks):
            raise _unsupported(f"{self.name!r} needs its block indices as ints")
        idx = tuple(int(b) for b in blocks)
        if len(idx) < self.nblock:       # ``t[i]`` of a 2-block tensor: the blocks under i
            n = len(idx)
            sub = {k[n:]: t for k, t in self.tiles.items() if k[:n] == idx}
            if not sub:
                raise validation("err_tensor_access_out_of_bound", f"block {idx} of "
                                 f"{self.name!r} (blocks {self.blocks})")
            return PlacedBlocks(sub), ()
        if idx not in self.tiles:
            raise validation("err_tensor_access_out_of_bound", f"block {idx} of {self.name!r} "
                             f"(blocks {self.blocks})")
        return self.tiles[idx], rest
