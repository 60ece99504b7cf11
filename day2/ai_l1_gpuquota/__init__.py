"""The GPUQuota controller (seed 5.2): gpuquotas.ai.internal reconciled into a namespace
ResourceQuota and the active queueing backend's quota, with kopf (ai_l1_gpuquota.operator).

What a GPUQuota becomes is decided in one place, the collection's module_utils/gpu_queues.py,
shared with role gpu_queues; this package only applies it and reports it on the object.
"""

__version__ = "0.1.0"
