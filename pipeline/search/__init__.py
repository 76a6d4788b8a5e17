"""Searching: the study loop (ask, run, record), trials and their runners (in-process, Dask), the Ax side, the
surrogate."""
