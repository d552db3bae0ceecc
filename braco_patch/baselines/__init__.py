"""The paper's baselines as pure PyTorch modules (one per file; none imports ``llava``).

Where each sits (the table's placement column: ``before_projector``: tower features in, tower width out, then
``mlp2x_gelu``; ``replaces_projector``: tower features in, LLM width out; ``after_projector``: projected tokens in
and out); each class states its ``boundary`` as the paper's cost table labels it (``"pre"``/``"post"``), what it
``needs`` from the model besides the select-layer features (``attention``/``keys`` of that layer, multi-level
``levels``, the prompt's ``text`` states), and its ``output_tokens`` K. Analytic FLOPs: :mod:`.module_flops`.

=============  ==================  ========  ===============  ===========================  ================
module         placement           boundary  needs            K                            parameters
=============  ==================  ========  ===============  ===========================  ================
PruMerge(+)    before_projector    pre       attention, keys  K (fixed) or IQR-adaptive    none
DivPrune       after_projector     post      —                any K ≤ N                    none
MQTAbstractor  replaces_projector  pre¹      —                any K ≤ Q (one checkpoint)   queries, attn
QueCC          before_projector    pre       levels, text     (G/s)², s | G                MLPs, conv, attn
TokenPacker    replaces_projector  post      levels           (G/s)², s | G                MLPs, attn
FourierVLM     before_projector    pre       —                C², C ≤ G                    none
VisionZip      before_projector    pre       attention, keys  any K ≤ N (+ CLS)            none
VisPruner      before_projector    pre       attention        any K ≤ N                    none
CDPruner       after_projector     post      text², space³    any K ≤ N                    none
=============  ==================  ========  ===============  ===========================  ================

¹ MQT ends in the LLM's width like TokenPacker; the paper's table lists it pre-projector.
² The instruction, encoded by the tower's paired CLIP text encoder. ³ The patches in CLIP's image–text space.

VisionZip, VisPruner and CDPruner are not in the paper's comparison: they are the training-free methods most
compared against since (issue 32), each also runnable on any ``mlp2x_gelu`` checkpoint.
"""

from .cdpruner import CDPruner
from .divprune import DivPrune
from .fourier_vlm import FourierVLM
from .mqt import MQTAbstractor
from .prumerge import PruMerge
from .quecc import QueCC
from .tokenpacker import TokenPacker
from .visionzip import VisionZip
from .vispruner import VisPruner

__all__ = ["BASELINES", "CDPruner", "DivPrune", "FourierVLM", "MQTAbstractor", "PruMerge", "QueCC", "TokenPacker", "VisPruner", "VisionZip"]

#: Method name (as in the paper's tables) → module class.
BASELINES = {
    "prumerge": PruMerge,
    "divprune": DivPrune,
    "mqt": MQTAbstractor,
    "quecc": QueCC,
    "tokenpacker": TokenPacker,
    "fourier_vlm": FourierVLM,
    "visionzip": VisionZip,
    "vispruner": VisPruner,
    "cdpruner": CDPruner,
}
