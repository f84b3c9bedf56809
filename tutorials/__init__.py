"""Runnable NKI tutorials; see tutorials/README.md.

Each numbered module runs with ``python tutorials/NN_topic.py`` (from anywhere) or
``python -m tutorials.NN_topic`` (from the repository root), prints what it shows, checks its
own result against numpy/torch, and returns 0 from ``main()`` when the check passed.
"""
