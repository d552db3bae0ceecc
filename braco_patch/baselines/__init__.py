"""The paper's baselines as pure PyTorch modules (one per file; none imports ``llava``).

Each class states its ``boundary`` (``"pre"``: between tower and projector; ``"post"``: it ends in the LLM's
width, i.e. it is or runs after the projector), what it ``needs`` from the model besides the select-layer
features (``attention``/``keys`` of that layer, multi-level ``levels``, the prompt's ``text`` states), and
its ``output_tokens`` K. Analytic FLOPs: :mod:`.cost`.

=============  ========  ===========================  ==================================  ==============
module         boundary  needs                        K                                   parameters
=============  ========  ===========================  ==================================  ==============
PruMerge(+)    pre       attention, keys              K (fixed) or IQR-adaptive           none
DivPrune       post      (projected tokens)           any K ≤ N                           none
MQTAbstractor  pre¹      —                            any K ≤ Q (one checkpoint)          queries, attn
QueCC          pre       levels, text                 (G/s)², s | G                       MLPs, conv, attn
TokenPacker    post      levels                       (G/s)², s | G                       MLPs, attn
FourierVLM     pre       —                            C², C ≤ G                           none
=============  ========  ===========================  ==================================  ==============

¹ MQT's output already has the LLM's width (it replaces the projector); the paper lists it pre-projector.
"""

from .divprune import DivPrune
from .fourier_vlm import FourierVLM
from .mqt import MQTAbstractor
from .prumerge import PruMerge
from .quecc import QueCC
from .tokenpacker import TokenPacker

__all__ = ["BASELINES", "DivPrune", "FourierVLM", "MQTAbstractor", "PruMerge", "QueCC", "TokenPacker"]

#: Method name (as in the paper's tables) → module class.
BASELINES = {
    "prumerge": PruMerge,
    "divprune": DivPrune,
    "mqt": MQTAbstractor,
    "quecc": QueCC,
    "tokenpacker": TokenPacker,
    "fourier_vlm": FourierVLM,
}
