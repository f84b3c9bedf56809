"""``neuronxcc``: the import root of AWS's legacy NKI dialect (``import neuronxcc.nki as nki``).

Thin re-exports only; the dialect lives in ``nki/legacy/``.
"""
