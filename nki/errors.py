"""The one error catalog of nki.

Every rule a kernel can break has a code. Where NKI itself has a code (``err_...``, from AWS's
``nki.errors`` manual) we use it; where it has none we add one in the same style, prefixed
``nki_``. Every error names its code, states the rule in words, and points at the user's
``file:line``::

    NkiValidationError: [err_num_partition_exceed_arch_limit] nisa.tensor_tensor: partition
    dimension 256 of 'data1' exceeds the architecture limit of 128
      at softmax.py:14:   nisa.tensor_tensor(dst=t, data1=a, data2=b, op=nl.add)

This module is a leaf: it imports nothing from nki.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass

from nki._frozen import fast_init


@fast_init
@dataclass(frozen=True)
class SourceLoc:
    """Where in the user's source an IR node came from."""

    filename: str
    lineno: int
    function: str = ""

    @property
    def short(self) -> str:
        """``file.py:42`` — the form used in messages and origin comments."""
        return f"{os.path.basename(self.filename)}:{self.lineno}"

    def source_line(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        return self.short


# code -> the rule, in words. Codes from AWS's manual first, then ours.
CATALOG: dict[str, str] = {
    # --- NKI's own codes ---
    "err_1d_arange_not_supported": "indexing with a 1-D nl.arange is not supported; "
    "add a None axis",
    "err_activation_bias_invalid_type": "activation bias must be a [P,1] vector of a float type",
    "err_activation_scale_invalid_type": "activation scale must be an fp32 scalar or fp32 vector",
    "err_activation_scale_scalar_or_vector": "activation scale must be a scalar or a [P,1] vector",
    "err_ambiguous_tensor_truth_value": "the truth value of a tensor is ambiguous",
    "err_annotation_shape_mismatch": "the value does not have the annotated shape",
    "err_cannot_assign_to_index": "index tensors are read-only; materialise them with nisa.iota",
    "err_cannot_update_immutable_parameter": "kernel parameters are immutable unless "
    "annotated nt.mutable_tensor",
    "err_control_flow_condition_depending_on_arange": "control flow may not depend on nl.arange",
    "err_dynamic_control_flow_not_supported": "control flow on tensor values is not supported",
    "err_exceed_max_supported_dimension": "too many dimensions for this API",
    "err_failed_to_infer_tile_from_local_tensor": "compute operands must be tiles "
    "(partition dimension first)",
    "err_hbm_tensor_with_init_value_not_supported": "HBM tensors cannot be created with an "
    "initial value",
    "err_indirect_indices_free_dim": "dynamic indices are only allowed on the partition dimension",
    "err_leading_dimension_of_tensor_must_be_partition": "the leading dimension of an on-chip "
    "tensor must be the partition dimension",
    "err_local_variable_used_out_of_scope": "a tensor defined in a block is used outside it",
    "err_mutable_parameter_not_returned": "a mutable parameter must be returned",
    "err_nested_kernel_with_spmd_grid":
        "a kernel with a launch grid cannot be called from a kernel",
    "err_nki_api_outside_of_nki_kernel": "NKI APIs can only be used inside an @nki.jit kernel",
    "err_num_partition_exceed_arch_limit": "the partition dimension exceeds the architecture limit",
    "err_num_partition_mismatch": "operands must have the same number of partitions",
    "err_shared_hbm_must_in_kernel_level": "shared_hbm tensors must be created at kernel level",
    "err_size_of_dimension_exceed_arch_limit": "a dimension exceeds the architecture limit",
    "err_store_dst_shape_smaller_than_other_shape": "the destination is smaller than the source",
    "err_tensor_access_out_of_bound": "the access is out of the tensor's bounds",
    "err_tensor_creation_on_scratchpad_with_init_value_not_supported": "directly allocated "
    "SBUF/PSUM tensors cannot be created with an initial value",
    "err_tensor_output_not_written_to": "a kernel output is never written",
    "err_unexpected_output_dependencies": "the same location is written by different parallel "
    "iterations or cores",
    "err_unsupported_expression_in_mask": "a mask must compare affine expressions of "
    "nl.arange / loop indices, combined with '&'",
    "err_unsupported_memory": "an operand is in a memory this instruction cannot access",
    "err_unsupported_mixing_basic_advanced_tensor_indexing": "basic and advanced indexing "
    "cannot be mixed",
    # --- ours, for rules NKI states without a code ---
    "nki_unsupported_dtype": "the dtype is not an NKI dtype",
    "nki_dtype_mismatch": "operand dtypes do not satisfy the instruction's rule",
    "nki_shape_mismatch": "operand shapes do not satisfy the instruction's rule",
    "nki_invalid_argument": "an argument has an invalid value",
    "nki_invalid_view": "the view operation is not valid for this tensor",
    "nki_psum_free_size_exceeded": "a PSUM tile exceeds one 2 KiB bank per partition",
    "nki_matmul_free_size_exceeded": "a matmul operand's free size exceeds the TensorE limit",
    "nki_engine_memory_rule": "the engine cannot access this memory",
    "nki_sbuf_capacity_exceeded": "live SBUF tensors exceed the SBUF capacity",
    "nki_psum_capacity_exceeded": "live PSUM tensors exceed the PSUM capacity",
    "nki_sbuf_spill": "live SBUF tensors exceed the SBUF capacity; the compiler spills some "
    "to HBM between their uses and reloads them",
    "nki_sbuf_fragmented": "the live SBUF tensors fit the capacity, but our placement could "
    "not pack them",
    "nki_psum_reordered": "the PSUM tiles fit only when reads of accumulated tiles are "
    "scheduled ahead of program order, as a compiler may schedule them",
    "nki_misaligned_address": "the address is not aligned for the tensor's dtype",
    "nki_removed_in_release": "the spelling was accepted by an earlier NKI release, which "
    "gave it a meaning we cannot reproduce unambiguously",
    "nki_address_out_of_range": "a tile placed at an address does not lie inside its memory "
    "(partitions, bytes per partition)",
    "nki_uninitialized_read": "an instruction reads on-chip memory that was never written",
    "nki_runtime_out_of_bounds": "a dynamic access is out of bounds",
    "nki_register_file_exceeded": "more virtual registers are live at once than the "
    "simulator's register file holds",
    "nki_loop_budget_exceeded": "a runtime loop ran more iterations than the loop budget "
                                "allows",
    "nki_not_implemented": "this NKI feature is not implemented by the simulator yet",
    "nki_kernel_return": "a kernel must return shared_hbm tensors it created",
    "nki_bad_kernel_argument": "a kernel argument is not an array NKI can take",
    "nki_shape_only_argument": "a shape-only placeholder (nt.tensor[[shape], dtype]) has no "
    "data: a kernel given one can be specialized or estimated, not simulated",
    "nki_accumulate_uninitialized": "accumulate=True on PSUM no matmul initialised",
    "nki_lnc_degree": "the LNC launch degree is not supported",
    "nki_unsupported_on_target": "the instruction or option is not available on the target "
    "NeuronCore generation",
    "nki_collective_deadlock": "the cores of a launch wait in cross-core calls that can never "
    "complete (mismatched barriers, sends or collectives)",
    "nki_collective_mismatch": "cores met in one cross-core call with different calls or "
    "operand sizes",
    # NKI 0.7/0.8 surfaces: compile configuration, tile grids, multi-rank runs
    "nki_invalid_compile_config": "the nki.compiler configuration is not valid (an option of "
    "the wrong type, or one that needs another mode)",
    "nki_invalid_grid": "the tile-grid operation is not valid for this grid or tensor",
    "nki_rank_inputs_mismatch": "the ranks of a multi-rank run must pass tensors of one shape "
    "and dtype and equal other arguments",
    "nki_cost_data_dependent": "the cost model cannot estimate control flow that depends on "
    "data (a runtime loop over register values) from the program alone",
    # engine state read before it is written (the table in nki/sim/uninit.py)
    "nki_uninitialized_register": "an instruction reads an engine accumulator or a register "
    "that nothing in the kernel wrote; on hardware it holds whatever was there before",
}


class NkiError(Exception):
    """Base of every error nki raises about a kernel.

    Attributes:
        code: the catalog code (``err_...`` or ``nki_...``).
        detail: what exactly went wrong, naming the API and operands.
        loc: the user's source location, when known.
    """

    def __init__(self, code: str, detail: str, loc: SourceLoc | None = None):
        if code not in CATALOG:
            raise KeyError(f"unknown nki error code {code!r}")
        self.code = code
        self.detail = detail
        self.loc = loc
        super().__init__(self._format())

    @property
    def rule(self) -> str:
        return CATALOG[self.code]

    def _format(self) -> str:
        text = f"[{self.code}] {self.detail}\n  rule: {self.rule}"
        if self.loc is not None:
            text += f"\n  at {self.loc.short}: {self.loc.source_line()}"
        return text


class NkiValidationError(NkiError):
    """A kernel broke an NKI rule; found while tracing or checking, before anything runs."""


class NkiCapacityError(NkiValidationError):
    """Live on-chip tensors do not fit the target's SBUF or PSUM."""


class NkiRuntimeError(NkiError):
    """A fault while simulating (for example a dynamic offset out of bounds)."""


class NkiIndexError(NkiRuntimeError, IndexError):
    """A run-time out-of-bounds access; also an ``IndexError``, as AWS's simulator raised
    for an indirect DMA index out of range."""


class NkiUnsupportedError(NkiError, NotImplementedError):
    """A legal NKI feature the simulator does not implement yet."""


class NkiTypeError(NkiValidationError, TypeError):
    """An argument has the wrong type (dtype, tensor kind, Python type)."""


class NkiValueError(NkiValidationError, ValueError):
    """An argument has a wrong value; also a ``ValueError``, as AWS raises for it."""


class NkiRaceWarning(UserWarning):
    """Two LNC cores write the same shared HBM bytes with nothing ordering the writes. The
    result is whichever write lands last: defined only when both write the same values,
    which real kernels rely on (``check_races=True`` makes it an error)."""


class NkiCapacityWarning(UserWarning):
    """Live on-chip tensors fit only with help: the compiler spills (``NkiSpillWarning``) or
    our packing fragments (``NkiFragmentationWarning``). Values stay exact either way."""


class NkiSpillWarning(NkiCapacityWarning):
    """More SBUF bytes are live than the target has, and the allocator in use spills (as
    neuronx-cc does): the named tensors go to an HBM scratch region between their uses, at the
    cost of the store and reload DMAs (recorded for the cost model, nki/jit/capacity.py)."""


class NkiFragmentationWarning(NkiCapacityWarning):
    """The live SBUF bytes fit, but our first-fit placement (and its fallback) could not pack
    the named tensors; a compiler with another packing may fit them, or may fail as ours did."""


class NkiUninitializedRegisterWarning(UserWarning):
    """A kernel read an engine accumulator (``reduce_cmd=reduce``, or ``reduce_res`` under
    ``reduce_cmd=idle``) or a ``nisa.register_alloc`` register before anything wrote it:
    undefined on hardware (stale state of an earlier kernel), 0 here. ``check_uninit=True``
    (``NKI_CHECK_UNINIT=1``) makes it an error; nki/sim/uninit.py tabulates every case."""


def fail(code: str, detail: str, loc: SourceLoc | None = None,
         cls: type[NkiError] = NkiValidationError) -> NkiError:
    """Build (not raise) an error; callers write ``raise fail(...)`` so tracebacks stay short."""
    if cls is NkiRuntimeError and code == "nki_runtime_out_of_bounds":
        cls = NkiIndexError
    return cls(code, detail, loc)
