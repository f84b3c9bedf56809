"""``neuronxcc.nki.compiler`` (``ncc``): allocation and compiler directives."""

from nki.legacy.compiler import (
    allocation_scope,
    enable_stack_allocator,
    force_auto_alloc,
    multi_buffer,
    no_reorder,
    psum,
    sbuf,
    skip_middle_end_transformations,
)

__all__ = ["allocation_scope", "enable_stack_allocator", "force_auto_alloc", "multi_buffer",
           "no_reorder", "psum", "sbuf", "skip_middle_end_transformations"]
