"""robust-tune's working parts: data, models, methods, the shared trainer and the study loop.

Nothing here prints; long work reports through a progress callback.
"""
