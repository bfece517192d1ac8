"""Generated kernels: one C-like renderer (:mod:`.render`) with a ``cuda`` dialect (compiled by
NVRTC for the GPU) and a ``c`` dialect (compiled by the host C compiler), shared by the ``cuda``
backend and the host-compiled kernels."""
